"""Local mode: a directory of YAML manifests instead of a cluster.

``LocalManifests`` loads every ``*.yaml``/``*.yml``/``*.json`` file (multi-document, ``kind: List``) into
the ``ObjectStore`` at start and again whenever a file changes (polled: no inotify dependency). Invalid
documents are reported with file, document index and field, and skipped; valid ones still load.
Objects of other kinds (GitRepository, Kustomization...) are kept by ``LocalCluster`` so receivers can
"annotate" them and Alerts can match on their labels, exactly as they would in a cluster.

Silences (issue 26) load like the others, at start and at every change of the files. A file has no creation
time, so a Silence here needs ``spec.startsAt`` (the ``silence add`` CLI always writes it); without it, the
document is reported as invalid at ``spec.startsAt``. The files are the truth: the controller never edits or
removes them, except a file the ``silence`` CLI wrote (annotation ``notification-controller.io/created-by-cli:
"true"``, that one document) once its Silence has been expired for ``--silence-retention``
(``LocalCluster.delete``); any other Silence stays until its file is changed.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ..api.common import SHARED_STATUSES, ObjectStatus, Secret, json_key, remember, shared_status, with_fields
from ..api.hooks import HOOKS_FINALIZER
from ..api.objects import Object, parse_object, supported_kind
from ..api.receiver import Receiver, ReceiverStatus
from ..api.silence import SILENCE_GROUP, Silence, SilenceStatus
from ..core.apiref import InvalidReference, Use, label_selector, shown, validate_object_ref
from ..errors import ConfigError, KubeError, ManifestError
from ..logsetup import event_already_logged, fields, object_fields
from . import yamldoc
from .base import ObjectRef, ObjectStore

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")
_UID_NS = uuid.UUID("6b1d0d36-0c3b-4b6f-9d65-3f1f2c4f7a10")
# Local mode only: a ServiceAccount manifest names the file holding its token (docs/providers/azureeventhub.md).
LOCAL_TOKEN_FILE_ANNOTATION = "notification-controller.local/token-file"
_SPEC_FIELD = re.compile(r"^(spec\.[A-Za-z0-9_.\[\]]*[A-Za-z0-9_\]])")
SILENCE_CLI_ANNOTATION = f"{SILENCE_GROUP}/created-by-cli"
"""On a Silence the ``silence add`` CLI wrote (its file may be removed after retention, the module docstring)."""


@dataclass
class LoadResult:
    objects: list[Object] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    implicit_generation: set[tuple[str, str, str]] = field(default_factory=set)
    """(kind, namespace, name) of the objects given generation 1 by ``load_directory(implicit_generation=
    True)``: their manifest has none."""
    silence_files: dict[tuple[str, str], tuple[Path, int]] = field(default_factory=dict)
    """(namespace, name) of each Silence → its file and how many documents that file holds."""


def _split_documents(text: str) -> list[tuple[int, str]]:
    """Split a YAML stream at ``---``/``...`` lines (as kubectl's splitter does): (first line, text) each.

    Parsing documents one by one lets a syntax error in document N skip that document only.
    """
    chunks: list[tuple[int, str]] = []
    start, lines = 0, list[str]()
    for number, line in enumerate(text.splitlines(keepends=True)):
        marker = line[:3]
        if marker in ("---", "...") and (len(line) == 3 or line[3] in " \t\r\n#"):
            chunks.append((start, "".join(lines)))
            start, lines = number + 1, []
            rest = line[3:].strip()
            if marker == "---" and rest and not rest.startswith("#"):
                start = number  # "--- {inline: doc}" keeps its content, on its own line
                lines.append(" " * 3 + line[3:])
            continue
        lines.append(line)
    chunks.append((start, "".join(lines)))
    return [(first, chunk) for first, chunk in chunks if chunk.strip()]


def _yaml_reason(exc: yaml.YAMLError, first_line: int) -> str:
    """The parser's own reason and the file line, never the document's content."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "invalid YAML"
    where = f" at line {first_line + mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"cannot parse YAML{where}: {problem}"


@dataclass(frozen=True)
class _Document:
    """A document of a file and where it is: its first line (0-based) and text, to find a field's line
    when it is reported (composed again then only: a valid document costs nothing more)."""

    value: Any
    first_line: int
    text: str
    item: int | None = None  # its index in a ``kind: List``'s items

    def line(self, field: str = "") -> int:
        """The 1-based line in the file of ``field`` (of the document's start without one)."""
        if not field and self.item is None:
            return self.first_line + 1
        try:
            node: yaml.Node | None = yaml.compose(self.text, Loader=yamldoc.BaseLoader)
        except yaml.YAMLError:  # pragma: no cover - it was parsed once already
            return self.first_line + 1
        if self.item is not None:
            field = f"items[{self.item}]" + (f".{field}" if field else "")
        return self.first_line + locate(node, field) + 1


def _documents(
    path: Path, source: str, tags: yamldoc.Tags | None = None
) -> tuple[list[_Document | None], list[ManifestError]]:
    """Every document of a file (``kind: List`` expanded), and one error per unparsable document (at its
    1-based line in the file).

    Parsed as ``yaml.load`` with libyaml's safe loader would, faster (``store.yamldoc``); ``tags`` is shared
    by the files of one load."""
    text = path.read_text(encoding="utf-8")
    out: list[_Document | None] = []
    errors: list[ManifestError] = []
    for index, (first_line, chunk) in enumerate(_split_documents(text)):
        try:
            doc = yamldoc.load(chunk, tags)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = first_line + min(mark.line if mark is not None else 0, max(len(chunk.splitlines()) - 1, 0))
            errors.append(
                ManifestError(_yaml_reason(exc, first_line), source=source, index=index, line=line + 1)
            )
            out.append(None)  # keep document indexes stable for the error messages that follow
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out.extend(_Document(item, first_line, chunk, i) for i, item in enumerate(doc["items"]))
        else:
            out.append(_Document(doc, first_line, chunk))
    return out, errors


def locate(node: yaml.Node | None, field: str) -> int:
    """The 0-based line (in the document) of ``field`` (``spec.eventSources[0].kind``) in the composed
    ``node``: the key's own line, or the deepest part of the path present (a missing field: its parent's
    line); 0 without a node."""
    if node is None:
        return 0
    path = _path(field)
    line = node.start_mark.line
    for part in path:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    line, node = key.start_mark.line, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            return line
    return line


def _path(field: str) -> list[str | int]:
    """``spec.eventSources[0].kind`` → ["spec", "eventSources", 0, "kind"]."""
    out: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", field):
        if part.startswith("["):
            out.append(int(part[1:-1]))
        else:
            out.append(int(part) if part.isdigit() else part)
    return out


# ---- did you mean -----------------------------------------------------------------------------------------


def stable_uid(name: str) -> str:
    """``str(uuid.uuid5(_UID_NS, name))`` without building ``UUID`` objects (a third of the cost; one per
    object at every load: 10,000 Alerts spent 0.06 s here)."""
    digest = bytearray(
        hashlib.sha1(_UID_NS.bytes + name.encode("utf-8"), usedforsecurity=False).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def manifest_files(root: Path) -> list[Path]:
    """The manifest files under ``root`` (sorted, so duplicates resolve the same way every time), or
    ``root`` itself when it is a file."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def load_directory(
    root: Path, *, default_namespace: str = "default", implicit_generation: bool = False
) -> LoadResult:
    """Every valid object under ``root``, the other kinds' documents, and the errors.

    ``implicit_generation``: an Alert, Provider or Receiver without ``metadata.generation`` gets 1, as the
    API server gives a new object (``LocalManifests`` counts spec changes from there; building the object
    with it saves two model copies per object at start-up, issue 17), and is listed in
    ``result.implicit_generation``."""
    result = LoadResult()
    if not root.exists():
        result.errors.append(ManifestError("manifests path does not exist", source=str(root)))
        return result
    # where each object was first defined: its line is worked out only for a duplicate (composing a
    # document to find a line costs its whole text, and a ``kind: List`` is one text: quadratic per item)
    seen: dict[tuple[str, str, str], tuple[str, _Document]] = {}
    base = root.parent if root.is_file() else root
    tags = yamldoc.Tags()  # scalar tags resolved while this load lasts
    for path in manifest_files(root):
        rel = str(path.relative_to(base))
        try:
            docs, parse_errors = _documents(path, rel, tags)
        except (OSError, UnicodeDecodeError) as exc:
            result.errors.append(ManifestError(f"cannot read file: {exc.__class__.__name__}", source=rel))
            continue
        result.errors.extend(parse_errors)
        for index, where in enumerate(docs):
            if where is None or where.value is None:
                continue  # an empty or unparsable document (already reported)
            doc = where.value
            if not isinstance(doc, dict):
                result.errors.append(
                    ManifestError("document is not a mapping", source=rel, index=index, line=where.line())
                )
                continue
            if not supported_kind(doc):
                if doc.get("kind") and isinstance(doc.get("metadata"), dict) and doc["metadata"].get("name"):
                    other = copy.deepcopy(doc)
                    other["metadata"].setdefault("namespace", default_namespace)
                    result.others.append(other)
                    continue
            metadata = doc.get("metadata")
            implicit = False
            if isinstance(metadata, dict) and metadata.get("name"):
                added: dict[str, Any] = {}
                if not metadata.get("uid"):
                    ns = metadata.get("namespace") or default_namespace
                    added["uid"] = stable_uid(f"{doc.get('kind')}/{ns}/{metadata['name']}")
                if implicit_generation and not metadata.get("generation") and doc.get("apiVersion") != "v1":
                    added["generation"] = 1
                    implicit = True
                if added:
                    doc = {**doc, "metadata": {**metadata, **added}}
            try:
                obj = parse_object(doc, source=rel, index=index, default_namespace=default_namespace)
            except ManifestError as exc:
                message = str(exc).removeprefix(f"{rel}[{index}]: ").removeprefix(f"{exc.field}: ")
                field_ = exc.field
                if field_ == "spec" and doc.get("kind") == "Silence":  # the field its first error names
                    found = _SPEC_FIELD.match(message)
                    field_ = found.group(1) if found else field_
                line = where.line(field_)
                result.errors.append(ManifestError(message, source=rel, index=index, field=field_, line=line))
                continue
            if isinstance(obj, Silence) and (why := _local_silence_error(obj)) is not None:
                field_, message = why
                result.errors.append(
                    ManifestError(message, source=rel, index=index, field=field_, line=where.line(field_))
                )
                continue
            key = (obj.KIND, obj.metadata.namespace, obj.metadata.name)
            if key in seen:
                result.errors.append(
                    ManifestError(
                        f"duplicate {key[0]} {key[1]}/{key[2]} (first defined in {_defined_at(*seen[key])}); "
                        "skipped",
                        source=rel,
                        index=index,
                        field="metadata.name",
                        line=where.line("metadata.name"),
                    )
                )
                continue
            seen[key] = (rel, where)
            result.objects.append(obj)
            if isinstance(obj, Silence):
                # documents of the file: empty ones do not count, unparsable ones do (they are the user's)
                documents = sum(1 for d in docs if d is None or d.value is not None)
                result.silence_files[(key[1], key[2])] = (path, documents)
            if implicit:
                result.implicit_generation.add(key)
    return result


def _defined_at(rel: str, where: _Document) -> str:
    return f"{rel}:{where.line('metadata.name')}"


def _local_silence_error(silence: Silence) -> tuple[str, str] | None:
    """(field, message) of what a Silence file must say that an API server would have filled in or checked."""
    window = silence.window()
    if window is None:
        return (
            "spec.startsAt",
            "required in local mode: a file has no creation time to start the Silence from",
        )
    if window[1] < window[0]:  # equal: it has ended (``silence expire`` within the second of ``add``)
        return "spec.endsAt", "must not be before spec.startsAt"
    return None


class LocalCluster:
    """The ``Cluster`` port over in-memory objects: status and finalizers go back into the store,
    annotations onto the "other" objects, Kubernetes Events into the log (and ``self.events``)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.others: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.statuses: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.finalizers: dict[tuple[str, str, str], list[str]] = {}
        self.events: list[tuple[ObjectRef, str, str, str]] = []
        self.silence_files: dict[tuple[str, str], tuple[Path, int]] = {}  # see LoadResult.silence_files
        self._written: dict[bytes, dict[str, Any]] = {}  # see _shared

    def _shared(self, status: dict[str, Any]) -> dict[str, Any]:
        """One dict for equal written statuses (most objects get the same one, issue 17): never changed in
        place (a patch builds a new dict), so sharing it is safe. Bounded as ``common.shared_status``."""
        key = json_key(status)
        if key is None:
            return status
        found = self._written.get(key)
        if found is not None:
            return found
        remember(self._written, key, status, SHARED_STATUSES)
        return status

    def set_others(self, others: Sequence[dict[str, Any]]) -> None:
        fresh: dict[tuple[str, str, str], dict[str, Any]] = {}
        for obj in others:
            meta = obj["metadata"]
            key = (str(obj["kind"]), str(meta["namespace"]), str(meta["name"]))
            old = self.others.get(key)
            if old is not None:  # keep annotations added by receivers across reloads
                merged = dict(meta.get("annotations") or {})
                merged.update(old["metadata"].get("annotations") or {})
                meta["annotations"] = merged
            fresh[key] = obj
        self.others = fresh

    def _other(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self.others.get((kind, namespace, name))
        if obj is None:
            raise KubeError(f'{kind} "{namespace}/{name}" not found', status=404)
        return obj

    # get_metadata/list_metadata/annotate take tenant and event input: the same validation and refusal
    # policy as KubeCluster (core.apiref), so local mode answers exactly what a cluster would.
    async def get_metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        _lookup_ref(api_version, kind, namespace, name)
        obj = self._other(kind, namespace, name)
        return {"apiVersion": obj.get("apiVersion", api_version), "kind": kind, "metadata": _meta_copy(obj)}

    async def list_metadata(
        self, api_version: str, kind: str, namespace: str, match_labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        _lookup_ref(api_version, kind, namespace, None)
        label_selector(match_labels)
        out = []
        for (k, ns, _), obj in sorted(self.others.items()):
            labels = obj["metadata"].get("labels") or {}
            if k == kind and ns == namespace and all(labels.get(a) == b for a, b in match_labels.items()):
                out.append(
                    {
                        "apiVersion": obj.get("apiVersion", api_version),
                        "kind": kind,
                        "metadata": _meta_copy(obj),
                    }
                )
        return out

    async def annotate(
        self, api_version: str, kind: str, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        _lookup_ref(api_version, kind, namespace, name)
        obj = self._other(kind, namespace, name)
        obj["metadata"].setdefault("annotations", {}).update(annotations)
        log.info("requested reconciliation of %s/%s/%s", kind, namespace, name)

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        key = (ref.kind, ref.namespace, ref.name)
        merged = {**self.statuses.get(key, {}), **status}
        merged = {k: v for k, v in merged.items() if v is not None}  # merge-patch: null deletes
        self.statuses[key] = self._shared(merged)
        current = self.store.get(ref.kind, ref.namespace, ref.name)
        if current is not None:
            self.store.upsert(with_status(current, merged))

    async def set_finalizers(self, ref: ObjectRef, finalizers: Sequence[str], resource_version: str) -> None:
        key = (ref.kind, ref.namespace, ref.name)
        self.finalizers[key] = list(finalizers)
        current = self.store.get(ref.kind, ref.namespace, ref.name)
        if current is not None and current.metadata.deletion_timestamp is not None and not finalizers:
            # The last finalizer of an object removed from the files: the deletion completes.
            self.finalizers.pop(key, None)
            self.statuses.pop(key, None)
            self.store.delete(ref.kind, ref.namespace, ref.name)
            return
        if current is not None:
            meta = current.metadata.model_copy(update={"finalizers": list(finalizers)})
            self.store.upsert(current.model_copy(update={"metadata": meta}))

    async def emit_event(
        self, ref: ObjectRef, type_: str, reason: str, message: str, annotations: Mapping[str, str] | None
    ) -> None:
        self.events.append((ref, type_, reason, message))
        del self.events[:-1000]
        level = logging.WARNING if type_ == "Warning" else logging.INFO
        if event_already_logged():  # the controller logged this failure or drop itself: one line each
            level = logging.DEBUG
        log.log(
            level,
            "event %s %s on %s %s/%s: %s",
            type_,
            reason,
            ref.kind,
            ref.namespace,
            ref.name,
            message,
            extra=fields(**object_fields(ref.kind, ref.namespace, ref.name, reason=reason, type=type_)),
        )

    async def delete(self, ref: ObjectRef) -> None:
        """Remove a Silence's file, only if the ``silence`` CLI wrote it (annotation ``SILENCE_CLI_ANNOTATION``)
        and it holds that one document; anything else is the user's: ``KubeError(status=405)`` naming why."""
        key = (ref.kind, ref.namespace, ref.name)
        current = self.store.get(*key)
        if current is None:
            raise KubeError(f'{ref.kind} "{ref.namespace}/{ref.name}" not found', status=404)
        if ref.uid and current.metadata.uid != ref.uid:
            raise KubeError(f'{ref.kind} "{ref.namespace}/{ref.name}" has another uid', status=409)
        found = self.silence_files.get((ref.namespace, ref.name)) if ref.kind == "Silence" else None
        if found is None:
            raise KubeError(
                f"local mode does not delete {ref.kind} objects: the manifests are the truth", status=405
            )
        path, documents = found
        if current.metadata.annotations.get(SILENCE_CLI_ANNOTATION) != "true":
            raise KubeError(
                f"{path.name} was not written by the silence CLI (no annotation {SILENCE_CLI_ANNOTATION}: "
                '"true"): the manifests are yours to remove',
                status=405,
            )
        if documents != 1:
            raise KubeError(
                f"{path.name} holds other documents too: the manifests are yours to edit", status=405
            )
        await asyncio.to_thread(path.unlink, missing_ok=True)
        self.silence_files.pop((ref.namespace, ref.name), None)
        self.statuses.pop(key, None)
        self.store.delete(*key)
        log.info("removed %s (Silence %s/%s, written by the silence CLI)", path, ref.namespace, ref.name)

    def restore(self, obj: Object) -> Object:
        """Re-apply what the controller wrote (status, finalizers) onto a freshly loaded object."""
        key = (obj.KIND, obj.metadata.namespace, obj.metadata.name)
        status = self.statuses.get(key)
        if status is not None:
            obj = with_status(obj, status)
        if key in self.finalizers:
            obj = obj.model_copy(
                update={"metadata": obj.metadata.model_copy(update={"finalizers": self.finalizers[key]})}
            )
        return obj

    # Workload identity: ServiceAccounts are "other" objects of the manifests; there is no API server to
    # sign their tokens, so a ServiceAccount names a file holding one (LOCAL_TOKEN_FILE_ANNOTATION).
    async def get_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        return _meta_copy(self._other("ServiceAccount", namespace, name))

    async def create_service_account_token(
        self, namespace: str, name: str, audiences: Sequence[str], expiration_seconds: int
    ) -> tuple[str, float]:
        meta = self._other("ServiceAccount", namespace, name)["metadata"]
        where = f"serviceaccount {shown(namespace + '/' + name)}"
        path = (meta.get("annotations") or {}).get(LOCAL_TOKEN_FILE_ANNOTATION)
        if not path:
            raise KubeError(
                f"{where}: local mode cannot issue ServiceAccount tokens; set the annotation "
                f"{LOCAL_TOKEN_FILE_ANNOTATION} to a file holding a token issued for it",
                status=501,
            )
        try:
            token = (await asyncio.to_thread(Path(str(path)).read_text, encoding="utf-8")).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeError(f"{where}: cannot read the token file: {exc.__class__.__name__}") from exc
        if not token:
            raise KubeError(f"{where}: the token file is empty")
        return token, _token_expiry(token, audiences, where, time.time() + expiration_seconds)


def _token_expiry(token: str, audiences: Sequence[str], where: str, default: float) -> float:
    """When a local ServiceAccount token expires (its ``exp`` claim if it is a JWT), after checking that a
    JWT's ``aud`` claim names a requested audience (a token minted for another audience would only be
    refused by the cloud later, with a vaguer message)."""
    import jwt  # lazy: PyJWT pulls in cryptography (~7.7 MB RSS), needed only here

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return default  # not a JWT: used as is
    aud = claims.get("aud")
    granted = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
    if granted and not granted & set(audiences):
        raise KubeError(
            f"{where}: the token file's audiences {sorted(granted)} do not include {list(audiences)}",
            status=400,
        )
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else default


def _lookup_ref(api_version: str, kind: str, namespace: str, name: str | None) -> None:
    """``InvalidReference`` (a 404 ``KubeError``) for what KubeCluster would refuse before any request."""
    ref = validate_object_ref(api_version, kind, namespace, name, use=Use.LOOKUP)
    if name is not None and ref.name is None:
        raise InvalidReference(f"invalid name {shown(name)}")


def _meta_copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata a caller may modify without touching ours: the dict and its label/annotation maps."""
    meta = dict(obj["metadata"])
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), dict):
            meta[key] = dict(meta[key])
    return meta


def with_status(obj: Object, status: Mapping[str, Any]) -> Object:
    """``obj`` with ``status`` (as written), the status model shared with the objects that have the same."""
    if isinstance(obj, Secret):
        return obj
    if isinstance(obj, Receiver):
        return with_fields(obj, status=ReceiverStatus.model_validate(dict(status)))
    if isinstance(obj, Silence):
        return with_fields(obj, status=SilenceStatus.model_validate(dict(status)))
    return with_fields(obj, status=shared_status(ObjectStatus, dict(status)))


class LocalManifests:
    """Feeds an ObjectStore (and LocalCluster) from a directory, reloading on change."""

    def __init__(
        self, root: Path, store: ObjectStore, cluster: LocalCluster, *, poll_interval: float = 2.0
    ) -> None:
        self.root = root
        self.store = store
        self.cluster = cluster
        self.poll_interval = poll_interval
        self._snapshot: tuple[tuple[str, int, int], ...] = ()
        self._generations: dict[tuple[str, str, str], tuple[Any, int]] = {}
        self.last_errors: list[ManifestError] = []

    def _take_snapshot(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for path in manifest_files(self.root) if self.root.exists() else []:
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _with_generation(self, obj: Object, implicit: bool) -> Object:
        """``obj`` with its generation: the manifest's, else 1 at first and one more at each spec change
        (``implicit``: the manifest has none, ``load_directory`` gave it 1)."""
        if isinstance(obj, Secret):
            return obj
        key = (obj.KIND, obj.metadata.namespace, obj.metadata.name)
        # the spec model itself (the object keeps it anyway): a model compares by value, and a dumped copy
        # per object cost ~1 KB each (11 MB at 10,000 Alerts, issue 17)
        spec = obj.spec
        previous = self._generations.get(key)
        generation = obj.metadata.generation or 1
        if previous is not None and (implicit or not obj.metadata.generation):
            generation = previous[1] if previous[0] == spec else previous[1] + 1
        self._generations[key] = (spec, generation)
        if generation == obj.metadata.generation:
            return obj  # most objects: built with it (no copy of the object and its metadata)
        return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"generation": generation})})

    def load(self) -> LoadResult:
        """Load synchronously (start-up). A missing path is fatal here: a typo must not start an empty
        controller that answers 202 to every event and notifies nobody."""
        if not self.root.exists():
            raise ConfigError(f"--manifests {self.root}: no such file or directory")
        self._snapshot = self._take_snapshot()
        return self._apply(load_directory(self.root, implicit_generation=True))

    async def reload(self) -> LoadResult:
        """Parse in a worker thread, apply on the loop (the store is not thread-safe)."""
        self._snapshot = await asyncio.to_thread(self._take_snapshot)
        return self._apply(await asyncio.to_thread(load_directory, self.root, implicit_generation=True))

    def _apply(self, result: LoadResult) -> LoadResult:
        for error in result.errors:
            log.error("invalid manifest skipped: %s", error)
        self.last_errors = result.errors
        self.cluster.set_others(result.others)
        self.cluster.silence_files = result.silence_files
        by_kind: dict[str, list[Object]] = {
            "Secret": [],
            "Provider": [],
            "Alert": [],
            "Receiver": [],
            "Silence": [],
        }
        for obj in result.objects:
            key = (obj.KIND, obj.metadata.namespace, obj.metadata.name)
            implicit = key in result.implicit_generation
            by_kind[obj.KIND].append(self.cluster.restore(self._with_generation(obj, implicit)))
        loaded = {(o.KIND, o.metadata.namespace, o.metadata.name) for o in result.objects}
        for kind in ("Provider", "Alert", "Receiver"):
            for ns, name in self.store.keys(kind):
                held = self.store.get(kind, ns, name)
                if (
                    (kind, ns, name) in loaded
                    or held is None
                    or HOOKS_FINALIZER not in held.metadata.finalizers
                ):
                    continue
                # Removed from the files but held by a finalize hook (docs/hooks.md): being deleted, as in a
                # cluster, until the controller has removed its finalizers.
                if held.metadata.deletion_timestamp is None:
                    meta = held.metadata.model_copy(update={"deletion_timestamp": datetime.now(UTC)})
                    held = held.model_copy(update={"metadata": meta})
                by_kind[kind].append(held)
        for kind in ("Secret", "Provider", "Alert", "Receiver", "Silence"):
            self.store.replace(kind, by_kind[kind])
        self.store.mark_synced()
        log.info(
            "loaded %d objects from %s (%d invalid documents skipped)",
            len(result.objects),
            self.root,
            len(result.errors),
        )
        return result

    async def watch(self) -> None:
        """Poll for changes forever (cancel to stop)."""
        while True:
            await asyncio.sleep(self.poll_interval)
            snapshot = await asyncio.to_thread(self._take_snapshot)
            if snapshot != self._snapshot:
                log.info("manifests changed, reloading")
                await self.reload()
