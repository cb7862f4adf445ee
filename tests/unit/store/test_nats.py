"""How many copies the ``nats://`` store asks JetStream for when ``?replicas`` is not given (pure).

``config/ha`` ships ``--store=nats://nats.flux-system.svc:4222`` without ``?replicas``: the streams and
buckets must then get the cluster's size (three copies on a three-node cluster, one on a single server),
not one copy on one node (issue 23 item 10). The cluster's size is read from the INFO the server sends on
connect; ``tests/integration/test_nats_cluster.py`` checks it against a real three-node cluster.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from notification_controller.lib.natsconn import MAX_REPLICAS, replicas_for
from notification_controller.store import open_store
from notification_controller.store.nats import NATSStore


def members(n: int) -> list[str]:
    return [f"10.0.0.{i}:4222" for i in range(n)]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"server_name": "solo", "jetstream": True}, 1),  # not clustered
        ({"cluster": "", "connect_urls": members(3)}, 1),
        ({"cluster": "nc", "connect_urls": members(3)}, 3),
        ({"cluster": "nc", "connect_urls": members(3) + members(3)}, 3),  # listed twice: counted once
        ({"cluster": "nc", "connect_urls": members(5)}, 5),
        ({"cluster": "nc", "connect_urls": members(9)}, MAX_REPLICAS),
        ({"cluster": "nc", "connect_urls": members(1)}, 1),
        ({"cluster": "nc"}, 3),  # no_advertise: the usual size; a smaller cluster refuses loudly at start
    ],
)
def test_default_replicas_follow_the_cluster(info: dict[str, object], expected: int) -> None:
    assert replicas_for(info) == expected


def test_the_url_without_replicas_leaves_the_choice_to_the_cluster() -> None:
    store = open_store("nats://nats.flux-system.svc:4222")
    assert isinstance(store, NATSStore) and store.requested_replicas is None
    explicit = open_store("nats://nats.flux-system.svc:4222?replicas=1")
    assert isinstance(explicit, NATSStore) and explicit.requested_replicas == 1 == explicit.replicas


def test_config_ha_asks_for_the_clusters_size_or_more() -> None:
    """The URL ``config/ha`` ships must not pin one copy (what lost accepted notifications)."""
    patch = (Path(__file__).resolve().parents[3] / "config/ha/deployment-patch.yaml").read_text()
    (url,) = re.findall(r"--store=(\S+)", patch)
    store = open_store(url)
    assert isinstance(store, NATSStore)
    assert store.requested_replicas is None or store.requested_replicas >= 3
