#!/usr/bin/env python3
"""Long-document perplexity scoring with an OOM back-off that halves the batch until it fits.

Stands for an offline evaluation job: score 16 documents of 32768 tokens with a small
long-context decoder (4 layers, d 1024, Llama-3-sized vocabulary of 128256), reporting each
document's mean token log-probability. The job's own helper starts at batch 8 and, on a CUDA
out-of-memory error, empties the cache, halves the batch and retries; at batch 1 it gives up and
re-raises. It cannot succeed: one document's full-vocabulary log-softmax in fp32 needs about
39 GiB (bf16 logits, their fp32 copy and the log-softmax), whatever the batch, and the job has
24 GiB next to the other models it keeps loaded (a ballast here).

``--fix chunked-logprobs``: compute the token log-probabilities 2048 positions at a time from
the hidden states, never materialising the [tokens, vocab] matrix; batch 8 then fits.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hc import Device, GiB, parse_args

log = logging.getLogger("score")


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def token_logprobs(model: Decoder, ids: torch.Tensor, chunked: bool) -> torch.Tensor:
    """log p(ids[:, t+1] | ids[:, :t+1]) for every position, [batch, T-1]."""
    h = model.hidden(ids[:, :-1])
    targets = ids[:, 1:]
    if not chunked:
        logits = model.lm_head(h)
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    h2, t2 = h.reshape(-1, h.size(-1)), targets.reshape(-1)
    out = torch.empty(t2.shape, dtype=torch.float32, device=ids.device)
    for i in range(0, t2.numel(), 2048):
        lg = model.lm_head(h2[i : i + 2048]).float()
        out[i : i + 2048] = lg.gather(-1, t2[i : i + 2048, None]).squeeze(-1) - lg.logsumexp(-1)
    return out.view_as(targets)


def with_oom_backoff(fn, batch_size: int):
    """Call fn(batch_size); on CUDA OOM halve the batch and retry, down to 1."""
    while True:
        try:
            return fn(batch_size)
        except torch.OutOfMemoryError:
            if batch_size == 1:
                log.error("CUDA out of memory even at batch_size=1; giving up")
                raise
            log.warning(
                "CUDA out of memory at batch_size=%d; retrying with batch_size=%d",
                batch_size,
                batch_size // 2,
            )
            batch_size //= 2
            gc.collect()
            torch.cuda.empty_cache()


def main() -> int:
    a = parse_args(__doc__.splitlines()[0], ["chunked-logprobs"])
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s", stream=sys.stdout
    )
    dev = Device(a.dry_run_cpu)
    if dev.dry:
        vocab, d, layers, heads, seq, n_docs, start_bs, spare = 300, 32, 2, 4, 128, 8, 8, 0
        dtype = torch.float32
    else:
        vocab, d, layers, heads, seq = 128256, 1024, 4, 16, 32768
        n_docs, start_bs, spare = 16, 8, 24
        dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(dev.device):
        model = Decoder(vocab, d, layers, heads).to(dtype).eval()
    others = dev.ballast(spare * GiB)  # the other models this evaluation keeps loaded
    docs = torch.randint(vocab, (n_docs, seq + 1))
    log.info(
        "scoring %d docs x %d tokens on %s; vocab %d; start batch_size=%d",
        n_docs,
        seq,
        dev.name,
        vocab,
        start_bs,
    )

    def score_all(bs: int) -> list[float]:
        scores: list[float] = []
        with torch.inference_mode():
            for i in range(0, n_docs, bs):
                ids = docs[i : i + bs].to(dev.device)
                lp = token_logprobs(model, ids, chunked=a.fix == "chunked-logprobs")
                scores += lp.mean(dim=1).tolist()
                log.info("batch %d-%d done (batch_size=%d)", i, i + ids.size(0) - 1, bs)
        return scores

    scores = with_oom_backoff(score_all, start_bs)
    ppl = torch.tensor(scores).neg().exp()
    log.info("mean perplexity %.2f over %d docs", ppl.mean().item(), len(scores))
    del others
    return 0


if __name__ == "__main__":
    sys.exit(main())
