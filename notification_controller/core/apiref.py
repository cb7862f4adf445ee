"""Validated references to Kubernetes objects: the only parts a Kubernetes API path is built from.

Why this module exists: a Receiver's ``spec.resources[]`` (written by a tenant) and an event's
``involvedObject`` (posted by anyone who can reach the events listener) name objects that the controller
then reads and annotates **with its own credentials**. Pasted into a URL, ``..``, ``?``, ``#`` or ``%2F``
in an apiVersion rewrote the request: another namespace, a Secret, any object the controller may read
(issue 11, items 1 and 2). So every part is checked against the grammar Kubernetes itself enforces
before it may become a path segment, and every segment is percent-encoded anyway:

========== ============================================================ ==========
part       grammar                                                      max length
========== ============================================================ ==========
group      DNS-1123 subdomain, or empty for the core group              253
version    DNS-1035 label (what a CRD version must be: v1, v1beta3, …)  63
kind       ``[A-Z][A-Za-z0-9]*``                                        63
plural     DNS-1123 label (static table or discovery)                   63
namespace  DNS-1123 label                                               63
name       DNS-1123 subdomain                                           253
========== ============================================================ ==========

And a policy: some objects the controller may read are none of a tenant's or an event's business.
``refusal`` says which (see ``THREAT_MODEL.md``, "Path injection into the Kubernetes API"):

* Kubernetes' own API groups — the core group, groups without a dot (``apps``, ``batch``, ``policy``…),
  ``k8s.io`` and ``*.k8s.io`` (RBAC, authentication, authorization, certificates, coordination/Leases,
  events, admission…) — hold Secrets, ServiceAccounts, ConfigMaps, RBAC objects and Leases. The one
  exception is a core ``Service`` for *lookups* (hooks name a Service as their address); as a Receiver
  target or an Alert label source even that is refused (``Use.TARGET``).
* The controller's own group (``notification.toolkit.fluxcd.io``): Alerts, Providers and Receivers are
  written by the controller through their status and finalizers only.
* Cluster-scoped resources (checked where discovery tells, ``Resource.namespaced``): every reference here
  lives in a namespace, and a tenant's namespace is the boundary ``--no-cross-namespace-refs`` enforces.

Everything else — Flux's sources, Kustomizations, HelmReleases, image automation and any CRD in a
dotted group outside ``k8s.io`` — stays reachable, as in Flux.

A refused or malformed reference raises ``InvalidReference`` (a ``KubeError`` with ``status`` 404): every
caller and every observer sees it exactly as it sees a reference to an object that does not exist, and the
decision depends on the reference's text only, never on what exists in the cluster. No request is made.
Messages quote at most ``MAX_SHOWN`` characters of the offending value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote

from ..api import GROUP
from ..errors import KubeError

MAX_SHOWN = 64

SOURCE_GROUP = "source.toolkit.fluxcd.io"
IMAGE_GROUP = "image.toolkit.fluxcd.io"
SOURCE_EXTENSIONS_GROUP = "source.extensions.fluxcd.io"

# Reference §5.4: the apiVersion used when a Receiver resource (or Alert source) does not give one.
DEFAULT_API_VERSIONS: Mapping[str, str] = {
    "Bucket": f"{SOURCE_GROUP}/v1",
    "HelmChart": f"{SOURCE_GROUP}/v1",
    "HelmRepository": f"{SOURCE_GROUP}/v1",
    "GitRepository": f"{SOURCE_GROUP}/v1",
    "OCIRepository": f"{SOURCE_GROUP}/v1",
    "ImageRepository": f"{IMAGE_GROUP}/v1",
    "ArtifactGenerator": f"{SOURCE_EXTENSIONS_GROUP}/v1beta1",
}

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_DNS1035_LABEL = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


class InvalidReference(KubeError):
    """A reference that is malformed or names something this controller refuses to touch.

    ``status`` is 404 on purpose: callers (the Receiver trigger, the label lookup, hooks) and whoever
    watches their answers cannot tell it from a reference to an object that does not exist.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, status=404)


class Use(StrEnum):
    """What a reference is for: the policy of ``refusal`` differs slightly."""

    TARGET = "target"  # a Receiver target or an Alert label source: user input chose it
    LOOKUP = "lookup"  # any read/annotation through the Cluster port (hooks read core Services)


def shown(value: object) -> str:
    """``value`` quoted for an error message, cut to ``MAX_SHOWN`` characters (never echo huge input)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= MAX_SHOWN:
        return repr(text)
    return f"{text[:MAX_SHOWN]!r}… ({len(text)} characters)"


def _check(what: str, value: object, pattern: re.Pattern[str], max_len: int, grammar: str) -> str:
    if not isinstance(value, str):
        raise InvalidReference(f"invalid {what}: not a string")
    if not value or len(value) > max_len or pattern.fullmatch(value) is None:
        raise InvalidReference(
            f"invalid {what} {shown(value)}: must be {grammar} of at most {max_len} characters"
        )
    return value


def validate_group(group: str) -> str:
    """An API group: empty (core) or a DNS-1123 subdomain."""
    if group == "":
        return group
    return _check("API group", group, _DNS1123_SUBDOMAIN, 253, "a DNS-1123 subdomain")


def validate_version(version: str) -> str:
    """An API version: a DNS-1035 label (``v1``, ``v1beta3``, ``v2alpha1`` and any CRD version)."""
    return _check("API version", version, _DNS1035_LABEL, 63, "a DNS-1035 label")


def validate_kind(kind: str) -> str:
    return _check("kind", kind, _KIND, 63, "an upper-case letter then letters and digits")


def validate_plural(plural: str) -> str:
    return _check("resource", plural, _DNS1123_LABEL, 63, "a DNS-1123 label")


def validate_namespace(namespace: str) -> str:
    return _check("namespace", namespace, _DNS1123_LABEL, 63, "a DNS-1123 label")


def validate_name(name: str) -> str:
    return _check("name", name, _DNS1123_SUBDOMAIN, 253, "a DNS-1123 subdomain")


def parse_api_version(api_version: str) -> tuple[str, str]:
    """``group/version`` → (group, version); a single token is a core-group version. Validated."""
    if not isinstance(api_version, str) or not api_version:
        raise InvalidReference("invalid apiVersion: empty")
    group, slash, version = api_version.rpartition("/")
    if slash and not group:
        raise InvalidReference(f"invalid apiVersion {shown(api_version)}: empty API group")
    try:
        return validate_group(group), validate_version(version)
    except InvalidReference as exc:
        raise InvalidReference(f"invalid apiVersion {shown(api_version)}: {exc}") from None


def resolve_api_version(api_version: str, kind: str) -> str:
    """``api_version``, or the §5.4 default of ``kind`` when it is empty."""
    if api_version:
        return api_version
    default = DEFAULT_API_VERSIONS.get(kind, "")
    if not default:
        raise InvalidReference(f"apiVersion must be specified for kind {shown(kind)}")
    return default


def refusal(group: str, *, kind: str | None = None, plural: str | None = None, use: Use) -> str | None:
    """Why objects of this type are refused for ``use`` (None: allowed). See the module docstring.

    ``kind`` and ``plural`` are compared case-insensitively, so a lower-case kind or a plural cannot
    slip a core type past the check.
    """
    if group == "":
        names = {n.lower() for n in (kind, plural) if n is not None}
        if use is Use.LOOKUP and names and names <= {"service", "services"}:
            return None
        return "objects of the core API group are not reachable through a Receiver, an event or a hook"
    if "." not in group or group == "k8s.io" or group.endswith(".k8s.io"):
        return f"objects of the Kubernetes API group {shown(group)} are not reachable"
    if group == GROUP:
        return "the controller's own kinds are not reconcile targets or label sources"
    return None


def check_allowed(group: str, *, kind: str | None = None, plural: str | None = None, use: Use) -> None:
    """``refusal`` as an ``InvalidReference``."""
    reason = refusal(group, kind=kind, plural=plural, use=use)
    if reason is not None:
        what = kind or plural or "object"
        raise InvalidReference(f"refused {shown(what)} in {shown(group or 'core')}: {reason}")


@dataclass(frozen=True)
class ObjectReference:
    """A validated reference: every field may go into an API path. ``name`` None means the collection."""

    group: str
    version: str
    kind: str
    namespace: str
    name: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def validate_object_ref(
    api_version: str, kind: str, namespace: str, name: str | None, *, use: Use = Use.TARGET
) -> ObjectReference:
    """Check a reference before any lookup; the validated parts, or ``InvalidReference``.

    ``api_version`` may be empty for the kinds with a §5.4 default. ``name`` None (or ``"*"``) refers to
    the collection in ``namespace``. With ``use=Use.TARGET`` (the default: Receiver targets and Alert
    label sources) the core group is refused entirely.
    """
    key = (api_version, kind, namespace, name, use)
    hashable = True
    try:
        found = _validated.get(key)
    except TypeError:  # an unhashable part (a list from a JSON body): not remembered
        found, hashable = None, False
    if found is not None:
        return found
    kind = validate_kind(kind)
    group, version = parse_api_version(resolve_api_version(api_version, kind))
    check_allowed(group, kind=kind, use=use)
    namespace = validate_namespace(namespace)
    valid_name = validate_name(name) if name is not None and name != "*" else None
    ref = ObjectReference(group, version, kind, namespace, valid_name)
    if hashable:
        if len(_validated) >= VALIDATED_REFS:
            _validated.clear()
        _validated[key] = ref
    return ref


VALIDATED_REFS = 1024
"""How many accepted references ``validate_object_ref`` remembers (all forgotten together when full).

The decision depends on the reference's text only, so an accepted one is accepted again: every webhook
annotates the same targets, and local mode's cluster checks each reference again on every call, as
``KubeCluster`` does (issue 29: ~74k of a webhook's ~444k instructions were the two checks of its get and its
annotate). Only accepted references are remembered — a refusal is computed (and raised) every time, so it is
exactly the refusal it was. An accepted key holds strings bounded by their grammar (a key is under 1 KB), or
for an empty apiVersion any falsy value (the default is the same for all), so at most ~1 MB whatever events
and tenants send."""
_validated: dict[tuple[object, ...], ObjectReference] = {}


def label_selector(match_labels: Mapping[str, str]) -> str:
    """``k1=v1,k2=v2`` (sorted) from validated label keys and values; ``InvalidReference`` otherwise."""
    parts: list[str] = []
    for key, value in sorted(match_labels.items()):
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidReference("invalid matchLabels: keys and values must be strings")
        prefix, slash, label = key.rpartition("/")
        valid_key = (
            0 < len(label) <= 63
            and _LABEL_NAME.fullmatch(label) is not None
            and (not slash or (len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None))
        )
        if not valid_key:
            raise InvalidReference(f"invalid label key {shown(key)}")
        if len(value) > 63 or (value and _LABEL_NAME.fullmatch(value) is None):
            raise InvalidReference(f"invalid value {shown(value)} for label {shown(key)}")
        parts.append(f"{key}={value}")
    return ",".join(parts)


def _segment(value: str) -> str:
    return quote(value, safe="")


def discovery_path(group: str, version: str) -> str:
    """``/api/<version>`` or ``/apis/<group>/<version>`` from validated parts."""
    group, version = validate_group(group), validate_version(version)
    if not group:
        return f"/api/{_segment(version)}"
    return f"/apis/{_segment(group)}/{_segment(version)}"


def build_api_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    """The path of a collection or an object: validated parts only, each one percent-encoded.

    ``/api/v1[/namespaces/<ns>]/<plural>[/<name>]`` for the core group,
    ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]`` otherwise.
    """
    base = discovery_path(group, version)
    if namespace:
        base += f"/namespaces/{_segment(validate_namespace(namespace))}"
    base += f"/{_segment(validate_plural(plural))}"
    if name:
        base += f"/{_segment(validate_name(name))}"
    return base
