"""``alertmanager``: post one firing alert to Prometheus Alertmanager's ``/api/v2/alerts`` (reference §4.1).

Body: a JSON array with one alert ``{"status": "firing", "labels", "annotations", "startsAt", "endsAt"}``.
Labels are the metadata (without ``summary``) plus ``alertname`` = ``Flux<Kind><Title(reason)>``,
``severity``, ``reason``, ``kind``, ``name``, ``namespace`` and ``reportingcontroller``; annotations
carry the message and the metadata ``summary``. ``endsAt`` is Go's zero time (a non-pointer field, so
always emitted): Alertmanager then resolves the alert after its ``resolve_timeout``.

Auth: ``Authorization: Bearer <token>`` when a token is set; basic auth when both username and
password are set — if both are configured, basic auth wins (Flux's last request modifier overwrites
the header; reference §9 keeps that quirk).

``Title`` reproduces ``golang.org/x/text/cases.Title(language.Und)``: the first cased letter of each
word upper-cased, the rest lower-cased (``ApplySucceeded`` → ``Applysucceeded``). Word breaks are
approximated by "not a letter, digit, ``_``, apostrophe, ``.``, ``:`` or ``·``", which covers the
CamelCase reasons Flux controllers emit.
"""

from __future__ import annotations

import base64
import unicodedata
from datetime import datetime
from typing import ClassVar

from ..api.event import Event
from ..api.provider import ProviderType
from ..lib.clock import rfc3339
from ..lib.gojson import GoStruct, dumps
from ..outbound import OutboundRequest
from .base import HTTPNotifier, ProviderOptions, json_headers
from .message import Message
from .validation import require_url

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
_WORD_JOINERS = frozenset("_'’.:·")


def go_rfc3339(moment: datetime | None) -> str:
    return rfc3339(moment) if moment is not None else GO_ZERO_TIME


def _is_cased(ch: str) -> bool:
    return unicodedata.category(ch) in ("Lu", "Ll", "Lt")


def go_title(text: str) -> str:
    """``cases.Title(language.Und).String(text)`` for the inputs Flux sees (see the module docstring)."""
    out: list[str] = []
    between_words = True
    for ch in text:
        if between_words:
            if _is_cased(ch):
                out.append(ch.title())
                between_words = False
            else:
                out.append(ch)
        elif not (ch.isalnum() or ch in _WORD_JOINERS):
            out.append(ch)
            between_words = True
        else:
            out.append(ch.lower())
    return "".join(out)


def alertmanager_payload(event: Event, message: Message | None = None) -> list[GoStruct]:
    """Flux's alert; a template's ``message`` supplies the ``message`` annotation and a ``title`` one."""
    obj = event.involved_object
    annotations = {"message": message.text if message else event.message}
    if message is not None:
        annotations["title"] = message.title
    labels = dict(event.metadata)
    if "summary" in labels:
        annotations["summary"] = labels.pop("summary")
    labels["alertname"] = "Flux" + obj.kind + go_title(event.reason)
    labels["severity"] = event.severity
    labels["reason"] = event.reason
    labels["kind"] = obj.kind
    labels["name"] = obj.name
    labels["namespace"] = obj.namespace
    labels["reportingcontroller"] = event.reporting_controller
    alert = GoStruct(
        status="firing",
        labels=labels,
        annotations=annotations,
        startsAt=go_rfc3339(event.timestamp),
        endsAt=GO_ZERO_TIME,
    )
    return [alert]


class AlertmanagerNotifier(HTTPNotifier):
    type: ClassVar[ProviderType] = ProviderType.ALERTMANAGER

    def __init__(self, opts: ProviderOptions) -> None:
        super().__init__(opts)
        require_url(opts.address, what="Alertmanager URL")

    def build_request(self, event: Event, message: Message | None = None) -> OutboundRequest:
        extra: dict[str, str] = {}
        if self.opts.username and self.opts.password_text:
            pair = f"{self.opts.username}:{self.opts.password_text}".encode()
            extra["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        elif self.opts.token_text:
            extra["Authorization"] = f"Bearer {self.opts.token_text}"
        body = dumps(alertmanager_payload(event, message))
        return OutboundRequest("POST", self.opts.address, json_headers(extra), body)
