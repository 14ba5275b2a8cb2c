#!/usr/bin/env python3
"""Check PYTORCH_CUDA_ALLOC_CONF values against a real CUDA build of torch.

For each value: a fresh process with the value in the environment runs
``torch.zeros(1, device='cuda')`` (the allocator parses its config at CUDA init) and reports
whether CUDA init succeeded, the exception type and message if not, any warning printed, and
what the allocator reports afterwards (backend, expandable segment in use, max_split_size).

    python3 evaluation/gpu/alloc_conf_check.py --out gpu-alloc-conf-check.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# expect: "accept" = something our tool may recommend, or that a user may already have and we
# merge with; "reject" = known-bad values that torch should refuse; "observe" = record only.
VALUES: list[tuple[str, str, str]] = [
    ("expandable_segments:True", "accept", "our fragmentation recommendation (2.1+, native)"),
    ("expandable_segments:False", "accept", "explicit off"),
    ("expandable_segments: True", "accept", "whitespace after the colon"),
    ("max_split_size_mb:21", "accept", "smallest N > 20 (our pre-2.1 rule)"),
    ("max_split_size_mb:20", "observe", "boundary: >= 20 from 2.10"),
    ("max_split_size_mb:64", "accept", "pre-2.1 recommendation variant"),
    ("max_split_size_mb:128", "accept", "pre-2.1 recommendation / popular advice"),
    ("max_split_size_mb:512", "accept", "pre-2.1 recommendation variant"),
    (
        "garbage_collection_threshold:0.6,expandable_segments:True",
        "accept",
        "merged with a job's existing gc threshold",
    ),
    (
        "max_split_size_mb:128,expandable_segments:True",
        "accept",
        "merged with a job's existing max_split_size_mb",
    ),
    (
        "expandable_segments:True,garbage_collection_threshold:0.8,max_split_size_mb:256",
        "accept",
        "three keys merged",
    ),
    ("roundup_power2_divisions:4,expandable_segments:True", "accept", "merged with roundup"),
    (
        "roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True",
        "accept",
        "merged with list-valued roundup",
    ),
    ("backend:native,expandable_segments:True", "accept", "explicit native backend"),
    ("backend:cudaMallocAsync", "accept", "async backend"),
    (
        "backend:cudaMallocAsync,expandable_segments:True",
        "observe",
        "native-only key under async: we must not recommend it",
    ),
    ("foo:1", "reject", "unknown key"),
    ("max_split_size_mb:10", "reject", "too small"),
    ("expandable_segments:yes", "reject", "not a bool"),
    ("expandable_segments:true", "observe", "lower-case bool"),
    ("garbage_collection_threshold:1.5", "reject", "out of (0, 1)"),
    ("roundup_power2_divisions:3", "reject", "not a power of 2"),
    ("backend:foo", "reject", "unknown backend"),
    ("max_split_size_mb:-1", "observe", "facts file: 2.11 accepted -1 silently"),
]

PROBE = r"""
import json, sys, warnings
res = {}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    try:
        import torch
        x = torch.zeros(1, device="cuda")
        y = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        res["ok"] = True
        res["backend"] = torch.cuda.get_allocator_backend()
        try:
            segs = torch.cuda.memory_snapshot()
            res["expandable_in_use"] = any(s.get("is_expandable") for s in segs)
        except Exception as e:
            res["expandable_in_use"] = repr(e)[:200]
        try:
            res["max_split_size"] = torch.cuda.memory_stats().get("max_split_size")
        except Exception as e:
            res["max_split_size"] = repr(e)[:200]
    except BaseException as e:
        res["ok"] = False
        res["error_type"] = type(e).__module__ + "." + type(e).__qualname__
        res["error"] = str(e)[:1000]
    res["warnings"] = [str(x.message)[:500] for x in w]
print("PROBE " + json.dumps(res))
"""


def probe(value: str, var: str = "PYTORCH_CUDA_ALLOC_CONF") -> dict:
    env = dict(os.environ)
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env.pop(k, None)
    env[var] = value
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    res: dict = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("PROBE "):
            res = json.loads(ln[6:])
    res["rc"] = p.returncode
    res["stderr_tail"] = [ln for ln in p.stderr.splitlines() if ln.strip()][-6:]
    res["wall_s"] = round(time.time() - t0, 2)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=6)
    a = ap.parse_args()
    tasks = [(v, exp, why, "PYTORCH_CUDA_ALLOC_CONF") for v, exp, why in VALUES]
    tasks.append(
        ("expandable_segments:True", "observe", "new variable name only", "PYTORCH_ALLOC_CONF")
    )
    with ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(lambda t: probe(t[0], t[3]), tasks))
    rows = []
    for (v, exp, why, var), r in zip(tasks, results, strict=True):
        accepted = bool(r.get("ok"))
        verdict = "as expected"
        if exp == "accept" and not accepted:
            verdict = "UNEXPECTED: rejected"
        elif exp == "reject" and accepted:
            verdict = "UNEXPECTED: accepted"
        elif exp == "observe":
            verdict = "observed"
        rows.append(
            {
                "variable": var,
                "value": v,
                "expect": exp,
                "why": why,
                "accepted": accepted,
                "verdict": verdict,
                **r,
            }
        )
        print(
            f"{var}={v!r:<75} accepted={accepted!s:<5} {verdict} "
            f"{(r.get('error') or '').splitlines()[0][:120] if r.get('error') else ''}",
            flush=True,
        )
    import torch

    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "how": "fresh process per value; env var set; "
        "torch.zeros(1, device='cuda') then a 64 MiB tensor",
        "results": rows,
        "unexpected": [r["value"] for r in rows if r["verdict"].startswith("UNEXPECTED")],
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.out}; unexpected: {out['unexpected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
