"""kube-score, with every optional check on, over the chart rendered with the default values and
every ci/*-values.yaml: each finding is fixed in the chart or listed in ACCEPTED with the reason.

kube-score is built from its Go module by scripts/build-manifest-checkers.sh into
~/.cache/gpu-auditor/bin (`make manifest-checkers`, part of `make tools`). An accepted finding
that no variant shows any more fails too, so the list cannot outlive its reasons.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from chartlib import CHART, KUBE_VERSION, run_helm, tool_missing

pytestmark = pytest.mark.unit

VARIANTS = ["", *sorted(f"ci/{p.name}" for p in (CHART / "ci").glob("*-values.yaml"))]
# (kube-score check id, app.kubernetes.io/component of the object, container or "") -> why
Finding = tuple[str, str, str]

_BURSTABLE = ("Burstable on purpose: requests are the steady use, limits cap a burst (a "
              "sampling pass, a burst of failed pods); equal ones would reserve the burst on "
              "every node. values.yaml says so at each resources value.")
_PULL = ("The image is pinned by tag or digest (image.digest, "
         "<component>.metricsProxy.image.digest), so IfNotPresent runs the same bytes; Always "
         "would make every restart depend on the registry. image.pullPolicy sets it.")
_NO_NETPOL = ("NetworkPolicies are optional (networkPolicy.enabled, off by default): who scrapes "
              "and where the API server is are facts of the cluster. ci/locked-down-values.yaml "
              "turns them on and the finding is gone there.")
_ROOT = ("uid/gid 0 by default only to connect to the kubelet's root-owned pod-resources socket "
         "(docs/install.md, Security); agent.runAsUser with agent.podResourcesSocketGroup runs "
         "it non-root, and ci/no-hostpid-values.yaml shows the finding gone.")
_ONE_OPERATOR = ("One replica replaced with Recreate: kopf runs without peering, so two "
                 "operators at once would write every diagnosis and Event twice.")

_CONTAINERS = (("agent", "agent"), ("agent", "kube-rbac-proxy"), ("operator", "operator"),
               ("operator", "kube-rbac-proxy"), ("test", "healthz"), ("webhook", "webhook"))

ACCEPTED: dict[Finding, str] = {
    **{(check, component, container): _BURSTABLE
       for check in ("container-resource-requests-equal-limits",
                     "container-cpu-requests-equal-limits",
                     "container-memory-requests-equal-limits",
                     "container-ephemeral-storage-request-equals-limit")
       for component, container in _CONTAINERS},
    **{("container-image-pull-policy", component, container): _PULL
       for component, container in _CONTAINERS},
    **{("pod-networkpolicy", component, ""): _NO_NETPOL
       for component in ("agent", "operator", "test", "webhook")},
    ("container-security-context-user-group-id", "agent", "agent"): _ROOT,
    ("deployment-strategy", "operator", ""): _ONE_OPERATOR,
    ("deployment-replicas", "operator", ""): _ONE_OPERATOR,
}


def find_kube_score() -> Path | None:
    if explicit := os.environ.get("GPU_AUDITOR_BIN"):
        path = Path(explicit) / "kube-score"
    else:
        cache = Path(os.environ.get("GPU_AUDITOR_CACHE", Path.home() / ".cache" / "gpu-auditor"))
        path = cache / "bin" / "kube-score"
    return path if os.access(path, os.X_OK) else None


@pytest.fixture(scope="module")
def kube_score() -> Path:
    found = find_kube_score()
    if found is None:
        tool_missing("kube-score not found in ~/.cache/gpu-auditor/bin "
                     "(run scripts/build-manifest-checkers.sh)")
    assert found is not None
    return found


def _findings(kube_score: Path, helm: Path, variant: str, tmp: Path) -> frozenset[Finding]:
    args = ["template", "rel", str(CHART), "--namespace", "gpu-auditor",
            "--kube-version", KUBE_VERSION]
    if variant:
        args += ["-f", str(CHART / variant)]
    rendered = tmp / f"{variant.replace('/', '_') or 'default'}.yaml"
    rendered.write_text(run_helm(helm, *args).stdout)
    result = subprocess.run(
        [str(kube_score), "score", "--all-default-optional", "--output-format", "json",
         "--kubernetes-version", "v" + ".".join(KUBE_VERSION.lstrip("v").split(".")[:2]),
         "--disable-ignore-checks-annotations", str(rendered)],
        capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("["), result.stderr  # exit 1 only means findings
    found = set()
    for obj in json.loads(result.stdout):
        component = (obj["object_meta"].get("labels") or {}).get("app.kubernetes.io/component",
                                                                  obj["object_name"])
        for check in obj["checks"]:
            if check["skipped"] or check["grade"] >= 10:
                continue
            paths = {c["path"] for c in check["comments"] or [{"path": ""}]}
            found |= {(check["check"]["id"], component, path) for path in paths}
    return frozenset(found)


@pytest.fixture(scope="module")
def findings(kube_score: Path, helm: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, frozenset[Finding]]:
    tmp = tmp_path_factory.mktemp("kube-score")
    return {v: _findings(kube_score, helm, v, tmp) for v in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS)
def test_kube_score_finds_nothing_that_is_not_fixed_or_accepted_with_a_reason(
    findings: dict[str, frozenset[Finding]], variant: str,
) -> None:
    unexplained = sorted(f for f in findings[variant] if f not in ACCEPTED)
    assert not unexplained, f"kube-score findings neither fixed nor accepted: {unexplained}"


def test_every_accepted_finding_still_occurs(findings: dict[str, frozenset[Finding]]) -> None:
    seen = set().union(*findings.values())
    assert not [f for f in ACCEPTED if f not in seen], "accepted findings no variant shows"


def test_the_findings_the_chart_fixed_stay_fixed(findings: dict[str, frozenset[Finding]]
                                                 ) -> None:
    for variant, found in findings.items():
        checks = {check for check, _, _ in found}
        # Distinct liveness and readiness probes; ephemeral storage requested and limited;
        # the test pod's own group; NetworkPolicies for every pod when they are on.
        assert "pod-probes-identical" not in checks, variant
        assert "pod-probes" not in checks, variant  # the operator's readiness probe
        assert "container-ephemeral-storage-request-and-limit" not in checks, variant
        assert ("container-security-context-user-group-id", "test", "healthz") not in found
    locked = findings["ci/locked-down-values.yaml"]
    assert not {f for f in locked if f[0] == "pod-networkpolicy"}
    no_root = findings["ci/no-hostpid-values.yaml"]
    assert ("container-security-context-user-group-id", "agent", "agent") not in no_root
