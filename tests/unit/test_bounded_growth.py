"""Every template and CEL operation that can grow a value refuses before building it (issue 23: chained
``replace``, ``~`` doubling, ``batch``, ``slice``, ``lipsum`` reached 1–2.9 GB; a nested loop over a
60,000-character string ran for hours). Each case must fail fast, in process, with a clear error."""

from __future__ import annotations

import re
import resource
import time

import pytest

from notification_controller.core.cel import CELEvalError, OutputType, compile_expression
from notification_controller.core.templates import TemplateError, render

S = "{% set s='x'*60000 %}"


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        (S + "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", "loops visit more than"),
        (S + "{{ s|replace('x', s)|replace('x', s) }}", "replace would build"),
        (S + "{{ s.replace('x', s) }}", "str.replace would build"),
        (S + "{% set s = s ~ s %}" * 12 + "{{ s|length }}", "'~' would build"),
        (S + "{% set s = s + s %}" * 12 + "{{ s|length }}", "'+' would build"),
        ("{{ range(10)|batch(1000000000, 'x')|list|length }}", "batch would build"),
        ("{{ range(10)|slice(1000000000, 'x')|list|length }}", "slice would build"),
        ("{{ lipsum(1000000) }}", "lipsum: more than"),
        (S + "{{ s|wordwrap(1, wrapstring=s) }}", "wordwrap would build"),
        (S + "{{ s.ljust(1000000000) }}", "str.ljust would build"),
        (S + "{{ s.translate({120: s}) }}", "str.translate would build"),
        (S + "{{ s|list|join(s) }}", "join would build"),
        (S + "{{ range(100000)|map('string')|join(s) }}", "join would build"),  # a generator
        ("{{ (7 ** 16000) ** 2 }}", "'**' result too large"),
        (
            "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% else %}xxxxxxxx{% endif %}{% endmacro %}"
            "{{ m(40) }}",
            "a call would build",
        ),
        ("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "nested too deeply"),
    ],
)
def test_template_growth_is_refused_before_the_value_is_built(source: str, complaint: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(TemplateError, match=re.escape(complaint)):
        render(source, {}, limit=10**7, budget=30)
    # "refused at all" is the point: unbounded, each of these runs for hours or dies of memory; the doubling
    # macro makes ~2 million calls before its output passes the limit (~1.5 s alone, more on a loaded runner)
    assert time.perf_counter() - started < 10.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


def test_a_call_tree_without_output_still_ends_on_time() -> None:
    started = time.perf_counter()
    with pytest.raises(TemplateError, match="took longer than"):
        render(
            "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}", {}
        )
    assert time.perf_counter() - started < 10.0  # 2⁴⁰ calls: forever without the check in every call


def test_ordinary_templates_still_render() -> None:
    out = render(
        "{% for e in events %}{{ loop.index }}/{{ loop.length }} {% endfor %}{{ m ~ '!' }} {{ ','.join(['a', 'b']) }}",
        {"events": [1, 2], "m": "hi"},
    )
    assert out == "1/2 2/2 hi! a,b"


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("event.message.replace('', event.message).replace('', event.message).size() > 0", "replace: result"),
        (
            "[event.message, event.message, event.message, event.message, event.message].join(',').size() > 0",
            "join: result",
        ),
        (
            "'%s%s%s%s%s'.format([event.message, event.message, event.message, event.message, event.message]) != ''",
            "format: result",
        ),
        ("(event.message + event.message).split('').size() > 0", "split: result"),
    ],
)
def test_cel_growth_is_refused(source: str, complaint: str) -> None:
    expression = compile_expression(source, variables=("event",), output=OutputType.BOOL)
    assert not expression.inline_safe  # growing calls never run on the event loop in the controller
    with pytest.raises(CELEvalError, match=complaint):
        expression.evaluate_bool({"event": {"message": "x" * 60000}})


def test_cheap_filters_are_inline_safe() -> None:
    for source in ("event.severity == 'error'", "event.message.startsWith('x') && size(event.metadata) > 1"):
        assert compile_expression(source, variables=("event",), output=OutputType.BOOL).inline_safe
    for source in ("[1].exists(x, x == 1)", "event.message + 'x' == 'y'"):
        assert not compile_expression(source, variables=("event",), output=OutputType.BOOL).inline_safe
