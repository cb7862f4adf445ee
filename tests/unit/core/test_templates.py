"""Message templates (issue 15): the bounded Jinja2 sandbox (``core/templates.py``), its filters and its errors.

Every hostile template below must end in a ``TemplateError`` quickly, never in a hang, a huge allocation or
a Python object escaping the sandbox; a render error names the problem, not the values.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from notification_controller.core.templates import (
    MAX_MESSAGE_OUTPUT,
    TemplateError,
    duration,
    render,
    shortsha,
    template_error,
)

VARS: dict[str, Any] = {
    "event": {
        "involvedObject": {"kind": "Kustomization", "name": "apps", "namespace": "flux-system"},
        "severity": "error",
        "reason": "HealthCheckFailed",
        "message": "health check failed after 2m0s",
        "metadata": {"revision": "main@sha1:0c9c2e41d2f94f9b9c41bebc1984d67a0c9c2e41"},
    },
    "alert": {"metadata": {"name": "on-call", "namespace": "flux-system"}, "spec": {}},
    "provider": {"metadata": {"name": "slack", "namespace": "flux-system"}, "spec": {"type": "slack"}},
    "events": [],
    "count": 1,
}


def test_variables_and_filters() -> None:
    out = render(
        "{{ event.involvedObject.kind }}/{{ event.involvedObject.name }} {{ event.metadata.revision | shortsha }}"
        " failed ({{ event.reason }}); {{ 90 | duration }}; {{ event.message | to_json }}",
        VARS,
    )
    assert (
        out
        == 'Kustomization/apps main@0c9c2e4 failed (HealthCheckFailed); 1m30s; "health check failed after 2m0s"'
    )
    assert shortsha("0c9c2e41d2f94f9b") == "0c9c2e4" and shortsha("v1.2.3") == "v1.2.3"
    assert shortsha("sha256:abcdef0123456789") == "abcdef0"
    assert duration("1h30m") == "1h30m0s" and duration("soon") == "soon"


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("{{ event.nope }}", "has no attribute 'nope'"),  # StrictUndefined: a typo is an error
        ("{{ ''.__class__.__mro__ }}", "refused by the sandbox"),
        ("{{ event.metadata.update({'a': 1}) }}", "refused by the sandbox"),  # immutable
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loops produce"),
        ("{{ 'x' * 1000000000 }}", "'*' would build"),
        ("{{ [1] * 100000000 }}", "'*' would build"),
        ("{{ 2 ** 100000000 }}", "'**' result too large"),
        ("{{ '%999999999d' % 1 }}", "'%' formatting"),
        ("{{ '%*d' % (999999999, 1) }}", "'%' formatting"),
        ("{{ '{:999999999}'.format(1) }}", "str.format"),
        ("{{ '%999999999d' | format(1) }}", "format: a width"),
        ("{{ 'a' | center(999999999) }}", "center: width"),
        ("{{ 'a\nb' | indent(999999999) }}", "indent: width"),
        ("{% set ns = namespace(s='a') %}{{ ns.s }}", "'namespace' is undefined"),
        ("{% for i in range(50000) %}0123456789{% endfor %}", f"longer than {MAX_MESSAGE_OUTPUT}"),
    ],
)
def test_hostile_templates_fail_fast(source: str, complaint: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TemplateError) as caught:
        render(source, VARS)
    assert complaint in str(caught.value)
    assert time.perf_counter() - started < 1.0  # generous on a loaded 2-core machine; a hang takes minutes


def test_the_render_budget_holds_between_chunks() -> None:
    with pytest.raises(TemplateError, match="took longer than"):
        render("{% for i in range(90000) %}{{ i }}{% endfor %}", VARS, limit=10**7, budget=0.0001)


def test_syntax_errors_name_the_line() -> None:
    assert template_error("ok {{ event.reason }}") is None and template_error(None) is None
    assert (
        template_error("line one\n{{ event.reason ")
        == "line 2: unexpected end of template, expected 'end of print statement'."
    )
    assert template_error("{% if %}") is not None
    assert "more than 8192" in (template_error("x" * 9000) or "")
