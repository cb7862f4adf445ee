"""The Flux environment itself: ``compile_expression`` (cached) and ``Expression`` (evaluation with the
input limits and the extension functions)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .analysis import _KNOWN_FUNCTIONS, _Analysis, _Checker, _fallback_analysis
from .functions import _FUNCTION_STATE, _FUNCTIONS, _NO_OVERLOAD
from .parser import _bracket_depth, _Parser, _SyntaxFailure, _Token, _tokenize
from .values import (
    _BOOL,
    _STRING,
    MAX_COMPREHENSION_COST,
    MAX_EXPRESSION_LENGTH,
    MAX_INPUT_NODES,
    MAX_NESTING_DEPTH,
    CELCompileError,
    CELEvalError,
    OutputType,
    _convert_input,
    _Type,
)

if TYPE_CHECKING:
    import cel as _cel
else:
    from ._loader import _cel


# ---------------------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expression:
    """A compiled expression; immutable, safe to share between threads and tasks."""

    source: str
    variables: frozenset[str]
    output: OutputType
    _program: _cel.Program = field(repr=False, compare=False)
    _analysis: _Analysis = field(repr=False, compare=False)

    @property
    def inline_safe(self) -> bool:
        """Proven cheap without running it: no comprehension macro and no call or ``+`` that can build a
        value larger than the inputs (``analysis._GROWING``). Its cost is then linear in the expression
        and the inputs, so it may be evaluated on the event loop; anything else goes to the sandbox's
        worker processes (``notification_controller/sandbox``)."""
        return self._analysis.comprehension_depth == 0 and not self._analysis.grows

    @property
    def static_type(self) -> str:
        """The output type as inferred at compile time, as cel-go prints it (``dyn`` when unknown)."""
        return str(self._analysis.output)

    def evaluate(self, activation: Mapping[str, object]) -> object:
        """Evaluate with the given variables; check the result against ``output``."""
        return self._evaluate(activation, self.output)

    def evaluate_bool(self, activation: Mapping[str, object]) -> bool:
        result = self._evaluate(activation, OutputType.BOOL)
        assert isinstance(result, bool)
        return result

    def evaluate_string(self, activation: Mapping[str, object]) -> str:
        result = self._evaluate(activation, OutputType.STRING)
        assert isinstance(result, str)
        return result

    def _evaluate(self, activation: Mapping[str, object], output: OutputType) -> object:
        budget = [MAX_INPUT_NODES]
        variables: dict[str, object] = {}
        largest = self._analysis.literal_list_size
        for name in self.variables:
            if name in activation:
                variables[name], size = _convert_input(name, activation[name], budget)
                largest = max(largest, size)
        depth = self._analysis.comprehension_depth
        if depth >= 2 and max(largest, 1) ** depth > MAX_COMPREHENSION_COST:
            raise CELEvalError(
                f"failed to evaluate the CEL expression '{self.source}': evaluation cost limit exceeded "
                f"({depth} nested comprehensions over {largest} elements)"
            )
        failure: str | None = None
        result: object = None
        _FUNCTION_STATE.error = None
        try:
            result = self._program.execute(_cel.Context(variables, _FUNCTIONS))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            failure = self._describe(exc, getattr(_FUNCTION_STATE, "error", None))
        finally:
            _FUNCTION_STATE.error = None
        if failure is not None:  # raised outside the except block: no chained library exception
            raise CELEvalError(f"failed to evaluate the CEL expression '{self.source}': {failure}")
        static = self._analysis.output
        if (static == _BOOL and not isinstance(result, bool)) or (
            static == _STRING and not isinstance(result, str)
        ):  # the Rust evaluator folds ``!!x`` to ``x``; cel-go fails at run time
            raise CELEvalError(f"failed to evaluate the CEL expression '{self.source}': {_NO_OVERLOAD}")
        if output is OutputType.BOOL and not isinstance(result, bool):
            raise CELEvalError(f"failed to evaluate CEL expression as boolean: '{self.source}'")
        if output is OutputType.STRING and not isinstance(result, str):
            raise CELEvalError(f"failed to evaluate CEL expression as string: '{self.source}'")
        return result

    def _describe(self, exc: BaseException, function_error: str | None) -> str:
        """A value-free description of a library failure (library messages may quote values)."""
        if function_error is not None:
            return function_error
        text = str(exc)
        if isinstance(exc, KeyError):
            key = exc.args[0] if exc.args else None
            if (
                not self._analysis.dynamic_index
                and isinstance(key, str)
                and key in self._analysis.literal_keys
            ):
                return f"no such key: {key}"
            return "no such key"
        if isinstance(exc, IndexError):
            return "index out of range"
        if isinstance(exc, ZeroDivisionError):
            return "modulus by zero" if "modulo" in text else "division by zero"
        if isinstance(exc, OverflowError):
            return "integer overflow"
        if "optional.none() dereference" in text:
            return "optional.none() dereference"
        function = re.match(r"Function '([A-Za-z_][A-Za-z0-9_.]*)' error", text)
        if function is not None and function.group(1) in _KNOWN_FUNCTIONS:
            return f"function '{function.group(1)}' failed: invalid argument"
        undefined = re.match(r"Undefined variable or function: '([^']*)'", text)
        if undefined is not None:
            if undefined.group(1) in self.variables:
                return f"no such attribute(s): {undefined.group(1)}"
            return _NO_OVERLOAD
        if isinstance(exc, TypeError):
            return _NO_OVERLOAD
        if isinstance(exc, ValueError) and "Conversion" in text:
            return "unsupported value type"
        return "evaluation failed"


def compile_expression(
    source: str, *, variables: Iterable[str], output: OutputType, strict_types: bool = False
) -> Expression:
    """Compile ``source`` for an environment declaring ``variables`` (each a ``map(string, dyn)``).

    Raises ``CELCompileError`` for syntax errors, undeclared references, impossible overloads, literal results
    of the wrong type and oversized or too deeply nested expressions. With ``strict_types`` a ``dyn`` result
    is also rejected when ``output`` is not ``ANY`` (exactly Flux's behaviour); otherwise it is checked at
    evaluation time.
    """
    if not isinstance(source, str):
        raise CELCompileError("CEL expression must be a string")
    return _compile_cached(source, frozenset(variables), OutputType(output), strict_types)


@functools.lru_cache(maxsize=1024)
def _compile_cached(
    source: str, variables: frozenset[str], output: OutputType, strict_types: bool
) -> Expression:
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise CELCompileError(
            f"CEL expression is too long: {len(source)} characters (the limit is {MAX_EXPRESSION_LENGTH})"
        )
    if not source.strip():
        raise CELCompileError("CEL expression is empty")
    tokens: list[_Token] | None
    try:
        tokens = _tokenize(source)
    except _SyntaxFailure:
        tokens = None
    if tokens is not None and _bracket_depth(tokens) > MAX_NESTING_DEPTH:
        raise CELCompileError(
            f"failed to parse the CEL expression '{source}': expression is nested too deeply "
            f"(the limit is {MAX_NESTING_DEPTH} levels of brackets)"
        )
    program = _library_compile(source)
    analysis: _Analysis | None = None
    if tokens is not None:
        try:
            tree = _Parser(tokens).parse()
        except _SyntaxFailure:
            tree = None
        if tree is not None:
            analysis = _Checker(source, variables).check(tree)
    if analysis is None:
        analysis = _fallback_analysis(source, program, variables)
    _check_output(analysis.output, output, strict_types)
    return Expression(source, variables, output, program, analysis)


def _library_compile(source: str) -> _cel.Program:
    failure: str | None = None
    try:
        return _cel.compile(source)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        text = str(exc)
        failure = text[text.index("ERROR:") :] if "ERROR:" in text else "syntax error"
    raise CELCompileError(f"failed to parse the CEL expression '{source}': {failure}")


def _check_output(inferred: _Type, output: OutputType, strict_types: bool) -> None:
    if output is OutputType.ANY or inferred.kind == "unknown":
        return
    if inferred.kind == "dyn" and not strict_types:
        return
    if inferred.kind != output.value:
        raise CELCompileError(f"CEL expression output type mismatch: expected {output.value}, got {inferred}")
