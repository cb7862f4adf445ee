"""``threadBy``: a pre-send stage (it reads the thread of the key) and a post-send one (``started``
remembers the thread a delivery started); for notifiers whose ``threads`` is true (Slack's Web API with a
bot token: any address whose path ends with ``/chat.postMessage``, slack.com, slack-gov.com or a proxy,
``providers/slack.py``). With ``resolveInPlace`` the recovery's reply goes under the edited message
(``dispatch/quiet/inplace.py``), and that message's thread is then the key's thread if it had none."""

from __future__ import annotations

import dataclasses

from ...api.alert import ThreadBy
from ...core.noise import digest, object_key
from ...errors import StoreError
from ...providers.message import Thread
from ..model import Delivery, Drop
from .state import NoiseState, id_of

THREAD_TTL = 7 * 24 * 3600.0
"""How long a thread is followed: after a week without a new thread for the key, a new one starts."""


class Threads:
    name = "noise-thread"

    def __init__(self, core: NoiseState) -> None:
        self.core = core

    @staticmethod
    def _thread_key(delivery: Delivery) -> str | None:
        by = delivery.alert.spec.thread_by
        if by is None or not getattr(delivery.notifier, "threads", False):
            return None  # e.g. incoming webhooks cannot reply in a thread
        event = delivery.event
        if by is ThreadBy.REVISION:
            revision = event.metadata.get("revision", "")
            if not revision:
                return None
            subject = "revision=" + revision
        else:
            subject = "object=" + object_key(event)
        channel = delivery.options.channel
        return "noise/thread/" + digest(id_of(delivery.alert), channel, subject)

    async def __call__(self, delivery: Delivery) -> Delivery | Drop:
        key = self._thread_key(delivery)
        if key is None:
            return delivery
        try:
            entry = await self.core.state.kv_get(key)
        except StoreError as exc:
            self.core.store_failed("thread", exc)
            return delivery
        ts = entry.value.decode("utf-8", "replace") if entry is not None else ""
        return dataclasses.replace(delivery, thread=Thread(key, ts))

    async def started(self, delivery: Delivery) -> Delivery:
        thread = delivery.thread
        if thread is None or thread.ts or not thread.started:
            return delivery
        try:  # first writer wins: a concurrent first message keeps its own thread
            await self.core.state.kv_cas(thread.key, thread.started.encode(), expected=None, ttl=THREAD_TTL)
        except StoreError as exc:
            self.core.store_failed("thread", exc)
        return delivery
