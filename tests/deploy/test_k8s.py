"""The Kubernetes manifests (`make k8s-check`): rendered by kubectl kustomize, valid against
Kubernetes' schemas, holding what the project promises of its pods; and each kind of
mistake found."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import check  # noqa: E402


@pytest.mark.parametrize("folder", check.kustomizations(), ids=lambda p: p.name)
def test_every_kustomization_renders_valid_and_keeps_its_promises(folder):
    lines = check.check(folder)
    assert lines and not [line for line in lines if line.startswith("FAIL")], lines
    kinds = {line.split(": ")[1].split("/")[0] for line in lines}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
            "ConfigMap"} <= kinds  # fmt: skip


@pytest.mark.parametrize(
    "old, new, said",
    [
        ("readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false",
         "the root filesystem is writable"),
        ("      terminationGracePeriodSeconds: 60", "      terminationGracePeriodSeconds: 60\n"
         "      hostNetworks: true", "hostNetworks"),
        ("path: /healthz, port: http}\n            periodSeconds: 15",
         "path: /, port: http}\n            periodSeconds: 15", "livenessProbe is not on /healthz"),
        ("averageUtilization: 60", "averageUtilization: sixty", "sixty"),
        ("              readOnly: true", "              readOnly: false", "/models is not mounted"),
    ],
    ids=["writable-root", "unknown-field", "probe-path", "wrong-type", "models-writable"],
)  # fmt: skip
def test_a_mistake_in_the_manifests_fails_the_check(tmp_path, old, new, said):
    copy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", copy)
    changed = False
    for path in (copy / "base").glob("*.yaml"):
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new, 1))
            changed = True
    assert changed, old
    failures = [line for line in check.check(copy / "base", copy) if line.startswith("FAIL")]
    assert failures and any(said in line for line in failures), failures


@pytest.mark.parametrize("folder", check.kustomizations(), ids=lambda p: p.name)
def test_the_configmaps_settings_are_what_the_server_reads(folder, monkeypatch):
    """Each ATTNVIZ_* value of a rendered ConfigMap parses as the server's Settings (a
    misspelt name or a bad value would be refused, or ignored, only at start-up)."""
    from attnviz.app.settings import Settings

    maps = [r for r in check.render(folder) if r["kind"] == "ConfigMap"]
    assert maps
    for name, value in maps[0]["data"].items():
        if name.startswith("ATTNVIZ_"):
            field = name.removeprefix("ATTNVIZ_").lower()
            assert field in Settings.model_fields, name
            monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.port == 8000 and settings.host == "0.0.0.0"
