#!/usr/bin/env python3
"""The agent's NVML binding (``node_agent.nvml_lite``) against nvidia-ml-py's ``pynvml`` on a
real GPU, with live torch processes: same value for every call, and what each costs in RSS.

1. starts ``--procs`` (12) torch processes holding 1..3 GiB each (``scenarios/_holder.py``);
2. **identity**: in one fresh interpreter, every call the agent makes, on every GPU and MIG
   instance, through both bindings, call after call (nvmlDeviceGetCount, HandleByIndex, UUID,
   Name, MemoryInfo v1 and v2, MigMode, MaxMigDeviceCount, MigDeviceHandleByIndex,
   GpuInstanceId, Compute and MPS running processes), then ``NvmlSource(...).sample()``
   through each: every difference is listed;
3. **RSS floor**: a fresh interpreter per binding, VmRSS bare, after the import, after
   ``nvmlInit()``, after every query of every GPU, after ``malloc_trim(0)``;
4. the agent's default source (``NvmlSource()``) in a fresh interpreter: which binding it used
   and whether ``pynvml`` was imported at all;
5. one full ``NvmlSource.sample()`` pass through each binding, timed (20 passes, median).

Needs torch (for the holders) and nvidia-ml-py; PYTHONPATH=.:operator. Well under 60 s.

    PYTHONPATH=.:operator python3 bench/gpu/nvml_lite_check.py \\
        --out-json bench/results/gpu-nvml-lite.json --out-md bench/results/gpu-nvml-lite.md

``--procs 0`` runs it without torch (e.g. against a fake libnvidia-ml via LD_LIBRARY_PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HOLDER = HERE / "scenarios" / "_holder.py"
MIB = 2**20

_RSS = r"""
import ctypes, json, sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) * 1024
binding = sys.argv[1]
rows = [['bare interpreter', rss()]]
if binding == 'pynvml':
    import pynvml as m
    rows.append(['import pynvml', rss()])
else:
    from node_agent import nvml_lite as m
    rows.append(['import node_agent.nvml_lite', rss()])
m.nvmlInit()
rows.append(['nvmlInit()', rss()])
for i in range(m.nvmlDeviceGetCount()):
    h = m.nvmlDeviceGetHandleByIndex(i)
    for f, kw in ((m.nvmlDeviceGetUUID, {}), (m.nvmlDeviceGetName, {}),
                  (m.nvmlDeviceGetMemoryInfo, {'version': m.nvmlMemory_v2}),
                  (m.nvmlDeviceGetComputeRunningProcesses, {}),
                  (m.nvmlDeviceGetMPSComputeRunningProcesses, {})):
        try:
            f(h, **kw)
        except m.NVMLError:
            pass
rows.append(['every GPU: uuid, name, memory, processes', rss()])
try:
    ctypes.CDLL('libc.so.6').malloc_trim(0)
    rows.append(['malloc_trim(0)', rss()])
except OSError:
    pass
print(json.dumps(rows))
"""

_DEFAULT = r"""
import json, sys
from node_agent.nvml_source import NvmlSource
source = NvmlSource()
r = source.sample()
print(json.dumps({'binding': source.binding, 'up': r.up, 'gpus': len(r.gpus),
                  'errors': r.errors, 'pynvml_imported': 'pynvml' in sys.modules,
                  'modules': sorted({m.split('.')[0] for m in sys.modules} &
                                    {'pynvml', 'grpc', 'google', 'prometheus_client', 'yaml'})}))
"""

_COMPARE = r"""
import dataclasses, json, statistics, time
import pynvml
from node_agent import nvml_lite
from node_agent.nvml_source import NvmlSource
B = {'lite': nvml_lite, 'pynvml': pynvml}
diffs, calls = [], 0

def norm(v):
    if v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if hasattr(v, '_fields_'):
        return {f[0]: getattr(v, f[0]) for f in v._fields_}
    return {k: getattr(v, k, None) for k in ('pid', 'usedGpuMemory', 'gpuInstanceId',
                                             'computeInstanceId')}

def both(where, name, handles=(), *args, **kw):
    # the same call through both bindings, one right after the other
    global calls
    out = {}
    for b, m in B.items():
        try:
            out[b] = ['ok', norm(getattr(m, name)(*[h[b] for h in handles], *args, **kw))]
        except Exception as err:
            out[b] = ['err', type(err).__name__]
    calls += 1
    if out['lite'] != out['pynvml']:
        diffs.append({'where': where, 'call': name, **out})
    return out['lite']

def raw(name, handles, *args):
    out = {}
    for b, m in B.items():
        try:
            out[b] = getattr(m, name)(*[h[b] for h in handles], *args)
        except Exception as err:
            out[b] = err
    return out

def device(where, h):
    uuid = both(where, 'nvmlDeviceGetUUID', (h,))
    both(where, 'nvmlDeviceGetName', (h,))
    both(where, 'nvmlDeviceGetMemoryInfo', (h,))
    v2 = {}  # version= is each binding's own constant
    for b, m in B.items():
        try:
            v2[b] = ['ok', norm(m.nvmlDeviceGetMemoryInfo(h[b], version=m.nvmlMemory_v2))]
        except Exception as err:
            v2[b] = ['err', type(err).__name__]
    if v2['lite'] != v2['pynvml']:
        diffs.append({'where': where, 'call': 'nvmlDeviceGetMemoryInfo(version=v2)', **v2})
    global calls
    calls += 1
    both(where, 'nvmlDeviceGetGpuInstanceId', (h,))
    procs = both(where, 'nvmlDeviceGetComputeRunningProcesses', (h,))
    mps = both(where, 'nvmlDeviceGetMPSComputeRunningProcesses', (h,))
    return {'uuid': uuid, 'memory_v2': v2['lite'], 'compute': procs, 'mps': mps}

for m in B.values():
    m.nvmlInit()
count = both('node', 'nvmlDeviceGetCount')
devices = []
for i in range(count[1] if count[0] == 'ok' else 0):
    h = raw('nvmlDeviceGetHandleByIndex', (), i)
    d = device(f'gpu {i}', h)
    mode = both(f'gpu {i}', 'nvmlDeviceGetMigMode', (h,))
    d['mig_mode'] = mode
    if mode[0] == 'ok' and mode[1][0] == 1:
        n = both(f'gpu {i}', 'nvmlDeviceGetMaxMigDeviceCount', (h,))
        d['migs'] = []
        for j in range(n[1] if n[0] == 'ok' else 0):
            mh = raw('nvmlDeviceGetMigDeviceHandleByIndex', (h,), j)
            kinds = {b: type(v).__name__ for b, v in mh.items()}
            if any(isinstance(v, Exception) for v in mh.values()):
                calls += 1
                if kinds['lite'] != kinds['pynvml']:
                    diffs.append({'where': f'gpu {i} mig {j}',
                                  'call': 'nvmlDeviceGetMigDeviceHandleByIndex', **kinds})
                continue
            d['migs'].append(device(f'gpu {i} mig {j}', mh))
    devices.append(d)

readings, pass_ms = {}, {}
for b, m in B.items():
    source = NvmlSource(m)
    readings[b] = dataclasses.asdict(source.sample())
    ts = []
    for _ in range(20):
        t0 = time.perf_counter(); source.sample(); ts.append(time.perf_counter() - t0)
    pass_ms[b] = round(statistics.median(ts) * 1e3, 3)
print(json.dumps({'calls_compared': calls, 'differences': diffs, 'devices': devices,
                  'readings_equal': readings['lite'] == readings['pynvml'],
                  'reading_lite': readings['lite'], 'reading_pynvml': readings['pynvml'],
                  'pass_ms_median': pass_ms}))
"""


def py_json(code: str, env: dict[str, str], *args: str) -> object:
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.splitlines()[-1])


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "operator"), os.environ.get("PYTHONPATH", "")])
    return env


def rss_floor(env: dict[str, str]) -> dict[str, object]:
    """VmRSS steps per binding, each in a fresh interpreter."""
    return {b: py_json(_RSS, env, b) for b in ("pynvml", "lite")}


def compare(env: dict[str, str]) -> object:
    """Every call through both bindings; the default source's binding and imports."""
    out = py_json(_COMPARE, env)
    if isinstance(out, dict):
        out["default_source"] = py_json(_DEFAULT, env)
    return out


def floor_markdown(floor: dict[str, object]) -> list[str]:
    lines = ["| binding | step | RSS MiB | + MiB |", "|---|---|---|---|"]
    for b, rows in floor.items():
        if not isinstance(rows, list):
            lines.append(f"| {b} | failed: {str(rows)[:300]!r} | | |")
            continue
        prev = None
        for step, rss in rows:
            lines.append(f"| {b} | {step} | {rss / MIB:.1f} | "
                         f"{'' if prev is None else f'{(rss - prev) / MIB:+.1f}'} |")
            prev = rss
    return lines


def compare_markdown(cmp: object) -> list[str]:
    if not isinstance(cmp, dict) or "calls_compared" not in cmp:
        return [f"Comparison failed: {str(cmp)[:1500]!r}"]
    lines = [f"Calls compared (lite vs pynvml, one after the other): {cmp['calls_compared']}; "
             f"differences: {len(cmp['differences'])}; `NvmlSource.sample()` readings equal: "
             f"{cmp['readings_equal']}; median full pass ms: {cmp['pass_ms_median']}.",
             f"Default source: {cmp.get('default_source')}.", ""]
    for d in cmp["differences"][:20]:
        lines.append(f"- difference: {json.dumps(d)[:400]}")
    reading = cmp.get("reading_lite") or {}
    lines += ["", "| gpu | uuid | total | used | free | reserved | processes (pid: bytes) |",
              "|---|---|---|---|---|---|---|"]
    for g in reading.get("gpus", []):
        procs = ", ".join(f"{p['pid']}: {p['used_bytes']}" for p in g["processes"])
        lines.append(f"| {g['gpu']} | {g['uuid']} | {g['total_bytes']} | {g['used_bytes']} | "
                     f"{g['free_bytes']} | {g['reserved_bytes']} | {procs} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--procs", type=int, default=12)
    a = ap.parse_args()
    t0 = time.monotonic()
    env = agent_env()
    res: dict = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "procs": a.procs, "python": sys.version.split()[0],
                 "command": " ".join([Path(sys.executable).name, *sys.argv])}
    res["gpu"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True).stdout.strip() if a.procs else "(no holders)"
    holders: list[subprocess.Popen] = []
    try:
        for i in range(a.procs):
            holders.append(subprocess.Popen(
                [sys.executable, str(HOLDER), "--gib", str(1 + i % 3), "--touch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for i, h in enumerate(holders):
            line = h.stdout.readline() if h.stdout else ""
            if not line.startswith("READY"):
                raise SystemExit(f"holder {i} failed: {line!r}")
        res["holder_pids"] = [h.pid for h in holders]
        res["compare"] = compare(env)
        res["rss_floor"] = rss_floor(env)
    finally:
        for h in holders:
            try:
                if h.stdin:
                    h.stdin.close()
                h.wait(20)
            except Exception:
                h.kill()
    cmp = res["compare"]
    seen = set()
    if isinstance(cmp, dict):
        for g in (cmp.get("reading_lite") or {}).get("gpus", []):
            seen |= {p["pid"] for p in g["processes"]}
        res["holders_seen_by_lite"] = sum(pid in seen for pid in res["holder_pids"])
        res["verdict"] = {
            "identical": not cmp["differences"] and cmp["readings_equal"],
            "holders_seen": f"{res['holders_seen_by_lite']}/{a.procs}",
            "default_binding": (cmp.get("default_source") or {}).get("binding"),
            "pynvml_imported_by_default": (cmp.get("default_source") or {}).get(
                "pynvml_imported"),
        }
    res["wall_s"] = round(time.monotonic() - t0, 1)
    Path(a.out_json).write_text(json.dumps(res, indent=1))
    md = ["# node_agent.nvml_lite vs pynvml on a real GPU", "",
          f"GPU: {res['gpu']}. Python {res['python']}. {a.procs} live torch processes holding "
          f"1..3 GiB each. Generated by `bench/gpu/nvml_lite_check.py` at {res['generated']} "
          f"in {res['wall_s']} s (`{res['command']}`).", "",
          f"Verdict: {json.dumps(res.get('verdict'))}", "", *compare_markdown(cmp), "",
          "RSS floor (a fresh interpreter per binding, VmRSS):", "",
          *floor_markdown(res["rss_floor"])]
    Path(a.out_md).write_text("\n".join(md) + "\n")
    print(json.dumps({k: res.get(k) for k in ("verdict", "rss_floor", "wall_s")}, indent=1))
    return 0 if (res.get("verdict") or {}).get("identical") else 1


if __name__ == "__main__":
    sys.exit(main())
