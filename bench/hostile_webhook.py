"""The webhook server under each hostile client of issue 26, before and after its bounds.

For each attack of tests/unit/webhook/attacks.py (and with none), a fresh `gpu-auditor-webhook`
process of each tree on loopback with TLS; the attack from a process of its own on 127.0.0.2;
a good client on 127.0.0.1 doing what the API server does (a fresh TLS connection, a pod's
AdmissionReview, its answer) 20 times a second. Recorded: the good client's p50/p99/max and
errors, the server's peak RSS (VmRSS sampled every 50 ms, and VmHWM) and threads. "before" is
the tree at ``--before-ref`` checked out with `git worktree add --detach`, run in the same run,
the attacks interleaved (before, after, before, after...).

Also the figures `webhook/limits.py` is sized from: the AdmissionReview of a large pod, and
what `json.loads` allocates per byte of JSON of each shape beside `limits.parse_cost`.

    .venv/bin/python bench/hostile_webhook.py --seconds 10 \\
        --out bench/results/hostile_servers-webhook.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

from gpu_auditor.webhook.limits import parse_cost  # noqa: E402
from tests.integration.webhook_support import make_tls  # noqa: E402
from tests.unit.webhook.attacks import (  # noqa: E402
    ATTACKS,
    CHART_LIMIT_MIB,
    Server,
    Target,
    bomb,
    measure,
)

BEFORE_REF = "3bbdc25"
"""The last commit with the thread-per-connection server (http.server)."""


def large_pod_review(operation: str = "CREATE") -> bytes:
    """A pod of 30 containers, each with 42 env entries (40 of 120 characters), 10 volume
    mounts, a port, probes, a security context; labels, annotations and managed fields."""
    def container(i: int) -> dict[str, Any]:
        return {
            "name": f"worker-{i:02d}", "image": f"registry.example.com/team/trainer:2.4.0-{i}",
            "command": ["python", "-m", "torch.distributed.run", "--nproc-per-node=8",
                        "train.py"],
            "args": [f"--config=/etc/train/config-{i}.yaml", "--epochs=100"],
            "env": [{"name": f"SETTING_{j:02d}_WITH_A_LONGER_NAME", "value": "x" * 120}
                    for j in range(40)]
            + [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
               {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                          "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}},
            "volumeMounts": [{"name": f"vol-{k}", "mountPath": f"/mnt/data/{k}",
                              "readOnly": True} for k in range(10)],
            "ports": [{"containerPort": 8000 + i, "name": f"p{i}", "protocol": "TCP"}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8000 + i},
                              "periodSeconds": 10, "failureThreshold": 3},
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True},
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }

    managed = {"f:spec": {"f:containers": {
        f'k:{{"name":"worker-{i:02d}"}}': {
            ".": {}, "f:env": {f'k:{{"name":"SETTING_{j:02d}_WITH_A_LONGER_NAME"}}':
                               {".": {}, "f:name": {}, "f:value": {}} for j in range(40)}}
        for i in range(30)}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "big-trainer-0", "namespace": "ml", "uid": "6f1c2a4e-0b1d-4c37-9a51-2d8e7f3b9c10",
        "labels": {f"label-{k}": "v" * 30 for k in range(20)},
        "annotations": {f"example.com/annotation-{k}": "a" * 200 for k in range(10)},
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                           "fieldsType": "FieldsV1", "fieldsV1": managed}]},
        "spec": {"containers": [container(i) for i in range(30)],
                 "volumes": [{"name": f"vol-{k}", "emptyDir": {}} for k in range(10)]}}
    request = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": operation,
               "namespace": "ml", "userInfo": {"username": "system:serviceaccount:kube-system:"
                                               "job-controller"}, "object": pod}
    if operation == "UPDATE":
        request["oldObject"] = pod
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()


def parse_figures() -> list[dict[str, Any]]:
    """tracemalloc's peak of json.loads beside parse_cost, per shape."""
    size = 1 << 20
    shapes = {
        "large pod review (CREATE)": large_pod_review(),
        "large pod review (UPDATE)": large_pod_review("UPDATE"),
        "[{},{},...]": bomb(size),
        "[[],[],...]": b"[" + b"[]," * (size // 3) + b"[]]",
        '["ab",...]': b"[" + b'"ab",' * (size // 5) + b'"ab"]',
        '[{"a":0},...]': b"[" + b'{"a":0},' * (size // 8) + b'{"a":0}]',
        '[{"a":{}},...]': b"[" + b'{"a":{}},' * (size // 9) + b"{}]",
        "[0.5,...]": b"[" + b"0.5," * (size // 4) + b"0.5]",
        "[1,...]": b"[" + b"1," * (size // 2) + b"1]",
    }
    out = []
    for name, body in shapes.items():
        tracemalloc.start()
        started = time.perf_counter()
        json.loads(body)
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out.append({"shape": name, "bytes": len(body), "parse_peak_mb": round(peak / 1e6, 1),
                    "per_byte": round(peak / len(body), 1),
                    "parse_cost_mb": round(parse_cost(body) / 1e6, 1),
                    "cost_over_peak": round(parse_cost(body) / peak, 2),
                    "ms_traced": round(seconds * 1000, 1)})
    return out


def worktree(ref: str, path: Path) -> Path:
    if not (path / "operator" / "gpu_auditor").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref],
                       check=True, capture_output=True)
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    tls = make_tls(Path(args.workdir) / "tls")
    trees: dict[str, tuple[Path, tuple[str, ...] | None]] = {
        "before": (worktree(args.before_ref, Path(args.before_tree)), None),
        "after": (ROOT, None)}
    if args.aiohttp:
        trees["aiohttp"] = (ROOT, (str(ROOT / "bench" / "webhook_aiohttp.py"),))
    attacks = ["none", *(args.attacks or sorted(ATTACKS))]
    results: dict[str, dict[str, Any]] = {name: {} for name in attacks}
    for name in attacks:
        for label, (tree, program) in trees.items():
            server = Server(tree, tls.cert_file, tls.key_file)
            if program is not None:
                server.program = program
            server.start()
            try:
                target = Target("127.0.0.1", server.port, tls.ca_pem)
                result = measure(server, target, None if name == "none" else name, args.seconds)
            finally:
                server.stop()
            results[name][label] = {**result.good, "rss_peak_mib": result.rss_peak_mib,
                                    "hwm_mib": result.hwm_mib,
                                    "threads_peak": result.threads_peak}
            print(name, label, results[name][label], flush=True)
    return {
        "command": " ".join([".venv/bin/python", "bench/hostile_webhook.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_before": os.getloadavg()},
        "before_ref": args.before_ref, "seconds": args.seconds, "aiohttp": args.aiohttp,
        "chart_limit_mib": CHART_LIMIT_MIB, "attacks": {
            name: ("no attack" if name == "none" else ATTACKS[name].what) for name in attacks},
        "results": results, "parse": parse_figures(),
        "large_pod_review_bytes": {"CREATE": len(large_pod_review()),
                                   "UPDATE": len(large_pod_review("UPDATE"))},
    }


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# The webhook server under hostile clients (issue 26, items 2-3)", "",
        "Command (one run; before and after interleaved, attack by attack):", "",
        f"    {data['command']}", "",
        f"Machine: {data['machine']['cpus']} CPUs shared with other work (load average "
        f"{data['machine']['load_before'][0]:.1f} at the start), Python "
        f"{data['machine']['python']}. Before: `{data['before_ref']}` (http.server, a thread "
        "per connection) from `git worktree add --detach`; after: this tree. Each server a "
        "fresh process per attack, TLS on loopback; the attack from 127.0.0.2 in its own "
        "process; the good client (a fresh TLS connection per admission, 20 a second, "
        f"{data['seconds']:g} s) from 127.0.0.1. The chart's memory limit: "
        f"{data['chart_limit_mib']} MiB."
        + (" aiohttp.web: the same `answer` served by aiohttp (the operator extra's HTTP "
           "server) as bench/webhook_aiohttp.py configures it (3 MiB bodies, the answer in a "
           "thread)." if data.get("aiohttp") else ""), "",
        "| attack | good client p50 / p99 / max ms, errors: before | after | server peak RSS "
        "MiB (VmHWM): before | after | threads: before | after |",
        "|---|---|---|---|---|---|---|",
    ]
    aiohttp = any("aiohttp" in by for by in data["results"].values())
    if aiohttp:
        lines[-2] = lines[-2] + " aiohttp.web: p50 / p99 / max, errors | RSS MiB (VmHWM) |"
        lines[-1] = lines[-1] + "---|---|"
    for name, by in data["results"].items():
        def cell(r: dict[str, Any]) -> str:
            p50, p99 = r["p50_ms"], r["p99_ms"]
            figures = "—" if p50 is None else f"{p50:.1f} / {p99:.1f} / {r['max_ms']:.0f}"
            errors = f", **{r['errors']} of {r['requests']} failed**" if r["errors"] else ""
            return figures + errors
        b, a = by.get("before"), by.get("after")
        if not b or not a:
            continue
        row = (f"| {name}: {data['attacks'][name]} | {cell(b)} | {cell(a)} | "
               f"{b['rss_peak_mib']} ({b['hwm_mib']}) | {a['rss_peak_mib']} "
               f"({a['hwm_mib']}) | {b['threads_peak']} | {a['threads_peak']} |")
        if aiohttp and "aiohttp" in by:
            h = by["aiohttp"]
            row += f" {cell(h)} | {h['rss_peak_mib']} ({h['hwm_mib']}) |"
        lines.append(row)
    review = data["large_pod_review_bytes"]
    lines += ["", f"A large pod's AdmissionReview (30 containers, 42 env entries each, 10 mounts, "
              f"managed fields): {review['CREATE']:,} bytes; an update's (the object twice): "
              f"{review['UPDATE']:,}.", "",
              "What `json.loads` allocates (tracemalloc's peak) per shape, beside "
              "`limits.parse_cost`, the bound the server checks before parsing:", "",
              "| JSON | bytes | peak MB | per byte | parse_cost MB | cost / peak |",
              "|---|---|---|---|---|---|"]
    for row in data["parse"]:
        lines.append(f"| `{row['shape']}` | {row['bytes']:,} | {row['parse_peak_mb']} | "
                     f"{row['per_byte']} | {row['parse_cost_mb']} | {row['cost_over_peak']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--attacks", nargs="*", choices=sorted(ATTACKS))
    parser.add_argument("--before-ref", default=BEFORE_REF)
    parser.add_argument("--before-tree", default="/tmp/webhook-before")
    parser.add_argument("--workdir", default="/tmp/hostile-webhook")
    parser.add_argument("--aiohttp", action="store_true",
                        help="also aiohttp.web serving the same answer (bench/webhook_aiohttp.py)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    data = run(args)
    text = markdown(data)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(data, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
