"""The compile-time checks cel-go performs and the Rust library lacks: a type checker over the AST
(undeclared references, unknown functions, non-homogeneous literals, impossible overloads, output type),
the function signature tables, and a conservative fallback when our parser disagrees with the library's."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, NoReturn

from .parser import (
    _RESERVED,
    _Call,
    _Chain,
    _Conditional,
    _Ident,
    _ListLit,
    _Literal,
    _MapLit,
    _Member,
    _Message,
    _Node,
    _Step,
    _Unary,
)
from .values import (
    _BOOL,
    _BYTES,
    _DOUBLE,
    _DURATION,
    _DYN,
    _INT,
    _NULL,
    _NUMERIC,
    _ORDERED,
    _STRING,
    _STRUCT,
    _TIMESTAMP,
    _TYPE,
    _UINT,
    _UNKNOWN,
    CELCompileError,
    _compatible,
    _is_any,
    _join_types,
    _list_of,
    _optional_of,
    _Type,
)

if TYPE_CHECKING:
    import cel as _cel
else:
    from ._loader import _cel


# ---------------------------------------------------------------------------------------------------------
# Type checker
# ---------------------------------------------------------------------------------------------------------

# member functions: name -> (arities, receiver kinds (None: any), result(receiver, args))
_ResultFn = Callable[[_Type, list[_Type]], _Type]


def _const(t: _Type) -> _ResultFn:
    return lambda _recv, _args: t


def _param(recv: _Type, _args: list[_Type]) -> _Type:
    if recv.kind in ("list", "optional_type"):
        return recv.params[0]
    return _DYN if recv.kind == "dyn" else _UNKNOWN


def _optional_elem(recv: _Type, args: list[_Type]) -> _Type:
    return _optional_of(_param(recv, args))


def _or_value(recv: _Type, args: list[_Type]) -> _Type:
    inner = _param(recv, args)
    return inner if not _is_any(inner) and inner == args[0] else _UNKNOWN


_TIME_ACCESSORS: Final = (
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
)
_STR: Final = frozenset({"string"})
_MEMBER_FUNCTIONS: Final[dict[str, tuple[frozenset[int], frozenset[str] | None, _ResultFn]]] = {
    "size": (frozenset({0}), frozenset({"string", "bytes", "list", "map"}), _const(_INT)),
    "contains": (frozenset({1}), _STR, _const(_BOOL)),
    "startsWith": (frozenset({1}), _STR, _const(_BOOL)),
    "endsWith": (frozenset({1}), _STR, _const(_BOOL)),
    "matches": (frozenset({1}), _STR, _const(_BOOL)),
    "charAt": (frozenset({1}), _STR, _const(_STRING)),
    "indexOf": (frozenset({1, 2}), _STR, _const(_INT)),
    "lastIndexOf": (frozenset({1, 2}), _STR, _const(_INT)),
    "lowerAscii": (frozenset({0}), _STR, _const(_STRING)),
    "upperAscii": (frozenset({0}), _STR, _const(_STRING)),
    "trim": (frozenset({0}), _STR, _const(_STRING)),
    "reverse": (frozenset({0}), _STR, _const(_STRING)),
    "replace": (frozenset({2, 3}), _STR, _const(_STRING)),
    "split": (frozenset({1, 2}), _STR, _const(_list_of(_STRING))),
    "substring": (frozenset({1, 2}), _STR, _const(_STRING)),
    "format": (frozenset({1}), _STR, _const(_STRING)),
    "join": (frozenset({0, 1}), frozenset({"list"}), _const(_STRING)),
    "first": (frozenset({0}), frozenset({"list"}), _optional_elem),
    "last": (frozenset({0}), frozenset({"list"}), _optional_elem),
    "hasValue": (frozenset({0}), frozenset({"optional_type"}), _const(_BOOL)),
    "value": (frozenset({0}), frozenset({"optional_type"}), _param),
    "or": (frozenset({1}), frozenset({"optional_type"}), lambda recv, _args: recv),
    "orValue": (frozenset({1}), frozenset({"optional_type"}), _or_value),
    **{
        name: (frozenset({0, 1}), frozenset({"timestamp", "duration"}), _const(_INT))
        for name in _TIME_ACCESSORS
    },
}
# global functions: name -> (arities, kinds accepted by the first argument (None: any), result(args))
_GLOBAL_FUNCTIONS: Final[
    dict[str, tuple[frozenset[int], frozenset[str] | None, Callable[[list[_Type]], _Type]]]
] = {
    "size": (frozenset({1}), frozenset({"string", "bytes", "list", "map"}), lambda _a: _INT),
    "matches": (frozenset({2}), _STR, lambda _a: _BOOL),
    "int": (frozenset({1}), None, lambda _a: _INT),
    "uint": (frozenset({1}), None, lambda _a: _UINT),
    "double": (frozenset({1}), None, lambda _a: _DOUBLE),
    "string": (frozenset({1}), None, lambda _a: _STRING),
    "bytes": (frozenset({1}), None, lambda _a: _BYTES),
    "bool": (frozenset({1}), None, lambda _a: _BOOL),
    "dyn": (frozenset({1}), None, lambda _a: _DYN),
    "type": (frozenset({1}), None, lambda _a: _TYPE),
    "timestamp": (frozenset({1}), None, lambda _a: _TIMESTAMP),
    "duration": (frozenset({1}), None, lambda _a: _DURATION),
    "sets.contains": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "sets.equivalent": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "sets.intersects": (frozenset({2}), frozenset({"list"}), lambda _a: _BOOL),
    "base64.encode": (frozenset({1}), frozenset({"bytes"}), lambda _a: _STRING),
    "base64.decode": (frozenset({1}), _STR, lambda _a: _BYTES),
    "optional.of": (frozenset({1}), None, lambda a: _optional_of(a[0])),
    "optional.ofNonZeroValue": (frozenset({1}), None, lambda a: _optional_of(a[0])),
    "optional.none": (frozenset({0}), None, lambda _a: _optional_of(_DYN)),
    "strings.quote": (frozenset({1}), _STR, lambda _a: _STRING),
}
_NAMESPACES: Final = frozenset(name.split(".")[0] for name in _GLOBAL_FUNCTIONS if "." in name)
_TYPE_NAMES: Final = frozenset(
    {"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"}
)
_MACROS: Final = {"all": (2,), "exists": (2,), "exists_one": (2,), "map": (2, 3), "filter": (2,)}
_UNSUPPORTED: Final = frozenset({"optMap", "optFlatMap"})
_GROWING: Final = frozenset(
    {"replace", "join", "split", "format", "strings.quote", "base64.encode", "base64.decode"}
)
"""Functions whose result may be larger than their receiver, or cost more than a scan of it (the
bounded implementations are in ``functions.py``)."""
# the kinds each argument (after the receiver, for member functions) may have; absent: not checked
_S: Final = frozenset({"string"})
_I: Final = frozenset({"int"})
_L: Final = frozenset({"list"})
_ARGUMENT_KINDS: Final[dict[str, tuple[frozenset[str], ...]]] = {
    "contains": (_S,),
    "startsWith": (_S,),
    "endsWith": (_S,),
    "matches": (_S,),
    "charAt": (_I,),
    "indexOf": (_S, _I),
    "lastIndexOf": (_S, _I),
    "replace": (_S, _S, _I),
    "split": (_S, _I),
    "substring": (_I, _I),
    "join": (_S,),
    "format": (_L,),
    "global:matches": (_S, _S),
    "global:sets.contains": (_L, _L),
    "global:sets.equivalent": (_L, _L),
    "global:sets.intersects": (_L, _L),
}


def _arguments_fit(key: str, args: Sequence[_Type]) -> bool:
    kinds = _ARGUMENT_KINDS.get(key, ())
    return all(_is_any(t) or t.kind in allowed for t, allowed in zip(args, kinds, strict=False))


_OPERATOR_NAMES: Final = {
    "||": "_||_",
    "&&": "_&&_",
    "in": "@in",
    "==": "_==_",
    "!=": "_!=_",
    "<": "_<_",
    "<=": "_<=_",
    ">": "_>_",
    ">=": "_>=_",
    "+": "_+_",
    "-": "_-_",
    "*": "_*_",
    "/": "_/_",
    "%": "_%_",
}


@dataclass(slots=True)
class _Analysis:
    output: _Type = _UNKNOWN
    comprehension_depth: int = 0
    dynamic_index: bool = False
    literal_keys: set[str] = field(default_factory=set)
    literal_list_size: int = 0
    grows: bool = False
    """A call that builds a value larger than its inputs (``_GROWING``) or a ``+`` that is not certainly
    numeric: with a comprehension, what keeps an expression off the in-process fast path."""


# The Flux event's declared fields (``api.event.Event.as_cel``): a field not listed is a compile error
# ("undefined field"), as for a typed message in cel-go, instead of a ``no such key`` on every event (issue 25
# item 4). Only the variable ``event`` is typed; every other variable stays a ``map(string, dyn)``. A nested
# mapping is a typed object too; ``_DYN`` marks a field whose value may be null (a zero timestamp).
_SchemaType = _Type | Mapping[str, "_SchemaType"]
_OBJECT_REFERENCE: Final[Mapping[str, _SchemaType]] = {
    "kind": _STRING,
    "namespace": _STRING,
    "name": _STRING,
    "uid": _STRING,
    "apiVersion": _STRING,
    "resourceVersion": _STRING,
    "fieldPath": _STRING,
}
EVENT_FIELDS: Final[Mapping[str, _SchemaType]] = {
    "involvedObject": _OBJECT_REFERENCE,
    "severity": _STRING,
    "timestamp": _DYN,
    "message": _STRING,
    "reason": _STRING,
    "metadata": _STRUCT,  # string values in a Flux event; dyn as before, the result is checked when evaluated
    "reportingController": _STRING,
    "reportingInstance": _STRING,
}
_SCHEMAS: Final[Mapping[str, Mapping[str, _SchemaType]]] = {"event": EVENT_FIELDS}


class _Checker:
    def __init__(self, source: str, declared: frozenset[str]) -> None:
        self._source = source
        self._declared = declared
        self.analysis = _Analysis()

    # -- errors --
    def _error(self, pos: int, message: str) -> NoReturn:
        raise CELCompileError(_compile_message(self._source, pos, message))

    def _no_overload(
        self, pos: int, name: str, types: Sequence[_Type], receiver: _Type | None = None
    ) -> NoReturn:
        args = ", ".join(str(t) for t in types)
        applied = f"{receiver}.({args})" if receiver is not None else f"({args})"
        self._error(pos, f"found no matching overload for '{name}' applied to '{applied}'")

    # -- entry point --
    def check(self, node: _Node) -> _Analysis:
        self.analysis.output = self._check(node, {}, 0)
        return self.analysis

    def _check(self, node: _Node, scope: Mapping[str, _Type], depth: int) -> _Type:
        if isinstance(node, _Literal):
            if node.type == _STRING:
                self.analysis.literal_keys.add(node.value)
            return node.type
        if isinstance(node, _Ident):
            return self._ident(node, scope)
        if isinstance(node, _Call):
            return self._global_call(node, scope, depth)
        if isinstance(node, _Member):
            return self._member(node, scope, depth, test_only=False)
        if isinstance(node, _ListLit):
            return self._list(node, scope, depth, homogeneous=True)
        if isinstance(node, _MapLit):
            self.analysis.literal_list_size = max(self.analysis.literal_list_size, len(node.entries))
            keys = [self._check(k, scope, depth) for k, _ in node.entries]
            values = [self._check(v, scope, depth) for _, v in node.entries]
            self._homogeneous([k for k, _ in node.entries], keys)
            self._homogeneous([v for _, v in node.entries], values)
            if not node.entries:
                return _Type("map", (_DYN, _DYN))
            return _Type("map", (_join_types(keys), _join_types(values)))
        if isinstance(node, _Message):
            self._error(node.pos, f"undeclared reference to '{node.name}' (in container '')")
        if isinstance(node, _Unary):
            return self._unary(node, scope, depth)
        if isinstance(node, _Chain):
            return self._chain(node, scope, depth)
        if isinstance(node, _Conditional):
            return self._conditional(node, scope, depth)
        raise AssertionError(f"unexpected node {type(node).__name__}")  # pragma: no cover

    def _list(self, node: _ListLit, scope: Mapping[str, _Type], depth: int, *, homogeneous: bool) -> _Type:
        self.analysis.literal_list_size = max(self.analysis.literal_list_size, len(node.elements))
        elements = [self._check(e, scope, depth) for e in node.elements]
        if homogeneous:
            self._homogeneous(node.elements, elements)
            return _list_of(_join_types(elements))
        if elements and all(t == elements[0] for t in elements):
            return _list_of(elements[0])
        return _list_of(_DYN)

    def _homogeneous(self, nodes: Sequence[_Node], types: Sequence[_Type]) -> None:
        expected: _Type | None = None
        for node, t in zip(nodes, types, strict=True):
            if _is_any(t) or t == _NULL:
                continue
            if expected is None:
                expected = t
            elif not _compatible(expected, t, numeric=False):
                self._error(node.pos, f"expected type '{expected}' but found '{t}'")

    def _ident(self, node: _Ident, scope: Mapping[str, _Type]) -> _Type:
        if node.leading_dot:
            self._error(node.pos, "leading '.' (root-scoped) identifiers are not supported")
        if node.name in _RESERVED:
            self._error(node.pos, f"reserved identifier: {node.name}")
        if node.name in scope:
            return scope[node.name]
        if node.name in self._declared:
            return _STRUCT
        if node.name in _TYPE_NAMES:
            return _TYPE
        self._error(node.pos, f"undeclared reference to '{node.name}' (in container '')")

    def _global_call(self, node: _Call, scope: Mapping[str, _Type], depth: int) -> _Type:
        if node.leading_dot:
            self._error(node.pos, "leading '.' (root-scoped) identifiers are not supported")
        if node.name == "has":
            arg = node.args[0] if len(node.args) == 1 else None
            if not isinstance(arg, _Member) or arg.steps[-1].kind != "select":
                self._error(node.pos, "invalid argument to has() macro")
            self._member(arg, scope, depth, test_only=True)
            return _BOOL
        args = [self._check(a, scope, depth) for a in node.args]
        return self._apply_global(node.pos, node.name, args)

    def _apply_global(self, pos: int, name: str, args: list[_Type]) -> _Type:
        if name in _GROWING:
            self.analysis.grows = True
        spec = _GLOBAL_FUNCTIONS.get(name)
        if spec is None:
            if name in _MEMBER_FUNCTIONS or name in _MACROS:
                self._no_overload(pos, name, args)
            self._error(pos, f"undeclared reference to '{name}' (in container '')")
        arities, kinds, result = spec
        if len(args) not in arities:
            self._no_overload(pos, name, args)
        if kinds is not None and not _is_any(args[0]) and args[0].kind not in kinds:
            self._no_overload(pos, name, args)
        if not _arguments_fit(f"global:{name}", args):
            self._no_overload(pos, name, args)
        return result(args)

    def _member(self, node: _Member, scope: Mapping[str, _Type], depth: int, *, test_only: bool) -> _Type:
        steps = node.steps
        operand = node.operand
        first = steps[0]
        if (
            isinstance(operand, _Ident)
            and not operand.leading_dot
            and operand.name not in scope
            and operand.name not in self._declared
            and first.kind == "call"
            and (f"{operand.name}.{first.name}" in _GLOBAL_FUNCTIONS or operand.name in _NAMESPACES)
        ):
            qualified = f"{operand.name}.{first.name}"
            args = [self._check(a, scope, depth) for a in first.args]
            current = self._apply_global(first.pos, qualified, args)
            steps = steps[1:]
        else:
            current = self._check(operand, scope, depth)
            if (
                isinstance(operand, _Ident)
                and operand.name in _SCHEMAS
                and operand.name not in scope
                and operand.name in self._declared
            ):
                current, steps = self._typed_fields(_SCHEMAS[operand.name], steps, test_only=test_only)
                if not steps and test_only:
                    return _BOOL
        for index, step in enumerate(steps):
            last = index == len(steps) - 1
            if step.kind == "select":
                if last and test_only:
                    self._selectable(step, current)
                    return _BOOL
                self.analysis.literal_keys.add(step.name)
                current = self._selectable(step, current)
            elif step.kind == "index":
                current = self._index(step, current, scope, depth)
            else:
                current = self._method(step, current, scope, depth)
        return current

    def _typed_fields(
        self, schema: Mapping[str, _SchemaType], steps: Sequence[_Step], *, test_only: bool
    ) -> tuple[_Type, list[_Step]]:
        """The leading field selections of a typed variable: an unknown field is an error; the type of the
        last one selected (a nested object is a ``map(string, dyn)`` once left) and the steps left."""
        fields: _SchemaType = schema
        taken = 0
        for step in steps:
            if step.kind != "select" or isinstance(fields, _Type):
                break
            selected = fields.get(step.name)
            if selected is None:
                close = difflib.get_close_matches(step.name, list(fields), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self._error(step.pos, f"undefined field '{step.name}'{hint}")
            self.analysis.literal_keys.add(step.name)
            fields, taken = selected, taken + 1
        current = fields if isinstance(fields, _Type) else _STRUCT
        return current, list(steps[taken:])

    def _selectable(self, step: _Step, operand: _Type) -> _Type:
        if operand.kind == "map":
            return operand.params[1]
        if operand.kind == "dyn":
            return _DYN
        if operand.kind in ("unknown", "optional_type"):
            return _UNKNOWN
        self._error(step.pos, f"type '{operand}' does not support field selection")

    def _index(self, step: _Step, operand: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        key_node = step.args[0]
        key = self._check(key_node, scope, depth)
        if isinstance(key_node, _Literal):
            if key_node.type == _STRING:
                self.analysis.literal_keys.add(key_node.value)
        else:
            self.analysis.dynamic_index = True
        if operand.kind == "list":
            if not _is_any(key) and key.kind not in ("int", "uint", "double"):
                self._no_overload(step.pos, "_[_]", [operand, key])
            return operand.params[0]
        if operand.kind == "map":
            return operand.params[1]
        if operand.kind == "dyn":
            return _DYN
        if operand.kind in ("unknown", "optional_type"):
            return _UNKNOWN
        self._no_overload(step.pos, "_[_]", [operand, key])

    def _method(self, step: _Step, receiver: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        if step.name in _MACROS and len(step.args) in _MACROS[step.name]:
            return self._macro(step, receiver, scope, depth)
        if step.name in _UNSUPPORTED:
            self._error(step.pos, f"the '{step.name}' macro is not supported by this implementation")
        if step.name in _GROWING:
            self.analysis.grows = True
        args = [
            # cel-go exempts the argument list of format() from the homogeneous-literal rule
            self._list(a, scope, depth, homogeneous=False)
            if step.name == "format" and isinstance(a, _ListLit)
            else self._check(a, scope, depth)
            for a in step.args
        ]
        spec = _MEMBER_FUNCTIONS.get(step.name)
        if spec is None:
            if step.name in _GLOBAL_FUNCTIONS:
                self._no_overload(step.pos, step.name, args, receiver)
            self._error(step.pos, f"undeclared reference to '{step.name}' (in container '')")
        arities, kinds, result = spec
        if (
            len(args) not in arities
            or (kinds is not None and not _is_any(receiver) and receiver.kind not in kinds)
            or not _arguments_fit(step.name, args)
        ):
            self._no_overload(step.pos, step.name, args, receiver)
        if (
            step.name == "join"
            and receiver.kind == "list"
            and not _compatible(receiver.params[0], _STRING, numeric=False)
        ):
            self._no_overload(step.pos, step.name, args, receiver)
        return result(receiver, args)

    def _macro(self, step: _Step, receiver: _Type, scope: Mapping[str, _Type], depth: int) -> _Type:
        variable = step.args[0]
        if not isinstance(variable, _Ident) or variable.leading_dot:
            self._error(variable.pos, "argument must be a simple name")
        if receiver.kind in ("list", "map"):
            element = receiver.params[0]
        elif _is_any(receiver):
            element = receiver
        else:
            self._error(
                step.pos,
                f"expression of type '{receiver}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
            )
        inner = {**scope, variable.name: element}
        self.analysis.comprehension_depth = max(self.analysis.comprehension_depth, depth + 1)
        bodies = [self._check(a, inner, depth + 1) for a in step.args[1:]]
        predicates = bodies if step.name != "map" else bodies[:-1]
        for node, t in zip(step.args[1:], predicates, strict=False):
            if not _is_any(t) and t != _BOOL:
                self._error(node.pos, f"expected type 'bool' but found '{t}'")
        if step.name == "map":
            return _list_of(bodies[-1])
        if step.name == "filter":
            return _list_of(element)
        return _BOOL

    def _unary(self, node: _Unary, scope: Mapping[str, _Type], depth: int) -> _Type:
        operand = self._check(node.operand, scope, depth)
        if node.op == "!":
            if not _is_any(operand) and operand != _BOOL:
                self._no_overload(node.pos, "!_", [operand])
            return _BOOL
        if _is_any(operand):
            return operand
        if operand.kind not in ("int", "double", "duration"):
            self._no_overload(node.pos, "-_", [operand])
        return operand

    def _chain(self, node: _Chain, scope: Mapping[str, _Type], depth: int) -> _Type:
        left = self._check(node.first, scope, depth)
        for op, pos, right_node in node.rest:
            right = self._check(right_node, scope, depth)
            left = self._binary(op, pos, left, right)
        return left

    def _binary(self, op: str, pos: int, left: _Type, right: _Type) -> _Type:
        name = _OPERATOR_NAMES[op]
        if op == "+" and not (left.kind in _NUMERIC and right.kind in _NUMERIC):
            self.analysis.grows = True  # string, bytes or list concatenation (or not known)
        if op in ("&&", "||"):
            for t in (left, right):
                if not _is_any(t) and t != _BOOL:
                    self._no_overload(pos, name, [left, right])
            return _BOOL
        if op in ("==", "!="):
            if left != _NULL and right != _NULL and not _compatible(left, right, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        if op == "in":
            if right.kind in ("list", "map"):
                element = right.params[0]
            elif _is_any(right):
                return _BOOL
            else:
                self._no_overload(pos, name, [left, right])
            if left != _NULL and element != _NULL and not _compatible(left, element, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        if op in ("<", "<=", ">", ">="):
            for t in (left, right):
                if not _is_any(t) and t.kind not in _ORDERED:
                    self._no_overload(pos, name, [left, right])
            if not _compatible(left, right, numeric=True):
                self._no_overload(pos, name, [left, right])
            return _BOOL
        # arithmetic
        if _is_any(left) and _is_any(right):
            return _DYN if left.kind == right.kind == "dyn" else _UNKNOWN
        if _is_any(left) or _is_any(right):
            known = right if _is_any(left) else left
            allowed = {
                "+": {"int", "uint", "double", "string", "bytes", "list", "timestamp", "duration"},
                "-": {"int", "uint", "double", "timestamp", "duration"},
                "*": _NUMERIC,
                "/": _NUMERIC,
                "%": {"int", "uint"},
            }[op]
            if known.kind not in allowed:
                self._no_overload(pos, name, [left, right])
            if known.kind in ("timestamp", "duration"):
                return _UNKNOWN
            return known
        if op == "+" and {left.kind, right.kind} == {"timestamp", "duration"}:
            return _TIMESTAMP
        if op == "-" and left.kind == "timestamp" and right.kind in ("timestamp", "duration"):
            return _DURATION if right.kind == "timestamp" else _TIMESTAMP
        same = {
            "+": {"int", "uint", "double", "string", "bytes", "list", "duration"},
            "-": {"int", "uint", "double", "duration"},
            "*": _NUMERIC,
            "/": _NUMERIC,
            "%": {"int", "uint"},
        }[op]
        if left.kind != right.kind or left.kind not in same or not _compatible(left, right, numeric=False):
            self._no_overload(pos, name, [left, right])
        if left.kind == "list":
            return _list_of(_join_types([left.params[0], right.params[0]]))
        return left

    def _conditional(self, node: _Conditional, scope: Mapping[str, _Type], depth: int) -> _Type:
        results: list[_Type] = []
        for condition_node, then_node, pos in node.branches:
            condition = self._check(condition_node, scope, depth)
            results.append(self._check(then_node, scope, depth))
            if not _is_any(condition) and condition != _BOOL:
                self._no_overload(pos, "_?_:_", [condition, results[-1], _UNKNOWN])
        results.append(self._check(node.otherwise, scope, depth))
        concrete = [t for t in results if not _is_any(t) and t != _NULL]
        for t in concrete[1:]:
            if not _compatible(concrete[0], t, numeric=False):
                self._no_overload(node.branches[0][2], "_?_:_", [_BOOL, concrete[0], t])
        if len(concrete) == len(results) and all(t == concrete[0] for t in concrete):
            return concrete[0]
        if all(t.kind == "dyn" for t in results):
            return _DYN
        return _UNKNOWN


def _position(source: str, pos: int) -> tuple[int, int]:
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return line, column


def _compile_message(source: str, pos: int, message: str) -> str:
    line, column = _position(source, pos)
    return f"failed to parse the CEL expression '{source}': ERROR: <input>:{line}:{column}: {message}"


_MACRO_VARIABLE_RE: Final = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([_a-zA-Z][_a-zA-Z0-9]*)\s*,"
)


def _fallback_analysis(source: str, program: _cel.Program, declared: frozenset[str]) -> _Analysis:
    """Undeclared-variable check from the Rust library's references (used if our parser disagrees)."""
    bound = set(_MACRO_VARIABLE_RE.findall(source))
    for name in sorted(program.variables()):
        if name not in declared and name not in bound and name not in _NAMESPACES and name not in _TYPE_NAMES:
            raise CELCompileError(
                f"failed to parse the CEL expression '{source}': undeclared reference to '{name}'"
            )
    return _Analysis(
        comprehension_depth=len(_MACRO_VARIABLE_RE.findall(source)), dynamic_index=True, grows=True
    )


_KNOWN_FUNCTIONS: Final = frozenset(_MEMBER_FUNCTIONS) | frozenset(_GLOBAL_FUNCTIONS) | frozenset(_MACROS)
