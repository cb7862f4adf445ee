"""A sandbox worker process: evaluates tenant expressions read from stdin, answers on stdout.

Started by ``pool.py`` as ``python -m notification_controller.sandbox.worker MEMORY_BYTES PARENT_PID``
(a fresh interpreter, never a fork of the threaded controller). Before it reads anything it

* limits its own address space (``RLIMIT_AS`` = MEMORY_BYTES): a template or CEL value that grows past it
  ends in ``MemoryError`` (answered, then the worker exits) or, inside the Rust CEL library, in an abort:
  either way the controller's memory is untouched;
* asks the kernel to SIGKILL it when the controller dies (``PR_SET_PDEATHSIG``), and exits if the
  controller is already gone;
* moves the protocol to private descriptors and points fds 0 and 1 at /dev/null, so nothing a library
  prints can corrupt a frame;
* imports Jinja2 and the CEL extension (so the first job's time is the job's), then says ``ready``.

Jobs (``protocol.py`` frames), one at a time:

* ``template``: ``source``, ``vars``, ``limit``, ``budget`` → the rendered text (``core.templates.render``);
* ``cel``: ``source``, ``declared``, ``output``, ``strict``, ``vars`` → a bool or a string;
* ``oidc``: ``claims``, ``variables`` ([name, expression]…), ``validations`` ([expression]…) → the
  validations' results, or where the chain failed (``receivers/generic_oidc.py`` words the error).

Compiled templates and programs are cached by source (the LRU caches of ``core``). The worker never sees a
Secret: the variables are the event, the Alert's and Provider's metadata and spec, a webhook's body and
claims.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from typing import Any, BinaryIO

from . import protocol

PR_SET_PDEATHSIG = 1


def _confine(memory: int, parent: int) -> None:
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves no core file of hostile data
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pool still kills its workers on close
        pass
    if os.getppid() != parent:  # the controller died before prctl: nobody will read our answers
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the controller, which stops us


def _private_pipes() -> tuple[BinaryIO, BinaryIO]:
    reader = os.fdopen(os.dup(0), "rb", buffering=0)
    writer = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return reader, writer


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def run_job(job: dict[str, Any]) -> Any:
    """One job's value; raises ``ControllerError`` (a template or CEL error) with a value-free message."""
    kind = job.get("kind")
    if kind == "template":
        from ..core.templates import render

        return render(str(job["source"]), job["vars"], limit=int(job["limit"]), budget=float(job["budget"]))
    from ..core.cel import OutputType, compile_expression

    if kind == "cel":
        expression = compile_expression(
            str(job["source"]),
            variables=[str(v) for v in job["declared"]],
            output=OutputType(job["output"]),
            strict_types=bool(job.get("strict", False)),
        )
        return expression.evaluate(job["vars"])
    if kind == "oidc":
        return oidc_chain(job["claims"], job["variables"], job["validations"])
    raise ValueError(f"unknown job kind {kind!r}")


def oidc_chain(claims: Any, variables: list[list[str]], validations: list[str]) -> dict[str, Any]:
    """generic-oidc's CEL: each variable sees ``claims`` and the earlier ``vars``; then every validation.
    ``{"results": [bool…]}`` or ``{"failed": "variable" | "validation", "index": i, "error": "…"}``."""
    from ..core.cel import CELError, OutputType, compile_expression

    values: dict[str, Any] = {}
    for index, (name, source) in enumerate(variables):
        try:
            expr = compile_expression(source, variables=["claims", "vars"], output=OutputType.ANY)
            values[name] = expr.evaluate({"claims": claims, "vars": dict(values)})
        except CELError as exc:
            return {"failed": "variable", "index": index, "error": str(exc)}
    results: list[bool] = []
    for index, source in enumerate(validations):
        try:
            expr = compile_expression(source, variables=["claims", "vars"], output=OutputType.BOOL)
            results.append(expr.evaluate_bool({"claims": claims, "vars": values}))
        except CELError as exc:
            return {"failed": "validation", "index": index, "error": str(exc)}
    return {"results": results}


def _answer(job: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The answer frame, and whether the worker must exit after sending it (after a MemoryError its
    heap is not worth keeping)."""
    from ..errors import ControllerError

    ident = job.get("id")
    try:
        value = run_job(job)
    except ControllerError as exc:
        return {"id": ident, "ok": False, "reason": "error", "error": str(exc)}, False
    except MemoryError:
        return {"id": ident, "ok": False, "reason": "memory", "error": "out of memory"}, True
    except RecursionError:
        return {"id": ident, "ok": False, "reason": "error", "error": "nested too deeply"}, False
    except Exception as exc:  # a bug or an unexpected library error: its type, never its text (values)
        return {"id": ident, "ok": False, "reason": "error", "error": type(exc).__name__}, False
    if not isinstance(value, bool | str | dict | list | int | float) and value is not None:
        return {"id": ident, "ok": False, "reason": "error", "error": "unsupported result type"}, False
    return {"id": ident, "ok": True, "value": value}, False


def main(argv: list[str]) -> int:
    memory, parent = int(argv[0]), int(argv[1])
    _confine(memory, parent)
    reader, writer = _private_pipes()
    from ..core import templates  # noqa: F401  (imported before ``ready``: not on the first job's clock)
    from ..core.cel import compile_expression  # noqa: F401

    writer.write(protocol.encode({"ready": True}))
    while True:
        try:
            size = protocol.length(_read_exactly(reader, protocol.HEADER.size), protocol.MAX_REQUEST)
            job = protocol.decode(_read_exactly(reader, size))
        except EOFError:
            return 0  # the controller closed the pipe: done
        except protocol.FrameError:
            return 2  # a controller bug: the pool sees the exit and starts another worker
        answer, leave = _answer(job)
        try:
            frame = protocol.encode(answer)
        except TypeError:  # orjson.JSONEncodeError included: a value JSON cannot carry
            frame = protocol.encode(
                {"id": job.get("id"), "ok": False, "reason": "error", "error": "unsupported result value"}
            )
        writer.write(frame)
        if leave:
            return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
