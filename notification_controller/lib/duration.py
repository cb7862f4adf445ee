"""Go ``time.Duration`` strings (``5m``, ``1h30m``, ``750ms``) and ISO 8601 durations (``PT5S``).

Flux's CRDs validate durations with ``^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$`` (timeouts without ``h``);
we parse exactly that grammar, and format durations the way Go prints them (``10m0s``).
"""

from __future__ import annotations

import re

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
TIMEOUT_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$"

_DURATION_RE = re.compile(DURATION_PATTERN)
_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_ISO_RE = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(value: str) -> float:
    """Parse a Go-style duration into seconds. Raises ``ValueError`` with a user-facing message."""
    text = value.strip()
    if text == "0":
        return 0.0
    if not _DURATION_RE.match(text):
        raise ValueError(f"invalid duration {value!r}: expected e.g. '30s', '5m', '1h30m'")
    return sum(float(num) * _UNITS[unit] for num, unit in _PART_RE.findall(text))


def parse_iso_or_go_duration(value: str) -> float:
    """Accept ISO 8601 (``PT5S``) or Go-style (``5s``) durations; used by hook timeouts."""
    text = value.strip()
    match = _ISO_RE.match(text)
    if match and text not in ("P", "PT"):
        parts = match.groupdict()
        return (
            float(parts["d"] or 0) * 86400
            + float(parts["h"] or 0) * 3600
            + float(parts["m"] or 0) * 60
            + float(parts["s"] or 0)
        )
    return parse_duration(text)


def format_duration(seconds: float) -> str:
    """Format seconds the way Go's ``Duration.String`` does (``10m0s``, ``1h0m0s``, ``750ms``)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    hours, rem = divmod(seconds, 3600)
    minutes, secs = divmod(rem, 60)
    sec_text = f"{secs:g}s" if secs != int(secs) else f"{int(secs)}s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{sec_text}"
    if minutes:
        return f"{int(minutes)}m{sec_text}"
    return sec_text
