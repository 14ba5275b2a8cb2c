#!/usr/bin/env python3
"""Calibration sweep: a family of real OOMs across the diagnosis rules' boundaries, per setting.

One process per allocator setting (``--setting``), the points run one after the other in it,
each independent: build, run, catch the OOM (or not), record, free everything, check the GPU is
back where it was. Full-GPU points first, under an in-process ballast (the model's weights),
then the points capped by a memory fraction. One JSON line per point in
``OUT/sweep-SETTING.jsonl``; ``table.py`` joins the settings into one table.

    python3 evaluation/gpu/sweep/sweep.py --dry-run                 # the plan and a time estimate
    python3 evaluation/gpu/sweep/sweep.py --setting native --out DIR --ref DIR/ref.json
    python3 evaluation/gpu/sweep/sweep.py --setting es --out DIR --ref DIR/ref.json [--isolate]

Settings: native (none), es (expandable_segments:True), ms128 (max_split_size_mb:128),
async (backend:cudaMallocAsync), async_es (backend:cudaMallocAsync,expandable_segments:True).
Run ``native`` first: it writes ``--ref`` (free memory after warm-up and the MLP probes), which
the other settings read so that every setting runs the same jobs with the same bytes.
A process that dies is resumed by running the same command again: recorded points are skipped,
and the point it died in is recorded as ``crashed``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from points import GiB, MiB, Point, run_order, select, validate  # noqa: E402

SETTINGS: dict[str, str] = {
    "native": "",
    "es": "expandable_segments:True",
    "ms128": "max_split_size_mb:128",
    "async": "backend:cudaMallocAsync",
    "async_es": "backend:cudaMallocAsync,expandable_segments:True",
}
ENV_KEYS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")

BALLAST_MARGIN = 64 * MiB
"""Room above the largest budget, so each point's top-up ballast is never negative."""
REF_SHIFT_LIMIT = 64 * MiB
"""Free memory further than this from the reference: size the ballast from our own."""
DRIFT_TOLERANCE = 4 * MiB
"""Free memory after a point may differ this much from before it without rebuilding."""

# Rough seconds (not measured: the first GPU run replaces them with its own wall times).
EST_INIT_S = 8.0  # python + torch import + CUDA init + warm-up + MLP probes
EST_BALLAST_S = {"native": 0.3, "es": 1.5, "ms128": 0.3, "async": 0.4, "async_es": 0.4}
EST_FULL_POINT_S = {"native": 0.25, "es": 0.8, "ms128": 0.25, "async": 0.35, "async_es": 0.35}
EST_CAP_POINT_S = 0.15
EST_MLP_POINT_S = 1.5
EST_PER_TENSOR_S = 20e-6
EST_ISOLATED_POINT_S = 6.0


def estimate_s(points: list[Point], setting: str, isolate: bool = False) -> float:
    if isolate:
        return len(points) * EST_ISOLATED_POINT_S
    t = EST_INIT_S
    if any(p.mode == "full" for p in points):
        t += EST_BALLAST_S[setting]
    for p in points:
        if p.job == "mlp":
            t += EST_MLP_POINT_S
        elif p.mode == "full":
            t += EST_FULL_POINT_S[setting]
        else:
            t += EST_CAP_POINT_S
        t += p.pattern.allocations * EST_PER_TENSOR_S
    return t


def plan_text(points: list[Point], settings: list[str], isolate: bool = False) -> str:
    lines = [
        f"{len(points)} points, settings: {', '.join(settings)}",
        f"{'point':38} {'mode':4} {'free@R (MiB)':>12} {'native OOM':>10}  design",
    ]
    for p in points:
        if p.job == "mlp":
            free, oom = "probe", "probe"
        else:
            free = f"{p.native_free_at_request() / MiB:.0f}"
            oom = f"step {p.fail_step}" if p.expect_native_oom() else "no"
        lines.append(f"{p.name:38} {p.mode:4} {free:>12} {oom:>10}  {p.describe()}")
    total = 0.0
    lines.append("time estimate (rough constants, not measured):")
    for s in settings:
        t = estimate_s(points, s, isolate)
        total += t
        lines.append(f"  {s:9} {t:6.0f} s")
    lines.append(f"  {'all':9} {total:6.0f} s  ({total / 60:.1f} min)")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=sorted(SETTINGS), help="allocator setting to run")
    ap.add_argument("--out", help="folder for sweep-SETTING.jsonl")
    ap.add_argument("--ref", help="JSON with the reference free memory and MLP probes")
    ap.add_argument("--only", help="comma-separated point names or group letters (A..K)")
    ap.add_argument("--isolate", action="store_true", help="one process per point (slower)")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="start no point after this")
    ap.add_argument("--point-timeout-s", type=float, default=120.0, help="--isolate: per point")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; no CUDA")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not a.dry_run and (not a.setting or not a.out):
        ap.error("--setting and --out are required (or --dry-run)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    try:
        points = run_order(select(a.only))
    except ValueError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    problems = validate(points)
    if problems:
        print("sweep: the point catalogue is unsound:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if a.dry_run:
        print(plan_text(points, [a.setting] if a.setting else list(SETTINGS), a.isolate))
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.isolate and not a.child:
        return run_isolated(a, points, out)
    conf = SETTINGS[a.setting]
    for k in ENV_KEYS:
        os.environ.pop(k, None)
    if conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return Runner(a, points, out).run()


def run_isolated(a: argparse.Namespace, points: list[Point], out: Path) -> int:
    print(plan_text(points, [a.setting], isolate=True), flush=True)
    done = recorded(out / f"sweep-{a.setting}.jsonl")
    t0 = time.time()
    for p in points:
        if p.name in done:
            continue
        if a.deadline_s and time.time() - t0 > a.deadline_s:
            print(f"deadline: skipping {p.name}", flush=True)
            continue
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--setting",
            a.setting,
            "--out",
            str(out),
            "--only",
            p.name,
            "--child",
        ]
        if a.ref:
            cmd += ["--ref", a.ref]
        try:
            rc = subprocess.run(cmd, timeout=a.point_timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            # the child may have died inside the point: record it so the table shows it
            subprocess.run(cmd, timeout=a.point_timeout_s)
    return 0


def recorded(path: Path) -> set[str]:
    names: set[str] = set()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "point":
                names.add(rec["name"])
    return names


class Runner:
    """One setting in one process."""

    def __init__(self, a: argparse.Namespace, points: list[Point], out: Path) -> None:
        self.a = a
        self.setting: str = a.setting
        self.out = out
        self.jsonl = out / f"sweep-{self.setting}.jsonl"
        self.inflight = out / f"sweep-{self.setting}.inflight"
        self.t0 = time.time()
        done = recorded(self.jsonl)
        self.points = [p for p in points if p.name not in done]
        self.ballast: Any = None
        self.ballast_bytes = 0
        self.lmax = 0
        self.base: dict[str, int] = {}
        self.free_without_ballast: int | None = None
        self.ballast_from_own_free: int | None = None
        self.ballast_broken = False
        self.rebuilds = 0

    # -- records ------------------------------------------------------------------------------
    def write(self, rec: dict[str, Any]) -> None:
        with self.jsonl.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    def note_crash(self) -> None:
        """A point this setting started and never recorded: the process died inside it."""
        if not self.inflight.exists():
            return
        name = self.inflight.read_text().strip()
        if name and name not in recorded(self.jsonl):
            self.write(
                {
                    "type": "point",
                    "name": name,
                    "setting": self.setting,
                    "outcome": "crashed",
                    "note": "the process died inside this point",
                }
            )
            self.points = [p for p in self.points if p.name != name]
        self.inflight.unlink()

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> int:
        self.note_crash()
        print(plan_text(self.points, [self.setting]), flush=True)
        import torch  # after PYTORCH_CUDA_ALLOC_CONF is set

        if not torch.cuda.is_available():
            self.write({"type": "meta", "setting": self.setting, "error": "no CUDA device"})
            print("sweep: no CUDA device visible", file=sys.stderr)
            return 3
        import jobs

        self.torch, self.jobs = torch, jobs
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                torch.cuda.init()
                jobs.warm_up()
            except Exception as e:  # e.g. the setting rejected at CUDA init: say so, stop
                self.write({"type": "meta", "setting": self.setting, **jobs.error(0, "init", e)})
                print(f"sweep: CUDA init / warm-up failed: {e}", file=sys.stderr)
                return 4
        meta = self.meta([str(w.message) for w in caught])
        probes = {}
        for p in self.points:
            if p.mlp is not None and p.mlp.key() not in probes:
                probes[p.mlp.key()] = jobs.probe_mlp(p.mlp)
        start = jobs.settle()
        ref = self.reference(start["free"], probes)
        meta.update(
            free_after_warmup=start["free"],
            allocated_after_warmup=start["allocated"],
            own_probes=probes,
            ref=ref,
        )
        meta["ref_free_shift"] = start["free"] - ref["free"]
        self.ref = ref
        self.write(meta)
        print(json.dumps({k: meta[k] for k in ("setting", "conf", "torch", "gpu")}), flush=True)

        full = [p for p in self.points if p.mode == "full"]
        cap = [p for p in self.points if p.mode == "cap"]
        skipped: list[str] = []
        cap_reserve = 4 * EST_CAP_POINT_S * len(cap)  # the capped points keep their time
        if full:
            self.lmax = (
                max(p.budget(ref["probes"].get(p.mlp.key()) if p.mlp else None) for p in full)
                + BALLAST_MARGIN
            )
            try:
                self.make_ballast()
            except Exception as e:
                self.write({"type": "meta", "setting": self.setting, **jobs.error(0, "ballast", e)})
                print(f"[{self.setting}] ballast failed: {e}; full-GPU points skipped", flush=True)
                skipped += [p.name for p in full]
                full = []
            for p in full:
                if self.past_deadline(cap_reserve) or self.ballast_broken:
                    skipped.append(p.name)
                    continue
                self.one(p)
            self.drop_ballast()
        for p in cap:
            if self.past_deadline(0.0):
                skipped.append(p.name)
                continue
            self.one(p)
        elapsed = time.time() - self.t0
        self.write(
            {
                "type": "end",
                "setting": self.setting,
                "elapsed_s": round(elapsed, 1),
                "skipped": skipped,
                "ballast_rebuilds": self.rebuilds,
                "ballast_bytes": self.ballast_bytes,
                "ballast_from_own_free": self.ballast_from_own_free,
            }
        )
        print(f"[{self.setting}] done in {elapsed:.1f} s; skipped {len(skipped)}", flush=True)
        return 0

    def past_deadline(self, reserve: float) -> bool:
        d = self.a.deadline_s
        return bool(d) and time.time() - self.t0 > d - reserve

    def meta(self, init_warnings: list[str]) -> dict[str, Any]:
        torch = self.torch
        props = torch.cuda.get_device_properties(0)
        return {
            "type": "meta",
            "setting": self.setting,
            "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0),
            "total_bytes": int(props.total_memory),
            "python": sys.version.split()[0],
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.t0)),
            "init_warnings": init_warnings,
            "isolated": bool(self.a.child),
        }

    def reference(self, free: int, probes: dict[str, dict[str, int]]) -> dict[str, Any]:
        """The first setting to run writes the reference; every later one sizes from it."""
        path = Path(self.a.ref) if self.a.ref else None
        if path is not None and path.exists():
            ref = json.loads(path.read_text())
            missing = {k: v for k, v in probes.items() if k not in ref["probes"]}
            if missing:  # the first process to probe a job sizes it for every later one
                ref["probes"].update(missing)
                path.write_text(json.dumps(ref, indent=1))
            return ref
        ref = {
            "free": free,
            "probes": probes,
            "setting": self.setting,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if path is not None:
            path.write_text(json.dumps(ref, indent=1))
        return ref

    # -- the ballast (the model's weights of every full-GPU point) --------------------------------
    def make_ballast(self) -> None:
        """Leave ``lmax`` free, sized from the reference so every setting holds the same bytes;
        a rebuild after a drift also absorbs the drift (the point's room stays as designed)."""
        jobs = self.jobs
        free_now = int(self.torch.cuda.mem_get_info()[0])
        if self.free_without_ballast is None:
            self.free_without_ballast = free_now
            if abs(free_now - self.ref["free"]) > REF_SHIFT_LIMIT:
                # something else holds (or freed) memory since the reference was taken: keep
                # the points' room as designed rather than the ballast's bytes, and say so
                self.ballast_from_own_free = free_now
        base = self.ballast_from_own_free or self.ref["free"]
        n = base - self.lmax + (free_now - self.free_without_ballast)
        n -= n % (2 * MiB)
        self.ballast_bytes = max(0, n)
        self.ballast = jobs.empty(self.ballast_bytes) if self.ballast_bytes else None
        self.base = jobs.memory_state(detail=False)
        print(
            f"[{self.setting}] ballast {self.ballast_bytes / GiB:.2f} GiB; free "
            f"{self.base['free'] / GiB:.2f} GiB (largest budget {self.lmax / GiB:.2f} GiB)",
            flush=True,
        )

    def drop_ballast(self) -> None:
        self.ballast = None
        self.base = self.jobs.settle()

    # -- one point ----------------------------------------------------------------------------
    def one(self, p: Point) -> None:
        self.inflight.write_text(p.name)
        t = time.time()
        try:
            rec = self.run_point(p)
        except Exception as e:  # a bug or a CUDA error outside the job's own try: keep going
            rec = {
                "type": "point",
                "name": p.name,
                "group": p.group,
                "mode": p.mode,
                "setting": self.setting,
                **self.jobs.error(0, "runner", e),
            }
        rec["wall_s"] = round(time.time() - t, 3)
        rec["cleanup"] = self.clean_after(p)
        self.write(rec)
        self.inflight.unlink()
        where = f" step {rec.get('step')} {rec.get('where')}" if rec["outcome"] == "oom" else ""
        print(
            f"[{self.setting}] {p.name:38} {rec['outcome']:9}{where:28} {rec['wall_s']:6.2f} s",
            flush=True,
        )

    def design(self, p: Point, budget: int) -> dict[str, Any]:
        pat = p.pattern
        return {
            "describe": p.describe(),
            "pattern": pat.kind,
            "slack": pat.slack,
            "live": pat.live,
            "hidden": pat.hidden,
            "request": p.request,
            "headroom": p.headroom,
            "dynamics": p.dynamics,
            "grow": p.grow,
            "fail_step": p.fail_step,
            "steps": p.steps,
            "budget": budget,
            "expect_native_oom": p.expect_native_oom() if not p.mlp else None,
            "native_free_at_request": p.native_free_at_request() if not p.mlp else None,
            "why": p.why,
        }

    def run_point(self, p: Point) -> dict[str, Any]:
        torch, jobs = self.torch, self.jobs
        probe = self.ref["probes"].get(p.mlp.key()) if p.mlp else None
        budget = p.budget(probe)
        rec: dict[str, Any] = {
            "type": "point",
            "name": p.name,
            "group": p.group,
            "mode": p.mode,
            "job": p.job,
            "setting": self.setting,
            "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "design": self.design(p, budget),
            "probe": probe,
        }
        head = [f"starting job on {torch.cuda.get_device_name(0)} torch {torch.__version__}"]
        held: list[Any] = []
        printed: list[str] = []
        try:
            if p.mode == "full":
                top = self.lmax - budget
                top -= top % (2 * MiB)
                rec["top_up_bytes"] = top
                # where the model ends inside a 20 MiB expandable-segment page: under
                # expandable_segments the rest of that page is mapped and free for the job
                rec["model_bytes_mod_20mib"] = (self.ballast_bytes + top) % (20 * MiB)
                if top > 0:
                    held.append(jobs.empty(top))
                head.append(f"model loaded ({(self.ballast_bytes + top) / GiB:.1f} GiB on the GPU)")
            else:
                total = torch.cuda.get_device_properties(0).total_memory
                cap = torch.cuda.memory_reserved() + budget
                fraction = cap / total
                torch.cuda.set_per_process_memory_fraction(fraction)
                rec.update(fraction=fraction, allowed_bytes=int(fraction * total))
                head.append(f"memory fraction {fraction:.4f} ({cap / GiB:.2f} GiB allowed)")
            rec["before_pattern"] = jobs.memory_state()
            held += jobs.build_pattern(p.pattern)
            rec["after_pattern"] = jobs.memory_state()
        except Exception as e:
            setup = jobs.failure(0, "setup", 0, e) if jobs.is_oom(e) else jobs.error(0, "setup", e)
            setup["outcome"] = "setup-" + setup["outcome"]
            rec.update(setup)
            rec["log_head"] = head
            return rec
        if p.mlp is not None:
            rec.update(jobs.mlp_steps(p.mlp, printed))
        else:
            rec.update(jobs.alloc_steps(p, printed))
        rec["log_head"], rec["printed"] = head, printed
        del held
        return rec

    def clean_after(self, p: Point) -> dict[str, Any]:
        torch, jobs = self.torch, self.jobs
        if p.mode == "cap":
            torch.cuda.set_per_process_memory_fraction(1.0)
        after = jobs.settle()
        out: dict[str, Any] = dict(after)
        if p.mode == "full":
            drift = after["free"] - self.base["free"]
            out["free_drift"] = drift
            out["allocated_drift"] = after["allocated"] - self.base["allocated"]
            if abs(drift) > DRIFT_TOLERANCE or out["allocated_drift"] != 0:
                self.ballast = None
                jobs.settle()
                try:
                    self.make_ballast()
                except Exception as e:  # without the ballast a full-GPU point is not full
                    self.ballast_broken = True
                    out["ballast_rebuild_error"] = f"{type(e).__name__}: {e}"[:2000]
                    return out
                self.rebuilds += 1
                out["ballast_rebuilt"] = True
        return out


if __name__ == "__main__":
    sys.exit(main())
