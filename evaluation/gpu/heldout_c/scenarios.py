"""Held-out set C: seven new GPU out-of-memory jobs, written blind to the diagnosis rules.

Same dict shape as set B's ``SCENARIOS`` (name, script, args, intended, intended_action, pattern,
fixes, est_s), plus an optional ``alloc_conf``: the job's own ``PYTORCH_CUDA_ALLOC_CONF`` (set by
its launcher), into which the runner merges ``expandable_segments:True`` for that variant.
``intended``: the kind a correct diagnosis names, decided by how the job is built and checked by
its runs, not assumed: fragmentation means ``expandable_segments:True`` removes the OOM, every
other kind means it does not; every fix (``--fix NAME``) must remove it. ``est_s``: estimated
wall seconds of one run on an H200, process start and CUDA init (~5 s) included.
"""

from __future__ import annotations

SCENARIOS: list[dict] = [
    {
        "name": "serve_prefill_frag",
        "script": "serve_prefill_frag.py",
        "args": [],
        "intended": "fragmentation",
        "intended_action": (
            "expandable_segments:True, or one pre-allocated paged KV pool instead of a KV "
            "tensor per request"
        ),
        "pattern": (
            "continuous-batching generation server (Mistral-7B shapes) with a KV-cache tensor "
            "per request (48-576 MiB, varied lengths) and all-position prefill logits (up to "
            "2 GiB) each step; KV tensors carved from freed logits segments pin them; the "
            "scheduler's books stay under 85 % of the 24 GiB the job has"
        ),
        "fixes": ["kv-pool"],
        "est_s": 10,
    },
    {
        "name": "train_eval_sidecar",
        "script": "train_eval_sidecar.py",
        "args": [],
        "intended": "gpu-shared",
        "intended_action": "do not run the asynchronous evaluator on the training GPU",
        "pattern": (
            "the launcher starts an evaluator process (own CUDA context, 40 % of the GPU) on "
            "the same GPU, then trains (45 % resident + a 24-block MLP stack on 32k tokens, "
            "~30 GiB of activations); the trainer's first step runs out"
        ),
        "fixes": ["no-sidecar"],
        "est_s": 12,
    },
    {
        "name": "distill_adamw_step",
        "script": "distill_adamw_step.py",
        "args": [],
        "intended": "capacity",
        "intended_action": (
            "a lighter optimizer state (Adafactor, 8-bit or bf16 states) or fewer trainable "
            "parameters"
        ),
        "pattern": (
            "nanoGPT-style fp32 fine-tune of a 1.07B GPT student next to a resident teacher; "
            "9 GiB left for training: forward/backward with 4-step accumulation fit, the first "
            "optimizer.step() creating AdamW's 8 GiB of state does not"
        ),
        "fixes": ["adafactor"],
        "est_s": 9,
    },
    {
        "name": "contrastive_act_monitor",
        "script": "contrastive_act_monitor.py",
        "args": [],
        "intended": "leak",
        "intended_action": "keep a detached scalar (.item()) in the hook, not the output tensor",
        "pattern": (
            "contrastive encoder training (bf16, 8 layers, two views per step) with forward "
            "hooks on every layer appending the layer output to a list: +128 MiB per step "
            "until OOM, tqdm progress only, no memory figures printed; 10 GiB for the job"
        ),
        "fixes": ["item"],
        "est_s": 9,
    },
    {
        "name": "asr_cupy_decode",
        "script": "asr_cupy_decode.py",
        "args": [],
        "intended": "non-pytorch-memory",
        "intended_action": (
            "free CuPy's memory pool after the decode warm-up (or route CuPy allocations "
            "through PyTorch's allocator)"
        ),
        "pattern": (
            "GPU loader decodes 26 GiB of raw audio into one CuPy buffer, PyTorch computes "
            "log-mel features from it through DLPack, the buffer is dropped but stays in "
            "CuPy's pool; the first training step of an audio transformer (64 x 1500 frames) "
            "then runs out in the 47 GiB the job has (cuMemAlloc fallback without CuPy)"
        ),
        "fixes": ["free-pool"],
        "est_s": 11,
    },
    {
        "name": "longctx_async_alloc",
        "script": "longctx_async_alloc.py",
        "args": [],
        "alloc_conf": "backend:cudaMallocAsync",
        "intended": "capacity",
        "intended_action": "activation checkpointing (or a shorter sequence / fewer layers)",
        "pattern": (
            "32768-token fine-tune of a 16-layer d-2048 decoder (bf16, SDPA) without activation "
            "checkpointing, under backend:cudaMallocAsync: ~34 GiB of activations in 28 GiB"
        ),
        "fixes": ["checkpoint"],
        "est_s": 10,
    },
    {
        "name": "score_docs_backoff",
        "script": "score_docs_backoff.py",
        "args": [],
        "intended": "retry-exhausted",
        "intended_action": (
            "compute log-probs in chunks (the per-document fp32 full-vocabulary log-softmax "
            "needs ~39 GiB at any batch size), not a smaller batch"
        ),
        "pattern": (
            "perplexity scoring of 32768-token documents, vocabulary 128256, with its own OOM "
            "back-off halving the batch 8 -> 4 -> 2 -> 1, then re-raising; 24 GiB for the job"
        ),
        "fixes": ["chunked-logprobs"],
        "est_s": 9,
    },
]
