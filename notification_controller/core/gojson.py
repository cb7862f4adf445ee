"""Moved to ``lib.gojson`` (below ``api/`` and ``core/``); this name stays for existing importers."""

from __future__ import annotations

from ..lib.gojson import _BYTE_ESCAPES as _BYTE_ESCAPES
from ..lib.gojson import _ESCAPES as _ESCAPES
from ..lib.gojson import _NEEDS_ESCAPE as _NEEDS_ESCAPE
from ..lib.gojson import _SCALARS as _SCALARS
from ..lib.gojson import GoStruct as GoStruct
from ..lib.gojson import _dumps_stdlib as _dumps_stdlib
from ..lib.gojson import _sort_maps as _sort_maps
from ..lib.gojson import dumps as dumps
