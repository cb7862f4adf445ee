"""``notification-controller silence add|list|expire``: make, see and end Silences without writing YAML.

A Silence (``api/silence.py``) is an object, so it can live in Git; an operator in the middle of an incident
wants one *now*, for two hours, with a reason, as ``amtool silence add`` gives Alertmanager's users. This
command writes the object where the controller reads it (issue 26 item 2):

* ``--manifests DIR`` (local mode): ``add`` writes ``DIR/silence-<name>.yaml``, which the running controller
  picks up on its next poll of that directory. The file is written to a temporary name the loader ignores
  (``.silence-<name>.yaml.tmp``: not a manifest suffix), flushed to disk, then linked into place, so the
  poll never reads half a file and an existing file is never overwritten. ``expire`` rewrites ``endsAt`` of a
  file this command wrote (annotation ``notification-controller.io/created-by-cli: "true"``), by the same
  temporary-file-and-rename; a Silence defined in any other file is the user's (Git's), and ``expire``
  refuses to edit it, naming the file: a round trip through a YAML parser would drop its comments and
  reorder what Git shows, and the next ``git pull`` would bring the old ``endsAt`` back anyway.
* ``--kubeconfig PATH``: the Silence is created, listed and patched through the API server with kube/'s
  client (the same throttling, timeouts and safe errors as the controller). ``expire`` sends a JSON merge
  patch carrying the ``resourceVersion`` it read, so a concurrent change is a conflict, not lost. A Silence
  applied by Flux (labels ``kustomize.toolkit.fluxcd.io/name`` or ``helm.toolkit.fluxcd.io/name``) is
  refused for the reason above: Flux would undo the patch at its next reconciliation.

Every Silence this command writes says ``startsAt`` and ``endsAt`` explicitly (never only ``duration``): in
local mode there is no creation time to start from, and an explicit end is what ``list`` and a reviewer
read. ``expire`` sets ``endsAt`` to now (and ``startsAt`` to now when it was still in the future: a pending
silence then never starts, as Alertmanager's expire does). What is written is validated by the parser the
controller uses (``api.objects.parse_object``) before anything touches the disk or the cluster.

Input checks are the controller's: ``--match`` with ``Matcher.parse`` (RE2, bounded), ``--for`` with
``lib.duration``, names with ``core.apiref``. ``list`` computes STATE from the window and the clock (the
controller's ``status.state`` may lag by a poll); HELD comes from ``status.held`` when the controller has
written one. Text cells go through ``lib.output.escape_cell`` (a comment or a matcher from a file or the
cluster cannot move the cursor or fake a line); ``-o json|yaml`` print the same data.

Exit status: 0 done, 1 the directory or the cluster could not do it (not found, exists, refused), 2 bad
usage or input — one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import re
import secrets
import stat
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

import yaml

from .api.silence import (
    MAX_MATCHERS,
    SILENCE_API_VERSION,
    SILENCE_GROUP,
    SILENCE_VERSION,
    Matcher,
    Silence,
    SilenceState,
    re2_error,
)
from .core.apiref import InvalidReference, validate_name, validate_namespace
from .errors import ManifestError
from .lib.duration import parse_duration
from .lib.output import add_output_flag, dump, escape_cell, table
from .objects import yamldoc

if TYPE_CHECKING:
    from .kube.client import KubeClient

T = TypeVar("T")

DEFAULT_NAMESPACE = "flux-system"
PLURAL = "silences"
CREATED_BY_CLI = f"{SILENCE_GROUP}/created-by-cli"
"""The annotation on every Silence this command writes: ``expire`` edits only files that carry it."""
FLUX_OWNER_LABELS = ("kustomize.toolkit.fluxcd.io/name", "helm.toolkit.fluxcd.io/name")
MAX_CREATED_BY = 256
MAX_COMMENT = 1024
MAX_FOR = timedelta(days=3650)
"""A silence longer than ten years is a typo (``--for 2000000h``), and beyond it dates overflow."""
CELL = 80
"""Longest comment shown in the table (``-o json|yaml`` has all of it)."""
MAX_FILE_NAME = 200
"""Longest name in local mode: ``.silence-<name>.yaml.<8 hex>.tmp`` must fit a 255-byte file name."""
SUFFIXES = (".yaml", ".yml", ".json")  # what the controller's local mode loads (objects/local.py)
HEADER = (
    "# Written by 'notification-controller silence add'; 'silence expire' rewrites it.\n"
    "# The running controller (--manifests) reads it on its next poll.\n"
)


class UsageError(Exception):
    """Bad usage or input: exit 2, one line."""


class SilenceError(Exception):
    """The directory or the cluster could not do it: exit 1, one line."""


# ---- pure parts -------------------------------------------------------------------------------------
def rfc3339(moment: datetime) -> str:
    """``2026-11-27T10:00:00Z``: UTC, whole seconds (what kubectl shows and a reviewer reads)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def generated_name(now: datetime, suffix: str | None = None) -> str:
    """``silence-20261127-101500-3fa2``: readable (when), sortable, unique enough (4 random hex digits on
    top of the second; ``add`` refuses an existing name rather than overwriting)."""
    return f"silence-{now.astimezone(UTC):%Y%m%d-%H%M%S}-{suffix or secrets.token_hex(2)}"


def parse_matchers(values: Sequence[str]) -> list[Matcher]:
    if not values:
        raise UsageError("at least one --match is needed (e.g. --match kind=Kustomization)")
    if len(values) > MAX_MATCHERS:
        raise UsageError(f"{len(values)} --match given, more than the limit of {MAX_MATCHERS}")
    matchers = []
    for value in values:
        reason = regex_error(value)
        if reason is not None:
            raise UsageError(f"--match {value!r}: not an RE2 expression: {reason}")
        try:
            matchers.append(Matcher.parse(value))
        except ValueError as exc:
            raise UsageError(f"--match: {_one_line(str(exc))}") from None
    return matchers


def regex_error(text: str) -> str | None:
    """Why the regex of a ``=~``/``!~`` matcher ``text`` does not compile (``api.silence.re2_error``: quiet on
    stderr, the reason decoded), or None; checked before ``Matcher.parse`` to name the flag."""
    found = re.match(r"^\s*[A-Za-z0-9_./-]+\s*(=~|!~)(.*)$", text, re.DOTALL)
    if found is None:
        return None
    value = found.group(2).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return re2_error(value)


def parse_for(value: str) -> timedelta:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"--for: {exc}") from None
    if seconds <= 0:
        raise UsageError(f"--for {value!r}: must be longer than 0s")
    if seconds > MAX_FOR.total_seconds():
        raise UsageError(f"--for {value!r}: longer than {MAX_FOR.days} days")
    return timedelta(seconds=seconds)


def parse_starts_at(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(
            f"--starts-at {value!r} is not an RFC 3339 time (e.g. 2026-11-27T22:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise UsageError(f"--starts-at {value!r} has no time zone (add Z or an offset such as +01:00)")
    return moment.astimezone(UTC)


def checked_name(value: str, what: str) -> str:
    try:
        return validate_name(value) if what == "name" else validate_namespace(value)
    except InvalidReference as exc:
        raise UsageError(f"--{what}: {exc}") from None


@dataclass(frozen=True)
class NewSilence:
    """What ``add`` was asked for, checked."""

    name: str
    namespace: str
    matchers: list[Matcher]
    starts: datetime
    ends: datetime
    created_by: str
    comment: str
    summary: bool = True
    all_namespaces: bool = False

    def manifest(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "matchers": [m.dump() for m in self.matchers],
            "startsAt": rfc3339(self.starts),
            "endsAt": rfc3339(self.ends),
            "createdBy": self.created_by,
        }
        if self.comment:
            spec["comment"] = self.comment
        if not self.summary:
            spec["summary"] = False
        if self.all_namespaces:
            spec["allNamespaces"] = True
        return {
            "apiVersion": SILENCE_API_VERSION,
            "kind": "Silence",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {CREATED_BY_CLI: "true"},
            },
            "spec": spec,
        }


def new_silence(args: argparse.Namespace, now: datetime, created_by: str) -> NewSilence:
    """``add``'s flags, checked; the manifest is then validated by the controller's own parser."""
    matchers = parse_matchers(args.match)
    length = parse_for(args.duration)
    starts = parse_starts_at(args.starts_at) if args.starts_at else now
    namespace = checked_name(args.namespace, "namespace")
    name = checked_name(args.name, "name") if args.name else generated_name(now)
    who = args.created_by if args.created_by is not None else created_by
    if len(who) > MAX_CREATED_BY:
        raise UsageError(f"--created-by is longer than {MAX_CREATED_BY} characters")
    comment = args.comment or ""
    if len(comment) > MAX_COMMENT:
        raise UsageError(f"--comment is longer than {MAX_COMMENT} characters")
    try:
        ends = starts + length
    except OverflowError:
        raise UsageError("--starts-at plus --for is past the year 9999") from None
    silence = NewSilence(
        name=name,
        namespace=namespace,
        matchers=matchers,
        starts=starts.replace(microsecond=0),
        ends=ends.replace(microsecond=0),
        created_by=who,
        comment=comment,
        summary=not args.no_summary,
        all_namespaces=args.all_namespaces,
    )
    parsed(silence.manifest(), "the new Silence")  # what the controller will accept, or exit 2 here
    return silence


def parsed(raw: Any, where: str) -> Silence:
    """``raw`` through the controller's parser (``api.objects``); ``ManifestError`` → ``UsageError``."""
    from .api.objects import parse_object

    try:
        obj = parse_object(raw, source=where)
    except ManifestError as exc:
        raise UsageError(_one_line(str(exc))) from None
    if not isinstance(obj, Silence):
        raise UsageError(f"{where} is not a Silence")
    return obj


def expired(raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """``raw`` (a Silence manifest) ending now: ``endsAt`` now, ``duration`` gone, a future ``startsAt``
    moved to now (a pending silence then never starts, as Alertmanager's expire)."""
    spec = dict(raw.get("spec") or {})
    spec.pop("duration", None)
    spec["endsAt"] = rfc3339(now)
    starts = spec.get("startsAt")
    try:
        starts_at = _as_datetime(starts) if starts is not None else None
    except ValueError:
        starts_at = None
    if starts_at is not None and starts_at > now:
        spec["startsAt"] = rfc3339(now)
    return {**raw, "spec": spec}


def ended_at(silence: Silence, now: datetime) -> str | None:
    """When ``silence`` ended, if it has: ``expire`` then changes nothing (moving ``endsAt`` to now would
    lengthen it)."""
    window = silence.window()
    if window is None or window[1] > now:
        return None
    return rfc3339(window[1])


@dataclass(frozen=True)
class Ended:
    """What ``expire`` did: the Silence as it is now, where it lives, and ``already`` (its end) when it
    had ended before and nothing was changed."""

    manifest: dict[str, Any]
    where: str
    already: str | None = None


def expire_patch(current: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The JSON merge patch that ends ``current`` now (``null`` removes ``duration``), with the
    ``resourceVersion`` read: the API server refuses it (409) if the Silence changed meanwhile."""
    spec = expired(current, now)["spec"]
    patch: dict[str, Any] = {"endsAt": spec["endsAt"]}
    if "duration" in (current.get("spec") or {}):
        patch["duration"] = None
    if spec.get("startsAt") != (current.get("spec") or {}).get("startsAt"):
        patch["startsAt"] = spec["startsAt"]
    version = (current.get("metadata") or {}).get("resourceVersion")
    metadata = {"resourceVersion": version} if version else {}
    return {"metadata": metadata, "spec": patch} if metadata else {"spec": patch}


def _as_datetime(value: Any) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def state_of(silence: Silence, now: datetime) -> str:
    """Pending / Active / Expired from the window and ``now``; the controller's ``status.state`` when the
    window cannot be computed here (a ``duration`` without ``startsAt`` in local mode), else Unknown."""
    state = silence.state(now)
    if state is None:
        state = silence.status.state
    return state.value if state is not None else "Unknown"


def row(silence: Silence, now: datetime) -> dict[str, Any]:
    """What ``list`` shows of one Silence (``-o json|yaml`` print these)."""
    window = silence.window()
    spec, status = silence.spec, silence.status
    return {
        "name": silence.metadata.name,
        "namespace": silence.metadata.namespace,
        "state": state_of(silence, now),
        "matchers": [str(m) for m in spec.matchers],
        "startsAt": rfc3339(window[0]) if window else None,
        "endsAt": rfc3339(window[1]) if window else None,
        "held": status.held if status.observed_generation >= 0 or status.held or status.state else None,
        "createdBy": spec.created_by or "",
        "comment": spec.comment or "",
        "summary": spec.summary,
        "allNamespaces": spec.all_namespaces,
        "createdByCli": silence.metadata.annotations.get(CREATED_BY_CLI) == "true",
    }


def select(rows: list[dict[str, Any]], *, namespace: str | None, expired_only: bool) -> list[dict[str, Any]]:
    """amtool's ``silence query``: Pending and Active ones by default, ``--expired`` the expired ones."""
    wanted = [
        r
        for r in rows
        if (namespace is None or r["namespace"] == namespace)
        and ((r["state"] == SilenceState.EXPIRED) == expired_only)
    ]
    return sorted(wanted, key=lambda r: (r["namespace"], r["endsAt"] or "", r["name"]))


def render_list(
    rows: list[dict[str, Any]], *, namespace: str | None, expired_only: bool, output: str, out: TextIO
) -> None:
    if output != "text":
        dump(rows, output, out)
        return
    if not rows:
        which = "expired silences" if expired_only else "active or pending silences"
        where = "any namespace" if namespace is None else f"namespace {namespace!r}"
        out.write(f"no {which} in {where}\n")
        return
    columns = (["namespace"] if namespace is None else []) + [
        "name",
        "state",
        "matchers",
        "ends",
        "held",
        "created by",
        "comment",
    ]
    cells = []
    for r in rows:
        values = {
            **r,
            "matchers": " ".join(r["matchers"]),
            "ends": r["endsAt"] or "-",
            "held": "-" if r["held"] is None else str(r["held"]),
            "created by": r["createdBy"],
            "comment": r["comment"] if len(r["comment"]) <= CELL else r["comment"][: CELL - 1] + "…",
        }
        cells.append([escape_cell(str(values[c])) for c in columns])
    table(columns, cells, out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def local_user(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    for key in ("USER", "LOGNAME"):
        if env.get(key):
            return env[key]
    with contextlib.suppress(Exception):  # no passwd entry in a container: getpass raises KeyError/OSError
        return getpass.getuser()
    return "unknown"


def kubeconfig_user(path: Path) -> str | None:
    """The user name of the kubeconfig's current context (as ``kubectl config view --minify`` shows)."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(config, dict):
        return None
    current = config.get("current-context")
    for entry in config.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == current:
            context = entry.get("context")
            user = context.get("user") if isinstance(context, dict) else None
            return str(user) if user else None
    return None


# ---- local mode: a directory -------------------------------------------------------------------------
@dataclass
class Found:
    """A Silence document in a manifests directory."""

    path: Path
    documents: int  # how many documents its file holds
    raw: dict[str, Any]
    silence: Silence | None  # None: invalid (``error`` says why)
    error: str = ""


@dataclass
class Directory:
    """``--manifests DIR``: the Silences under it, and the files this command owns."""

    root: Path
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.root.exists():
            raise SilenceError(f"--manifests {self.root}: no such directory")
        if not self.root.is_dir():
            raise SilenceError(
                f"--manifests {self.root}: not a directory (silence add writes a file into it)"
            )

    def file_of(self, name: str) -> Path:
        """``silence-<name>.yaml``; a name that already starts with ``silence-`` (the generated ones) is not
        prefixed twice. Two names that give one file (``x`` and ``silence-x``): the second ``add`` refuses."""
        return self.root / f"{name if name.startswith('silence-') else 'silence-' + name}.yaml"

    def scan(self) -> list[Found]:
        """Every Silence document under the directory, as the controller's local mode finds them (the same
        suffixes, recursively); unreadable files and invalid Silences become warnings."""
        found: list[Found] = []
        files = sorted(p for p in self.root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        for path in files:
            try:
                docs = [
                    d
                    for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_Loader)
                    if d is not None
                ]
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                self.warnings.append(f"{path}: skipped ({type(exc).__name__})")
                continue
            for doc in docs:
                if not (isinstance(doc, dict) and doc.get("kind") == "Silence"):
                    continue
                if doc.get("apiVersion") != SILENCE_API_VERSION:
                    continue
                try:
                    silence: Silence | None = parsed(doc, str(path))
                    error = ""
                except UsageError as exc:
                    silence, error = None, str(exc)
                    self.warnings.append(f"{path}: invalid Silence skipped: {error}")
                found.append(Found(path, len(docs), doc, silence, error))
        return found

    def find(self, namespace: str, name: str) -> Found | None:
        for item in self.scan():
            meta = item.raw.get("metadata") or {}
            if meta.get("name") == name and (meta.get("namespace") or "default") == namespace:
                return item
        return None

    def add(self, silence: NewSilence) -> Path:
        if len(silence.name) > MAX_FILE_NAME:
            raise UsageError(f"--name is longer than {MAX_FILE_NAME} characters (it names a file)")
        existing = self.find(silence.namespace, silence.name)
        if existing is not None:
            raise SilenceError(
                f"Silence {silence.namespace}/{silence.name} already exists in {existing.path}; "
                "choose another --name"
            )
        path = self.file_of(silence.name)
        write_atomically(path, _yaml(silence.manifest()), replace=False)
        return path

    def expire(self, namespace: str, name: str, now: datetime) -> Ended:
        item = self.find(namespace, name)
        if item is None:
            raise SilenceError(f"Silence {namespace}/{name} not found under {self.root}")
        if item.silence is not None and (ended := ended_at(item.silence, now)) is not None:
            return Ended(item.raw, str(item.path), already=ended)
        annotations = (item.raw.get("metadata") or {}).get("annotations") or {}
        if (
            annotations.get(CREATED_BY_CLI) != "true"
            or item.documents != 1
            or item.path != self.file_of(name)
        ):
            raise SilenceError(
                f"Silence {namespace}/{name} is defined in {item.path}, which 'silence add' did not write: "
                "set its spec.endsAt there (and in Git, where it comes from)"
            )
        updated = expired(item.raw, now)
        parsed(updated, str(item.path))
        write_atomically(item.path, _yaml(updated), replace=True)
        return Ended(updated, str(item.path))

    def rows(self, now: datetime) -> list[dict[str, Any]]:
        return [row(item.silence, now) for item in self.scan() if item.silence is not None]


class _Loader(yamldoc.BaseLoader):
    """The controller's safe loader (a plain ``=`` is a string, as in Kubernetes' YAML), with timestamps
    left as strings, as JSON and the API server give them, so a rewritten file keeps them as written."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yamldoc.BaseLoader.yaml_implicit_resolvers.items()
}


def _yaml(manifest: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, allow_unicode=False)


def write_atomically(path: Path, text: str, *, replace: bool) -> None:
    """``text`` at ``path`` all at once: written and fsynced under a name the controller's loader ignores
    (``.NAME.tmp``), then renamed over ``path`` (``replace``) or hard-linked to it (fails if it exists, so
    ``add`` never overwrites a file it did not just check). A poll sees the old file or the new one. The
    temporary file is created exclusively (a planted file or symlink of that name fails the write) and a
    rename replaces a symlink at ``path`` rather than writing through it."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            with contextlib.suppress(FileNotFoundError):  # the rewritten file keeps its permissions
                os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise SilenceError(f"{path} already exists; choose another --name") from None
    except OSError as exc:
        raise SilenceError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


# ---- cluster mode: the API server --------------------------------------------------------------------
def _path(namespace: str | None, name: str | None = None) -> str:
    from .kube.client import api_path

    return api_path(SILENCE_GROUP, SILENCE_VERSION, PLURAL, namespace, name)


class Cluster:
    """``--kubeconfig PATH``: Silences through the API server, one connection per command."""

    def __init__(self, kubeconfig: Path) -> None:
        if not kubeconfig.is_file():
            raise SilenceError(f"{kubeconfig}: no such kubeconfig file")
        self.kubeconfig = kubeconfig

    async def _run(self, work: Callable[[KubeClient], Awaitable[T]]) -> T:
        from .errors import ControllerError
        from .kube.client import KubeClient

        try:
            client = await KubeClient.connect(str(self.kubeconfig))
        except (ControllerError, OSError, ValueError) as exc:
            raise SilenceError(f"cannot use {self.kubeconfig}: {_one_line(str(exc))}") from None
        try:
            return await work(client)
        finally:
            await client.close()

    async def _missing(self, client: KubeClient, namespace: str) -> str:
        """Why a 404 on the collection: the CRD is not installed, or the namespace does not exist."""
        from .errors import KubeError

        try:
            await client.request("GET", f"/apis/{SILENCE_GROUP}/{SILENCE_VERSION}")
        except KubeError as exc:
            if exc.not_found:
                return (
                    f"the Silence CRD is not installed ({PLURAL}.{SILENCE_GROUP}): "
                    f"kubectl apply -f crds/{SILENCE_GROUP}_{PLURAL}.yaml"
                )
        return f"namespace {namespace!r} not found"

    def add(self, silence: NewSilence) -> dict[str, Any]:
        from .errors import KubeError

        async def work(client: KubeClient) -> dict[str, Any]:
            try:
                created: dict[str, Any] = await client.request(
                    "POST", _path(silence.namespace), body=silence.manifest()
                )
            except KubeError as exc:
                if exc.conflict:
                    raise SilenceError(
                        f"Silence {silence.namespace}/{silence.name} already exists; choose another --name"
                    ) from None
                if exc.not_found:
                    raise SilenceError(await self._missing(client, silence.namespace)) from None
                raise SilenceError(f"cannot create the Silence: {_one_line(str(exc))}") from None
            return created

        return asyncio.run(self._run(work))

    def rows(self, namespace: str | None, now: datetime, warnings: list[str]) -> list[dict[str, Any]]:
        from .errors import KubeError

        async def work(client: KubeClient) -> list[dict[str, Any]]:
            try:
                items, _ = await client.list(_path(namespace))
            except KubeError as exc:
                if exc.not_found:
                    raise SilenceError(await self._missing(client, namespace or "")) from None
                raise SilenceError(f"cannot list Silences: {_one_line(str(exc))}") from None
            return list(items)

        rows = []
        for raw in asyncio.run(self._run(work)):
            raw = {"apiVersion": SILENCE_API_VERSION, "kind": "Silence", **raw}
            try:
                silence = Silence.model_validate(raw)
            except ValueError as exc:
                meta = raw.get("metadata") or {}
                warnings.append(
                    f"Silence {meta.get('namespace')}/{meta.get('name')}: unreadable, skipped: "
                    f"{_one_line(str(exc))[:200]}"
                )
                continue
            rows.append(row(silence, now))
        return rows

    def expire(self, namespace: str, name: str, now: datetime) -> Ended:
        return asyncio.run(self._run(lambda client: expire_in_cluster(client, namespace, name, now)))


async def expire_in_cluster(client: KubeClient, namespace: str, name: str, now: datetime) -> Ended:
    """``expire`` through ``client``: read the Silence, refuse one Flux applies, merge-patch ``endsAt`` with
    the ``resourceVersion`` read (the controller's web UI calls this too, with its own client)."""
    from .errors import KubeError
    from .kube.client import MERGE_PATCH

    path = _path(namespace, name)
    try:
        current: dict[str, Any] = await client.request("GET", path)
    except KubeError as exc:
        if exc.not_found:
            raise SilenceError(f"Silence {namespace}/{name} not found") from None
        raise SilenceError(f"cannot read the Silence: {_one_line(str(exc))}") from None
    labels = (current.get("metadata") or {}).get("labels") or {}
    owner = next((f"{k}={labels[k]}" for k in FLUX_OWNER_LABELS if k in labels), None)
    if owner is not None:
        raise SilenceError(
            f"Silence {namespace}/{name} is applied by Flux ({owner}), which would undo this change: "
            "set its spec.endsAt in Git"
        )
    with contextlib.suppress(ValueError):
        ended = ended_at(Silence.model_validate(current), now)
        if ended is not None:
            return Ended(current, "the cluster", already=ended)
    try:
        patched: dict[str, Any] = await client.request(
            "PATCH", path, body=expire_patch(current, now), content_type=MERGE_PATCH
        )
    except KubeError as exc:
        if exc.conflict:
            raise SilenceError(
                f"Silence {namespace}/{name} changed while it was being expired; run expire again"
            ) from None
        raise SilenceError(f"cannot expire the Silence: {_one_line(str(exc))}") from None
    return Ended(patched, "the cluster")


# ---- the command ---------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``error:`` line (``UsageError``), not usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _source_flags(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--manifests",
        type=Path,
        metavar="DIR",
        help="local mode: the directory the controller's --manifests reads",
    )
    source.add_argument("--kubeconfig", type=Path, metavar="PATH", help="a cluster: through its API server")
    add_output_flag(parser)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="notification-controller silence",
        description=(
            "Hold the notifications that match, for a while, with a reason (docs/silences.md). "
            "One of --manifests DIR (local mode) or --kubeconfig PATH (a cluster) says where Silences live."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="add|list|expire", parser_class=_Parser)
    actions.required = True

    add = actions.add_parser(
        "add",
        help="create a Silence",
        description="Create a Silence: notifications matching every --match are held until it ends.",
    )
    add.add_argument(
        "--match",
        action="append",
        default=[],
        metavar="MATCHER",
        help="NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX (repeat: all must match); NAME is kind, "
        "name, namespace, reason, severity, alert, provider or metadata.KEY",
    )
    add.add_argument(
        "--for", dest="duration", required=True, metavar="DURATION", help="how long, e.g. 30m, 2h, 1h30m"
    )
    add.add_argument("--comment", default="", help="why (shown by list and in the summary)")
    add.add_argument(
        "--starts-at", metavar="RFC3339", help="when it starts (default now), e.g. 2026-11-27T22:00:00Z"
    )
    add.add_argument("--name", help="the Silence's name (default silence-<UTC time>-<4 hex digits>)")
    add.add_argument("--created-by", help="who (default $USER, or the kubeconfig's user with --kubeconfig)")
    add.add_argument(
        "--no-summary", action="store_true", help="send no summary of what was held when it ends"
    )
    add.add_argument(
        "--all-namespaces",
        action="store_true",
        help="hold the Alerts of every namespace (honoured only in the controller's --cluster-silences-namespace)",
    )
    add.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}")
    _source_flags(add)

    listing = actions.add_parser(
        "list",
        help="show the active and pending Silences",
        description="Show Silences: the active and pending ones, or with --expired the expired ones.",
    )
    listing.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    listing.add_argument("--expired", action="store_true", help="show the expired Silences instead")
    _source_flags(listing)

    expire = actions.add_parser(
        "expire", help="end a Silence now", description="End a Silence now (its spec.endsAt becomes now)."
    )
    expire.add_argument("name", help="the Silence's name")
    expire.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"default {DEFAULT_NAMESPACE}")
    _source_flags(expire)
    return parser


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def run(args: argparse.Namespace, out: TextIO, err: TextIO, now: datetime) -> int:
    if args.manifests is None and args.kubeconfig is None:
        raise UsageError("where do Silences live? give --manifests DIR (local mode) or --kubeconfig PATH")
    where: Directory | Cluster = Directory(args.manifests) if args.manifests else Cluster(args.kubeconfig)
    if args.action == "add":
        who = local_user()
        if isinstance(where, Cluster):
            who = kubeconfig_user(where.kubeconfig) or who
        silence = new_silence(args, now, who)
        if isinstance(where, Directory):
            path = where.add(silence)
            manifest, said = silence.manifest(), f"wrote {path}"
        else:
            manifest, said = where.add(silence), "created in the cluster"
        if args.output != "text":
            dump(manifest, args.output, out)
        else:
            out.write(
                f"silence {silence.namespace}/{silence.name} {said}: {' '.join(map(str, silence.matchers))} "
                f"until {rfc3339(silence.ends)}\n"
            )
        return 0
    if args.action == "expire":
        namespace, name = checked_name(args.namespace, "namespace"), checked_name(args.name, "name")
        ended = where.expire(namespace, name, now)
        if args.output != "text":
            dump(ended.manifest, args.output, out)
        elif ended.already is not None:
            out.write(f"silence {namespace}/{name} had already ended at {ended.already}; nothing changed\n")
        else:
            out.write(f"silence {namespace}/{name} expired at {rfc3339(now)} ({ended.where})\n")
        return 0
    scope = None if args.all_namespaces else checked_name(args.namespace, "namespace")
    warnings: list[str] = []
    if isinstance(where, Directory):
        rows = where.rows(now)
        warnings = where.warnings
    else:
        rows = where.rows(scope, now, warnings)
    for warning in warnings:
        err.write(f"warning: {escape_cell(warning)}\n")
    shown = select(rows, namespace=scope, expired_only=args.expired)
    render_list(shown, namespace=scope, expired_only=args.expired, output=args.output, out=out)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, now: datetime | None = None) -> int:
    out = out or sys.stdout
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as exc:  # --help
            return 2 if exc.code else 0
        return run(args, out, sys.stderr, now or _now())
    except UsageError as exc:
        print(f"error: {escape_cell(str(exc))}", file=sys.stderr)
        return 2
    except SilenceError as exc:
        print(f"error: {escape_cell(str(exc))}", file=sys.stderr)
        return 1
