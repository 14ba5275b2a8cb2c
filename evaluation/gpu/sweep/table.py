#!/usr/bin/env python3
"""Join the sweep's per-setting JSON lines into one table per point (no torch needed).

For each point: its design, the figures its native OOM message gives (R, free, U, U/reserved,
room, headroom after perfect packing, allocated share of the GPU) beside the exact ones from
``memory_stats`` at the failure, the outcome under every setting, whether
``expandable_segments:True`` / ``max_split_size_mb:128`` removed the OOM (the job got through
every later step), and, when ``gpu_auditor`` can be imported, today's diagnosis of the point's
log: its kind and ``recommendation.alloc_conf`` (the "before" of the calibration).

    python3 evaluation/gpu/sweep/table.py DIR --json evaluation/results/gpu-sweep.json \\
        --md evaluation/results/gpu-sweep.md

DIR holds ``sweep-SETTING.jsonl`` files (missing settings show as "not run"). ``gpu_auditor``
is looked up under ``--auditor`` (default: this repository's ``operator/``); ``--no-diagnosis``
skips it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oomtext  # noqa: E402

REPO = HERE.parent.parent.parent
SETTINGS = ("native", "es", "ms128", "async", "async_es")
BASELINE_OF = {"es": "native", "ms128": "native", "async_es": "async"}
LABEL = {
    "native": "native",
    "es": "expandable_segments:True",
    "ms128": "max_split_size_mb:128",
    "async": "cudaMallocAsync",
    "async_es": "cudaMallocAsync + expandable_segments:True",
}
MiB = 1024**2

Record = dict[str, Any]
Diagnose = Callable[[str, str | None], dict[str, Any]]


class SweepDataError(ValueError):
    """The input folder holds no sweep records (or unreadable ones)."""


def load(folder: Path) -> tuple[dict[str, list[Record]], dict[str, dict[str, Record]]]:
    """(meta/end records per setting, point records per setting by name). Bad lines are kept
    out with a note in the meta list rather than failing the whole table."""
    metas: dict[str, list[Record]] = {}
    points: dict[str, dict[str, Record]] = {}
    files = sorted(folder.glob("sweep-*.jsonl"))
    if not files:
        raise SweepDataError(f"no sweep-*.jsonl files in {folder}")
    for path in files:
        setting = path.stem.removeprefix("sweep-")
        metas.setdefault(setting, [])
        points.setdefault(setting, {})
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                metas[setting].append({"type": "bad-line", "line": i, "error": str(e)})
                continue
            if not isinstance(rec, dict):
                metas[setting].append({"type": "bad-line", "line": i, "error": "not an object"})
            elif rec.get("type") == "point" and isinstance(rec.get("name"), str):
                points[setting][rec["name"]] = rec  # a later record (a re-run) wins
            else:
                metas[setting].append(rec)
    return metas, points


def log_text(rec: Record, printed: bool = True) -> str | None:
    """The log a container would hold: banner, (the job's step lines,) the traceback."""
    tb = rec.get("traceback")
    if not tb:
        return None
    head = list(rec.get("log_head") or [])
    lines = (head if printed else head[:1]) + (list(rec.get("printed") or []) if printed else [])
    return "\n".join([*lines, tb.rstrip("\n")]) + "\n"


def outcome_text(rec: Record | None) -> str:
    if rec is None:
        return "not run"
    o = rec.get("outcome", "?")
    if o == "oom":
        return f"OOM step {rec.get('step')} ({rec.get('where')})"
    if o == "ok":
        return "ok"
    if o == "setup-oom":
        return "OOM before step 1 (setup)"
    return str(o)


def fixed(base: Record | None, other: Record | None) -> tuple[bool | None, str]:
    """Did the setting remove the baseline's OOM (every later step ran)?"""
    if base is None or other is None:
        return None, "not run"
    if base.get("outcome") != "oom":
        return None, f"n/a (baseline {base.get('outcome')})"
    o = other.get("outcome")
    if o == "ok":
        return True, "yes"
    if o == "oom":
        if other.get("step") == base.get("step") and other.get("where") == base.get("where"):
            return False, "no (same step)"
        return False, f"no (step {other.get('step')} {other.get('where')})"
    if o == "setup-oom":  # the job ran out before its first step under the setting
        return False, "no (OOM before step 1)"
    return None, f"? ({o})"


def exact_figures(rec: Record | None) -> dict[str, Any] | None:
    """The same figures from memory_stats / mem_get_info at the failure (bytes, exact)."""
    if rec is None or not isinstance(rec.get("at_oom"), dict):
        return None
    s = rec["at_oom"]
    stats = s.get("stats") or {}
    alloc, res, free = s.get("allocated"), s.get("reserved"), s.get("free")
    if not all(isinstance(v, int) for v in (alloc, res, free)):
        return None
    allowed = rec.get("allowed_bytes")
    room = free if allowed is None else min(free, allowed - res)
    req = rec.get("request_bytes") or None
    out: dict[str, Any] = {
        "requested": req,
        "free": free,
        "allowed": allowed,
        "allocated": alloc,
        "reserved": res,
        "unallocated": res - alloc,
        "room": room,
        "headroom": res - alloc + room - req if req else None,
        "unallocated_small_pool": stats.get("inactive_split_bytes.small_pool.current"),
        "unallocated_large_pool": stats.get("inactive_split_bytes.large_pool.current"),
        "reserved_small_pool": stats.get("reserved_bytes.small_pool.current"),
        "allocated_small_pool": stats.get("allocated_bytes.small_pool.current"),
        "segments": stats.get("segment.all.current"),
        "pools": s.get("pools"),
    }
    if "requested_bytes.all.current" in stats and "allocated_bytes.all.current" in stats:
        out["allocated_not_requested"] = (
            stats["allocated_bytes.all.current"] - stats["requested_bytes.all.current"]
        )
    return out


def auditor(path: Path | None) -> Diagnose | None:
    """``gpu_auditor.diagnosis.diagnose`` as a function of (log, alloc_conf), if importable."""
    if path is not None and path.is_dir() and str(path) not in sys.path:
        sys.path.append(str(path))
    try:
        from gpu_auditor.diagnosis import diagnose
    except ImportError:
        return None

    def run(text: str, conf: str | None) -> dict[str, Any]:
        d = diagnose(text, alloc_conf=conf or None).to_json_dict()
        rec = d.get("recommendation") or {}
        return {
            "kind": d.get("kind"),
            "contributing": d.get("contributing"),
            "alloc_conf": rec.get("alloc_conf"),
            "first_action": (rec.get("actions") or [None])[0],
            "summary": d.get("summary"),
            "growth": d.get("growth"),
        }

    return run


def point_row(name: str, recs: dict[str, Record | None], diag: Diagnose | None) -> dict[str, Any]:
    any_rec = next(r for r in recs.values() if r is not None)
    row: dict[str, Any] = {
        "point": name,
        "group": any_rec.get("group"),
        "mode": any_rec.get("mode"),
        "job": any_rec.get("job"),
        "design": any_rec.get("design"),
        "outcomes": {s: outcome_text(recs.get(s)) for s in SETTINGS},
        "runs": {s: _run_summary(recs.get(s)) for s in SETTINGS},
        "fixed": {},
        "figures": {},
        "diagnosis": {},
    }
    for s, base in BASELINE_OF.items():
        ok, text = fixed(recs.get(base), recs.get(s))
        row["fixed"][s] = {"fixed": ok, "text": text}
    for s in ("native", "async"):
        rec = recs.get(s)
        if rec is not None and rec.get("message"):
            row["figures"][s] = {
                "message": oomtext.parse(rec["message"]).derived(),
                "exact": exact_figures(rec),
            }
    if diag is not None:
        for s in SETTINGS:
            rec = recs.get(s)
            full = log_text(rec, printed=True) if rec else None
            if rec is None or full is None:
                continue
            conf = rec.get("conf") or None
            row["diagnosis"][s] = {"log": diag(full, conf)}
            if s in ("native", "async"):
                only = log_text(rec, printed=False)
                if only is not None:
                    row["diagnosis"][s]["message_only"] = diag(only, conf)
    return row


def _run_summary(rec: Record | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    keys = (
        "outcome",
        "step",
        "where",
        "request_bytes",
        "steps_done",
        "exception",
        "message",
        "wall_s",
        "top_up_bytes",
        "model_bytes_mod_20mib",
        "fraction",
        "allowed_bytes",
        "probe",
    )
    out = {k: rec[k] for k in keys if k in rec}
    cleanup = rec.get("cleanup") or {}
    if cleanup.get("ballast_rebuilt"):
        out["ballast_rebuilt"] = True
    return out


def build(folder: Path, diag: Diagnose | None) -> dict[str, Any]:
    metas, points = load(folder)
    names: list[str] = []
    for s in SETTINGS + tuple(k for k in points if k not in SETTINGS):
        for n in points.get(s, {}):
            if n not in names:
                names.append(n)
    rows = [point_row(n, {s: points.get(s, {}).get(n) for s in SETTINGS}, diag) for n in names]
    return {
        "settings": {s: LABEL.get(s, s) for s in points},
        "meta": metas,
        "diagnosis_available": diag is not None,
        "rows": rows,
        "summary": summarize(rows),
    }


def today(row: dict[str, Any], setting: str = "native") -> dict[str, Any] | None:
    return (row["diagnosis"].get(setting) or {}).get("log")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where today's allocator recommendation agrees with what the re-runs measured."""
    out: dict[str, Any] = {"points": len(rows)}
    native_oom = [r for r in rows if (r["runs"]["native"] or {}).get("outcome") == "oom"]
    out["native_oom"] = len(native_oom)
    for s in ("es", "ms128"):
        out[f"fixed_by_{s}"] = sorted(r["point"] for r in native_oom if r["fixed"][s]["fixed"])
    cells: dict[str, list[str]] = {
        "recommended_and_fixed": [],
        "recommended_not_fixed": [],
        "not_recommended_would_fix": [],
        "not_recommended_not_fixed": [],
    }
    for r in native_oom:
        d = today(r)
        if d is None or r["fixed"]["es"]["fixed"] is None:
            continue
        conf = d.get("alloc_conf") or ""
        applied = (
            "es"
            if "expandable_segments" in conf
            else "ms128"
            if "max_split_size_mb" in conf
            else None
        )
        if applied is not None:
            worked = r["fixed"][applied]["fixed"]
            cells["recommended_and_fixed" if worked else "recommended_not_fixed"].append(r["point"])
        elif r["fixed"]["es"]["fixed"]:
            cells["not_recommended_would_fix"].append(r["point"])
        else:
            cells["not_recommended_not_fixed"].append(r["point"])
    out.update(cells)
    return out


# -- markdown -------------------------------------------------------------------------------------
def _mib(v: int | None) -> str:
    return "—" if v is None else f"{v / MiB:.0f}"


def _pct(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.2f}%" if v < 0.1 else f"{v * 100:.0f}%"


def markdown(table: dict[str, Any]) -> str:
    lines = [
        "| point | design | R MiB | free MiB | U MiB | U/reserved | room MiB | H MiB | A/T "
        "| native | ES fixed? | MS128 fixed? | async | async+ES fixed? | today: kind → alloc_conf "
        "(message only) |",
        "|" + "---|" * 15,
    ]
    for r in table["rows"]:
        fig = (r["figures"].get("native") or {}).get("message") or {}
        d, m = today(r), (r["diagnosis"].get("native") or {}).get("message_only")
        t = "—"
        if d is not None:
            t = f"{d['kind']} → {d['alloc_conf'] or 'none'}"
            if m is not None and (m["kind"], m["alloc_conf"]) != (d["kind"], d["alloc_conf"]):
                t += f" ({m['kind']} → {m['alloc_conf'] or 'none'})"
        design = (r.get("design") or {}).get("describe", "")
        lines.append(
            "| "
            + " | ".join(
                [
                    r["point"],
                    design.replace("|", "/"),
                    _mib(fig.get("requested")),
                    _mib(fig.get("free")),
                    _mib(fig.get("unallocated")),
                    _pct(fig.get("unallocated_share_of_reserved")),
                    _mib(fig.get("room")),
                    _mib(fig.get("headroom")),
                    _pct(fig.get("allocated_share_of_total")),
                    r["outcomes"]["native"],
                    r["fixed"]["es"]["text"],
                    r["fixed"]["ms128"]["text"],
                    r["outcomes"]["async"],
                    r["fixed"]["async_es"]["text"],
                    t,
                ]
            )
            + " |"
        )
    s = table["summary"]
    lines += [
        "",
        f"Points: {s['points']}; native OOM: {s['native_oom']}; fixed by expandable_segments: "
        f"{len(s['fixed_by_es'])}; by max_split_size_mb:128: {len(s['fixed_by_ms128'])}.",
    ]
    if table["diagnosis_available"]:
        for key in (
            "recommended_and_fixed",
            "recommended_not_fixed",
            "not_recommended_would_fix",
            "not_recommended_not_fixed",
        ):
            names = s.get(key) or []
            lines.append(
                f"- {key.replace('_', ' ')}: {len(names)}"
                + (f" ({', '.join(names)})" if names else "")
            )
    else:
        lines.append("- gpu_auditor not importable: no diagnosis columns")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="folder with sweep-SETTING.jsonl files")
    ap.add_argument("--json", help="write the joined table here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument(
        "--auditor",
        default=str(REPO / "operator"),
        help="folder holding gpu_auditor (default: this repository's operator/)",
    )
    ap.add_argument("--no-diagnosis", action="store_true")
    a = ap.parse_args(argv)
    diag = None if a.no_diagnosis else auditor(Path(a.auditor))
    try:
        table = build(Path(a.folder), diag)
    except SweepDataError as e:
        print(f"table: {e}", file=sys.stderr)
        return 2
    md = markdown(table)
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1) + "\n")
    if a.md:
        Path(a.md).write_text(md)
    if not a.json and not a.md:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
