#!/usr/bin/env python3
"""Differential fuzz of the mutants listed as equivalent: each one against the original code on
generated inputs, so a justification is checked by running it, not only by reading it.

    .venv/bin/python scripts/fuzz_equivalents.py --module logtext [--examples 300] [--seed 1]

Reads the staged mutants of the last ``scripts/mutation.py`` run of the module
(``.mutation/tree/mutants/src``: mutmut 3 puts every mutant of a function beside the original
behind a trampoline that ``MUTANT_UNDER_TEST`` switches) and the module's entries in
``bench/results/mutation-equivalents.toml``. Every example runs under the original and under
each equivalent mutant; the outputs are compared whole (a raised exception counts as an output,
by its type; a run past ``--call-seconds`` as a hang). The peak of the scanner's
``retained_bytes`` is compared too and reported apart: a mutant that changes only what the
scanner holds is equivalent in output, and its justification must say so.

Inputs (``logtext``): logs built from real failure wordings, rank and container-runtime
prefixes (CRI, docker json-file), ``\\r``/``\\n`` line ends, invalid UTF-8, release banners and
filler whose lengths sit on the scanner's bounds (8 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB and one
byte either side), each scanned whole and in three chunkings; ``normalize_text``,
``normalize_lines`` and ``decode`` of the same text. Results: ``bench/results/
mutation-fuzz-<module>.md`` and ``.json``, with the command; exit 1 when a listed mutant's
output differs (its justification is wrong).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / ".mutation" / "tree" / "mutants" / "src"
EQUIVALENTS = REPO / "bench" / "results" / "mutation-equivalents.toml"

KIB = 1024
BOUNDS = (8 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB)
TORCH = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {r} GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
    "has 77.80 GiB memory in use. Of the allocated memory 70.10 GiB is allocated by PyTorch, and "
    "6.90 GiB is reserved by PyTorch but unallocated."
)
WORDINGS = (
    TORCH,
    "RuntimeError: CUDA error: out of memory",
    "RuntimeError: CUDA out of memory. Tried to allocate {r} GiB (GPU 0; 79.15 GiB total "
    "capacity; 70.10 GiB already allocated; 1.20 GiB free; 76.00 GiB reserved in total by "
    "PyTorch)",
    "W tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed at matmul_op.cc:123 : "
    "RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[65536,8192] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
    "allocate {r} bytes.",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
    "cuda error, NCCL version 2.21.5 ncclUnhandledCudaError: Call to CUDA function failed. "
    "Last error: Cuda failure 'out of memory'",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes "
    "(allocated so far: 0 bytes).",
    "terminate called after throwing an instance of 'c10::OutOfMemoryError'",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "torch.OutOfMemoryError: CUDA out of memory",
)
NOISE = (
    "step 10 loss 0.1234 mem 12.3 GiB",
    "Epoch 1:  42%|####      | 420/1000 [00:42<00:58, 9.99it/s]",
    "torch 2.5.1+cu124",
    "PyTorch version: 2.3.0",
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 42, in <module>',
    "    loss.backward()",
    "out of memory handler idle",
    "OOM",
    "Tried to allocate",
    "",
    "é€\U0001f600",
)
PREFIXES = ("", "", "[rank0]: ", "[rank1]: ", "[rank12]:[W ProcessGroupNCCL.cpp:1] ", "rank3: ")


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


def filler(rng: random.Random, bounds: tuple[int, ...]) -> str:
    size = rng.choice(bounds) + rng.randint(-2, 2) - rng.choice((0, 0, 200, 600))
    kind = rng.choice(("x", "0, ", "a b ", "\r", "z\r"))
    return (kind * (size // len(kind) + 1))[: max(0, size)]


def line(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.45:
        text = rng.choice(WORDINGS).format(r=rng.choice(("2.00", "4.00", "1.50", "0")))
    elif pick < 0.9:
        text = rng.choice(NOISE)
    else:
        text = "".join(rng.choice("ab \t:[]{}\"\\0123456789OMm") for _ in range(rng.randint(1, 40)))
    text = rng.choice(PREFIXES) + text
    wrap = rng.random()
    if wrap < 0.1:
        tag = rng.choice("FP")
        text = f"2026-11-29T19:00:00.123456789Z {rng.choice(('stdout', 'stderr'))} {tag} {text}"
    elif wrap < 0.18:
        text = json.dumps({"log": text + "\n", "stream": "stderr", "time": "2026-11-29T19:00:00Z"})
    return text


def log_bytes(rng: random.Random) -> bytes:
    parts: list[str] = []
    scale = rng.random()  # most logs small; one in ten crosses the 256 KiB and 1 MiB bounds
    bounds = BOUNDS[: 2 if scale < 0.7 else 3 if scale < 0.9 else 5]
    for _ in range(rng.randint(1, 30)):
        if rng.random() < 0.1:
            parts.append(filler(rng, bounds))
        else:
            parts.append(line(rng))
        parts.append(rng.choice(("\n", "\n", "\n", "\r", "\r\n", " ", "")))
    data = "".join(parts).encode("utf-8", errors="surrogateescape")
    if rng.random() < 0.1:
        at = rng.randint(0, len(data))
        data = data[:at] + rng.choice((b"\xff", b"\xc3", b"\x00", b"\xe2\x82")) + data[at:]
    return data


def logtext_case(mod: Any, data: bytes, rng_seed: int) -> tuple[Any, int]:
    """What the module gives for ``data`` (the scans whole, by 4 KiB and in two random
    chunkings; the normalisers) and the scanner's peak of retained bytes."""
    rng = random.Random(rng_seed)
    outputs: list[Any] = [
        repr(mod.scan_bytes(data)),
        repr(mod.scan_stream(io.BytesIO(data), 4096)),
    ]
    peak = 0
    for chunk in (rng.randint(1, 70_000), rng.randint(1, 300)):
        if chunk < 64 and len(data) > 20_000:
            chunk = 8192  # a byte-sized chunking of a megabyte is minutes of feeds
        scanner = mod.LogScanner()
        view = memoryview(data)
        for offset in range(0, len(view), chunk):
            scanner.feed(view[offset : offset + chunk])
            peak = max(peak, scanner.retained_bytes)
        outputs.append(repr(scanner.finish()))
    text = mod.decode(data[:20_000])
    outputs.append(repr(mod.normalize_text(text)))
    outputs.append(repr(mod.normalize_lines(text.splitlines())))
    return outputs, peak


CASES: dict[str, tuple[str, Callable[[random.Random], bytes], Callable[..., tuple[Any, int]]]] = {
    "logtext": ("gpu_auditor.diagnosis.logtext", log_bytes, logtext_case),
}


def run(mod: Any, case: Callable[..., tuple[Any, int]], data: bytes, seed: int, limit: float):
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return case(mod, data, seed)
    except Hang:
        return ("hang", -1)
    except Exception as exc:  # an exception is an output: compared by its type
        return (f"raises {type(exc).__name__}", -1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", required=True, choices=sorted(CASES))
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--call-seconds", type=float, default=20.0)
    ap.add_argument("--mutants", help="comma-separated mutant names (default: every equivalent)")
    ap.add_argument(
        "--controls",
        type=int,
        default=20,
        help="also fuzz this many mutants the tests killed (a sample): the fuzz must tell most "
        "of them apart, or a 'same' says little",
    )
    ap.add_argument("--out", default="bench/results/mutation-fuzz", help="results path prefix")
    args = ap.parse_args(argv)
    qualified, generate, case = CASES[args.module]
    if not MUTANTS.is_dir():
        raise SystemExit(f"no staged mutants at {MUTANTS}: run scripts/mutation.py first")
    sys.path.insert(0, str(MUTANTS))
    os.environ["MUTANT_UNDER_TEST"] = ""
    mod = __import__(qualified, fromlist=["_"])
    listed = tomllib.loads(EQUIVALENTS.read_text())["equivalent"]
    names = [e["mutant"] for e in listed if e["mutant"].startswith(qualified + ".")]
    if args.mutants:
        names = [n.strip() for n in args.mutants.split(",") if n.strip()]
    meta = MUTANTS / (qualified.replace(".", "/") + ".py.meta")
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {}) if meta.is_file() else {}
    killed = sorted(n for n, code in codes.items() if code == 1 and n not in names)
    controls = random.Random(args.seed).sample(killed, min(args.controls, len(killed)))
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(args.seed)
    started = time.time()
    examples = [(generate(rng), rng.randrange(2**32)) for _ in range(args.examples)]
    expected = []
    for data, seed in examples:
        os.environ["MUTANT_UNDER_TEST"] = ""
        expected.append(run(mod, case, data, seed, args.call_seconds))
    results = []
    for name in names + controls:
        os.environ["MUTANT_UNDER_TEST"] = name
        differs, memory, first = 0, 0, None
        for (data, seed), want in zip(examples, expected, strict=True):
            got = run(mod, case, data, seed, args.call_seconds)
            if got[0] != want[0]:
                differs += 1
                first = first or {"input_bytes": len(data), "head": data[:200].decode("latin-1")}
            elif got[1] != want[1]:
                memory += 1
        role = "control" if name in controls else "equivalent"
        row = {"mutant": name, "role": role, "differs": differs, "memory_only": memory}
        results.append({**row, "first": first})
        verdict = "DIFFERS" if differs else ("memory only" if memory else "same")
        print(f"{role:<10} {verdict:<12} {differs:>4} {memory:>4}  {name}", flush=True)
    os.environ["MUTANT_UNDER_TEST"] = ""
    seconds = round(time.time() - started, 1)
    shown = sys.argv[1:] if argv is None else argv
    command = "python scripts/fuzz_equivalents.py " + " ".join(shown)
    sizes = sorted(len(d) for d, _ in examples)
    out = {
        "command": command,
        "module": args.module,
        "examples": args.examples,
        "seed": args.seed,
        "seconds": seconds,
        "input_bytes": {"min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1]},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    equivalents = [r for r in results if r["role"] == "equivalent"]
    bad = [r for r in equivalents if r["differs"]]
    told = [r for r in results if r["role"] == "control" and r["differs"]]
    md = [
        f"# Equivalent mutants of {args.module}, fuzzed against the original",
        "",
        f"Command: `{command}` (repository root, `.venv/bin/python`, after `scripts/mutation.py "
        f"--modules {args.module}`), {out['date']}, {seconds} s.  ",
        f"{args.examples} generated inputs (seed {args.seed}; {sizes[0]:,} to {sizes[-1]:,} "
        f"bytes, median {sizes[len(sizes) // 2]:,}), each run under the original and under every "
        f"mutant listed as equivalent: {len(equivalents)} mutants, {len(bad)} with a different "
        "output, "
        f"{sum(1 for r in equivalents if r['memory_only'] and not r['differs'])} differing only "
        "in the bytes the scanner holds.  ",
        f"Controls: {len(controls)} mutants the tests killed, drawn at random, run the same way: "
        f"the fuzz tells {len(told)} of them apart from the original (what a 'same' is worth).",
        "",
        "| mutant | role | inputs with another output | inputs with another peak of held bytes |",
        "|---|---|---|---|",
    ]
    md += [
        f"| `{r['mutant']}` | {r['role']} | {r['differs']} | {r['memory_only']} |" for r in results
    ]
    md.append("")
    Path(f"{args.out}-{args.module}.json").write_text(json.dumps(out, indent=2) + "\n")
    Path(f"{args.out}-{args.module}.md").write_text("\n".join(md))
    print(f"{len(equivalents)} equivalents, {len(bad)} differ; controls told apart "
          f"{len(told)}/{len(controls)}; {seconds} s")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
