"""One YAML document → Python, as ``yaml.load(text, Loader=yaml.CSafeLoader)`` builds it, in half the time.

With libyaml the parser is C, but PyYAML's ``SafeConstructor`` still turns every node into its value in
Python, one generator per mapping, and resolves every plain scalar's tag with a list of regular expressions.
Loading 10,000 Alerts spent 1.2 s there (issue 17, start-up to Ready). Here:

* the tag of a scalar is resolved once per distinct (value, style) — manifests repeat the same keys and
  values thousands of times — by PyYAML's resolver behind a C ``lru_cache`` the caller owns (``Tags``, one
  per directory load: nothing is kept once the manifests are loaded), and the composer's per-node path
  resolver calls (no-ops in a safe loader) go to C no-ops;
* strings, nulls, and mappings and sequences with the standard tags whose keys are plain strings are built
  directly from the nodes;
* everything else — ints, floats, booleans, timestamps, binary, sets, ``<<`` merge keys, non-string keys,
  explicit tags — is built by PyYAML's ``SafeConstructor`` itself (``construct_object``), so the values,
  errors and messages are ``yaml.load``'s;
* a document that may hold anchors (an ``&`` anywhere in it) is built by PyYAML whole, so aliases give the
  same shared (or recursive) objects as with ``yaml.load``; without anchors the nodes form a tree.

Measured against ``yaml.load(text, Loader=yaml.CSafeLoader)`` (the cheapest honest way to do the same work;
PyYAML 6.0.4 with libyaml): 2,000 Alert manifests of 25 lines, 9 alternating rounds on the loaded 2-core
machine (issue 24), medians of two runs: 290 ms here against 792 ms, then 143 against 350 ms (2.7x, 2.5x).
``tests/unit/objects/test_yamldoc.py`` proves the results are ``yaml.load``'s (values, errors, anchors, the
pure-Python fallback).

What it leans on in PyYAML, none of it documented API: the C composer looks ``resolve``,
``descend_resolver`` and ``ascend_resolver`` up on the loader instance for every node, a safe loader has no
path resolvers (so ``resolve`` is a pure function and may be cached across documents), and the node classes
and ``construct_object(node, deep=True)`` keep their shape. ``tests/unit/test_dependency_internals.py``
asserts each of these directly: a PyYAML release that changes one fails there, naming this module.

One deliberate difference from ``yaml.load``: a plain ``=`` is the string ``"="``, as in Kubernetes' YAML
(Go, YAML 1.2), where PyYAML resolves it to YAML 1.1's ``value`` type, which a safe loader cannot build
("could not determine a constructor"). A Silence's ``matchType: =`` (issue 26), as ``kubectl`` takes it and
as ``kubectl kustomize`` writes it, must load in local mode too. Likewise a plain ``22:00`` is the string
``"22:00"`` (Go's YAML has no base-60 numbers; PyYAML reads it as the integer 1320): an Alert's
``muteTimes`` ``startTime: 22:00``, as Alertmanager's users write it, loads as ``kubectl`` takes it.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Any

import yaml
import yaml.resolver
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# libyaml's parser when PyYAML was built with it (10x the pure-Python one), else the pure-Python loader.
if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
VALUE_TAG = "tag:yaml.org,2002:value"
"""YAML 1.1's ``=``: a plain string to Kubernetes (see the module docstring)."""


class BaseLoader(_SafeLoader):
    """PyYAML's safe loader (libyaml's when built with it) reading a plain ``=`` as the string ``"="``."""


def _equals_sign(loader: BaseLoader, node: Node) -> str:
    return str(node.value)


BaseLoader.add_constructor(VALUE_TAG, _equals_sign)
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


def _number_or_sexagesimal(loader: BaseLoader, node: Node) -> Any:
    """YAML 1.1's base-60 numbers (``22:00``, ``1:30.5``) are strings, as in Go's YAML; other numbers
    are PyYAML's."""
    if not isinstance(node, ScalarNode):  # an explicit !!int on a collection: PyYAML's own error
        return loader.construct_scalar(node)  # type: ignore[arg-type]
    if ":" in node.value:
        return str(node.value)
    if node.tag == _INT:
        return loader.construct_yaml_int(node)
    return loader.construct_yaml_float(node)


BaseLoader.add_constructor(_INT, _number_or_sexagesimal)
BaseLoader.add_constructor(_FLOAT, _number_or_sexagesimal)
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


class Tags:
    """The scalar tags resolved while loading a set of documents: manifests repeat the same keys and values
    thousands of times. A loader's ``resolve`` is a pure function of its arguments (a safe loader has no
    path resolvers), so one cache serves every document; drop it with the load, it grows with the input."""

    def __init__(self) -> None:
        self.resolve: Any = functools.lru_cache(maxsize=None)(yaml.resolver.Resolver().resolve)


def load(text: str, tags: Tags | None = None) -> Any:
    """The document in ``text`` (None when empty); ``yaml.YAMLError`` as ``yaml.load`` raises it.

    ``tags``: resolved tags to share with the other documents of the same load."""
    loader: Any = BaseLoader(text)
    # The composer calls these three for every node: C callables instead of Python methods, same results.
    loader.resolve = (tags or Tags()).resolve
    # Path resolvers (none in a safe loader): descend(parent, index) and ascend() do nothing; is_ and tuple
    # take those arguments, return without side effects, and their results are ignored.
    loader.descend_resolver = operator.is_
    loader.ascend_resolver = tuple
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "&" in text:  # maybe anchors: PyYAML shares (and may nest) aliased objects, let it build them
            return loader.construct_document(node)
        return _build(loader, node)
    finally:
        loader.dispose()


def _build(loader: Any, node: Node) -> Any:
    """``node`` built; without anchors the nodes form a tree, so every node is built once. String values
    (most of a manifest) are taken inline, without a call each."""
    kind, tag = type(node), node.tag
    if kind is ScalarNode:
        if tag == _STR:
            return node.value
        if tag == _NULL:
            return None
        if tag == VALUE_TAG:
            return node.value
    elif kind is MappingNode:
        if tag == _MAP:
            built: dict[Any, Any] = {}
            for key, value in node.value:
                if type(key) is not ScalarNode or key.tag != _STR:  # merge key, non-string key: PyYAML's
                    return loader.construct_object(node, deep=True)
                built[key.value] = (
                    value.value if type(value) is ScalarNode and value.tag == _STR else _build(loader, value)
                )
            return built
    elif kind is SequenceNode and tag == _SEQ:
        return [
            item.value if type(item) is ScalarNode and item.tag == _STR else _build(loader, item)
            for item in node.value
        ]
    # ints, floats, booleans, timestamps, merge keys, non-string keys, sets, explicit or unknown tags
    return loader.construct_object(node, deep=True)
