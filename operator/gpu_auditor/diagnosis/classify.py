"""One primary kind and the contributing kinds, from the figures (and the node's evidence).

Names: R requested, T total, F device free, A allocated by PyTorch, U reserved but unallocated,
reserved = A + U, L allowed (the per-process memory fraction's cap), P this process's memory,
O other processes' memory. Under a cap, the room PyTorch has is ``min(F, L - reserved)``.

Rules, first match wins (then ``leak`` from a series takes over the primary slot from any kind
but ``gpu-shared``, which stays first because another pod on the GPU is a finding of its own).
Every threshold is in ``thresholds.py`` with the measured rows that set it.

1. ``capacity`` when R > T: the single request exceeds the whole device.
2. ``memory-fraction-cap`` when A + R > L (even perfectly packed, the cap is too small) and the
   device has the room the cap withholds (F + U >= R).
3. ``gpu-shared`` when O >= ``GPU_SHARED_MIN_BYTES`` and F < R <= F + O (there is a shortfall,
   and the others' memory covers it; figures that show room, F >= R, blame no one). Without a
   request figure (a raw ``CUDA error: out of memory``): when O >= ``GPU_SHARED_MIN_BYTES`` and
   the GPU was (near) full, F <= ``NEAR_FULL_FREE_SHARE`` of T. With no process list, memory
   held outside this process's PyTorch (T - F - reserved - allowance) that covers the shortfall
   and is more than PyTorch itself holds (``UNSEEN_OTHER_MIN_SHARE_OF_RESERVED``): another
   process, before any reading of PyTorch's own cache (public11 t-007: 35.9 GiB of a 40 GiB card
   held elsewhere beside a 1.7 GiB cache was read as that cache's fragmentation; the maintainer
   read other processes).
4. ``fragmentation`` when the room alone is short of R and the cached-but-idle memory S (U from
   the message; from a probe record, the free bytes in the blocks of the pool R uses) would cover
   it, and an allocator setting is measured to reclaim it: S >= ``FRAG_MIN_UNALLOCATED_BYTES``,
   S >= ``FRAG_MIN_SHARE_OF_RESERVED`` of what PyTorch holds, and the part of R the room lacks
   (the need, R - room) is at most ``FRAG_MAX_NEED_SHARE`` of S. A full GPU with a little slack
   (tens of MiB against a 64 MiB request) is not fragmentation: the setting did not remove those
   OOMs. Slack that covers the request but fails the last two conditions makes ``fragmentation``
   a contributing kind only, with no setting. Note how this reads a capped job
   (``frag_pinned_segments.log``: L 6.99 GiB, A 1.26, U 1.89, R 4.20): A + R = 5.46 GiB fits under
   the cap, so the cap is not what failed; U + (L - reserved) = 5.73 >= R is.
5. ``non-pytorch-memory`` when the memory this process holds outside PyTorch, beyond
   ``NON_PYTORCH_ALLOWANCE_BYTES`` (context, cuBLAS, NCCL, CUDA graphs), covers R - F > 0, and is at
   least ``NON_PYTORCH_MIN_SHARE`` of the process (ordinary runtime overhead beside a full
   PyTorch cache is capacity, with non-PyTorch memory contributing); and for failures of
   libraries that allocate outside PyTorch's cache (NCCL, cuBLAS, cuDNN workspaces).
6. With no process list in the message, memory held outside this process's PyTorch allocator
   (T - F - reserved - allowance) that covers the shortfall: ``unknown``, contributing
   ``gpu-shared`` and ``non-pytorch-memory`` (the log cannot tell which; the node report can).
7. ``unknown`` when the figures say the request fits (F >= R, no binding cap).
8. ``capacity`` otherwise: the job's own memory plus the request exceeds what there is.

Contributing kinds name the other conditions that held (``capacity`` beside ``fragmentation``
when defragmenting leaves less than ``THIN_HEADROOM_SHARE`` of T spare).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

from . import formats, xlacompile
from .model import Figures, Growth, NodeEvidence, OomEvent, OtherProcess
from .phase import CUDA_INIT, LOADING, OPTIMIZER_STEP, STARTUP
from .proberecord import SMALL_POOL_REQUEST_MAX_BYTES, ProbeRecord
from .sizes import format_size as fs
from .thresholds import (
    ALLOCATION_GRANULARITY_BYTES,
    FRAG_MAX_NEED_SHARE,
    FRAG_MIN_SHARE_OF_RESERVED,
    FRAG_MIN_SHARE_WITHOUT_PROGRESS,
    FRAG_MIN_UNALLOCATED_BYTES,
    FRAG_SHORT_RUN_NEAR_FIT,
    FRAG_SHORT_RUN_REQUESTS,
    FRAG_STEADY_STEPS,
    GPU_SHARED_MIN_BYTES,
    LEAK_OUTRUNS_CACHE_POINTS,
    NEAR_FULL_FREE_SHARE,
    NON_PYTORCH_ALLOWANCE_BYTES,
    NON_PYTORCH_MIN_SHARE,
    PRINTED_DECIMALS,
    THIN_HEADROOM_SHARE,
    UNSEEN_OTHER_MIN_SHARE_OF_RESERVED,
)


def printed_error(size: int | None) -> int:
    """How far a size PyTorch printed may be from the real bytes: half the last printed digit.
    ``format_size`` prints up to 1024 as whole bytes, then two decimals of KiB up to and
    including 1 MiB, of MiB up to and including 1 GiB, of GiB above (c10/cuda/CUDACachingAllocator:
    "1024.00 MiB" is 2**30 bytes)."""
    if size is None or size <= 1024:
        return 0
    unit = next((u for u in (1024, 1024**2) if size <= u * 1024), 1024**3)
    return unit // (2 * 10**PRINTED_DECIMALS)


def full_gpu_margin(figures: Figures, exact: bool) -> int:
    """Free memory at or below the request plus this is a full GPU: the allocation granularity
    cudaMalloc needs, plus (for printed figures) the rounding of the free and request figures."""
    if exact:
        return ALLOCATION_GRANULARITY_BYTES
    return (
        ALLOCATION_GRANULARITY_BYTES
        + printed_error(figures.free_bytes)
        + printed_error(figures.requested_bytes)
    )


@dataclass(frozen=True)
class Verdict:
    kind: str
    contributing: tuple[str, ...]
    summary: str
    figures: Figures
    shows_room: bool = False
    """The figures show room for the request beyond the full-GPU margin (``_Facts.fits``)."""
    plan: xlacompile.CompilePlan | None = None
    """XLA's TPU compiler's refused plan that decided the verdict (read once, here)."""


def with_node(figures: Figures, node: NodeEvidence | None) -> Figures:
    """Fill what the log lacks from the node report; name the other processes' pods."""
    if node is None:
        return figures
    others = figures.other_processes
    by_pid = {p.pid: p for p in node.other_pods if p.pid is not None}
    if others:
        others = tuple(
            replace(o, namespace=by_pid[o.pid].namespace, pod=by_pid[o.pid].pod)
            if o.pid in by_pid
            else o
            for o in others
        )
    elif figures.process_bytes is None:
        others = tuple(OtherProcess(p.pid, p.bytes, p.namespace, p.pod) for p in node.other_pods)
    return replace(
        figures,
        total_bytes=figures.total_bytes
        if figures.total_bytes is not None
        else node.gpu_total_bytes,
        free_bytes=figures.free_bytes if figures.free_bytes is not None else node.gpu_free_bytes,
        process_bytes=figures.process_bytes
        if figures.process_bytes is not None
        else node.process_bytes,
        other_processes=others,
    )


def mps_watermark_reached(f: Figures) -> bool:
    """PyTorch's MPS allocator refuses past its high watermark when what the process holds on the
    device (its own allocations and Metal's others) plus the request exceed it; under it, or with
    no watermark printed (the ratio at 0.0), Metal itself refused (MPSAllocator.mm's
    alloc_buffer)."""
    held, cap, r = f.process_bytes, f.allowed_bytes, f.requested_bytes
    if held is None or cap is None or r is None:
        return False
    # each printed figure is off by up to half its last digit (public21's census line: 8.89 GB +
    # 172.98 MB + 6.25 MB against 9.07 GB); "held" is two printed figures
    slack = 2 * printed_error(held) + printed_error(cap) + printed_error(r)
    return held + r + slack > cap


def cap_binding(f: Figures, slack: int = 0) -> bool:
    """A memory fraction below the GPU that even perfectly packed allocations cannot fit under:
    allocated + the request exceed what it allows, less ``slack`` (how far printed figures may
    be off)."""
    if f.allowed_bytes is None or f.requested_bytes is None:
        return False
    if f.total_bytes is not None and f.allowed_bytes >= f.total_bytes:
        return False
    return (f.allocated_bytes or 0) + f.requested_bytes > f.allowed_bytes - slack


EVICTED: Final = "The node was low on resource: memory"
"""The kubelet's eviction message (the pod's status; pipelines quote it)."""
SCHEDULER_LIMIT: Final = (
    "exceeded memory limit (", "PBS: job killed: mem ", "TERM_MEMLIMIT: job killed",
)
"""Slurm's accounting, PBS and LSF killing a job over its memory limit (formats' HOST_KILLED)."""
MANAGED_REPLICA: Final = "ran out-of-memory and exited with a non-zero status"
"""Google's managed training (Cloud ML Engine, Vertex AI) reporting a replica killed for memory."""
LIBRARIES: Final = frozenset({formats.NCCL, formats.CUDA_LIBRARY})
"""Families whose failure is a library's own allocation outside the framework's cache."""


def library_failed(event: OomEvent) -> str:
    """Which library of a ``LIBRARIES`` failure could not allocate, and what: a CUDA library its
    own memory (workspaces, handles, a generator's state), OpenCL a buffer the job asked for."""
    if event.family == formats.NCCL:
        return "NCCL could not allocate its own memory"
    name = formats.library_named(event.message)
    if name == "OpenCL":
        return "OpenCL could not allocate a buffer on the device"
    return f"{name or 'a CUDA library'} could not allocate its own memory"

POOL_ALLOCATIONS: Final = frozenset({formats.BFC, formats.TENSORFLOW})
"""TensorFlow's failures of an op's allocation from its BFC pool. Before a step finished they
are not its reservation of the device at start (the driver's "failed to allocate ... from
device" is): the pool was reserved, from what was free then (all of it by default, or a
memory fraction of it), and the op did not fit it; which of the two limited it the log does not
say (public14 n-003: TensorFlow 1.x, 798 MiB at the first step on a 4 GiB card, 3.55 GiB free at
start). A device near full at start is another process's, whatever failed."""
PREALLOCATING: Final = ("tensorflow", "jax")
"""Frameworks that reserve most of the GPU up front (TensorFlow's BFC, JAX's 75 %): a library
outside them (cuBLAS, cuDNN, NCCL) that cannot get memory is starved by that reservation
(public b-020, unworded c-020: allow_growth fixed both). Beside PyTorch, whose cache grows on
demand, the same failure says only that the GPU was full: in the public threads that settled
it, by the job's own work (public2 p-017, p-030, unworded c-004: less work fixed each), which
the message cannot tell from another process."""


@dataclass(frozen=True)
class _Facts:
    f: Figures
    family: str
    record: ProbeRecord | None = None
    phase: str | None = None
    steps: int = 0
    """Steps the log shows finished before the failure (``progress.finished_steps``)."""
    framework: str | None = None
    cap_refusal: bool = False
    """The message is the cudaMallocAsync backend's "would exceed allowed memory" with its
    two-decimal figures: it prints that sentence for any failure (the review: with the fraction
    far from reached, and with no fraction set), so only its figures tell, read within their
    printing (public26 g-028: 7.99 GiB allocated + 10 MiB under a printed 8.00 GiB, 0.5 x
    15.99 GiB)."""

    @property
    def free(self) -> int | None:
        """The device's free memory cudaMalloc can use: the printed figure less the margin a new
        segment needs near a full GPU (``full_gpu_margin``). Exact when a probe record gave the
        device's free bytes for this request."""
        free = self.f.free_bytes
        if free is None:
            return None
        record = self.record
        exact = record is not None and record.device_free_bytes == free
        return max(0, free - full_gpu_margin(self.f, exact))

    @property
    def room(self) -> int | None:
        """What PyTorch could still get: usable device free, or the cap's headroom when less."""
        free, cap = self.free, self.cap_headroom
        if free is None:
            return cap
        return free if cap is None else min(free, cap)

    @property
    def cap_headroom(self) -> int | None:
        if self.f.allowed_bytes is None:
            return None
        # reserved above the cap (set after the cache grew) leaves no room, not negative room
        return max(0, self.f.allowed_bytes - (self.f.reserved_bytes or 0))

    @property
    def unallocated(self) -> int:
        return self.f.reserved_unallocated_bytes or 0

    def too_big(self) -> bool:
        r, t = self.f.requested_bytes, self.f.total_bytes
        return r is not None and t is not None and r > t

    def cap_binding(self) -> bool:
        f = self.f
        if not self.cap_refusal:
            return cap_binding(f)
        return cap_binding(f, printed_error(f.allocated_bytes) + printed_error(f.allowed_bytes))

    def cap_only(self) -> bool:
        f, free = self.f, self.free
        if not self.cap_binding() or f.requested_bytes is None or free is None:
            return False
        return free + self.unallocated >= f.requested_bytes

    def cap_short(self) -> bool:
        """The device had room for the request, the cap's headroom did not: what PyTorch has
        reserved counts against the cap, so a cap can run out before allocated + request reach
        it. Raising the fraction is then the fix; "capacity" would name a GPU that was not full."""
        f, head = self.f, self.cap_headroom
        if head is None or f.allowed_bytes is None or f.requested_bytes is None:
            return False
        if f.total_bytes is not None and f.allowed_bytes >= f.total_bytes:
            return False
        return self.cap_withholds() and head < f.requested_bytes

    def cap_withholds(self) -> bool:
        """A cap is set and the device alone had room for the request."""
        f, free = self.f, self.free
        return (
            f.allowed_bytes is not None
            and free is not None
            and f.requested_bytes is not None
            and free >= f.requested_bytes
        )

    def shortfall(self) -> int | None:
        r, free = self.f.requested_bytes, self.free
        return None if r is None or free is None else max(0, r - free)

    def first_call_failed(self) -> bool:
        """A raw CUDA out-of-memory error at the job's first CUDA call (its context, or the
        first tensor moved to the GPU): nothing of the job's own was on the GPU yet, so another
        process (or a stale one of the same job) had filled it. The caching allocator's own
        failures print figures (the TORCH family); a raw error there is the context's. Any
        stack's failure to create its context counts the same (``phase.context_phase``)."""
        if self.phase == CUDA_INIT:
            return True
        return self.family == formats.TORCH_RAW and self.phase == LOADING

    def held_at_start(self) -> int | None:
        """What others held of the GPU when the job checked it at start (vLLM's own check)."""
        f = self.f
        if f.total_bytes is None or f.free_bytes is None:
            return None
        return f.total_bytes - f.free_bytes

    def taken_before_start(self) -> bool:
        """TensorFlow failed reserving the GPU at its start, and the device it found then was
        (near) full: another process held it before the job began. Also when TensorFlow asked
        for just what it found free (its default without a memory fraction: all the free
        memory) and others held ``GPU_SHARED_MIN_BYTES`` of the device, as vLLM's own check at
        its start reads (``held_at_start``): no fraction was too high, the memory was taken.
        Public12 f-002: 173.69 MiB asked, 173.69 MiB free of 1.96 GiB (8.6 %, not near full);
        the maintainer: "your GPU is already using 1.7GB of memory". A request other than the
        free figure is a fraction of the device asked for, and stays a cap below near-full."""
        if self.phase != STARTUP:
            return False
        if self.device_near_full():
            return True
        f, held = self.f, self.held_at_start()
        asked_the_free = (
            f.requested_bytes is not None
            and f.free_bytes is not None
            and abs(f.free_bytes - f.requested_bytes) <= full_gpu_margin(f, exact=False)
        )
        return asked_the_free and held is not None and held >= GPU_SHARED_MIN_BYTES

    def device_near_full(self) -> bool:
        """At most ``NEAR_FULL_FREE_SHARE`` of the device free. Memory held outside PyTorch can
        explain a failure within the margin, not one with most of the device free (public6
        w-020: 244.65 GiB of 255.98 free, a 2 MiB request refused by a memory fraction)."""
        f = self.f
        return (
            f.free_bytes is not None
            and f.total_bytes is not None
            and f.free_bytes <= NEAR_FULL_FREE_SHARE * f.total_bytes
        )

    def shared(self) -> bool:
        f, o = self.f, self.f.other_bytes
        if o < GPU_SHARED_MIN_BYTES:
            return False
        shortfall = self.shortfall()
        if shortfall is not None:  # figures that show room name no one as the cause
            return 0 < shortfall <= o and not self.cap_binding()
        if f.free_bytes is None or f.total_bytes is None:
            return True
        return self.device_near_full()

    @property
    def slack(self) -> int:
        """Cached-but-idle memory that could serve the request: the free bytes in the blocks of
        the request's pool from a probe record, else the message's reserved-but-unallocated."""
        record, r = self.record, self.f.requested_bytes
        if record is not None and r is not None:
            pool = record.small if r <= SMALL_POOL_REQUEST_MAX_BYTES else record.large
            if pool is not None and pool.free_bytes is not None:
                return pool.free_bytes
        return self.unallocated

    def slack_covers(self) -> bool:
        """The room alone is short of the request; the room plus the idle cache is not."""
        r, room = self.f.requested_bytes, self.room
        if r is None or room is None or self.f.allocated_bytes is None:
            return False
        return room < r <= self.slack + room

    def slack_material(self) -> bool:
        reserved = self.f.reserved_bytes or 0
        return (
            self.slack >= FRAG_MIN_UNALLOCATED_BYTES
            and self.slack >= FRAG_MIN_SHARE_OF_RESERVED * reserved
        )

    def slack_enough_for_the_run(self) -> bool:
        """After a steady run (``FRAG_STEADY_STEPS``) the material share above is enough; a few
        steps in, the idle cache must hold ``FRAG_SHORT_RUN_REQUESTS`` requests of this size or
        the room must have covered all but ``FRAG_SHORT_RUN_NEAR_FIT`` of it;
        before a step, and in either case as an alternative, a quarter of what PyTorch holds
        (``FRAG_MIN_SHARE_WITHOUT_PROGRESS``)."""
        reserved = self.f.reserved_bytes or 0
        if self.steps >= FRAG_STEADY_STEPS:
            return True
        if self.slack >= FRAG_MIN_SHARE_WITHOUT_PROGRESS * reserved:
            return True
        r = self.f.requested_bytes
        if self.steps < 1 or r is None:
            return False
        near_fit = self.need() <= FRAG_SHORT_RUN_NEAR_FIT * r
        return self.slack >= FRAG_SHORT_RUN_REQUESTS * r or near_fit

    def need(self) -> int:
        """The part of the request the room lacks: what only reclaimed cache could serve."""
        r, room = self.f.requested_bytes, self.room
        return 0 if r is None or room is None else max(0, r - room)

    def fragmented(self) -> bool:
        """Fragmentation an allocator setting is measured to fix (``thresholds.py``). Not while
        the optimizer creates its state or the model is loaded onto the GPU: the failing request
        is one of many tensors that all stay, and the figures of one cannot show what the rest
        need."""
        return (
            self.phase not in (OPTIMIZER_STEP, LOADING)
            and self.slack_covers()
            and self.slack_material()
            and self.slack_enough_for_the_run()
            and self.need() <= FRAG_MAX_NEED_SHARE * self.slack
        )

    def leak_outruns_cache(self, growth: Growth) -> bool:
        """The series rises faster than the idle cache could absorb within a few of its points:
        a setting would buy a step or two, not a finished job."""
        rise = growth.growth_bytes / max(1, growth.points - 1)
        return self.slack < LEAK_OUTRUNS_CACHE_POINTS * rise

    def growth_explains(self, growth: Growth) -> bool:
        """A rising series is the cause only if it rose by at least what the request lacked:
        memory that grew by less than the shortfall (a resolution schedule, a warm-up) did not
        take the room the failure needed."""
        shortfall = self.need() if self.room is not None else None
        return shortfall is None or growth.source == "node-rate" or (
            growth.growth_bytes >= shortfall
        )

    def fragmentation_contributes(self) -> bool:
        """Material idle cache would cover the request, but too much of it must be reclaimed
        for a setting to be relied on: fragmentation is part of the story, not the fix."""
        return self.slack_covers() and self.slack_material() and not self.fragmented()

    def non_pytorch_excess(self) -> int | None:
        p, reserved = self.f.process_bytes, self.f.reserved_bytes
        if p is None or reserved is None:
            return None
        return p - reserved - NON_PYTORCH_ALLOWANCE_BYTES

    def non_pytorch_share(self) -> float | None:
        """Memory this process holds outside PyTorch, as a share of the process."""
        p, reserved = self.f.process_bytes, self.f.reserved_bytes
        if p is None or reserved is None or p <= 0:
            return None
        return max(0, p - reserved) / p

    def non_pytorch(self) -> bool:
        if self.family in LIBRARIES:
            return self.framework in PREALLOCATING
        excess, shortfall = self.non_pytorch_excess(), self.shortfall()
        share = self.non_pytorch_share()
        return (
            excess is not None
            and shortfall is not None
            and share is not None
            and shortfall > 0  # figures that show room name no cause
            and excess >= shortfall
            and share >= NON_PYTORCH_MIN_SHARE
            and not self.cap_binding()
        )

    def unseen_outside(self) -> int | None:
        """Memory held outside this process's PyTorch when the message lists no processes."""
        f = self.f
        if f.process_bytes is not None or f.other_processes:
            return None
        if f.total_bytes is None or f.free_bytes is None or f.reserved_bytes is None:
            return None
        return f.total_bytes - f.free_bytes - f.reserved_bytes - NON_PYTORCH_ALLOWANCE_BYTES

    def unseen_covers(self) -> bool:
        """Memory outside this process's PyTorch (no process list) covers the shortfall."""
        unseen, shortfall = self.unseen_outside(), self.shortfall()
        return (
            unseen is not None
            and shortfall is not None
            and (shortfall > 0 or self.device_near_full())
            and unseen >= max(shortfall, GPU_SHARED_MIN_BYTES)
        )

    def unseen_is_another_process(self) -> bool:
        """...and it is more than PyTorch itself holds: another process, not a library."""
        unseen, reserved = self.unseen_outside(), self.f.reserved_bytes
        return (
            self.unseen_covers()
            and unseen is not None
            and reserved is not None
            and unseen >= UNSEEN_OTHER_MIN_SHARE_OF_RESERVED * reserved
        )

    def fits(self) -> bool:
        r, room = self.f.requested_bytes, self.room
        if self.paddle_full():
            return False
        return r is not None and room is not None and room >= r and not self.cap_binding()

    def paddle_full(self) -> bool:
        """PaddlePaddle failing with free memory above the request but a sliver (at most
        ``NEAR_FULL_FREE_SHARE``) of what its allocator holds plus that free: a full device. Its
        message prints no total, and its allocator asks more than the tensor (chunks, alignment):
        public4 t-006 (108.75 MiB free for 80 MiB, 10.65 GiB held) and public7 z-025 (45.69 MiB
        for 17.27 MiB, 23.65 GiB held) were both a card too small for the work."""
        f = self.f
        return (
            self.family == formats.PADDLE
            and f.total_bytes is None
            and f.allocated_bytes is not None
            and f.free_bytes is not None
            and f.free_bytes <= NEAR_FULL_FREE_SHARE * (f.allocated_bytes + f.free_bytes)
        )

    def thin_headroom(self) -> bool:
        f, room = self.f, self.room
        if f.requested_bytes is None or f.total_bytes is None or room is None:
            return False
        scale = f.allowed_bytes if f.allowed_bytes is not None else f.total_bytes
        return self.unallocated + room - f.requested_bytes < THIN_HEADROOM_SHARE * scale


def _primary(x: _Facts) -> str:
    if x.family in (formats.HOST_ALLOC, formats.HOST_KILLED, formats.RAY_KILLED):
        return "host-oom-killed"
    if x.family == formats.MPS:  # PyTorch's own watermark, where the figures reach it
        if x.f.requested_bytes is None:  # the message cut before its request: cannot tell
            return "unknown"
        return "memory-fraction-cap" if mps_watermark_reached(x.f) else "capacity"
    if x.family == formats.VLLM_STARTUP:  # vLLM checked the free memory before it started
        held = x.held_at_start()
        return "gpu-shared" if held is not None and held >= GPU_SHARED_MIN_BYTES else (
            "memory-fraction-cap"
        )
    if x.family in (
        formats.ENGINE_NO_CACHE, formats.ENGINE_WARMUP, formats.ONNXRUNTIME_LIMIT, formats.HAMI
    ):
        # the engine's budget (vLLM's gpu_memory_utilization, SGLang's --mem-fraction-static)
        # spent before any KV cache fit, or leaving too little outside it for the warm-up; ONNX
        # Runtime's arena at its gpu_mem_limit; the pod's vGPU memory limit HAMi enforces
        return "memory-fraction-cap"
    if x.phase == STARTUP and x.family not in LIBRARIES:
        # TensorFlow's reservation at start, not the model's work (a library it starved: below)
        if x.taken_before_start():
            return "gpu-shared"
        # an op's allocation failing in the pool: not the reservation (public14 n-003)
        return "unknown" if x.family in POOL_ALLOCATIONS else "memory-fraction-cap"
    if x.too_big():
        return "capacity"
    if x.cap_only():
        return "memory-fraction-cap"
    if x.shared() or x.first_call_failed():
        return "gpu-shared"
    if x.unseen_is_another_process():
        return "gpu-shared"
    if x.fragmented():
        return "fragmentation"
    if x.non_pytorch():
        return "non-pytorch-memory"
    if x.unseen_covers():
        return "unknown"
    if x.f.requested_bytes is None:
        capacity_words = (formats.VLLM, formats.RETRY_EXHAUSTED, formats.TGI)
        return "capacity" if x.family in capacity_words else "unknown"
    if x.fits():
        return "unknown"
    if x.cap_short():
        return "memory-fraction-cap"
    return "capacity"


def _contributing(x: _Facts, primary: str) -> list[str]:
    out: list[str] = []
    if primary != "gpu-shared" and x.f.other_bytes >= GPU_SHARED_MIN_BYTES:
        out.append("gpu-shared")
    if primary != "fragmentation" and (x.fragmented() or x.fragmentation_contributes()):
        out.append("fragmentation")
    if primary == "fragmentation" and x.cap_withholds():
        out.append("memory-fraction-cap")
    excess = x.non_pytorch_excess()
    if primary != "non-pytorch-memory" and excess is not None and excess >= GPU_SHARED_MIN_BYTES:
        out.append("non-pytorch-memory")
    if primary == "fragmentation" and x.thin_headroom():
        out.append("capacity")
    if primary == "unknown" and x.unseen_covers():
        out += ["gpu-shared", "non-pytorch-memory"]
    if primary == "gpu-shared" and x.unseen_is_another_process():
        out.append("non-pytorch-memory")
    return out


def classify(
    event: OomEvent,
    node: NodeEvidence | None = None,
    growth: Growth | None = None,
    rate_growth: Growth | None = None,
    record: ProbeRecord | None = None,
    phase: str | None = None,
    steps: int = 0,
) -> Verdict:
    """The verdict for one failure; ``growth`` is a leak series, ``rate_growth`` the node's rate,
    ``record`` the allocator's state the OOM probe wrote at the failure (only an ``ok`` one),
    ``phase`` where the job failed (``phase.py``), ``steps`` how many steps its log shows finished
    before (``progress.finished_steps``).

    A leak series takes the primary slot from any kind but ``gpu-shared`` (a finding of its own)
    and ``fragmentation`` a setting is measured to fix (that setting removed the OOM of a job
    leaking 256 MiB a step, sweep:I-full-u1536-h1408-leak256), unless the series rises faster
    than the idle cache could absorb (``LEAK_OUTRUNS_CACHE_POINTS``); beside fragmentation
    ``leak`` contributes."""
    figures = with_node(event.figures, node)
    plan = xlacompile.compile_plan(event.message) if event.family == formats.XLA else None
    if plan is not None:  # refused at compile time: nothing ran, nothing else held the chip
        return Verdict(xlacompile.kind(plan), (), xlacompile.summary(plan), figures, plan=plan)
    usable = record if record is not None and record.status == "ok" else None
    refusal = formats.CAP_REFUSED in event.message
    facts = _Facts(figures, event.family, usable, phase, steps, event.framework, refusal)
    if growth is not None and not facts.growth_explains(growth):
        # a rise smaller than the shortfall is not the cause; from the node's samples it is
        # still a rise worth naming, from figures the job printed (labels read, not known) not
        rate_growth = rate_growth or (growth if growth.source != "log" else None)
        growth = None
    kind = _primary(facts)
    contributing = _contributing(facts, kind)
    outruns = growth is not None and kind == "fragmentation" and facts.leak_outruns_cache(growth)
    if growth is not None and (kind not in ("gpu-shared", "fragmentation") or outruns):
        if kind not in ("unknown", "leak"):
            contributing.insert(0, kind)
        kind = "leak"
    elif (growth is not None or rate_growth is not None) and kind != "leak":
        contributing.append("leak")
    unique = tuple(dict.fromkeys(k for k in contributing if k != kind))
    return Verdict(kind, unique, summarize(kind, facts, event, growth), figures, facts.fits())


def summarize(kind: str, x: _Facts, event: OomEvent, growth: Growth | None) -> str:
    """One line with the numbers that decided ``kind``."""
    f = x.f
    r, t, free, a, u = (
        f.requested_bytes,
        f.total_bytes,
        f.free_bytes,
        f.allocated_bytes,
        x.unallocated,
    )
    if kind == "leak" and growth is not None:
        where = "samples" if growth.source == "samples" else "figures the job printed"
        return (
            f"leak: memory rose steadily from {fs(growth.first_bytes)} to {fs(growth.last_bytes)} "
            f"over {growth.points} {where} before the out-of-memory failure"
        )
    if kind == "capacity" and x.too_big():
        return f"capacity: the {fs(r)} request alone exceeds the GPU's {fs(t)}"
    if kind == "unknown" and x.phase == STARTUP and x.family in POOL_ALLOCATIONS:
        asked = f"the {fs(r)} an op asked" if r is not None else "an op's allocation"
        found = f" from the {fs(free)} free of the {fs(t)} GPU" if free and t else ""
        return (
            f"unknown: {asked} did not fit TensorFlow's pool before a step finished; the pool "
            f"was reserved at start{found} (all of it by default, or "
            "per_process_gpu_memory_fraction of it): the work's size or a memory fraction is the "
            "limit, and the log does not say which"
        )
    if kind == "memory-fraction-cap" and x.phase == STARTUP:
        return (
            f"memory-fraction-cap: TensorFlow could not reserve the {fs(r)} it maps at start "
            "(per_process_gpu_memory_fraction of the GPU, nearly all of it by default): the GPU "
            "had less free than the fraction asks"
        )
    if x.family == formats.MPS:
        held = "" if f.process_bytes is None else (
            f": the process held {fs(f.process_bytes)} on the device, "
            f"{fs(f.allocated_bytes)} of it PyTorch's (its tensors and its cache)"
        )
        asked = f"the {fs(r)} request" if r is not None else "a request"
        if kind == "memory-fraction-cap":
            return (
                f"memory-fraction-cap: PyTorch's MPS high watermark ({fs(f.allowed_bytes)}) "
                f"stopped {asked}{held}"
            )
        if kind == "unknown":
            return (
                f"unknown: PyTorch's MPS allocator refused a request the log cut off{held}; its "
                f"high watermark is {fs(f.allowed_bytes)}"
            )
        return f"capacity: Metal refused {asked} under PyTorch's MPS limits{held}"
    if x.family == formats.VLLM_STARTUP:
        share = math.floor((free or 0) / (t or 1) * 100) / 100
        lead = "gpu-shared" if kind == "gpu-shared" else "memory-fraction-cap"
        return (
            f"{lead}: vLLM found {fs(free)} free of the {fs(t)} GPU at start, less than the "
            f"{fs(r)} its gpu_memory_utilization asks: {fs(x.held_at_start())} was held by other "
            f"processes; at most {share:.2f} of the GPU is there to take"
        )
    if x.family == formats.ENGINE_NO_CACHE:
        return (
            "memory-fraction-cap: the engine's memory budget (vLLM's gpu_memory_utilization, "
            "SGLang's --mem-fraction-static) was spent on the weights and the profiling run "
            "before any KV cache fit"
        )
    if x.family == formats.ENGINE_WARMUP:
        return (
            "memory-fraction-cap: vLLM ran out warming up with max_num_seqs dummy requests at "
            "once: its own settings (max_num_seqs, gpu_memory_utilization) leave the warm-up too "
            "little room"
        )
    if x.family == formats.HAMI:
        over = (f.process_bytes or 0) - (f.allowed_bytes or 0)
        return (
            f"memory-fraction-cap: HAMi refused an allocation: the container's GPU memory with it "
            f"came to {fs(f.process_bytes)}, {fs(over)} past the {fs(f.allowed_bytes)} of vGPU "
            "memory the pod was given"
        )
    if x.family == formats.ONNXRUNTIME_LIMIT:
        asked = f" the {fs(r)} request" if r is not None else " the request"
        return (
            "memory-fraction-cap: ONNX Runtime's CUDA arena reached its own limit "
            f"(gpu_mem_limit) before{asked}"
        )
    if kind == "memory-fraction-cap":
        if not x.cap_binding():
            return (
                f"memory-fraction-cap: {fs(f.reserved_bytes)} reserved + the {fs(r)} request "
                f"exceed the {fs(f.allowed_bytes)} allowed by the memory fraction, while the GPU "
                f"had {fs(free)} free"
            )
        return (
            f"memory-fraction-cap: {fs(a)} allocated + the {fs(r)} request exceed the "
            f"{fs(f.allowed_bytes)} allowed by the memory fraction, while the GPU had "
            f"{fs(free)} free"
        )
    if kind == "gpu-shared" and x.taken_before_start():
        return (
            f"gpu-shared: TensorFlow found {fs(free)} free of the {fs(t)} GPU when it started and "
            "could not reserve its memory: another process held the GPU before the job began"
        )
    if kind == "gpu-shared" and x.first_call_failed():
        held = (
            f"; other processes hold {fs(f.other_bytes)} "
            f"({', '.join(_who(p) for p in f.other_processes[:3])})"
            if f.other_processes
            else ""
        )
        return (
            "gpu-shared: the job's first CUDA call failed (CUDA context creation) before it put "
            "anything on the GPU: another process, or a stale process of this job, had filled it"
            + held
        )
    if kind == "gpu-shared" and not f.other_processes and x.unseen_is_another_process():
        own = _allocator(event)
        return (
            f"gpu-shared: {fs(x.unseen_outside())} of the {fs(t)} GPU is held outside this "
            f"process's {own}, more than the {fs(f.reserved_bytes)} {own} holds: most likely "
            f"another process (the message lists none; the node report names them); the "
            f"{fs(r)} request found {fs(free)} free"
        )
    if kind == "gpu-shared":
        names = ", ".join(_who(p) for p in f.other_processes[:3])
        need = (
            _within_margin(x)
            or f"the {fs(r)} request needed {fs(x.shortfall())} more than the {fs(free)} free"
            if r
            else (f"the GPU had {fs(free)} free" if free is not None else "the GPU was full")
        )
        return f"gpu-shared: other processes hold {fs(f.other_bytes)} of the GPU ({names}); {need}"
    if kind == "fragmentation":
        room = x.room
        cap = f.allowed_bytes is not None and room is not None and room != x.free
        left = f"{fs(room)} left under the {fs(f.allowed_bytes)} cap" if cap else f"{fs(free)} free"
        idle = (
            f"{fs(x.slack)} free in the cache's blocks (probe record)"
            if x.record is not None
            else f"{fs(u)} reserved but unallocated"
        )
        return (
            f"fragmentation: {idle} + {left} would cover the "
            f"{fs(r)} request; PyTorch holds {fs(f.reserved_bytes)} with {fs(a)} in use"
        )
    if kind == "non-pytorch-memory":
        excess = x.non_pytorch_excess()
        if excess is not None and event.family not in LIBRARIES:
            return (
                f"non-pytorch-memory: this process holds {fs(f.process_bytes)} but PyTorch "
                f"reserved only {fs(f.reserved_bytes)}; the difference covers the {fs(r)} "
                "request's shortfall"
            )
        return (
            f"non-pytorch-memory: {library_failed(event)} "
            f"beside what {event.framework} reserves up front"
        )
    if kind == "capacity":
        if r is not None and free is not None:
            tail = (
                f"; {_allocator(event)} holds {fs(a)} allocated and {fs(u)} reserved but "
                "unallocated"
                if a is not None
                else ""
            )
            gpu = f" on a {fs(t)} GPU" if t is not None else ""
            if x.fragmentation_contributes() and not x.slack_enough_for_the_run():
                share = x.slack / (f.reserved_bytes or 1)
                if x.steps == 0:
                    tail += (
                        "; packed, the idle cache would cover this request, but no step of the "
                        f"failing work finished before the failure and the {fs(x.slack)} idle is "
                        f"{share:.0%} of what "
                        "PyTorch holds: the rest of the step needs more than a setting can recover"
                    )
                else:
                    times = x.slack / (r or 1)
                    tail += (
                        f"; packed, the idle cache would cover this request, but only "
                        f"{x.steps} steps finished before the failure and the {fs(x.slack)} idle "
                        f"holds {times:.1f} requests of this size ({share:.0%} of what PyTorch "
                        "holds): a job this early needs more than a setting can recover"
                    )
            elif x.fragmentation_contributes():
                tail += (
                    f"; packed, the idle cache would cover it, but {fs(x.need())} of its "
                    f"{fs(x.slack)} would have to be reclaimed: more than an allocator setting was "
                    "measured to recover"
                )
            if event.family == formats.RETRY_EXHAUSTED:
                tail += (
                    "; the job's retry loop halved the batch down to zero (figures of the last "
                    "OOM it caught, from the probe record)"
                )
            exceeds = f"the {fs(r)} request exceeds the {fs(free)} free{gpu}"
            found = _within_margin(x, gpu) or exceeds
            return f"capacity: {found}{tail}"
        if r is not None:
            return (
                f"capacity: {event.framework or 'the job'} could not get the {fs(r)} it requested"
            )
        if event.family == formats.RETRY_EXHAUSTED:
            return (
                "capacity: the job's retry loop (find_executable_batch_size) halved the batch "
                "down to zero and every size ran out of GPU memory"
            )
        return f"capacity: {event.framework or 'the job'} ran out of GPU memory ({event.family})"
    if kind == "host-oom-killed":
        if event.family == formats.HOST_ALLOC:
            asked = f": could not allocate {fs(r)}" if r is not None else ""
            return f"host-oom-killed: host (CPU) memory ran out, not GPU memory{asked}"
        if event.family == formats.RAY_KILLED:
            return (
                "host-oom-killed: Ray's memory monitor killed a worker as the node's host (CPU) "
                "memory ran low, not GPU memory"
            )
        if EVICTED in event.message:
            return (
                "host-oom-killed: the kubelet evicted the pod: the node was low on host (CPU) "
                "memory, not GPU memory"
            )
        if any(words in event.message for words in SCHEDULER_LIMIT):
            return (
                "host-oom-killed: the batch scheduler (Slurm, PBS, LSF) killed the job over its "
                "memory limit: host (CPU) memory, not GPU memory"
            )
        if MANAGED_REPLICA in event.message:
            return (
                "host-oom-killed: the training service killed a replica that ran out of its "
                "machine's memory: host (CPU) memory, not GPU memory"
            )
        if "DataLoader worker" in event.message:
            return (
                "host-oom-killed: the kernel killed a DataLoader worker (SIGKILL): host (CPU) "
                "memory ran out, not GPU memory"
            )
        return (
            "host-oom-killed: the job was killed (SIGKILL, the kernel's OOM killer): host (CPU) "
            "memory ran out, not GPU memory"
        )
    unseen = x.unseen_outside()
    if unseen is not None and unseen > 0 and not x.fits():
        return (
            f"unknown: {fs(unseen)} of the {fs(t)} GPU is held outside this process's PyTorch "
            "allocator and the message lists no processes: another process or non-PyTorch memory"
        )
    if x.fits():
        return f"unknown: the figures show room ({fs(x.room)}) for the {fs(r)} request"
    if event.family in LIBRARIES:
        return (
            f"unknown: {library_failed(event)}: the GPU was "
            "full, and the log does not say with what (the job's own tensors, or another process; "
            "the node report can tell)"
        )
    if formats.NVML_ASSERT in event.message:
        return (
            "unknown: PyTorch ran out of GPU memory and its message was lost to an assert while "
            "it listed the GPU's processes (NVML refused them: a MIG slice, a Jetson, an "
            "unprivileged container): the log has no memory figures"
        )
    if event.family == formats.EXCEPTION_NAME and event.message.startswith("MemoryError"):
        return (
            "unknown: a MemoryError ended the job, its message not in the log: host (CPU) memory "
            "refused, or a GPU library that raises it (RAPIDS' RMM, CuPy); the lines before it "
            "and the node report can tell"
        )
    who = event.framework or (
        "an OutOfMemoryError's" if event.family == formats.EXCEPTION_NAME else event.family
    )
    if r is None and a is not None and t is None:  # an allocator's summary alone (BFC's)
        limit = f" of its {fs(f.allowed_bytes)} limit" if f.allowed_bytes is not None else ""
        return (
            f"unknown: {who}'s allocator ran out with {fs(a)} in use{limit}; the log does not "
            "show the request that failed (another process may hold the rest of the GPU; the "
            "node report can tell)"
        )
    return (
        f"unknown: {who} failure with no memory figures in the log "
        "(another process may hold the GPU; the node report can tell)"
    )


def _within_margin(x: _Facts, gpu: str = "") -> str | None:
    """For a printed free figure at or above the request: why that is still a full GPU."""
    r, free = x.f.requested_bytes, x.f.free_bytes
    if r is None or free is None or free < r:
        return None
    if x.paddle_full():
        return (
            f"the {fs(r)} request found {fs(free)} free beside the "
            f"{fs(x.f.allocated_bytes)} Paddle holds: a sliver of the card, and Paddle's "
            "allocator asks more than the tensor: the GPU was full"
        )
    return (
        f"the {fs(r)} request found {fs(free)} free{gpu}, within the {fs(free - (x.free or 0))} "
        "a new segment needs beyond the request near a full GPU (allocation granularity and the "
        "figures' rounding): the GPU was full"
    )


def _allocator(event: OomEvent) -> str:
    """Whose allocator the message's allocated and reserved figures are."""
    return "Paddle" if event.framework == "paddle" else "PyTorch"


def _who(p: OtherProcess) -> str:
    name = f"{p.namespace}/{p.pod}" if p.pod else f"pid {p.pid}"
    return f"{name}: {fs(p.bytes)}"
