"""The Flux-compatible CEL environment (``notification_controller.core.cel``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notification_controller.core.cel import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING_DEPTH,
    CELCompileError,
    CELError,
    CELEvalError,
    Expression,
    OutputType,
    compile_expression,
)

B, S, A = OutputType.BOOL, OutputType.STRING, OutputType.ANY
RECEIVER = ("res", "req")
PROVIDER = ("event", "alert", "provider")
OIDC = ("claims", "vars")
CANARY = "c4n4ry-S3CRET-value"

RES = {
    "apiVersion": "image.toolkit.fluxcd.io/v1",
    "kind": "ImageRepository",
    "metadata": {"name": "app", "namespace": "flux-system", "labels": {"environment": "production"}},
}
REQ = {"tag": "registry/app:v1.2.3", "action": "push", "count": 3, "items": ["a", "b"], "flag": True}


def receiver(source: str) -> Expression:
    return compile_expression(source, variables=RECEIVER, output=B)


def ev(source: str, activation: Mapping[str, object] | None = None, *, output: OutputType = A) -> object:
    act = {"res": RES, "req": REQ} if activation is None else activation
    return compile_expression(source, variables=act.keys() or RECEIVER, output=output).evaluate(act)


# --- the Flux documentation examples -------------------------------------------------------------------


def test_commit_status_expr_doc_example() -> None:
    expr = compile_expression(
        "(event.involvedObject.kind + '/' + event.involvedObject.name + '/' + event.metadata.foo + '/' + "
        "provider.metadata.uid.split('-').first().value()).lowerAscii()",
        variables=PROVIDER,
        output=S,
    )
    activation = {
        "event": {"involvedObject": {"kind": "Kustomization", "name": "App"}, "metadata": {"foo": "Bar"}},
        "alert": {"metadata": {"name": "alert"}},
        "provider": {"metadata": {"uid": "0c9c2e41-d2f9-4f9b-9c41-bebc1984d67a"}},
    }
    assert expr.evaluate_string(activation) == "kustomization/app/bar/0c9c2e41"
    assert expr.evaluate(activation) == "kustomization/app/bar/0c9c2e41"
    assert expr.static_type == "string"


@pytest.mark.parametrize(
    ("source", "req", "expected"),
    [
        ("req.tag.contains(res.metadata.name)", {"tag": "registry/app:v1"}, True),
        ("req.tag.contains(res.metadata.name)", {"tag": "registry/other:v1"}, False),
        ("res.metadata.labels['environment'] == 'production'", {}, True),
        ("res.metadata.labels['environment'] == 'staging'", {}, False),
    ],
)
def test_receiver_doc_examples(source: str, req: dict[str, object], expected: bool) -> None:
    assert receiver(source).evaluate_bool({"res": RES, "req": req}) is expected


def test_receiver_filter_with_claims_declared() -> None:
    expr = compile_expression(
        "claims.sub == 'repo:org/app' && res.metadata.name == 'app'",
        variables=(*RECEIVER, "claims"),
        output=B,
    )
    assert expr.evaluate_bool({"res": RES, "req": {}, "claims": {"sub": "repo:org/app"}}) is True
    assert expr.evaluate_bool({"res": RES, "req": {}, "claims": {"sub": "repo:evil/app"}}) is False


def run_oidc(
    variables: list[tuple[str, str]], validations: list[str], claims: Mapping[str, object]
) -> list[bool]:
    """What the OIDC claim processor does: variables in order into ``vars``, then the validations."""
    compiled = [(name, compile_expression(src, variables=OIDC, output=A)) for name, src in variables]
    checks = [compile_expression(src, variables=OIDC, output=B) for src in validations]
    values: dict[str, object] = {}
    for name, expr in compiled:
        values[name] = expr.evaluate({"claims": claims, "vars": values})
    return [check.evaluate_bool({"claims": claims, "vars": values}) for check in checks]


OIDC_VARIABLES = [
    ("owner", "claims.repository_owner"),
    ("allowedRepos", "[vars.owner + '/repo-a', vars.owner + '/repo-b']"),
]
OIDC_VALIDATIONS = [
    "claims.repository in vars.allowedRepos",
    "claims.ref == 'refs/heads/main' && claims.environment == 'production'",
]


def test_oidc_variables_are_evaluated_in_order_and_validations_pass() -> None:
    claims = {
        "repository_owner": "org",
        "repository": "org/repo-b",
        "ref": "refs/heads/main",
        "environment": "production",
    }
    assert run_oidc(OIDC_VARIABLES, OIDC_VALIDATIONS, claims) == [True, True]
    owner = compile_expression("claims.repository_owner", variables=OIDC, output=A)
    allowed = compile_expression(OIDC_VARIABLES[1][1], variables=OIDC, output=A)
    assert allowed.evaluate({"claims": claims, "vars": {"owner": owner.evaluate({"claims": claims})}}) == [
        "org/repo-a",
        "org/repo-b",
    ]


def test_oidc_validations_fail() -> None:
    claims = {
        "repository_owner": "org",
        "repository": "org/repo-c",
        "ref": "refs/heads/dev",
        "environment": "production",
    }
    assert run_oidc(OIDC_VARIABLES, OIDC_VALIDATIONS, claims) == [False, False]


def test_oidc_variable_out_of_order_is_an_evaluation_error() -> None:
    claims = {"repository_owner": "org"}
    with pytest.raises(CELEvalError, match="no such key: owner"):
        run_oidc(list(reversed(OIDC_VARIABLES)), [], claims)


# --- functions and operators ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("'a-b-c'.split('-')", ["a", "b", "c"]),
        ("'a-b-c'.split('-', 2)", ["a", "b-c"]),
        ("'abc'.split('')", ["a", "b", "c"]),
        ("'a-b-c'.split('-').first().value()", "a"),
        ("'a-b-c'.split('-').last().value()", "c"),
        ("[].first().hasValue()", False),
        ("[1].last().hasValue()", True),
        ("[].first().orValue('dflt')", "dflt"),
        ("optional.of('x').orValue('y')", "x"),
        ("optional.none().or(optional.of(2)).value()", 2),
        ("'MiXeD-Ä'.lowerAscii()", "mixed-Ä"),
        ("'MiXeD-ä'.upperAscii()", "MIXED-ä"),
        ("'a.b.c'.replace('.', '/')", "a/b/c"),
        ("'a.b.c'.replace('.', '/', 1)", "a/b.c"),
        ("'  \\t padded \\n '.trim()", "padded"),
        ("['a', 'b', 'c'].join('-')", "a-b-c"),
        ("['a', 'b'].join()", "ab"),
        ("'hello'.indexOf('l')", 2),
        ("'hello'.lastIndexOf('l')", 3),
        ("'hello'.substring(1, 3)", "el"),
        ("'hello'.charAt(1)", "e"),
        ("'hello'.charAt(5)", ""),
        ("'abc'.reverse()", "cba"),
        ("strings.quote('a\"b')", '"a\\"b"'),
        ("'%s/%d/%.2f/%x'.format(['a', 2, 1.5, 255])", "a/2/1.50/ff"),
        ("'%s'.format([[1, 2]])", "[1, 2]"),
        ("req.tag.startsWith('registry/')", True),
        ("req.tag.endsWith(':v1.2.3')", True),
        ("req.tag.matches('^registry/[a-z]+:v[0-9.]+$')", True),
        ("req.tag.matches('^docker')", False),
        ("matches(req.tag, 'app')", True),
        ("size(req.items) == 2 && req.items.size() == 2 && size('abc') == 3", True),
        ("'a' in req.items", True),
        ("'z' in req.items", False),
        ("'action' in req", True),
        ("has(req.action)", True),
        ("has(req.missing)", False),
        ("has(res.metadata.labels.environment)", True),
        ("req.count > 2 ? 'many' : 'few'", "many"),
        ("req.count > 5 ? 'many' : 'few'", "few"),
        ("req.items.all(i, i.size() == 1)", True),
        ("req.items.exists(i, i == 'b')", True),
        ("req.items.exists_one(i, i == 'b')", True),
        ("req.items.map(i, i.upperAscii())", ["A", "B"]),
        ("req.items.filter(i, i != 'a')", ["b"]),
        ("sets.contains(['a', 'b', 'c'], ['a', 'c'])", True),
        ("sets.contains(['a'], ['a', 'c'])", False),
        ("sets.intersects(req.items, ['b', 'z'])", True),
        ("sets.intersects([1], [true])", False),
        ("sets.equivalent(['a', 'b'], ['b', 'a', 'a'])", True),
        ("sets.equivalent([1, 2], [1.0, 2.0])", True),
        ("base64.encode(b'hello')", "aGVsbG8="),
        ("base64.decode('aGVsbG8=')", b"hello"),
        ("base64.decode('aGVsbG8')", b"hello"),
        ("string(base64.decode(base64.encode(b'round')))", "round"),
        ("1 < 1.5 && 2u > 1 && 2.0 >= 2", True),
        ("1 == 1.0", True),
        ("int('12') + 1", 13),
        ("string(true) + string(12)", "true12"),
        ("bool('true') && !bool('f')", True),
        ("type(req.count) == int && type('') == string", True),
        ("dyn(1) == 1", True),
        ("req.count + 1", 4),
        ("!req.flag || req.count % 2 == 1", True),
        ("{'a': 1, 'b': 2}.size()", 2),
        ("req.items + ['c']", ["a", "b", "c"]),
    ],
)
def test_functions(source: str, expected: object) -> None:
    result = ev(source)
    assert result == expected
    assert type(result) is type(expected)


def test_timestamps_and_durations() -> None:
    assert ev("timestamp('2024-05-01T10:00:00Z').getFullYear()") == 2024
    assert (
        ev("timestamp('2024-05-01T10:00:00Z') + duration('1h') > timestamp('2024-05-01T10:30:00Z')") is True
    )
    assert ev("int(timestamp('1970-01-01T00:01:00Z'))") == 60


# --- compile-time errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["foo.", "res.metadata.name ==", "(res", "'unterminated", "res..x", "1 +* 2", "res.metadata.name }"],
)
def test_syntax_errors(source: str) -> None:
    with pytest.raises(CELCompileError, match=r"failed to parse the CEL expression .*ERROR: <input>:1:\d+"):
        receiver(source)


def test_undeclared_claims_is_a_compile_error() -> None:
    with pytest.raises(CELCompileError) as info:
        receiver("claims.sub == 'x'")
    assert "undeclared reference to 'claims'" in str(info.value)
    assert "<input>:1:1:" in str(info.value)


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("res.metadata.name == other", "other"),
        ("req.items.exists(i, i == j)", "j"),
        ("req.items.exists(i, true) && i == 'a'", "i"),
        ("nofunc(1)", "nofunc"),
        ("req.tag.nomethod()", "nomethod"),
        ("sets.union([1], [2]) == [1]", "sets.union"),
        ("math.greatest([1]) == 1", "math"),
        ("base64 == 'x'", "base64"),
        ("Foo{a: 1} == res", "Foo"),
    ],
)
def test_undeclared_references(source: str, name: str) -> None:
    with pytest.raises(CELCompileError, match=f"undeclared reference to '{name}'"):
        receiver(source)


def test_comprehension_variables_are_scoped() -> None:
    assert receiver("req.items.exists(i, req.items.exists(j, i == j))").evaluate_bool({"req": REQ}) is True


@pytest.mark.parametrize(
    ("source", "output", "got"),
    [
        ("'test'", B, "string"),
        ("true", S, "bool"),
        ("1 + 2", B, "int"),
        ("[true]", B, "list(bool)"),
        ("{'a': true}", B, "map(string, bool)"),
        ("req.tag.size()", S, "int"),
        ("req.tag.split('-')", S, "list(string)"),
        ("req.count > 1 ? 'a' : 'b'", B, "string"),
        ("res", B, "map(string, dyn)"),
        ("has(req.x)", S, "bool"),
        ("req.tag.lowerAscii()", B, "string"),
        ("[1].first()", S, "optional_type(int)"),
    ],
)
def test_output_type_mismatch(source: str, output: OutputType, got: str) -> None:
    with pytest.raises(CELCompileError) as info:
        compile_expression(source, variables=RECEIVER, output=output)
    assert str(info.value) == f"CEL expression output type mismatch: expected {output.value}, got {got}"


def test_any_output_accepts_every_type() -> None:
    assert compile_expression("'test'", variables=RECEIVER, output=A).evaluate({}) == "test"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("res == 'x'", "found no matching overload for '_==_' applied to '(map(string, dyn), string)'"),
        ("1 + 'a' == '1a'", "found no matching overload for '_+_' applied to '(int, string)'"),
        ("'a'.contains(1) == true", "found no matching overload for 'contains' applied to 'string.(int)'"),
        ("[1].contains(1)", "found no matching overload for 'contains' applied to 'list(int).(int)'"),
        (
            "'abc'.lowerAscii(1) == 'a'",
            "found no matching overload for 'lowerAscii' applied to 'string.(int)'",
        ),
        ("-'a' == 'a'", "found no matching overload for '-_' applied to '(string)'"),
        ("'a' in 'abc'", "found no matching overload for '@in' applied to '(string, string)'"),
        ("[1, 'a'].size() > 0", "expected type 'int' but found 'string'"),
        ("['a', 1.0].size() > 0", "expected type 'string' but found 'double'"),
        ("{'a': 1, 'b': 'c'}.size() > 0", "expected type 'int' but found 'string'"),
        (
            "req.count > 1 ? 'a' : 1",
            "found no matching overload for '_?_:_' applied to '(bool, string, int)'",
        ),
        ("'abc'.x == 'y'", "type 'string' does not support field selection"),
        ("['a'].all(i, i)", "expected type 'bool' but found 'string'"),
        ("has(req)", "invalid argument to has() macro"),
        ("req.items.exists(i.j, true)", "argument must be a simple name"),
        ("req.tag.optMap(t, t) == 'x'", "not supported"),
    ],
)
def test_type_errors(source: str, message: str) -> None:
    with pytest.raises(CELCompileError) as info:
        receiver(source)
    assert str(info.value).startswith(f"failed to parse the CEL expression '{source}': ")
    assert message in str(info.value)


def test_format_arguments_are_exempt_from_homogeneous_literals() -> None:
    assert ev("'%s=%d'.format(['a', 1])") == "a=1"


def test_strict_types_rejects_dyn_like_flux() -> None:
    with pytest.raises(CELCompileError, match="expected bool, got dyn"):
        compile_expression("res.metadata.name", variables=RECEIVER, output=B, strict_types=True)
    with pytest.raises(CELCompileError, match="expected string, got dyn"):
        compile_expression("res.metadata['name']", variables=RECEIVER, output=S, strict_types=True)
    assert compile_expression("res.metadata.name == 'app'", variables=RECEIVER, output=B, strict_types=True)
    # a bool-typed expression stays accepted whatever its parts
    expr = compile_expression(
        "res.metadata.name.startsWith('a') && has(res.metadata.labels) && req.items.exists(i, i == 'a')",
        variables=RECEIVER,
        output=B,
        strict_types=True,
    )
    assert expr.evaluate_bool({"res": RES, "req": REQ}) is True


def test_limits() -> None:
    ok = "(" * MAX_NESTING_DEPTH + "true" + ")" * MAX_NESTING_DEPTH
    assert receiver(ok).evaluate_bool({}) is True
    with pytest.raises(CELCompileError, match="nested too deeply"):
        receiver("(" * (MAX_NESTING_DEPTH + 1) + "true" + ")" * (MAX_NESTING_DEPTH + 1))
    with pytest.raises(CELCompileError, match="too long"):
        receiver("true || " * (MAX_EXPRESSION_LENGTH // 8) + "true")
    with pytest.raises(CELCompileError, match="empty"):
        receiver("  ")
    # long flat chains are fine (no recursion proportional to their length)
    assert receiver("!" * 2000 + "true").evaluate_bool({}) is True
    assert receiver(" && ".join(["req.flag"] * 300)).evaluate_bool({"req": REQ}) is True
    assert compile_expression("req" + ".a" * 1000, variables=RECEIVER, output=A)


def test_deep_input_is_rejected_not_crashing() -> None:
    deep: list[object] = []
    cursor = deep
    for _ in range(20_000):  # would overflow the Rust converter's stack
        child: list[object] = []
        cursor.append(child)
        cursor = child
    with pytest.raises(CELEvalError, match="nested deeper"):
        receiver("size(req) > 0").evaluate({"req": {"x": deep}})
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(CELEvalError):
        receiver("size(req) > 0").evaluate({"req": cyclic})
    with pytest.raises(CELEvalError, match="unsupported value type 'object'"):
        receiver("size(req) > 0").evaluate({"req": {"x": object()}})


def test_nested_comprehensions_over_huge_inputs_are_refused() -> None:
    expr = receiver("req.items.exists(a, req.items.exists(b, a == b + 1))")
    assert expr.evaluate_bool({"req": {"items": list(range(100))}}) is True
    with pytest.raises(CELEvalError, match="cost limit"):
        expr.evaluate_bool({"req": {"items": list(range(10_000))}})


# --- evaluation errors ---------------------------------------------------------------------------------


def test_missing_key_is_an_evaluation_error() -> None:
    with pytest.raises(CELEvalError) as info:
        receiver("res.metadata.labels['team'] == 'a'").evaluate({"res": RES, "req": REQ})
    assert str(info.value) == (
        "failed to evaluate the CEL expression 'res.metadata.labels['team'] == 'a'': no such key: team"
    )
    with pytest.raises(CELEvalError, match="no such key: missing"):
        receiver("req.missing == 'a'").evaluate({"res": RES, "req": REQ})


def test_missing_variable_is_an_evaluation_error() -> None:
    with pytest.raises(CELEvalError, match=r"no such attribute\(s\): req"):
        receiver("req.tag == 'a'").evaluate({"res": RES})


def test_non_bool_result_of_a_dynamic_expression() -> None:
    expr = receiver("res.metadata.name")
    with pytest.raises(CELEvalError) as info:
        expr.evaluate({"res": RES, "req": REQ})
    assert str(info.value) == "failed to evaluate CEL expression as boolean: 'res.metadata.name'"
    assert expr.evaluate({"res": {"metadata": {"name": True}}, "req": {}}) is True


def test_non_string_result_of_a_dynamic_expression() -> None:
    expr = compile_expression("event.metadata.count", variables=PROVIDER, output=S)
    with pytest.raises(CELEvalError, match="as string"):
        expr.evaluate({"event": {"metadata": {"count": 3}}})
    with pytest.raises(CELEvalError, match="as string"):
        receiver("req.flag").evaluate_string({"req": REQ})


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("req.count / 0 == 1", "division by zero"),
        ("req.count % 0 == 1", "modulus by zero"),
        ("req.items[5] == 'a'", "index out of range"),
        ("req.tag + 1 == 2", "no such overload"),
        ("req.tag.substring(100) == 'a'", "index out of range"),
        ("req.tag.charAt(-1) == 'a'", "index out of range"),
        ("req.items.first().value() == 'a' && [].first().value() == 1", "optional.none() dereference"),
        ("base64.decode(req.tag) == b''", "illegal base64 data"),
        ("int(req.tag) == 1", "function 'int' failed"),
        ("req.count * 9223372036854775807 > 0", "integer overflow"),
    ],
)
def test_runtime_errors(source: str, reason: str) -> None:
    with pytest.raises(CELEvalError) as info:
        receiver(source).evaluate({"res": RES, "req": REQ})
    assert str(info.value).startswith(f"failed to evaluate the CEL expression '{source}': ")
    assert reason in str(info.value)


@pytest.mark.parametrize(
    "source",
    [
        "res.metadata.labels[req.secret] == 'x'",  # the missing key IS the secret
        "req.secret.matches(req.secret + '(')",  # invalid regex built from the secret
        "int(req.secret) == 1",
        "bool(req.secret)",
        "req.secret + 1 == 2",
        "req.secret.substring(1000) == ''",
        "base64.decode(req.secret) == b''",
        "req.secret * 2 == 1",
        "{req.secret: 1}[req.other] == 1",
        "req.secret == 'x' || req.nope == 1",
        "'%d'.format([req.secret]) == ''",
        "req.big * req.big > 0",
        "req.secret",
    ],
)
def test_errors_never_contain_variable_values(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    activation = {"res": RES, "req": {"secret": CANARY, "other": CANARY + "2", "big": 9223372036854775807}}
    with pytest.raises(CELEvalError) as info:
        receiver(source).evaluate(activation)
    assert CANARY not in str(info.value)
    assert CANARY not in repr(info.value)
    assert info.value.__context__ is None
    assert info.value.__cause__ is None
    captured = capsys.readouterr()  # the Rust library prints failing Python callbacks
    assert CANARY not in captured.out + captured.err


def test_compile_cache_and_equality() -> None:
    first = receiver("req.tag == 'a'")
    assert receiver("req.tag == 'a'") is first
    assert first.source == "req.tag == 'a'"
    assert first.variables == frozenset(RECEIVER)
    assert first.output is B
    assert compile_expression("req.tag == 'a'", variables=["req", "res"], output=A) is not first


def test_shared_expression_is_thread_safe() -> None:
    expr = receiver("req.tag.split('-').first().value().upperAscii() == req.want")
    barrier = threading.Barrier(8)

    def work(i: int) -> bool:
        if i < 8:
            barrier.wait()
        return expr.evaluate_bool({"req": {"tag": f"t{i}-x", "want": f"T{i}"}})

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(2000)))


def test_errors_are_cel_errors() -> None:
    assert issubclass(CELCompileError, CELError)
    assert issubclass(CELEvalError, CELError)
    assert OutputType("bool") is B
    assert str(S) == "string"


# --- properties ----------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=80))
def test_random_printable_strings_only_raise_compile_errors(source: str) -> None:
    with contextlib.suppress(CELCompileError):
        compile_expression(source, variables=RECEIVER, output=B)


CEL_ALPHABET = "resq.metadanl()[]{}'\",:?!-+*/%<>=&|in0123456789u _"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=CEL_ALPHABET, max_size=40))
def test_cel_like_strings_only_raise_cel_errors(source: str) -> None:
    try:
        expr = compile_expression(source, variables=RECEIVER, output=A)
    except CELCompileError:
        return
    with contextlib.suppress(CELEvalError):
        expr.evaluate({"res": RES, "req": REQ})


def test_fallback_when_our_parser_disagrees_with_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    from notification_controller.core import cel as module

    def refuse(self: object) -> object:
        raise module._SyntaxFailure(0, "simulated")

    monkeypatch.setattr(module._Parser, "parse", refuse)
    module._compile_cached.cache_clear()
    try:
        expr = receiver("req.items.exists(i, i == 'a') && sets.contains(req.items, ['a'])")
        assert expr.evaluate_bool({"req": REQ}) is True
        with pytest.raises(CELCompileError, match="undeclared reference to 'claims'"):
            receiver("claims.sub == 'x'")
        with pytest.raises(CELEvalError, match="as boolean"):  # output checked at evaluation instead
            receiver("'test'").evaluate({})
    finally:
        module._compile_cached.cache_clear()
