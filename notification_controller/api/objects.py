"""Turn a manifest (a dict from YAML or the API server) into a typed object, with precise errors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ManifestError
from . import GROUP
from .alert import Alert
from .common import Secret
from .messages import describe_error_of, field_path, suggestion
from .provider import Provider
from .receiver import Receiver
from .silence import SILENCE_API_VERSION, Silence

Object = Alert | Provider | Receiver | Secret | Silence
Model = type[Alert] | type[Provider] | type[Receiver] | type[Silence]

_KINDS: dict[tuple[str, str], Model] = {
    (f"{GROUP}/v1beta3", "Alert"): Alert,
    (f"{GROUP}/v1beta3", "Provider"): Provider,
    (f"{GROUP}/v1", "Receiver"): Receiver,
    (SILENCE_API_VERSION, "Silence"): Silence,
}


def supported_kind(raw: dict[str, Any]) -> bool:
    key = (raw.get("apiVersion"), raw.get("kind"))
    return key in _KINDS or key == ("v1", "Secret")


def parse_object(
    raw: Any,
    *,
    source: str = "",
    index: int = 0,
    default_namespace: str = "default",
    receiver_rules: bool = True,
) -> Object:
    """Parse a manifest. Raises ``ManifestError`` naming the source, document index and field.

    ``receiver_rules=False`` (the informers) leaves the Receiver CRD's cross-field CEL rules to the Receiver
    reconciler: an API server < 1.25 stores such a Receiver, and Flux reports it as a terminal
    ``ValidationFailed`` (Ready=False, Stalled=True), which only a reconciler that sees the object can do.
    """
    if not isinstance(raw, dict):
        raise ManifestError("document is not a mapping", source=source, index=index)
    api_version, kind = raw.get("apiVersion"), raw.get("kind")
    metadata = raw.get("metadata")
    if isinstance(metadata, dict) and not metadata.get("namespace"):
        raw = {**raw, "metadata": {**metadata, "namespace": default_namespace}}
    model: Model | None = None
    try:
        if (api_version, kind) == ("v1", "Secret"):
            return Secret.from_manifest(raw)
        model = _KINDS.get((str(api_version), str(kind)))
        if model is None:
            kinds = sorted({k for _, k in _KINDS})
            hint = "" if kind in kinds else suggestion(kind, kinds)  # Alertt, not a wrong version of Alert
            raise ManifestError(
                f"unsupported apiVersion/kind {api_version}/{kind}{hint}",
                source=source,
                index=index,
                field="kind",
            )
        obj = model.model_validate(raw)
    except ValidationError as exc:
        # every error, not the first (issue 25 item 4): the first one's field leads, the others name theirs
        first, *rest = exc.errors()
        shape: type[BaseModel] = model or Secret
        message = "; ".join(
            [describe_error_of(shape, first)]
            + [f"{field_path(e.get('loc', ()))}: {describe_error_of(shape, e)}" for e in rest]
        )
        raise ManifestError(
            message, source=source, index=index, field=field_path(first.get("loc", ()))
        ) from None
    except ValueError as exc:
        raise ManifestError(str(exc), source=source, index=index) from None
    if isinstance(obj, Provider) or (isinstance(obj, Receiver | Silence) and receiver_rules):
        errors = obj.spec.validation_errors()
        if errors:
            raise ManifestError("; ".join(errors), source=source, index=index, field="spec")
    return obj
