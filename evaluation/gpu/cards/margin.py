#!/usr/bin/env python3
"""A job that fills the card but ``R + S`` MiB with its weights, then asks for ``R`` MiB.

Loads "weights" (one tensor) that leave ``--request-mib R`` plus ``--slack-mib S`` MiB free as
``torch.cuda.mem_get_info()`` reports it (rounded to the 2 MiB page the driver hands out; the
exact free bytes are printed and recorded), then allocates one ``R`` MiB buffer. Near a full
GPU, ``cudaMalloc`` needs some slack beyond the request; the OOM message then prints a free
figure at or just above the request.
"""

from __future__ import annotations

import torch
from _job import GiB, Job, MiB, parse_args


def extra(p):
    p.add_argument("--request-mib", type=int, default=64)
    p.add_argument("--slack-mib", type=int, default=0)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=1, warmup=0, extra=extra)
    job = Job("margin", args, varying=False)
    req = args.request_mib * MiB

    def run() -> None:
        job.phase = "weights"
        if job.dry:
            free = req + (args.slack_mib + 64) * MiB
        else:
            torch.cuda.empty_cache()
            free = torch.cuda.mem_get_info()[0]
        n = free - req - args.slack_mib * MiB
        n -= n % (2 * MiB)
        if n <= 0:
            raise SystemExit(f"only {free} bytes free: nothing to fill")
        weights = torch.empty(4096 if job.dry else n, dtype=torch.uint8, device=job.device)
        left = free - n if job.dry else torch.cuda.mem_get_info()[0]
        job.rec.update(
            free_before_weights=int(free),
            weights_bytes=int(n),
            free_before_request=int(left),
            request_bytes=int(req),
        )
        print(
            f"weights loaded: {n / GiB:.3f} GiB; free now {left} bytes ({left / MiB:.2f} MiB); "
            f"allocating a {args.request_mib} MiB buffer (slack asked {args.slack_mib} MiB, "
            f"got {(left - req) / MiB:.2f} MiB)",
            flush=True,
        )
        job.step, job.phase = 1, "request"
        buf = torch.empty(req, dtype=torch.uint8, device=job.device)
        print(f"ok: {buf.numel() / MiB:.0f} MiB allocated", flush=True)
        del weights, buf

    job.run(run)


if __name__ == "__main__":
    main()
