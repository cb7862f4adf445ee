"""Moved to ``lib.duration`` (below ``api/`` and ``core/``); this name stays for existing importers."""

from __future__ import annotations

from ..lib.duration import _DURATION_RE as _DURATION_RE
from ..lib.duration import _ISO_RE as _ISO_RE
from ..lib.duration import _PART_RE as _PART_RE
from ..lib.duration import _UNITS as _UNITS
from ..lib.duration import DURATION_PATTERN as DURATION_PATTERN
from ..lib.duration import TIMEOUT_PATTERN as TIMEOUT_PATTERN
from ..lib.duration import format_duration as format_duration
from ..lib.duration import parse_duration as parse_duration
from ..lib.duration import parse_iso_or_go_duration as parse_iso_or_go_duration
