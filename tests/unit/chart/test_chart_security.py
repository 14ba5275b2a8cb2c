"""What the chart renders to keep the agent to its own node and /metrics to its scrapers: the
report ValidatingAdmissionPolicy, kube-rbac-proxy, the NetworkPolicies and the namespace's
pod-security labels. (RBAC: test_chart_rbac.py; the policy at work: the integration test.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chartlib import CHART, ROOT, Render, only, run_helm

pytestmark = pytest.mark.unit


def agent_containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = only(objects, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


# -- the GPUNodeReport admission policy --------------------------------------------------------

def test_the_report_policy_binds_writes_of_the_agent_to_its_tokens_node(render: Render) -> None:
    objects = render()
    policy = only(objects, "ValidatingAdmissionPolicy", "-reports")["spec"]
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["gpu-auditor.io"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    assert "gpunodereports" in rule["resources"]
    (condition,) = policy["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == "
        "'system:serviceaccount:gpu-auditor:rel-gpu-auditor-agent'")
    (node,) = policy["variables"]
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in node[
        "expression"]
    checks = " ".join(v["expression"] for v in policy["validations"])
    assert "object.metadata.name == variables.node" in checks
    assert "object.spec.nodeName == variables.node" in checks
    binding = only(objects, "ValidatingAdmissionPolicyBinding", "-reports")["spec"]
    assert binding == {"policyName": "rel-gpu-auditor-reports", "validationActions": ["Deny"]}


@pytest.mark.parametrize("sets", [("agent.report=false",), ("agent.reportPolicy.enabled=false",),
                                  ("agent.enabled=false",)])
def test_no_report_policy_without_reports(render: Render, sets: tuple[str, ...]) -> None:
    kinds = {o["kind"] for o in render(*sets)}
    assert "ValidatingAdmissionPolicy" not in kinds
    assert "ValidatingAdmissionPolicyBinding" not in kinds


def test_the_report_policy_needs_kubernetes_1_30(helm: Any) -> None:
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.29.9",
                      check=False)
    assert result.returncode != 0
    assert "agent.reportPolicy.enabled needs Kubernetes >= 1.30" in result.stderr
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.29.9",
                      "--set", "agent.reportPolicy.enabled=false", check=False)
    assert result.returncode == 0, result.stderr


# -- kube-rbac-proxy ---------------------------------------------------------------------------

def test_the_metrics_proxy_fronts_the_agent_which_listens_on_loopback_only(
    render: Render,
) -> None:
    containers = agent_containers(render("agent.metricsProxy.enabled=true"))
    agent, proxy = containers["agent"], containers["kube-rbac-proxy"]
    assert "--bind-address=127.0.0.1" in agent["args"] and "--port=9411" in agent["args"]
    assert "ports" not in agent
    assert proxy["image"] == "quay.io/brancz/kube-rbac-proxy:v0.21.0"
    assert proxy["args"][:4] == ["--secure-listen-address=0.0.0.0:9401",
                                 "--upstream=http://127.0.0.1:9411/",
                                 "--ignore-paths=/healthz", "--proxy-endpoints-port=9412"]
    assert {"name": "metrics", "containerPort": 9401, "protocol": "TCP"} in proxy["ports"]
    assert proxy["securityContext"]["runAsNonRoot"] is True
    assert proxy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # The kubelet's probes reach the agent through the proxy, which passes /healthz on.
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 9401,
                                                 "scheme": "HTTPS"}
    assert proxy["livenessProbe"]["httpGet"]["port"] == "proxy-health"


def test_the_proxy_serves_the_certificate_of_a_secret_and_the_monitor_checks_it(
    render: Render,
) -> None:
    objects = render(values=["ci/locked-down-values.yaml"])
    proxy = agent_containers(objects)["kube-rbac-proxy"]
    assert "--tls-cert-file=/etc/kube-rbac-proxy/tls.crt" in proxy["args"]
    pod = only(objects, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": "gpu-auditor-agent-tls"}
    (endpoint,) = only(objects, "ServiceMonitor", "-agent")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {"serverName": "rel-gpu-auditor-agent.gpu-auditor.svc"}
    # The operator's proxy makes its own certificate: the monitor cannot verify it.
    (operator_endpoint,) = only(objects, "ServiceMonitor", "-operator")["spec"]["endpoints"]
    assert operator_endpoint["scheme"] == "https"
    assert operator_endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    operator_pod = only(objects, "Deployment", "-operator")["spec"]["template"]["spec"]
    assert not [v for v in operator_pod["volumes"] if "secret" in v]
    (port,) = only(objects, "Service", "-operator")["spec"]["ports"]
    assert port["targetPort"] == "metrics"  # the proxy's port of that name


def operator_containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = only(objects, "Deployment", "-operator")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def test_the_metrics_proxy_fronts_the_operator_which_serves_metrics_on_loopback_only(
    render: Render,
) -> None:
    containers = operator_containers(render("operator.metricsProxy.enabled=true"))
    operator, proxy = containers["operator"], containers["kube-rbac-proxy"]
    assert "--metrics-bind-address=127.0.0.1" in operator["args"]
    assert "--metrics-port=9403" in operator["args"]
    assert [p["name"] for p in operator["ports"]] == ["liveness"]
    assert proxy["args"][:3] == ["--secure-listen-address=0.0.0.0:9402",
                                 "--upstream=http://127.0.0.1:9403/",
                                 "--proxy-endpoints-port=9404"]
    # No path passes without a token: prometheus_client serves the metrics on every path.
    assert not [a for a in proxy["args"] if a.startswith("--ignore-paths")]
    assert {"name": "metrics", "containerPort": 9402, "protocol": "TCP"} in proxy["ports"]
    assert proxy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # kopf's /healthz keeps its own port; readiness asks only whether the proxy accepts.
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert operator["readinessProbe"]["tcpSocket"] == {"port": 9402}
    assert "--metrics-bind-address=127.0.0.1" not in operator_containers(render())[
        "operator"]["args"]


def test_the_helm_test_checks_that_the_proxy_refuses_metrics_without_a_token(helm: Any) -> None:
    text = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3",
                    "--namespace", "gpu-auditor", "--set", "agent.metricsProxy.enabled=true",
                    "-s", "templates/tests/test-agent-healthz.yaml").stdout
    script = yaml.safe_load(text)["spec"]["containers"][0]["command"][-1]
    assert "https://rel-gpu-auditor-agent.gpu-auditor.svc:9401/healthz" in script
    assert "err.code != 401" in script
    compile(script, "helm-test", "exec")  # the script the pod runs is valid Python


@pytest.mark.parametrize("sets, message", [
    (("agent.metricsProxy.enabled=true", "podMonitor.enabled=true", "agent.service.enabled=false",
      "operator.service.enabled=false"), "PodMonitor cannot use Prometheus' own token"),
    (("agent.metricsProxy.enabled=true", "agent.metricsProxy.upstreamPort=9401"), "must differ"),
    (("operator.metricsProxy.enabled=true", "podMonitor.enabled=true",
      "agent.service.enabled=false", "operator.service.enabled=false"),
     "operator.metricsProxy.enabled needs a scraper that sends its token"),
    (("operator.metricsProxy.enabled=true", "operator.metricsProxy.healthPort=8080"),
     "must differ"),
    (("operator.metricsProxy.enabled=true", "operator.metricsProxy.upstreamPort=9402"),
     "must differ"),
])
def test_proxy_settings_that_cannot_work_are_refused(
    helm: Any, sets: tuple[str, ...], message: str,
) -> None:
    args = [a for s in sets for a in ("--set", s)]
    result = run_helm(helm, "template", "rel", str(CHART), "--kube-version", "v1.36.3", *args,
                      check=False)
    assert result.returncode != 0
    assert message in result.stderr


# -- NetworkPolicies ---------------------------------------------------------------------------

def test_no_network_policy_by_default(render: Render) -> None:
    assert "NetworkPolicy" not in {o["kind"] for o in render()}


def test_network_policies_open_only_the_metrics_ports_to_the_scrapers(render: Render) -> None:
    objects = render("networkPolicy.enabled=true")
    for component, port in (("agent", 9401), ("operator", 9402)):
        spec = only(objects, "NetworkPolicy", f"-{component}")["spec"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        scrape = spec["ingress"][0]
        assert scrape["ports"] == [{"protocol": "TCP", "port": port}]
        assert scrape["from"] == [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}]
        assert {p["port"] for p in spec["egress"][0]["ports"]} == {443, 6443}
        assert "to" not in spec["egress"][0]  # no CIDRs given: any address on those ports
    agent = only(objects, "NetworkPolicy", "-agent")["spec"]
    (test_pod,) = agent["ingress"][1]["from"]
    assert test_pod["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"
    assert len(agent["egress"]) == 1  # the agent dials the API server by address: no DNS
    operator = only(objects, "NetworkPolicy", "-operator")["spec"]
    assert len(operator["ingress"]) == 1
    dns = operator["egress"][1]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}


def test_the_webhooks_policy_admits_the_api_server_and_scrapers_and_sends_nothing(
    render: Render
) -> None:
    assert "NetworkPolicy" not in {o["kind"] for o in render("webhook.enabled=true")}
    spec = only(render("networkPolicy.enabled=true", "webhook.enabled=true"), "NetworkPolicy",
                "-webhook")["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "webhook"
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["egress"] == []
    https, metrics = spec["ingress"]
    assert https == {"ports": [{"protocol": "TCP", "port": 8443}]}  # the API server: any source
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9403}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    narrowed = only(render("networkPolicy.enabled=true", "webhook.enabled=true",
                           "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"),
                    "NetworkPolicy", "-webhook")["spec"]["ingress"][0]
    assert narrowed["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert "NetworkPolicy" not in {o["kind"] for o in render("networkPolicy.enabled=true")
                                   if o["metadata"]["name"].endswith("-webhook")}


def test_the_helm_test_pod_may_reach_only_the_agents_and_dns(render: Render) -> None:
    spec = only(render("networkPolicy.enabled=true"), "NetworkPolicy", "-test")["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"
    assert "ingress" not in spec and spec["policyTypes"] == ["Ingress", "Egress"]
    to_agent, dns = spec["egress"]
    assert to_agent["ports"] == [{"protocol": "TCP", "port": 9401}]
    assert to_agent["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "agent")
    assert {p["port"] for p in dns["ports"]} == {53}
    assert "NetworkPolicy" not in {o["kind"] for o in render("networkPolicy.enabled=true",
                                                            "tests.enabled=false")
                                   if o["metadata"]["name"].endswith("-test")}


def test_network_policies_take_the_api_servers_cidrs(render: Render) -> None:
    objects = render(values=["ci/locked-down-values.yaml"])
    egress = only(objects, "NetworkPolicy", "-agent")["spec"]["egress"]
    assert egress == [{"ports": [{"protocol": "TCP", "port": 6443}],
                       "to": [{"ipBlock": {"cidr": "10.0.0.0/28"}}]}]


# -- the namespace ---------------------------------------------------------------------------

def test_the_manifests_namespace_enforces_the_privileged_level_the_agent_needs() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "gpu-auditor.yaml").read_text())
            if d]
    labels = docs[0]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    install = (ROOT / "docs" / "install.md").read_text()
    assert "pod-security.kubernetes.io/enforce=privileged" in install
    assert "needs the `privileged` Pod Security level" in install
