"""The inhibition stage over a real memory store and a real graph (dispatch/quiet/inhibit.py): what is held
and under which failing object, the recovery that names the held, the release for an Alert that did not
take it, explicit rules, and the bounds (an event storm about invented sources, TTLs, cycles)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from notification_controller.api.event import Event
from notification_controller.api.objects import parse_object
from notification_controller.dispatch.model import Draft, Drop, Notification
from notification_controller.dispatch.quiet import failing as inhibit
from notification_controller.dispatch.quiet.inhibit import Inhibition
from notification_controller.dispatch.quiet.release import RELEASE_DELAY
from notification_controller.lib.clock import ManualClock
from notification_controller.objects.base import ObjectStore
from notification_controller.objects.graph import FluxGraph, StaticGraph
from notification_controller.store.memory import MemoryStore


def ks(name: str, source: str = "repo", *depends: str) -> dict[str, Any]:
    return {
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": "flux-system"},
        "spec": {
            "sourceRef": {"kind": "GitRepository", "name": source},
            "dependsOn": [{"name": d} for d in depends],
        },
    }


def event(
    kind: str, name: str, severity: str = "error", namespace: str = "flux-system", **meta: str
) -> Event:
    return Event.from_raw(
        {
            "involvedObject": {"kind": kind, "namespace": namespace, "name": name},
            "severity": severity,
            "message": f"{name} {severity}",
            "reason": "Failed" if severity == "error" else "Succeeded",
            "reportingController": "x",
            "metadata": meta,
        }
    )


def objects(**alert_spec: Any) -> ObjectStore:
    store = ObjectStore()
    store.upsert(
        parse_object(
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Provider",
                "metadata": {"name": "sink", "namespace": "flux-system"},
                "spec": {"type": "generic", "address": "http://127.0.0.1:1/"},
            }
        )
    )
    store.upsert(
        parse_object(
            {
                "apiVersion": "notification.toolkit.fluxcd.io/v1beta3",
                "kind": "Alert",
                "metadata": {"name": "a", "namespace": "flux-system", "generation": 1},
                "spec": {
                    "providerRef": {"name": "sink"},
                    "eventSources": [
                        {"kind": "GitRepository", "name": "*"},
                        {"kind": "Kustomization", "name": "*"},
                    ],
                    **alert_spec,
                },
            }
        )
    )
    return store


def rig(
    docs: list[dict[str, Any]], **alert_spec: Any
) -> tuple[Inhibition, MemoryStore, ManualClock, ObjectStore]:
    clock = ManualClock()
    state = MemoryStore(clock=clock)
    graph = FluxGraph()
    graph.replace(docs)
    store = objects(**({"inhibitDependents": True} | alert_spec))
    return Inhibition(state, store, StaticGraph(graph), clock), state, clock, store


async def run(stage: Inhibition, store: ObjectStore, ev: Event) -> Draft | Drop:
    """What the dispatcher does: observe, then the stage for the Alert."""
    observed = stage.observe(ev)
    if observed is not None:
        await observed
    alert = store.alert("flux-system", "a")
    assert alert is not None
    result = stage(Draft(ev, alert))
    if isinstance(result, Draft | Drop):
        return result
    return await result


async def test_dependents_are_held_under_the_root_cause_and_named_at_its_recovery() -> None:
    stage, _, _, store = rig([ks("infra"), ks("apps", "repo", "infra"), ks("dash", "oci", "apps")])
    first = await run(stage, store, event("GitRepository", "repo"))
    assert isinstance(first, Draft)  # the source itself notifies
    for name in ("infra", "apps", "dash"):
        held = await run(stage, store, event("Kustomization", name))
        assert isinstance(held, Drop) and held.suppressed and str(held.reason) == "inhibited", held
        assert held.message.startswith(
            "inhibited by GitRepository/flux-system/repo (failing since 2026-01-01T"
        ), held
    recovery = await run(stage, store, event("GitRepository", "repo", "info"))
    assert isinstance(recovery, Draft) and recovery.message is not None
    names = "Kustomization/flux-system/infra, Kustomization/flux-system/apps, Kustomization/flux-system/dash"
    assert recovery.message.text == f"repo info\nHeld while it failed: {names}"
    assert recovery.event.metadata[inhibit.HELD_METADATA] == names
    again = await run(stage, store, event("GitRepository", "repo", "info"))  # claimed once: not again
    assert isinstance(again, Draft) and again.message is None


async def test_an_unrelated_object_or_alert_is_not_held() -> None:
    stage, _, _, store = rig([ks("infra"), ks("other", "elsewhere")])
    await run(stage, store, event("GitRepository", "repo"))
    assert isinstance(await run(stage, store, event("Kustomization", "other")), Draft)
    plain, _, _, plain_store = rig([ks("infra")], inhibitDependents=False)
    await run(plain, plain_store, event("GitRepository", "repo"))
    assert plain.observe(event("GitRepository", "repo")) is None  # nobody asks: nothing observed
    assert isinstance(await run(plain, plain_store, event("Kustomization", "infra")), Draft)


async def test_a_release_for_an_alert_that_did_not_take_the_recovery() -> None:
    stage, _, clock, store = rig([ks("infra")])
    await run(stage, store, event("GitRepository", "repo"))
    await run(stage, store, event("Kustomization", "infra"))
    observed = stage.observe(event("GitRepository", "repo", "info"))  # observed, not matched
    assert observed is not None
    await observed
    sent: list[Notification] = []

    async def enqueue(n: Notification) -> None:
        sent.append(n)

    assert await stage.release_due(enqueue) == 0  # not yet: the matching Alert may claim it first
    clock.advance(RELEASE_DELAY + 0.1)
    assert await stage.release_due(enqueue) == 1
    (release,) = sent
    assert release.event.message == (
        "GitRepository/flux-system/repo recovered; held while it failed: Kustomization/flux-system/infra"
    )
    assert release.id.startswith("inhibit-") and release.alert.key == "flux-system/a"
    # a replica building the same release makes the same id (the outbox stores it once)
    twin = stage.releases.notification(
        "flux-system/a",
        ("GitRepository", "flux-system", "repo"),
        release.event,
        ["x"],
        0,
        clock.now().timestamp(),
    )
    assert twin is not None and twin.id != release.id  # another failure (since) is another release


async def test_a_failure_stops_inhibiting_after_its_ttl() -> None:
    stage, _, clock, store = rig([ks("infra")])
    await run(stage, store, event("GitRepository", "repo"))
    clock.advance(inhibit.FAILING_TTL + 1)
    assert isinstance(await run(stage, store, event("Kustomization", "infra")), Draft)


async def test_cycles_of_failures_terminate() -> None:
    stage, _, _, store = rig([ks("a", "repo", "b"), ks("b", "repo", "a"), ks("c", "oci", "a")])
    await run(stage, store, event("Kustomization", "a"))
    await run(stage, store, event("Kustomization", "b"))
    held = await run(stage, store, event("Kustomization", "c"))
    assert isinstance(held, Drop) and "Kustomization/flux-system/a" in held.message


async def test_an_error_storm_about_invented_sources_writes_nothing() -> None:
    """10,000 distinct GitRepositories no tracked object uses: not one key (unauthenticated events)."""
    stage, state, _, store = rig([ks("infra")])
    started = time.perf_counter()
    for i in range(10_000):
        observed = stage.observe(event("GitRepository", f"fake-{i}"))
        if observed is not None:
            await observed
    assert state.keys() == 0
    assert time.perf_counter() - started < 5.0
    await run(stage, store, event("GitRepository", "repo"))
    assert state.keys() == 1


RULE = {
    "inhibitDependents": False,
    "inhibitRules": [
        {
            "sourceMatchers": [{"name": "name", "value": "database"}],
            "targetMatchers": [{"name": "name", "value": "api-.*", "matchType": "=~"}],
            "equal": ["namespace"],
        }
    ],
}


async def test_rules_hold_targets_with_equal_values_and_not_the_source_itself() -> None:
    stage, _, _, store = rig([], **RULE)
    assert isinstance(await run(stage, store, event("Kustomization", "database")), Draft)
    held = await run(stage, store, event("Kustomization", "api-users"))
    assert isinstance(held, Drop) and "Kustomization/flux-system/database" in held.message
    other_ns = await run(stage, store, event("Kustomization", "api-users", namespace="team-b"))
    assert isinstance(other_ns, Draft)
    recovery = await run(stage, store, event("Kustomization", "database", "info"))
    assert isinstance(recovery, Draft) and recovery.event.metadata[inhibit.HELD_METADATA] == (
        "Kustomization/flux-system/api-users"
    )
    assert isinstance(await run(stage, store, event("Kustomization", "api-users")), Draft)


async def test_a_rule_storm_is_bounded_per_alert() -> None:
    """Error events from 5,000 namespaces (each a new set of equal values): at most MAX_RULE_KEYS keys."""
    stage, state, clock, _ = rig([], **RULE)
    for i in range(5_000):
        observed = stage.observe(event("Kustomization", "database", namespace=f"ns-{i}"))
        assert observed is not None
        await observed
    assert state.keys() == inhibit.MAX_RULE_KEYS
    clock.advance(inhibit.FAILING_TTL + 1)  # they expire: room again
    observed = stage.observe(event("Kustomization", "database", namespace="late"))
    assert observed is not None
    await observed
    assert state.keys() == 1


async def test_held_lists_are_bounded() -> None:
    docs = [ks(f"k{i}") for i in range(100)]
    stage, state, _, store = rig(docs)
    await run(stage, store, event("GitRepository", "repo"))
    for i in range(100):
        assert isinstance(await run(stage, store, event("Kustomization", f"k{i}")), Drop)
    entry = await state.kv_get(inhibit.held_key(("GitRepository", "flux-system", "repo")))
    assert entry is not None and len(entry.value) < 4096
    recovery = await run(stage, store, event("GitRepository", "repo", "info"))
    assert isinstance(recovery, Draft)
    assert recovery.event.metadata[inhibit.HELD_METADATA].endswith(
        f"and {100 - inhibit.MAX_HELD_OBJECTS} more"
    )


def test_stamp() -> None:
    assert inhibit.stamp(0) == "1970-01-01T00:00:00Z"
    assert timedelta(seconds=inhibit.FAILING_TTL) == timedelta(hours=24)


async def test_a_helmrelease_through_its_helmchart_and_helmrepository() -> None:
    release = {
        "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "apps"},
        "spec": {
            "chart": {
                "spec": {
                    "sourceRef": {"kind": "HelmRepository", "name": "charts", "namespace": "flux-system"}
                }
            }
        },
    }
    stage, _, _, store = rig([release])
    await run(stage, store, event("HelmRepository", "charts"))
    chart = await run(stage, store, event("HelmChart", "apps-podinfo"))  # the chart Flux made fails too
    assert isinstance(chart, Drop) and "HelmRepository/flux-system/charts" in chart.message
    held = await run(stage, store, event("HelmRelease", "podinfo", namespace="apps"))
    assert isinstance(held, Drop) and "HelmRepository/flux-system/charts" in held.message  # the root cause
    recovery = await run(stage, store, event("HelmRepository", "charts", "info"))
    assert isinstance(recovery, Draft)
    assert recovery.event.metadata[inhibit.HELD_METADATA] == (
        "HelmChart/flux-system/apps-podinfo, HelmRelease/apps/podinfo"
    )
