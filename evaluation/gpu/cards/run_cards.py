#!/usr/bin/env python3
"""Small cards on a big GPU: where does each job run out of memory, and does an allocator
setting let it finish?

For each card size (4, 8, 16, 24, 40 GiB, emulated by ``cards.py``'s holder) and each job:

1. probe: one run at ``--probe-scale`` (0.6) on the whole GPU, several at once, measuring the
   job's steady memory (weights, optimizer state) and its peak allocated / reserved; a straight
   line through steady and peak gives ``S_a`` (the scale whose peak *allocated* fills the card)
   and ``S_r`` (whose peak *reserved*, as the native allocator left it, fills it); ``S_r <= S_a``.
2. near: native at ``1.04 x S_r``; if it finishes, once more, half-way (geometrically) toward
   ``1.02 x S_a`` (``S_a`` refitted through the probe and that finished run, both measured; at
   least 6 % up): at most 2 native tries, stopping at the first OOM.
3. the near OOM again with ``expandable_segments:True`` and with ``max_split_size_mb:128``.
4. far: native at 1.2 x the near OOM's scale (~1.25 x over the edge; 1.25 x the largest scale
   tried when no near try ran out); its OOM again with each setting.
So a cell takes at most 4 native runs (probe, 2 near, far) and 4 setting runs.
Plus the one-off items: ``first_call`` (the GPU full before the job's first CUDA call; native
with 32 and 256 MiB left, and with expandable_segments) and ``margin`` (request R = 64 MiB and
2 GiB with R + S MiB free, S = 0..4, on the 8 GiB card).

Every run is its own process (the allocator reads its setting at CUDA init), same seed for
every setting. Runs go tier by tier, the most informative first (near natives, their settings,
the items, then far natives and theirs), card by card inside a tier; on ``--deadline-s`` the
rest is skipped and recorded as skipped. Each row is appended to ``DIR/rows.jsonl`` as soon as
its run ends; ``DIR/summary.md`` is rewritten after every tier; raw logs are
``DIR/logs/<name>.log``.

    python3 run_cards.py --out DIR [--only lm_varlen,margin] [--cards 4,8] [--deadline-s 505]
    python3 run_cards.py --out DIR --dry-run-cpu     # every job tiny on the CPU, fake OOMs
    python3 run_cards.py --summarize DIR             # summary.md again from DIR/rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# compiled bytecode kept between processes (the GPU image sets PYTHONDONTWRITEBYTECODE=1, which
# makes every ``import torch`` compile torch's sources again)
os.environ.setdefault("PYTHONPYCACHEPREFIX", "/tmp/cards-pycache")
sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
sys.dont_write_bytecode = False
import cards as C  # noqa: E402

GiB, MiB = C.GiB, C.MiB
CARDS = [4, 8, 16, 24, 40]
SETTINGS: dict[str, str | None] = {
    "native": None,
    "es": "expandable_segments:True",
    "ms128": "max_split_size_mb:128",
}
# name -> (script, extra argv, steps, seconds a run takes at 40 GiB beyond the ~2 s start)
JOBS: dict[str, tuple[str, list[str], int, float]] = {
    "lm_varlen": ("lm_varlen.py", [], 14, 2.0),
    "cnn_multiscale": ("cnn_multiscale.py", [], 12, 2.0),
    "mlp_capacity": ("mlp_capacity.py", [], 6, 2.0),
    "kv_server": ("kv_server.py", [], 5, 3.0),
    "lora_finetune": ("lora_finetune.py", [], 6, 4.0),
    "leak_losses": ("leak_losses.py", [], 240, 1.0),
    "leak_fraction": ("leak_losses.py", ["--cap-of-card", "0.5"], 240, 1.0),
}
ITEMS = ["first_call", "margin"]
START_S = 2.0  # fork + CUDA init + model build, seconds (first guess; measured runs replace it)
NONPT_GUESS = 256 * MiB  # non-PyTorch memory a job adds after start (cuBLAS/cuDNN, kernels)
MARGIN_CARD = 8
MAX_NEAR = 2  # native tries near the edge (with the probe and the far one: 4 a cell)
FIRST_CALL_LEAVE_MIB = (32, 256)


def now() -> str:
    return time.strftime("%H:%M:%S")


class Cell:
    """One (card, job): the probe's fit and the native runs near and far from the edge."""

    def __init__(self, card: float, job: str) -> None:
        self.card, self.job = card, job
        self.probe: dict | None = None
        self.static = self.slope_a = self.slope_r = None
        self.S_a: float | None = None
        self.S_r: float | None = None
        self.budget: int | None = None
        self.near: list[dict] = []
        self.far: dict | None = None
        self.done_near = False
        self.nonpt: int | None = None
        self.near_es_done = False
        self.S_a2: float | None = None

    def fit(self, probe: dict, budget: int) -> None:
        """Straight lines through (0, steady) and (probe scale, peak allocated / reserved)."""
        self.probe = probe
        self.budget = budget
        if probe.get("outcome") != "finished":
            return
        s0 = probe["scale"]
        pa, pr = probe.get("max_memory_allocated"), probe.get("max_memory_reserved")
        if not pa or not pr:
            return
        st = probe.get("steady_allocated") or 0
        st = min(st, 0.9 * pa)
        self.static = st
        self.slope_a = (pa - st) / s0
        self.slope_r = max(pr - st, pa - st) / s0
        self.refit(budget)

    def refit(self, budget: int) -> None:
        if self.slope_a is None or self.static is None:
            return
        self.budget = budget
        room = max(budget - self.static, 64 * MiB)
        self.S_a = room / self.slope_a
        self.S_r = room / self.slope_r

    def near_oom(self) -> dict | None:
        for r in self.near:
            if r["outcome"] == "oom":
                return r
        return None

    def next_near_scale(self) -> float | None:
        if self.S_r is None or self.done_near:
            return None
        if not self.near:
            return 1.04 * self.S_r
        last = self.near[-1]
        if last["outcome"] != "finished" or len(self.near) >= MAX_NEAR:
            self.done_near = True
            return None
        s = last["scale"]
        sa = self.S_a or s
        # a second point on the allocated line: the finished near run, on the card itself
        p0 = (self.probe or {}).get("max_memory_allocated")
        s0 = (self.probe or {}).get("scale")
        p1 = last.get("max_memory_allocated")
        if p0 and p1 and s0 and s > s0 and p1 > p0 and self.budget:
            sa = s + (self.budget - p1) * (s - s0) / (p1 - p0)
            self.S_a2 = sa
        # half-way (geometrically) to just past the allocated edge, at least 6 % up
        return max(1.06 * s, math.sqrt(s * 1.02 * sa))

    def far_scale(self) -> float | None:
        if self.S_r is None:
            return None
        o = self.near_oom()
        if o is not None:
            return 1.2 * o["scale"]
        return 1.25 * max([r["scale"] for r in self.near] + [self.S_a2 or self.S_a or 0.0])


class Runner:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.dry = a.dry_run_cpu
        self.t0 = time.time()
        self.out = Path(a.out)
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        (self.out / "records").mkdir(parents=True, exist_ok=True)
        self.rows_path = self.out / "rows.jsonl"
        self.rows: list[dict] = []
        self.rows_path.write_text("")
        self.cards = [float(c) for c in a.cards.split(",") if c.strip()]
        only = {x.strip() for x in a.only.split(",") if x.strip()}
        unknown = only - set(JOBS) - set(ITEMS)
        if unknown:
            raise SystemExit(f"unknown job(s) {sorted(unknown)}; jobs: {list(JOBS) + ITEMS}")
        self.jobs = [j for j in JOBS if not only or j in only]
        self.items = [j for j in ITEMS if not only or j in only]
        self.cells = {(c, j): Cell(c, j) for c in self.cards for j in self.jobs}
        self.walls: dict[tuple[str, float], list[float]] = {}
        self.context = 0
        self.holder: C.Holder | None = None
        self.launcher: C.Launcher | None = None
        self.meta: dict[str, Any] = {}
        self.skipped = 0

    # ---- time --------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.time() - self.t0

    def left(self) -> float:
        return self.a.deadline_s - self.elapsed()

    def estimate(self, job: str, card: float | None) -> float:
        w = self.walls.get((job, card or 0.0))
        if w:
            return max(w[-3:])
        starts = [min(v) for v in self.walls.values()]
        start = min(starts) if starts else START_S
        heavy = JOBS[job][3] if job in JOBS else 0.5
        return start + heavy * (card or 8) / 40

    # ---- rows --------------------------------------------------------------------------------
    def emit(self, row: dict) -> None:
        row["t"] = round(self.elapsed(), 2)
        self.rows.append(row)
        with open(self.rows_path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def env(self, conf: str | None, record: Path) -> dict[str, str]:
        env = dict(os.environ)
        for k in (
            "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF",
            "PYTORCH_HIP_ALLOC_CONF",
            "PYTHONDONTWRITEBYTECODE",
            "CARDS_FAKE_OOM",
        ):
            env.pop(k, None)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("PYTHONPYCACHEPREFIX", "/tmp/cards-pycache")
        env["CARDS_RECORD"] = str(record)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        if self.dry:
            env["CARDS_FAKE_OOM"] = "1"
        return env

    # ---- one run -----------------------------------------------------------------------------
    def job_argv(self, job: str, card: float, scale: float) -> tuple[Path, list[str]]:
        script, extra, steps, _ = JOBS[job]
        argv = [
            "--card-gib",
            f"{card:g}",
            "--scale",
            f"{scale:.4f}",
            "--steps",
            str(steps),
            "--seed",
            str(self.a.seed),
            *extra,
        ]
        return HERE / script, argv

    def launch(
        self, name: str, script: Path, argv: list[str], conf: str | None, timeout: float
    ) -> tuple[int, float, dict, str, Path]:
        assert self.launcher is not None
        if self.dry:
            argv = [*argv, "--dry-run-cpu"]
        log = self.out / "logs" / f"{name}.log"
        rec_path = self.out / "records" / f"{name}.json"
        rec_path.unlink(missing_ok=True)
        h = self.launcher.start(script, argv, self.env(conf, rec_path), log)
        rc, wall = self.launcher.wait(h, timeout)
        try:
            rec = json.loads(rec_path.read_text())
        except Exception:
            rec = {}
        text = log.read_text(errors="replace") if log.exists() else ""
        return rc, wall, rec, text, log

    def serial(
        self,
        job: str,
        card: float | None,
        scale: float | None,
        setting: str,
        role: str,
        tier: int,
        script: Path | None = None,
        argv: list[str] | None = None,
        leave: int | None = None,
        est_job: str | None = None,
        extra: dict | None = None,
    ) -> dict | None:
        """One run on the emulated card; its row (emitted), or None when skipped."""
        est = self.estimate(est_job or job, card)
        conf = SETTINGS[setting]
        sc = f"s{scale:.3f}" if scale is not None else "x"
        name = (
            f"{card:g}g__{job}__{sc}__{setting}__{role}"
            if card
            else f"{job}__{sc}__{setting}__{role}"
        )
        if self.left() < 1.3 * est + 2.0:
            self.skipped += 1
            self.emit(
                {
                    "kind": "skipped",
                    "name": name,
                    "card_gib": card,
                    "job": job,
                    "scale": scale,
                    "setting": setting,
                    "role": role,
                    "tier": tier,
                    "est_s": round(est, 1),
                    "reason": "deadline",
                }
            )
            return None
        if script is None or argv is None:
            assert scale is not None and card is not None
            script, argv = self.job_argv(job, card, scale)
        assert self.holder is not None
        if leave is None:
            assert card is not None
            leave = C.leave_bytes(card, self.a.holder_mode, self.context)
        held, _ = self.holder.leave(leave)
        free_before = self.holder.settle()
        timeout = max(5.0, min(self.a.run_timeout_s, max(25.0, 8 * est), self.left() + 20.0))
        rc, wall, rec, text, log = self.launch(name, script, argv, conf, timeout)
        key = (est_job or job, card or 0.0)
        self.walls.setdefault(key, []).append(wall)
        row = self.row(name, job, card, scale, setting, role, tier, rc, wall, rec, text, log)
        row.update(
            holder_held=held,
            holder_leaves=leave,
            free_before_job=free_before,
            est_s=round(est, 1),
            command=self.command(script, argv, conf),
        )
        fs = rec.get("free_at_start")
        if fs is not None and free_before is not None:
            row["context_bytes"] = int(free_before - fs)
        nonpt = nonpt_growth(rec)
        if nonpt is not None:
            row["nonpytorch_growth"] = nonpt
        row.update(extra or {})
        self.emit(row)
        fig = row.get("figures") or {}
        u = fig.get("reserved_unallocated")
        print(
            f"[{now()} {self.elapsed():6.1f}s] {name:<58} {row['outcome']:<9}"
            f"{'@' + str(row.get('oom_step')) if row['outcome'] == 'oom' else '':<6} "
            f"U={C.fmt_size(u) if u is not None else '-':<11} "
            f"{wall:5.1f}s (est {est:.1f})",
            flush=True,
        )
        return row

    def row(self, name, job, card, scale, setting, role, tier, rc, wall, rec, text, log) -> dict:
        line = C.oom_line(text)
        msg = rec.get("message") if rec.get("outcome") == "oom" else None
        msg = msg or line
        if rc == 124:
            outcome = "timeout"
        elif rc == 0 and rec.get("outcome") == "finished":
            outcome = "finished"
        elif rec.get("outcome") == "oom" or (rc != 0 and line is not None):
            outcome = "oom"
        else:
            outcome = "error"
        card_bytes = int(card * GiB) if card else None
        figs = C.parse_oom(msg) if outcome == "oom" else None
        events = rec.get("oom_events") or []
        end = rec.get("at_end") or rec.get("at_raise") or {}
        at_fail = events[-1] if events else rec.get("at_raise")
        src = (at_fail or {}) if outcome == "oom" else end
        row = {
            "kind": "run",
            "name": name,
            "card_gib": card,
            "job": job,
            "scale": round(scale, 4) if scale is not None else None,
            "setting": setting,
            "alloc_conf": SETTINGS[setting],
            "role": role,
            "tier": tier,
            "outcome": outcome,
            "rc": rc,
            "steps_target": rec.get("steps"),
            "steps_done": rec.get("steps_done"),
            "oom_step": rec.get("step") if outcome == "oom" else None,
            "oom_phase": rec.get("phase") if outcome != "finished" else None,
            "wall_s": round(wall, 2),
            "free_at_start": rec.get("free_at_start"),
            "device_total": rec.get("device_total"),
            "card_bytes": card_bytes,
            "cap_bytes": rec.get("cap_bytes"),
            "exception": rec.get("exception"),
            "message": msg,
            "figures": figs,
            "card_figures": C.card_figures(figs, card_bytes) if figs else None,
            "message_as_card": C.message_as_card(msg, card_bytes) if outcome == "oom" else None,
            "stats_at_failure": extract(at_fail) if outcome == "oom" else None,
            "oom_observer_calls": rec.get("num_oom_events", 0),
            "max_memory_allocated": src.get("max_memory_allocated"),
            "max_memory_reserved": src.get("max_memory_reserved"),
            "stats_at_end": extract(rec.get("at_end")) if outcome == "finished" else None,
            "steady_allocated": rec.get("steady_allocated"),
            "est_peak": rec.get("est_peak"),
            "setting_seen": setting_seen(rec),
            "log": f"logs/{log.name}",
            "last_lines": text.splitlines()[-2:],
        }
        if job == "margin":
            for k in (
                "free_before_request",
                "request_bytes",
                "weights_bytes",
                "free_before_weights",
            ):
                row[k] = rec.get(k)
        return row

    def command(self, script: Path, argv: list[str], conf: str | None) -> str:
        pre = f"PYTORCH_CUDA_ALLOC_CONF={conf} " if conf else ""
        return pre + "python3 " + " ".join([script.name, *argv])

    # ---- phases ------------------------------------------------------------------------------
    def start(self) -> None:
        base_env = self.env(None, self.out / "records" / "holder.json")
        base_env.pop("CARDS_RECORD", None)
        self.launcher = C.Launcher(self.a.launcher)  # imports torch here (fork) before the holder
        print(f"[{now()} {self.elapsed():6.1f}s] starting holder", flush=True)
        self.holder = C.Holder(base_env, dry=self.dry)
        self.meta = {
            "kind": "meta",
            "argv": sys.argv,
            "dry_run_cpu": self.dry,
            "launcher": self.a.launcher,
            "holder_mode": self.a.holder_mode,
            "holder_pid": self.holder.pid,
            "gpu_total": self.holder.total,
            "gpu_free_with_holder_only": self.holder.free_alone,
            "cards": self.cards,
            "jobs": self.jobs,
            "items": self.items,
            "deadline_s": self.a.deadline_s,
            "gpu": smi(),
        }
        try:
            import torch

            self.meta["torch"] = torch.__version__
            self.meta["torch_cuda"] = torch.version.cuda
        except Exception as e:
            self.meta["torch"] = repr(e)
        print(
            f"[{now()}] holder {self.holder.pid} up: GPU total {self.holder.total / GiB:.2f} GiB, "
            f"free {self.holder.free_alone / GiB:.2f} GiB; launcher {self.a.launcher}",
            flush=True,
        )
        self.check_context()

    def check_context(self) -> None:
        """A job's CUDA context on the 8 GiB card, and whether the setting reaches a launched job
        (expandable segments seen in its snapshot); falls back to ``subprocess`` if not."""
        script = HERE / "ctx_check.py"
        ctx = self.serial(
            "ctx_check",
            8.0,
            None,
            "native",
            "context",
            0,
            script=script,
            argv=["--card-gib", "8"],
            est_job="ctx_check",
        )
        if ctx and ctx.get("context_bytes") is not None:
            self.context = int(ctx["context_bytes"])
        es = self.serial(
            "ctx_check",
            8.0,
            None,
            "es",
            "context",
            0,
            script=script,
            argv=["--card-gib", "8"],
            est_job="ctx_check",
        )
        ok = bool(es and (es.get("setting_seen") or {}).get("expandable_segments"))
        if not ok and not self.dry and self.a.launcher == "fork":
            print(
                f"[{now()}] expandable_segments not seen in a forked job: switching to "
                "subprocess launches",
                flush=True,
            )
            self.a.launcher = "subprocess"
            self.launcher = C.Launcher("subprocess")
            es = self.serial(
                "ctx_check",
                8.0,
                None,
                "es",
                "context-subprocess",
                0,
                script=script,
                argv=["--card-gib", "8"],
                est_job="ctx_check",
            )
            ok = bool(es and (es.get("setting_seen") or {}).get("expandable_segments"))
        self.meta.update(
            context_bytes=self.context, setting_reaches_job=ok, launcher=self.a.launcher
        )
        print(
            f"[{now()}] job context on the card: {self.context / MiB:.0f} MiB; "
            f"setting reaches the job: {ok}",
            flush=True,
        )

    def budget(self, cell: Cell, rec_cap: int | None) -> int:
        if cell.job == "leak_fraction" and rec_cap:
            return int(rec_cap)
        card = int(cell.card * GiB)
        ctx = self.context if self.a.holder_mode == "card" else 0
        return card - ctx - (cell.nonpt if cell.nonpt is not None else NONPT_GUESS)

    def probes(self) -> None:
        """Every cell once at the probe scale, on the whole GPU, several at a time."""
        assert self.holder is not None and self.launcher is not None
        self.holder.release()
        cap = 0.8 * self.holder.settle() if not self.dry else float("inf")
        todo = sorted(self.cells.values(), key=lambda c: -c.card)
        running: list[tuple[Cell, C.Handle, Path, float]] = []
        s0 = self.a.probe_scale
        t_start = self.elapsed()
        while todo or running:
            used = sum(cost for _, _, _, cost in running)
            while todo and len(running) < self.a.parallel:
                cell = todo[0]
                cost = (s0 * 1.6 + 0.1) * cell.card * GiB + 1.5 * GiB
                if running and used + cost > cap:
                    break
                if self.left() < 20:
                    todo = []
                    break
                todo.pop(0)
                script, argv = self.job_argv(cell.job, cell.card, s0)
                if self.dry:
                    argv = [*argv, "--dry-run-cpu"]
                name = f"{cell.card:g}g__{cell.job}__s{s0:.3f}__native__probe"
                rec_path = self.out / "records" / f"{name}.json"
                rec_path.unlink(missing_ok=True)
                h = self.launcher.start(
                    script, argv, self.env(None, rec_path), self.out / "logs" / f"{name}.log"
                )
                running.append((cell, h, rec_path, cost))
                used += cost
            for item in list(running):
                cell, h, rec_path, cost = item
                rc = self.launcher.poll(h)
                if rc is None and time.time() - h.t0 > self.a.probe_timeout_s:
                    self.launcher.kill(h)
                    while self.launcher.poll(h) is None:
                        time.sleep(0.05)
                    rc = h.rc = 124
                if rc is None:
                    continue
                running.remove(item)
                try:
                    rec = json.loads(rec_path.read_text())
                except Exception:
                    rec = {}
                text = h.log.read_text(errors="replace")
                name = h.log.stem
                row = self.row(
                    name,
                    cell.job,
                    cell.card,
                    s0,
                    "native",
                    "probe",
                    1,
                    rc,
                    h.wall,
                    rec,
                    text,
                    h.log,
                )
                row["parallel"] = True
                row["command"] = self.command(*self.job_argv(cell.job, cell.card, s0), None)
                cell.fit(row, self.budget(cell, rec.get("cap_bytes")))
                row["fit"] = {
                    "static": cell.static,
                    "slope_allocated": cell.slope_a,
                    "slope_reserved": cell.slope_r,
                    "S_a": cell.S_a,
                    "S_r": cell.S_r,
                    "budget": cell.budget,
                }
                self.emit(row)
                sa = f"{cell.S_a:.3f}" if cell.S_a else "-"
                sr = f"{cell.S_r:.3f}" if cell.S_r else "-"
                print(
                    f"[{now()} {self.elapsed():6.1f}s] probe {name:<50} {row['outcome']:<9} "
                    f"S_a={sa} S_r={sr} {h.wall:5.1f}s",
                    flush=True,
                )
            time.sleep(0.05)
        print(f"[{now()}] probes done in {self.elapsed() - t_start:.1f}s", flush=True)

    def after_native(self, cell: Cell, row: dict | None) -> None:
        """Refine the non-PyTorch memory of the job from a serial run and refit."""
        if row is None:
            return
        if row.get("nonpytorch_growth") is not None and cell.job != "leak_fraction":
            cell.nonpt = max(0, int(row["nonpytorch_growth"]))
            cell.refit(self.budget(cell, None))

    def run_setting(self, cell: Cell, base: dict, setting: str, tier: int) -> dict | None:
        role = base["role"]
        row = self.serial(cell.job, cell.card, base["scale"], setting, role, tier)
        return row

    def tiers(self) -> None:
        cards = self.cards

        def cells(card: float) -> list[Cell]:
            return [self.cells[(card, j)] for j in self.jobs]

        # tier 2: first native try near the edge
        for card in cards:
            for cell in cells(card):
                s = cell.next_near_scale()
                if s is not None and not cell.near:
                    row = self.serial(cell.job, card, s, "native", "near1", 2)
                    if row is None:
                        cell.done_near = True
                        continue
                    cell.near.append(row)
                    self.after_native(cell, row)
        self.summary()
        # tier 3: expandable_segments on the near OOM; more native tries where it finished
        for card in cards:
            for cell in cells(card):
                while True:
                    o = cell.near_oom()
                    if o is not None:
                        if not cell.near_es_done:
                            cell.near_es_done = True
                            self.run_setting(cell, o, "es", 3)
                        break
                    s = cell.next_near_scale()
                    if s is None:
                        break
                    fit = {"S_a": cell.S_a, "S_r": cell.S_r, "S_a_refit": cell.S_a2}
                    role = f"near{len(cell.near) + 1}"
                    row = self.serial(cell.job, card, s, "native", role, 3, extra={"fit": fit})
                    if row is None:
                        cell.done_near = True
                        break
                    cell.near.append(row)
                    self.after_native(cell, row)
        self.summary()
        # tier 4: max_split_size_mb:128 on the near OOM; the one-off items
        for card in cards:
            for cell in cells(card):
                o = cell.near_oom()
                if o is not None:
                    self.run_setting(cell, o, "ms128", 4)
        self.items_runs()
        self.summary()
        # tier 5: far natives
        for card in cards:
            for cell in cells(card):
                s = cell.far_scale()
                if s is not None:
                    cell.far = self.serial(cell.job, card, s, "native", "far", 5)
        self.summary()
        # tier 6: the far OOMs with each setting (smallest cards first)
        for card in cards:
            for cell in cells(card):
                if cell.far is not None and cell.far["outcome"] == "oom":
                    for setting in ("es", "ms128"):
                        self.run_setting(cell, cell.far, setting, 6)
        self.summary()

    def items_runs(self) -> None:
        if "first_call" in self.items:
            script = HERE / "first_call.py"
            for leave_mib, setting in (
                (FIRST_CALL_LEAVE_MIB[0], "native"),
                (FIRST_CALL_LEAVE_MIB[0], "es"),
                (FIRST_CALL_LEAVE_MIB[1], "native"),
            ):
                self.serial(
                    "first_call",
                    None,
                    None,
                    setting,
                    f"leave{leave_mib}mib",
                    4,
                    script=script,
                    argv=["--steps", "5"],
                    leave=leave_mib * MiB,
                    est_job="first_call",
                )
        if "margin" in self.items:
            script = HERE / "margin.py"
            for req in (64, 2048):
                for slack in range(5):
                    self.serial(
                        "margin",
                        float(MARGIN_CARD),
                        None,
                        "native",
                        f"r{req}mib-slack{slack}mib",
                        4,
                        script=script,
                        argv=[
                            "--card-gib",
                            str(MARGIN_CARD),
                            "--request-mib",
                            str(req),
                            "--slack-mib",
                            str(slack),
                        ],
                        est_job="margin",
                    )

    def plan(self) -> None:
        """Print the plan with a time estimate per tier (upper bounds where outcomes decide)."""
        n = len(self.cells)
        per = sum(self.estimate(c.job, c.card) for c in self.cells.values())
        lines = [
            f"plan: {len(self.cards)} cards x {len(self.jobs)} jobs = {n} cells; deadline "
            f"{self.a.deadline_s:.0f}s; one process per run, est ~{per / max(n, 1):.1f}s a run",
            f"  tier 1 probes: {n} runs, {self.a.parallel} at a time, "
            f"~{per / self.a.parallel:.0f}s",
            f"  tier 2 near native: {n} runs, ~{per:.0f}s",
            f"  tier 3 near expandable_segments + one more near native: <= {2 * n}, "
            f"~{per:.0f}-{2 * per:.0f}s",
            f"  tier 4 near max_split_size_mb:128: <= {n}, ~{per:.0f}s; items: "
            f"{3 * ('first_call' in self.items) + 10 * ('margin' in self.items)} runs",
            f"  tier 5 far native: {n}, ~{per:.0f}s; tier 6 far settings: <= {2 * n}, "
            f"~{2 * per:.0f}s",
        ]
        for ln in lines:
            print(ln, flush=True)
        self.meta["plan"] = lines

    def finish(self) -> None:
        if self.holder is not None:
            try:
                self.holder.close()
            except Exception as e:
                print(f"holder close: {e!r}", flush=True)
        self.summary()
        print(
            f"[{now()}] done in {self.elapsed():.1f}s: {len(self.rows)} rows, "
            f"{self.skipped} skipped; {self.out / 'summary.md'}",
            flush=True,
        )

    def summary(self) -> None:
        (self.out / "summary.md").write_text(summarize(self.rows))


# --------------------------------------------------------------------------------------------
# record extracts
# --------------------------------------------------------------------------------------------


def extract(st: dict | None) -> dict | None:
    """reserved / allocated / inactive-split bytes per pool, segments, and the peaks."""
    if not st:
        return None
    ms = st.get("memory_stats") or {}
    out: dict[str, Any] = {}
    for k in (
        "reserved_bytes",
        "allocated_bytes",
        "inactive_split_bytes",
        "segment",
        "requested_bytes",
    ):
        for p in ("all", "large_pool", "small_pool"):
            v = ms.get(f"{k}.{p}.current")
            if v is not None:
                out[f"{k}.{p}"] = v
    for k in (
        "num_alloc_retries",
        "num_ooms",
        "num_device_alloc",
        "num_device_free",
        "max_split_size",
        "oversize_segments.current",
    ):
        if k in ms:
            out[k] = ms[k]
    for k in (
        "max_memory_allocated",
        "max_memory_reserved",
        "mem_get_info",
        "alloc",
        "limit",
        "device_free",
        "step",
        "phase",
        "pools",
    ):
        if k in st:
            out[k] = st[k]
    return out


def setting_seen(rec: dict) -> dict:
    """The allocator setting as the job's own stats show it."""
    seen: dict[str, Any] = {}
    for key in ("at_end", "at_raise", "after_64mib"):
        st = rec.get(key) or {}
        pools = st.get("pools") or {}
        if isinstance(pools, dict) and pools and "error" not in pools:
            seen["expandable_segments"] = any(
                (p or {}).get("expandable", 0) > 0 for p in pools.values() if isinstance(p, dict)
            )
        ms = st.get("memory_stats") or {}
        if "max_split_size" in ms:
            seen["max_split_size"] = ms["max_split_size"]
        if seen:
            break
    for ev in rec.get("oom_events") or []:
        pools = ev.get("pools") or {}
        if isinstance(pools, dict) and "error" not in pools and pools:
            seen["expandable_segments"] = seen.get("expandable_segments") or any(
                (p or {}).get("expandable", 0) > 0 for p in pools.values() if isinstance(p, dict)
            )
    return seen


def nonpt_growth(rec: dict) -> int | None:
    """Device memory the job took beyond PyTorch's reserved, after its start (serial runs):
    free at start - free now - reserved now."""
    fs = rec.get("free_at_start")
    st = rec.get("at_end") or ((rec.get("oom_events") or [None])[-1]) or rec.get("at_raise")
    if fs is None or not st:
        return None
    mg = st.get("mem_get_info")
    res = (st.get("memory_stats") or {}).get("reserved_bytes.all.current")
    if not mg or res is None:
        return None
    return int(fs - mg[0] - res)


def smi() -> str:
    try:
        return subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,memory.used",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as e:
        return repr(e)


# --------------------------------------------------------------------------------------------
# summary.md
# --------------------------------------------------------------------------------------------


def _sz(n: Any) -> str:
    return C.fmt_size(n) if isinstance(n, (int, float)) else "-"


def _out(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("kind") == "skipped":
        return "skipped"
    if r["outcome"] == "oom":
        return f"OOM@{r.get('oom_step')}"
    if r["outcome"] == "finished":
        return f"finished {r.get('steps_done')}"
    return r["outcome"]


def _fixed(native: dict, other: dict | None) -> str:
    if other is None:
        return "-"
    if other.get("kind") == "skipped":
        return "skipped"
    if other["outcome"] == "finished":
        return "yes"
    if other["outcome"] == "oom":
        return f"no (OOM@{other.get('oom_step')})"
    return other["outcome"]


def summarize(rows: list[dict]) -> str:
    meta = next((r for r in rows if r.get("kind") == "meta"), {})
    runs = [r for r in rows if r.get("kind") in ("run", "skipped")]
    by: dict[tuple, dict[str, dict]] = {}
    for r in runs:
        if r["job"] in ("ctx_check", "first_call", "margin") or r.get("role") == "probe":
            continue
        key = (r["card_gib"], r["job"], r["scale"], r["role"])
        by.setdefault(key, {})[r["setting"]] = r
    out = ["# Small cards: native OOMs and the allocator settings", ""]
    if meta:
        out += [
            f"GPU: {meta.get('gpu')}; torch {meta.get('torch')} (CUDA {meta.get('torch_cuda')}); "
            f"launcher {meta.get('launcher')}; holder mode {meta.get('holder_mode')}; job context "
            f"on the card {_sz(meta.get('context_bytes'))}; setting reaches the job: "
            f"{meta.get('setting_reaches_job')}; dry run: {meta.get('dry_run_cpu')}",
            "",
        ]
    out += [
        "Cards are emulated (a holder process takes the rest of the GPU): the raw messages print "
        "the GPU's total and list the holder; U, R and free below are as printed (the same on "
        "the real card); `total` on the real card would be the card size.",
        "",
        "U = reserved by PyTorch but unallocated, R = tried to allocate, free = printed free, "
        "A = allocated by PyTorch, all from the native run's message.",
        "",
        "| card | job | role | scale | native | U | R | free | A | fixed by ES? "
        "| fixed by ms128? |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(by, key=lambda k: (k[0] or 0, k[1], k[2] or 0)):
        card, job, scale, role = key
        s = by[key]
        nat = s.get("native")
        if nat is None:
            continue
        fig = (nat.get("figures") or {}) if nat.get("kind") == "run" else {}
        oom = nat.get("kind") == "run" and nat["outcome"] == "oom"
        out.append(
            f"| {card:g} | {job} | {role} | {scale} | {_out(nat)} | "
            f"{_sz(fig.get('reserved_unallocated'))} | {_sz(fig.get('requested'))} | "
            f"{_sz(fig.get('free'))} | {_sz(fig.get('allocated_by_pytorch'))} | "
            f"{_fixed(nat, s.get('es')) if oom else '-'} | "
            f"{_fixed(nat, s.get('ms128')) if oom else '-'} |"
        )
    probes = [r for r in rows if r.get("role") == "probe"]
    if probes:
        out += [
            "",
            "## Probes (whole GPU, several at once)",
            "",
            "| card | job | scale | outcome | steady | peak allocated | peak reserved "
            "| S_a | S_r |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(probes, key=lambda r: (r["card_gib"], r["job"])):
            fit = r.get("fit") or {}
            sa = f"{fit['S_a']:.3f}" if fit.get("S_a") else "-"
            sr = f"{fit['S_r']:.3f}" if fit.get("S_r") else "-"
            out.append(
                f"| {r['card_gib']:g} | {r['job']} | {r['scale']} | {_out(r)} | "
                f"{_sz(r.get('steady_allocated'))} | {_sz(r.get('max_memory_allocated'))} | "
                f"{_sz(r.get('max_memory_reserved'))} | {sa} | {sr} |"
            )
    fc = [r for r in runs if r["job"] == "first_call"]
    if fc:
        out += [
            "",
            "## First CUDA call on a full GPU",
            "",
            "| holder leaves | setting | outcome | exception | message |",
            "|---|---|---|---|---|",
        ]
        for r in fc:
            msg = (r.get("message") or "").replace("|", "/")[:160]
            out.append(
                f"| {_sz(r.get('holder_leaves'))} | {r['setting']} | {_out(r)} | "
                f"{r.get('exception') or '-'} | {msg} |"
            )
    mg = [r for r in runs if r["job"] == "margin"]
    if mg:
        out += [
            "",
            "## Margin: free = R + S before the request",
            "",
            "| request | slack asked | free before request (bytes) | outcome | printed free |",
            "|---|---|---|---|---|",
        ]
        for r in mg:
            fig = r.get("figures") or {}
            out.append(
                f"| {_sz(r.get('request_bytes'))} | {r['role']} | "
                f"{r.get('free_before_request')} | {_out(r)} | {_sz(fig.get('free'))} |"
            )
    sk = [r for r in rows if r.get("kind") == "skipped"]
    out += [
        "",
        f"{len([r for r in rows if r.get('kind') == 'run'])} runs, {len(sk)} skipped "
        "on the deadline.",
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output folder (rows.jsonl, summary.md, logs/, records/)")
    ap.add_argument("--only", default="", help="comma-separated jobs/items")
    ap.add_argument("--cards", default=",".join(str(c) for c in CARDS))
    ap.add_argument("--deadline-s", type=float, default=505.0)
    ap.add_argument("--run-timeout-s", type=float, default=60.0)
    ap.add_argument("--probe-timeout-s", type=float, default=90.0)
    ap.add_argument("--probe-scale", type=float, default=0.6)
    ap.add_argument("--parallel", type=int, default=6, help="probes at a time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--holder-mode", choices=["card", "start"], default="card")
    ap.add_argument("--launcher", choices=["fork", "subprocess"], default="fork")
    ap.add_argument("--dry-run-cpu", action="store_true")
    ap.add_argument("--summarize", metavar="DIR", help="rewrite DIR/summary.md from rows.jsonl")
    a = ap.parse_args()
    if a.summarize:
        d = Path(a.summarize)
        rows = [json.loads(ln) for ln in (d / "rows.jsonl").read_text().splitlines() if ln.strip()]
        (d / "summary.md").write_text(summarize(rows))
        return 0
    if not a.out:
        ap.error("--out is required")
    r = Runner(a)
    # ``timeout`` sends SIGTERM: end through ``finally`` (summary written, holder closed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        r.start()
        r.plan()
        r.emit(r.meta)
        r.probes()
        r.summary()
        r.tiers()
    finally:
        r.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
