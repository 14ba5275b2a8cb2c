"""The held-out OOM jobs, in the dict format of ``SCENARIOS`` in evaluation/gpu/run_proof.py.

Written blind: without reading the diagnosis rules, to stand for what real jobs do. Fields:

- name, script (in this folder), args, base_conf (the job's own PYTORCH_CUDA_ALLOC_CONF, if any)
- job: the real job it stands for
- intended: the kind a correct diagnosis should name, our honest expectation before any run
  (fragmentation, gpu-shared, capacity, memory-fraction-cap, leak, non-pytorch-memory); the
  re-runs are the truth, and a job whose measured fixes disagree stays in the set
- intended_action: the fix that is the point, where it is a code change
- pattern: what the job does to run out of memory
- fixes: code fixes run as ``--fix NAME`` (one process each); extra_fixes: also offered by the
  script, run only with ``run_heldout.py --all-fixes``
- fallback_args: if the baseline fails for a reason other than memory (e.g. NCCL or worker
  processes cannot start on the machine), the baseline is run again with these, and every
  variant uses them
- est_s: expected seconds for one run on an H200 (for the runner's time estimate)
- extra: written and checked like the others, but left out of the default run to keep it
  to about 7 minutes (their logs look much like vision_multiscale's: capacity, forward pass,
  a large request); ``run_heldout.py --with-extra`` or ``--only NAME`` runs them
"""

from __future__ import annotations

HELDOUT: list[dict] = [
    {
        "name": "vision_multiscale",
        "script": "vision_multiscale.py",
        "args": [],
        "job": "ResNet-50 training with progressive resizing and aspect-ratio buckets",
        "intended": "capacity",
        "intended_action": "smaller batch at high resolution / bf16 autocast",
        "pattern": "batch 128 kept while resolution rises 224..896; the 896 phase needs ~160 GiB",
        "fixes": ["amp"],
        "extra_fixes": ["pixel-budget"],
        "est_s": 7,
    },
    {
        "name": "grad_accum_graphs",
        "script": "grad_accum_graphs.py",
        "args": [],
        "job": "GPT-2 medium fine-tune (transformers) with gradient accumulation done wrong",
        "intended": "capacity",
        "intended_action": "backward() per micro-batch",
        "pattern": "loss summed over 16 micro-batches, one backward: every graph alive (~15 GiB "
        "each)",
        "fixes": ["backward-each"],
        "extra_fixes": [],
        "est_s": 9,
        "extra": True,
    },
    {
        "name": "adamw_first_step",
        "script": "adamw_first_step.py",
        "args": [],
        "job": "full fine-tune of an 11B Llama-style model, fp32 master weights, bf16 autocast",
        "intended": "capacity",
        "intended_action": "optimizer with less state / lower-precision state / fewer trainable "
        "parameters",
        "pattern": "weights+grads 60% of the GPU; AdamW's lazy state init in step 1 needs 60% more",
        "fixes": ["adafactor", "bf16-params", "freeze-base"],
        "extra_fixes": [],
        "est_s": 11,
    },
    {
        "name": "cudagraph_pools",
        "script": "cudagraph_pools.py",
        "args": [],
        "job": "LLM decode server capturing a CUDA graph per batch size (vLLM's 67 sizes)",
        "intended": "capacity",
        "intended_action": "share one graph pool (capture largest first) / fewer capture sizes",
        "pattern": "static KV cache to gpu_memory_utilization 0.95; each graph's private pool adds "
        "up (~20 GiB) during capture",
        "fixes": ["shared-pool"],
        "extra_fixes": ["gpu-util=0.9", "eager"],
        "est_s": 6,
    },
    {
        "name": "compile_step",
        "script": "compile_step.py",
        "args": [],
        "job": "torch.compile'd GPT training step (Inductor, default mode), batch too big",
        "intended": "capacity",
        "intended_action": "smaller micro-batch with gradient accumulation",
        "pattern": "16 GiB left; 320x1024 tokens need ~65 GiB eager, OOM inside compiled code",
        "fixes": ["grad-accum"],
        "extra_fixes": [],
        "est_s": 12,
    },
    {
        "name": "paged_kv_server",
        "script": "paged_kv_server.py",
        "args": [],
        "job": "vLLM-style server: NCCL tp=1, paged KV cache by gpu_memory_utilization, decode "
        "CUDA graphs",
        "intended": "capacity",
        "intended_action": "logits only at the last position / smaller KV cache / chunked prefill",
        "pattern": "KV cache to 0.9 of the GPU; a 24576-token prefill computes float logits for "
        "every position (~30 GiB) where ~20 GiB is left",
        "fixes": ["last-token-logits"],
        "extra_fixes": ["gpu-util=0.7"],
        "fallback_args": ["--dist-backend", "gloo"],
        "est_s": 7,
    },
    {
        "name": "dataloader_longtail",
        "script": "dataloader_longtail.py",
        "args": [],
        "job": "document classifier fine-tune; DataLoader with 4 workers and pin_memory, "
        "pad-to-longest collate",
        "intended": "capacity",
        "intended_action": "truncate / token-budget batching",
        "pattern": "a 25k-token outlier document pads a batch of 16 to ~400k tokens at step 56",
        "fixes": ["truncate"],
        "extra_fixes": ["token-budget"],
        "fallback_args": ["--num-workers", "0"],
        "est_s": 7,
        "extra": True,
    },
    {
        "name": "cupy_pool",
        "script": "cupy_pool.py",
        "args": [],
        "job": "CuPy feature standardisation handed to PyTorch by DLPack, then training",
        "intended": "non-pytorch-memory",
        "intended_action": "free CuPy's memory pool / route CuPy through PyTorch's allocator",
        "pattern": "CuPy's pool keeps 20 GiB it freed (30 GiB held); PyTorch's step needs 24 GiB "
        "of the 16 left",
        "fixes": ["free-pool"],
        "extra_fixes": ["torch-allocator"],
        "est_s": 7,
    },
    {
        "name": "jax_prealloc",
        "script": "jax_prealloc.py",
        "args": [],
        "job": "RL job with a JAX reward function and a PyTorch policy in one process",
        "intended": "non-pytorch-memory",
        "intended_action": "XLA_PYTHON_CLIENT_PREALLOCATE=false / lower "
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "pattern": "XLA preallocates 75% of the GPU; loading 40% of bf16 weights in PyTorch fails",
        "fixes": ["no-prealloc"],
        "extra_fixes": ["mem-fraction"],
        "est_s": 7,
    },
    {
        "name": "leak_hook_jsonlog",
        "script": "leak_hook_jsonlog.py",
        "args": [],
        "job": "training with an activation monitor (forward hooks); JSON log records, bytes",
        "intended": "leak",
        "intended_action": "keep detached statistics, not outputs",
        "pattern": "hooks append 12 block outputs (768 MiB) a step; ~19 steps to OOM",
        "fixes": ["stats-only"],
        "extra_fixes": ["detach"],
        "est_s": 5,
    },
    {
        "name": "leak_eval_tqdm",
        "script": "leak_eval_tqdm.py",
        "args": [],
        "job": "LM evaluation keeping every batch's logits on the GPU; tqdm postfix mem=..G",
        "intended": "leak",
        "intended_action": "keep predictions only / move to host",
        "pattern": "500 MiB of logits kept per batch; OOM at batch ~17 of 40",
        "fixes": ["argmax"],
        "extra_fixes": ["cpu"],
        "est_s": 5,
    },
    {
        "name": "leak_step_cache",
        "script": "leak_step_cache.py",
        "args": [],
        "job": "online distillation caching teacher logits by step; key=value logs in MB",
        "intended": "leak",
        "intended_action": "evict the cache",
        "pattern": "64 MiB more each step on a GPU filled to within 3 GiB; at OOM PyTorch holds "
        ">99% of the GPU and the request is 64 MiB",
        "fixes": ["evict"],
        "extra_fixes": ["cpu"],
        "est_s": 5,
    },
    {
        "name": "frag_sessions",
        "script": "frag_sessions.py",
        "args": [],
        "job": "multi-session chat server growing per-session KV caches with torch.cat",
        "intended": "fragmentation",
        "pattern": "long-lived caches of every size pin segments cut for others; 30 GiB left, "
        "~22 GiB in use at OOM on a ~1.4 GiB cat",
        "fixes": ["paged"],
        "extra_fixes": ["empty-cache"],
        "est_s": 6,
    },
    {
        "name": "retry_batch_search",
        "script": "retry_batch_search.py",
        "args": [],
        "job": "long-context eval under accelerate's find_executable_batch_size",
        "intended": "capacity",
        "intended_action": "memory-efficient attention / shorter windows (the retry loop already "
        "shrank the batch)",
        "pattern": "eager attention at 16k tokens needs ~40 GiB per sequence; batch 64 shrinks "
        "to 0; the log has no CUDA OOM text",
        "fixes": ["sdpa"],
        "extra_fixes": ["max-len=4096"],
        "est_s": 9,
    },
]
