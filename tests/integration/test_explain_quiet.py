"""``explain`` on Silences and mute windows (issue 26 item 4), run as users run it: ``python -m
notification_controller explain`` in a subprocess on a directory of manifests, ``--at`` choosing the instant.
The verdict names the Silence (namespace/name, until when, its matchers) or the window (which entry, until
when); a Silence that does not match, has not started or is in another namespace changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.test_explain import EVENT, cli

MANIFESTS = """\
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: hook, namespace: apps}
spec: {type: generic, address: "http://127.0.0.1:9/hook"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: silenced, namespace: apps}
spec:
  providerRef: {name: hook}
  eventSources: [{kind: Kustomization, name: '*'}]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: night, namespace: apps}
spec:
  providerRef: {name: hook}
  eventSources: [{kind: Kustomization, name: '*'}]
  muteTimes:
  - times: [{startTime: "22:00", endTime: "24:00"}]
    location: Europe/Berlin
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: office, namespace: apps}
spec:
  providerRef: {name: hook}
  eventSources: [{kind: Kustomization, name: '*'}]
  activeTimes:
  - weekdays: ["monday:friday"]
    times: [{startTime: "09:00", endTime: "17:00"}]
    location: Europe/Berlin
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata: {name: maintenance, namespace: apps}
spec:
  matchers:
  - {name: alert, value: silenced}
  - {name: name, value: "w.*", matchType: "=~"}
  startsAt: "2026-11-27T08:00:00Z"
  endsAt: "2026-11-27T12:00:00Z"
  comment: database upgrade
---
apiVersion: notification-controller.io/v1alpha1
kind: Silence
metadata: {name: elsewhere, namespace: other}
spec:
  matchers: [{name: kind, value: Kustomization}]
  startsAt: "2026-11-27T08:00:00Z"
  endsAt: "2026-11-27T12:00:00Z"
"""


async def explain(tmp: Path, at: str) -> dict[str, dict[str, str]]:
    (tmp / "m").mkdir(exist_ok=True)
    (tmp / "m" / "objects.yaml").write_text(MANIFESTS, encoding="utf-8")
    (tmp / "event.json").write_text(json.dumps(EVENT), encoding="utf-8")
    code, out, err = await cli(
        "explain", "--event", str(tmp / "event.json"), "--manifests", str(tmp / "m"), "--at", at, "-o", "json"
    )
    assert code in (0, 1), err
    return {v["alert"]: v for v in json.loads(out)["alerts"]}


async def test_explain_names_the_silence_and_the_window_that_hold(tmp_path: Path) -> None:
    # Friday 2026-11-27, 22:30 in Berlin (21:30 UTC): the Silence has ended, the night window mutes,
    # office hours are over
    verdicts = await explain(tmp_path, "2026-11-27T22:30:00+01:00")
    assert verdicts["apps/silenced"]["verdict"] == "would send"
    night = verdicts["apps/night"]
    assert (night["stage"], night["reason"]) == (
        "quiet-window",
        "Kustomization/apps/web: muted by spec.muteTimes[0] until 2026-11-27T23:00:00Z",
    )
    office = verdicts["apps/office"]
    assert office["stage"] == "quiet-window"
    assert office["reason"].endswith("muted by outside spec.activeTimes until 2026-11-30T08:00:00Z")

    # 10:00 UTC (11:00 in Berlin): the Silence holds the one Alert it matches; the windows let through
    verdicts = await explain(tmp_path, "2026-11-27T10:00:00Z")
    silenced = verdicts["apps/silenced"]
    assert silenced["line"] == (
        "would not send: quiet-silence: Kustomization/apps/web: held by Silence apps/maintenance until "
        "2026-11-27T12:00:00Z (matchers alert=silenced, name=~w.*) [Provider apps/hook (generic)]"
    )
    assert verdicts["apps/night"]["verdict"] == "would send"
    assert verdicts["apps/office"]["verdict"] == "would send"


async def test_at_must_be_a_time_with_a_zone(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "objects.yaml").write_text(MANIFESTS, encoding="utf-8")
    (tmp_path / "event.json").write_text(json.dumps(EVENT), encoding="utf-8")
    code, _, err = await cli(
        "explain",
        "--event",
        str(tmp_path / "event.json"),
        "--manifests",
        str(tmp_path / "m"),
        "--at",
        "10:00",
    )
    assert code == 2 and "--at" in err and "Traceback" not in err
