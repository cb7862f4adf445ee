"""``core.webhook``: the Receiver webhook path against Flux's vectors (reference §5.1)."""

from __future__ import annotations

from notification_controller.core.webhook import webhook_path


def test_webhook_path_reference_vectors() -> None:
    assert (
        webhook_path(b"test-token", "test-receiver", "default")
        == "/hook/b5870897382949f6a6c2012394737b779ec2e77e0f01692279430f864810dc1a"
    )
    assert (
        webhook_path(b"", "ci-receiver", "flux-system")
        == "/hook/c00de5d7c1fb8d62ace458f760971809a10ce47493a273a38a860290f411d907"
    )
