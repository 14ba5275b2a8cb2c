"""The source layout never shadows Python's own `operator` module, and a module's unit tests are
found by its name: tests/unit/<package>/test_<module>.py (tests/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_operator_folder_is_a_source_folder_not_a_package() -> None:
    assert (ROOT / "operator" / "gpu_auditor" / "__init__.py").is_file()
    assert not (ROOT / "operator" / "__init__.py").exists()


@pytest.mark.parametrize("path_entries", [[""], ["", "operator"], [".", "operator"]])
def test_import_operator_from_the_repo_root_is_the_standard_library(
    path_entries: list[str],
) -> None:
    code = (
        f"import sys; sys.path[:0] = {path_entries!r}\n"
        "import operator, collections, importlib\n"
        "operator = importlib.reload(operator)\n"
        "assert hasattr(operator, 'itemgetter'), operator\n"
        "print(operator.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert not out.startswith(str(ROOT)), out


def test_both_import_packages_resolve_to_the_repo() -> None:
    import gpu_auditor
    import node_agent

    assert Path(gpu_auditor.__file__).is_relative_to(ROOT / "operator")
    assert Path(node_agent.__file__).is_relative_to(ROOT / "node_agent")


# -- where a module's unit tests are (tests/README.md) -------------------------------------------

UNIT = ROOT / "tests" / "unit"
PACKAGES: dict[str, tuple[str, ...]] = {
    # tests/unit/<folder> -> the source folders (or files) whose modules it tests: a module
    # <name>.py (or the probe's _<name>.py) is tested in <folder>/test_<name>.py
    "diagnosis": ("operator/gpu_auditor/diagnosis",),
    "base": ("operator/gpu_auditor/base",),
    "admission": ("operator/gpu_auditor/admission",),
    "webhook": ("operator/gpu_auditor/webhook",),
    "commands": ("operator/gpu_auditor/commands",),
    "controller": ("operator/gpu_auditor/controller",),
    "gpu_auditor": ("operator/gpu_auditor",),  # its top-level modules: cli, checkmanifest
    "node_agent": ("node_agent",),
    "node_agent/podresources": ("node_agent/podresources",),
    "probe": ("probe/gpu_auditor_probe", "probe/sitecustomize.py"),
    "devtools": ("devtools",),
    "scripts": ("scripts/mutation.py",),
    "devtools/dashboard_lint": ("devtools/dashboard_lint",),
    "devtools/localcluster": ("devtools/localcluster",),
}
TOPIC_FOLDERS = {
    "chart": "the chart's files (templates, values, rules, dashboard, Dockerfile), not modules",
}
TOPICS = {  # test files named after what they span, not after one module
    "test_layout.py": "the source and test layout itself",
    "test_light_install.py": "the wheel's files and the light install's imports",
    "diagnosis/test_properties.py": "property tests over diagnose() and the whole core",
    "diagnosis/test_hostile_regex.py": "every pattern of the core: linear time, bounded numbers",
    "diagnosis/test_oom_corpus.py": "the real-log corpus: every rule of the core meets it",
    "diagnosis/test_oom_fixtures.py": "one hand-written fixture per message family and kind",
    "diagnosis/test_h200_proof_logs.py": "the OOMs of the GPU proof suite on an H200",
    "diagnosis/test_heldout_logs.py": "held-out set A, written blind to the rules",
    "diagnosis/test_public_logs.py": "the first public set's logs (evaluation/public): every rule "
    "they pinned",
    "diagnosis/test_cards_logs.py": "the emulated small cards' real OOMs (evaluation/gpu/cards), "
    "truth from their re-runs",
    "diagnosis/test_library_errors_logs.py": "what the GPU libraries printed on a full H200 "
    "(evaluation/gpu/library_errors.py), truth from the runs",
    "diagnosis/test_allocconf_real_torch.py": "allocconf against a real torch's parser, run alone "
    "in a torch venv by `make real-torch`",
    "node_agent/test_gpu_pod_test_plumbing.py": "the GPU test's own plumbing, on a CPU",
    "node_agent/test_series_demo_fake.py": "evaluation/gpu/series_demo.py on a CPU",
    "admission/test_loop_proof_fake.py": "evaluation/gpu/loop_proof.py on a CPU",
    "probe/test_packaging.py": "how the probe ships (its own wheel, the .pth line)",
    "devtools/dashboard_lint/test_rule_edges.py": "every rule's edge through lint: rules.py and "
    "targets.py together",
}
NO_TEST_FILE = {  # modules without a test file of their own, and why
    "operator/gpu_auditor/diagnosis/thresholds.py": "module-level constants, each pinned from "
    "both sides by its rule's boundary table (test_classify, test_leak, test_allocconf)",
    "operator/gpu_auditor/base/errors.py": "one class per HTTP status, pinned through the "
    "clients that raise them (base/test_client.py, controller/test_kube.py)",
    "operator/gpu_auditor/base/jobkinds.py": "the job kinds' table, pinned through its readers "
    "(controller/test_jobowners.py, test_jobmember.py, chart/test_chart_job_kinds.py)",
    "operator/gpu_auditor/controller/diagnosischild.py": "the diagnosis pool's subprocess: run "
    "by controller/test_diagnosispool.py",
    "operator/gpu_auditor/controller/handlers.py": "the kopf handlers, thin: run against a real "
    "API server by tests/integration/test_operator*.py",
    "operator/gpu_auditor/controller/lru.py": "the operator's bounded memory, pinned through the "
    "paths that remember (controller/test_oom.py, test_sharing.py)",
    "operator/gpu_auditor/controller/metrics.py": "declarations: names held to docs/contracts.md "
    "by base/test_contract.py, counts asserted where they are counted",
    "operator/gpu_auditor/controller/retry.py": "attempts and back-off, pinned through the paths "
    "that retry (controller/test_oom.py, test_sharing.py)",
    "operator/gpu_auditor/commands/podreads.py": "explain's API reads: "
    "tests/integration/test_explain_demo.py",
    "operator/gpu_auditor/webhook/main.py": "the server's entry point: started by "
    "tests/integration/test_webhook.py, its flags checked by chart/test_chart_webhook.py",
    "operator/gpu_auditor/webhook/metrics.py": "declarations: names held to docs/contracts.md by "
    "base/test_contract.py, counts asserted in webhook/test_server.py",
    "node_agent/model.py": "plain data of one sampling pass, no behaviour of its own",
    "node_agent/sampler.py": "one sampling pass, run by every pass test (test_collector.py, "
    "test_report.py, test_dra.py, test_sharing.py)",
    "node_agent/podresources/model.py": "plain values of the client's answer",
    "node_agent/podresources/api_descriptor.py": "the serialized descriptor: its messages read "
    "in podresources/test_messages.py against the kubelet's generated ones",
    "devtools/demo.py": "`make demo`: its scenario read back by "
    "tests/integration/test_explain_demo.py",
    "devtools/dashboard_lint/promql.py": "the PromQL parser's adapter, pinned through the query "
    "rules (dashboard_lint/test_targets.py, test_rule_edges.py)",
    "devtools/dashboard_lint/units.py": "Grafana's unit names, pinned through rules.panel_units "
    "(dashboard_lint/test_rules.py)",
    **{
        f"devtools/localcluster/{name}.py": "the local control plane the integration group runs "
        "on (tests/integration/test_control_plane.py)"
        for name in ("cluster", "components", "crds", "node", "pki", "process")
    },
}
ENTRY_FILES = {
    "__init__.py": "a package's re-exports: each name is tested where its module defines it",
    "__main__.py": "`python -m`: calls the main() tested in the package's test_cli.py",
}


def modules_of(folder: str) -> dict[str, Path]:
    """test_<name>.py -> the module it is named after, for one tests/unit folder."""
    found: dict[str, Path] = {}
    for source in PACKAGES[folder]:
        path = ROOT / source
        for module in [path] if path.suffix == ".py" else sorted(path.glob("*.py")):
            if module.name not in ENTRY_FILES:
                found[f"test_{module.stem.lstrip('_')}.py"] = module
    return found


def unit_test_files() -> list[Path]:
    return sorted(p for p in UNIT.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_every_unit_test_file_names_a_module_of_its_folder_or_is_a_listed_topic() -> None:
    stray = []
    for path in unit_test_files():
        rel = path.relative_to(UNIT).as_posix()
        folder = path.parent.relative_to(UNIT).as_posix()
        if folder in TOPIC_FOLDERS or rel in TOPICS:
            continue
        if folder not in PACKAGES or path.name not in modules_of(folder):
            stray.append(rel)
    assert stray == [], (
        "unit test files named after no module of their folder (tests/unit/<package>/"
        "test_<module>.py; a file spanning modules goes in TOPICS with its reason): "
        f"{stray}")


def test_every_module_has_its_test_file_or_a_reason_it_has_none() -> None:
    missing = []
    for folder in PACKAGES:
        for name, module in modules_of(folder).items():
            rel = module.relative_to(ROOT).as_posix()
            if not (UNIT / folder / name).is_file() and rel not in NO_TEST_FILE:
                missing.append(f"{rel} (tests/unit/{folder}/{name})")
    assert missing == [], f"modules without their unit test file or a reason: {missing}"


def test_the_lists_name_only_what_is_there() -> None:
    tested = {f"{f}/{n}": m for f in PACKAGES for n, m in modules_of(f).items()}
    stale_topics = [t for t in TOPICS if not (UNIT / t).is_file()]
    no_module = [m for m in NO_TEST_FILE if not (ROOT / m).is_file()]
    has_file = [m.relative_to(ROOT).as_posix() for t, m in tested.items()
                if (UNIT / t).is_file() and m.relative_to(ROOT).as_posix() in NO_TEST_FILE]
    assert (stale_topics, no_module, has_file) == ([], [], [])


def test_every_unit_test_file_is_marked_unit() -> None:
    """`make unit` runs `-m unit`: a file without the marker is never run there."""
    unmarked = [p.relative_to(UNIT).as_posix() for p in unit_test_files()
                if not re.search(r"^pytestmark = .*pytest\.mark\.unit", p.read_text(), re.M)]
    assert unmarked == []


def test_no_test_file_imports_another_test_file() -> None:
    """Shared helpers live in a conftest.py or a *_helpers.py beside the tests."""
    importing = [p.relative_to(UNIT).as_posix() for p in unit_test_files()
                 if re.search(r"^\s*from \.*test_\w+ import|^\s*import \.*test_\w+", p.read_text(),
                              re.M)]
    assert importing == []
