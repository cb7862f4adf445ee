"""``providers.validation.require_url``: Go's ``url.ParseRequestURI`` on http(s) addresses, never echoing them."""

from __future__ import annotations

import pytest

from notification_controller.errors import ProviderConfigError
from notification_controller.providers.validation import require_url


@pytest.mark.parametrize("address", ["https://hooks.example.com/x", "http://127.0.0.1:8080/", "https://h"])
def test_absolute_http_urls_pass_unchanged(address: str) -> None:
    assert require_url(address) == address


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("", "empty"),
        ("https://u:s3cr3t@h:99999/", "not a valid URL"),
        ("ftp://u:s3cr3t@h/", "absolute http or https"),
        ("/relative/s3cr3t", "absolute http or https"),
        ("https:///s3cr3t", "absolute http or https"),
    ],
)
def test_bad_addresses_are_refused_without_echoing_them(address: str, why: str) -> None:
    with pytest.raises(ProviderConfigError, match=why) as info:
        require_url(address, what="proxy address")
    assert str(info.value).startswith("invalid proxy address: ")
    assert "s3cr3t" not in str(info.value)
