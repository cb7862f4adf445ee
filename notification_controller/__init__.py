"""notification-controller: a drop-in, asyncio re-implementation of Flux's notification-controller."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version lives in pyproject.toml only (lib/buildinfo.py); read lazily so importing the package stays free.
    if name == "__version__":
        from .lib.buildinfo import version

        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
