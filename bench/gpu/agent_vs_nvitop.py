#!/usr/bin/env python3
"""gpu-auditor-agent vs nvitop-exporter on a real GPU: /metrics scrape latency, RSS, CPU.

Starts N live torch processes holding GPU memory, then our agent
(``python3 -m node_agent.cli --proc-root /proc --port P --bind-address 127.0.0.1 --no-report
--node-name h200``, PYTHONPATH=.:operator) and nvitop-exporter
(``python3 -m nvitop_exporter --bind-address 127.0.0.1 --port P``) side by side, scrapes each
``--scrapes`` times (interleaved, after a warm-up), and records p50/p90/p99/max latency, body
size, RSS (VmRSS, VmHWM) and CPU use while idle and while scraped. Also checks the agent's
per-process bytes (``--once --process-labels``) against NVML and nvidia-smi.

    python3 bench/gpu/agent_vs_nvitop.py --out-json a.json --out-md a.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HOLDER = HERE / "scenarios" / "_holder.py"
CLK = os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> dict:
    out = {}
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith(("VmRSS:", "VmHWM:")):
                k, v = ln.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK
    except (OSError, IndexError, ValueError):
        return float("nan")


def get(url: str, timeout: float = 10.0) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read()
    return time.perf_counter() - t0, body


def wait_ready(url: str, proc: subprocess.Popen, limit: float = 90.0) -> float | None:
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            return None
        try:
            get(url, 2.0)
            return time.time() - t0
        except Exception:
            time.sleep(0.25)
    return None


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def nvml_truth() -> dict:
    import pynvml

    pynvml.nvmlInit()
    res = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            res[p.pid] = {"gpu": i, "bytes": p.usedGpuMemory}
    pynvml.nvmlShutdown()
    return res


def smi_truth() -> dict:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    res = {}
    for ln in out.splitlines():
        if ln.strip():
            pid, mib = [x.strip() for x in ln.split(",")]
            res[int(pid)] = int(mib) * 1024 * 1024
    return res


def parse_agent(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    per_pid, series, total = {}, 0, 0.0
    names = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series += 1
            names.add(s.name)
            if s.name == "gpu_auditor_process_gpu_memory_bytes":
                total += s.value
                if "pid" in s.labels:
                    per_pid[int(s.labels["pid"])] = s.value
    return {
        "series": series,
        "process_bytes_sum": total,
        "per_pid": per_pid,
        "metric_names": sorted(names),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--agent-port", type=int, default=19401)
    ap.add_argument("--nvitop-port", type=int, default=19402)
    ap.add_argument("--idle-s", type=float, default=10.0)
    a = ap.parse_args()

    res: dict = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scrapes": a.scrapes,
        "procs": a.procs,
    }
    res["gpu"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    holders: list[subprocess.Popen] = []
    servers: dict[str, subprocess.Popen] = {}
    try:
        for i in range(a.procs):
            h = subprocess.Popen(
                [sys.executable, str(HOLDER), "--gib", str(2 + i), "--touch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            line = h.stdout.readline()
            if not line.startswith("READY"):
                raise SystemExit(f"holder {i} failed: {line!r}")
            holders.append(h)
        res["holder_pids"] = [h.pid for h in holders]
        res["nvml"] = {str(k): v for k, v in nvml_truth().items()}
        res["nvidia_smi"] = {str(k): v for k, v in smi_truth().items()}

        env_agent = dict(os.environ)
        env_agent["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(REPO / "operator"), os.environ.get("PYTHONPATH", "")]
        )
        agent_cmd = [
            sys.executable,
            "-m",
            "node_agent.cli",
            "--proc-root",
            "/proc",
            "--bind-address",
            "127.0.0.1",
            "--no-report",
            "--node-name",
            "h200",
        ]
        res["agent_env_versions"] = subprocess.run(
            [
                sys.executable,
                "-c",
                "import grpc, google.protobuf as pb, prometheus_client as pc;"
                "print('grpcio', grpc.__version__, 'protobuf', pb.__version__)",
            ],
            env=env_agent,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        # one-shot, with pid labels: per-process bytes vs NVML / nvidia-smi
        t0 = time.perf_counter()
        once = subprocess.run(
            [*agent_cmd, "--once", "--process-labels"],
            env=env_agent,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        res["agent_once"] = {
            "rc": once.returncode,
            "wall_s": round(time.perf_counter() - t0, 3),
            "stderr_tail": once.stderr.splitlines()[-10:],
        }
        if once.returncode == 0:
            parsed = parse_agent(once.stdout)
            res["agent_once"].update({k: parsed[k] for k in ("series", "metric_names")})
            cmp_rows = []
            nv, smi = nvml_truth(), smi_truth()
            for h in holders:
                cmp_rows.append(
                    {
                        "pid": h.pid,
                        "agent": parsed["per_pid"].get(h.pid),
                        "nvml": (nv.get(h.pid) or {}).get("bytes"),
                        "nvidia_smi": smi.get(h.pid),
                    }
                )
            for r in cmp_rows:
                r["agent_eq_nvml"] = r["agent"] is not None and r["agent"] == r["nvml"]
                r["agent_eq_smi_mib"] = (
                    r["agent"] is not None
                    and r["nvidia_smi"] is not None
                    and int(r["agent"]) // 2**20 == r["nvidia_smi"] // 2**20
                )
            res["per_process_check"] = cmp_rows
            res["agent_once"]["exposition_head"] = once.stdout[:3000]

        errs = {n: open(f"/tmp/{n}.stderr", "w") for n in ("agent", "nvitop-exporter")}  # noqa: SIM115
        servers["agent"] = subprocess.Popen(
            [*agent_cmd, "--port", str(a.agent_port)],
            env=env_agent,
            stdout=subprocess.DEVNULL,
            stderr=errs["agent"],
            text=True,
            cwd=REPO,
        )
        servers["nvitop-exporter"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nvitop_exporter",
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(a.nvitop_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=errs["nvitop-exporter"],
            text=True,
        )
        urls = {
            "agent": f"http://127.0.0.1:{a.agent_port}/metrics",
            "nvitop-exporter": f"http://127.0.0.1:{a.nvitop_port}/metrics",
        }
        ready = {}
        for name, p in servers.items():
            ready[name] = wait_ready(urls[name], p)
        res["ready_s"] = ready
        live = [n for n in servers if ready[n] is not None]
        for n in servers:
            if ready[n] is None:
                p = servers[n]
                p.kill()
                res.setdefault("failed", {})[n] = Path(f"/tmp/{n}.stderr").read_text()[-3000:]
        # idle CPU (both at their default sampling intervals)
        c0 = {n: cpu_s(servers[n].pid) for n in live}
        time.sleep(a.idle_s)
        idle_cpu = {n: (cpu_s(servers[n].pid) - c0[n]) / a.idle_s * 100 for n in live}
        for n in live:
            for _ in range(10):
                get(urls[n])
        lat: dict[str, list[float]] = {n: [] for n in live}
        size: dict[str, int] = {}
        c1 = {n: cpu_s(servers[n].pid) for n in live}
        t_scr = {n: 0.0 for n in live}
        for _ in range(a.scrapes):
            for n in live:
                dt, body = get(urls[n])
                lat[n].append(dt)
                t_scr[n] += dt
                size[n] = len(body)
        last_body = {n: get(urls[n])[1].decode() for n in live}
        out = {}
        for n in live:
            xs = lat[n]
            out[n] = {
                "p50_ms": round(pct(xs, 0.5) * 1e3, 3),
                "p90_ms": round(pct(xs, 0.9) * 1e3, 3),
                "p99_ms": round(pct(xs, 0.99) * 1e3, 3),
                "max_ms": round(max(xs) * 1e3, 3),
                "mean_ms": round(statistics.mean(xs) * 1e3, 3),
                "body_bytes": size[n],
                "rss_bytes": rss(servers[n].pid).get("VmRSS"),
                "rss_peak_bytes": rss(servers[n].pid).get("VmHWM"),
                "cpu_idle_pct_core": round(idle_cpu[n], 2),
                "cpu_ms_per_scrape": round((cpu_s(servers[n].pid) - c1[n]) / a.scrapes * 1e3, 3),
                "ready_s": round(ready[n], 2),
            }
        if "agent" in live:
            out["agent"]["series"] = parse_agent(last_body["agent"])["series"]
            out["agent"]["process_bytes_sum"] = parse_agent(last_body["agent"])["process_bytes_sum"]
        if "nvitop-exporter" in live:
            out["nvitop-exporter"]["series"] = sum(
                1
                for ln in last_body["nvitop-exporter"].splitlines()
                if ln and not ln.startswith("#")
            )
        res["results"] = out
        res["server_stderr_tail"] = {
            n: Path(f"/tmp/{n}.stderr").read_text().splitlines()[-8:] for n in servers
        }
        res["nvml_sum_holders"] = sum(
            (v.get("bytes") or 0) for k, v in res["nvml"].items() if int(k) in res["holder_pids"]
        )
    finally:
        for p in servers.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for h in holders:
            try:
                h.stdin.close()
                h.wait(20)
            except Exception:
                h.kill()
    Path(a.out_json).write_text(json.dumps(res, indent=1))
    lines = [
        "# gpu-auditor-agent vs nvitop-exporter on a real H200",
        "",
        f"GPU: {res['gpu']}. {a.procs} live torch processes holding 2..{a.procs + 1} GiB each. "
        f"{a.scrapes} scrapes of `/metrics` per exporter, interleaved, after 10 warm-up scrapes, "
        "from a Python urllib client on the same machine. Generated by "
        "`bench/gpu/agent_vs_nvitop.py` at " + res["generated"] + ".",
        "",
        "| exporter | p50 ms | p90 ms | p99 ms | max ms | body bytes | series | RSS MiB | "
        "peak RSS MiB | idle CPU % of a core | CPU ms per scrape |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in res.get("results", {}).items():
        lines.append(
            f"| {n} | {r['p50_ms']} | {r['p90_ms']} | {r['p99_ms']} | {r['max_ms']} | "
            f"{r['body_bytes']} | {r.get('series')} | "
            f"{(r['rss_bytes'] or 0) / 2**20:.1f} | {(r['rss_peak_bytes'] or 0) / 2**20:.1f} | "
            f"{r['cpu_idle_pct_core']} | {r['cpu_ms_per_scrape']} |"
        )
    if res.get("per_process_check"):
        lines += [
            "",
            "Per-process bytes, agent `--once --process-labels` vs NVML vs nvidia-smi:",
            "",
            "| pid | agent | NVML | nvidia-smi (MiB) | agent == NVML |",
            "|---|---|---|---|---|",
        ]
        for r in res["per_process_check"]:
            lines.append(
                f"| {r['pid']} | {r['agent']} | {r['nvml']} | "
                f"{(r['nvidia_smi'] or 0) // 2**20} | {r['agent_eq_nvml']} |"
            )
    if res.get("failed"):
        lines += ["", "Failed to start: " + ", ".join(res["failed"])]
    Path(a.out_md).write_text("\n".join(lines) + "\n")
    print(json.dumps(res.get("results"), indent=1))
    print(json.dumps(res.get("per_process_check"), indent=1))
    if res.get("failed"):
        print("FAILED:", json.dumps(res["failed"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
