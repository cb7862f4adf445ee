"""Issue 23 item 5: noise-control state from unauthenticated events is bounded, expires, and stays cheap.

Every test runs the real controller (``python -m notification_controller``, local mode, memory store unless
said otherwise) and floods ``:9090`` with distinct events over raw pipelined sockets (8 connections, 16
requests in flight on each), as anyone who reaches the port can. What was measured before the fix:

* 200,000 distinct objects against a ``threshold`` Alert: RSS 58 → 963 MB, still 964 MB once every TTL had
  passed (keys were hidden on read, never deleted; each 21-byte value kept orjson's 4 KiB buffer);
* ``notifyOn: StateChange``: 532 MB for 100,000 objects, and the keys had no TTL at all;
* ``groupBy`` on an event field: one index value listing every group was rewritten with each new group,
  so ingest fell from ~3,000 to ~300 events/s by 20,000 groups. Here, in events per CPU-second of the
  controller: 1,563 → 79 (0.05x) from 1,000 to 20,000 groups in memory, 352 → 77 (0.22x) from 500 to 5,000
  on SQLite, where 424 of 6,500 events also lost their compare-and-set race and went out ungrouped.

Asserted here, each with numbers printed under ``[noise]`` (``-s``): RSS growth per event bounded; the
store's keys (``notification_noise_store_keys``) and the tracked ones (``notification_noise_keys``) fall to
zero once the TTL has passed, with no event to trigger it; ingest at 20,000 groups at least
``GROUP_RATE_RATIO`` of ingest at 1,000 groups (a ratio of CPU costs, not a wall time: the machine is
shared); every noise row in SQLite has a TTL; the caps
(``--noise-max-keys-per-alert``, ``--noise-max-groups-per-alert``) count every refusal in
``notification_noise_untracked_total`` and warn once. Counts are lower than the issue's so that the suite
stays within minutes on two shared cores; the differences they show are 5-10x.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.controllers import ControllerProcess, FlakySink
from tests.support.scalekit import rss

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

THRESHOLD_EVENTS = 40_000
"""Distinct objects against the threshold Alert (before the fix: +4.5 KB of RSS each, ~180 MB)."""
STATE_EVENTS = 20_000
RSS_PER_EVENT_BOUND = 1_500
"""Bytes of RSS growth allowed per distinct event (measured after the fix: 0.6-0.9 KB, before: ~4.5 KB)."""
SMALL_HISTORY = ["--history-max-records=100"]
"""The history's ring (issue 27) still records every decision, but keeps 100 of them, not 10,000: full, the
default ring adds a fixed 10-12 MB (about 1.1 KB a decision), which is bounded on its own
(tests/adversarial/test_history_bounds.py) and would leave the per-event bound here with no margin (CI: 30.04
MB against 30.00 for 20,000 events). What is measured here is the noise state."""
GROUP_RATE_RATIO = {"memory": 0.5, "sqlite": 0.3}
"""Events per CPU-second of the controller creating groups from 20,000 over the same from 1,000 (5,000 over
500 on SQLite): a ratio of CPU costs, which another process's load hardly moves. Measured after the fix:
memory 1.1-1.2, SQLite 0.55-1.13 (its periodic sweep counts too); before: see the module docstring."""
CONNECTIONS = 8
PIPELINE = 16


def body(
    name: str,
    *,
    kind: str = "Kustomization",
    severity: str = "error",
    team: str = "",
    message: str = "health check failed",
) -> bytes:
    metadata = {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:5394cb7f48332b2de7c17dd8b8384bbc84b7e738"}
    if team:
        metadata["kustomize.toolkit.fluxcd.io/team"] = team  # the emitter's group prefix is stripped
    return json.dumps(
        {
            "involvedObject": {
                "kind": kind,
                "namespace": "flux-system",
                "name": name,
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            },
            "severity": severity,
            "timestamp": "2026-11-22T10:00:00Z",
            "message": message,
            "reason": "HealthCheckFailed",
            "metadata": metadata,
            "reportingController": "kustomize-controller",
        },
        separators=(",", ":"),
    ).encode()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(payload: bytes) -> bytes:
    head = f"POST / HTTP/1.1\r\nHost: nc\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    return head.encode() + payload


async def _connection(
    port: int, bodies: list[bytes], statuses: Counter[int], refused: list[bytes] | None = None
) -> None:
    """POST ``bodies`` on one connection, ``PIPELINE`` at a time, reading every answer (the bodies
    answered 503 go to ``refused`` when given)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    buffer = b""
    try:
        for start in range(0, len(bodies), PIPELINE):
            batch = bodies[start : start + PIPELINE]
            writer.write(b"".join(_request(b) for b in batch))
            await writer.drain()
            for sent in batch:
                while b"\r\n\r\n" not in buffer:
                    data = await reader.read(65536)
                    assert data, "the event server closed a pipelined connection"
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    data = await reader.read(65536)
                    assert data, "the event server closed a pipelined connection"
                    buffer += data
                buffer = buffer[length:]
                status = int(head[9:12])
                if status == 503 and refused is not None:
                    refused.append(sent)
                else:
                    statuses[status] += 1
    finally:
        writer.close()


async def flood(
    port: int, bodies: list[bytes], *, timeout: float = 240.0, retry_503: int = 0
) -> tuple[Counter[int], float]:
    """POST every body (bounded: this many requests, this long); the statuses and events per second.
    ``retry_503``: send what got 503 again, up to this many more times, as Flux's emitters retry."""
    statuses: Counter[int] = Counter()
    started = time.perf_counter()
    async with asyncio.timeout(timeout):
        pending = bodies
        for attempt in range(retry_503 + 1):
            refused: list[bytes] | None = [] if attempt < retry_503 else None
            await asyncio.gather(
                *(_connection(port, pending[i::CONNECTIONS], statuses, refused) for i in range(CONNECTIONS))
            )
            if not refused:
                break
            pending = refused
    return statuses, len(bodies) / (time.perf_counter() - started)


def manifests(directory: Path, sink: str, *alerts: tuple[str, str, str]) -> Path:
    """A generic Provider at ``sink`` and one Alert per (name, source kind, extra spec lines)."""
    directory.mkdir(parents=True, exist_ok=True)
    docs = [
        "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\n"
        f'metadata: {{name: sink, namespace: flux-system}}\nspec: {{type: generic, address: "{sink}"}}\n'
    ]
    for name, kind, extra in alerts:
        docs.append(
            "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\n"
            f"metadata: {{name: {name}, namespace: flux-system}}\n"
            f"spec:\n  providerRef: {{name: sink}}\n  eventSources: [{{kind: {kind}, name: '*'}}]\n{extra}"
        )
    (directory / "objects.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return directory


async def wait_metric(
    proc: ControllerProcess, name: str, predicate: object, *, timeout: float, **labels: str
) -> float:
    """Poll a metric until ``predicate(value)``; the value (fails after ``timeout`` seconds)."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout  # real seconds: the controller is another process
    while True:
        value = await proc.metric(name, **labels)
        if predicate(value):
            return value
        assert time.monotonic() < deadline, f"{name}{labels} still {value} after {timeout}s"
        await asyncio.sleep(0.5)


async def test_distinct_objects_against_a_threshold_alert_are_bounded_and_expire(tmp_path: Path) -> None:
    async with FlakySink() as sink:
        extra = "  threshold: {count: 3, within: 20s}\n"
        proc = ControllerProcess(
            manifests(tmp_path / "m", sink.url, ("counted", "Kustomization", extra)),
            [
                f"--noise-max-keys-per-alert={2 * THRESHOLD_EVENTS}",  # the TTL, not the cap, bounds it here
                *SMALL_HISTORY,
            ],
            log_path=tmp_path / "log",
        )
        await proc.start()
        try:
            before = rss(proc.pid)[0]
            statuses, rate = await flood(
                proc.ports["events"], [body(f"obj-{i}") for i in range(THRESHOLD_EVENTS)]
            )
            after = rss(proc.pid)[0]
            stored = await proc.metric("notification_noise_store_keys")
            tracked = await proc.metric("notification_noise_keys", kind="keys")
            suppressed = await proc.metric("notification_suppressed_total", reason="threshold")
            # nothing arrives any more: the keys must go by themselves once `within` has passed
            t0 = time.monotonic()
            await wait_metric(proc, "notification_noise_store_keys", lambda v: v == 0, timeout=60)
            await wait_metric(proc, "notification_noise_keys", lambda v: v == 0, timeout=10, kind="keys")
            emptied = time.monotonic() - t0
        finally:
            assert await proc.stop() == 0
    growth = after - before
    print(
        f"\n[noise] threshold: {THRESHOLD_EVENTS} objects at {rate:.0f} events/s, RSS {before >> 20} → "
        f"{after >> 20} MB ({growth / THRESHOLD_EVENTS:.0f} B/event); {stored:.0f} keys stored, {tracked:.0f} "
        f"tracked at the end of the flood, all gone {emptied:.1f}s later"
    )
    assert statuses == Counter({202: THRESHOLD_EVENTS})
    assert suppressed == THRESHOLD_EVENTS  # each object's first event: counted, not sent
    assert stored > 1000 and tracked > 1000, "the keys of the last 20 s are there before they expire"
    assert growth < RSS_PER_EVENT_BOUND * THRESHOLD_EVENTS, f"RSS grew {growth >> 20} MB"
    assert sink.unique == 0


async def test_state_change_keys_expire_after_the_retention(tmp_path: Path) -> None:
    """``notifyOn: StateChange`` keys had no TTL: now ``--noise-state-retention``; after it, the object
    counts as healthy again (its next error is sent as a new failure, as after a restart)."""
    async with FlakySink() as sink:
        proc = ControllerProcess(
            manifests(tmp_path / "m", sink.url, ("changes", "HelmRelease", "  notifyOn: StateChange\n")),
            [
                "--noise-state-retention=15s",
                f"--noise-max-keys-per-alert={2 * STATE_EVENTS}",
                "--max-pending-notifications=64",  # every first error notifies: most are dropped, cheaply
                *SMALL_HISTORY,
            ],
            log_path=tmp_path / "log",
        )
        await proc.start()
        try:
            before = rss(proc.pid)[0]
            events = [body(f"rel-{i}", kind="HelmRelease") for i in range(STATE_EVENTS)]
            statuses, rate = await flood(proc.ports["events"], events)
            after = rss(proc.pid)[0]
            stored = await proc.metric("notification_noise_store_keys")
            t0 = time.monotonic()
            await wait_metric(proc, "notification_noise_store_keys", lambda v: v == 0, timeout=60)
            emptied = time.monotonic() - t0
            # the same error again after the retention: a new failure (no memory of the old one)
            sent_before = await proc.metric("notification_notifications_total")
            again, _ = await flood(
                proc.ports["events"], [body("rel-0", kind="HelmRelease", message="failed again")]
            )
            await wait_metric(
                proc, "notification_notifications_total", lambda v: v == sent_before + 1, timeout=10
            )
        finally:
            assert await proc.stop() == 0
    growth = after - before
    print(
        f"\n[noise] state change: {STATE_EVENTS} failing objects at {rate:.0f} events/s, RSS {before >> 20} → "
        f"{after >> 20} MB; {stored:.0f} keys stored, all gone {emptied:.1f}s later"
    )
    assert statuses == Counter({202: STATE_EVENTS}) and again == Counter({202: 1})
    assert stored > 1000, "keys written within the retention are there before it passes"
    assert growth < RSS_PER_EVENT_BOUND * STATE_EVENTS, f"RSS grew {growth >> 20} MB"


@pytest.mark.parametrize(
    ("store", "few_at", "many_at"),
    [("memory", 1000, 20_000), ("sqlite", 500, 5000)],  # SQLite: each new group is ~5 writes on its thread
)
async def test_ingest_does_not_collapse_with_many_groups(
    tmp_path: Path, store: str, few_at: int, many_at: int
) -> None:
    """Events/s creating groups ``few_at``+ vs ``many_at``+ of one Alert (``groupBy: [metadata.team]``):
    1,000 vs 20,000 in memory (before the fix: 0.07 times as fast). Each measurement is the best of three
    rounds of 500 new groups, so a busy neighbour does not decide it."""
    args = ["--noise-max-groups-per-alert=30000"]
    if store == "sqlite":
        args.append(f"--store=sqlite:{tmp_path / 'state.db'}")
    async with FlakySink() as sink:
        extra = "  groupBy: [metadata.team]\n  groupWait: 10m\n  groupInterval: 10m\n"
        proc = ControllerProcess(
            manifests(tmp_path / "m", sink.url, ("grouped", "Kustomization", extra)),
            args,
            log_path=tmp_path / "log",
        )
        await proc.start()
        try:
            port = proc.ports["events"]

            def teams(start: int, count: int) -> list[bytes]:
                return [body(f"obj-{i}", team=f"team-{i}") for i in range(start, start + count)]

            async def rate(start: int) -> float:
                """Events per CPU-second of the controller (its threads included): what another
                process on the machine takes does not count, unlike events per wall second."""
                best = 0.0
                for r in range(3):
                    used = cpu_seconds(proc.pid)
                    await flood(port, teams(start + 500 * r, 500), retry_503=3)
                    best = max(best, 500 / max(cpu_seconds(proc.pid) - used, 0.01))
                return best

            await flood(port, teams(0, few_at), retry_503=3)
            few = await rate(few_at)
            await flood(port, teams(few_at + 1500, many_at - few_at - 1500), timeout=300, retry_503=3)
            many = await rate(many_at)
            total = many_at + 1500
            groups = await proc.metric("notification_noise_keys", kind="groups")
            grouped = await proc.metric("notification_suppressed_total", reason="grouped")
        finally:
            assert await proc.stop() == 0
    print(
        f"\n[noise] groups ({store}): {few:.0f} events per CPU-second creating groups from {few_at}, "
        f"{many:.0f} creating groups from {many_at} (ratio {many / few:.2f}); {groups:.0f} groups open"
    )
    assert grouped == total and groups == total
    assert many / few >= GROUP_RATE_RATIO[store], f"ingest fell from {few:.0f} to {many:.0f} events/CPU-s"
    assert sink.unique == 0


async def test_caps_let_events_through_counted_and_warn_once(tmp_path: Path) -> None:
    """Past ``--noise-max-keys-per-alert`` a threshold event is notified (as with a store error), past
    ``--noise-max-groups-per-alert`` an event of a new group is notified ungrouped: each one counted."""
    async with FlakySink() as sink:
        proc = ControllerProcess(
            manifests(
                tmp_path / "m",
                sink.url,
                ("counted", "Kustomization", "  threshold: {count: 3, within: 10m}\n"),
                ("grouped", "HelmRelease", "  groupBy: [metadata.team]\n  groupWait: 10m\n"),
            ),
            ["--noise-max-keys-per-alert=200", "--noise-max-groups-per-alert=100"],
            log_path=tmp_path / "log",
        )
        await proc.start()
        try:
            port = proc.ports["events"]
            objects, _ = await flood(port, [body(f"obj-{i}") for i in range(1000)])
            teams, _ = await flood(
                port, [body(f"rel-{i}", kind="HelmRelease", team=f"t{i}") for i in range(500)]
            )
            # a tracked object still counts: its second and third events fire the threshold
            tracked, _ = await flood(port, [body("obj-0", message="2"), body("obj-0", message="3")])
            untracked_keys = await proc.metric(
                "notification_noise_untracked_total", stage="threshold", reason="key_limit"
            )
            untracked_groups = await proc.metric(
                "notification_noise_untracked_total", stage="group", reason="group_limit"
            )
            await sink.wait_unique(1, timeout=20)
            # 800 + 400 untracked, and obj-0's threshold
            await wait_metric(proc, "notification_delivered_total", lambda v: v >= 1201, timeout=60)
            keys = await proc.metric("notification_noise_keys", kind="keys")
            groups = await proc.metric("notification_noise_keys", kind="groups")
        finally:
            assert await proc.stop() == 0
    lines = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line["logger"] == "notification_controller.dispatch.noise"]
    warnings = [line for line in lines if "Warning NoiseControlLimitReached" in line["msg"]]
    print(f"\n[noise] caps: {untracked_keys:.0f} objects and {untracked_groups:.0f} groups untracked")
    assert objects == Counter({202: 1000}) and teams == Counter({202: 500}) and tracked == Counter({202: 2})
    assert (untracked_keys, untracked_groups) == (800, 400)
    assert (keys, groups) == (200, 100)
    assert len(warnings) == 2, warnings  # one Warning per Alert, not one per event
    assert [line["level"] for line in mine] == ["info", "info"], mine  # a flood, not a controller fault


async def test_every_noise_key_in_sqlite_has_a_ttl(tmp_path: Path) -> None:
    """With ``--store=sqlite:``, whose periodic sweep deletes expired rows, a key without a TTL would stay
    for ever: threshold, state-change, repeat and group keys (and the group slots) all carry one."""
    db = tmp_path / "state.db"
    async with FlakySink() as sink:
        proc = ControllerProcess(
            manifests(
                tmp_path / "m",
                sink.url,
                ("counted", "Kustomization", "  threshold: {count: 3, within: 10m}\n"),
                ("changes", "HelmRelease", "  notifyOn: StateChange\n"),
                ("repeats", "GitRepository", "  repeatInterval: 1h\n"),
                ("grouped", "OCIRepository", "  groupBy: [metadata.team]\n  groupWait: 10m\n"),
            ),
            [f"--store=sqlite:{db}"],
            log_path=tmp_path / "log",
        )
        await proc.start()
        try:
            port = proc.ports["events"]
            for kind in ("Kustomization", "HelmRelease", "GitRepository", "OCIRepository"):
                statuses, _ = await flood(
                    port,
                    [body(f"{kind.lower()}-{i}", kind=kind, team=f"t{i}") for i in range(300)],
                    retry_503=3,  # a busy SQLite writer answers 503 now and then; emitters retry
                )
                assert statuses == Counter({202: 300}), kind
            for reason, count in (("threshold", 300), ("grouped", 300)):
                await wait_metric(
                    proc,
                    "notification_suppressed_total",
                    lambda v, c=count: v == c,
                    timeout=60,
                    reason=reason,
                )
            await sink.wait_unique(600, timeout=60)  # the first errors and the first repeats went out
            untracked = await proc.metric("notification_noise_untracked_total")
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                kinds = dict(
                    conn.execute(
                        "SELECT substr(key, 1, instr(substr(key, 7), '/') + 5), count(*) FROM kv"
                        " WHERE key LIKE 'noise/%' GROUP BY 1"
                    ).fetchall()
                )
                forever = conn.execute(
                    "SELECT key FROM kv WHERE key LIKE 'noise/%' AND expires_at IS NULL LIMIT 5"
                ).fetchall()
        finally:
            assert await proc.stop() == 0
    print(f"\n[noise] sqlite: noise rows by kind {kinds}")
    assert kinds.get("noise/threshold") == 300 and kinds.get("noise/state") == 300
    assert kinds.get("noise/group") == 300 and kinds.get("noise/groups") == 301  # 300 slots + counter
    assert forever == [], forever
    assert untracked == 0, "no compare-and-set gave up under 8 concurrent connections"
