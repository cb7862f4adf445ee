"""Message templates (Alert ``spec.template``, Provider ``spec.bodyTemplate``): Jinja2, sandboxed and bounded.

Templates are user input that runs on the event path, so the engine is Jinja2's *immutable* sandbox
(no attribute that reaches Python internals, no mutation of the variables), with ``StrictUndefined`` (a
typo is an error, not an empty string), autoescape off (the output is chat text or JSON, not HTML), a
bounded source (``MAX_SOURCE_LENGTH``), a bounded output (rendering stops past the limit) and a bounded
render time (checked between output chunks; the sandbox caps ``range`` at 100,000 items).

Variables (docs/templates.md): ``event`` (the Flux event as CEL sees it, metadata after Flux's merge
rules), ``alert`` and ``provider`` (``metadata`` and ``spec`` only: a Secret's values never reach a
template), and for a grouped notification ``events`` (the quoted events: ``object``, ``severity``,
``message``) and ``count``. Filters beyond Jinja2's: ``shortsha``, ``duration``, ``to_json``.

Compiled once per source (LRU); a syntax error is a ``TemplateError`` naming the line.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson
from jinja2 import StrictUndefined, TemplateSyntaxError
from jinja2 import Template as JinjaTemplate
from jinja2.exceptions import SecurityError
from jinja2.exceptions import TemplateError as JinjaError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ControllerError
from ..lib.duration import format_duration, parse_duration

MAX_SOURCE_LENGTH = 8192
"""Longest template source, in characters (CRD ``maxLength``)."""
MAX_MESSAGE_OUTPUT = 16 * 1024
"""Longest rendered title or message, in characters."""
MAX_BODY_OUTPUT = 256 * 1024
"""Longest rendered request body, in characters."""
RENDER_BUDGET = 0.05
"""Seconds a render may take (checked between output chunks)."""

_DIGEST = re.compile(r"(?:(?P<ref>[^@]*)@)?(?:sha1|sha256|sha512|blake3):(?P<hex>[0-9a-fA-F]+)$")


class TemplateError(ControllerError):
    """A template that does not compile or render; the message never contains variable values."""


def shortsha(revision: object, length: int = 7) -> str:
    """``main@sha1:0c9c2e41d2...`` → ``main@0c9c2e4``; a bare digest or hex → its first ``length`` hex."""
    text = str(revision)
    match = _DIGEST.match(text)
    if match:
        ref, digest = match.group("ref"), match.group("hex")[:length]
        return f"{ref}@{digest}" if ref else digest
    if re.fullmatch(r"[0-9a-fA-F]{8,}", text):
        return text[:length]
    return text


def duration(value: object) -> str:
    """Seconds (a number) or a Go duration string → Go's formatting (``90`` → ``1m30s``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format_duration(float(value))
    try:
        return format_duration(parse_duration(str(value)))
    except ValueError:
        return str(value)


def to_json(value: object) -> str:
    """JSON text (for a body template: ``{{ event.message | to_json }}`` quotes and escapes)."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError as exc:
        raise TemplateError(f"to_json: {exc}") from None


MAX_ITERATIONS = 100_000
"""Items all the ``range()`` calls of one render may produce together (nested loops multiply)."""
MAX_SEQUENCE = 64 * 1024
"""Longest string or list a ``*`` (or a padding filter) may build; bound on a ``**`` result's bits."""


class _Budget:
    """The current render's clock and iteration count (renders run one at a time on the event loop: no
    await happens inside ``render``)."""

    started = 0.0
    budget = RENDER_BUDGET
    iterations = 0

    @classmethod
    def reset(cls, budget: float) -> None:
        cls.started, cls.budget, cls.iterations = time.perf_counter(), budget, 0

    @classmethod
    def check(cls, more: int = 0) -> None:
        cls.iterations += more
        if cls.iterations > MAX_ITERATIONS:
            raise TemplateError(f"loops produce more than {MAX_ITERATIONS} items")
        if time.perf_counter() - cls.started > cls.budget:
            raise TemplateError(f"rendering took longer than {cls.budget * 1000:g} ms")


def _range(*args: int) -> range:
    r = range(*args)
    _Budget.check(len(r))
    return r


def _too_big(seq: object, n: object) -> bool:
    return isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_SEQUENCE


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus bounds on what one expression can build: ``'x' * 10**9`` and
    ``9 ** 9 ** 9`` are refused instead of eating memory or the CPU."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def wrap_str_format(self, value: Any) -> Any:
        # str.format can pad to any width ("{:999999999}"), and a width can come from an argument
        wrapped = super().wrap_str_format(value)
        fmt = getattr(value, "__self__", None)
        if wrapped is not None and isinstance(fmt, str) and _wide_format(fmt):

            def refuse(*args: Any, **kwargs: Any) -> str:
                raise TemplateError(f"str.format with a width over {MAX_SEQUENCE} or a nested field")

            return refuse
        return wrapped

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "%" and isinstance(left, str) and _wide(left):
            raise TemplateError(f"'%' formatting with a width over {MAX_SEQUENCE} or '*'")
        if operator == "*" and (_too_big(left, right) or _too_big(right, left)):
            raise TemplateError(f"'*' would build more than {MAX_SEQUENCE} items")
        if operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and right * abs(left).bit_length() > MAX_SEQUENCE:
                raise TemplateError("'**' result too large")
        _Budget.check()
        return super().call_binop(context, operator, left, right)


_FORMAT_SPEC = re.compile(r"\{[^{}]*:((?:[^{}]|\{[^{}]*\})*)\}")
_WIDTH = re.compile(r"%[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")


def _wide_format(fmt: str) -> bool:
    return any(
        "{" in spec or any(int(n) > MAX_SEQUENCE for n in re.findall(r"\d+", spec))
        for spec in _FORMAT_SPEC.findall(fmt)
    )


def _wide(fmt: str) -> bool:
    for width, precision in _WIDTH.findall(fmt):
        for part in (width, precision):
            if part == "*" or (part and int(part) > MAX_SEQUENCE):
                return True
    return False


def _center(value: object, width: int = 80) -> str:
    if width > MAX_SEQUENCE:
        raise TemplateError(f"center: width over {MAX_SEQUENCE}")
    return str(value).center(width)


def _indent(value: object, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    if (isinstance(width, int) and width > MAX_SEQUENCE) or (
        isinstance(width, str) and len(width) > MAX_SEQUENCE
    ):
        raise TemplateError(f"indent: width over {MAX_SEQUENCE}")
    pad = " " * width if isinstance(width, int) else width
    lines = str(value).split("\n")
    out = [(pad + line) if line or blank else line for line in lines[1:]]
    return "\n".join([(pad + lines[0]) if first else lines[0], *out]) if lines else ""


def _format(value: object, *args: Any, **kwargs: Any) -> str:
    text = str(value)
    if _wide(text):
        raise TemplateError(f"format: a width over {MAX_SEQUENCE} or '*'")
    if args and kwargs:
        raise TemplateError("format: positional or keyword arguments, not both")
    return text % (kwargs or args)


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.filters.update(
        shortsha=shortsha, duration=duration, to_json=to_json, center=_center, indent=_indent, format=_format
    )
    env.globals["range"] = _range
    env.globals.pop("namespace", None)  # mutable across loop iterations: a way to double a string 40 times
    return env


_ENV = _environment()


@functools.lru_cache(maxsize=512)
def compile_template(source: str) -> JinjaTemplate:
    """Raises ``TemplateError`` with the line of the first syntax error."""
    if len(source) > MAX_SOURCE_LENGTH:
        raise TemplateError(f"template is {len(source)} characters long, more than {MAX_SOURCE_LENGTH}")
    try:
        return _ENV.from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"line {exc.lineno}: {exc.message}") from None


def template_error(source: str | None) -> str | None:
    """Why ``source`` does not compile, or None (None also for no template)."""
    if not source:
        return None
    try:
        compile_template(source)
    except TemplateError as exc:
        return str(exc)
    return None


def render(
    source: str,
    variables: Mapping[str, Any],
    *,
    limit: int = MAX_MESSAGE_OUTPUT,
    budget: float = RENDER_BUDGET,
) -> str:
    """Render ``source``; raises ``TemplateError`` (undefined variable, sandbox refusal, over the output
    limit or the time budget). The message names the problem, not the values."""
    template = compile_template(source)
    _Budget.reset(budget)
    parts: list[str] = []
    size = 0
    try:
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > limit:
                raise TemplateError(f"output is longer than {limit} characters")
            _Budget.check()
            parts.append(chunk)
    except TemplateError:
        raise
    except SecurityError as exc:
        raise TemplateError(f"refused by the sandbox: {exc}") from None
    except JinjaError as exc:  # UndefinedError included: "'event' has no attribute 'foo'"
        raise TemplateError(str(exc.message or type(exc).__name__)) from None
    except (TypeError, ValueError, ArithmeticError, LookupError, OverflowError) as exc:
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None
    return "".join(parts)
