"""The shared upsert logic of the change-request comment providers (reference §4.3).

``githubpullrequestcomment``, ``gitlabmergerequestcomment`` and ``giteapullrequestcomment`` keep ONE
comment per (Provider, involved object) on the pull/merge request named by the event's ``change_request``
metadata. The comment starts with a hidden marker, ``<!-- <prefix>:<providerUID>/<Kind>/<ns>/<name> -->``,
followed by ``formatMarkdownPost(event)``. A delivery finds the authenticated identity, lists the first 100
comments (oldest first), edits the first one written by that identity that contains the marker, or creates
a new one. Each forge module supplies only its request builders and how it reads authors and ids.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from ...api.event import Event
from ...api.provider import ProviderType
from ...errors import ProviderConfigError
from ...outbound import OutboundRequest
from ..base import DeliveryContext, ProviderOptions
from ..common import Caller, json_list, str_field
from ..message import Message, with_text
from .base import change_request_number, format_markdown_post

PR_PREFIX = "flux-pr-comment-key"
MR_PREFIX = "flux-mr-comment-key"


def comment_key(provider_uid: str, event: Event) -> str:
    obj = event.involved_object
    return f"{provider_uid}/{obj.kind}/{obj.namespace}/{obj.name}"


def comment_marker(prefix: str, provider_uid: str, event: Event) -> str:
    return f"<!-- {prefix}:{comment_key(provider_uid, event)} -->"


def comment_body(prefix: str, provider_uid: str, event: Event, template: Message | None = None) -> str:
    """The marker, then Flux's Markdown block with a template's message, and its title when the template
    has one (a template without a title keeps Flux's ``Kind/namespace/name`` line)."""
    title = None
    if template is not None and template.title != Message.of(event).title:
        title = template.title
    post = format_markdown_post(with_text(event, template), title)
    return f"{comment_marker(prefix, provider_uid, event)}\n\n{post}"


def comment_id(item: dict[str, Any]) -> int | None:
    value = item.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


class ChangeRequestCommenter(abc.ABC):
    """Base of the three comment providers: validation of the UID, the body, and the upsert flow."""

    type: ClassVar[ProviderType]
    prefix: ClassVar[str] = PR_PREFIX
    noun: ClassVar[str] = "pull request comment"
    list_noun: ClassVar[str] = "pull request comments"
    uses_proxy: ClassVar[bool] = False
    uses_tls: ClassVar[bool] = True

    def __init__(self, opts: ProviderOptions) -> None:
        if not opts.uid:
            raise ProviderConfigError("provider UID cannot be empty")
        self.opts = opts
        self.provider_uid = opts.uid

    def body(self, event: Event, template: Message | None = None) -> str:
        return comment_body(self.prefix, self.provider_uid, event, template)

    def marker(self, event: Event) -> str:
        return comment_marker(self.prefix, self.provider_uid, event)

    @abc.abstractmethod
    async def authenticate(self, call: Caller) -> tuple[str, str]:
        """``(token, identity)``: the credential to send and the login the forge shows as our comments' author."""

    @abc.abstractmethod
    def list_request(self, number: int, token: str) -> OutboundRequest: ...

    @abc.abstractmethod
    def edit_request(self, number: int, comment: int, body: str, token: str) -> OutboundRequest: ...

    @abc.abstractmethod
    def create_request(self, number: int, body: str, token: str) -> OutboundRequest: ...

    def author(self, item: dict[str, Any]) -> str | None:
        return str_field(item, "user", "login")

    def find_comment(self, comments: list[dict[str, Any]], identity: str, marker: str) -> int | None:
        """The id of the first comment by ``identity`` that contains ``marker``."""
        for item in comments:
            body = str_field(item, "body") or ""
            if self.author(item) == identity and marker in body:
                found = comment_id(item)
                if found is not None:
                    return found
        return None

    async def send(self, call: Caller, request: OutboundRequest, what: str) -> Any:
        return await call.send_json(request, what=what, proxy=self.uses_proxy, tls=self.tls_enabled())

    def tls_enabled(self) -> bool:
        """Whether the Provider's TLS settings apply to this forge's API calls."""
        return self.uses_tls

    async def post(self, event: Event, ctx: DeliveryContext) -> None:
        body = self.body(event, ctx.template)
        number = change_request_number(event)
        call = Caller(ctx, self.opts)
        token, identity = await self.authenticate(call)
        comments = await self.send(call, self.list_request(number, token), f"failed to list {self.list_noun}")
        existing = self.find_comment(json_list(comments), identity, self.marker(event))
        if existing is not None:
            await self.send(
                call, self.edit_request(number, existing, body, token), f"failed to update {self.noun}"
            )
        else:
            await self.send(call, self.create_request(number, body, token), f"failed to create {self.noun}")
