"""Held-out set B: five new GPU out-of-memory jobs, written blind to the diagnosis rules.

Same dict shape as ``SCENARIOS`` in ``evaluation/gpu/run_proof.py``. ``intended``: the kind a
correct
diagnosis names (fragmentation, capacity, leak, memory-fraction-cap), decided by how the job is
built and checked by its runs, not assumed: fragmentation means ``expandable_segments:True``
removes the OOM, the other kinds mean it does not. ``fixes``: the one code fix each job offers
(``--fix NAME``), which must remove the OOM. ``est_s``: estimated wall seconds of one run on an
H200, process start and CUDA init (~5 s) included.
"""

from __future__ import annotations

SCENARIOS: list[dict] = [
    {
        "name": "gen_kvcat",
        "script": "gen_kvcat.py",
        "args": [],
        "intended": "fragmentation",
        "intended_action": "expandable_segments:True, or a pre-allocated (static) KV cache",
        "pattern": (
            "batched greedy decoding (batch 6, prompt 512, 1024 new tokens, 4 layers, d 4096) "
            "with a KV cache grown by torch.cat every step and output_scores kept on the GPU "
            "([6, 50304] fp32 per step); the job has ~7.7 GiB of its own"
        ),
        "fixes": ["static-cache"],
        "est_s": 8,
    },
    {
        "name": "leak_keep_logits",
        "script": "leak_keep_logits.py",
        "args": [],
        "intended": "leak",
        "intended_action": "stop keeping each step's logits (compute the metric per step)",
        "pattern": (
            "causal-LM fine-tuning keeps logits.detach() of every step (~250 MiB) for an "
            "epoch-end accuracy; HF-Trainer-style dict logged every 5 steps with gpu_mem_gb; "
            "the job has 16 GiB of its own"
        ),
        "fixes": ["running-metric"],
        "est_s": 8,
    },
    {
        "name": "vit_embed_batch",
        "script": "vit_embed_batch.py",
        "args": [],
        "intended": "capacity",
        "intended_action": "smaller (micro-)batch",
        "pattern": (
            "ViT-B/16-384 fp16 embedding under inference_mode at batch 2048: the first block's "
            "eager attention scores ([2048, 12, 577, 577], ~15 GiB) do not fit in the job's "
            "16 GiB"
        ),
        "fixes": ["micro-batch"],
        "est_s": 8,
    },
    {
        "name": "load_reward_model",
        "script": "load_reward_model.py",
        "args": [],
        "intended": "capacity",
        "intended_action": "load the model in bf16 (or free the other model first)",
        "pattern": (
            "3.37B-param reward model, float32 (12.5 GiB), moved to the GPU with Module.to "
            "next to the policy, which leaves 9 GiB"
        ),
        "fixes": ["bf16"],
        "est_s": 8,
    },
    {
        "name": "retrieval_fraction",
        "script": "retrieval_fraction.py",
        "args": [],
        "intended": "memory-fraction-cap",
        "intended_action": "raise the per-process memory fraction (or score smaller shards)",
        "pattern": (
            "set_per_process_memory_fraction(0.0625) (~8.7 GiB allowed) on an idle GPU; "
            "corpus 3.8 GiB + [1024, 2M] fp16 scores + their softmax (3.8 GiB each)"
        ),
        "fixes": ["fraction=0.125"],
        "est_s": 7,
    },
]
