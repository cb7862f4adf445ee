"""An ``EventSink`` that only remembers Kubernetes Events (the dispatcher and hooks tests read them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from notification_controller.objects.base import ObjectRef


@dataclass
class LogSink:
    events: list[tuple[ObjectRef, str, str, str]] = field(default_factory=list)

    async def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.events.append((ref, type_, reason, message))
