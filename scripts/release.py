"""Render a release into ``dist/``: ``make release VERSION=… IMG=…`` (docs/install.md).

Why a script: the two things a Flux user installs are both *derived* from ``config/`` and must not drift from it
or from each other, and the version must stay written once (pyproject.toml):

* ``dist/install.yaml``: ``config/default`` built with kustomize (``kubectl kustomize``) with the image pinned to
  ``IMG:VERSION`` and ``app.kubernetes.io/version`` on every object: CRDs, RBAC, Deployment, Services,
  NetworkPolicy, with Flux's names, ports, args, probes and labels. For a cluster where Flux was installed with
  ``flux install`` / ``kubectl apply`` (no ``flux-system`` Kustomization reconciling it).
* ``dist/install-persistent.yaml``, ``dist/install-ha.yaml``: the same from ``config/persistent`` (SQLite on a
  PersistentVolume) and ``config/ha`` (two replicas on the NATS of ``config/nats``, rendered as ``dist/nats.yaml``).
* ``dist/flux-system/notification-controller/``: a kustomize *Component* for a cluster made by ``flux bootstrap``.
  Copied next to ``flux-system/kustomization.yaml`` and named under ``components:`` there, it makes
  kustomize-controller itself apply our image and our CRDs (a superset of Flux's: ``spec.filter``,
  ``threshold``, ``template``… survive), so it stops putting Flux's back on its next reconcile. It only patches
  Flux's objects in place (same names, labels, selector, and args: ours takes Flux's flags, so whatever
  ``flux bootstrap`` set is kept) and adds our least-privilege RBAC next to Flux's, and the CRDs Flux does not
  have (``silences.notification-controller.io``, docs/silences.md); deleting the ``components:``
  line goes back to Flux's controller. Components run before the kustomization's own ``patches:``, so a user's
  args patch there (``--store=…``) applies on top.

The version must equal pyproject's (the image label, ``/metrics`` and ``--version`` read that one); a mismatch is
refused with the line to change. Measured against: Flux v2.9.4's ``gotk-components.yaml``
(tests/data/flux-install), rendered with kubectl's kustomize v5.5 (tests/e2e/test_flux_system_patch_e2e.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "flux-system"
DEPLOYMENT = "notification-controller"
# The image name config/manager/deployment.yaml uses; kustomize's images transformer rewrites it.
BASE_IMAGE = "notification-controller"
COMPONENT = "notification-controller"
VARIANTS = ("persistent", "ha")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
FLUX_GROUP = "notification.toolkit.fluxcd.io"
"""The group of the CRDs Flux installs too (patched in place); CRDs of other groups (our ``Silence``) are added."""

Obj = dict[str, Any]


class KubeYAML(yaml.SafeLoader):
    """A safe loader reading a plain ``=`` as the string "=", as Kubernetes' YAML does: kustomize writes a
    Silence's (and an inhibit rule's) ``matchType: =`` unquoted, which PyYAML resolves to YAML 1.1's ``value``
    type and cannot build."""


def _equals_sign(loader: KubeYAML, node: yaml.Node) -> str:
    return str(node.value)


KubeYAML.add_constructor("tag:yaml.org,2002:value", _equals_sign)


def pyproject_version() -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    version: str = data["project"]["version"]
    return version


def kustomize(directory: Path, kubectl: str) -> list[Obj]:
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl kustomize {directory} failed:\n{done.stderr.strip()}")
    return [d for d in yaml.load_all(done.stdout, Loader=KubeYAML) if d]


def render_install(version: str, image: str, kubectl: str, overlay: str = "default") -> list[Obj]:
    """config/<overlay> through kustomize with the image pinned and the version label: a plain install."""
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        base = os.path.relpath(ROOT / "config" / overlay, tmp)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [base],
            "images": [{"name": BASE_IMAGE, "newName": image, "newTag": version}],
            "labels": [{"pairs": {"app.kubernetes.io/version": version}, "includeTemplates": True}],
        }
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
        return kustomize(Path(tmp), kubectl)


def _pointer(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def component(objects: list[Obj], version: str, image: str) -> dict[str, str]:
    """The files of the flux-system Component: name -> YAML text."""
    crds = [
        o for o in objects if o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] == FLUX_GROUP
    ]
    own_crds = [
        o for o in objects if o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] != FLUX_GROUP
    ]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    pod = deployment["spec"]["template"]["spec"]
    files: dict[str, str] = {}
    patches: list[Obj] = []
    for crd in sorted(crds, key=lambda c: str(c["metadata"]["name"])):
        name = crd["metadata"]["name"]
        ops: list[Obj] = [{"op": "replace", "path": "/spec", "value": crd["spec"]}]
        for key, value in sorted((crd["metadata"].get("annotations") or {}).items()):
            ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value})
        filename = f"crd-{name.split('.')[0]}.yaml"
        files[filename] = (
            f"# Our {name} (config/crd, a superset of Flux's) in place of Flux's: same name, versions and storage\n"
            "# version; Flux's labels are kept. Generated by scripts/release.py.\n"
            + yaml.safe_dump(ops, sort_keys=False)
        )
        patches.append(
            {
                "path": filename,
                "target": {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition", "name": name},
            }
        )
    deployment_ops: list[Obj] = [
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": container["image"]},
        {
            "op": "replace",
            "path": "/spec/template/spec/terminationGracePeriodSeconds",
            "value": pod["terminationGracePeriodSeconds"],
        },
    ]
    files["deployment.yaml"] = (
        "# Our image and grace period (the drain of in-flight deliveries) on Flux's Deployment. Its name, ports,\n"
        "# probes, labels, selector and args stay Flux's: the args are the same flags, and what `flux bootstrap`\n"
        "# set (--watch-all-namespaces=false, --log-level) is kept.\n"
        "# Generated by scripts/release.py.\n" + yaml.safe_dump(deployment_ops, sort_keys=False)
    )
    patches.append(
        {"path": "deployment.yaml", "target": {"group": "apps", "kind": "Deployment", "name": DEPLOYMENT}}
    )
    # Our least-privilege RBAC next to Flux's crd-controller-flux-system (different names: nothing of Flux's is
    # changed, and removing the component prunes exactly these). The ServiceAccount is Flux's.
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS and o["kind"] != "ServiceAccount"]
    files["rbac.yaml"] = "# Generated by scripts/release.py from config/rbac.\n" + yaml.safe_dump_all(
        rbac, sort_keys=False
    )
    # CRDs Flux does not have (Silence, issue 26): added as they are, with Flux's labels like the rest of the
    # flux-system install, so removing the component prunes them (and their objects) too.
    resources = ["rbac.yaml"]
    for crd in sorted(own_crds, key=lambda c: str(c["metadata"]["name"])):
        filename = f"crd-{crd['metadata']['name'].split('.')[0]}.yaml"
        files[filename] = "# Generated by scripts/release.py from config/crd.\n" + yaml.safe_dump(
            crd, sort_keys=False
        )
        resources.append(filename)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": resources,
        "patches": patches,
    }
    files["kustomization.yaml"] = (
        f"# notification-controller {version} ({image}:{version}) for a cluster made by `flux bootstrap`:\n"
        "# copy this directory next to flux-system/kustomization.yaml and add there\n"
        "#   components:\n"
        f"#   - {COMPONENT}\n"
        "# Remove those two lines to go back to Flux's controller (docs/install.md).\n"
        + yaml.safe_dump(kustomization, sort_keys=False)
    )
    return files


def write(out: Path, version: str, image: str, kubectl: str) -> None:
    objects = render_install(version, image, kubectl)
    if out.exists():
        shutil.rmtree(out)
    (out / "flux-system" / COMPONENT).mkdir(parents=True)
    header = (
        f"# notification-controller {version}: `kubectl apply --server-side -f install.yaml` (docs/install.md).\n"
        f"# Rendered by `make release` from config/default; image {image}:{version}.\n"
    )
    (out / "install.yaml").write_text(header + yaml.safe_dump_all(objects, sort_keys=False))
    # The durable variants of the same release (docs/delivery.md): config/persistent, config/ha (+ config/nats).
    for overlay in VARIANTS:
        variant = render_install(version, image, kubectl, overlay)
        (out / f"install-{overlay}.yaml").write_text(
            header.replace("install.yaml", f"install-{overlay}.yaml").replace(
                "config/default", f"config/{overlay}"
            )
            + yaml.safe_dump_all(variant, sort_keys=False)
        )
    nats = kustomize(ROOT / "config" / "nats", kubectl)
    (out / "nats.yaml").write_text(
        "# The three-node NATS JetStream install-ha.yaml uses (config/nats; docs/install.md, HA with NATS).\n"
        + yaml.safe_dump_all(nats, sort_keys=False)
    )
    for name, text in component(objects, version, image).items():
        (out / "flux-system" / COMPONENT / name).write_text(text)
    (out / "VERSION").write_text(version + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/release.py", description=__doc__.split("\n")[0])
    parser.add_argument("--version", default=pyproject_version(), help="must equal pyproject.toml's")
    parser.add_argument("--image", required=True, help="image repository, without the tag (IMG)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--kubectl", default=shutil.which("kubectl") or "kubectl")
    args = parser.parse_args(argv)
    expected = pyproject_version()
    if args.version != expected:
        print(
            f"VERSION={args.version} but pyproject.toml says version = {expected!r}: the version is written once, "
            'change `version = "…"` in pyproject.toml (then VERSION may be left out).',
            file=sys.stderr,
        )
        return 2
    if not re.fullmatch(r"[a-z0-9]+(?:[._/:-][a-z0-9]+)*", args.image) or re.search(r":[^/]*$", args.image):
        print(f"IMG={args.image!r}: give the repository without a tag (the tag is VERSION)", file=sys.stderr)
        return 2
    write(args.out, args.version, args.image, args.kubectl)
    print(
        f"wrote {args.out}/install.yaml and {args.out}/flux-system/{COMPONENT}/ ({args.image}:{args.version})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
