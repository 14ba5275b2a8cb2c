"""The chart grants what the code calls, and nothing else.

docs/install.md's table "What each component calls" is the one list (apicalls.py reads it).
Here it is held against the chart (the Roles and ClusterRoles it renders, for the default values
and every ci/*-values.yaml) and against the code (every function that sends a request to the API
server, found in the source's syntax tree, with the verbs its HTTP methods imply; every kopf
handler; the kopf machinery the operator leaves switched on). A grant no row asks for, a row no
code makes, or a request no row names fails a test here.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from apicalls import (
    CHART,
    Call,
    Triple,
    chart_values,
    expected_rbac,
    lookup,
    read_table,
)
from chartlib import Render, only
from codecalls import (
    COMPONENTS,
    HANDLER_VERBS,
    KOPF_POSTING,
    KOPF_QUIET,
    METHOD_VERBS,
    QUIET_ACTIVITIES,
    ComponentCode,
    Entry,
    KopfSetup,
    Sites,
    component_code,
    entry_module,
    folder_modules,
    kopf_machinery,
    probe_entry,
    scan,
)

from gpu_auditor.admission.ownerchain import KINDS as OWNER_CHAIN_KINDS
from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.jobkinds import JOB
from gpu_auditor.base.jobkinds import KINDS as ALL_JOB_KINDS
from gpu_auditor.controller import main as operator_main
from gpu_auditor.controller import owners
from gpu_auditor.controller.kube import WORKLOADS, KubeApi, ObjectRef
from gpu_auditor.controller.pod import controller_reference
from gpu_auditor.webhook.ownerreads import OwnerReader
from node_agent.kube import AgentApi

pytestmark = pytest.mark.unit

JOB_KINDS = [k for k in ALL_JOB_KINDS if k is not JOB]

CI_VALUES = sorted(f"ci/{p.name}" for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE_NAMESPACE = "gpu-auditor"


@pytest.fixture(scope="module")
def calls() -> list[Call]:
    return read_table()


# -- the table itself --------------------------------------------------------------------------

def test_the_table_has_rows_for_both_components_and_names_real_values(
    calls: list[Call],
) -> None:
    assert {c.component for c in calls} == {"agent", "kube-rbac-proxy", "operator", "webhook"}
    defaults = chart_values()
    for call in calls:
        if call.when != "always":
            lookup(defaults, call.when)  # raises for a value the chart does not have
        assert call.verbs and call.resources, call


def test_a_table_without_its_columns_is_refused() -> None:
    text = "### What each component calls\n\n| who | what |\n|---|---|\n| agent | pods |\n"
    with pytest.raises(ValueError, match="columns"):
        read_table(text)


# -- the table against the chart ---------------------------------------------------------------

def rendered_rbac(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str | None],
                                                         set[Triple]]:
    out: dict[tuple[str, str, str | None], set[Triple]] = {}
    for obj in objects:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        name = obj["metadata"]["name"]
        if obj["kind"] == "ClusterRole" and name.endswith("-metrics"):
            continue  # the scrapers' role, bound to no one by the chart (its own test below)
        suffix = "-" + name.rsplit("-", 1)[1]
        namespace = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        out[(obj["kind"], suffix, namespace)] = {
            (group, resource, verb) for rule in obj["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}
    return out


@pytest.mark.parametrize("values_file", [None, *CI_VALUES])
def test_the_chart_grants_exactly_the_table(
    render: Render, calls: list[Call], values_file: str | None,
) -> None:
    files = [values_file] if values_file else []
    objects = render(values=files, namespace=RELEASE_NAMESPACE)
    expected = expected_rbac(calls, chart_values(files), RELEASE_NAMESPACE)
    assert rendered_rbac(objects) == expected


@pytest.mark.parametrize("sets, values", [
    ({"agent.report": False}, ("agent.report=false",)),
    ({"agent.metricsProxy.enabled": True}, ("agent.metricsProxy.enabled=true",)),
    ({"operator.metricsProxy.enabled": True}, ("operator.metricsProxy.enabled=true",)),
    ({"operator.metricsProxy.enabled": True, "agent.enabled": False},
     ("operator.metricsProxy.enabled=true", "agent.enabled=false")),
    ({"operator.namespaces": ["ml", "gpu-auditor"]}, ("operator.namespaces={ml,gpu-auditor}",)),
])
def test_the_chart_grants_exactly_the_table_for_each_switch(
    render: Render, calls: list[Call], sets: dict[str, Any], values: tuple[str, ...],
) -> None:
    expected = expected_rbac(calls, chart_values(sets=sets), RELEASE_NAMESPACE)
    assert rendered_rbac(render(*values, namespace=RELEASE_NAMESPACE)) == expected


def test_an_agent_without_reports_may_not_touch_them(render: Render) -> None:
    role = only(render("agent.report=false"), "ClusterRole", "-agent")
    assert all("gpu-auditor.io" not in rule["apiGroups"] for rule in role["rules"])


def test_namespaced_mode_makes_roles_and_keeps_only_cluster_scoped_grants_cluster_wide(
    render: Render,
) -> None:
    objects = render(values=["ci/namespaced-values.yaml"])
    cluster = rendered_rbac(objects)[("ClusterRole", "-operator", None)]
    assert {resource for _, resource, _ in cluster} == {"gpunodereports"}
    for namespace in ("ml", "research"):
        binding = only([o for o in objects if o["metadata"].get("namespace") == namespace],
                       "RoleBinding", "-operator")
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "auditor-operator"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "auditor-operator",
                                        "namespace": "gpu-auditor"}]


# Each binding of the chart, by name: the ServiceAccount it binds and the role it binds it to.
BINDINGS = {
    ("ClusterRoleBinding", "rel-gpu-auditor-agent"): ("agent", "rel-gpu-auditor-agent"),
    ("ClusterRoleBinding", "rel-gpu-auditor-proxyauth"): ("agent", "rel-gpu-auditor-proxyauth"),
    ("ClusterRoleBinding", "rel-gpu-auditor-operator"): ("operator", "rel-gpu-auditor-operator"),
    ("ClusterRoleBinding", "rel-gpu-auditor-operator-proxyauth"): ("operator",
                                                                  "rel-gpu-auditor-proxyauth"),
    ("RoleBinding", "rel-gpu-auditor-operator"): ("operator", "rel-gpu-auditor-operator"),
    ("RoleBinding", "rel-gpu-auditor-events"): ("operator", "rel-gpu-auditor-events"),
    ("ClusterRoleBinding", "rel-gpu-auditor-webhook"): ("webhook", "rel-gpu-auditor-webhook"),
}


@pytest.mark.parametrize("values_file", CI_VALUES)
def test_each_service_account_is_bound_to_its_own_roles(render: Render, values_file: str,
                                                        ) -> None:
    objects = render(values=[values_file])
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    fullname = chart_values([values_file]).get("fullnameOverride") or "rel-gpu-auditor"
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        key = (binding["kind"],
               "rel-gpu-auditor" + binding["metadata"]["name"].removeprefix(fullname))
        assert key in BINDINGS, f"a binding this test does not know: {key}"
        component, role = BINDINGS[key]
        (subject,) = binding["subjects"]
        assert subject["name"] in accounts and subject["namespace"] == "gpu-auditor"
        assert subject["name"] == f"{fullname}-{component}", (key, subject)
        role = fullname + role.removeprefix("rel-gpu-auditor")
        assert binding["roleRef"]["name"] == role, key
        assert any(o["kind"] == binding["roleRef"]["kind"] and o["metadata"]["name"] == role
                   and o["metadata"].get("namespace") == binding["metadata"].get("namespace")
                   for o in objects), key


def test_the_proxy_reviews_are_bound_only_to_components_that_run_the_proxy(
    render: Render,
) -> None:
    for sets, bound in ((("agent.metricsProxy.enabled=true",), {"agent"}),
                        (("operator.metricsProxy.enabled=true",), {"operator"}),
                        (("agent.metricsProxy.enabled=true", "operator.metricsProxy.enabled=true"),
                         {"agent", "operator"}),
                        ((), set())):
        objects = render(*sets)
        subjects = {s["name"].rsplit("-", 1)[1] for b in objects
                    if b["kind"] == "ClusterRoleBinding"
                    and b["roleRef"]["name"].endswith("-proxyauth") for s in b["subjects"]}
        assert subjects == bound, sets
        containers = {c["name"] for o in objects if o["kind"] in ("DaemonSet", "Deployment")
                      for c in o["spec"]["template"]["spec"]["containers"]}
        assert ("kube-rbac-proxy" in containers) == bool(bound), sets


@pytest.mark.parametrize("component", ["agent", "operator"])
def test_the_scrapers_role_reads_only_metrics_and_is_bound_to_no_one(
    render: Render, component: str,
) -> None:
    objects = render(f"{component}.metricsProxy.enabled=true")
    role = only(objects, "ClusterRole", "-metrics")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [b for b in objects if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and b["roleRef"]["name"] == role["metadata"]["name"]]
    assert not [o for o in render() if o["kind"] == "ClusterRole"
                and o["metadata"]["name"].endswith(("-metrics", "-proxyauth"))]


def test_no_role_grants_wildcards_secrets_deletes_or_escalation(render: Render) -> None:
    for values_file in [None, *CI_VALUES]:
        objects = render(values=[values_file] if values_file else [])
        for triples in rendered_rbac(objects).values():
            for group, resource, verb in triples:
                assert "*" not in (group, resource, verb)
                assert resource != "secrets"
                assert verb not in ("delete", "deletecollection", "escalate", "bind",
                                    "impersonate")


def test_every_rbac_rule_says_why_in_a_comment() -> None:
    templates = sorted((CHART / "templates").glob("*rbac.yaml"))
    assert len(templates) >= 3
    for path in templates:
        template = path.name
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(("- apiGroups:", "- nonResourceURLs:")):
                above = lines[i - 1].strip()
                assert above.startswith("#"), f"{template}:{i + 1}: rule without a comment"


# -- the table against the code ----------------------------------------------------------------

@pytest.fixture(scope="module")
def entries() -> dict[str, Entry]:
    return {component: probe_entry(entry_module(script))
            for component, (script, _) in COMPONENTS.items()}


@pytest.fixture(scope="module")
def code(entries: dict[str, Entry]) -> dict[str, ComponentCode]:
    """Each component's code: its own folder, and every first-party module its entry point
    loads (both run the transport of gpu_auditor.base.client; the operator the diagnosis core)."""
    return {component: component_code([*folder_modules(folder), *entries[component].modules])
            for component, (_, folder) in COMPONENTS.items()}


@pytest.fixture(scope="module")
def kopf_setup(entries: dict[str, Entry]) -> KopfSetup:
    assert entries["agent"].kopf is None, "the agent registers kopf handlers"
    setup = entries["operator"].kopf
    assert setup is not None, "the operator's entry point registers no kopf handler"
    return setup


def _rows(calls: list[Call], component: str) -> list[Call]:
    return [c for c in calls if c.component == component]


def test_the_code_finder_sees_requests_and_handlers(
    code: dict[str, ComponentCode], kopf_setup: KopfSetup,
) -> None:
    # Not a list of today's calls (the table is): that the finder finds some of each kind.
    assert code["agent"].sites and code["operator"].sites and kopf_setup.handlers
    assert "startup" in kopf_setup.activities.values()
    assert all(methods <= METHOD_VERBS.keys()
               for c in code.values() for methods in c.sites.values())


@pytest.mark.parametrize("component", ["agent", "operator", "webhook"])
def test_every_request_names_its_method_literally(
    code: dict[str, ComponentCode], component: str,
) -> None:
    assert code[component].non_literal == [], (
        "a request whose HTTP method is not a literal: the RBAC check cannot tell its verb")


@pytest.mark.parametrize("component", ["agent", "operator", "webhook"])
def test_only_the_transport_opens_connections(
    code: dict[str, ComponentCode], component: str,
) -> None:
    assert code[component].clients == {}, (
        "a module that opens HTTP connections of its own: send through gpu_auditor.base.client "
        "(whose requests this test reads), or say in codecalls.OTHER_CONNECTIONS why it is not "
        "the API server")


def test_the_operator_calls_no_kopf_function_that_may_send(code: dict[str, ComponentCode],
                                                           ) -> None:
    unknown = {name: where for name, where in code["operator"].kopf_calls.items()
               if name not in KOPF_QUIET | KOPF_POSTING}
    assert unknown == {}, "kopf calls whose requests the table does not model"


def test_the_operator_runs_kopf_in_a_mode_the_table_models(kopf_setup: KopfSetup) -> None:
    assert kopf_setup.errors == [], "a startup handler failed on fresh settings"
    assert kopf_setup.standalone, "peering needs kopf's peering resources, which no row grants"
    for handler in kopf_setup.handlers:
        assert handler.kind in HANDLER_VERBS, (
            f"{handler.function}: a kopf {handler.kind} handler; its requests are not modelled")
        assert handler.specific and handler.resource and not handler.other_names, (
            f"{handler.function}: name the resource by group, version and plural")
    assert set(kopf_setup.activities.values()) <= QUIET_ACTIVITIES, kopf_setup.activities


@pytest.mark.parametrize("component", ["agent", "operator", "webhook"])
def test_every_request_of_the_code_is_in_the_table(
    calls: list[Call], code: dict[str, ComponentCode], component: str,
) -> None:
    for site, methods in code[component].sites.items():
        rows = [c for c in _rows(calls, component) if site in c.callers]
        assert rows, (f"{site} sends {sorted(methods)} but no row of docs/install.md's table "
                      "names it: add the row and the grant")
        verbs = {v for row in rows for v in row.verbs}
        for method in methods:
            assert verbs & METHOD_VERBS[method], (
                f"{site} sends {method}, but the table gives it only {sorted(verbs)}")


def test_every_kopf_handler_and_kopf_sender_is_in_the_table(
    calls: list[Call], kopf_setup: KopfSetup,
) -> None:
    rows = _rows(calls, "operator")
    for handler in kopf_setup.handlers:
        named = [r for r in rows if handler.function in r.callers]
        assert {(r.group, r.resources, frozenset(r.verbs)) for r in named} == {
            (handler.group, (handler.resource,), frozenset(HANDLER_VERBS[handler.kind]))}, (
            f"kopf handler {handler.function} watches {handler.group}/{handler.resource}: "
            f"one row naming it must grant {sorted(HANDLER_VERBS[handler.kind])} on that alone")
    for sender, when in kopf_machinery(kopf_setup).items():
        named = [r for r in rows if sender in r.callers]
        assert named, f"kopf runs {sender} with these settings, and no row names it"
        assert when is None or all(r.when in ("always", when) for r in named), (sender, when)


@pytest.mark.parametrize("component", ["agent", "operator", "webhook"])
def test_every_row_of_the_table_is_a_call_the_code_makes(
    calls: list[Call], code: dict[str, ComponentCode], kopf_setup: KopfSetup,
    component: str,
) -> None:
    sites = code[component].sites
    handlers = {h.function: h for h in kopf_setup.handlers} if component == "operator" else {}
    machinery = kopf_machinery(kopf_setup) if component == "operator" else {}
    for row in _rows(calls, component):
        assert row.callers, f"{row}: names no code"
        implied: set[str] = set()
        for caller in row.callers:
            if caller in sites:
                implied |= {v for m in sites[caller] for v in METHOD_VERBS[m]}
            elif caller in handlers:
                implied |= HANDLER_VERBS[handlers[caller].kind]
            elif caller in machinery:
                module, _, name = caller.rpartition(".")
                assert callable(getattr(importlib.import_module(module), name, None)), (
                    f"{caller} is not in the installed kopf")
                implied |= {"list", "watch"} if "observer" in caller else {"create"}
            elif caller.startswith("kopf."):
                pytest.fail(f"the table names {caller}, which kopf does not run with the "
                            "operator's settings (scanning, posting): drop the row and its grant")
            else:
                pytest.fail(f"the table names {caller}, which sends no request in {component}'s"
                            " code: drop the row and its grant, or name the function that does")
        unused = set(row.verbs) - implied
        assert not unused, f"{row.resources} {sorted(unused)}: no call of {row.callers} needs it"


# -- the finder itself, on code written for it -------------------------------------------------

FORMS = {
    "registered.py": """
import kopf
from registered_names import GROUP, PLURAL, VERSION


@kopf.on.startup()
def configure(settings, **_):
    settings.scanning.disabled = True
    settings.posting.enabled = False
    settings.peering.standalone = True


@kopf.on.cleanup()
def bye(**_):
    pass


@kopf.on.event("v1", "pods")
def positional(**_):
    pass


@kopf.on.event(group=GROUP, version=VERSION, plural=PLURAL)
def keywords(**_):
    pass


def at_module_level(**_):
    pass


kopf.on.event("apps", "v1", "deployments")(at_module_level)


@kopf.daemon("batch", "v1", "jobs")
async def spawned(**_):
    pass


class Client:
    def send(self, api, kind):
        lambda: api.request("PATCH", "/x")
        api.request_bytes("GET", "/y")
        api.request(kind, "/z")
        kopf.info({}, reason="r", message="m")
        kopf.adopt({})
        return api.list_pods(field_selector="x")
""",
    "registered_names.py": 'GROUP, VERSION, PLURAL = "example.io", "v1", "things"\n',
    "opener.py": "from urllib import request\nimport http.client\nimport importlib\n"
                 "importlib.import_module('grpc')\n",
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("forms")
    for name, text in FORMS.items():
        (folder / name).write_text(text)
    return folder


def test_the_finder_reads_every_form_of_kopf_registration(written: Path) -> None:
    setup = probe_entry("registered", pythonpath=[written]).kopf
    assert setup is not None
    found = {h.function: (h.kind, h.group, h.resource) for h in setup.handlers}
    assert found == {"registered.positional": ("watching", "", "pods"),
                     "registered.keywords": ("watching", "example.io", "things"),
                     "registered.at_module_level": ("watching", "apps", "deployments"),
                     "registered.spawned": ("spawning", "batch", "jobs")}
    assert setup.activities == {"registered.configure": "startup", "registered.bye": "cleanup"}
    assert (setup.scanning, setup.posting, setup.standalone) == (False, False, True)
    assert kopf_machinery(setup) == {}


def test_the_finder_reads_every_request_and_reports_what_it_cannot_judge(written: Path) -> None:
    sites, transport = Sites(), Sites()
    scan(FORMS["registered.py"], "registered", sites)
    scan(FORMS["opener.py"], "opener", sites)
    assert sites.sites == {"registered.Client.send": {"PATCH", "GET"}}
    assert sites.non_literal == ["registered.Client.send: api.request(kind, '/z')"]
    assert set(sites.kopf_calls) == {"kopf.info", "kopf.adopt"}
    assert sites.clients == {"opener": ["urllib.request", "http.client", "grpc"]}
    # The transport's own request methods count where a component calls them.
    scan("class ApiClient:\n    def list_pods(self):\n        return self.request('GET', '/p')\n"
         "    def get_node(self):\n        return self.request('GET', '/n')\n",
         "gpu_auditor.base.client", transport)
    assert transport.sites == {"gpu_auditor.base.client.ApiClient.list_pods": {"GET"},
                               "gpu_auditor.base.client.ApiClient.get_node": {"GET"}}
    assert "list_pods" in sites.called and "get_node" not in sites.called


# -- the table against the requests' paths ----------------------------------------------------
# The syntax tree gives each function's HTTP methods, not the resources its paths name. Here
# each request function runs against a transport that records instead of sending, with the
# arguments the code can give it (the owner kinds: those owners.verified_owner reads and
# returns), and each request becomes (API group, resource, verb): a row must grant what its
# functions send, and its functions must send all that the row grants.

class Recorder(ApiClient):
    def __init__(self, answer: dict[str, Any] | None = None) -> None:  # no server, no config
        self.sent: list[tuple[str, str, dict[str, str]]] = []
        self.answer = answer or {}

    def request_bytes(self, method: str, path: str, *, query: Any = None, body: Any = None,
                      timeout: float = 10.0, content_type: str = "application/json") -> bytes:
        self.sent.append((method, path, dict(query or {})))
        return json.dumps(self.answer).encode()


def triple(method: str, path: str, query: dict[str, str]) -> Triple:
    """(group, resource, verb) of one request path, as RBAC sees it."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = unquote(parts[1]), parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # a namespaced resource; the namespace is the Role's business
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2:]
    resource = "/".join([plural, *sub])
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") == "true" else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    assert verb, method
    return group, unquote(resource), verb


def _owner_kinds() -> tuple[set[str], set[str]]:
    """The kinds owners.verified_owner reads, and the kinds it returns (which Services then
    patch), over every kind of controller reference a pod may carry."""
    read: set[str] = set()
    returned: set[str] = set()

    class Workloads:
        def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
            read.add(kind)
            meta: dict[str, Any] = {"uid": f"uid-{kind}"}
            meta["ownerReferences"] = [{"controller": True, "kind": "Deployment",
                                        "apiVersion": "apps/v1", "name": "d",
                                        "uid": "uid-Deployment"}]
            meta["labels"] = {"app": "w"}  # a ReplicaSet's, which its Deployment selects
            return {"metadata": meta, "spec": {"selector": {"matchLabels": {"app": "w"}}}}

    for kind, workload in WORKLOADS.items():
        refs = [{"controller": True, "kind": kind, "apiVersion": workload.api_version,
                 "name": "w", "uid": f"uid-{kind}"}]
        labels = {"app": "w", "batch.kubernetes.io/controller-uid": f"uid-{kind}"}
        owner = owners.verified_owner(Workloads(), "ml", controller_reference(refs), labels)
        if owner is not None:
            returned.add(owner.kind)
    return read, returned


def _sent_by_operator() -> dict[str, set[Triple]]:
    read_kinds, patched_kinds = _owner_kinds()
    assert read_kinds and patched_kinds
    pod = ObjectRef(namespace="ml", name="p", uid="u")
    runs: dict[str, Any] = {
        "read_pod": lambda api: api.read_pod("ml", "p"),
        "read_log": lambda api: api.read_log("ml", "p", "c", previous=True, tail_lines=1,
                                             limit_bytes=1024),
        "patch_pod_annotations": lambda api: api.patch_pod_annotations("ml", "p", {"a": "b"},
                                                                       uid="u"),
        "post_event": lambda api: api.post_event(pod, name="e", reason="r", message="m"),
        "read_node_report": lambda api: api.read_node_report("node-1"),
        "read_workload": lambda api: [api.read_workload(k, "ml", "w") for k in read_kinds],
        "patch_workload": lambda api: [api.patch_workload(k, "ml", "w", "u", {"a": "b"})
                                       for k in patched_kinds],
        # every distributed job's kind (base.jobkinds) is read and annotated; an Indexed Job
        # is read as a workload (above), and annotated as a job
        "read_object": lambda api: [api.read_object(k, "ml", "w") for k in JOB_KINDS],
        "patch_object": lambda api: [api.patch_object(k, "ml", "w", "u", {"a": "b"})
                                     for k in ALL_JOB_KINDS],
    }
    out = {}
    for name, run in runs.items():
        recorder = Recorder()
        run(KubeApi(recorder))
        out[f"gpu_auditor.controller.kube.KubeApi.{name}"] = {triple(*s) for s in recorder.sent}
    recorder = Recorder()
    assert operator_main.wait_for_reports(recorder, timeout=0)
    out["gpu_auditor.controller.main.wait_for_reports"] = {triple(*s) for s in recorder.sent}
    return out


def _sent_by_agent() -> dict[str, set[Triple]]:
    runs: dict[str, Any] = {
        "list_pods": lambda api: api.list_pods(field_selector="spec.nodeName=n"),
        "get_node": lambda api: api.get_node("n"),
        "list_resource_slices": lambda api: api.list_resource_slices(
            field_selector="spec.nodeName=n"),
        "read_report": lambda api: api.read_report("n"),
        "create_report": lambda api: api.create_report({}),
        "replace_report": lambda api: api.replace_report("n", {}),
    }
    out = {}
    for name, run in runs.items():
        recorder = Recorder()
        run(AgentApi(recorder))
        out[f"node_agent.kube.AgentApi.{name}"] = {triple(*s) for s in recorder.sent}
    return out


def _sent_by_webhook() -> dict[str, set[Triple]]:
    """The owner reads of webhook.applyRecommendation: every kind a chain may read."""
    recorder = Recorder()
    reader = OwnerReader(recorder)
    for kind in OWNER_CHAIN_KINDS:
        reader(kind, "ml", "w")
    return {"gpu_auditor.webhook.ownerreads.OwnerReader.__call__":
            {triple(*s) for s in recorder.sent}}


@pytest.mark.parametrize("component", ["agent", "operator", "webhook"])
def test_each_row_grants_exactly_the_resources_its_functions_send_to(
    calls: list[Call], code: dict[str, ComponentCode], kopf_setup: KopfSetup, component: str,
) -> None:
    sent = {"agent": _sent_by_agent, "operator": _sent_by_operator,
            "webhook": _sent_by_webhook}[component]()
    assert set(sent) == set(code[component].sites), (
        "run every request function of the code here, with the arguments the code gives it")
    if component == "operator":
        for handler in kopf_setup.handlers:
            sent[handler.function] = {(str(handler.group), str(handler.resource), verb)
                                      for verb in HANDLER_VERBS[handler.kind]}
        for sender in kopf_machinery(kopf_setup):
            if sender.endswith("post_event"):
                sent[sender] = {("", "events", "create")}
    rows = _rows(calls, component)
    for function, triples in sent.items():
        allowed = {t for row in rows if function in row.callers for t in row.triples()}
        assert triples <= allowed, (f"{function} sends {sorted(triples - allowed)}, "
                                    "which no row naming it grants")
    for row in rows:
        used = {t for caller in row.callers for t in sent.get(caller, set())}
        assert row.triples() <= used, (f"{sorted(row.triples() - used)}: no function the row "
                                       f"names ({row.callers}) sends it")


def test_the_path_reader_tells_resources_and_verbs_apart() -> None:
    assert triple("GET", "/api/v1/pods", {"fieldSelector": "x"}) == ("", "pods", "list")
    assert triple("GET", "/api/v1/namespaces/ml/pods/p/log", {}) == ("", "pods/log", "get")
    assert triple("GET", "/api/v1/nodes/n", {}) == ("", "nodes", "get")
    assert triple("PATCH", "/apis/apps/v1/namespaces/ml/deployments/d", {}) == (
        "apps", "deployments", "patch")
    assert triple("GET", "/apis/g.io/v1/things", {"watch": "true"}) == ("g.io", "things", "watch")
    assert triple("POST", "/api/v1/namespaces/ml/events", {}) == ("", "events", "create")
    assert triple("DELETE", "/api/v1/namespaces/ml/pods", {}) == ("", "pods", "deletecollection")
