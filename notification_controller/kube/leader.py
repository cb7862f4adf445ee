"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's algorithm and Flux's timings.

Only the leader reconciles (checklist H2); the HTTP servers run on every replica, as in Flux.

* Lease ``notification-controller-leader-election`` in ``RUNTIME_NAMESPACE``; holder identity
  ``<hostname>_<uuid>``. Timings: lease 35 s, renew deadline 30 s, retry period 5 s (Flux's flags
  ``--leader-election-lease-duration/-renew-deadline/-retry-period``).
* Acquire: a Lease held by someone else is taken over only once it has not changed for its
  ``leaseDurationSeconds`` *as measured on this replica's clock* (client-go's "observed time", immune to
  clock skew between replicas); updates are ``PUT`` with ``resourceVersion`` so two candidates cannot
  both win (409).
* Renew every retry period; if no renewal succeeds within the renew deadline — or the Lease shows
  another holder — ``lost`` is set at once (H3). Since renew deadline < lease duration, this replica has
  stopped acting as leader before anyone else may take over. A lost elector never re-acquires: the
  process is expected to stop its controllers (and exit, as Flux does).
* Release on cancel (``--leader-election-release-on-cancel``, default true): leaving the ``async with``
  block while leading writes an empty holder and ``leaseDurationSeconds: 1`` so a standby takes over on
  its next retry instead of waiting out the lease.
* Its own budget: give the elector a ``KubeClient`` of its own (``KubeRuntime`` does, sized by
  ``lease_client_budget``): its own token bucket and connections, so a burst of other API calls (event
  label lookups, reconciles, Events) can never queue a renewal behind it (issue 11: a 3,000-event burst
  on the shared 50 QPS bucket delayed renewals past the renew deadline and the leader exited).

Usage::

    async with LeaderElector(client, namespace=ns) as elector:
        await elector.wait_leading()
        ...  # run controllers; stop them when ``elector.lost`` is set
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

from ..errors import KubeError
from .client import KubeClient, api_path

log = logging.getLogger(__name__)

LEASE_NAME = "notification-controller-leader-election"
LEASE_DURATION = 35.0
RENEW_DEADLINE = 30.0
RETRY_PERIOD = 5.0
JITTER_FACTOR = 1.2  # client-go's wait.JitterUntil factor for candidates


def lease_client_budget(retry_period: float) -> tuple[float, int]:
    """(qps, burst) of the elector's own client: a GET and a PUT every retry period, with room to spare."""
    return max(5.0, 4.0 / retry_period), 10


def default_identity() -> str:
    """client-go's identity: ``<hostname>_<uuid>`` (unique even for two processes on one host)."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(when: datetime | None = None) -> str:
    """``metav1.MicroTime`` JSON format."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _LeaseLost(Exception):
    """The Lease names another holder while we believed we were leading."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


class LeaderElector:
    """Campaign for the Lease while the ``async with`` block runs; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str = LEASE_NAME,
        identity: str | None = None,
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        retry_period: float = RETRY_PERIOD,
        release_on_cancel: bool = True,
    ) -> None:
        if not namespace:
            raise ValueError("leader election needs a namespace (RUNTIME_NAMESPACE)")
        if not lease_duration > renew_deadline:
            raise ValueError("leader election: lease duration must be greater than the renew deadline")
        if not renew_deadline > JITTER_FACTOR * retry_period or retry_period <= 0:
            raise ValueError("leader election: renew deadline must exceed 1.2 × the retry period")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self.lost = asyncio.Event()
        self._leading = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = 0.0
        self.observed_holder = ""
        self.renewals = 0

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set() and not self.lost.is_set()

    @property
    def _path(self) -> str:
        return api_path("coordination.k8s.io", "v1", "leases", self.namespace, self.name)

    # ---- lifecycle --------------------------------------------------------------------------------
    async def __aenter__(self) -> LeaderElector:
        self._task = asyncio.create_task(self._run(), name=f"leader-election-{self.name}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.release_on_cancel and self.is_leader:
            await self.release()
        self._leading.clear()

    async def wait_leading(self) -> None:
        """Return once this replica leads (re-raises if the election task failed)."""
        if self._task is None:
            raise RuntimeError("LeaderElector is not running (use `async with`)")
        leading = asyncio.ensure_future(self._leading.wait())
        try:
            await asyncio.wait({leading, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leading.cancel()
        if not self._leading.is_set():
            self._task.result()  # raises the failure
            raise RuntimeError("leader election ended without leading")

    async def wait_lost(self) -> None:
        await self.lost.wait()

    # ---- the algorithm ----------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        log.info("leader election: %s campaigning for Lease %s/%s", self.identity, self.namespace, self.name)
        while True:
            if await self._attempt(renewing=False, timeout=self.client.timeout):
                break
            await asyncio.sleep(self.retry_period * (1.0 + random.random() * JITTER_FACTOR))
        last_renew = loop.time()
        self._leading.set()
        log.info("leader election: %s became leader", self.identity)
        while True:
            remaining = self.renew_deadline - (loop.time() - last_renew)
            await asyncio.sleep(max(0.0, min(self.retry_period, remaining)))
            remaining = self.renew_deadline - (loop.time() - last_renew)
            if remaining <= 0:
                self._lose(f"failed to renew the lease within {self.renew_deadline:g}s")
                return
            try:
                renewed = await self._attempt(renewing=True, timeout=remaining)
            except _LeaseLost as exc:
                self._lose(f"the lease is now held by {exc.holder!r}")
                return
            if renewed:
                last_renew = loop.time()
                self.renewals += 1
            elif loop.time() - last_renew >= self.renew_deadline:
                self._lose(f"failed to renew the lease within {self.renew_deadline:g}s")
                return

    def _lose(self, why: str) -> None:
        log.error("leader election: %s lost leadership: %s", self.identity, why)
        self.lost.set()

    async def _attempt(self, *, renewing: bool, timeout: float) -> bool:
        """One ``tryAcquireOrRenew``; False on any API error (logged) or when someone else holds it."""
        try:
            async with asyncio.timeout(timeout):
                return await self._try_acquire_or_renew(renewing=renewing)
        except TimeoutError:
            log.warning("leader election: lease request timed out")
        except KubeError as exc:
            log.warning("leader election: %s", exc)
        return False

    def _spec(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_time()
        held = previous is not None and previous.get("holderIdentity") == self.identity
        transitions = int((previous or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": (previous or {}).get("acquireTime") or now if held else now,
            "renewTime": now,
            "leaseTransitions": transitions if held or previous is None else transitions + 1,
        }

    async def _try_acquire_or_renew(self, *, renewing: bool) -> bool:
        loop = asyncio.get_running_loop()
        try:
            lease = await self.client.request("GET", self._path)
        except KubeError as exc:
            if not exc.not_found:
                raise
            if renewing:
                raise _LeaseLost("") from exc
            wanted = self._spec(None)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": wanted,
            }
            try:
                created = await self.client.request(
                    "POST", api_path("coordination.k8s.io", "v1", "leases", self.namespace), body=body
                )
            except KubeError as create_exc:
                if create_exc.conflict:  # another candidate created it first
                    return False
                raise
            created_spec = created.get("spec")
            self._observe(created_spec if isinstance(created_spec, dict) else wanted, loop.time())
            return True

        spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        if spec != self._observed_spec:
            self._observe(spec, loop.time())
        holder = str(spec.get("holderIdentity") or "")
        if renewing and holder != self.identity:
            raise _LeaseLost(holder)
        duration = spec.get("leaseDurationSeconds")
        duration_s = (
            float(duration) if isinstance(duration, int | float) and duration > 0 else self.lease_duration
        )
        if holder and holder != self.identity and self._observed_time + duration_s > loop.time():
            return False  # held by someone else and not expired (by our own clock)
        lease["spec"] = self._spec(spec)
        try:
            updated = await self.client.request("PUT", self._path, body=lease)
        except KubeError as exc:
            if exc.conflict:  # someone else updated it since our GET
                return False
            raise
        new_spec = updated.get("spec")
        self._observe(new_spec if isinstance(new_spec, dict) else lease["spec"], loop.time())
        return True

    def _observe(self, spec: dict[str, Any], when: float) -> None:
        self._observed_spec = spec
        self._observed_time = when
        self.observed_holder = str(spec.get("holderIdentity") or "")

    async def release(self) -> bool:
        """Give the Lease up (empty holder, 1 s duration); True when released."""
        try:
            async with asyncio.timeout(min(self.client.timeout, max(self.retry_period, 2.0))):
                lease = await self.client.request("GET", self._path)
                spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
                assert isinstance(spec, dict)
                if spec.get("holderIdentity") != self.identity:
                    return False
                now = micro_time()
                lease["spec"] = {
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": int(spec.get("leaseTransitions") or 0),
                }
                await self.client.request("PUT", self._path, body=lease)
        except (KubeError, TimeoutError) as exc:
            log.warning("leader election: could not release the lease: %s", exc)
            return False
        self._leading.clear()
        log.info("leader election: %s released the lease", self.identity)
        return True
