#!/usr/bin/env python3
"""What PyTorch prints when a job asks for more memory than any machine has, on a real GPU.

``diagnosis/impossible.py`` reads a request of 1 PiB or more as no OOM (a size computed wrong).
This asks the GPU for 1 TiB (a real, too-big request: still an OOM), 1 PiB less 1 MiB, 1 PiB,
2^58, 2^61 and 2^62 bytes under each allocator backend, records each exception's text, and
diagnoses it with this tree's core (pure Python: ``operator/`` on the path).

    python3 evaluation/gpu/impossible_requests.py OUT_DIR

Writes ``OUT_DIR/impossible-requests.json``: per backend and size, the exception's class and
text, and the diagnosis (detected, kind, summary).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = (2**40, 2**50 - 2**20, 2**50, 2**58, 2**61, 2**62)

CHILD = r"""
import json, sys, torch
rows = []
for n in json.loads(sys.argv[1]):
    try:
        torch.empty(n, dtype=torch.uint8, device="cuda")
        rows.append({"bytes": n, "error": None})
    except Exception as exc:  # the allocator's own exception, whatever its class
        name = type(exc).__qualname__
        module = type(exc).__module__
        rows.append({"bytes": n, "class": name if module == "builtins" else f"{module}.{name}",
                     "error": str(exc)})
    torch.cuda.empty_cache()
print(json.dumps({"torch": torch.__version__, "rows": rows}))
"""


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "operator"))
    from gpu_auditor.diagnosis import diagnose

    results = []
    for backend in ("native", "cudaMallocAsync"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=f"backend:{backend}")
        run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SIZES)], env=env,
                             capture_output=True, text=True, timeout=300, check=True)
        child = json.loads(run.stdout.strip().splitlines()[-1])
        for row in child["rows"]:
            # the exception's last line as a traceback prints it
            text = f"{row['class']}: {row['error']}\n" if row["error"] else ""
            d = diagnose(text) if text else None
            results.append({
                "backend": backend, "torch": child["torch"], **row,
                "detected": d.detected if d else None, "kind": d.kind if d else None,
                "summary": d.summary if d else None,
            })
            print(backend, row["bytes"], row.get("class"), "->",
                  d.detected if d else None, d.kind if d else None)
    (out / "impossible-requests.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
