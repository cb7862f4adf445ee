"""What our home-made pieces assume about the libraries under them, asserted directly (issue 24 item 5).

Each home-made piece leans on behaviour its library does not document, or documents only in passing. A
version bump that changes one of them fails HERE, naming the piece that breaks, instead of somewhere
downstream as a wrong status code, a slower start or a lost shared object:

* ``server/http1.py`` on httptools (llhttp): a header arrives whole (concatenated across reads), an
  exception raised in a callback comes back wrapped with the original as ``__context__``, an Upgrade stops
  the parser after a completed message, strict framing, ``feed_data`` takes a memoryview;
* ``objects/yamldoc.py`` on PyYAML's C loader: the C composer looks ``resolve`` and the path-resolver hooks
  up on the instance (so replacing them there takes effect), a safe loader has no path resolvers, and the
  node classes and ``construct_object`` it hands work back to;
* ``kube/library.py`` on kubernetes_asyncio's module layout: which submodules hold what it imports, and
  the two names ``config/`` takes from ``kubernetes_asyncio.client`` (the behaviour is tested in
  ``test_lazy_imports.py``);
* ``core/cel/`` on the Rust ``cel`` extension: its file beside the package, receiver-style calls to Python
  functions, native functions first, and the exception types and texts ``Expression._describe`` maps;
* ``api/common.py``'s fields-set sharing on pydantic: where the fields-set lives, that ``model_fields_set``
  returns it, and that pydantic copies it before changing it.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any

import httptools
import pytest
import yaml
import yaml.resolver
from pydantic import BaseModel, ConfigDict
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from notification_controller.api.common import share_fields_sets, with_fields
from notification_controller.core.cel import _loader
from notification_controller.kube import library
from notification_controller.objects import yamldoc

_cel: Any = _loader._load_extension()  # the module core/cel uses (cached: loaded once per process)

# ---------------------------------------------------------------------------------------------------------
# httptools (llhttp) — server/http1.py
# ---------------------------------------------------------------------------------------------------------


class _Recorder:
    """The callbacks ``server/http1.Connection`` implements, recording what llhttp hands over."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.complete = 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete += 1


def test_llhttp_hands_over_a_header_whole_however_it_was_split() -> None:
    # http1.py bounds a head's unfinished line from the raw bytes BECAUSE the binding holds a header back
    # until it is complete (issue 23 item 2); were it to hand over fragments, the per-header size check in
    # on_header would see only fragments and the head bounds would need revisiting.
    recorder = _Recorder()
    parser = httptools.HttpRequestParser(recorder)
    pieces = [b"POST /hook?x=1 HTTP/1.1\r\nHo", b"st: exa", b"mple\r\nX-Long: ", b"a" * 300, b"b" * 300]
    for piece in [*pieces, b"\r\nContent-Length: 2\r\n\r\n{}"]:
        parser.feed_data(memoryview(piece))  # http1.py feeds memoryview slices of a large read
    assert recorder.headers == [
        (b"Host", b"example"),
        (b"X-Long", b"a" * 300 + b"b" * 300),
        (b"Content-Length", b"2"),
    ], "httptools no longer delivers a header whole: revisit server/http1.py's head bounds"
    assert recorder.url == b"/hook?x=1" and recorder.body == [b"{}"] and recorder.complete == 1
    assert parser.get_http_version() == "1.1" and parser.should_keep_alive() is True
    assert parser.get_method() == b"POST"
    assert httptools.parse_url(recorder.url).path == b"/hook"


def test_llhttp_wraps_a_callback_exception_with_it_as_context() -> None:
    # http1.py raises _ParseLimit(431/413/414) inside callbacks and reads the status back from __context__.
    class Limit(Exception):
        pass

    class Refusing(_Recorder):
        def on_header(self, name: bytes, value: bytes) -> None:
            raise Limit(431)

    with pytest.raises(httptools.HttpParserError) as info:
        httptools.HttpRequestParser(Refusing()).feed_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert isinstance(info.value.__context__, Limit), (
        "httptools no longer chains a callback's exception as __context__: server/http1.py's _parse "
        "would answer 400 instead of 431/413/414"
    )


def test_llhttp_stops_after_an_upgrade_request_whose_message_it_completed() -> None:
    # http1.py catches HttpParserUpgrade on its own (it is not an HttpParserError) and pops the completed
    # request to refuse it.
    recorder = _Recorder()
    with pytest.raises(httptools.HttpParserUpgrade):
        httptools.HttpRequestParser(recorder).feed_data(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nnot http"
        )
    assert recorder.complete == 1, "llhttp no longer completes the message before signalling an upgrade"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",  # obsolete line folding
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET / HTTP/1.1\r\nBad Name: a\r\n\r\n",
    ],
    ids=["obs-fold", "cl-and-te", "two-cl", "bad-name"],
)
def test_llhttp_is_strict_about_framing(request_bytes: bytes) -> None:
    # http1.py does not check these itself: llhttp's strict mode answers them (400 and close).
    with pytest.raises(httptools.HttpParserError):
        httptools.HttpRequestParser(_Recorder()).feed_data(request_bytes)


# ---------------------------------------------------------------------------------------------------------
# PyYAML's C loader — objects/yamldoc.py
# ---------------------------------------------------------------------------------------------------------


def test_pyyaml_is_built_with_libyaml() -> None:
    assert hasattr(yaml, "CSafeLoader"), "PyYAML without libyaml: yamldoc falls back to the 10x slower parser"
    base: Any = yamldoc.BaseLoader
    assert base.__bases__ == (yaml.CSafeLoader,)


def test_the_c_composer_calls_the_instance_hooks_yamldoc_replaces() -> None:
    # yamldoc.load replaces resolve, descend_resolver and ascend_resolver ON THE INSTANCE: the C composer
    # must look them up there (an attribute lookup per node), with these arguments.
    calls: dict[str, list[tuple[Any, ...]]] = {"resolve": [], "descend": [], "ascend": []}
    resolver: Any = yaml.resolver.Resolver()

    def resolve(kind: type, value: Any, implicit: Any) -> str:
        calls["resolve"].append((kind, value, implicit))
        tag: str = resolver.resolve(kind, value, implicit)
        return tag

    loader: Any = yaml.CSafeLoader("a: [1, x]\nb: {c: null}\n")
    loader.resolve = resolve
    loader.descend_resolver = lambda parent, index: calls["descend"].append((parent, index))
    loader.ascend_resolver = lambda: calls["ascend"].append(())
    try:
        node = loader.get_single_node()
        assert isinstance(node, MappingNode)
        assert loader.construct_document(node) == {"a": [1, "x"], "b": {"c": None}}
    finally:
        loader.dispose()
    kinds = {kind for kind, _, _ in calls["resolve"]}
    assert kinds == {ScalarNode, SequenceNode, MappingNode}, "the C composer no longer calls self.resolve"
    assert calls["descend"] and len(calls["descend"]) == len(calls["ascend"]), (
        "the C composer no longer calls descend_resolver(parent, index) / ascend_resolver(): "
        "yamldoc's C no-op replacements (operator.is_, tuple) may now be wrong"
    )


def test_a_safe_loader_has_no_path_resolvers_and_resolve_is_pure() -> None:
    # yamldoc caches Resolver.resolve per (kind, value, implicit) across documents: only valid while no path
    # resolver (the one input resolve reads besides its arguments) is registered on the safe loader.
    assert not yaml.SafeLoader.yaml_path_resolvers and not yaml.CSafeLoader.yaml_path_resolvers
    resolve: Any = yaml.resolver.Resolver().resolve
    assert resolve(ScalarNode, "yes", (True, False)) == "tag:yaml.org,2002:bool"
    assert resolve(ScalarNode, "1", (True, False)) == "tag:yaml.org,2002:int"
    assert resolve(ScalarNode, "x", (True, False)) == "tag:yaml.org,2002:str"
    assert resolve(ScalarNode, "1", (False, True)) == "tag:yaml.org,2002:str"  # quoted
    assert resolve(MappingNode, None, (True, False)) == "tag:yaml.org,2002:map"
    assert resolve(SequenceNode, None, (True, False)) == "tag:yaml.org,2002:seq"


def test_the_nodes_yamldoc_builds_from_have_the_shape_it_reads() -> None:
    loader: Any = yaml.CSafeLoader("k: v\nl: [a]\n")
    try:
        node = loader.get_single_node()
        key, _ = node.value[0]  # a mapping's value: a list of (key node, value node) pairs
        assert type(key) is ScalarNode and key.tag == "tag:yaml.org,2002:str" and key.value == "k"
        assert type(node.value[1][1]) is SequenceNode
        assert loader.construct_object(node, deep=True) == {"k": "v", "l": ["a"]}
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------------------
# kubernetes_asyncio's layout — kube/library.py
# ---------------------------------------------------------------------------------------------------------


def test_the_deferred_packages_are_packages() -> None:
    for name in library.DEFERRED:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations is not None, name


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("kubernetes_asyncio.client.api_client", ["ApiClient"]),
        ("kubernetes_asyncio.client.configuration", ["Configuration"]),
        ("kubernetes_asyncio.client.exceptions", ["ApiException", "OpenApiException"]),
        ("kubernetes_asyncio.config", ["load_kube_config", "load_incluster_config"]),
        ("kubernetes_asyncio.config.config_exception", ["ConfigException"]),
    ],
)
def test_the_submodules_library_imports_hold_what_it_takes(module: str, names: list[str]) -> None:
    loaded = importlib.import_module(module)
    for name in names:
        assert hasattr(loaded, name), f"kube/library.py imports {name} from {module}: it moved"


def _names_taken_from_client(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "kubernetes_asyncio.client"
        for alias in node.names
    }


def test_config_takes_only_apiclient_and_configuration_from_the_client_package() -> None:
    # library.load() sets these two on the deferred kubernetes_asyncio.client so that config/ imports them
    # without running the client's __init__ (~850 modules). A third name would run it.
    spec = importlib.util.find_spec("kubernetes_asyncio.config")
    assert spec is not None and spec.submodule_search_locations is not None
    folder = Path(next(iter(spec.submodule_search_locations)))
    taken: set[str] = set()
    for path in folder.glob("*.py"):
        if not path.name.endswith("_test.py"):
            taken |= _names_taken_from_client(path)
    assert taken <= {"ApiClient", "Configuration"}, taken


def test_apiclient_looks_models_up_by_attribute_of_the_models_package() -> None:
    # A deferred package completes itself on the first attribute it lacks: ApiClient must keep finding
    # models as attributes of kubernetes_asyncio.client.models (not through a registry filled at import).
    source = inspect.getsource(importlib.import_module("kubernetes_asyncio.client.api_client"))
    assert "getattr(kubernetes_asyncio.client.models, klass)" in source


# ---------------------------------------------------------------------------------------------------------
# the Rust ``cel`` extension — core/cel/
# ---------------------------------------------------------------------------------------------------------


def _run(
    source: str, variables: dict[str, Any] | None = None, functions: dict[str, Any] | None = None
) -> Any:
    return _cel.compile(source).execute(_cel.Context(variables or {}, functions or {}))


def test_the_extension_module_sits_beside_the_package_as_the_loader_expects() -> None:
    # core/cel/_loader.py loads cel/cel<suffix> alone (the package's __init__ imports a REPL and
    # prompt_toolkit); a different layout would fall back to the full package.
    spec = importlib.util.find_spec("cel")
    assert spec is not None and spec.submodule_search_locations is not None
    found = [
        os.path.join(location, "cel" + suffix)
        for location in spec.submodule_search_locations
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if os.path.exists(os.path.join(location, "cel" + suffix))
    ]
    assert found, "the cel wheel's layout changed: core/cel/_loader.py imports the whole package"
    assert _cel.__name__ == "cel.cel"
    for name in ("compile", "Context", "Program"):
        assert hasattr(_cel, name), name


def test_receiver_style_calls_reach_python_functions_native_ones_first() -> None:
    calls: list[tuple[Any, ...]] = []

    def probe(*args: Any) -> str:
        calls.append(args)
        return "ok"

    def shadow(*args: Any) -> int:
        raise AssertionError("a Python function shadowed a native one")

    # core/cel/functions.py registers the cel-go extensions as plain functions: x.f(a) must be f(x, a)
    assert _run("'a-b'.nc_probe(1)", functions={"nc_probe": probe}) == "ok"
    assert calls == [("a-b", 1)]
    # ... and a native overload must still win over a registered Python function of the same name
    assert _run("'abc'.size()", functions={"size": shadow}) == 3


@pytest.mark.parametrize(
    ("source", "variables", "kind", "text"),
    [
        ("x.y", {}, RuntimeError, r"Undefined variable or function: 'x'"),
        ("m['k']", {"m": {}}, KeyError, r"'k'"),
        ("l[3]", {"l": [1]}, IndexError, None),
        ("x / 0", {"x": 1}, ZeroDivisionError, r"division"),
        ("x % 0", {"x": 1}, ZeroDivisionError, r"modulo"),
        ("x * 9223372036854775807", {"x": 3}, OverflowError, None),
        ("optional.none().value()", {}, RuntimeError, r"optional.none\(\) dereference"),
    ],
)
def test_library_failures_have_the_types_and_texts_describe_maps(
    source: str, variables: dict[str, Any], kind: type[BaseException], text: str | None
) -> None:
    # core/cel/environment.Expression._describe turns these into fixed, value-free texts; a changed type or
    # message would fall through to "evaluation failed" (or worse, to a text that quotes a value).
    with pytest.raises(kind, match=text):
        _run(source, variables)


def test_a_failing_python_function_is_reported_by_name() -> None:
    def failing(*args: Any) -> Any:
        raise ValueError("fixed")

    with pytest.raises(RuntimeError, match=r"^Function 'nc_fail' error"):
        _run("nc_fail(1)", functions={"nc_fail": failing})


def test_a_syntax_error_carries_the_cel_go_style_error_text() -> None:
    # environment._library_compile keeps the text from "ERROR:" on (cel-go's <input>:line:col format)
    with pytest.raises(Exception, match=r"ERROR: <input>:1:4: "):
        _cel.compile("1 +")


# ---------------------------------------------------------------------------------------------------------
# pydantic's fields-set — api/common.py share_fields_sets / with_fields
# ---------------------------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)

    a: int = 0
    b: int = 0


def test_the_fields_set_is_one_set_object_per_instance_in_a_slot() -> None:
    model = _Frozen(a=1)
    assert "__pydantic_fields_set__" in BaseModel.__slots__
    assert type(model.__pydantic_fields_set__) is set
    assert model.model_fields_set is model.__pydantic_fields_set__, (
        "model_fields_set no longer returns the stored set: share_fields_sets may be sharing a copy"
    )


def test_a_frozen_model_takes_a_shared_set_and_pydantic_reads_it() -> None:
    first, second = _Frozen(a=1), _Frozen(a=2)
    object.__setattr__(second, "__pydantic_fields_set__", first.__pydantic_fields_set__)
    assert second.model_fields_set is first.model_fields_set
    assert second.model_dump(exclude_unset=True) == {"a": 2}
    assert second == _Frozen(a=2, b=0) and second == _Frozen(a=2), "equality must ignore the fields-set"


def test_pydantic_copies_the_set_before_changing_it() -> None:
    # the one assumption that makes sharing safe: nothing mutates a frozen model's fields-set in place
    shared = share_fields_sets(_Frozen(a=1))
    other = share_fields_sets(_Frozen(a=5))
    assert other.__pydantic_fields_set__ is shared.__pydantic_fields_set__
    before = set(shared.__pydantic_fields_set__)
    updated = shared.model_copy(update={"b": 3})
    assert updated.model_fields_set == {"a", "b"}
    assert shared.model_fields_set == before and other.model_fields_set == before, (
        "model_copy(update=...) changed the source's fields-set in place: sharing it is no longer safe"
    )
    assert updated.__pydantic_fields_set__ is not shared.__pydantic_fields_set__
    assert with_fields(shared, b=4).model_fields_set == {"a", "b"}
    assert shared.model_copy().__pydantic_fields_set__ is not shared.__pydantic_fields_set__
    restored = copy.deepcopy(shared)
    assert restored.model_fields_set == before
    assert restored.__pydantic_fields_set__ is not shared.__pydantic_fields_set__
