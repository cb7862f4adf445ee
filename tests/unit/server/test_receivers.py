"""server/receivers.py without a socket: the body decoder (gzip/deflate with the cap on the decompressed bytes,
issue 29 item 5), the redaction of hook paths, and the prepared hooks (made once per Receiver and Secret
version, rebuilt when either is replaced, dropped when the Receiver goes)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.server.receivers import (
    BodyTooLarge,
    ReceiverServerSettings,
    UndecodableBody,
    create_receiver_endpoint,
    decode_body,
    redact_hook_paths,
)
from tests.support.memory_cluster import MemoryCluster
from tests.support.receiver_kit import make_receiver

LIMIT = 4096


@given(st.binary(max_size=2 * LIMIT), st.sampled_from([b"gzip", b"deflate", b" GZip ", b"Deflate"]))
def test_compressed_bodies_round_trip_up_to_the_cap(data: bytes, encoding: bytes) -> None:
    body = gzip.compress(data) if b"gzip" in encoding.lower() else zlib.compress(data)
    if len(data) <= LIMIT:
        assert decode_body(body, encoding, LIMIT) == data
    else:
        with pytest.raises(BodyTooLarge):
            decode_body(body, encoding, LIMIT)


@given(st.binary(max_size=3 * LIMIT), st.sampled_from([b"gzip", b"deflate"]))
def test_any_body_decodes_within_the_cap_or_is_refused(body: bytes, encoding: bytes) -> None:
    """Whatever the bytes: at most ``LIMIT`` bytes out, or one of the two refusals (413, 400); never another
    exception (which would be a 500)."""
    try:
        out = decode_body(body, encoding, LIMIT)
    except (BodyTooLarge, UndecodableBody):
        return
    assert len(out) <= LIMIT


def test_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(b"\0" * (64 * LIMIT * 1024), compresslevel=9)  # 256 MiB in ~250 KB
    with pytest.raises(BodyTooLarge):
        decode_body(bomb, b"gzip", LIMIT)
    members = gzip.compress(b"\0" * LIMIT) * 2  # each at the cap, together over it
    with pytest.raises(BodyTooLarge):
        decode_body(members, b"gzip", LIMIT)
    assert decode_body(gzip.compress(b"a") * 3, b"gzip", LIMIT) == b"aaa"


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (b"{}", b"gzip"),  # not gzip
        (gzip.compress(b"{}" * 100)[:-9], b"gzip"),  # truncated
        (zlib.compress(b"{}" * 100)[:-6], b"deflate"),
        (b"{}", b"br"),  # not decodable here (as aiohttp without Brotli)
        (b"{}", b"zstd"),
    ],
)
def test_undecodable_bodies(body: bytes, encoding: bytes) -> None:
    with pytest.raises(UndecodableBody):
        decode_body(body, encoding, LIMIT)


def test_other_codings_are_left_alone() -> None:
    for encoding in (b"identity", b"", b"x-custom", b"gzip, identity"):
        assert decode_body(b"{}", encoding, LIMIT) == b"{}"


def test_raw_deflate_as_some_clients_send_it() -> None:
    wrapped = zlib.compress(b'{"a": 1}')
    assert decode_body(wrapped[2:-4], b"deflate", LIMIT) == b'{"a": 1}'


def test_redact_hook_paths() -> None:
    path = "/hook/" + "ab12cd34" * 8
    assert redact_hook_paths(f"POST {path}?x=1 HTTP/1.1") == "POST /hook/ab12cd34… HTTP/1.1"


async def test_hooks_are_prepared_once_per_version_and_bounded() -> None:
    store = ObjectStore()
    store.mark_synced()
    endpoint = create_receiver_endpoint(
        store,
        MemoryCluster(),
        settings=ReceiverServerSettings(),
        registry=CollectorRegistry(),
        clock=ManualClock(),
    )
    try:
        receiver, secret = make_receiver("github")
        assert secret is not None
        store.upsert(receiver)
        store.upsert(secret)
        path = str(receiver.status.webhook_path)
        hook = endpoint.hook(path)
        assert hook is not None and hook.current and hook.ready and hook.token_error is None
        assert endpoint.hook(path) is hook, "prepared once, not per request"
        # the token rotated in the Secret: the same path is no longer the current one
        store.upsert(secret.model_copy(update={"data": {"token": b"rotated"}}))
        rotated = endpoint.hook(path)
        assert rotated is not None and rotated is not hook and not rotated.current
        # the Secret gone: Flux's 400 message, prepared once
        store.delete("Secret", secret.metadata.namespace, secret.metadata.name)
        missing = endpoint.hook(path)
        assert missing is not None and missing.token_error is not None
        assert "not found" in str(missing.token_error)
        # the Receiver gone: no hook, nothing kept
        store.delete("Receiver", receiver.metadata.namespace, receiver.metadata.name)
        assert endpoint.hook(path) is None
        assert endpoint._hooks == {}
        # many Receivers come and go: the prepared hooks go with them
        for i in range(50):
            other, other_secret = make_receiver("generic", name=f"r{i}")
            assert other_secret is not None
            store.upsert(other_secret)
            store.upsert(other)
            assert endpoint.hook(str(other.status.webhook_path)) is not None
            store.delete("Receiver", other.metadata.namespace, other.metadata.name)
        assert endpoint._hooks == {}
    finally:
        await endpoint.close()
