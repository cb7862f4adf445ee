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

Measured against
----------------
Four Flux-style expressions over an event (equality, ``&&`` + ``startsWith``, ``split().exists()``, ``has()
? upperAscii() :``), per call, alternating rounds on the loaded 2-core machine, medians of two runs of 9
(issue 24): compile (front end + Rust compile, uncached) 196-224 µs, evaluate (input limits + Rust) 87-94
µs. ``celpy`` 0.5 (``cel-python``, pure Python): compile 400-594 µs, evaluate 433-720 µs on the two it can
run (it has no ``split``/``upperAscii``).

``cel-expr-python`` 0.1.3 (Google's cel-cpp with its type checker) was spiked behind ``compile_expression``
(an adapter keeping our limits, input conversion, value-free texts and ``inline_safe``) and NOT adopted:

* it is faster where it runs: evaluate 11.7 µs raw, 53 µs with our input limits; compile 130 µs raw, but
  491 µs with our analysis kept (cel-cpp gives no cost estimate; the sandbox needs ``inline_safe`` and the
  comprehension cost guard);
* it is not Flux's language: 21 of ``tests/unit/core/test_cel.py``'s 161 cases fail. No
  ``CrossTypeNumericComparisons`` (``1 == 1.0`` and ``1 < 1.5`` are compile errors); its ``sets`` are typed
  ``list(T)`` (``sets.equivalent([1, 2], [1.0, 2.0])``, ``sets.intersects([1], [true])`` refused, cel-go
  answers true and false); ``HomogeneousAggregateLiterals`` is not enforced (``[1, 'a']``, ``['a', 1.0]``,
  ``{'a': 1, 'b': 'c'}`` accepted, Flux refuses them); its parser stops at 32 levels (``req`` followed by
  32 ``.a`` is refused, 31 pass); ten error texts differ from cel-go's (``'(string, int)'`` for
  ``'string.(int)'``, ``'claims.sub'`` for ``'claims'``, the has()/exists()/selection wording); its ``no
  such key`` texts quote dynamic keys (values) unless rewritten (2); the parser-fallback case does not apply;
* it is unsafe on our inputs: its ``replace``/``join``/``split``/``format`` are native with no size bound
  and the binding exposes no cost limit: all 4 CEL cases of ``tests/unit/test_bounded_growth.py`` fail
  (``s.replace('', s)`` chains, ``join``, ``format``, ``split``), one with ``MemoryError``
  (``std::bad_alloc``), one past the 120 s test timeout. Here those functions are ours
  (``functions.py``) and refuse before building.

Worth another look when cel-expr-python exposes cel-cpp's cross-type numeric comparison and homogeneous
literal options, a cost limit or overridable string functions (the adapter was not kept: issue 24's report).

What it leans on in the ``cel`` wheel (``common-expression-language`` 0.10, pinned ``<0.11``): the compiled
module sits beside the package as ``cel/cel<suffix>``; ``x.f(a)`` calls a registered Python ``f(x, a)``
while native functions win; failures come as ``KeyError``/``IndexError``/``ZeroDivisionError``/
``OverflowError`` or with the texts ``Expression._describe`` maps; compile errors carry cel-go's ``ERROR:
<input>:line:col`` text. ``tests/unit/test_dependency_internals.py`` asserts each: a release that changes one
fails there (``tests/unit/core/test_cel.py`` then shows what users would see).
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
