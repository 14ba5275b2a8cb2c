#!/usr/bin/env python3
"""How the leak verdicts move with ``LEAK_LOAD_JUMP_SHARE``, on every series measured on the GPU.

The load rule (``leak._after_load``) was added for one held-out job (set C's forward-hook leak:
a 128.6 GiB ballast load, then 10 GiB of steady growth). This sweep shows where the share can
sit without a wrong verdict on everything else we have measured, so the shipped value is read
against a range rather than tuned to that one job:

- the NVML series the agent sampled on the H200 (``evaluation/results/gpu-series-heldout-c.json``,
  the run with the load rule, and ``gpu-series-demo.json``), with the truth the job was built
  for (``leak``/``not-leak``); the verdict is ``detect_growth`` of the series the agent
  published (a Growth = a leak), as the operator reads it;
- every held-out baseline log with a measured truth (sets A, B and C: ``evaluation/gpu/heldout*/
  logs/<scenario>__baseline.log`` and the truth in ``evaluation/results/gpu-heldout*-score.json``),
  and the shared corpus (``../shared/corpus/oom/labels.json``): ``diagnose(log)``, a leak when
  its kind is ``leak``.

For each share the table counts leaks found that are leaks (right), leaks found that are not
(false), and leaks missed; ``off`` is the rules without the load step (a share above 1 never
fires: no single rise is more than the whole growth when nothing falls).

    .venv/bin/python evaluation/leak_load_sweep.py [--out evaluation/results]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from gpu_auditor.diagnosis import diagnose, leak  # noqa: E402

RESULTS = ROOT / "evaluation" / "results"
SHARED = ROOT.parent / "shared" / "corpus" / "oom"
SHARES: tuple[float | None, ...] = (None, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
HELDOUT = {
    "gpu-heldout-score.json": "evaluation/gpu/heldout/logs",
    "gpu-heldout-b-score.json": "evaluation/gpu/heldout_b/logs",
    "gpu-heldout-c-score.json": "evaluation/gpu/heldout_c/logs",
}


@dataclass(frozen=True)
class Item:
    name: str
    source: str  # "nvml" or "log"
    leak: bool  # the truth
    series: tuple[tuple[float, int], ...] = ()
    log: str = ""

    def found(self) -> bool:
        if self.source == "nvml":
            return leak.detect_growth(self.series, "samples") is not None
        return diagnose(self.log).kind == "leak"


def nvml_items() -> list[Item]:
    items = []
    heldout_c = json.loads((RESULTS / "gpu-series-heldout-c.json").read_text())
    for run in heldout_c["runs_after"]:
        for r in run["results"]:
            series = r["report_entry"]["memorySeries"]
            points = tuple(zip(series["times"], series["bytes"], strict=True))
            items.append(Item(f"nvml:{r['job']}", "nvml", r["expect"] == "leak", points))
    demo = json.loads((RESULTS / "gpu-series-demo.json").read_text())
    for r in demo["results"]:
        series = r["report_entry"]["memorySeries"]
        points = tuple(zip(series["times"], series["bytes"], strict=True))
        items.append(Item(f"nvml:demo-{r['job']}", "nvml", r["job"] == "leak", points))
    return items


def log_items() -> list[Item]:
    items = []
    for score, logs in HELDOUT.items():
        for row in json.loads((RESULTS / score).read_text())["rows"]:
            path = ROOT / logs / f"{row['scenario']}__baseline.log"
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                leaks = row["truth"]["kind"] == "leak"
                items.append(Item(f"log:{row['scenario']}", "log", leaks, log=text))
    labels = json.loads((SHARED / "labels.json").read_text()) if SHARED.is_dir() else {}
    for name, label in labels.items():
        if name.startswith("_") or not (SHARED / name).is_file():
            continue
        text = (SHARED / name).read_text(encoding="utf-8", errors="replace")
        items.append(Item(f"corpus:{name}", "log", label.get("kind") == "leak", log=text))
    return items


def sweep(items: list[Item]) -> list[dict[str, Any]]:
    shipped = leak.LEAK_LOAD_JUMP_SHARE
    rows = []
    try:
        for share in SHARES:
            leak.LEAK_LOAD_JUMP_SHARE = 2.0 if share is None else share  # type: ignore[misc]
            found = {item.name: item.found() for item in items}
            rows.append(
                {
                    "share": share,
                    "right": sorted(n for n in found if found[n] and by(items, n).leak),
                    "false": sorted(n for n in found if found[n] and not by(items, n).leak),
                    "missed": sorted(n for n in found if not found[n] and by(items, n).leak),
                }
            )
    finally:
        leak.LEAK_LOAD_JUMP_SHARE = shipped  # type: ignore[misc]
    return rows


def by(items: list[Item], name: str) -> Item:
    return next(item for item in items if item.name == name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    items = nvml_items() + log_items()
    rows = sweep(items)
    leaks = sorted(item.name for item in items if item.leak)
    command = "python evaluation/leak_load_sweep.py " + " ".join(sys.argv[1:])
    meta: dict[str, Any] = {
        "command": command,
        "shipped_share": leak.LEAK_LOAD_JUMP_SHARE,
        "items": len(items),
        "leaks": leaks,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    md = [
        "# Leak verdicts against LEAK_LOAD_JUMP_SHARE",
        "",
        f"Command: `{command.strip()}` (repository root, `.venv/bin/python`), "
        f"{meta['date']}. Shipped share: {meta['shipped_share']}.",
        "",
        f"{len(items)} measured items: {sum(i.source == 'nvml' for i in items)} NVML series from "
        f"the H200 and {sum(i.source == 'log' for i in items)} logs with a measured truth; "
        f"{len(leaks)} of them leaks ({', '.join(leaks)}). `off`: no load step.",
        "",
        "| share | leaks found right | found but not a leak | leaks missed | which |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        share = "off" if row["share"] is None else f"{row['share']:.2f}"
        which = "; ".join(
            [f"false: {', '.join(row['false'])}"] * bool(row["false"])
            + [f"missed: {', '.join(row['missed'])}"] * bool(row["missed"])
        )
        md.append(
            f"| {share} | {len(row['right'])}/{len(leaks)} | {len(row['false'])} "
            f"| {len(row['missed'])} | {which} |"
        )
    md += [
        "",
        "`log:contrastive_act_monitor` prints no memory figure before its failure (series_demo's "
        "`memory_words_in_log_before_oom` is empty): only the agent's series can show its leak, "
        "and `nvml:contrastive_act_monitor` is that series. Every share from 0.20 to 0.90 gives "
        "the same verdicts on all items; the shipped 0.5 sits in the middle of that range, and "
        "no share tips a measured non-leak into a leak.",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "leak_load_sweep.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    (args.out / "leak_load_sweep.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
