"""Message templates (Alert ``spec.template``, Provider ``spec.bodyTemplate``): Jinja2, sandboxed and bounded.

Templates are user input that runs on the event path, so the engine is Jinja2's *immutable* sandbox
(no attribute that reaches Python internals, no mutation of the variables), with ``StrictUndefined`` (a
typo is an error, not an empty string), autoescape off (the output is chat text or JSON, not HTML), a
bounded source (``MAX_SOURCE_LENGTH``), a bounded output (rendering stops past the limit) and a bounded
render time (checked between output chunks and at every loop item).

Every operation that can grow a value is bounded *before* the value is built (issue 23: chained
``replace``, ``~`` doubling, ``batch``, ``slice``, ``lipsum`` reached 1–2.9 GB): ``*``, ``**``, ``%``,
``+``, ``~``, ``str.format``, the string methods that pad, join, replace or translate, and the filters
``replace``, ``join``, ``center``, ``indent``, ``format``, ``wordwrap``, ``batch``, ``slice``,
``truncate``; every other filter's result is checked after the call (a constant factor of its input at
most, so the check bounds the chain), as is every call's (a macro calling itself twice doubles its output
per level; every call also looks at the clock). A string may not exceed ``MAX_VALUE`` characters, a list
``MAX_ITEMS`` items, and all the ``for`` loops of one render together visit ``MAX_ITERATIONS`` items
(``{% for a in s %}{% for b in s %}`` over a 60,000-character string fails after 100,000 items instead
of running for hours). These bounds make an in-process render (``explain``) safe; the controller itself
renders in a worker process with a wall timeout and an address-space limit (``sandbox/``), because no
in-process check can interrupt a slow native call.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2 import Template as JinjaTemplate
from jinja2.compiler import CodeGenerator, Frame
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
"""Items all the ``range()`` calls of one render may produce together (nested loops multiply), and,
separately, items all its ``for`` loops may visit together."""
MAX_SEQUENCE = 64 * 1024
"""Longest string or list a ``*`` (or a padding filter) may build; bound on a ``**`` result's bits."""
MAX_VALUE = MAX_BODY_OUTPUT
"""Longest string any operation (``~``, ``+``, ``replace``, ``join``, a filter, a string method) may build."""
MAX_ITEMS = MAX_ITERATIONS
"""Longest list any operation (``+``, ``batch``, ``slice``, ``list``, a filter) may build."""
MAX_LIPSUM_WORDS = 10_000


class _Budget:
    """The current render's clock and iteration count (renders run one at a time on the event loop: no
    await happens inside ``render``)."""

    started = 0.0
    budget = RENDER_BUDGET
    iterations = 0
    loop_items = 0

    @classmethod
    def reset(cls, budget: float) -> None:
        cls.started, cls.budget, cls.iterations, cls.loop_items = time.perf_counter(), budget, 0, 0

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


def _loop(iterable: Iterable[Any]) -> Iterator[Any]:
    """What every ``{% for %}`` iterates (``_BoundedCodeGenerator``): one count and one clock look per
    item. A ``range`` was counted when it was made (``_range``)."""
    if isinstance(iterable, range):
        yield from iterable
        return
    for item in iterable:
        _Budget.loop_items += 1
        if _Budget.loop_items > MAX_ITERATIONS:
            raise TemplateError(f"loops visit more than {MAX_ITERATIONS} items")
        if time.perf_counter() - _Budget.started > _Budget.budget:
            raise TemplateError(f"rendering took longer than {_Budget.budget * 1000:g} ms")
        yield item


def _length(value: object) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else len(str(value))


def _refuse_over(what: str, size: int, limit: int = MAX_VALUE) -> None:
    if size > limit:
        raise TemplateError(f"{what} would build more than {limit} characters or items")


def _checked(what: str, value: Any) -> Any:
    """A result after the fact: strings up to ``MAX_VALUE`` characters, lists up to ``MAX_ITEMS``."""
    if isinstance(value, str):
        _refuse_over(what, len(value))
    elif isinstance(value, list | tuple):
        _refuse_over(what, len(value), MAX_ITEMS)
    return value


def _concat(parts: Iterable[Any]) -> str:
    """``a ~ b ~ c``: the size is known before the string is built."""
    texts = [p if isinstance(p, str) else str(p) for p in parts]
    _refuse_over("'~'", sum(map(len, texts)))
    return "".join(texts)


def _replace_size(text: str, old: str, new: str, count: int | None) -> int:
    occurrences = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        occurrences = min(occurrences, count)
    return len(text) + occurrences * (len(new) - len(old))


def _str_method_size(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The size a growing ``str`` method would build, or None when it cannot grow a value much."""
    text: str = method.__self__
    name = method.__name__
    ints = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
    strs = [a for a in (*args, *kwargs.values()) if isinstance(a, str)]
    if name in ("ljust", "rjust", "center", "zfill"):
        return max([len(text), *ints])
    if name == "expandtabs":
        return len(text) * max([8, *ints])
    if name == "replace" and len(strs) >= 2:
        return _replace_size(text, strs[0], strs[1], ints[0] if ints else None)
    if name == "join" and args:
        items = args[0]
        return sum(_length(i) for i in items) + len(text) * max(len(items) - 1, 0)
    if name == "translate" and args and isinstance(args[0], Mapping):
        widest = max((_length(v) for v in args[0].values() if v is not None), default=1)
        return len(text) * max(widest, 1)
    return None


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus bounds on what one expression can build: ``'x' * 10**9`` and
    ``9 ** 9 ** 9`` are refused instead of eating memory or the CPU."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.code_generator_class = _BoundedCodeGenerator

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
        if operator == "*" and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > 8 * MAX_SEQUENCE:
                raise TemplateError("'*' result too large")
        if operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and right * abs(left).bit_length() > MAX_SEQUENCE:
                raise TemplateError("'**' result too large")
        if operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            limit = MAX_VALUE if isinstance(left, str) else MAX_ITEMS
            _refuse_over("'+'", len(left) + len(right), limit)
        _Budget.check()
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # every call made by the template (macros included: a macro calling itself twice doubles its
        # output per level) is timed and its result sized
        _Budget.check()
        # str methods reach here as bound builtins: 'x'.ljust(10**9), s.replace('', s), sep.join(...)
        if isinstance(getattr(__obj, "__self__", None), str) and callable(__obj):
            if __obj.__name__ == "join" and args and not isinstance(args[0], list | tuple | str):
                args = (list(args[0]), *args[1:])  # a generator is sized once, then joined
            size = _str_method_size(__obj, args, kwargs)
            if size is not None:
                _refuse_over(f"str.{__obj.__name__}", size)
            return _checked(f"str.{__obj.__name__}", super().call(__context, __obj, *args, **kwargs))
        return _checked("a call", super().call(__context, __obj, *args, **kwargs))


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja2's code generator with two hooks: ``~`` goes through ``_concat`` (its size is checked before
    the string is built) and every ``for`` loop iterates through ``_loop`` (counted, timed)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        if not getattr(node, "bounded", False):
            node.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_loop"), [node.iter], [], None, None)
            node.bounded = True  # type: ignore[attr-defined]
        super().visit_For(node, frame)


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


def _positive(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _pre_replace(s: object, old: object, new: object, count: object = None, *_: Any) -> None:
    if isinstance(old, str) and isinstance(new, str):
        limit = count if isinstance(count, int) else None
        _refuse_over("replace", _replace_size(str(s), old, new, limit))


def _pre_join(value: object, d: object = "", attribute: object = None, *_: Any) -> None:
    if isinstance(value, list | tuple | str):
        separators = len(str(d)) * max(len(value) - 1, 0)
        _refuse_over("join", separators + sum(_length(i) for i in value))


def _pre_wordwrap(
    s: object, width: object = 79, break_long_words: object = True, wrapstring: object = None, *_: Any
) -> None:
    text = str(s)
    pieces = len(text) // _positive(width) + text.count(" ") + text.count("\n") + 1
    _refuse_over("wordwrap", len(text) + pieces * (len(str(wrapstring)) if wrapstring else 1))


def _pre_batch(value: object, linecount: object, fill_with: object = None, *_: Any) -> None:
    _refuse_over("batch", linecount if isinstance(linecount, int) else 0, MAX_ITEMS)


def _pre_slice(value: object, slices: object, fill_with: object = None, *_: Any) -> None:
    _refuse_over("slice", slices if isinstance(slices, int) else 0, MAX_ITEMS)


def _pre_truncate(
    s: object, length: object = 255, killwords: object = False, end: object = "...", *_: Any
) -> None:
    _refuse_over("truncate", len(str(end)))


_PRE_CHECKS: dict[str, Callable[..., None]] = {
    "replace": _pre_replace,
    "join": _pre_join,
    "wordwrap": _pre_wordwrap,
    "batch": _pre_batch,
    "slice": _pre_slice,
    "truncate": _pre_truncate,
}


def _bounded_filter(name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    """``impl`` with its size pre-check (``_PRE_CHECKS``) and the result check; Jinja2's
    ``pass_context``/``pass_environment``/``pass_eval_context`` marker is kept."""
    passed = getattr(impl, "jinja_pass_arg", None)
    skip = 1 if passed is not None else 0
    pre = _PRE_CHECKS.get(name)

    def bounded(*args: Any, **kwargs: Any) -> Any:
        if name == "join" and len(args) > skip and not isinstance(args[skip], list | tuple | str):
            # a generator (``range(n)|map(...)``) is sized once, then joined: never joined unsized
            args = (*args[:skip], _checked(name, list(args[skip])), *args[skip + 1 :])
        if pre is not None:
            pre(*args[skip:], **kwargs)
        return _checked(name, impl(*args, **kwargs))

    if passed is not None:
        bounded.jinja_pass_arg = passed  # type: ignore[attr-defined]
    bounded.__name__ = f"bounded_{name}"
    return bounded


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    from jinja2.utils import generate_lorem_ipsum

    if not all(isinstance(v, int) for v in (n, min, max)) or n * max > MAX_LIPSUM_WORDS or n > 1000:
        raise TemplateError(f"lipsum: more than {MAX_LIPSUM_WORDS} words")
    return generate_lorem_ipsum(n, html, min, max)


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.filters.update(
        shortsha=shortsha, duration=duration, to_json=to_json, center=_center, indent=_indent, format=_format
    )
    env.filters = {name: _bounded_filter(name, impl) for name, impl in env.filters.items()}
    env.globals["range"] = _range
    env.globals["lipsum"] = _lipsum
    env.globals.pop("namespace", None)  # mutable across loop iterations: a way to double a string 40 times
    env.bounded_concat = _concat  # type: ignore[attr-defined]
    env.bounded_loop = _loop  # type: ignore[attr-defined]
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
    except RecursionError:
        raise TemplateError("nested too deeply (recursive macro?)") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, OverflowError) as exc:
        raise TemplateError(f"{type(exc).__name__}: {exc}") from None
    return "".join(parts)
