"""Which Kubernetes client for exec-plugin auth: RSS of `import` + config + one request.

Starts the local control plane with a static bearer token (`--token-auth-file`), writes a
kubeconfig split over two files (KUBECONFIG=a:b) whose user is an exec credential plugin
printing that token, then for each candidate runs, in a fresh interpreter: import the client,
load the config (which runs the plugin), list pods once. Each child reports VmRSS and VmHWM
(kB from /proc/self/status) after the import and after the request, beside a bare
interpreter's, from the same run.

Candidates need their own virtual environments (the project's must not hold them):

    python3 -m venv /tmp/authbench/kubernetes && /tmp/authbench/kubernetes/bin/pip install \
        kubernetes PyYAML
    # likewise kubernetes-asyncio, lightkube, kr8s
    .venv/bin/python bench/auth_clients.py --venvs /tmp/authbench \
        --out bench/results/auth_clients.json

`ours` (gpu_auditor.base) runs on the kubernetes venv's interpreter with only this repo's
`operator/` folder on the path: it imports the standard library and PyYAML, nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]  # devtools is not installed

from devtools.localcluster import LocalCluster  # noqa: E402

TOKEN = "bench-" + uuid.uuid4().hex

PLUGIN = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": sys.argv[1]}}))
"""

MEASURE = """
def rss():
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out
"""

CANDIDATES: dict[str, tuple[str, str, str]] = {
    # name: (venv folder, import, config + one request)
    "bare interpreter": ("kubernetes", "pass", "n = 0"),
    "ours (gpu_auditor.base)": (
        "kubernetes",
        "from gpu_auditor.base.client import ApiClient\n"
        "from gpu_auditor.base.kubeconfig import load_config",
        "api = ApiClient(load_config(), user_agent='bench')\n"
        "n = len(api.request('GET', '/api/v1/pods', query={'limit': '1'})['items'])"),
    "kubernetes (config loader + ApiClient)": (
        "kubernetes",
        "from kubernetes import client, config",
        "config.load_kube_config()\n"
        "r = client.CoreV1Api().list_pod_for_all_namespaces(limit=1, _preload_content=False)\n"
        "import json as _j; n = len(_j.loads(r.data)['items'])"),
    "kubernetes_asyncio (config loader + ApiClient)": (
        "kubernetes-asyncio",
        "import asyncio\nfrom kubernetes_asyncio import client, config",
        "async def main():\n"
        "    await config.load_kube_config()\n"
        "    async with client.ApiClient() as api:\n"
        "        r = await client.CoreV1Api(api).list_pod_for_all_namespaces(\n"
        "            limit=1, _preload_content=False)\n"
        "        import json as _j; return len(_j.loads(await r.read())['items'])\n"
        "n = asyncio.run(main())"),
    "lightkube": (
        "lightkube",
        "from lightkube import Client, KubeConfig\n"
        "from lightkube.resources.core_v1 import Pod",
        "n = len([next(iter(Client(KubeConfig.from_env()).list(Pod, namespace='*')), 0)])"),
    "kr8s": (
        "kr8s",
        "import kr8s",
        "n = len(list(kr8s.get('pods', namespace=kr8s.ALL)))"),
}
ONE_FILE = {"lightkube", "kr8s"}
"""Candidates also measured with the two files merged into one (they do not merge a list)."""


class TokenCluster(LocalCluster):
    def _apiserver_argv(self) -> list[str]:
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{TOKEN},bench,bench-uid,"system:masters"\n')
        return [*super()._apiserver_argv(), f"--token-auth-file={tokens}"]


def one_file(paths: str, folder: Path) -> str:
    """The files of a KUBECONFIG list merged by hand into one (this split has no overlaps)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    for path in paths.split(os.pathsep):
        for key, value in yaml.safe_load(Path(path).read_text()).items():
            merged[key] = merged.get(key, []) + value if isinstance(value, list) else value
    out = folder / "merged.yaml"
    out.write_text(yaml.safe_dump(merged))
    return str(out)


def kubeconfigs(folder: Path, cluster: LocalCluster, python: str) -> str:
    script = folder / "plugin.py"
    script.write_text(PLUGIN)
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    a, b = folder / "a.yaml", folder / "b.yaml"
    a.write_text(yaml.safe_dump({"users": [{"name": "exec", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": python,
        "args": [str(script), TOKEN], "interactiveMode": "Never"}}}]}))
    b.write_text(yaml.safe_dump({
        "clusters": admin["clusters"],
        "contexts": [{"name": "exec", "context": {"cluster": "local", "user": "exec"}}],
        "current-context": "exec"}))
    return f"{a}{os.pathsep}{b}"


def run_one(python: Path, imports: str, work: str, env: dict[str, str]) -> dict[str, Any]:
    code = (MEASURE + "import time, json\n" + "t0 = time.perf_counter()\n" + imports + "\n"
            + "after_import = rss(); t1 = time.perf_counter()\n" + work + "\n"
            + "after_request = rss(); t2 = time.perf_counter()\n"
            + "print(json.dumps({'import': after_import, 'request': after_request, 'items': n,"
            + " 'import_s': t1 - t0, 'request_s': t2 - t1}))\n")
    done = subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venvs", type=Path, default=Path("/tmp/authbench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = [*CANDIDATES, *(f"{name} (one merged file)" for name in ONE_FILE)]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with TokenCluster() as cluster:
        folder = cluster.workdir / "bench"
        folder.mkdir()
        for _ in range(args.repeat):
            for name, (venv, imports, work) in CANDIDATES.items():
                python = args.venvs / venv / "bin" / "python"
                if not python.exists():
                    rows[name].append({"error": f"not installed: {python}"})
                    continue
                env = {"PATH": os.environ.get("PATH", ""), "HOME": str(folder),
                       "KUBECONFIG": kubeconfigs(folder, cluster, str(python))}
                if name.startswith("ours"):
                    env["PYTHONPATH"] = str(ROOT / "operator")
                rows[name].append(run_one(python, imports, work, env))
                if name in ONE_FILE:
                    env["KUBECONFIG"] = one_file(env["KUBECONFIG"], folder)
                    rows[f"{name} (one merged file)"].append(run_one(python, imports, work, env))
    summary = {}
    for name, results in rows.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            summary[name] = {"error": results[0]["error"] if results else "not run"}
            continue

        def median(key: str, part: str, found: list[dict[str, Any]] = ok) -> float:
            values = sorted(r[key][part] / 1024 for r in found)
            return round(values[len(values) // 2], 1)

        times = sorted(r["import_s"] for r in ok)
        summary[name] = {
            "rss_after_import_mib": median("import", "VmRSS"),
            "rss_after_request_mib": median("request", "VmRSS"),
            "hwm_after_request_mib": median("request", "VmHWM"),
            "import_ms": round(times[len(times) // 2] * 1000, 1),
            "runs": len(ok),
        }
    bare = summary["bare interpreter"].get("rss_after_request_mib", 0.0)
    print(f"{'candidate':50} {'import':>8} {'+request':>9} {'peak':>7} {'over bare':>10} "
          f"{'import ms':>10}")
    for name, row in summary.items():
        if "error" in row:
            print(f"{name:50} failed: {row['error']}")
            continue
        print(f"{name:50} {row['rss_after_import_mib']:8.1f} {row['rss_after_request_mib']:9.1f}"
              f" {row['hwm_after_request_mib']:7.1f} "
              f"{row['rss_after_request_mib'] - bare:+10.1f} {row['import_ms']:10.1f}")
    if args.out:
        args.out.write_text(json.dumps({
            "command": " ".join(sys.argv), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load": os.getloadavg(), "repeat": args.repeat,
            "summary": summary, "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
