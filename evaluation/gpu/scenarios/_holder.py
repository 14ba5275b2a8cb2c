"""A second process that holds GPU memory until its stdin closes or it is killed.

``python3 _holder.py --gib G`` takes G GiB; ``--leave-gib L`` instead takes all free memory but
L GiB. Prints ``READY <pid> <bytes>`` once the memory is held.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

GiB = 1024**3

p = argparse.ArgumentParser()
p.add_argument("--gib", type=float)
p.add_argument("--leave-gib", type=float)
p.add_argument("--touch", action="store_true", help="write the memory (slower)")
a = p.parse_args()
free, _ = torch.cuda.mem_get_info()
n = int(a.gib * GiB) if a.gib is not None else free - int(a.leave_gib * GiB)
n -= n % (2 * 1024**2)
t = torch.empty(n, dtype=torch.uint8, device="cuda")
if a.touch:
    t.fill_(1)
torch.cuda.synchronize()
print(f"READY {os.getpid()} {n}", flush=True)
sys.stdin.read()  # hold until the parent closes our stdin (or kills us)
