"""table.py and oomtext.py on synthetic sweep records built from real H200 OOM messages.

The messages are copied from ``evaluation/gpu/logs`` (torch 2.11.0+cu130, NVIDIA H200), named per
test. No torch, no GPU:

    python -m pytest evaluation/gpu/sweep/test_table.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oomtext  # noqa: E402
import table  # noqa: E402

pytestmark = pytest.mark.unit

GiB = 1024**3
MiB = 1024**2
TIP = (
    " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
    "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management "
    " (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-"
    "pytorch-cuda-alloc-conf)"
)
# frag_pinned__baseline.log (a 7 GiB memory fraction)
FRAG_PINNED = (
    "CUDA out of memory. Tried to allocate 4.20 GiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 136.14 GiB is free. Including non-PyTorch memory, this process has 3.65 GiB memory "
    "in use. 7.00 GiB allowed; Of the allocated memory 1.26 GiB is allocated by PyTorch, and "
    "1.89 GiB is reserved by PyTorch but unallocated." + TIP
)
# leak_total_loss__baseline.log (full GPU)
LEAK = (
    "CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 95.12 MiB is free. Including non-PyTorch memory, this process has 139.70 GiB memory "
    "in use. Of the allocated memory 138.72 GiB is allocated by PyTorch, and 256.81 MiB is "
    "reserved by PyTorch but unallocated." + TIP
)
# gpu_shared__baseline.log (another process on the GPU)
SHARED = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of "
    "which 53.56 MiB is free. Process 1819 has 126.79 GiB memory in use. Including non-PyTorch "
    "memory, this process has 12.94 GiB memory in use. Of the allocated memory 12.28 GiB is "
    "allocated by PyTorch, and 960.00 KiB is reserved by PyTorch but unallocated." + TIP
)
# async_backend__baseline.log and fraction_cap_async__baseline.log (backend:cudaMallocAsync)
ASYNC_FULL = (
    "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 138.07 GiB\n"
    "Requested               : 1.50 GiB\n"
    "Device limit            : 139.80 GiB\n"
    "Free (according to CUDA): 33.12 MiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 17179869184.00 GiB"
)
ASYNC_CAP = (
    "Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 6.28 GiB\n"
    "Requested               : 1024.00 MiB\n"
    "Device limit            : 139.80 GiB\n"
    "Free (according to CUDA): 132.75 GiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 7.00 GiB"
)


def g(x: float) -> int:
    return round(x * GiB)


def m(x: float) -> int:
    return round(x * MiB)


# -- oomtext --------------------------------------------------------------------------------------
def test_native_message_under_a_fraction_gives_every_figure() -> None:
    f = oomtext.parse(FRAG_PINNED)
    assert f.family == "native"
    assert (f.requested, f.total, f.free, f.allowed) == (g(4.20), g(139.80), g(136.14), g(7.00))
    assert (f.allocated, f.unallocated, f.process) == (g(1.26), g(1.89), g(3.65))
    assert f.reserved == g(1.26) + g(1.89)
    # under the cap: room = 7.00 - 3.15 GiB = 3.85 GiB < free; H = 1.89 + 3.85 - 4.20 GiB
    assert f.room == g(7.00) - g(1.26) - g(1.89)
    assert f.headroom == g(1.89) + g(7.00) - g(1.26) - g(1.89) - g(4.20)
    d = f.derived()
    assert d["unallocated_share_of_reserved"] == pytest.approx(1.89 / 3.15)


def test_full_gpu_message_room_is_the_device_free() -> None:
    f = oomtext.parse(LEAK)
    assert f.allowed is None
    assert f.room == m(95.12)
    assert f.headroom == m(256.81) + m(95.12) - m(128)
    assert f.derived()["allocated_share_of_total"] == pytest.approx(138.72 / 139.80)


def test_other_processes_are_listed_with_their_bytes() -> None:
    f = oomtext.parse(SHARED)
    assert f.others == [(1819, g(126.79))]
    assert f.unallocated == 960 * 1024
    assert f.process == g(12.94)


def test_async_message_no_limit_and_no_unallocated_figure() -> None:
    f = oomtext.parse(ASYNC_FULL)
    assert f.family == "async"
    assert (f.allocated, f.requested, f.total, f.free) == (g(138.07), g(1.50), g(139.80), m(33.12))
    assert f.allowed is None  # 17179869184.00 GiB is 2^64 bytes: no fraction set
    assert f.unallocated is None and f.headroom is None


def test_async_message_under_a_fraction() -> None:
    f = oomtext.parse(ASYNC_CAP)
    assert f.allowed == g(7.00)
    assert f.room == g(7.00) - g(6.28)


def test_raw_and_other_text() -> None:
    assert oomtext.parse("RuntimeError: CUDA error: out of memory").family == "raw"
    assert oomtext.parse("step 3 loss 0.1 mem 12.3 GiB").family == "none"
    assert oomtext.parse("").family == "none"


# -- table ----------------------------------------------------------------------------------------
def at_oom(free: int, allocated: int, reserved: int, **stats: int) -> dict[str, Any]:
    return {
        "free": free,
        "total": g(139.80),
        "allocated": allocated,
        "reserved": reserved,
        "stats": stats,
        "pools": {},
    }


def point(name: str, setting: str, outcome: str, **kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "type": "point",
        "name": name,
        "group": name[0],
        "mode": "full",
        "job": "alloc",
        "setting": setting,
        "conf": kw.pop("conf", ""),
        "outcome": outcome,
        "design": {"describe": f"design of {name}", "slack": m(84), "headroom": m(24)},
        "log_head": [
            "starting job on NVIDIA H200 torch 2.11.0+cu130",
            "model loaded (139.3 GiB on the GPU)",
        ],
        "printed": [],
    }
    if outcome == "oom":
        message = kw.pop("message")
        rec.update(
            message=message,
            exception="OutOfMemoryError",
            traceback='Traceback (most recent call last):\n  File "jobs.py", line 1, '
            f"in alloc_steps\ntorch.OutOfMemoryError: {message}\n",
        )
    rec.update(kw)
    return rec


def write(folder: Path, setting: str, recs: list[dict[str, Any]], meta: bool = True) -> None:
    lines = [json.dumps({"type": "meta", "setting": setting, "conf": ""})] if meta else []
    lines += [json.dumps(r) for r in recs]
    (folder / f"sweep-{setting}.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """One point under four settings: native OOM at step 1, ES gets through, MS128 the same OOM,
    async OOM, async+ES OOM one step later; a second point with no native OOM (a control)."""
    write(
        tmp_path,
        "native",
        [
            point(
                "A-x",
                "native",
                "oom",
                step=1,
                where="activations",
                request_bytes=m(128),
                message=LEAK,
                at_oom=at_oom(
                    m(95),
                    g(138.72),
                    g(138.72) + m(257),
                    **{
                        "inactive_split_bytes.large_pool.current": m(257),
                        "inactive_split_bytes.small_pool.current": 0,
                    },
                ),
            ),
            point("H-ok", "native", "ok", steps_done=5),
        ],
    )
    write(tmp_path, "es", [point("A-x", "es", "ok", steps_done=5, conf="expandable_segments:True")])
    write(
        tmp_path,
        "ms128",
        [
            point(
                "A-x",
                "ms128",
                "oom",
                step=1,
                where="activations",
                message=LEAK,
                conf="max_split_size_mb:128",
            ),
        ],
    )
    write(
        tmp_path,
        "async",
        [
            point(
                "A-x",
                "async",
                "oom",
                step=1,
                where="activations",
                message=ASYNC_FULL,
                conf="backend:cudaMallocAsync",
            ),
        ],
    )
    write(
        tmp_path,
        "async_es",
        [
            point(
                "A-x",
                "async_es",
                "oom",
                step=2,
                where="activations",
                message=ASYNC_FULL,
                conf="backend:cudaMallocAsync,expandable_segments:True",
            ),
        ],
    )
    return tmp_path


def rows(t: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["point"]: r for r in t["rows"]}


def test_fixed_means_the_rerun_got_through_every_later_step(sweep_dir: Path) -> None:
    r = rows(table.build(sweep_dir, None))["A-x"]
    assert r["fixed"]["es"] == {"fixed": True, "text": "yes"}
    assert r["fixed"]["ms128"] == {"fixed": False, "text": "no (same step)"}
    assert r["fixed"]["async_es"] == {"fixed": False, "text": "no (step 2 activations)"}
    assert r["outcomes"]["native"] == "OOM step 1 (activations)"


def test_an_oom_while_building_under_the_setting_is_not_a_fix() -> None:
    base = {"outcome": "oom", "step": 1, "where": "activations"}
    assert table.fixed(base, {"outcome": "setup-oom", "step": 0, "where": "setup"}) == (
        False,
        "no (OOM before step 1)",
    )
    assert table.fixed(base, {"outcome": "crashed"}) == (None, "? (crashed)")


def test_a_control_without_baseline_oom_is_not_counted_as_fixed(sweep_dir: Path) -> None:
    r = rows(table.build(sweep_dir, None))["H-ok"]
    assert r["fixed"]["es"] == {"fixed": None, "text": "not run"}  # es has no record of it
    assert r["outcomes"]["native"] == "ok" and r["figures"] == {}


def test_figures_from_the_message_beside_the_exact_ones(sweep_dir: Path) -> None:
    fig = rows(table.build(sweep_dir, None))["A-x"]["figures"]
    msg, exact = fig["native"]["message"], fig["native"]["exact"]
    assert msg["unallocated"] == m(256.81) and msg["headroom"] == m(256.81) + m(95.12) - m(128)
    assert exact["unallocated"] == m(257) and exact["room"] == m(95)
    assert exact["headroom"] == m(257) + m(95) - m(128)
    assert exact["unallocated_large_pool"] == m(257)
    assert fig["async"]["message"]["family"] == "async"


def test_summary_sets_the_recommendation_against_the_measured_fix(sweep_dir: Path) -> None:
    calls: list[tuple[str, str | None]] = []

    def stub(text: str, conf: str | None) -> dict[str, Any]:
        calls.append((text, conf))
        return {
            "kind": "fragmentation",
            "alloc_conf": "expandable_segments:True",
            "contributing": [],
            "summary": "",
            "first_action": None,
            "growth": None,
        }

    t = table.build(sweep_dir, stub)
    s = t["summary"]
    assert s["native_oom"] == 1 and s["fixed_by_es"] == ["A-x"] and s["fixed_by_ms128"] == []
    assert s["recommended_and_fixed"] == ["A-x"] and s["recommended_not_fixed"] == []
    # the native log is diagnosed with no setting, the async one with its backend
    confs = {c for _, c in calls}
    assert None in confs and "backend:cudaMallocAsync" in confs
    full = next(text for text, c in calls if c is None and "model loaded" in text)
    assert full.endswith("torch.OutOfMemoryError: " + LEAK + "\n")


def test_a_setting_recommended_where_the_rerun_still_failed_is_listed(sweep_dir: Path) -> None:
    def stub(text: str, conf: str | None) -> dict[str, Any]:
        return {
            "kind": "fragmentation",
            "alloc_conf": "max_split_size_mb:128",
            "contributing": [],
            "summary": "",
            "first_action": None,
            "growth": None,
        }

    s = table.build(sweep_dir, stub)["summary"]
    assert s["recommended_not_fixed"] == ["A-x"]  # max_split_size_mb:128 did not remove it


def test_todays_diagnosis_is_recorded_as_the_auditor_gives_it(sweep_dir: Path) -> None:
    diag = table.auditor(table.REPO / "operator")
    if diag is None:
        pytest.skip("gpu_auditor not importable")
    from gpu_auditor.diagnosis import diagnose

    r = rows(table.build(sweep_dir, diag))["A-x"]
    rec = json.loads((sweep_dir / "sweep-native.jsonl").read_text().splitlines()[1])
    direct = diagnose(table.log_text(rec)).to_json_dict()
    got = r["diagnosis"]["native"]["log"]
    assert (got["kind"], got["alloc_conf"]) == (
        direct["kind"],
        direct["recommendation"]["alloc_conf"],
    )
    assert "message_only" in r["diagnosis"]["native"]


def test_bad_lines_are_kept_out_and_a_later_record_wins(tmp_path: Path) -> None:
    first = point("A-x", "native", "ok", steps_done=5)
    again = point("A-x", "native", "oom", step=1, where="activations", message=LEAK)
    (tmp_path / "sweep-native.jsonl").write_text(
        json.dumps(first) + "\n{not json\n[1, 2]\n" + json.dumps(again) + "\n"
    )
    t = table.build(tmp_path, None)
    assert rows(t)["A-x"]["outcomes"]["native"] == "OOM step 1 (activations)"
    assert [x["line"] for x in t["meta"]["native"] if x["type"] == "bad-line"] == [2, 3]


def test_no_sweep_files_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert table.main([str(tmp_path), "--no-diagnosis"]) == 2
    assert "no sweep-*.jsonl files" in capsys.readouterr().err


def test_main_writes_json_and_a_markdown_row_per_point(sweep_dir: Path, tmp_path: Path) -> None:
    out_json, out_md = tmp_path / "t.json", tmp_path / "t.md"
    assert (
        table.main([str(sweep_dir), "--no-diagnosis", "--json", str(out_json), "--md", str(out_md)])
        == 0
    )
    data = json.loads(out_json.read_text())
    assert [r["point"] for r in data["rows"]] == ["A-x", "H-ok"]
    md = out_md.read_text().splitlines()
    a_row = next(line for line in md if line.startswith("| A-x |"))
    cells = [c.strip() for c in a_row.strip("|").split("|")]
    assert cells[2:9] == ["128", "95", "257", "0.18%", "95", "224", "99%"]
    assert cells[9:14] == [
        "OOM step 1 (activations)",
        "yes",
        "no (same step)",
        "OOM step 1 (activations)",
        "no (step 2 activations)",
    ]
    assert any(line.startswith("| H-ok |") for line in md)
    assert "Points: 2; native OOM: 1; fixed by expandable_segments: 1" in out_md.read_text()
