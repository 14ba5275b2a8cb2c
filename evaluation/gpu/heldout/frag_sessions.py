"""Fragmentation: a chat server keeps each session's KV cache on the GPU and grows it with cat.

A hand-written multi-session chat server (bf16 weights loaded; 2 decoder layers computed for
real) keeps every open session's KV cache for all 32 layers in one tensor per session, and,
like Hugging Face's DynamicCache, grows it with ``torch.cat`` after each prompt and after each
reply. Prompt lengths vary widely, sessions end at random and new ones open. Every cat
allocates a new, larger block while the old one is alive; long-lived caches of every size end
up inside segments that were cut for other caches or for a prompt's activations, and pin
them. After a few hundred turns a long document arrives: its prefill needs a few GiB in one
piece, and although the memory in use is well below what the job may use, the native
allocator has no segment with a large enough hole left and cannot return the pinned ones.

Fixes: ``--fix paged`` (a paged KV cache as vLLM keeps it: one preallocated pool of
256-token blocks, written in place, the least recently used session preempted when the pool is
full; no cat); ``--fix empty-cache`` (the common advice, ``torch.cuda.empty_cache()`` after
every turn).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F
from _common_ho import GiB, MiB, allocated, banner, free_bytes, hold, parse_args, reserved, sync

FIXES = ["paged", "empty-cache"]

HIDDEN, INTER, KV_LAYERS, KV_HEADS, HEAD_DIM = 4096, 14336, 32, 8, 128
KV_WIDTH = KV_LAYERS * 2 * KV_HEADS * HEAD_DIM  # bf16 elements of KV per token, all layers


def extra(p):
    p.add_argument("--leave-gib", type=float, default=30.0)
    p.add_argument("--sessions", type=int, default=24)
    p.add_argument("--turns", type=int, default=240)
    p.add_argument("--max-session-tokens", type=int, default=16384)
    p.add_argument("--final-prompt", type=int, default=20480)
    p.add_argument("--seed", type=int, default=0)


class Engine(torch.nn.Module):
    """Embedding, 2 computed decoder MLP blocks and the projection to all layers' K/V."""

    def __init__(self, vocab: int, hidden: int, inter: int, kv_width: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.gate_up = torch.nn.ModuleList(
            torch.nn.Linear(hidden, 2 * inter, bias=False) for _ in range(2)
        )
        self.down = torch.nn.ModuleList(
            torch.nn.Linear(inter, hidden, bias=False) for _ in range(2)
        )
        self.to_kv = torch.nn.Linear(hidden, kv_width, bias=False)

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """New tokens -> their K/V for every layer, [tokens, kv_width]."""
        x = self.embed(ids)
        for gu, down in zip(self.gate_up, self.down, strict=True):
            gate, up = gu(F.rms_norm(x, (x.shape[-1],))).chunk(2, dim=-1)
            x = x + down(F.silu(gate) * up)
        return self.to_kv(x)


class Sessions:
    """KV caches by session, each one tensor grown with torch.cat (DynamicCache style)."""

    def __init__(self) -> None:
        self.caches: dict[int, torch.Tensor] = {}

    def append(self, sid: int, kv: torch.Tensor) -> None:
        old = self.caches.get(sid)
        self.caches[sid] = kv.clone() if old is None else torch.cat([old, kv], dim=0)

    def length(self, sid: int) -> int:
        c = self.caches.get(sid)
        return 0 if c is None else c.shape[0]

    def close(self, sid: int) -> None:
        self.caches.pop(sid, None)

    def tokens(self) -> int:
        return sum(c.shape[0] for c in self.caches.values())


class PagedSessions:
    """KV caches in a preallocated pool of fixed-size blocks; LRU session preempted when full."""

    def __init__(self, pool_bytes: int, block: int, width: int, dev) -> None:
        self.block = block
        n_blocks = pool_bytes // (block * width * 2)
        self.pool = torch.empty(n_blocks, block, width, dtype=torch.bfloat16, device=dev)
        self.free = list(range(n_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.last_use: dict[int, int] = {}
        self.clock = 0
        print(f"paged KV cache: {n_blocks} blocks of {block} tokens", flush=True)

    def _take_block(self, sid: int) -> int:
        while not self.free:
            victim = min((s for s in self.tables if s != sid), key=self.last_use.__getitem__)
            print(f"KV cache full: preempting session {victim}", flush=True)
            self.close(victim)
        return self.free.pop()

    def append(self, sid: int, kv: torch.Tensor) -> None:
        self.clock += 1
        self.last_use[sid] = self.clock
        table = self.tables.setdefault(sid, [])
        n = self.lengths.get(sid, 0)
        done = 0
        while done < kv.shape[0]:
            if n % self.block == 0:
                table.append(self._take_block(sid))
            off = n % self.block
            take = min(self.block - off, kv.shape[0] - done)
            self.pool[table[-1], off : off + take].copy_(kv[done : done + take])
            n += take
            done += take
        self.lengths[sid] = n

    def length(self, sid: int) -> int:
        return self.lengths.get(sid, 0)

    def close(self, sid: int) -> None:
        self.free.extend(self.tables.pop(sid, []))
        self.lengths.pop(sid, None)
        self.last_use.pop(sid, None)

    def tokens(self) -> int:
        return sum(self.lengths.values())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], FIXES, extra)
    banner(args, "chat_server")
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    dev = args.dev
    dry = args.dry_run_cpu
    hidden, inter, width, vocab = (64, 128, 256, 1000) if dry else (HIDDEN, INTER, KV_WIDTH, 128256)
    scale = 64 if dry else 1  # prompt lengths divided by this in a dry run
    max_tokens = args.max_session_tokens // scale
    weights = hold(args, args.leave_gib, "model weights loaded")
    engine = Engine(vocab, hidden, inter, width).to(dev, torch.bfloat16).eval()
    store: Sessions | PagedSessions
    if "paged" in args.fixes:
        # what is free now, less room for the longest prefill's activations
        pool_bytes = free_bytes(args) - int(8 * GiB) if not dry else 64 * MiB
        store = PagedSessions(pool_bytes, 256 // scale, width, dev)
    else:
        store = Sessions()
    print(
        f"serving up to {args.sessions} sessions, KV {width * 2 // 1024} KiB per token, "
        f"max {max_tokens} tokens per session",
        flush=True,
    )
    next_sid = 0
    open_sessions: list[int] = []
    t_start = time.time()
    with torch.inference_mode():
        for turn in range(1, args.turns + 2):
            final = turn == args.turns + 1
            if final:
                sid, prompt = next_sid, args.final_prompt // scale
                open_sessions.append(sid)
            else:
                while len(open_sessions) < args.sessions:
                    open_sessions.append(next_sid)
                    next_sid += 1
                sid = rng.choice(open_sessions)
                prompt = int(rng.lognormvariate(6.6, 0.8)) // scale + 1
                if store.length(sid) + prompt + 512 // scale > max_tokens:
                    store.close(sid)  # context full: the client starts a new chat
                    open_sessions.remove(sid)
                    continue
            ids = torch.randint(0, vocab, (prompt,), device=dev)
            store.append(sid, engine.prefill(ids))
            reply = rng.randrange(32, 512) // scale + 1
            store.append(sid, engine.prefill(torch.randint(0, vocab, (reply,), device=dev)))
            if not final and rng.random() < 0.08:
                store.close(sid)  # the user leaves
                open_sessions.remove(sid)
            if "empty-cache" in args.fixes and not dry:
                torch.cuda.empty_cache()
            if turn % 20 == 0 or final:
                sync(args)
                print(
                    f"turn {turn}: session {sid} prompt {prompt} reply {reply} | "
                    f"{len(open_sessions)} open, {store.tokens()} cached tokens | "
                    f"allocated {allocated(args) / GiB:.2f} GiB reserved "
                    f"{reserved(args) / GiB:.2f} GiB | {turn / (time.time() - t_start):.1f} "
                    "turns/s",
                    flush=True,
                )
    print(f"done; peak cache {store.tokens() * width * 2 / MiB:.0f} MiB", flush=True)
    del weights


if __name__ == "__main__":
    main()
