"""The sweep runner end to end on a CPU, against a fake CUDA allocator that packs perfectly.

What this can check without a GPU: the runner's bookkeeping (ballast sizing from the reference,
the top-up per point, the cap per point, full points before capped ones, records, resume after a
crash, the deadline) and the design arithmetic: an allocator with no fragmentation at all runs
out exactly where the point's headroom after perfect packing says, at the step and allocation
a hand simulation gives. What it cannot check: the native allocator's real layout (that is what
the GPU run measures). Needs torch (a CPU build is enough); skipped without it.

    python -m pytest evaluation/gpu/sweep/test_sweep_cpu.py
"""

from __future__ import annotations

import json
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jobs  # noqa: E402
import points  # noqa: E402
import sweep  # noqa: E402
import table  # noqa: E402
from points import GiB, MiB  # noqa: E402

pytestmark = pytest.mark.unit


def fmt(n: int) -> str:
    """torch's format_size."""
    if n <= 1024:
        return f"{n} bytes"
    for unit, scale in (("KiB", 1024), ("MiB", 1024**2)):
        if n < scale * 1024:
            return f"{n / scale:.2f} {unit}"
    return f"{n / 1024**3:.2f} GiB"


class FakeCuda:
    """An allocator with no cache and no fragmentation: reserved == allocated, 512 B rounding."""

    def __init__(self, total: int = 80 * GiB, context: int = 500 * MiB) -> None:
        self.total, self.context = total, context
        self.allocated = 0
        self.peak = 0
        self.cap: int | None = None

    def free(self) -> int:
        return self.total - self.context - self.allocated

    def empty(self, nbytes: int) -> Any:
        size = -(-nbytes // 512) * 512
        limit = self.total - self.context
        if self.cap is not None:
            limit = min(limit, self.cap)
        if self.allocated + size > limit:
            allowed = f"{fmt(self.cap)} allowed; " if self.cap is not None else ""
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {fmt(size)}. GPU 0 has a total capacity "
                f"of {fmt(self.total)} of which {fmt(self.free())} is free. Including non-PyTorch"
                f" memory, this process has {fmt(self.context + self.allocated)} memory in use. "
                f"{allowed}Of the allocated memory {fmt(self.allocated)} is allocated by PyTorch,"
                " and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated"
                " memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            )
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        t = torch.empty(0, dtype=torch.uint8)
        weakref.finalize(t, self._release, size)
        return t

    def _release(self, size: int) -> None:
        self.allocated -= size

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.allocated,
            "reserved_bytes.all.current": self.allocated,
            "requested_bytes.all.current": self.allocated,
            "inactive_split_bytes.all.current": 0,
        }

    def set_fraction(self, fraction: float, device: int = 0) -> None:
        self.cap = int(fraction * self.total)


def install(monkeypatch: pytest.MonkeyPatch, warm_up: bool) -> FakeCuda:
    f = FakeCuda()
    cuda = torch.cuda
    patches = {
        "is_available": lambda: True,
        "init": lambda: None,
        "get_device_properties": lambda d=0: SimpleNamespace(total_memory=f.total),
        "get_device_name": lambda d=0: "Fake GPU",
        "mem_get_info": lambda d=0: (f.free(), f.total),
        "memory_allocated": lambda d=0: f.allocated,
        "memory_reserved": lambda d=0: f.allocated,
        "max_memory_allocated": lambda d=0: f.peak,
        "max_memory_reserved": lambda d=0: f.peak,
        "memory_stats": lambda d=0: f.stats(),
        "memory_snapshot": lambda: [],
        "set_per_process_memory_fraction": f.set_fraction,
        "synchronize": lambda d=None: None,
        "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda d=None: setattr(f, "peak", f.allocated),
    }
    for name, fn in patches.items():
        monkeypatch.setattr(cuda, name, fn)
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None, raising=False)
    monkeypatch.setattr(jobs, "empty", f.empty)
    monkeypatch.setattr(jobs, "DEVICE", "cpu")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "restored-after-test")
    if not warm_up:
        monkeypatch.setattr(jobs, "warm_up", lambda: None)  # CPU time; one test keeps it
    return f


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    return install(monkeypatch, warm_up=False)


@pytest.fixture
def fake_warm(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    return install(monkeypatch, warm_up=True)


def packed(p: points.Point) -> tuple[str, int | None, str | None]:
    """Hand simulation of a point on an allocator that packs perfectly (no slack at all)."""
    avail = p.budget() - (p.pattern.live - p.pattern.hidden)
    for step in range(1, p.steps + 1):
        if p.dynamics == "leak":
            if p.grow > avail:
                return "oom", step, "kept"
            avail -= p.grow
        if p.request > avail:
            return "oom", step, "activations"
        if p.dynamics == "state" and step == 1:
            if p.grow > avail:
                return "oom", step, "optimizer-state"
            avail -= p.grow
    return "ok", None, None


def non_mlp() -> list[points.Point]:
    return [p for p in points.POINTS if p.job == "alloc"]


def records(out: Path, setting: str = "native") -> list[dict[str, Any]]:
    lines = (out / f"sweep-{setting}.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_every_point_runs_out_where_perfect_packing_says(
    fake_warm: FakeCuda, tmp_path: Path
) -> None:
    names = ",".join(p.name for p in non_mlp())
    rc = sweep.main(
        [
            "--setting",
            "native",
            "--out",
            str(tmp_path),
            "--ref",
            str(tmp_path / "ref.json"),
            "--only",
            names,
        ]
    )
    assert rc == 0
    recs = records(tmp_path)
    assert recs[0]["type"] == "meta" and recs[-1]["type"] == "end"
    got = {r["name"]: r for r in recs if r["type"] == "point"}
    assert list(got) == [p.name for p in points.run_order(non_mlp())]
    for p in non_mlp():
        r = got[p.name]
        outcome, step, where = packed(p)
        assert (r["outcome"], r.get("step"), r.get("where")) == (outcome, step, where), p.name
        assert r["cleanup"].get("ballast_rebuilt") is None, p.name
    assert fake_warm.allocated == 0  # everything freed, ballast included


def test_full_points_get_their_budget_and_capped_points_their_cap(
    fake: FakeCuda, tmp_path: Path
) -> None:
    rc = sweep.main(
        ["--setting", "native", "--out", str(tmp_path), "--only", "A-full-u48-h24,J-cap-u960-h-256"]
    )
    assert rc == 0
    got = {r["name"]: r for r in records(tmp_path) if r["type"] == "point"}
    full = got["A-full-u48-h24"]
    # budget 168 MiB (80 live + 64 R + 24 H); the top-up is rounded down to 2 MiB and the
    # ballast leaves the largest budget + 64 MiB, rounded the same way
    free = full["before_pattern"]["free"]
    assert 168 * MiB <= free < 168 * MiB + 4 * MiB
    capped = got["J-cap-u960-h-256"]
    assert capped["allowed_bytes"] == pytest.approx((1600 + 2048 - 256) * MiB, abs=1)
    assert "allowed" in capped["message"]
    assert fake.cap == fake.total  # reset to 1.0 after the capped point


def test_a_point_the_process_died_in_is_recorded_as_crashed_and_not_rerun(
    fake: FakeCuda, tmp_path: Path
) -> None:
    (tmp_path / "sweep-native.inflight").write_text("A-full-u48-h8")
    rc = sweep.main(
        ["--setting", "native", "--out", str(tmp_path), "--only", "A-full-u48-h8,A-full-u48-h24"]
    )
    assert rc == 0
    got = [(r["name"], r["outcome"]) for r in records(tmp_path) if r["type"] == "point"]
    assert got == [("A-full-u48-h8", "crashed"), ("A-full-u48-h24", "ok")]
    rc = sweep.main(
        ["--setting", "native", "--out", str(tmp_path), "--only", "A-full-u48-h8,A-full-u48-h24"]
    )
    assert rc == 0
    assert len([r for r in records(tmp_path) if r["type"] == "point"]) == 2


def test_past_the_deadline_no_point_starts(fake: FakeCuda, tmp_path: Path) -> None:
    rc = sweep.main(
        ["--setting", "native", "--out", str(tmp_path), "--deadline-s", "1e-9", "--only", "A"]
    )
    assert rc == 0
    recs = records(tmp_path)
    assert [r for r in recs if r["type"] == "point"] == []
    assert len(recs[-1]["skipped"]) == len(points.select("A"))


def test_other_settings_size_the_ballast_from_the_reference(fake: FakeCuda, tmp_path: Path) -> None:
    ref = tmp_path / "ref.json"
    assert (
        sweep.main(
            [
                "--setting",
                "native",
                "--out",
                str(tmp_path),
                "--ref",
                str(ref),
                "--only",
                "H-full-none-h-16",
            ]
        )
        == 0
    )
    fake.context += 6 * MiB  # the next process has 6 MiB less free: the ballast stays the same
    assert (
        sweep.main(
            [
                "--setting",
                "es",
                "--out",
                str(tmp_path),
                "--ref",
                str(ref),
                "--only",
                "H-full-none-h-16",
            ]
        )
        == 0
    )
    native = records(tmp_path, "native")
    es = records(tmp_path, "es")
    assert es[0]["conf"] == "expandable_segments:True"
    assert es[0]["ref_free_shift"] == -6 * MiB
    free_native = native[1]["before_pattern"]["free"]
    assert es[1]["before_pattern"]["free"] == free_native - 6 * MiB


def test_far_from_the_reference_the_ballast_keeps_the_points_room(
    fake: FakeCuda, tmp_path: Path
) -> None:
    ref = tmp_path / "ref.json"
    assert (
        sweep.main(
            [
                "--setting",
                "native",
                "--out",
                str(tmp_path),
                "--ref",
                str(ref),
                "--only",
                "H-full-none-h-16",
            ]
        )
        == 0
    )
    fake.context += 2 * GiB  # another process took 2 GiB since: the reference no longer fits
    assert (
        sweep.main(
            [
                "--setting",
                "es",
                "--out",
                str(tmp_path),
                "--ref",
                str(ref),
                "--only",
                "H-full-none-h-16",
            ]
        )
        == 0
    )
    native, es = records(tmp_path, "native"), records(tmp_path, "es")
    assert es[-1]["ballast_from_own_free"] == native[0]["free_after_warmup"] - 2 * GiB
    assert es[1]["before_pattern"]["free"] == native[1]["before_pattern"]["free"]
    assert es[1]["outcome"] == "oom"


def test_the_table_joins_the_fake_run(fake: FakeCuda, tmp_path: Path) -> None:
    names = "A-full-u48-h-8,A-full-u48-h24,J-cap-none-h-512"
    for s in ("native", "es"):
        assert (
            sweep.main(
                [
                    "--setting",
                    s,
                    "--out",
                    str(tmp_path),
                    "--ref",
                    str(tmp_path / "ref.json"),
                    "--only",
                    names,
                ]
            )
            == 0
        )
    t = table.build(tmp_path, None)
    rows = {r["point"]: r for r in t["rows"]}
    assert rows["A-full-u48-h-8"]["fixed"]["es"]["text"] == "no (same step)"
    assert rows["A-full-u48-h24"]["fixed"]["es"]["text"] == "n/a (baseline ok)"
    assert rows["J-cap-none-h-512"]["outcomes"]["ms128"] == "not run"
    fig = rows["A-full-u48-h-8"]["figures"]["native"]["message"]
    assert fig["requested"] == 64 * MiB and fig["unallocated"] == 0


def test_mlp_job_trains_and_records_its_steps_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=0: 3 * GiB // 2)
    printed: list[str] = []
    out = jobs.mlp_steps(points.Mlp(width=32, depth=2, tokens=(8, 16, 4)), printed)
    assert out == {"outcome": "ok", "steps_done": 3}
    assert [line.split(" loss ")[0] for line in printed] == ["step 1", "step 2", "step 3"]
    assert printed[0].endswith("mem 1.50 GiB")


def test_a_job_that_breaks_is_recorded_and_the_run_goes_on(
    fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = jobs.alloc_steps

    def broken(pt: points.Point, printed: list[str]) -> dict[str, Any]:
        if pt.name == "A-full-u48-h8":
            raise KeyError("a bug in the runner")
        return real(pt, printed)

    monkeypatch.setattr(jobs, "alloc_steps", broken)
    rc = sweep.main(
        [
            "--setting",
            "native",
            "--out",
            str(tmp_path),
            "--only",
            "A-full-u48-h8,A-full-u48-h-8,A-full-u48-h24",
        ]
    )
    assert rc == 0
    got = {r["name"]: r for r in records(tmp_path) if r["type"] == "point"}
    assert (got["A-full-u48-h8"]["outcome"], got["A-full-u48-h8"]["where"]) == ("error", "runner")
    assert "KeyError" in got["A-full-u48-h8"]["traceback"]
    assert got["A-full-u48-h-8"]["outcome"] == "oom" and got["A-full-u48-h24"]["outcome"] == "ok"
    assert fake.allocated == 0
