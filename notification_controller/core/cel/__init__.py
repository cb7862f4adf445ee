"""A Flux-compatible CEL environment (``fluxcd/pkg/runtime/cel`` on cel-go).

Flux compiles user expressions with ``HomogeneousAggregateLiterals``, ``CrossTypeNumericComparisons``,
``OptionalTypes`` and the ``Strings``, ``Sets`` and ``Encoders`` extensions, declaring every variable as a
``google.protobuf.Struct`` (a ``map(string, dyn)``), and checks the output type at compile time.

Why this design
---------------
Evaluation is done by ``common-expression-language`` (import ``cel``, the Rust ``cel`` crate): it
implements the core language natively (macros, ``has()``, optionals with ``first()``-style results,
``optional.of/none/ofNonZeroValue``, ``hasValue/value/or/orValue``, timestamps, durations, heterogeneous
numeric comparison, a parser with a recursion limit) and, crucially, dispatches receiver-style calls such as
``'a-b'.split('-')`` to Python functions registered on a ``cel.Context`` (``x.f(a)`` is ``f(x, a)``), native
overloads first. So the missing cel-go extensions (strings, sets, encoders, ``list.first()/last()``, the
``bool()``/``string(bool)`` conversions) are small Python functions below: no source rewriting. ``cel-python``
(``celpy``) was not used: it is pure Python (slower), and has no receiver-style custom functions.

The Rust library has no type checker, so this module has its own front end (a lexer, a parser that builds a
small AST with flat operator/selector chains, and a type checker) used for the compile-time checks cel-go
performs: undeclared references (``undeclared reference to 'claims'``), unknown functions, literal aggregates
that are not homogeneous, operator overloads that cannot match (``'_==_' applied to '(map(string, dyn),
string)'``) and the output type (``CEL expression output type mismatch: expected bool, got string``). The
Rust parser stays the authority on syntax; should our parser ever reject what it accepts, a conservative
fallback (undeclared-variable check only) is used instead of refusing the expression.

Output types: cel-go types a field of a ``Struct`` as ``dyn`` and Flux rejects a ``dyn`` output when a type
is required. Here, by default, ``dyn`` outputs are accepted and checked at evaluation time;
``compile_expression(..., strict_types=True)`` reproduces Flux's compile-time rejection.

Safety: expressions are limited to ``MAX_EXPRESSION_LENGTH`` characters and ``MAX_NESTING_DEPTH`` levels of
brackets; inputs to ``MAX_INPUT_DEPTH`` levels and ``MAX_INPUT_NODES`` values (deeper values crash the Rust
converter); nested comprehensions over large inputs are refused (``MAX_COMPREHENSION_COST``). Error messages
never contain variable values: library messages are mapped to fixed texts and only the expression itself
(user-written, not secret) is quoted.

Layout: ``values`` (limits, errors, output and cel-go types, input conversion), ``parser`` (lexer, AST),
``analysis`` (the type checker), ``functions`` (the extensions), ``environment`` (compile and evaluate);
``_loader`` imports the Rust extension without the ``cel`` package's REPL.
"""

from __future__ import annotations

from .environment import Expression, compile_expression
from .environment import _compile_cached as _compile_cached  # tests clear the cache
from .parser import _Parser as _Parser  # tests simulate a parser disagreement
from .parser import _SyntaxFailure as _SyntaxFailure
from .values import (
    MAX_COMPREHENSION_COST,
    MAX_EXPRESSION_LENGTH,
    MAX_INPUT_DEPTH,
    MAX_INPUT_NODES,
    MAX_NESTING_DEPTH,
    CELCompileError,
    CELError,
    CELEvalError,
    OutputType,
)

__all__ = [
    "MAX_COMPREHENSION_COST",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INPUT_DEPTH",
    "MAX_INPUT_NODES",
    "MAX_NESTING_DEPTH",
    "CELCompileError",
    "CELError",
    "CELEvalError",
    "Expression",
    "OutputType",
    "compile_expression",
]
