"""Held-out set D: seven new GPU out-of-memory jobs, written blind to the diagnosis rules.

Same dict shape as sets B and C (name, script, args, intended, intended_action, pattern, fixes,
est_s). ``intended``: the kind a correct diagnosis names, decided by how the job is built and
checked by its runs, not assumed: fragmentation means ``expandable_segments:True`` removes the
OOM, every other kind means it does not; every fix (``--fix NAME``) must remove it. ``est_s``:
wall seconds of one run on an H200, process start and CUDA init included (about 5 s there:
torch's sources are compiled at every start), from the H200 run; three runs a job (baseline,
expandable_segments, fix): 3 x 72 = 216 s.
"""

from __future__ import annotations

SCENARIOS: list[dict] = [
    {
        "name": "lora_ddp_one_gpu",
        "script": "lora_ddp_one_gpu.py",
        "args": [],
        "intended": "gpu-shared",
        "intended_action": (
            "one rank per GPU: nproc_per_node must not exceed the GPUs the pod has (here 1; "
            "accumulate gradients instead), or give the pod a second GPU"
        ),
        "pattern": (
            "torchrun-style launcher, nproc_per_node=2 on a pod with one GPU: both LoRA ranks "
            "pick cuda:0 (local_rank % device_count), each holds a third of the GPU of frozen "
            "base and needs a quarter more for its first step; one rank runs out, the launcher "
            "stops the other and prints a ChildFailedError summary; [rankN]: prefixes"
        ),
        "fixes": ["one-rank"],
        "est_s": 14,
    },
    {
        "name": "rlhf_colocated_engine",
        "script": "rlhf_colocated_engine.py",
        "args": [],
        "intended": "capacity",
        "intended_action": (
            "lower the rollout engine's gpu_memory_utilization (0.85 leaves ~22 GiB; the policy "
            "update needs ~40 GiB), or put the engine to sleep / free its KV cache during the "
            "update"
        ),
        "pattern": (
            "vLLM-style engine in the trainer's process pre-allocates 85 % of the GPU (less the "
            "weights) as a paged KV cache through PyTorch; rollouts run; the PPO update of 8 "
            "SwiGLU blocks on 64 x 512 tokens runs out in what is left"
        ),
        "fixes": ["lower-utilization"],
        "est_s": 12,
    },
    {
        "name": "longdoc_eager_attention",
        "script": "longdoc_eager_attention.py",
        "args": [],
        "intended": "capacity",
        "intended_action": (
            "a fused attention kernel (F.scaled_dot_product_attention / flash attention) instead "
            "of the hand-written score matrix; not a smaller batch (it is already 1)"
        ),
        "pattern": (
            "length-sorted eval of a long-document encoder with hand-written attention, batch 1: "
            "2k/4k/8k-token documents pass, the first 16384-token one needs ~32 GiB of score "
            "matrix and float32 softmax in 20 GiB; tqdm bar with len= postfix"
        ),
        "fixes": ["sdpa"],
        "est_s": 7,
    },
    {
        "name": "moe_probe_hidden",
        "script": "moe_probe_hidden.py",
        "args": [],
        "intended": "fragmentation",
        "intended_action": (
            "expandable_segments:True, or allocate the forward's buffers once at the largest "
            "batch (static buffers, fixed-size expert tiles)"
        ),
        "pattern": (
            "hash-routed MoE stack (Mixtral expert shapes, 8 layers) over packed batches of "
            "80k-130k tokens; per-expert buckets of varying size (up to a third of the tokens), "
            "fp32 probe features of every layer (128-256 MiB) kept between them for 4 batches; "
            "largest working set ~19 GiB in 23 GiB"
        ),
        "fixes": ["static-buffers"],
        "est_s": 12,
    },
    {
        "name": "nb_gpushare_finetune",
        "script": "nb_gpushare_finetune.py",
        "args": [],
        "intended": "memory-fraction-cap",
        "intended_action": (
            "a larger share of the GPU for this kernel (the platform's "
            "set_per_process_memory_fraction(1/4) caps it at 35 GiB; the job needs ~47 GiB and "
            "the GPU has >100 GiB free)"
        ),
        "pattern": (
            "notebook platform shim calls set_per_process_memory_fraction(0.25) before the "
            "user's code; a 1.3B fine-tune (12 trainable blocks, 16 x 2048 tokens, AdamW) needs "
            "~47 GiB; HF-Trainer-style dict prints"
        ),
        "fixes": ["fraction-0.5"],
        "est_s": 12,
    },
    {
        "name": "embed_server_graphs",
        "script": "embed_server_graphs.py",
        "args": [],
        "intended": "leak",
        "intended_action": (
            "bound the CUDA-graph cache: pad to a few length buckets and capture them into one "
            "shared pool (pool=torch.cuda.graph_pool_handle()); not a smaller batch"
        ),
        "pattern": (
            "uvicorn-style embedding server capturing one CUDA graph (own private pool, "
            "0.3-2.7 GiB) per new padded request shape into an unbounded cache; reserved memory "
            "logged per capture climbs until a capture runs out in 24 GiB; the server logs the "
            "exception and exits 1"
        ),
        "fixes": ["length-buckets"],
        "est_s": 9,
    },
    {
        "name": "video_trt_workspace",
        "script": "video_trt_workspace.py",
        "args": [],
        "intended": "non-pytorch-memory",
        "intended_action": (
            "give the detector engine's execution context user-managed device memory from "
            "PyTorch (or a smaller workspace / optimization profile): 58 GiB sits in cuMemAlloc "
            "allocations outside PyTorch's allocator"
        ),
        "pattern": (
            "TensorRT-style engine (ctypes to the CUDA driver) cuMemAllocs 2 GiB of weights and "
            "a 56 GiB execution-context workspace; a PyTorch re-ID tracker's soft association "
            "with a 262144-track gallery (~33 GiB) runs out in the 18 GiB PyTorch has; "
            "TRT-style lines and JSON lines"
        ),
        "fixes": ["torch-workspace"],
        "est_s": 6,
    },
]
