"""The message model: what a chat or incident provider says about an event, apart from how it says it.

Flux's providers each read the event directly; here the chat and incident providers render a ``Message``
(title, text, severity, fields), built from the event exactly as Flux formats it (``Message.of``): same
title (``kind/name.namespace``), same text (the event's message), same fields (the metadata, sorted by
key). A pre-send stage can hand a different Message to the delivery (``DeliveryContext.message``): a
template (issue 15) or a grouped notification (issue 14) then reaches every provider the same way.
A Message is plain data and round-trips through JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from ..api.event import Event


@dataclass(frozen=True, slots=True)
class Message:
    title: str
    """What the notification is about: ``kind/name.namespace`` by default."""
    text: str
    """The body: the event's message by default."""
    severity: str
    """``info``, ``error`` or ``trace`` (colours, emoji, incident severities follow it)."""
    fields: tuple[tuple[str, str], ...] = ()
    """Name/value pairs, in display order: the event's metadata sorted by key by default."""

    @classmethod
    def of(cls, event: Event) -> Message:
        obj = event.involved_object
        metadata = event.metadata
        return cls(
            f"{obj.kind.lower()}/{obj.name}.{obj.namespace}",
            event.message,
            event.severity,
            tuple((k, metadata[k]) for k in sorted(metadata)),
        )

    def field(self, name: str) -> str | None:
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "title": self.title,
                "text": self.text,
                "severity": self.severity,
                "fields": [list(f) for f in self.fields],
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Message:
        return cls.from_raw(orjson.loads(data))

    @classmethod
    def from_raw(cls, raw: dict[str, object]) -> Message:
        """From the decoded JSON of ``to_json`` (raises ``KeyError``/``TypeError``/``ValueError``)."""
        fields = raw.get("fields", ())
        if not isinstance(fields, list | tuple):
            raise TypeError("message fields must be a list")
        return cls(
            str(raw["title"]),
            str(raw["text"]),
            str(raw["severity"]),
            tuple((str(k), str(v)) for k, v in fields),
        )


def with_text(event: Event, message: Message | None) -> Event:
    """The event a type that forwards Flux's event sends: ``message`` replaced by a template's text."""
    if message is None or message.text == event.message:
        return event
    return event.model_copy(update={"message": message.text})


@dataclass(slots=True)
class Thread:
    """The chat conversation a delivery belongs to (``spec.threadBy``). ``ts`` names the thread's first
    message when there is one; a notifier that starts a thread sets ``started`` to the new message's id
    (the dispatcher then remembers it in the store)."""

    key: str
    ts: str = ""
    started: str = ""


@dataclass(slots=True)
class Edit:
    """``spec.resolveInPlace`` (docs/silences.md): a delivery that may edit an earlier chat message.

    With a ``target`` (Slack's ``ts`` with the ``channel`` ID chat.postMessage answered, or a Discord
    message id) the notifier edits that message to say the object recovered (``after``: how long it
    failed, e.g. ``12m``; ``thread``: the thread the message was posted in, where a ``threadBy`` reply
    goes); when the edit fails it posts a new message instead and says why in ``fallback`` (a
    ``FailureReason`` value). Without a target it posts as usual and reports the new message in ``posted``
    and ``posted_channel`` (the stage then remembers it in the store); ``rejected`` is set when the
    answer's id was not one (too long, not a string, not the expected characters)."""

    key: str
    target: str = ""
    channel: str = ""
    thread: str = ""
    after: str = ""
    posted: str = ""
    posted_channel: str = ""
    edited: bool = False
    fallback: str = ""
    rejected: bool = False
