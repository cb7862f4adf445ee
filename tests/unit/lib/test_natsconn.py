"""What the state store and the history stream share to reach NATS (pure): the credentials never print,
TLS is set up only when asked for, and the password file is read with a clear error (``StoreSettings``).
The replica rule is tested with the store that uses it (``tests/unit/store/test_nats.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from notification_controller.errors import ConfigError
from notification_controller.lib.natsconn import NATSAuth
from notification_controller.settings import StoreSettings


def test_the_password_never_prints_and_tls_is_off_unless_asked() -> None:
    auth = NATSAuth(user="flux", password="s3cr3t-nats-password")
    assert "s3cr3t-nats-password" not in repr(auth)
    assert auth.ssl_context() is None


def test_the_store_settings_read_the_password_file_once_with_a_clear_error(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("nats-pass-1\n")
    auth = StoreSettings(url="nats://127.0.0.1:4222", nats_user="flux", nats_password_file=secret).nats_auth()
    assert (auth.user, auth.password, auth.creds_file) == ("flux", "nats-pass-1", None)
    missing = StoreSettings(url="nats://127.0.0.1:4222", nats_password_file=tmp_path / "absent")
    with pytest.raises(ConfigError, match=r"cannot read --store-nats-password-file .*absent.*: No such file"):
        missing.nats_auth()
