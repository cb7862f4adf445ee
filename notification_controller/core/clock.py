"""Moved to ``lib.clock`` (below ``api/`` and ``core/``); this name stays for existing importers."""

from __future__ import annotations

from ..lib.clock import Clock as Clock
from ..lib.clock import ManualClock as ManualClock
from ..lib.clock import SystemClock as SystemClock
from ..lib.clock import go_time_string as go_time_string
from ..lib.clock import rfc3339 as rfc3339
