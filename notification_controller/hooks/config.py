"""Read the controller-wide hooks file (``--hooks-config FILE``), with errors that name the field.

The file is YAML: ``hooks: [ {<a Hook>, kinds: [Alert, Provider, Receiver]} ]`` (``kinds`` defaults to all
three). A missing, unreadable or invalid file is a ``ConfigError``: the controller refuses to start
rather than run without the hooks an admin asked for.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from ..api.hooks import HooksConfig
from ..errors import ConfigError


def load_hooks_config(path: Path) -> HooksConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read hooks config {path}: {type(exc).__name__}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"hooks config {path}: invalid YAML{where}") from None
    if data is None:
        return HooksConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"hooks config {path}: expected a mapping with a 'hooks' list")
    try:
        return HooksConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"hooks config {path}: {field}: {first.get('msg', 'invalid')}{more}") from None
