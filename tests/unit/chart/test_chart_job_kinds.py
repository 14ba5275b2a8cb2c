"""operator.jobKinds: a distributed job's kind is on where its CRD is served (auto), or as set;
the operator is told (--job-kinds) and granted get and patch on exactly those kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, only, run_helm

from gpu_auditor.base.jobkinds import SWITCHES

pytestmark = pytest.mark.unit

SERVED = {
    "jobset": ["jobset.x-k8s.io/v1alpha2/JobSet"],
    "trainjob": ["trainer.kubeflow.org/v1alpha1/TrainJob"],
    "pytorchjob": ["kubeflow.org/v1/PyTorchJob"],
    "mpijob": ["kubeflow.org/v2beta1/MPIJob"],
    "leaderworkerset": ["leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"],
    "ray": ["ray.io/v1/RayCluster", "ray.io/v1/RayJob"],
}
GRANTS = {
    "jobset": ("jobset.x-k8s.io", {"jobsets"}),
    "trainjob": ("trainer.kubeflow.org", {"trainjobs"}),
    "pytorchjob": ("kubeflow.org", {"pytorchjobs"}),
    "mpijob": ("kubeflow.org", {"mpijobs"}),
    "leaderworkerset": ("leaderworkerset.x-k8s.io", {"leaderworkersets"}),
    "ray": ("ray.io", {"rayclusters", "rayjobs"}),
}


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    text = run_helm(helm, "template", "rel", str(CHART), "--namespace", "gpu-auditor",
                    "--kube-version", KUBE_VERSION, *args).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def job_kinds(objects: list[dict[str, Any]]) -> list[str]:
    deployment = only(objects, "Deployment", "-operator")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (flag,) = [a for a in args if a.startswith("--job-kinds=")]
    return [k for k in flag.removeprefix("--job-kinds=").split(",") if k]


def grants(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    role = only(objects, "ClusterRole", "-operator")
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            if group in {g for g, _ in GRANTS.values()}:
                assert rule["verbs"] == ["get", "patch"]
                out.setdefault(group, set()).update(rule["resources"])
    return out


def test_the_values_name_every_switch_the_operator_knows() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["operator"]["jobKinds"]) == set(SWITCHES)


def test_without_the_crds_only_indexed_jobs_are_on_and_nothing_more_is_granted(helm: Path
                                                                               ) -> None:
    objects = render(helm)
    assert job_kinds(objects) == ["job"]
    assert grants(objects) == {}


@pytest.mark.parametrize("switch", sorted(SERVED))
def test_a_served_crd_switches_its_kind_on_and_grants_it(helm: Path, switch: str) -> None:
    args = [a for api in SERVED[switch] for a in ("--api-versions", api)]
    objects = render(helm, *args)
    assert job_kinds(objects) == ["job", switch]
    group, resources = GRANTS[switch]
    assert grants(objects) == {group: resources}


def test_false_keeps_a_served_kind_off_and_true_turns_one_on_without_its_crd(helm: Path
                                                                             ) -> None:
    objects = render(helm, "--api-versions", "jobset.x-k8s.io/v1alpha2/JobSet",
                     "--set", "operator.jobKinds.jobset=false",
                     "--set", "operator.jobKinds.pytorchjob=true",
                     "--set", "operator.jobKinds.job=false")
    assert job_kinds(objects) == ["pytorchjob"]
    assert grants(objects) == {"kubeflow.org": {"pytorchjobs"}}


def test_watching_some_namespaces_grants_the_kinds_in_each_namespaces_role(helm: Path) -> None:
    objects = render(helm, "--api-versions", "jobset.x-k8s.io/v1alpha2/JobSet",
                     "--set", "operator.namespaces={ml}")
    role = only([o for o in objects if o["metadata"].get("namespace") == "ml"], "Role",
                "-operator")
    assert {"group": "jobset.x-k8s.io", "resources": ["jobsets"], "verbs": ["get", "patch"]} in [
        {"group": r["apiGroups"][0], "resources": r["resources"], "verbs": r["verbs"]}
        for r in role["rules"]]


def test_a_kind_the_schema_does_not_know_is_refused(helm: Path) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", KUBE_VERSION,
                      "--set", "operator.jobKinds.volcanojob=true", check=False)
    assert result.returncode != 0 and "volcanojob" in result.stderr
