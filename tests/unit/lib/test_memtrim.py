"""``release_free_memory`` gives freed heap pages back: in a fresh interpreter, blocks too large for
Python's small-object allocator (so they come from glibc's heap) are allocated, every other one freed (the
free space is inside the heap, not at its top, so glibc does not give it back by itself), and the
resident size must fall by most of what was freed once it is called."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from notification_controller.lib.memtrim import release_free_memory

PROGRAM = r"""
import json
from notification_controller.lib.memtrim import release_free_memory

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

blocks = [bytearray(64_000) for _ in range(2_500)]  # ~160 MB in 64 KB blocks (under the mmap threshold)
del blocks[::2]  # ~80 MB freed, interleaved with what stays
before = rss_kib()
released = release_free_memory()
print(json.dumps({"released": released, "before": before, "after": rss_kib()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim; /proc")
def test_freed_heap_pages_go_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["released"] is True
    assert result["before"] - result["after"] > 40_000, result  # KiB: at least half of the ~80 MB freed


def test_it_says_whether_it_could() -> None:
    assert release_free_memory() is True  # glibc here; False where the C library has no malloc_trim
