"""Static checks of the Dockerfile (Docker cannot run where the suite runs).

What must hold for the image the Deployment in ``config/manager`` runs (reference §7): multi-stage
(no build tools or source tree at runtime), a numeric non-root USER that matches the Deployment's
``runAsUser``, pinned base images, the four ports, and an exec-form ENTRYPOINT that is the console
script ``pyproject.toml`` installs.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> list[Stage]:
    """Instructions per stage: comments dropped, ``\\`` continuations joined, keywords upper-cased."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "dangling line continuation"
    stages: list[Stage] = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            assert match, f"cannot parse FROM {args!r}"
            stages.append(Stage(image=match.group(1), name=match.group(2)))
        elif keyword == "ARG" and not stages:
            continue
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, args))
    return stages


def _stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))


def _final() -> Stage:
    return _stages()[-1]


def _console_scripts() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    scripts: dict[str, str] = pyproject["project"]["scripts"]
    return scripts


def _deployment_container() -> dict[str, object]:
    deployment = yaml.safe_load((REPO / "config" / "manager" / "deployment.yaml").read_text(encoding="utf-8"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_multi_stage_with_named_builder() -> None:
    stages = _stages()
    assert len(stages) >= 2
    assert stages[0].name == "builder"
    names = [s.name for s in stages]
    assert len(set(names)) == len(names)


def base_image_problem(image: str, stage_names: set[str]) -> str | None:
    """Why a FROM image is not pinned, or None. A digest pins; otherwise a non-``latest`` tag is required."""
    if image in stage_names or "@sha256:" in image:
        return None
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return f"{image}: base image without a tag"
    if tag == "latest":
        return f"{image}: pin a version (or a digest) instead of latest"
    return None


def test_base_images_are_pinned() -> None:
    """No ``latest`` and no untagged base: a rebuild must not silently change Python or Debian."""
    stages = _stages()
    stage_names = {s.name for s in stages if s.name}
    assert [base_image_problem(s.image, stage_names) for s in stages] == [None] * len(stages)
    for stage in stages:
        if stage.image not in stage_names and "@sha256:" not in stage.image:
            assert stage.image.rpartition(":")[2].startswith("3.11"), "pyproject targets Python 3.11"


def test_runtime_runs_as_numeric_non_root_user_matching_the_deployment() -> None:
    final = _final()
    users = final.all("USER")
    assert users, "the runtime stage must set USER"
    user = users[-1]
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user!r} must be numeric (runAsNonRoot checks the UID)"
    uid = int(user.split(":")[0])
    assert uid != 0
    assert all(int(part) != 0 for part in user.split(":"))
    security = _deployment_container()["securityContext"]
    assert isinstance(security, dict)
    assert security["runAsUser"] == uid
    # Nothing runs after USER as root: USER is set after the last RUN.
    keywords = [kw for kw, _ in final.instructions]
    last_run = max((i for i, kw in enumerate(keywords) if kw == "RUN"), default=-1)
    assert keywords.index("USER") > last_run


def test_entrypoint_is_the_console_script_in_exec_form() -> None:
    final = _final()
    (entrypoint,) = final.all("ENTRYPOINT")
    argv = json.loads(entrypoint)  # exec form: no /bin/sh -c at runtime
    assert argv == ["notification-controller"]
    assert argv[0] in _console_scripts()
    assert _console_scripts()[argv[0]] == "notification_controller.cli:main"
    for cmd in final.all("CMD"):
        assert cmd.startswith("["), "CMD must be exec form"
    assert not final.all("SHELL")


def test_exposes_the_deployment_ports() -> None:
    exposed = {int(port.split("/")[0]) for args in _final().all("EXPOSE") for port in args.split()}
    assert exposed == {9090, 9292, 8080, 9440}
    ports = _deployment_container()["ports"]
    assert isinstance(ports, list)
    assert exposed == {p["containerPort"] for p in ports}


def test_runtime_installs_only_the_builder_wheels() -> None:
    """The runtime stage gets wheels from the builder and nothing from the source tree or the network."""
    final = _final()
    assert not final.all("COPY") or all("--from=builder" in c for c in final.all("COPY"))
    assert not final.all("ADD")
    installs = [r for r in final.all("RUN") if "pip install" in r]
    assert len(installs) == 1
    (install,) = installs
    assert "--no-index" in install
    assert "from=builder" in install
    assert "notification-controller" in install
    builder = _stages()[0]
    assert any("pip wheel" in r for r in builder.all("RUN"))


def test_builder_copies_exist_and_pass_the_dockerignore() -> None:
    """Every path the builder copies exists and is re-included by the allow-list .dockerignore."""
    ignore = [line.strip() for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()]
    patterns = [line for line in ignore if line and not line.startswith("#")]
    assert patterns[0] == "*", ".dockerignore should be an allow-list (tests, .git, .venv stay out)"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for copy in _stages()[0].all("COPY"):
        if copy.startswith("--from"):
            continue
        *sources, _dest = copy.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert source.rstrip("/") in allowed, f"COPY {source}: excluded by .dockerignore"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    readme = pyproject["project"].get("readme")
    if readme:
        assert readme in allowed, "setuptools needs the readme to build the wheel"


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("python:3.11-slim-bookworm", None),
        ("python@sha256:" + "0" * 64, None),
        ("builder", None),
        ("python:latest", "latest"),
        ("python", "without a tag"),
        ("registry.example:5000/python", "without a tag"),
    ],
)
def test_pinning_rule_rejects_latest_and_untagged(image: str, problem: str | None) -> None:
    result = base_image_problem(image, {"builder"})
    if problem is None:
        assert result is None
    else:
        assert result is not None
        assert problem in result


def test_the_image_label_carries_the_version_of_the_installed_wheel() -> None:
    """``org.opencontainers.image.version`` comes from the VERSION build arg, which ``make image`` sets to
    pyproject's version, and the build fails if the installed wheel says another (the version is written once)."""
    final = _final()
    assert any(a.startswith("VERSION") for a in final.all("ARG"))
    (labels,) = final.all("LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    (install,) = [r for r in final.all("RUN") if "pip install" in r]
    assert "notification-controller --version" in install
    assert '= "$VERSION"' in install
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "--build-arg VERSION=$(VERSION)" in makefile
    assert "VERSION ?= $(shell sed -n 's/^version = " in makefile
