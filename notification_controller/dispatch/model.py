"""Values that flow through the pipeline."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..api.alert import Alert
from ..api.event import Event
from ..api.provider import Provider
from ..providers.base import Notifier, ProviderOptions
from ..store.base import ObjectRef


@dataclass(frozen=True)
class Notification:
    """One event on its way to one Alert's Provider."""

    event: Event
    alert: Alert
    provider: Provider
    options: ProviderOptions
    notifier: Notifier

    @property
    def provider_type(self) -> str:
        return str(self.provider.spec.type)

    @property
    def alert_ref(self) -> ObjectRef:
        return ObjectRef.of(self.alert)


@dataclass(frozen=True)
class Drop:
    """A stage decided this notification must not be sent. ``reason`` is a metric label."""

    reason: str
    message: str = ""
    warn: bool = False  # emit a Warning Kubernetes Event on the Alert
    provider_type: str = ""  # metric label when the drop happens before a Notification exists


class Stage(Protocol):
    """A pipeline step between preparation and delivery: return the (possibly new) notification or a Drop."""

    name: str

    async def __call__(self, notification: Notification) -> Notification | Drop: ...


class EventSink(Protocol):
    """Where Kubernetes Events about our objects go (the app wires a spam-controlled recorder)."""

    async def emit(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None: ...


@dataclass
class LogSink:
    """An EventSink that only remembers events (local mode without a cluster logs them instead)."""

    events: list[tuple[ObjectRef, str, str, str]] = field(default_factory=list)

    async def emit(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.events.append((ref, type_, reason, message))
