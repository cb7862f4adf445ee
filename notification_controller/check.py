"""``check``: validate a manifests directory (or files, or ``-`` for stdin) with no event and no cluster.

Why: a CI pipeline must learn that an Alert will never notify before it is merged, not from a Ready=False
condition after. ``explain`` needs an event and stops at the first invalid document; the local loader
reports one error per document. Here every error of every document is its own line,
``file:line: Kind ns/name: field: message`` (1-based lines, the line of the offending key), with "did you
mean" for misspelt fields, kinds and provider/receiver types (``difflib.get_close_matches`` over the
models' aliases and the ``ProviderType``/``ReceiverType``/``SourceKind`` enums).

The checks are the controller's own functions, so ``check`` cannot pass what the reconcilers refuse:
the models (``api/``) for schema errors; ``AlertSpec``/``ProviderSpec``/``ReceiverSpec.validation_errors``
for the CRD's rules; RE2 (``core.matching.compile_error``) for inclusion/exclusion lists; the CEL front end
(``core.matching.filter_error``: ``spec.filter`` must be a bool over the event's declared fields, so
``event.severity`` alone and ``event.reasn`` are errors); Jinja2 (``core.templates.template_error``) for
templates; the Receiver reconciler's CEL and OIDC checks.

References are checked within the given manifests: an Alert's ``providerRef`` must name a Provider of its
namespace (an error: the Alert would be ``ProviderNotFound``). A Secret named by a Provider or a Receiver
and absent from the files is a *warning* (``file:line: warning: ...``), not a finding: Secrets are usually
kept out of Git (SOPS, External Secrets, sealed secrets), so their absence says nothing. Warnings do not
change the exit status; ``--no-warnings`` hides them.

Exit status: 0 clean, 1 findings, 2 usage (an unreadable path, bad flags).
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from .api import GROUP
from .api.alert import Alert
from .api.common import Secret
from .api.messages import describe_error_of, field_path, suggestion
from .api.objects import _KINDS
from .api.provider import Provider
from .api.receiver import Receiver
from .api.silence import Silence
from .objects import yamldoc
from .objects.local import _split_documents, locate, manifest_files

USAGE, FINDINGS, CLEAN = 2, 1, 0


@dataclass(frozen=True)
class Finding:
    file: str
    line: int  # 1-based
    kind: str
    namespace: str
    name: str
    field: str
    message: str
    severity: str = "error"  # or "warning"

    def text(self) -> str:
        warning = "warning: " if self.severity == "warning" else ""
        field = f"{self.field}: " if self.field else ""
        return f"{self.file}:{self.line}: {warning}{self.kind} {self.namespace}/{self.name}: {field}{self.message}"


# ---- one document ----------------------------------------------------------------------------------------


class _Doc:
    def __init__(self, file: str, first_line: int, node: yaml.Node | None, raw: dict[str, Any]) -> None:
        self.file, self.first_line, self.node, self.raw = file, first_line, node, raw
        metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        self.kind = str(raw.get("kind") or "document")
        self.name = str(metadata.get("name") or "?")
        self.namespace = str(metadata.get("namespace") or "default")

    def finding(self, field: str, message: str, severity: str = "error") -> Finding:
        line = self.first_line + locate(self.node, field) + 1
        return Finding(self.file, line, self.kind, self.namespace, self.name, field, message, severity)


def _check_object(doc: _Doc) -> tuple[Alert | Provider | Receiver | Secret | Silence | None, list[Finding]]:
    raw = doc.raw
    api_version, kind = raw.get("apiVersion"), raw.get("kind")
    if (api_version, kind) == ("v1", "Secret"):
        try:
            return Secret.from_manifest(_namespaced(raw)), []
        except (ValidationError, ValueError) as exc:
            return None, [doc.finding("data", str(exc).splitlines()[0])]
    model = _KINDS.get((str(api_version), str(kind)))
    if model is None:
        if isinstance(api_version, str) and api_version.startswith(f"{GROUP}/"):
            kinds = sorted({k for _, k in _KINDS})
            if kind in kinds:
                versions = sorted(v for v, k in _KINDS if k == kind)
                return None, [doc.finding("apiVersion", f"unsupported version, use {versions[0]}")]
            return None, [doc.finding("kind", f"unknown kind {kind!r}{suggestion(kind, kinds)}")]
        return None, []  # another kind (GitRepository, Kustomization...): not ours to check
    try:
        obj = model.model_validate(_namespaced(raw))
    except ValidationError as exc:
        findings = []
        locs = []
        for error in exc.errors():
            loc = [p for p in error.get("loc", ()) if isinstance(p, str | int)]
            locs.append(loc)
            findings.append(doc.finding(field_path(loc), describe_error_of(model, error)))
        # The other fields still get the reconciler's checks (regexes, CEL, templates): the invalid parts
        # taken out, the rest validated again (once; if it still fails, what is left is not checkable).
        try:
            pruned = model.model_validate(_namespaced(_pruned(raw, locs)))
        except ValidationError:
            return None, findings
        return None, findings + _rule_findings(doc, pruned)
    return obj, _rule_findings(doc, obj)


def _pruned(raw: dict[str, Any], locs: Sequence[Sequence[str | int]]) -> dict[str, Any]:
    """``raw`` without the list items or keys the errors at ``locs`` are in (a deep copy)."""
    out: dict[str, Any] = json.loads(json.dumps(raw, default=str))
    removals: list[tuple[Any, str | int]] = []
    for loc in locs:
        cut = max((i for i, p in enumerate(loc) if isinstance(p, int)), default=len(loc) - 1)
        container: Any = out
        for part in loc[:cut]:
            try:
                container = container[part]
            except (KeyError, IndexError, TypeError):
                break
        else:
            removals.append((container, loc[cut]))
    for container, part in sorted(removals, key=lambda r: -r[1] if isinstance(r[1], int) else 0):
        with contextlib.suppress(KeyError, IndexError, TypeError):
            del container[part]
    return out


def _namespaced(raw: dict[str, Any]) -> dict[str, Any]:
    metadata = raw.get("metadata")
    if isinstance(metadata, dict) and not metadata.get("namespace"):
        return {**raw, "metadata": {**metadata, "namespace": "default"}}
    return raw


def _rule_findings(doc: _Doc, obj: Alert | Provider | Receiver | Silence) -> list[Finding]:
    """The reconcilers' checks beyond the schema, each error on its own."""
    from .controllers.alert import alert_errors, field_of

    if isinstance(obj, Silence):
        from .controllers.silence import silence_errors

        return [_finding(doc, field_of(message), message) for message in silence_errors(obj)]
    from .controllers.provider import provider_errors
    from .controllers.receiver import receiver_errors

    if isinstance(obj, Alert):
        errors = alert_errors(obj)
    else:
        errors = provider_errors(obj) if isinstance(obj, Provider) else receiver_errors(obj)
    return [_finding(doc, field, message) for _, field, message in errors]


def _finding(doc: _Doc, field: str, message: str) -> Finding:
    """A finding whose message does not repeat the field it starts with (``spec.muteTimes[0].weekdays[1]:
    fryday is not a valid weekday`` is printed after the field already)."""
    return doc.finding(field, message.removeprefix(f"{field}: "))


# ---- input -------------------------------------------------------------------------------------------


def _sources(paths: Sequence[str], stdin: TextIO) -> Iterator[tuple[str, str]]:
    """(display name, text) of every file; OSError for a path that cannot be read."""
    for arg in paths:
        if arg == "-":
            yield "<stdin>", stdin.read()
            continue
        root = Path(arg)
        if not root.exists():
            raise FileNotFoundError(f"{arg}: no such file or directory")
        for path in manifest_files(root):
            yield str(path), path.read_text(encoding="utf-8")


def _yaml_finding(file: str, first_line: int, chunk: str, exc: yaml.YAMLError) -> Finding:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "invalid YAML"
    # the parser's mark may be the end of the stream, past the document's last line
    line = first_line + min(mark.line if mark is not None else 0, max(len(chunk.splitlines()) - 1, 0)) + 1
    return Finding(file, line, "document", "?", "?", "", f"cannot parse YAML: {problem}")


def check_texts(sources: Sequence[tuple[str, str]]) -> list[Finding]:
    """Every finding of every document of ``sources`` ((name, text) pairs), in file and line order."""
    findings: list[Finding] = []
    docs: list[tuple[_Doc, Any]] = []
    tags = yamldoc.Tags()
    for file, text in sources:
        for first_line, chunk in _split_documents(text):
            try:
                raw = yamldoc.load(chunk, tags)
                node = yaml.compose(chunk, Loader=yamldoc.BaseLoader)
            except yaml.YAMLError as exc:
                findings.append(_yaml_finding(file, first_line, chunk, exc))
                continue
            if raw is None:
                continue
            items: list[tuple[Any, yaml.Node | None]] = [(raw, node)]
            if isinstance(raw, dict) and raw.get("kind") == "List" and isinstance(raw.get("items"), list):
                seq = _child(node, "items")
                items = [
                    (item, seq.value[i] if isinstance(seq, yaml.SequenceNode) else None)
                    for i, item in enumerate(raw["items"])
                ]
            for item, item_node in items:
                if not isinstance(item, dict):
                    line = first_line + (item_node.start_mark.line if item_node is not None else 0) + 1
                    findings.append(
                        Finding(file, line, "document", "?", "?", "", "document is not a mapping")
                    )
                    continue
                doc = _Doc(file, first_line, item_node, item)
                obj, found = _check_object(doc)
                findings.extend(found)
                docs.append((doc, obj))
    findings.extend(_reference_findings(docs))
    findings.sort(key=lambda f: (f.file, f.line))
    return findings


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                child: yaml.Node = v
                return child
    return None


def _reference_findings(docs: Sequence[tuple[_Doc, Any]]) -> list[Finding]:
    present = {
        (type(obj).__name__, obj.metadata.namespace, obj.metadata.name) for _, obj in docs if obj is not None
    }
    # A Provider or Secret present but invalid is reported where it is; it still counts as present here.
    present |= {(doc.kind, doc.namespace, doc.name) for doc, _ in docs}
    out: list[Finding] = []
    for doc, obj in docs:
        if isinstance(obj, Alert):
            name = obj.spec.provider_ref.name
            if ("Provider", obj.metadata.namespace, name) not in present:
                out.append(
                    doc.finding(
                        "spec.providerRef.name",
                        f"Provider '{name}' not found in namespace '{obj.metadata.namespace}' in these manifests",
                    )
                )
        refs: list[tuple[str, str]] = []
        if isinstance(obj, Provider):
            spec = obj.spec
            refs = [
                (field, ref.name)
                for field, ref in (
                    ("spec.secretRef.name", spec.secret_ref),
                    ("spec.certSecretRef.name", spec.cert_secret_ref),
                    ("spec.proxySecretRef.name", spec.proxy_secret_ref),
                )
                if ref is not None
            ]
        elif isinstance(obj, Receiver) and obj.spec.secret_ref is not None:
            refs = [("spec.secretRef.name", obj.spec.secret_ref.name)]
        for field, name in refs:
            if ("Secret", obj.metadata.namespace, name) not in present:
                out.append(
                    doc.finding(
                        field,
                        f"Secret '{name}' is not in these manifests (fine if it is created another way)",
                        "warning",
                    )
                )
    return out


# ---- output --------------------------------------------------------------------------------------------


class Output(enum.StrEnum):
    TEXT = "text"
    JSON = "json"
    YAML = "yaml"


def render(findings: Sequence[Finding], output: Output, out: TextIO) -> None:
    if output is Output.TEXT:
        for finding in findings:
            out.write(finding.text() + "\n")
        return
    records = [asdict(f) for f in findings]
    if output is Output.JSON:
        out.write(json.dumps(records, indent=2) + "\n")
    else:
        out.write(yaml.safe_dump(records, sort_keys=False) if records else "[]\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notification-controller check",
        description=(
            "Validate Alert, Provider and Receiver manifests without a cluster or an event: every error on "
            "its own line as file:line: Kind namespace/name: field: message. Exit 0 clean, 1 findings, 2 usage."
        ),
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="manifest files or directories, '-' for stdin"
    )
    parser.add_argument("-o", "--output", choices=[o.value for o in Output], default="text")
    parser.add_argument(
        "--no-warnings", action="store_true", help="hide warnings (a referenced Secret not in the files)"
    )
    return parser


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage; --help exits 0
        return int(exc.code) if isinstance(exc.code, int) and exc.code == 0 else USAGE
    if args.paths.count("-") > 1:
        print("check: '-' (stdin) may be given once", file=sys.stderr)
        return USAGE
    try:
        sources = list(_sources(args.paths, stdin))
    except (OSError, UnicodeDecodeError) as exc:
        print(f"check: {exc}", file=sys.stderr)
        return USAGE
    findings = check_texts(sources)
    if args.no_warnings:
        findings = [f for f in findings if f.severity != "warning"]
    try:
        render(findings, Output(args.output), stdout)
        stdout.flush()
    except BrokenPipeError:  # the reader went away (``check … | head``): no traceback at exit's flush
        if stdout is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return FINDINGS if any(f.severity == "error" for f in findings) else CLEAN


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
