"""Give the memory start-up freed back to the operating system (glibc's ``malloc_trim(0)``).

Start-up allocates and drops a lot: imports, the manifests or the first LIST of every kind, their YAML and
JSON, the pydantic validation of each object. Python's small-object allocator returns an arena to the OS
once it is empty, but the larger blocks come from glibc's heap, and glibc keeps the free pages inside its
heap resident until something trims them. ``malloc_trim(0)`` releases every whole free page
(``madvise(MADV_DONTNEED)`` inside the heap since glibc 2.8), so the resident size at ready is what the
controller holds, not what it once held.

Measured (issue 29, RSS at ready with the bench's 10-Alert local manifests, two runs each): 62.3 MB
without, 60.9 MB with; the call takes well under a millisecond there. It is called twice in the life of a
process — after the first load (``App.start``) and once the informers have listed every kind
(``kube/informer.py``) — never on a hot path. ``ctypes`` is the standard library's; without glibc (musl,
macOS) it does nothing and says so (``False``). ``tests/unit/lib/test_memtrim.py`` checks that it still
releases freed heap pages on this platform.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:  # the symbols of the process itself, the C library's among them (no ldconfig subprocess)
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_free_memory() -> bool:
    """``malloc_trim(0)``; whether this C library has it (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
