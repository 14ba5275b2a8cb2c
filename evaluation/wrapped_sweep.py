#!/usr/bin/env python3
"""Does a failure survive a console that wraps its line? Six stacks' messages, wrapped two ways.

A container's output is often not a terminal, and what wraps it does so at a fixed width: Rich's
log handler and tracebacks at 80 columns, a terminal at its own, a paste into an issue keeps
either (public b-022, public3 r-021, public11 t-018 were broken so). Each message below is the
wording of one stack's real failure (as the public sets hold them); each is wrapped by words
(``textwrap.wrap``: the break between two words) and by columns (the break anywhere) at widths
of 30 to 130, put after a step line and a traceback's head, and diagnosed. A row is detected
when the tool reports an OOM; the table counts detections per message and wrapping, and lists
every miss at 60 columns or more. ``--tree`` scores another commit's rules (a ``git worktree``).

    .venv/bin/python evaluation/wrapped_sweep.py [--tree TREE] [--out evaluation/results]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

MESSAGES: dict[str, str] = {
    "jax": "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
    "to allocate 5520758552 bytes.",
    "jaxlib-2019": "2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/"
    "python/local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of "
    "memory while trying to allocate 5520758552 bytes.",
    "tensorflow": "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
    "allocating tensor with shape[64,512,56,56] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    "torch-2": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
    "a total capacity of 23.64 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this "
    "process has 22.50 GiB memory in use.",
    "torch-1": "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB "
    "total capacity; 6.10 GiB already allocated; 13.19 MiB free; 6.24 GiB reserved in total by "
    "PyTorch)",
    "cupy": "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes "
    "(allocated so far: 3,221,225,472 bytes).",
    "paddle": "MemoryError: Out of memory error on GPU 0. Cannot allocate 1.500000GB memory on "
    "GPU 0, 7.500000GB memory has been allocated and available memory is only 256.000000MB.",
    "mxnet": "mxnet.base.MXNetError: [10:11:12] src/storage/./pooled_storage_manager.h:157: "
    "cudaMalloc failed: out of memory",
    "vllm": "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.",
    "tf-driver": "2017-07-25 21:11:16.630413: E tensorflow/core/common_runtime/direct_session.cc:"
    "138] Internal: failed initializing StreamExecutor for CUDA device ordinal 0: Internal: "
    "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY; total memory reported: "
    "11711807488",
}
WIDTHS = range(30, 131, 5)


def by_words(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


def by_columns(text: str, width: int) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


WRAPS: dict[str, Callable[[str, int], str]] = {"words": by_words, "columns": by_columns}


def run(diagnose: Callable[..., Any]) -> dict[tuple[str, str, int], bool]:
    found: dict[tuple[str, str, int], bool] = {}
    for name, message in MESSAGES.items():
        for wrap, cut in WRAPS.items():
            for width in WIDTHS:
                log = ('step 1 loss 0.3\nTraceback (most recent call last):\n  File "t.py", '
                       f"line 3\n{cut(message, width)}\n")
                found[(name, wrap, width)] = bool(diagnose(log).detected)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve() / "operator"))
    from gpu_auditor.diagnosis import diagnose  # the tree chosen above

    found = run(diagnose)
    total = sum(found.values())
    lines = [
        f"Tree: `{args.tree}`. Command: `python evaluation/wrapped_sweep.py --tree {args.tree}`",
        "",
        f"Detected {total} of {len(found)} wrapped messages "
        f"({len(MESSAGES)} messages x {len(WRAPS)} wrappings x {len(WIDTHS)} widths, 30-130).",
        "",
        "| message | by words | by columns |",
        "|---|---|---|",
    ]
    for name in MESSAGES:
        cells = [f"{sum(found[(name, w, x)] for x in WIDTHS)}/{len(WIDTHS)}" for w in WRAPS]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    misses = [f"{n} by {w} at {x}" for (n, w, x), hit in found.items() if not hit and x >= 60]
    lines += ["", "Missed at 60 columns or more: " + (", ".join(misses) or "none")]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "wrapped-sweep.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
