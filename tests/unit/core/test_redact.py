"""Masking of Secret values (``core.redact``): whole values only, encoded forms, incremental updates.

* Issue 16 "Redaction must not wreck log lines": a Secret holding ``flux`` turned ``flux-system`` into
  ``*****-system``. Values are masked only where they stand whole, and only from ``MIN_LEN`` characters.
* Issue 11 item 8: an echoed request shows credentials base64-encoded (Basic, Proxy-Authorization),
  percent-encoded or JSON-escaped; those forms are masked too.
* Issue 11 item 3: every Secret change used to rebuild one regular expression of all values (quadratic
  start-up, ``re``'s cache holding every intermediate pattern). An update now touches only the values of
  the Secret that changed.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notification_controller import logsetup
from notification_controller.api.common import ObjectMeta, Secret
from notification_controller.core.redact import (
    MASK,
    MIN_LEN,
    Redactor,
    SecretValue,
    basic_credentials,
    credential_echoes,
    mask_token,
    mask_values,
    redact_url,
    redact_urls_in,
    secret_mask_values,
)
from notification_controller.objects.base import ObjectStore, secret_data

TOKEN = "tok3n-4a8f1c2e9b"
PASSWORD = "pa55-w0rd-c4n4ry"


def redactor_with(**data: str) -> Redactor:
    redactor = Redactor()
    redactor.set_secret(("ns", "s"), {k: v.encode() for k, v in data.items()})
    return redactor


# ---- whole values only (issue 16) ---------------------------------------------------------------------
def test_a_short_secret_value_leaves_names_alone() -> None:
    redactor = redactor_with(token="flux", password=PASSWORD)
    line = "Alert flux-system/on-call: flux reconcile kustomization flux-system --with-source"
    assert redactor(line) == line


@pytest.mark.parametrize(
    "text",
    [
        "flux-system-token-x is a name",  # the value is the start of a longer name
        "name my-flux-system-token",  # ... the end of one
        "host flux-system-token.example.com",  # ... the first label of a host
        "host a.flux-system-token",  # ... the last one
        "word flux-system-tokens",  # ... a prefix of a longer word
        "word _flux-system-token",
    ],
)
def test_a_value_inside_a_larger_name_or_word_is_not_masked(text: str) -> None:
    assert redactor_with(token="flux-system-token")(text) == text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"token {TOKEN}", f"token {MASK}"),
        (f"token {TOKEN}.", f"token {MASK}."),  # end of a sentence
        (f"https://user:{TOKEN}@host/", f"https://user:{MASK}@host/"),  # userinfo
        (f"/hook?token={TOKEN}&x=1", f"/hook?token={MASK}&x=1"),  # query
        (f'{{"token":"{TOKEN}"}}', f'{{"token":"{MASK}"}}'),  # JSON
        (f"Authorization: Bearer {TOKEN}\r\n", f"Authorization: Bearer {MASK}\r\n"),
        (f"path /services/{TOKEN}/x", f"path /services/{MASK}/x"),
        (f"({TOKEN}), '{TOKEN}'", f"({MASK}), '{MASK}'"),
        (TOKEN, MASK),
    ],
)
def test_a_whole_value_is_masked_between_separators(text: str, masked: str) -> None:
    assert redactor_with(token=TOKEN)(text) == masked


def test_values_that_start_or_end_with_punctuation_are_masked_wherever_they_stand() -> None:
    redactor = redactor_with(token="-----BEGIN KEY-----\nabc\n-----END KEY-----", password="p@ss!word#")
    assert redactor("key:-----BEGIN KEY-----\nabc\n-----END KEY-----x") == f"key:{MASK}x"
    assert redactor("pw=p@ss!word#1") == f"pw={MASK}1"


def test_the_longest_value_wins_and_overlaps_are_masked_once() -> None:
    redactor = Redactor(["abcdefgh", "abcdefgh-ijkl", "ijkl-mnopqrst"])
    assert redactor("x abcdefgh-ijkl y") == f"x {MASK} y"
    assert redactor("abcdefgh abcdefgh-ijkl-mnopqrst") == f"{MASK} abcdefgh-ijkl-mnopqrst"


def test_minimum_length_and_non_secret_keys() -> None:
    assert MIN_LEN == 8
    redactor = redactor_with(
        token="seven77", username="operator-bot", namespace="flux-system", **{"ca.crt": "public-ca-cert"}
    )
    text = "seven77 operator-bot flux-system public-ca-cert"
    assert redactor(text) == text
    # Encoded forms of a short value stay masked: base64 never reads as a word.
    assert redactor(basic_credentials("operator-bot", "seven77")) == MASK


def test_header_values_of_a_headers_key_are_masked() -> None:
    redactor = redactor_with(headers=f"X-Api-Key: {TOKEN}\nAuthorization: 'Bearer {PASSWORD}'\n")
    assert redactor(f"key {TOKEN} auth {PASSWORD}") == f"key {MASK} auth {MASK}"


@given(
    st.text(min_size=MIN_LEN, max_size=40).filter(lambda s: s.strip() == s),
    st.text(max_size=30),
    st.sampled_from([" ", "\n", ":", "@", "/", "=", "&", '"', "'", ",", ";", "(", ")", "[", "]", "<", ">"]),
)
def test_a_known_value_never_survives_between_separators(secret: str, noise: str, sep: str) -> None:
    redactor = Redactor([secret])
    assert redactor(sep + secret + sep) == sep + MASK + sep
    if secret not in noise:
        assert secret not in redactor(noise + sep + secret + sep + noise)


@given(st.text(max_size=200))
def test_text_without_secrets_is_unchanged(text: str) -> None:
    redactor = Redactor([TOKEN, PASSWORD, "https://hooks.slack.com/services/T0/B0/XXXX"])
    if TOKEN not in text and PASSWORD not in text and "hooks.slack" not in text:
        assert redactor(text) == text


def test_mask_values_masks_a_providers_own_short_values_as_whole_words() -> None:
    """A Provider's own Secret values in its status: short ones too (Flux masks its token), whole only."""
    assert (
        mask_values("token flux rejected by flux-system", ["flux"]) == f"token {MASK} rejected by flux-system"
    )
    assert mask_values("abc", ["ab"]) == "abc"  # under 4 characters: never


# ---- encoded forms (issue 11 item 8) ------------------------------------------------------------------
def test_basic_credentials_of_username_and_password_are_masked() -> None:
    redactor = redactor_with(username="alice", password=PASSWORD)
    header = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert redactor(f"echo: Authorization: {header}") == f"echo: Authorization: Basic {MASK}"


def test_proxy_userinfo_is_masked_in_every_form() -> None:
    redactor = redactor_with(address=f"http://proxy-user:{quote('p@ss word/1', safe='')}@proxy.internal:3128")
    sent = basic_credentials("proxy-user", "p@ss word/1")  # what aiohttp puts in Proxy-Authorization
    text = f"Proxy-Authorization: Basic {sent}; user proxy-user:p%40ss%20word%2F1@proxy; pw p@ss word/1"
    masked = redactor(text)
    assert sent not in masked and "p%40ss%20word%2F1" not in masked and "p@ss word/1" not in masked


@pytest.mark.parametrize(
    "form",
    [
        base64.b64encode(TOKEN.encode()).decode(),
        base64.b64encode(f":{TOKEN}".encode()).decode(),  # Azure DevOps' Basic ":PAT"
        base64.b64encode(f"{TOKEN}:".encode()).decode(),
        base64.urlsafe_b64encode(TOKEN.encode()).decode().rstrip("="),
        quote(TOKEN + "/+ x", safe=""),
    ],
)
def test_encoded_forms_of_a_single_token_are_masked(form: str) -> None:
    value = TOKEN + "/+ x" if "%" in form else TOKEN
    redactor = Redactor()
    redactor.set_source("t", secret_mask_values({"token": value.encode()}) if " " not in value else [form])
    assert redactor(f"echo {form} end") == f"echo {MASK} end"


def test_json_escaped_webhook_address_is_masked() -> None:
    address = "https://hooks.slack.com/services/T0/B0/XXXXXXXX"
    redactor = redactor_with(address=address)
    echoed = json.dumps({"url": address}).replace("/", "\\/")
    assert "XXXXXXXX" not in redactor(echoed)


def test_credential_echoes_covers_what_was_sent() -> None:
    sent = {"Authorization": "Basic " + basic_credentials("u", PASSWORD), "Accept": "application/json"}
    forms = credential_echoes([TOKEN], sent, f"http://proxy-user:{PASSWORD}@127.0.0.1:3128")
    assert basic_credentials("u", PASSWORD) in forms and f"u:{PASSWORD}" in forms and PASSWORD in forms
    assert basic_credentials("proxy-user", PASSWORD) in forms
    assert base64.b64encode(TOKEN.encode()).decode() in forms
    assert "application/json" not in forms
    assert forms == sorted(forms, key=len, reverse=True)


# ---- incremental updates (issue 11 item 3) ------------------------------------------------------------
def test_updates_replace_only_that_secrets_values() -> None:
    redactor = Redactor()
    redactor.set_secret(("ns", "a"), {"token": b"old-token-aaaa"})
    redactor.set_secret(("ns", "b"), {"token": b"other-token-bbbb"})
    redactor.set_secret(("ns", "a"), {"token": b"new-token-aaaa"})
    assert redactor("old-token-aaaa new-token-aaaa other-token-bbbb") == f"old-token-aaaa {MASK} {MASK}"
    redactor.set_secret(("ns", "b"), None)
    assert redactor("other-token-bbbb") == "other-token-bbbb"


def test_a_value_two_secrets_share_stays_masked_until_both_drop_it() -> None:
    redactor = Redactor()
    redactor.set_secret(("ns", "a"), {"token": TOKEN.encode()})
    redactor.set_secret(("other", "a"), {"token": TOKEN.encode()})
    redactor.set_secret(("ns", "a"), None)
    assert redactor(TOKEN) == MASK
    redactor.set_secret(("other", "a"), None)
    assert redactor(TOKEN) == TOKEN
    assert len(redactor) == 0 and not redactor._probe and not redactor._lengths


class CountingRedactor(Redactor):
    """Counts the index operations (the unit of work of an update)."""

    def __init__(self) -> None:
        self.operations = 0
        super().__init__()

    def _hold(self, value: str) -> None:
        self.operations += 1
        super()._hold(value)

    def _release(self, value: str) -> None:
        self.operations += 1
        super()._release(value)


def test_an_update_costs_the_size_of_the_change_not_of_all_secrets() -> None:
    """The old redactor recompiled every value on every change; now a change touches its own values."""
    redactor = CountingRedactor()
    for i in range(3000):
        redactor.set_secret(("ns", f"s{i}"), {"token": f"token-{i:06d}-abcdef".encode()})
    per_secret = len(secret_mask_values({"token": b"token-000001-abcdef"}))
    assert redactor.operations == 3000 * per_secret
    redactor.operations = 0
    redactor.set_secret(("ns", "s42"), {"token": b"rotated-token-0042"})
    # the old forms released, the new ones held: nothing else
    assert redactor.operations == per_secret + len(secret_mask_values({"token": b"rotated-token-0042"}))
    redactor.operations = 0
    redactor.set_secret(("ns", "s43"), {"token": b"token-000043-abcdef"})  # unchanged (a resync)
    assert redactor.operations == 0


def test_updates_do_not_grow_the_re_cache() -> None:
    """``re`` cached every intermediate all-values pattern (hundreds of MB at a few hundred Secrets)."""
    redactor = Redactor()
    re.purge()
    for i in range(600):
        redactor.set_secret(("ns", f"s{i}"), {"token": f"token-{i:06d}-abcdef".encode()})
        redactor(f"line with token-{i:06d}-abcdef")
    assert len(re._cache) < 10  # type: ignore[attr-defined]


def test_the_store_change_carries_the_secret_data() -> None:
    store = ObjectStore()
    redactor = Redactor()
    store.subscribe(lambda change: redactor.set_secret((change.namespace, change.name), secret_data(change)))
    meta = ObjectMeta(name="s", namespace="ns")
    store.upsert(Secret(metadata=meta, data={"token": TOKEN.encode()}))
    assert redactor(TOKEN) == MASK
    store.upsert(Secret(metadata=meta, data={"token": PASSWORD.encode()}))
    assert redactor(f"{TOKEN} {PASSWORD}") == f"{TOKEN} {MASK}"
    store.delete("Secret", "ns", "s")
    assert redactor(PASSWORD) == PASSWORD


# ---- the log filter ----------------------------------------------------------------------------------
@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_log_lines_stay_readable_and_structured_fields_are_masked(restore_logging: None) -> None:
    stream = io.StringIO()
    redactor = redactor_with(token="flux", password=PASSWORD)
    logsetup.configure("info", "json", redactor, stream)
    log = logging.getLogger("notification_controller.test")
    log.error(
        "Reconciler error in %s",
        "flux-system",
        extra=logsetup.fields(name="alerts", namespace="flux-system", error=ValueError(f"bad {PASSWORD}")),
    )
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["msg"] == "Reconciler error in flux-system"
    assert record["namespace"] == "flux-system"
    assert record["error"] == f"bad {MASK}"
    assert PASSWORD not in line


# ---- tokens as Flux masks them, values that never print, URLs (from the old test_core_logic) -----------
def test_mask_token_reproduces_flux_quirk() -> None:
    # §9: the regexp is QuoteMeta(token)+"*", so the last character may repeat or be absent ("ab" too)
    assert mask_token("token abc and abcc and ab and a", "abc") == "token ***** and ***** and ***** and a"
    assert mask_token("nothing", "  ") == "nothing"


def test_secret_value_never_prints() -> None:
    secret = SecretValue("hunter2-canary")
    assert "hunter2" not in str(secret) + repr(secret) + f"{secret}" + str([secret])
    assert secret.reveal() == "hunter2-canary"


def test_redact_url_and_urls_in_text() -> None:
    assert redact_url("https://hooks.slack.com/services/T0/B0/XXXX") == "https://hooks.slack.com/***"
    assert redact_url("https://user:pass@example.com:8443/") == "https://example.com:8443"
    text = redact_urls_in("Cannot connect to host https://u:p@h.example/secret-path?token=1 ssl:default")
    assert "secret-path" not in text and "u:p" not in text and "h.example" in text


@given(st.text(min_size=8, max_size=30).filter(lambda s: s.strip() == s and s), st.text(max_size=60))
def test_redactor_never_leaks_a_known_secret(secret: str, noise: str) -> None:
    # Whole values of 8+ characters (issue 16: "flux" must not wreck "flux-system"); the tests above
    redactor = Redactor([secret])
    if secret not in noise:
        assert secret not in redactor(noise + " " + secret + "\n" + noise)


# ---- the word filter in front of the scan (Redactor.__call__) ---------------------------------------------
# Texts and values from a small alphabet, so values and texts share words, values stand whole or glued to
# a neighbour, and some values have no word character at all (the filter must step aside for them).
_PIECES = st.sampled_from(
    ["tok3n", "Zeta", "ü", "_", "-", ".", "/", "+", ":", "=", "@", " ", "\n", "%2F", "9"]
)
_VALUE = st.lists(_PIECES, min_size=1, max_size=8).map("".join).filter(lambda v: len(v) >= MIN_LEN)
_SEPARATOR = st.sampled_from(["", " ", "-", ".", "/", ":", "@", "x", "ü", '"', "\n"])


@given(
    values=st.lists(_VALUE, min_size=1, max_size=4),
    parts=st.lists(st.tuples(_SEPARATOR, st.integers(0, 3), _SEPARATOR, _PIECES), max_size=8),
    removed=st.integers(0, 4),
)
def test_the_word_filter_never_hides_a_value_the_scan_would_mask(
    values: list[str], parts: list[tuple[str, int, str, str]], removed: int
) -> None:
    redactor = Redactor(values)
    redactor.set_source("other", values[:removed])  # values held twice, then some of them dropped
    redactor.set_source("other", ())
    text = "".join(
        before + (values[pick % len(values)] if pick else "") + after + piece
        for before, pick, after, piece in parts
    )
    assert redactor(text) == redactor._scan(text)


def test_the_word_filter_steps_aside_for_values_without_a_word() -> None:
    redactor = Redactor(["+/+/+/+/+/", "Bearer abcdefgh12"])
    assert redactor("x +/+/+/+/+/ y") == f"x {MASK} y"
    assert redactor("auth: Bearer abcdefgh12.") == f"auth: {MASK}."
    redactor.update(["Bearer abcdefgh12"])  # the word-less value gone: the filter rules texts out again
    assert redactor("x +/+/+/+/+/ y") == "x +/+/+/+/+/ y"
    assert redactor("Bearer someone else") == "Bearer someone else"
