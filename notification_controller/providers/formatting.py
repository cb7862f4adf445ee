"""Formatting helpers shared by providers (reference §4.0 "Common formatting helpers")."""

from __future__ import annotations

import unicodedata

from ..api.event import Event

__all__ = ["cut", "format_name_and_description", "split_camelcase"]


def _char_class(ch: str) -> int:
    category = unicodedata.category(ch)
    if category == "Ll":
        return 1
    if category == "Lu":
        return 2
    if category == "Nd":
        return 3
    return 4


def split_camelcase(src: str) -> list[str]:
    """Go's ``camelcase.Split`` (fatih/camelcase), as Flux vendors it.

    Runs of the same class (lower, upper, digit, other) form words, then an upper→lower boundary moves
    the last upper-case rune to the next word: ``PDFLoader`` → ``["PDF", "Loader"]``. A string that is not
    valid UTF-8 (lone surrogates in Python) is returned whole.
    """
    try:
        src.encode("utf-8")
    except UnicodeEncodeError:
        return [src]
    runs: list[list[str]] = []
    last = 0
    for ch in src:
        cls = _char_class(ch)
        if cls == last and runs:
            runs[-1].append(ch)
        else:
            runs.append([ch])
        last = cls
    for i in range(len(runs) - 1):
        if _char_class(runs[i][0]) == 2 and _char_class(runs[i + 1][0]) == 1:
            runs[i + 1].insert(0, runs[i].pop())
    return ["".join(run) for run in runs if run]


def format_name_and_description(event: Event) -> tuple[str, str]:
    """``(lower(kind/name), lower(join(split_camelcase(reason), " ")))``, e.g. ``ApplySucceeded`` → ``apply succeeded``."""
    obj = event.involved_object
    name = f"{obj.kind}/{obj.name}".lower()
    description = " ".join(split_camelcase(event.reason)).lower()
    return name, description


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, an ellipsis marking a cut (a service's documented field limit:
    Pushover's 250-character title and 1024-character message, Mattermost's post)."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
