#!/usr/bin/env python3
"""Can the node agent drop ``hostPID``? NVML and the agent's collection path in a new PID namespace.

The chart runs the agent with ``hostPID: true`` so that NVML's pids are pids of the agent's
``/proc``. Without it, the host's ``/proc`` could be mounted read-only at another path and
passed as ``--proc-root``, *if* NVML still lists the GPU processes (with host pids) to a caller
in another PID namespace. Current drivers are said to list only processes visible in the
caller's namespace. This script finds out on a real GPU:

1. starts ``--holders`` torch processes holding ``--gib`` GiB each
   (``evaluation/gpu/scenarios/_holder.py``);
2. runs a child that lists NVML's processes (raw ``nvmlDeviceGetComputeRunningProcesses``) and
   runs the agent's own collection path (``NvmlSource`` + ``ProcReader(--proc-root)`` +
   ``Sampler``; as root also ``python -m node_agent --once --process-labels``), in each of:

   - ``host-pidns-root``: this namespace, ``/proc`` (the baseline, what hostPID gives);
   - ``host-pidns-uid65534``: the same after dropping to uid/gid 65534 (a non-root agent);
   - ``new-pidns-root-bind``: ``unshare --pid --fork --mount``, the original ``/proc`` bind-
     mounted read-only at a temp path, a fresh ``/proc`` mounted for the new namespace: the
     chart's "hostPath /proc at /host/proc, no hostPID" layout;
   - ``new-pidns-uid65534-bind``: the same, non-root;
   - ``new-pidns-root-fd``: ``unshare --pid --fork --mount-proc``, the original ``/proc`` reached
     through an inherited directory fd (``/proc/self/fd/N``): works where ``mount`` does not;
   - ``new-userns-pidns-fd``: the same inside a new user namespace (when root cannot unshare);

3. writes one JSON: per run, what NVML listed, which holder pids it found, whether the agent read
   each holder's ``/proc`` entry through ``--proc-root`` (start time and cgroup equal to what
   the parent saw), and a verdict.

Needs python3 with torch and nvidia-ml-py (pynvml), run as root from the repository root; no
network; about 30 s. ``--fake-nvml`` checks the namespace plumbing without a GPU (sleep
processes stand for the holders; a fake NVML returns their host pids like an old driver).

    python3 bench/gpu/hostpid_check.py --out /tmp/hostpid-check.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HOLDER = REPO / "evaluation" / "gpu" / "scenarios" / "_holder.py"
NOBODY = 65534
sys.path.insert(0, str(REPO))


# ---- a fake NVML for --fake-nvml (an "old driver": host pids in every namespace) ----------


class _FakeNvmlError(Exception):
    pass


def fake_nvml(pids: list[int]) -> Any:
    def procs(handle: Any) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in pids]

    def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:
        return procs(handle)

    def nvmlDeviceGetMPSComputeRunningProcesses(handle: Any) -> list[Any]:
        return []

    def mig_mode(handle: Any) -> Any:
        raise _FakeNvmlError("NotSupported")

    return SimpleNamespace(
        NVMLError=_FakeNvmlError, NVML_DEVICE_MIG_ENABLE=1, nvmlMemory_v2=2,
        nvmlInit=lambda: None, nvmlSystemGetDriverVersion=lambda: "fake",
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: "GPU-fake", nvmlDeviceGetName=lambda h: "Fake GPU",
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetMemoryInfo=lambda h, version=None: SimpleNamespace(
            total=2**34, used=2**32, free=2**33, reserved=0),
        nvmlDeviceGetComputeRunningProcesses=nvmlDeviceGetComputeRunningProcesses,
        nvmlDeviceGetMPSComputeRunningProcesses=nvmlDeviceGetMPSComputeRunningProcesses,
    )


# ---- the child: NVML and the agent's collection path, in whatever namespace it was put ------


def child(a: argparse.Namespace) -> int:
    out = open(a.result, "w")  # opened before any privilege drop  # noqa: SIM115
    result: dict[str, Any] = {"pid_in_namespace": os.getpid(), "ok": False}
    try:
        holders = {int(k): v for k, v in json.loads(Path(a.holders_file).read_text()).items()}
        proc_root = a.proc_root if a.proc_root_fd is None else f"/proc/self/fd/{a.proc_root_fd}"
        result["proc_root"] = proc_root
        # Import everything while the repository is still readable (root), then drop.
        from node_agent.nvml_source import NvmlSource
        from node_agent.pods import NoPods
        from node_agent.procfs import ProcReader, parse_start_time, read_bounded
        from node_agent.sampler import Sampler

        nvml: Any = fake_nvml(list(holders)) if a.fake_nvml else __import__("pynvml")
        if a.drop_to is not None:
            os.setgroups([])
            os.setgid(a.drop_to)
            os.setuid(a.drop_to)
        result["uid"] = os.geteuid()
        own = [d for d in os.listdir("/proc") if d.isdigit()]
        result["own_proc_pid_count"] = len(own)

        nvml.nvmlInit()
        driver = nvml.nvmlSystemGetDriverVersion()
        result["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        raw = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            raw.append({"index": i, "processes": [[int(p.pid), p.usedGpuMemory] for p in listed]})
        result["nvml_raw"] = raw
        nvml_pids = {p for g in raw for p, _ in g["processes"]}

        reader = ProcReader(proc_root)
        snapshot = Sampler("hostpid-check", NvmlSource(nvml), reader, NoPods()).sample()
        result["agent"] = [
            {"gpu": u.gpu.gpu, "pid": p.pid, "used_bytes": p.used_bytes, "comm": p.comm,
             "allocated": p.allocated.value, "pod_uid": p.pod.pod_uid if p.pod else ""}
            for u in snapshot.gpus for p in u.processes]
        result["agent_proc_errors"] = snapshot.errors.get("proc", 0)

        per_holder = {}
        for pid, seen in holders.items():
            info = reader.read(pid)
            cgroup = None
            try:
                cgroup = read_bounded(f"{proc_root}/{pid}/cgroup", 65536).decode(errors="replace")
                start = parse_start_time(read_bounded(f"{proc_root}/{pid}/stat", 4096))
            except (OSError, ValueError, IndexError) as err:
                start, cgroup = None, f"unreadable: {err}"
            per_holder[str(pid)] = {
                "listed_by_nvml": pid in nvml_pids,
                "read_through_proc_root": info is not None,
                "start_time_matches": start == seen["start_time"],
                "cgroup_matches": cgroup == seen["cgroup"],
                "comm": info.comm if info else None,
                "visible_in_own_proc": os.path.exists(f"/proc/{pid}/stat")
                and _start_time_or_none(f"/proc/{pid}/stat") == seen["start_time"],
            }
        result["holders"] = per_holder
        if a.cli and a.drop_to is None and not a.fake_nvml:
            result["cli"] = run_cli(proc_root, set(holders))
        result["ok"] = True
    except Exception as err:  # report, do not die: the parent collects every run
        result["error"] = f"{type(err).__name__}: {err}"
    json.dump(result, out)
    out.close()
    return 0


def _start_time_or_none(path: str) -> int | None:
    from node_agent.procfs import parse_start_time

    try:
        return parse_start_time(Path(path).read_bytes())
    except (OSError, ValueError, IndexError):
        return None


def run_cli(proc_root: str, holders: set[int]) -> dict[str, Any]:
    """The agent as deployed: ``--once --process-labels --proc-root``; its process series."""
    argv = [sys.executable, "-m", "node_agent", "--once", "--process-labels", "--no-report",
            "--proc-root", proc_root, "--node-name", "hostpid-check",
            "--pod-resources-socket", "/nonexistent/kubelet.sock", "--log-level", "ERROR"]
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=30,
                           pass_fds=_inherited_fds(proc_root), env=env)
    except subprocess.TimeoutExpired:
        return {"rc": None, "error": "timed out after 30 s"}
    series = [line for line in r.stdout.splitlines()
              if line.startswith("gpu_auditor_process_gpu_memory_bytes{")]
    pids = set()
    for line in series:
        if 'pid="' in line:
            pids.add(int(line.split('pid="', 1)[1].split('"', 1)[0]))
    return {"rc": r.returncode, "series": len(series), "holder_pids_in_series":
            sorted(pids & holders), "series_lines": series[:8], "stderr": r.stderr[-800:]}


def _inherited_fds(proc_root: str) -> tuple[int, ...]:
    if proc_root.startswith("/proc/self/fd/"):
        return (int(proc_root.rsplit("/", 1)[1]),)
    return ()


# ---- the parent: holders, the runs, the verdict ---------------------------------------------


def start_holders(n: int, gib: float, fake: bool, deadline: float) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        argv = (["sleep", "300"] if fake else
                [sys.executable, str(HOLDER), "--gib", str(gib + 0.25 * i)])
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    if not fake:
        for p in procs:
            while True:
                if time.monotonic() > deadline:
                    raise RuntimeError("holders not READY in time")
                line = p.stdout.readline() if p.stdout else ""
                if line.startswith("READY"):
                    break
                if not line and p.poll() is not None:
                    err = p.stderr.read()[-800:] if p.stderr else ""
                    raise RuntimeError(f"holder exited {p.returncode}: {err}")
    return procs


def describe(pid: int) -> dict[str, Any]:
    from node_agent.procfs import parse_start_time

    base = Path(f"/proc/{pid}")
    return {"start_time": parse_start_time((base / "stat").read_bytes()),
            "cgroup": (base / "cgroup").read_bytes().decode(errors="replace"),
            "comm": (base / "comm").read_text().strip()}


def runs(hostproc: str) -> list[tuple[str, list[str], dict[str, Any]]]:
    """(name, command prefix, child options). The bind runs mount inside their own private
    mount namespace, so nothing is mounted on this machine's."""
    bind = ['sh', '-c', 'mount --bind /proc "$0" && mount -o remount,bind,ro "$0" && '
            'mount -t proc proc /proc && exec "$@"', hostproc]
    return [
        ("host-pidns-root", [], {"proc_root": "/proc"}),
        ("host-pidns-uid65534", [], {"proc_root": "/proc", "drop_to": NOBODY}),
        ("new-pidns-root-bind", ["unshare", "--pid", "--fork", "--mount", *bind],
         {"proc_root": hostproc}),
        ("new-pidns-uid65534-bind", ["unshare", "--pid", "--fork", "--mount", *bind],
         {"proc_root": hostproc, "drop_to": NOBODY}),
        ("new-pidns-root-fd", ["unshare", "--pid", "--fork", "--mount-proc"],
         {"proc_root_fd": True}),
        ("new-userns-pidns-fd", ["unshare", "--user", "--map-root-user", "--pid", "--fork",
                                 "--mount-proc"], {"proc_root_fd": True}),
    ]


def run_child(name: str, prefix: list[str], opts: dict[str, Any], holders_file: Path,
              fake: bool, work: Path, timeout: float) -> dict[str, Any]:
    if prefix and shutil.which(prefix[0]) is None:
        return {"name": name, "ran": False, "error": f"{prefix[0]} not found"}
    result_file = work / f"{name}.json"
    argv = [*prefix, sys.executable, str(Path(__file__).resolve()), "--child",
            "--holders-file", str(holders_file), "--result", str(result_file), "--cli"]
    fds: tuple[int, ...] = ()
    if opts.get("proc_root_fd"):
        fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
        fds = (fd,)
        argv += ["--proc-root-fd", str(fd)]
    else:
        argv += ["--proc-root", opts["proc_root"]]
    if opts.get("drop_to") is not None:
        argv += ["--drop-to", str(opts["drop_to"])]
    if fake:
        argv.append("--fake-nvml")
    started = time.monotonic()
    try:
        r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                           pass_fds=fds, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        return {"name": name, "ran": False, "error": f"timed out after {timeout:.0f} s"}
    finally:
        for fd in fds:
            os.close(fd)
    out: dict[str, Any] = {"name": name, "ran": r.returncode == 0 and result_file.exists(),
                           "rc": r.returncode, "seconds": round(time.monotonic() - started, 2)}
    if result_file.exists() and result_file.stat().st_size:
        out.update(json.loads(result_file.read_text()))
    if r.returncode != 0 or not out.get("ok"):
        out["stderr"] = (r.stderr or "")[-1200:]
    return out


def verdict(results: dict[str, dict[str, Any]], holder_pids: list[int]) -> dict[str, Any]:
    def found(name: str) -> dict[str, Any]:
        run = results.get(name, {})
        holders = run.get("holders") or {}
        listed = [p for p in holder_pids if holders.get(str(p), {}).get("listed_by_nvml")]
        mapped = [p for p in holder_pids
                  if holders.get(str(p), {}).get("read_through_proc_root")
                  and holders.get(str(p), {}).get("start_time_matches")
                  and holders.get(str(p), {}).get("cgroup_matches")]
        return {"ran": bool(run.get("ok")), "nvml_listed": len(listed),
                "agent_mapped": len(mapped), "of": len(holder_pids),
                "nvml_process_count": sum(len(g["processes"])
                                          for g in run.get("nvml_raw") or [])}

    v = {name: found(name) for name in results}
    new_ns = [n for n in ("new-pidns-root-bind", "new-pidns-root-fd", "new-userns-pidns-fd")
              if v.get(n, {}).get("ran")]
    v["summary"] = {
        "a_new_pid_namespace_could_be_tested": bool(new_ns),
        "nvml_lists_host_pids_in_a_new_pid_namespace": any(
            v[n]["nvml_listed"] == len(holder_pids) for n in new_ns) if new_ns else None,
        "agent_maps_them_through_proc_root": any(
            v[n]["agent_mapped"] == len(holder_pids) and v[n]["nvml_listed"] == len(holder_pids)
            for n in new_ns) if new_ns else None,
        "non_root_nvml_lists_them": v.get("host-pidns-uid65534", {}).get("nvml_listed")
        == len(holder_pids) if v.get("host-pidns-uid65534", {}).get("ran") else None,
        "non_root_reads_their_proc": v.get("host-pidns-uid65534", {}).get("agent_mapped")
        == len(holder_pids) if v.get("host-pidns-uid65534", {}).get("ran") else None,
    }
    s = v["summary"]
    s["hostPID_can_be_dropped"] = bool(s["nvml_lists_host_pids_in_a_new_pid_namespace"]
                                       and s["agent_maps_them_through_proc_root"])
    return v


def parent(a: argparse.Namespace) -> dict[str, Any]:
    deadline = time.monotonic() + a.deadline
    work = Path(tempfile.mkdtemp(prefix="hostpid-check-"))
    os.chmod(work, 0o777)  # the non-root children write their result here
    hostproc = work / "hostproc"
    hostproc.mkdir()
    report: dict[str, Any] = {"command": " ".join(["python3", *sys.argv]), "fake_nvml":
                              a.fake_nvml, "euid": os.geteuid()}
    holders: list[subprocess.Popen] = []
    try:
        # torch takes seconds to start: the holders get until 25 s before the deadline
        holders = start_holders(a.holders, a.gib, a.fake_nvml, deadline - 25)
        seen = {p.pid: describe(p.pid) for p in holders}
        report["holders"] = {str(pid): {"comm": d["comm"], "cgroup": d["cgroup"][:300]}
                             for pid, d in seen.items()}
        holders_file = work / "holders.json"
        holders_file.write_text(json.dumps({str(k): v for k, v in seen.items()}))
        os.chmod(holders_file, 0o644)
        results = {}
        for name, prefix, opts in runs(str(hostproc)):
            left = deadline - time.monotonic()
            if left < 3:
                results[name] = {"name": name, "ran": False, "error": "no time left"}
                continue
            results[name] = run_child(name, prefix, opts, holders_file, a.fake_nvml, work,
                                      min(15.0, left))
            print(f"{name}: ran={results[name].get('ran')} ok={results[name].get('ok')} "
                  f"{results[name].get('error', '')}", file=sys.stderr, flush=True)
        report["runs"] = results
        report["verdict"] = verdict(results, list(seen))
    except Exception as err:
        report["error"] = f"{type(err).__name__}: {err}"
    finally:
        for p in holders:
            try:
                if p.stdin:
                    p.stdin.close()
                p.terminate()
                p.wait(timeout=10)
            except Exception:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="write the JSON here too")
    p.add_argument("--holders", type=int, default=3,
                   help="number of torch processes holding GPU memory")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--deadline", type=float, default=58.0, help="seconds for the whole check")
    p.add_argument("--fake-nvml", action="store_true", help="no GPU: sleep holders, fake NVML")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--holders-file", help=argparse.SUPPRESS)
    p.add_argument("--proc-root", help=argparse.SUPPRESS)
    p.add_argument("--proc-root-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--drop-to", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cli", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)
    report = parent(a)
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    summary = report.get("verdict", {}).get("summary", {})
    print(f"summary: {json.dumps(summary)}", file=sys.stderr)
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
