"""What `helm template` renders for the switches that matter (chart charts/gpu-auditor)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from chartlib import CHART, Render, kinds, only, run_helm

pytestmark = pytest.mark.unit


def agent_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return only(objects, "DaemonSet", "-agent")["spec"]["template"]["spec"]


def operator_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return only(objects, "Deployment", "-operator")["spec"]["template"]["spec"]


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod["containers"]
    return c


# -- the agent DaemonSet ----------------------------------------------------------------------

def test_daemonset_tolerates_the_nvidia_gpu_taint(render: Render) -> None:
    tolerations = agent_pod(render())["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_daemonset_runs_only_on_gpu_nodes_by_default(render: Render) -> None:
    assert agent_pod(render())["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_daemonset_shares_the_host_pid_namespace_by_default(render: Render) -> None:
    pod = agent_pod(render())
    assert pod["hostPID"] is True
    assert "--proc-root=/proc" in container(pod)["args"]
    assert not [v for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/proc"]


def test_without_host_pid_the_agent_reads_the_hosts_proc_mounted_read_only(
    render: Render,
) -> None:
    pod = agent_pod(render("agent.hostPID=false"))
    assert pod["hostPID"] is False
    c = container(pod)
    assert "--proc-root=/host/proc" in c["args"] and "--proc-root=/proc" not in c["args"]
    (volume,) = [v for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/proc"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": "/host/proc", "readOnly": True}


def test_daemonset_mounts_the_kubelet_pod_resources_folder_read_only(render: Render) -> None:
    pod = agent_pod(render())
    (volume,) = [v for v in pod["volumes"] if "hostPath" in v]
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    (mount,) = [m for m in container(pod)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": "/var/lib/kubelet/pod-resources",
                     "readOnly": True}
    assert ("--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"
            in container(pod)["args"])


def test_agent_takes_its_node_name_from_the_downward_api(render: Render) -> None:
    c = container(agent_pod(render()))
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--node-name=$(NODE_NAME)" in c["args"]


def test_agent_asks_the_nvidia_runtime_for_every_gpu_without_requesting_one(
    render: Render,
) -> None:
    c = container(agent_pod(render()))
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])


def test_agent_flags_follow_the_contract(render: Render) -> None:
    c = container(agent_pod(render()))
    assert c["command"] == ["gpu-auditor-agent"]
    assert c["args"] == [
        "--node-name=$(NODE_NAME)",
        "--port=9401",
        "--interval=10",
        "--proc-root=/proc",
        "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
        "--report",
        "--report-min-interval=30",
    ]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9401, "protocol": "TCP"}]


def test_agent_switches_become_flags(render: Render) -> None:
    args = container(agent_pod(render(
        "agent.report=false", "agent.processLabels=true", "agent.port=9500",
        "agent.interval=5", "agent.extraArgs={--log-level=DEBUG}",
    )))["args"]
    assert "--no-report" in args and "--report" not in args
    assert "--process-labels" in args
    assert "--port=9500" in args and "--interval=5" in args
    assert args[-1] == "--log-level=DEBUG"


def test_agent_runs_without_capabilities_on_a_read_only_root(render: Render) -> None:
    sc = container(agent_pod(render()))["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert "privileged" not in sc


def test_agent_runs_as_root_by_default_only_for_the_kubelet_socket(render: Render) -> None:
    pod = agent_pod(render())
    sc = container(pod)["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert "supplementalGroups" not in pod["securityContext"]
    comment = (CHART / "values.yaml").read_text().split("  runAsUser: 0")[0].rsplit("# --", 1)[1]
    assert "pod-resources socket" in comment and "world-readable" in comment


def test_a_non_root_agent_gets_the_socket_group_and_its_own_group(render: Render) -> None:
    pod = agent_pod(render("agent.runAsUser=10001", "agent.podResourcesSocketGroup=2000"))
    sc = container(pod)["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (10001, 10001, True)
    assert pod["securityContext"]["supplementalGroups"] == [2000]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_a_socket_group_for_a_root_agent_is_refused(helm: Any) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                      "--set", "agent.podResourcesSocketGroup=2000", check=False)
    assert result.returncode != 0
    assert "set agent.runAsUser too" in result.stderr


def test_agent_probes_differ_liveness_on_healthz_readiness_on_the_open_port(
    render: Render,
) -> None:
    c = container(agent_pod(render()))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "httpGet" not in c["readinessProbe"]
    assert c["readinessProbe"]["tcpSocket"] == {"port": "metrics"}


def test_agent_resources_are_modest(render: Render) -> None:
    assert container(agent_pod(render()))["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "32Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi", "ephemeral-storage": "128Mi"},
    }


def test_agent_is_node_critical_and_uses_the_nvidia_runtime_class(render: Render) -> None:
    pod = agent_pod(render())
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"


def test_an_empty_runtime_class_leaves_the_field_out(render: Render) -> None:
    assert "runtimeClassName" not in agent_pod(render("agent.runtimeClassName="))


def test_extra_volumes_are_added_to_the_agent_pod_and_mounted_as_given(render: Render) -> None:
    pod = agent_pod(render(values=["ci/extra-volumes-values.yaml"]))
    c = container(pod)
    assert pod["volumes"][-1] == {"name": "fake-nvml",
                                  "configMap": {"name": "gpu-auditor-fake-nvml"}}
    assert c["volumeMounts"][-1] == {"name": "fake-nvml", "mountPath": "/fake",
                                     "readOnly": True}
    assert "--nvml-fake=/fake/nvml.yaml" in c["args"]
    # The chart's own volumes stay, in their place.
    assert [v["name"] for v in pod["volumes"]] == ["pod-resources", "tmp", "fake-nvml"]
    default = agent_pod(render())
    assert [v["name"] for v in default["volumes"]] == ["pod-resources", "tmp"]
    assert [m["name"] for m in container(default)["volumeMounts"]] == ["pod-resources", "tmp"]


def test_disabling_the_agent_removes_its_daemonset_rbac_and_service(render: Render) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in render("agent.enabled=false")}
    assert not any(name.endswith("-agent") for _, name in names)
    assert ("Deployment", "rel-gpu-auditor-operator") in names


# -- the operator Deployment -------------------------------------------------------------------

def test_operator_runs_one_replica_replaced_with_recreate(render: Render) -> None:
    spec = only(render(), "Deployment", "-operator")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_operator_flags_follow_the_contract(render: Render) -> None:
    c = container(operator_pod(render()))
    assert c["command"] == ["gpu-auditor-operator"]
    assert c["args"] == [
        "--annotation-prefix=gpu-auditor.io/",
        "--metrics-port=9402",
        "--liveness-port=8080",
        "--log-tail-lines=500",
        "--log-limit-bytes=1048576",
        "--job-kinds=job",
        "--group-log-reads=16",
    ]


def test_operator_repeats_the_namespace_flag_per_watched_namespace(render: Render) -> None:
    args = container(operator_pod(render("operator.namespaces={ml,research}")))["args"]
    assert args[:2] == ["--namespace=ml", "--namespace=research"]


def test_operator_liveness_probe_calls_kopf_healthz_on_8080(render: Render) -> None:
    c = container(operator_pod(render()))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert {"name": "liveness", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    assert {"name": "metrics", "containerPort": 9402, "protocol": "TCP"} in c["ports"]


def test_operator_is_non_root_on_a_read_only_root_with_a_writable_tmp(render: Render) -> None:
    pod = operator_pod(render())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    c = container(pod)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (tmp,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == tmp["name"]]
    assert "emptyDir" in volume


def test_metrics_and_liveness_on_one_port_are_refused(helm: Any) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                      "--set", "operator.livenessPort=9402", check=False)
    assert result.returncode != 0
    assert "must differ" in result.stderr


# -- images ------------------------------------------------------------------------------------

def test_both_components_use_the_one_image_tagged_with_the_app_version(render: Render) -> None:
    objects = render()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    expected = f"ghcr.io/gpu-auditor/gpu-auditor:{chart['appVersion']}"
    assert container(agent_pod(objects))["image"] == expected
    assert container(operator_pod(objects))["image"] == expected


def test_an_image_digest_wins_over_the_tag(render: Render) -> None:
    digest = "sha256:" + "a" * 64
    objects = render(f"image.digest={digest}", "image.tag=9.9.9")
    assert container(agent_pod(objects))["image"] == f"ghcr.io/gpu-auditor/gpu-auditor@{digest}"


# -- RBAC (the grants themselves: test_chart_rbac.py) ----------------------------------------

def test_existing_service_accounts_without_rbac(render: Render) -> None:
    objects = render(values=["ci/agent-only-values.yaml"])
    assert not kinds(objects) & {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    assert agent_pod(objects)["serviceAccountName"] == "gpu-auditor-agent"


# -- monitoring switches ---------------------------------------------------------------------

MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"}


def test_monitoring_objects_are_off_by_default(render: Render) -> None:
    assert not kinds(render()) & MONITORING_KINDS


def test_service_monitors_name_the_jobs_the_alerts_select_on(render: Render) -> None:
    objects = render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=kps")
    for component in ("agent", "operator"):
        monitor = only(objects, "ServiceMonitor", f"-{component}")
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert monitor["spec"]["jobLabel"] == "gpu-auditor.io/job"
        service = only(objects, "Service", f"-{component}")
        assert service["metadata"]["labels"]["gpu-auditor.io/job"] == f"gpu-auditor-{component}"
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True


def test_pod_monitors_name_the_jobs_from_the_pod_label(render: Render) -> None:
    objects = render(values=["ci/podmonitor-values.yaml"])
    assert "Service" not in kinds(objects)
    for component, pod in (("agent", agent_pod(objects)), ("operator", operator_pod(objects))):
        monitor = only(objects, "PodMonitor", f"-{component}")
        assert monitor["spec"]["jobLabel"] == "gpu-auditor.io/job"
        workload = only(objects, "DaemonSet" if component == "agent" else "Deployment")
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels["gpu-auditor.io/job"] == f"gpu-auditor-{component}"
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        assert any(p["name"] == "metrics" for p in container(pod)["ports"])


def test_service_monitor_and_pod_monitor_together_are_refused(helm: Any) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                      "--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
                      check=False)
    assert result.returncode != 0
    assert "scraped twice" in result.stderr


def test_prometheus_rule_embeds_the_rule_file_promtool_tests(render: Render) -> None:
    rule = only(render("prometheusRule.enabled=true"), "PrometheusRule")
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == shipped


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(render: Render) -> None:
    cm = only(render("dashboards.enabled=true"), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "files" / "dashboards" / "gpu-auditor.json").read_text())
    assert json.loads(cm["data"]["gpu-auditor.json"]) == shipped


def test_dashboard_sidecar_label_and_namespace_are_configurable(render: Render) -> None:
    cm = only(render("dashboards.enabled=true", "dashboards.label=my_dashboards",
                     "dashboards.labelValue=yes", "dashboards.namespace=monitoring"),
              "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["my_dashboards"] == "yes"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["namespace"] == "monitoring"


# -- helm test, labels, schema ----------------------------------------------------------------

def test_helm_test_pod_calls_the_agent_service_healthz(helm: Any) -> None:
    text = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                    "--namespace", "gpu-auditor", "-s", "templates/tests/test-agent-healthz.yaml"
                    ).stdout
    pod = yaml.safe_load(text)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = " ".join(pod["spec"]["containers"][0]["command"])
    assert "http://rel-gpu-auditor-agent.gpu-auditor.svc:9401" in script
    assert "/healthz" in script


def test_every_object_carries_the_standard_labels(render: Render) -> None:
    for obj in render(values=["ci/monitoring-values.yaml"]):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "gpu-auditor", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == "rel"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"].startswith("gpu-auditor-")


def test_long_release_names_still_fit_in_63_characters(render: Render) -> None:
    for obj in render("fullnameOverride=" + "x" * 80, values=["ci/monitoring-values.yaml"]):
        assert len(obj["metadata"]["name"]) <= 63, obj["metadata"]["name"]


@pytest.mark.parametrize("bad", [
    "agent.typo=1",
    "operator.port=1",
    "agent.port=70000",
    "image.pullPolicy=Sometimes",
    "operator.annotationPrefix=no-slash",
    "operator.namespaces={ml-*}",
    "agent.runAsUser=-1",
    "agent.hostPID=maybe",
    "networkPolicy.apiServer.cidrs={not-a-cidr}",
    "agent.metricsProxy.typo=1",
    "agent.extraVolumes[0].emptyDir.medium=Memory",  # a volume without a name
    "agent.extraVolumeMounts[0].name=x",  # a mount without a mountPath
])
def test_the_schema_rejects_unknown_or_invalid_values(helm: Any, bad: str) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                      "--set", bad, check=False)
    assert result.returncode != 0, f"{bad} was accepted"
    assert "schema" in result.stderr.lower() or "values don't meet" in result.stderr.lower()
