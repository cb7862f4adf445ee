"""No secret is compared with ``==``, ``!=`` or ``in`` (checklist A9; STYLE.md habit 7).

A static check, not a timing measurement: the AST of every module under ``notification_controller/receivers``,
``providers``, ``server`` and ``hooks`` (when present) is walked, and every comparison with ``==``, ``!=``,
``in`` or ``not in`` whose operands mention a word that suggests a secret (token, signature, secret,
password, digest, hmac, mac, key — in identifiers, attributes or string constants) fails the test unless it
is in ``ALLOWED`` below, each entry with the reason it is safe.

Comparisons against public values leak nothing secret and are exempt: a literal (``x == ""``,
``"-----BEGIN" in pem``), a tuple of literals, or an UPPER_CASE constant (``TOKEN_KEY in secret.data``, a
membership test of a key *name*). Secret values go through ``hmac.compare_digest`` on bytes; the spy test
proving every receiver type calls it is ``tests/integration/test_receivers_real_formats.py::
test_every_comparison_uses_compare_digest_on_bytes`` (referenced from THREAT_MODEL.md, not duplicated).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "notification_controller"
SCANNED = ("receivers", "providers", "server", "hooks")
SECRET_WORDS = frozenset(
    {"token", "tokens", "signature", "signatures", "sig", "secret", "secrets", "password", "passwords"}
    | {"digest", "digests", "hmac", "mac", "key", "keys"}
)
_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
_CONSTANT_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")

# (path relative to the package, the comparison as ``ast.unparse`` prints it) → why it is not a secret
ALLOWED: dict[tuple[str, str], str] = {
    ("receivers/base.py", "key in shape"): "JSON field names of a payload shape (Go-style decoding)",
    ("receivers/cdevents.py", "key in context"): "CloudEvents context attribute names",
    ("receivers/guards.py", "digest in self._seen"): (
        "replay cache keyed by a SHA-256 of the public delivery id; presence is not a secret"
    ),
    ("providers/git/bitbucketserver.py", "(str_field(existing, 'key') or '') == status.id"): (
        "Bitbucket build-status key: the public commit status id, not a credential"
    ),
    ("providers/message.py", "key == name"): "the name of a message field (a metadata key), not a secret",
}


def _words(text: str) -> set[str]:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    return {w for w in re.split(r"[^a-zA-Z0-9]+", text.lower()) if w}


def _mentions(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found |= _words(sub.id)
        elif isinstance(sub, ast.Attribute):
            found |= _words(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str | bytes):
            value = sub.value if isinstance(sub.value, str) else sub.value.decode("latin-1")
            found |= _words(value)
    return found & SECRET_WORDS


def _public(node: ast.AST) -> bool:
    """A literal, a collection of literals, or an UPPER_CASE constant: comparing with it reveals nothing."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_public(e) for e in node.elts)
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return bool(_CONSTANT_NAME.match(name))
    return False


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    source: str
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source}  (mentions {', '.join(self.words)})"


def suspicious_comparisons(source: str, path: str) -> list[Finding]:
    findings = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if not isinstance(op, _OPS) or _public(left) or _public(right):
                continue
            words = _mentions(left) | _mentions(right)
            if words:
                findings.append(Finding(path, node.lineno, ast.unparse(node), tuple(sorted(words))))
                break
    return findings


def scan() -> list[Finding]:
    findings = []
    for directory in SCANNED:
        for file in sorted((PACKAGE / directory).rglob("*.py")) if (PACKAGE / directory).is_dir() else []:
            findings.extend(suspicious_comparisons(file.read_text(), str(file.relative_to(PACKAGE))))
    return findings


def test_no_secret_is_compared_with_eq_or_in() -> None:
    unexpected = [f for f in scan() if (f.path, f.source) not in ALLOWED]
    assert unexpected == [], (
        "use hmac.compare_digest on bytes, or add a commented ALLOWED entry:\n"
        + "\n".join(map(str, unexpected))
    )


def test_allow_list_has_no_stale_entries() -> None:
    """Every allowed comparison still exists (a stale entry would silently allow a future one)."""
    present = {(f.path, f.source) for f in scan()}
    assert set(ALLOWED) - present == set()


def test_the_check_catches_what_it_must() -> None:
    """The scanner itself: violations are found, safe forms are not."""
    bad = """
def verify(req, ctx):
    if req.headers.get("X-Gitlab-Token") != ctx.token:
        raise Error()
    if signature == expected_mac:
        return True
    if hmac_value in allowed_digests:
        return True
    return provided_password == secret.data["password"]
"""
    assert [f.line for f in suspicious_comparisons(bad, "x.py")] == [3, 5, 7, 9]
    good = """
def verify(req, ctx):
    if not hmac.compare_digest(given, expected):
        raise Error()
    if token is None or token == "" or TOKEN_KEY not in secret.data or "token" in secret.data:
        return False
    if algo not in ("sha1", "sha256"):
        return False
    return len(signature) == 64
"""
    assert suspicious_comparisons(good, "y.py") == []


def test_the_compare_digest_spy_test_exists() -> None:
    """THREAT_MODEL.md points at this spy test for checklist A9; keep the reference true."""
    source = (ROOT / "tests/integration/test_receivers_real_formats.py").read_text()
    tree = ast.parse(source)
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)}
    assert "test_every_comparison_uses_compare_digest_on_bytes" in names
    assert "compare_digest" in source
