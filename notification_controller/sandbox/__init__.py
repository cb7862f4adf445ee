"""Tenant expressions (Alert ``spec.template``/``spec.filter``, Provider ``bodyTemplate``/``commitStatusExpr``,
Receiver filters, generic-oidc claims) evaluated in worker processes bounded in time and memory
(``pool.py``; the worker: ``worker.py``; the pipe protocol: ``protocol.py``)."""

from __future__ import annotations

from ..settings import SandboxSettings
from .pool import ExpressionFailed, SandboxFailure, SandboxPool, SandboxReason

__all__ = ["ExpressionFailed", "SandboxFailure", "SandboxPool", "SandboxReason", "SandboxSettings"]
