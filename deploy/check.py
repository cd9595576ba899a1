"""`make k8s-check`: each kustomization under deploy/ (the base and every overlay) rendered
by `kubectl kustomize`, every resource validated offline against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field fails too), and what the project promises
of its pods checked: non-root, read-only root filesystem with /tmp an emptyDir, no
capabilities, requests and limits, probes on /healthz, a pre-stop pause within the grace
period, the models volume read-only. Prints a line per resource; exits 1 on any failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml

DEPLOY = Path(__file__).resolve().parent
VERSION = "1.37.0"


def kustomizations(root: Path = DEPLOY) -> list[Path]:
    return sorted(p.parent for p in root.rglob("kustomization.yaml"))


def render(folder: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True,
                         text=True, check=False)  # fmt: skip
    if out.returncode != 0:
        raise ValueError(f"kubectl kustomize {folder}: {out.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def promises(resource: dict) -> list[str]:
    """What a Deployment of ours must hold; [] where it does (or it is no Deployment)."""
    if resource["kind"] != "Deployment":
        return []
    spec = resource["spec"]["template"]["spec"]
    problems = []
    pod = spec.get("securityContext", {})
    if not pod.get("runAsNonRoot"):
        problems.append("the pod may run as root")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        if not sc.get("readOnlyRootFilesystem"):
            problems.append(f"{c['name']}: the root filesystem is writable")
        if sc.get("allowPrivilegeEscalation", True):
            problems.append(f"{c['name']}: privilege escalation is allowed")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{c['name']}: capabilities are not all dropped")
        resources = c.get("resources", {})
        for part in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(part, {})):
                problems.append(f"{c['name']}: no cpu and memory {part}")
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                            ("startupProbe", "/healthz")):  # fmt: skip
            if c.get(probe, {}).get("httpGet", {}).get("path") != path:
                problems.append(f"{c['name']}: its {probe} is not on {path}")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        tmp = mounts.get("/tmp")
        if tmp is None or "emptyDir" not in volumes.get(tmp["name"], {}):
            problems.append(f"{c['name']}: /tmp is not an emptyDir")
        if not mounts.get("/models", {}).get("readOnly"):
            problems.append(f"{c['name']}: /models is not mounted read-only")
        pause = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        if not 0 < pause < spec.get("terminationGracePeriodSeconds", 30):
            problems.append(f"{c['name']}: no pre-stop pause within the grace period")
    return problems


def check(folder: Path, root: Path = DEPLOY) -> list[str]:
    """Lines saying what passed; failures start with FAIL."""
    lines = []
    try:
        resources = render(folder)
    except ValueError as exc:
        return [f"FAIL {exc}"]
    name = folder.relative_to(root)
    for resource in resources:
        what = f"{name}: {resource['kind']}/{resource['metadata']['name']}"
        try:
            kubernetes_validate.validate(resource, VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            lines.append(f"FAIL {what}: {exc.message} at {'.'.join(map(str, exc.path))}")
            continue
        problems = promises(resource)
        lines += [f"FAIL {what}: {p}" for p in problems]
        if not problems:
            lines.append(f"ok   {what} (valid against Kubernetes {VERSION}, strict)")
    return lines


def main() -> int:
    lines = [line for folder in kustomizations() for line in check(folder)]
    print("\n".join(lines))
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
