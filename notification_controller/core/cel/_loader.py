"""Loads the ``cel`` extension module alone (not the package and its REPL): see ``_load_extension``."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import cel as _cel


def _load_extension() -> Any:
    """The ``cel`` package's compiled module alone.

    ``import cel`` runs the package's ``__init__``, which imports its command-line REPL and with it
    prompt_toolkit: ~100 ms and several MB for every process, CEL used or not. The extension module is all we
    need; it is registered as ``cel.cel`` so a later ``import cel`` (tests do) reuses it instead of
    initialising the Rust module twice, which panics.
    """
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("cel")  # finds the package without importing it
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(location, "cel" + suffix)
            if os.path.exists(path):
                ext_spec = importlib.util.spec_from_file_location("cel.cel", path)
                if ext_spec is None or ext_spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(ext_spec)
                sys.modules["cel.cel"] = module
                ext_spec.loader.exec_module(module)
                return module
    import cel  # an unusual layout: the package as it is

    return cel


if not TYPE_CHECKING:
    _cel = _load_extension()
