"""The fix: an allocator setting only where one helps (fragmentation), concrete actions always.

Setting choice for fragmentation under PyTorch's native allocator:

- ``expandable_segments:True`` when every release the evidence allows has it (2.1+) and the build
  is not ROCm: measured on the H200 to fix pinned-segment fragmentation, where
  ``max_split_size_mb`` and ``garbage_collection_threshold`` did not.
- else ``max_split_size_mb:MAX_SPLIT_SIZE_MB`` (1.10+; > 20 everywhere) so big cached blocks are
  not split for small requests.

The value is merged into the job's current setting (its other keys kept, keys the release or
backend rejects dropped) and checked again; a setting the job already has (a no-op) is never
recommended: the remaining fix goes into the actions instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from . import allocconf, formats, xlacompile
from .allocconf import ASYNC, KEYS, Checked
from .classify import EVICTED, LIBRARIES, MANAGED_REPLICA, Verdict, cap_binding, printed_error
from .logtext import own_text
from .model import ALLOC_CONF_ENV, Figures, Growth, NodeEvidence, OomEvent, Recommendation
from .phase import (
    BACKWARD,
    CUDA_INIT,
    ENGINE_WARM_UP,
    GRAPH_CAPTURE,
    LOADING,
    OPTIMIZER_STEP,
    RETRY_EXHAUSTED,
    STARTUP,
    context_phase,
    failure_phase,
    tensorflow_phase,
)
from .sizes import format_size as fs
from .thresholds import NON_PYTORCH_ALLOWANCE_BYTES, SETTING_MIN_FINISHED_STEPS
from .torchversion import TorchRange

MAX_SPLIT_SIZE_MB: Final = 128
"""Blocks above this are never split; valid on every release that has the key (> 20)."""

EXPANDABLE_SAFE_WITH_OTHERS: Final = (2, 5)
"""Before ~2.5 expandable_segments with max_split_size_mb or the gc threshold could assert, and
CUDA IPC of tensors (DataLoader workers sharing CUDA tensors) was unsupported."""

REDUCE_PEAK: Final = (
    "reduce peak memory: a smaller batch (when training, gradient accumulation keeps the "
    "effective batch)",
    "use mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16))",
    "enable activation checkpointing "
    "(torch.utils.checkpoint / model.gradient_checkpointing_enable())",
    "for inference, run under torch.inference_mode() so no autograd graph is kept",
)
PAST_THE_CARD: Final = (
    "check that a {request} tensor is meant: it is larger than the whole {total} GPU, so no "
    "setting fits it; the likeliest is an input larger than intended (a full-size image or "
    "video, every frame at once, a long audio or sequence: resize, crop, tile or process it in "
    "chunks) or its shape is wrong (channels, a label count, an index out of range)",
    "check that the memory-efficient path runs: attention without FlashAttention or SDPA "
    "(eager), a broken xformers or compiled extension, or cuDNN turned off asks far more",
    "reduce the batch if the tensor grows with it; otherwise split the work (chunks, tiles) or "
    "shard the model (FSDP / DeepSpeed ZeRO) across GPUs",
)
"""A PyTorch request larger than the whole card (one tensor past it). Public threads that settled
one (every set up to public31, 33 threads): the input was larger than intended in 13 (image size,
frames, sequence or audio length), its shape or an index was wrong in 4, a fallback path or a
broken library asked it in 7 (eager attention, xformers, cuDNN off, an attention fallback), the
batch in 5, and in 4 the work moved to the host or was chunked. A smaller batch, the first
action everywhere else, fixed 5 of 33."""
OTHER_STACK_PEAK: Final = (
    "reduce the work per call: a smaller batch, shorter inputs or a lower resolution, or a "
    "smaller or quantized model",
    "use a GPU with more memory, or spread the work over several GPUs",
)
"""The levers of a stack with no entry of its own here (TensorRT, ONNX Runtime, Paddle, MXNet,
Faiss, XGBoost, ...): PyTorch's own are not its."""
LEAK_FIXES: Final = (
    "accumulate numbers, not tensors: total_loss += loss.item() (a tensor keeps its graph alive)",
    "store outputs with .detach() (and .cpu()) instead of keeping graph-attached tensors in lists",
    "run evaluation under torch.inference_mode() / torch.no_grad()",
    "find the growing allocation: torch.cuda.memory._record_memory_history() then "
    "torch.cuda.memory._dump_snapshot('snap.pickle') and open it at pytorch.org/memory_viz",
)
PHASE_FIXES: Final = {
    OPTIMIZER_STEP: (
        "it failed in optimizer.step() creating the optimizer's state (AdamW keeps two fp32 "
        "tensors per parameter, 8 bytes each): shard the optimizer state (FSDP, DeepSpeed "
        "ZeRO-1/2), use an optimizer with less state (Adafactor, SGD with momentum, 8-bit Adam), "
        "keep the state in bf16, or train fewer parameters (LoRA, frozen layers)"
    ),
    BACKWARD: (
        "it failed in the backward pass, on activations kept for the gradients: enable "
        "activation checkpointing, or a smaller micro-batch with gradient accumulation"
    ),
    GRAPH_CAPTURE: (
        "it failed capturing a CUDA graph, and each captured graph keeps a private memory pool: "
        "capture fewer shapes, share one pool across captures (pool=torch.cuda.graph_pool_handle(),"
        " largest shape first), or leave more memory free for capture"
    ),
    LOADING: (
        "it failed loading or moving the model to the GPU: load to the CPU first "
        "(torch.load(..., map_location='cpu', mmap=True)), in bf16/fp16, or shard it across "
        "GPUs (device_map='auto', FSDP)"
    ),
    RETRY_EXHAUSTED: (
        "the job's own retry loop already shrank the batch and still ran out, so a smaller batch "
        "is not the fix: reduce memory per sample (shorter or bucketed sequences, "
        "memory-efficient attention via torch.nn.functional.scaled_dot_product_attention, "
        "activation checkpointing) or shard the model"
    ),
}
"""The first action for a capacity failure, by where it failed (``phase.py``)."""

INFERENCE_PEAK: Final = (
    "run under torch.inference_mode() so no autograd graph is kept",
    "reduce peak memory: fewer sequences per batch, or a shorter maximum input length",
    "use bf16/fp16 weights and activations, or a quantized model",
)
"""A forward-pass OOM of a job that runs inference: no gradient accumulation or activation
checkpointing (those are for training), the graph autograd keeps first."""

PRIVATE_POOL_MIN_SHARE: Final = 0.10
"""CUDA graphs' private pools are named as the cause's place when they hold at least this share
of what PyTorch allocated: held-out D's embed_server_graphs (a growing graph cache) held 21.55 GiB
of 138.31 GiB (15.6 %) in them. A share, so it holds on every card."""

PRIVATE_POOL_FIX: Final = (
    "{size} of PyTorch's memory is in CUDA graphs' private pools (each captured graph keeps its "
    "own pool, and a cache of graphs per shape grows with every new shape): capture a few padded "
    "shapes (buckets) instead of every length, share one pool across captures "
    "(pool=torch.cuda.graph_pool_handle()), bound the graph cache, or run rare shapes eagerly"
)

COLOCATED_ENGINE_FIX: Final = (
    "a colocated inference engine reserved gpu_memory_utilization={value} of the GPU for its "
    "weights and KV cache at start: lower it (the KV cache shrinks, the engine still runs) so the "
    "training side has room, or give the engine its own GPU"
)
_ENGINE_UTILIZATION = re.compile(
    r"gpu_memory_utilization\s{0,4}[=:]\s{0,4}(0?\.\d{1,4}|1\.0{1,4})\b"
)

ENGINE_WARM_UP_FIX: Final = (
    "vLLM ran out warming up its sampler or pooler, after its memory budget "
    "(gpu_memory_utilization of the GPU) went to the weights and the KV cache: lower "
    "gpu_memory_utilization so the warm-up has room (the KV cache shrinks, the engine still "
    "runs), or lower max_num_seqs (the warm-up runs that many dummy requests at once)"
)
ENGINE_DUMMY_RUN_FIX: Final = (
    "vLLM ran out in a dummy run of its sampler or pooler, which it makes with max_num_seqs "
    "requests at once while profiling its memory and again after allocating its KV cache: lower "
    "max_num_seqs (or max_num_batched_tokens); if it had logged its KV cache's size before "
    "failing, lower gpu_memory_utilization so the warm-up has room"
)
"""The public write-ups of vLLM's warm-up OOM were fixed by one of the two (public18 g-007: a
lower --gpu-memory-utilization and --max-num-seqs); PyTorch's training levers do not apply.
During profiling (``profile_run`` makes the same dummy run before any KV cache exists)
gpu_memory_utilization frees nothing: the KV cache's size logged before the failure tells the
warm-up (``_KV_CACHE_SIZED``)."""
_KV_CACHE_SIZED: Final = re.compile(r"Available KV cache memory:|GPU KV cache size:")


def _warm_up_fix(precontext: str) -> str:
    """vLLM's warm-up lever by whether its KV cache's size was logged before the failure."""
    sized = _KV_CACHE_SIZED.search(precontext[-65536:]) is not None
    return ENGINE_WARM_UP_FIX if sized else ENGINE_DUMMY_RUN_FIX


SERVE_SMALLER: Final = (
    "serve a quantized or smaller model, or shard it over more GPUs (tensor parallelism)"
)

ENGINE_GRAPH_FIX: Final = (
    "{engine} ran out capturing its CUDA graphs, after its memory budget went to the weights and "
    "the KV cache: lower {lever} so capture has room (the KV cache shrinks, the engine still "
    "runs), capture fewer batch sizes ({sizes}), or run it eagerly ({eager})"
)
_ENGINES: Final = (
    ("SGLang", re.compile(r"\bsglang\b", re.IGNORECASE),
     "--mem-fraction-static", "--cuda-graph-max-bs", "--disable-cuda-graph"),
    ("vLLM", re.compile(r"\bvllm\b|VllmWorker", re.IGNORECASE),
     "gpu_memory_utilization", "max_num_seqs, cudagraph_capture_sizes", "--enforce-eager"),
)
"""Inference engines whose CUDA-graph capture follows their memory budget's reservation: the
public threads' fixes were the engine's own levers (public7 z-008: a lower
--gpu-memory-utilization; z-021: a lower mem_fraction_static; public8 m-012: eager mode)."""

EVICTION_FIX: Final = (
    "set the pod's memory request to what it uses: under node memory pressure the kubelet evicts "
    "first the pods that use more than they request (a request of 0 goes first)"
)
RAISE_LIMIT: Final = "raise the container's memory limit (and set the request equal to it)"
FEWER_WORKERS: Final = (
    "use fewer DataLoader workers (each worker holds its own copy of the dataset object)"
)
NO_PINNING: Final = (
    "set pin_memory=False or a smaller prefetch_factor "
    "(pinned host buffers count against the limit)"
)
MMAP_LOAD: Final = (
    "load checkpoints with torch.load(..., mmap=True) or straight to the GPU (map_location='cuda')"
)
SHM_SIZE: Final = (
    "a memory-backed /dev/shm (emptyDir medium: Memory) counts against the limit: "
    "size it explicitly"
)
HOST_FIXES: Final = (RAISE_LIMIT, FEWER_WORKERS, NO_PINNING, MMAP_LOAD, SHM_SIZE)
"""Host memory's levers, the container's limit first; PyTorch's loaders' levers in between."""


@dataclass(frozen=True)
class Context:
    event: OomEvent
    verdict: Verdict
    release: TorchRange
    current: Checked | None
    backend: str
    node: NodeEvidence | None
    growth: Growth | None
    precontext: str = ""
    """The log before the failure (bounded by the scanner): the job's own output and traceback."""
    phase: str | None = None
    """Where a PyTorch job failed (``phase.py``), read once by the caller."""
    steps: int = 0
    """Steps the log shows finished before the failure (``progress.finished_steps``)."""


def _setting(ctx: Context) -> tuple[dict[str, str] | None, list[str]]:
    """The allocator keys to set for fragmentation, or None with the reason in actions."""
    current = {e.key: e.value for e in ctx.current.entries} if ctx.current else {}
    bad = ctx.current.bad_keys if ctx.current else frozenset()
    rocm = ctx.event.rocm
    if ctx.backend == ASYNC:
        return None, [
            "the job uses backend:cudaMallocAsync, whose pool PyTorch's fragmentation settings "
            "do not touch: reduce peak memory instead"
        ]
    expandable = KEYS["expandable_segments"]
    if allocconf.key_available(expandable, ctx.release, rocm=rocm):
        if current.get("expandable_segments") == "True" and "expandable_segments" not in bad:
            return None, [
                "expandable_segments is already True, so no allocator setting is left to try: "
                + REDUCE_PEAK[0]
            ]
        return {"expandable_segments": "True"}, []
    split = KEYS["max_split_size_mb"]
    if allocconf.key_available(split, ctx.release, rocm=rocm):
        mb = (
            allocconf._as_int(current.get("max_split_size_mb", ""))
            if "max_split_size_mb" not in bad
            else None
        )
        if mb is not None and 20 < mb <= MAX_SPLIT_SIZE_MB:
            return None, [
                f"max_split_size_mb is already {mb}, so no allocator setting is left to try"
                + ("" if rocm else " on this release (torch >= 2.1 has expandable_segments:True)")
                + ": "
                + REDUCE_PEAK[0]
            ]
        return {"max_split_size_mb": str(MAX_SPLIT_SIZE_MB)}, []
    return None, [
        "this torch release has no allocator setting against fragmentation: upgrade to "
        "torch >= 2.1 (expandable_segments:True), or " + REDUCE_PEAK[0]
    ]


SIMULATOR_FIX: Final = (
    "a simulator's GPU memory grows with its scene: run fewer parallel environments (num_envs), "
    "fewer or smaller cameras, or a lower render resolution"
)


DALI_FIX: Final = (
    "DALI's decoders hold their own device and pinned buffers per thread: size them from a run "
    "with memory_stats=True (the decoder's device_memory_padding, host_memory_padding), or lower "
    "batch_size or num_threads"
)
"""public24 f-004: the padding set from memory_stats let the pipeline run."""

HAMI_SHARED_CARD: Final = (
    "HAMi shares this card between pods and the card itself ran out, not this pod's vGPU "
    "limit: the pods on it may be given more (nvidia.com/gpumem) than it has; give the job a "
    "card of its own or lower what the others are given"
)
UNIFIED_MEMORY: Final = (
    "on Apple silicon the GPU shares the machine's memory with every process: close what else "
    "holds memory, or lower the work (batch, context, a smaller or quantized model)"
)
NVML_REFUSED: Final = (
    "PyTorch ran out of GPU memory and NVML refused to list the GPU's processes (a MIG slice, a "
    "Jetson, an unprivileged container: pytorch/pytorch#112377), so nvidia-smi cannot list them "
    "either; on a MIG slice the slice's memory is the limit: less work, or a larger profile"
)
DRIVER_CALLS: Final = (
    "a driver call of PyTorch's allocator failed (cuMemCreate/cuMemMap, the path of "
    "expandable_segments:True): on WSL2 and Jetson those calls fail with memory free "
    "(unslothai/unsloth#2401): there, remove expandable_segments:True; elsewhere the GPU was full"
)
XLA_CONSTANT_FIX: Final = (
    "XLA allocates a compiled program's constants on the GPU outside the memory JAX preallocated "
    "(75 % of the GPU by default): leave room for them with XLA_PYTHON_CLIENT_PREALLOCATE=false or "
    "a lower XLA_PYTHON_CLIENT_MEM_FRACTION"
)
SIMULATORS: Final = ("isaacgym", "omniverse", "physx")
"""The GPU simulators' stacks: their memory grows with the scene (``SIMULATOR_FIX``)."""
OWN_LEVERS: Final[dict[str, str]] = {
    "hami": HAMI_SHARED_CARD,
    **dict.fromkeys(SIMULATORS, SIMULATOR_FIX),
    "dali": DALI_FIX,
}
"""A stack's own lever beside an ``unknown`` failure's check: HAMi's card shared by pods
(public26 e-007, e-029: two pods of 16000 MiB on one 16 GB card); the simulators' memory grows with
their scene (Isaac Gym's PhysX; Omniverse Kit's Vulkan renderer under Isaac Sim and Isaac Lab,
public23 b-002, b-018, b-025), DALI's decoders size their own buffers."""


def _outside_beyond_runtime(f: Figures) -> int | None:
    """What the process holds outside PyTorch's cache beyond the CUDA runtime's ordinary share
    (``NON_PYTORCH_ALLOWANCE_BYTES``): a simulator's, a renderer's, another framework's, NCCL's
    buffers of a large group. A setting is recommended only while this is no larger than the
    idle cache it recovers (public23 b-001: 4.72 GiB beside 468 MiB idle, a simulator and
    renderer in the process; the GPU runs where the setting fixed the job held at most the
    runtime's share outside). No share of the process decides it: a simulator's memory does not
    shrink on a larger card (the second review: b-001's figures on an 80 GiB card are 8 % of the
    process); a multi-GPU job's NCCL memory past the idle cache is told the same, the setting
    named as a try (the first review's H100 job)."""
    p, reserved = f.process_bytes, f.reserved_bytes
    if p is None or reserved is None:
        return None
    return p - reserved - NON_PYTORCH_ALLOWANCE_BYTES


NPU_ALLOC_CONF: Final = (
    "Ascend's torch_npu reads its allocator's settings from PYTORCH_NPU_ALLOC_CONF, not "
    "PYTORCH_CUDA_ALLOC_CONF: its fragmentation settings are not measured here; try them on one "
    "run, not as the fix"
)


def _alloc_conf(ctx: Context) -> tuple[str | None, list[str]]:
    kind, contributing = ctx.verdict.kind, ctx.verdict.contributing
    if kind == "fragmentation" and ctx.event.framework == "torch-npu":
        return None, [NPU_ALLOC_CONF, REDUCE_PEAK[0]]
    # Only when fragmentation is the cause. As a contributing kind beside a leak it did not help:
    # on the H200 the leak scenario with 257 MiB reserved-unallocated still ran out one step
    # later under expandable_segments:True (evaluation/results/gpu-proof.md).
    if kind != "fragmentation" or ctx.event.framework != "pytorch":
        return None, []
    updates, notes = _setting(ctx)
    if updates is None:
        return None, notes
    value = allocconf.merge(ctx.current, updates)
    if allocconf.check(value, ctx.release, ctx.backend, rocm=ctx.event.rocm).problems:
        return None, notes
    u = ctx.verdict.figures.reserved_unallocated_bytes
    if ctx.steps < SETTING_MIN_FINISHED_STEPS:  # one message shows one allocation, not the step
        return None, [
            f"{ALLOC_CONF_ENV}={value} may let this allocation through (the allocator could "
            f"reuse the {fs(u)} reserved but unallocated), but the log shows no finished step, "
            "so it cannot show that the rest of the job fits: try it on one run, not as the fix",
            REDUCE_PEAK[0],
        ]
    outside = _outside_beyond_runtime(ctx.verdict.figures)
    if outside is not None and u is not None and outside > u:
        return None, [
            f"{ALLOC_CONF_ENV}={value} may let this allocation through (the allocator could "
            f"reuse the {fs(u)} reserved but unallocated), but this process holds "
            f"{fs(outside)} outside PyTorch beyond the CUDA runtime's own (another library's "
            "memory no PyTorch setting reaches, and the log cannot show it steady): try it on "
            "one run, not as the fix",
            REDUCE_PEAK[0],
        ]
    notes.append(
        f"set {ALLOC_CONF_ENV}={value}: lets the allocator reuse the {fs(u)} reserved "
        "but unallocated"
    )
    keys = {e.key for e in allocconf.check(value).entries}
    if "expandable_segments" in updates and not ctx.release.surely_at_least(
        EXPANDABLE_SAFE_WITH_OTHERS
    ):
        if keys & {"max_split_size_mb", "garbage_collection_threshold"}:
            notes.append(
                "before torch 2.5, expandable_segments together with max_split_size_mb or "
                "garbage_collection_threshold could assert: drop those keys if it does"
            )
        notes.append(
            "before torch 2.5, expandable_segments does not support sharing CUDA tensors between "
            "processes (CUDA IPC, e.g. DataLoader workers returning CUDA tensors)"
        )
    if kind == "fragmentation" and "capacity" in contributing:
        notes.append("the GPU stays nearly full even without fragmentation: " + REDUCE_PEAK[0])
    if kind == "fragmentation" and "leak" in contributing:
        notes.append(
            "memory also rose steadily before the failure: the setting buys room, but if "
            "something keeps tensors alive across steps it will run out again: " + LEAK_FIXES[0]
        )
    return value, notes


LLAMA_CPP_FIXES: Final = (
    "put fewer layers on the GPU (llama.cpp --n-gpu-layers; ollama's num_gpu) or load a smaller "
    "quantization",
    "shrink the context (llama.cpp --ctx-size; ollama's num_ctx): its KV cache grows with it",
    "ollama sizes the layers it offloads from its own estimate: leave headroom with "
    "OLLAMA_GPU_OVERHEAD (bytes), fewer parallel requests (OLLAMA_NUM_PARALLEL) or loaded models "
    "(OLLAMA_MAX_LOADED_MODELS)",
)
"""llama.cpp's and ollama's levers (public9 o-008: OLLAMA_GPU_OVERHEAD; o-022: a context sized
to the GPU; public7 z-006: a run with one layer fewer on the GPU did not fail)."""
LLAMA_CPP_HOST: Final = (
    "shrink what llama.cpp puts in host memory: a shorter context (--ctx-size; ollama's num_ctx), "
    "a smaller micro-batch (-ub), a quantized KV cache (-ctk/-ctv q8_0) or a smaller model"
)
"""llama.cpp's CPU buffers: the KV cache grows with the context, the compute buffer with the
micro-batch (public33 i-004: a 1M-token context; i-026: -ub 6500, fixed by a smaller -ub)."""


CATBOOST_FIXES: Final = (
    "train a shallower model (a lower depth: its GPU memory grows steeply with it) or with fewer "
    "borders (border_count)",
    "keep categorical features in pinned host memory (gpu_cat_features_storage="
    "'CpuPinnedMemory') or combine fewer of them (max_ctr_complexity)",
    "CatBoost takes gpu_ram_part (default 0.95) of the GPU memory free when it starts, so free "
    "the GPU of other processes first; it prints the same words when its pinned host pool "
    "(pinned_memory_size) runs out",
)
"""CatBoost's levers (catboost/catboost#302: gpu_cat_features_storage from its maintainer;
#1081: depth 16 failed where 14 ran; its pool, stack_like_memory_pool.h, serves the device's
memory and the pinned host memory alike, with one wording)."""


MPS_FIXES: Final = (
    "reduce the work (a smaller batch or resolution, half precision, a smaller model): on Apple "
    "silicon the GPU shares the machine's memory, and the watermark (by default 1.7 times the "
    "GPU's recommended working set) is already past what it can hold without paging",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO raises the watermark (0.0 removes it): the job may then "
    "finish, slowly, paging to disk, or stall the machine",
    "return cached memory between phases: torch.mps.empty_cache()",
)
"""PyTorch's MPS allocator stops at its high watermark (MPSAllocator: the ratio times Metal's
recommendedMaxWorkingSetSize, 1.7 by default); public21 t-001 finished with the ratio at 0.0,
t-008 (64 GB, 72 GB held) was told to generate with less memory."""


SPARK_RAPIDS_FIXES: Final = (
    "lower spark.rapids.sql.concurrentGpuTasks (to 1 first): the tasks running at once share "
    "the GPU's memory",
    "give each task less data: more shuffle partitions (spark.sql.shuffle.partitions) or "
    "smaller input splits (spark.sql.files.maxPartitionBytes)",
)
"""The RAPIDS Accelerator's own advice for GPU OOMs (its best-practices guide: concurrent tasks
first; NVIDIA/spark-rapids discussion 5373: too much data per task or too many tasks at once)."""


LIBRARY_ROOM: Final = {
    formats.NCCL: "leave NCCL headroom: create the process group (and run a first collective) "
    "before loading the model, call torch.cuda.empty_cache() before collectives, or lower "
    "NCCL_BUFFSIZE",
    formats.CUDA_LIBRARY: "leave room for cuBLAS/cuDNN workspaces: torch.cuda.empty_cache() "
    "before the failing call, or CUBLAS_WORKSPACE_CONFIG=:4096:8",
}
"""What makes room for a library that allocates outside the framework's cache (NCCL, cuBLAS)."""


def _library_actions(event: OomEvent) -> list[str]:
    """What makes room for a library's own allocation (``LIBRARY_ROOM``), then a smaller peak.
    cuBLAS's and cuDNN's room is PyTorch's (its cache, its variable); cuFFT's, cuSOLVER's and
    cuSPARSE's under PyTorch its cache (and cuFFT's plan cache: the review); cuRAND, OpenCL or
    another stack is told only to reduce the work."""
    if event.family not in LIBRARIES:
        return []
    if event.family == formats.CUDA_LIBRARY:
        library = formats.library_named(event.message)
        if event.framework != "pytorch" or library in ("cuRAND", "OpenCL"):
            return [OTHER_STACK_PEAK[0]]
        if library not in (None, "cuBLAS", "cuDNN"):  # cuFFT, cuSOLVER, cuSPARSE under PyTorch
            plans = (
                ", or a smaller cuFFT plan cache (torch.backends.cuda.cufft_plan_cache.max_size)"
                if library == "cuFFT" else ""
            )
            room = f"leave room for {library}'s own memory: torch.cuda.empty_cache() before the "
            return [f"{room}failing call{plans}", REDUCE_PEAK[0]]
    return [LIBRARY_ROOM[event.family], REDUCE_PEAK[0]]


def _framework_actions(ctx: Context) -> list[str]:
    fw, kind, f = ctx.event.framework, ctx.verdict.kind, ctx.verdict.figures
    if fw == "jax":
        share = "" if kind == "gpu-shared" else " if the GPU has room"
        return [
            "JAX preallocates 75% of the GPU: raise XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.9)"
            + share
            + ", or set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand",
            "reduce the batch size or shard the computation across devices",
        ]
    if fw == "tensorflow":
        return [
            "reduce the batch size; use mixed precision "
            "(tf.keras.mixed_precision.set_global_policy('mixed_float16'))",
            "with other processes on the GPU, enable tf.config.experimental.set_memory_growth",
        ]
    if fw == "cupy":
        return [
            "free cached blocks between phases: cupy.get_default_memory_pool().free_all_blocks()",
            "process the data in smaller pieces",
        ]
    if fw == "tgi":
        return [
            "lower --max-batch-prefill-tokens (and --max-batch-total-tokens / --max-total-tokens) "
            "until the warm-up fits",
            "shard the model over more GPUs (--num-shard) or serve a quantized model (--quantize)",
        ]
    if fw == "llama.cpp":
        return list(LLAMA_CPP_FIXES)
    if fw == "catboost":
        return list(CATBOOST_FIXES)
    if fw in SIMULATORS:  # the simulator's scene, not a model's batch
        return [SIMULATOR_FIX]
    if fw == "spark-rapids":
        return list(SPARK_RAPIDS_FIXES)
    if fw == "vllm":
        return [
            "raise gpu_memory_utilization (default 0.9) if nothing else uses the GPU, "
            "or lower max_model_len / max_num_seqs",
            "use tensor_parallel_size > 1 or a quantized model",
        ]
    if fw not in (None, "pytorch"):  # PyTorch's levers (autocast, checkpointing) are not its
        return list(OTHER_STACK_PEAK)
    if (
        kind == "capacity"
        and f.requested_bytes is not None
        and f.total_bytes is not None
        and f.requested_bytes > f.total_bytes
    ):
        return [
            PAST_THE_CARD[0].format(request=fs(f.requested_bytes), total=fs(f.total_bytes)),
            *PAST_THE_CARD[1:],
        ]
    return [*REDUCE_PEAK, "shard the model (FSDP / DeepSpeed ZeRO) or use a GPU with more memory"]


def _kind_actions(ctx: Context) -> list[str]:
    kind, f, fam = ctx.verdict.kind, ctx.verdict.figures, ctx.event.family
    if _past_one_xpu_allocation(ctx.event.message, f):
        return [
            "Intel's Level Zero caps one allocation at about 4 GiB on Intel GPUs other than the "
            f"Data Center GPU Max series: the {fs(f.requested_bytes)} request is past it though "
            "the GPU has room for it: set UR_L0_ENABLE_RELAXED_ALLOCATION_LIMITS=1 to lift the "
            "cap (slower kernels), or split the tensor",
        ]
    if fam == formats.MPS:  # the watermark's lever only where it was the limit
        return list(MPS_FIXES) if kind == "memory-fraction-cap" else [MPS_FIXES[0], MPS_FIXES[2]]
    if fam == formats.VLLM_STARTUP and f.free_bytes is not None and f.total_bytes:
        most = math.floor(f.free_bytes / f.total_bytes * 100) / 100
        return [
            f"lower gpu_memory_utilization to at most {most:.2f} (what was free at start), or "
            "stop what else holds the GPU (nvidia-smi; the node's GPUNodeReport names pods)",
        ]
    if kind == "gpu-shared":
        if f.other_processes:
            out = [
                f"isolate the GPU: other processes hold {fs(f.other_bytes)} of it; stop them or "
                "make sure one pod gets the whole GPU (request nvidia.com/gpu; check "
                "time-slicing/MPS)",
            ]
        else:
            out = [
                "find what else holds the GPU: nvidia-smi --query-compute-apps=pid,used_memory "
                "--format=csv on the node, or its GPUNodeReport (kubectl get gpunodereport NODE "
                "-o yaml lists each pod's memory on each GPU); stop it (it may be a stale process "
                "of an earlier run of this job)",
                "make sure one pod gets the whole GPU (request nvidia.com/gpu; check "
                "time-slicing/MPS)",
            ]
        if ctx.node is not None and ctx.node.allocated is False:
            out.append(
                "this pod used a GPU the kubelet did not allocate to it: request nvidia.com/gpu"
            )
        if ctx.event.framework in ("jax", "vllm", "tensorflow"):
            out += _framework_actions(ctx)[:1]
        return out
    if kind == "leak":
        growth = ctx.growth
        head = []
        if growth is not None:
            head = [
                f"memory grew by {fs(growth.growth_bytes)} over {growth.points} points: "
                "something keeps tensors alive across steps"
            ]
        return head + list(LEAK_FIXES)
    if kind == "memory-fraction-cap":
        fraction = ""
        if f.total_bytes and f.requested_bytes is not None:
            held = f.allocated_bytes or 0
            if not cap_binding(f):  # the cache, not allocations, filled the cap
                held = max(held, f.reserved_bytes or 0)
            need = (held + f.requested_bytes) / f.total_bytes
            fraction = f" to about {_fraction_with_headroom(need):.2f}"
        if ctx.phase == STARTUP:
            return [
                "set a lower per_process_gpu_memory_fraction (e.g. 0.8: "
                "tf.compat.v1.GPUOptions(per_process_gpu_memory_fraction=0.8)) or let TensorFlow "
                "grow its memory instead of reserving it at start "
                "(tf.config.experimental.set_memory_growth(gpu, True) / allow_growth=True)",
                "check what else holds part of the GPU (a display, another process: nvidia-smi)",
            ]
        if fam == formats.ENGINE_NO_CACHE:
            lever = (
                "--mem-fraction-static" if ctx.event.framework == "sglang"
                else "gpu_memory_utilization"
            )
            return [
                f"raise {lever} if nothing else uses the GPU (the KV cache gets what the weights "
                "leave of the budget)",
                SERVE_SMALLER,
            ]
        if fam == formats.ENGINE_WARMUP:  # vLLM's own message, without PyTorch's before it
            return [_warm_up_fix(ctx.precontext), SERVE_SMALLER]
        if fam == formats.HAMI:
            return [
                "raise the pod's vGPU memory (HAMi's nvidia.com/gpumem or "
                "nvidia.com/gpumem-percentage resource) to what the job needs, or give it a "
                "whole GPU; the card itself may have room",
                "or make the work fit the limit (a smaller batch, shorter sequences, "
                "activation checkpointing)",
            ]
        if fam == formats.ONNXRUNTIME_LIMIT:
            return [
                "raise the CUDA execution provider's gpu_mem_limit (or leave it unset) if the "
                "GPU has room; arena_extend_strategy=kSameAsRequested wastes less of the limit",
                "run smaller inputs or batches",
            ]
        if ctx.event.framework == "jax":
            return [f"raise XLA_PYTHON_CLIENT_MEM_FRACTION{fraction}"]
        if ctx.event.framework == "vllm":
            return [f"raise gpu_memory_utilization{fraction}"]
        return [
            f"raise the per-process memory fraction{fraction} "
            "(torch.cuda.set_per_process_memory_fraction): the cap, not the GPU, ran out",
        ]
    if kind == "non-pytorch-memory":
        if fam in LIBRARIES:
            grow = (
                "let the framework allocate on demand so the library has room "
                "(TensorFlow: tf.config.experimental.set_memory_growth / allow_growth; JAX: "
                "XLA_PYTHON_CLIENT_PREALLOCATE=false or a lower XLA_PYTHON_CLIENT_MEM_FRACTION)"
            )
            return [grow, "reduce the batch size"]
        return [
            "find what else allocates in this process outside PyTorch (CuPy/JAX/TensorRT/custom "
            "CUDA extensions, cuDNN benchmark workspaces) and free or limit it",
        ]
    if kind == "host-oom-killed":
        if fam == formats.RAY_KILLED:
            return [
                "give Ray's tasks and actors memory to match what they use (memory=... in their "
                "options) so fewer run at once on a node, or raise the pod's memory limit",
                RAISE_LIMIT,
                "Ray's monitor kills at RAY_memory_usage_threshold (0.95 of the node's memory by "
                "default): a job that needs that much needs more memory, not a higher threshold",
            ]
        if EVICTED in ctx.event.message:
            return [EVICTION_FIX, *HOST_FIXES]
        if MANAGED_REPLICA in ctx.event.message:  # no pod to resize: the service's machine
            return [
                "choose a machine type with more memory for the replica (its memory is the "
                "machine's)",
                "hold less in host memory: smaller shuffle and prefetch buffers, no dataset "
                "cached in memory",
            ]
        if "DataLoader worker" in ctx.event.message:  # the workers' copies first
            return [FEWER_WORKERS, RAISE_LIMIT, NO_PINNING, MMAP_LOAD, SHM_SIZE]
        if ctx.event.framework == "llama.cpp":  # its CPU backend's buffers: context and batch
            return [LLAMA_CPP_HOST, RAISE_LIMIT]
        if ctx.event.framework not in (None, "pytorch") and fam == formats.HOST_ALLOC:
            return [RAISE_LIMIT, SHM_SIZE]  # no PyTorch: its loaders' levers do not apply
        return list(HOST_FIXES)
    if kind == "unknown":
        check = (
            "check what else holds the GPU (nvidia-smi --query-compute-apps=pid,used_memory "
            "--format=csv, or the node agent's GPUNodeReport)"
        )
        r, free = f.requested_bytes, f.free_bytes
        if r is not None and free is not None and ctx.verdict.shows_room:
            first = (
                f"the figures show room ({fs(free)} free for the {fs(r)} request): the memory "
                "was taken and given back around the failure (another process, or a large "
                "request the driver could not place near full); if it happens again, " + check
            )
        elif {"gpu-shared", "non-pytorch-memory"} <= set(ctx.verdict.contributing):
            first = (
                "memory outside this process's PyTorch cache holds the GPU, and the log cannot "
                "tell whose (another process, or this one outside PyTorch): " + check
            )
        elif r is None and f.allocated_bytes is not None and f.total_bytes is None:
            first = "the log does not show the request that failed: " + check
        else:
            first = "the log has no usable memory figures: " + check
        if ctx.event.framework == "spark-rapids":  # executors and tasks share the GPU
            return [*SPARK_RAPIDS_FIXES, first]
        if ctx.event.framework in ("metal", "mlx"):  # no nvidia-smi, no GPU of its own
            return [UNIFIED_MEMORY]
        if formats.NVML_ASSERT in ctx.event.message:  # nvidia-smi's NVML refused the same list
            return [NVML_REFUSED, REDUCE_PEAK[0]]
        if formats.DRIVER_CHECK in ctx.event.message:  # expandable segments' driver calls
            return [DRIVER_CALLS, first]
        if formats.XLA_CONSTANT in ctx.event.message:  # outside the pool JAX preallocated
            return [XLA_CONSTANT_FIX, first]
        if fam == formats.EXCEPTION_NAME and ctx.event.message.startswith("MemoryError"):
            return [  # host memory or a GPU library's pool: the message, cut away, said which
                "find the MemoryError's message (the full log, the notebook's output): a size "
                "refused on the host, or a GPU library's (RMM, CuPy) pool",
                RAISE_LIMIT,
                first,
            ]
        own = ctx.event.framework
        return [
            first,
            *([OWN_LEVERS[own]] if own in OWN_LEVERS else []),
            *_library_actions(ctx.event),
            "if it fails at start-up (context creation, .cuda()), the GPU was already full: "
            "isolate the GPU",
        ]
    return []


LEVEL_ZERO_MAX_ALLOCATION_BYTES: Final = 4 * 2**30
XPU_ONE_ALLOCATION_BYTES: Final = LEVEL_ZERO_MAX_ALLOCATION_BYTES - printed_error(
    LEVEL_ZERO_MAX_ALLOCATION_BYTES
)
"""4 GiB less what PyTorch's two decimals round away (``printed_error``): Level Zero's
per-allocation cap (max_mem_alloc_size) on many Intel GPUs (public21 t-006, 4.66 GiB on a
5.65 GiB card; t-014, 4.00 GiB on an A770, Intel's forum "USM Allocations with more than 4G";
PyTorch PR 176868)."""


def _past_one_xpu_allocation(message: str, f: Figures) -> bool:
    """An XPU request at or past Level Zero's one-allocation cap that the GPU had room for: what
    PyTorch holds plus the request fit the card, the free figure and any memory fraction. Only
    PyTorch's own message ("GPU N has a total capacity of ..."): IPEX checks the cap first and
    says so in its own words (the review: intel-extension-for-pytorch#629)."""
    r, total = f.requested_bytes, f.total_bytes
    if "XPU out of memory" not in message or r is None or total is None:
        return False
    if "has a total capacity of" not in message:
        return False
    held = (f.allocated_bytes or 0) + (f.reserved_unallocated_bytes or 0)
    room = total - held
    if f.free_bytes is not None:
        room = min(room, f.free_bytes)
    if f.allowed_bytes is not None:
        room = min(room, f.allowed_bytes - held)
    return XPU_ONE_ALLOCATION_BYTES <= r <= room


FRACTION_HEADROOM: Final = 2.0
"""The failing allocation shows only the step that failed: later steps (optimizer state after the
first step, longer sequences) need more. Measured on the H200 (gpu-proof.md): the fraction that
just covered the failing step (0.10) failed one step later; twice that worked."""


def _fraction_with_headroom(need: float) -> float:
    """`need` times FRACTION_HEADROOM, rounded up to the next 0.05, at most 1."""
    return min(1.0, math.ceil(need * FRACTION_HEADROOM * 20 - 1e-9) / 20)


_BACKWARD_FRAMES = re.compile(r"backward|run_backward|optimizer|\.step\(", re.IGNORECASE)
_INFERENCE_WORDS = re.compile(r"\b(inference|predict\w*|generat\w*|eval\w*|serving)\b",
                              re.IGNORECASE)


def looks_like_inference(precontext: str) -> bool:
    """The job printed that it runs inference and the failure has no backward pass in its
    traceback: then the graph autograd keeps is the first thing to drop."""
    tail = precontext[-16384:]
    return bool(_INFERENCE_WORDS.search(tail)) and not _BACKWARD_FRAMES.search(tail)


def phase_of(event: OomEvent, precontext: str) -> str | None:
    """Where a PyTorch job failed, whether TensorFlow failed at its start, or whether any stack
    failed creating its device context (``phase.py``). The frames and banners are read from the
    failure's own rank's lines, their prefixes removed (``[rank0]:   File ...`` is a frame)."""
    if context_phase(event.message) is not None:
        return CUDA_INIT
    if event.framework == "pytorch":
        return failure_phase(own_text(precontext, event.rank))
    if event.framework == "tensorflow":
        return tensorflow_phase(own_text(precontext, event.rank))
    return None


def _place_actions(ctx: Context) -> list[str]:
    """Where the memory went, when the log names a place a generic action would miss: CUDA
    graphs' private pools, an inference engine capturing its graphs after its budget was spent,
    a colocated inference engine's reservation."""
    out: list[str] = []
    f = ctx.verdict.figures
    pools, allocated = f.private_pool_bytes, f.allocated_bytes
    if pools is not None and allocated and pools >= PRIVATE_POOL_MIN_SHARE * allocated:
        out.append(PRIVATE_POOL_FIX.format(size=fs(pools)))
    if ctx.phase == GRAPH_CAPTURE:
        tail = ctx.precontext[-65536:]
        for name, marker, lever, sizes, eager in _ENGINES:
            if marker.search(tail):
                out.append(ENGINE_GRAPH_FIX.format(
                    engine=name, lever=lever, sizes=sizes, eager=eager
                ))
                break
    if ctx.phase == ENGINE_WARM_UP:
        out.append(_warm_up_fix(ctx.precontext))
    if ctx.event.framework == "pytorch" and ctx.verdict.kind in ("capacity", "leak"):
        engine = _ENGINE_UTILIZATION.search(ctx.precontext[-65536:])
        if engine is not None:
            out.append(COLOCATED_ENGINE_FIX.format(value=engine.group(1)))
    return out


def _might_help(ctx: Context) -> list[str]:
    """Capacity with fragmentation contributing: a setting may recover part of the idle cache,
    said as an action, never as the recommendation (precision first: it is not the fix)."""
    v = ctx.verdict
    if v.kind != "capacity" or "fragmentation" not in v.contributing:
        return []
    if ctx.event.framework != "pytorch":
        return []
    updates, _ = _setting(ctx)
    if updates is None:
        return []
    value = ",".join(f"{k}:{val}" for k, val in updates.items())
    return [
        f"{ALLOC_CONF_ENV}={value} may recover part of the "
        f"{fs(v.figures.reserved_unallocated_bytes)} reserved but unallocated, but not the room "
        "the job needs beyond it: not recommended as the fix"
    ]


_SPLIT_ATTENTION: Final = re.compile(formats.SPLIT_ATTENTION)
SPLIT_ATTENTION_FIX: Final = (
    "the split attention refused to run: even cut in 64 slices, one slice needs more than the GPU "
    "has free: generate at a lower resolution (the message names its limit) or fewer frames at "
    "once, or use an attention that never builds the whole attention matrix (AUTOMATIC1111: "
    "--xformers or --opt-sdp-attention)"
)


def recommend(ctx: Context) -> Recommendation:
    plan = ctx.verdict.plan
    if plan is not None:  # XLA's TPU compiler: its own levers, no allocator of PyTorch's
        return Recommendation(None, None, tuple(xlacompile.actions(plan)))
    alloc_conf, notes = _alloc_conf(ctx)
    kind = ctx.verdict.kind
    actions = list(notes)
    if _SPLIT_ATTENTION.search(ctx.event.message):  # Stable Diffusion's forks: their own lever
        actions.append(SPLIT_ATTENTION_FIX)
    actions += _place_actions(ctx)
    actions += _kind_actions(ctx)
    if kind == "capacity" or (kind == "fragmentation" and alloc_conf is None and not notes):
        framework = _framework_actions(ctx)
        phase = ctx.phase
        if phase == ENGINE_WARM_UP:  # the engine's levers, in its place action, not PyTorch's
            framework = []
        elif phase in PHASE_FIXES:
            framework = [PHASE_FIXES[phase], *framework]
            if phase == RETRY_EXHAUSTED:
                framework = [a for a in framework if a != REDUCE_PEAK[0]]
        elif ctx.event.framework == "pytorch" and looks_like_inference(ctx.precontext):
            # measured: half the batch was not enough; inference_mode first
            framework = [*INFERENCE_PEAK, *[a for a in framework if a not in REDUCE_PEAK]]
        actions += framework
        actions += _might_help(ctx)
    if ctx.current is not None and ctx.current.problems:
        dropped = " (left out of the recommended value)" if alloc_conf else ""
        actions.append(
            f"the current {ALLOC_CONF_ENV} has problems for this release{dropped}: "
            + "; ".join(ctx.current.problems)
        )
    unique = tuple(dict.fromkeys(actions))
    return Recommendation(ALLOC_CONF_ENV if alloc_conf else None, alloc_conf, unique)


def host_recommendation(limit: int | None, request: int | None) -> Recommendation:
    actions = list(HOST_FIXES)
    if limit is None:
        actions.insert(
            0, "the container has no memory limit: the node itself ran out; set requests and limits"
        )
    elif request is not None and request < limit:
        actions.insert(
            0,
            f"the memory request ({fs(request)}) is below the limit ({fs(limit)}): the node may be "
            "overcommitted; set request = limit",
        )
    return Recommendation(None, None, tuple(actions))
