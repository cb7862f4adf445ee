"""Who may act in the UI (``server/ui/actions.py``): the session cookie, the CSRF token, the bearer token and
the token file, as pure functions over real files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from notification_controller.server.ui.actions import (
    MAX_TOKEN_FILE,
    SESSION_TTL,
    TokenFile,
    bearer_valid,
    csrf_token,
    new_session,
    session_valid,
)

TOKEN = b"s3cret-token-value"


def test_a_session_is_valid_for_its_token_until_it_expires() -> None:
    cookie = new_session(TOKEN, 1000.0)
    assert session_valid(TOKEN, cookie, 1000.0)
    assert session_valid(TOKEN, cookie, 1000.0 + SESSION_TTL)
    assert not session_valid(TOKEN, cookie, 1001.0 + SESSION_TTL)  # expired
    assert not session_valid(TOKEN, cookie, 999.0)  # issued in the future
    assert not session_valid(b"rotated-token", cookie, 1000.0)  # a new token ends every session
    assert not session_valid(b"", cookie, 1000.0)
    assert TOKEN.decode() not in cookie


@pytest.mark.parametrize(
    "forged",
    ["", "1000", "1000.", ".abc", "abc.def", "1001.{mac}", "1000.{mac}0", "-1.{mac}", "1" * 13 + ".{mac}"],
)
def test_a_forged_or_altered_cookie_is_refused(forged: str) -> None:
    mac = new_session(TOKEN, 1000.0).partition(".")[2]
    assert not session_valid(TOKEN, forged.format(mac=mac), 1000.0)


def test_the_csrf_token_is_bound_to_the_session_and_the_token() -> None:
    one, two = new_session(TOKEN, 1000.0), new_session(TOKEN, 2000.0)
    assert csrf_token(TOKEN, one) != csrf_token(TOKEN, two)
    assert csrf_token(TOKEN, one) != csrf_token(b"other", one)
    assert csrf_token(TOKEN, one) == csrf_token(TOKEN, one)


def test_bearer_tokens() -> None:
    assert bearer_valid(TOKEN, "Bearer s3cret-token-value")
    assert bearer_valid(TOKEN, "bearer s3cret-token-value ")
    assert not bearer_valid(TOKEN, "Bearer s3cret-token-valu")
    assert not bearer_valid(TOKEN, "Basic s3cret-token-value")
    assert not bearer_valid(TOKEN, "s3cret-token-value")
    assert not bearer_valid(b"", "Bearer ")


def test_the_token_file_is_read_on_each_call(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "token"
    token = TokenFile(path)
    with caplog.at_level(logging.ERROR):
        assert token() == b""  # missing
        assert token() == b""
    assert len(caplog.records) == 1  # said once, not on every click
    path.write_text("  first-token\n")
    assert token() == b"first-token"
    path.write_text("second-token")  # a rotated Secret: the next check uses it
    assert token() == b"second-token"
    path.write_text("\n")
    assert token() == b""
    path.write_bytes(b"x" * (MAX_TOKEN_FILE * 4))
    assert token() == b"x" * MAX_TOKEN_FILE  # bounded read
    assert "second-token" not in caplog.text
