#!/usr/bin/env python3
"""Emulate a small card (4-40 GiB) on a big GPU, read OOM messages, launch one job per run.

A card of N GiB is emulated with a HOLDER: a second python process that takes the big GPU's
memory down to what the card leaves the job, then sleeps until told otherwise. The job is then
started as its own process and sees the small card's free memory, exactly as on a real card: its
CUDA context, cuBLAS/cuDNN handles and kernels come out of that memory, and its allocator meets
the real ``cudaMalloc`` failure when the card is full. What differs from a real N GiB card is only
in the OOM *message*: the GPU's total capacity is printed as the big GPU's (139.80 GiB on an
H200) and the holder is listed as another process (``Process P has X memory in use``).
``card_figures`` and ``message_as_card`` give the figures and the message the job would have
printed on the real card (total N GiB, no other process); the raw message is always kept too.

Holder modes (``leave_bytes``):
- ``card`` (default): the holder leaves exactly N GiB free *before* the job starts, so the job's
  own context comes out of the N GiB, as on a real card: the job sees N GiB minus its context
  free at start, and at an OOM ``free + this process's use`` adds up to N GiB.
- ``start``: the holder leaves N GiB plus the job's measured context, so the job sees N GiB free
  at start (the card's total is then N GiB plus the context).

Run as ``python3 cards.py holder`` it is the holder (protocol below); imported, it gives the
runner the ``Holder`` client, the OOM reader and the ``Launcher`` that starts a job.

Holder protocol (one line each way, stdin/stdout):
    -> READY <pid> <total> <free>          once CUDA is up
    <- LEAVE <bytes>                       hold everything but <bytes> (free as the holder sees it)
    -> HELD <held_bytes> FREE <free_bytes>
    <- FREE                                -> FREE <free_bytes> (the GPU's free memory now)
    <- QUIT                                exit (also on EOF)
The holder allocates with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: every tensor is one exact
``cudaMalloc`` (no 2 MiB/20 MiB block rounding, freed at once), so the free figure it leaves is
exact to the driver's 2 MiB page.
"""

from __future__ import annotations

import io
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20
HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------------
# OOM message reader (own regexes; no gpu_auditor code)
# --------------------------------------------------------------------------------------------

UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB)"
RE_REQ = re.compile(r"Tried to allocate " + SIZE)
RE_TOTAL_FREE = re.compile(r"total capac\w* of " + SIZE + r" of which " + SIZE + r" is free")
RE_PROCESS = re.compile(r"Process (\d+) has " + SIZE + r" memory in use")
RE_SELF = re.compile(r"this process has " + SIZE + r" memory in use")
RE_ALLOWED = re.compile(SIZE + r" allowed;")
RE_ALLOC = re.compile(r"Of the allocated memory " + SIZE + r" is allocated by PyTorch")
RE_PRIVATE = re.compile(r"with " + SIZE + r" allocated in private pools")
RE_UNALLOC = re.compile(r"and " + SIZE + r" is reserved by PyTorch but unallocated")
RE_RAW = re.compile(r"CUDA error: out of memory")
RE_OOM_LINE = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|would exceed allowed memory"
)


def to_bytes(num: str, unit: str) -> int:
    return round(float(num) * UNITS[unit])


def fmt_size(n: float) -> str:
    """torch's format_size: ``n bytes`` up to 1 KiB, then two decimals in KiB/MiB/GiB."""
    if n <= 1024:
        return f"{int(n)} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


def oom_line(log_text: str) -> str | None:
    """The last line of a log that carries an out-of-memory error (the exception line)."""
    lines = [ln for ln in log_text.splitlines() if RE_OOM_LINE.search(ln)]
    return lines[-1] if lines else None


def parse_oom(msg: str | None) -> dict[str, Any]:
    """Figures printed in a PyTorch OOM message, in bytes (None where not printed)."""
    out: dict[str, Any] = {
        "family": None,
        "requested": None,
        "total": None,
        "free": None,
        "allowed": None,
        "allocated_by_pytorch": None,
        "private_pools": None,
        "reserved_unallocated": None,
        "this_process": None,
        "other_processes": [],
    }
    if not msg:
        return out
    if RE_RAW.search(msg):
        out["family"] = "raw-cuda"
    m = RE_REQ.search(msg)
    if m:
        out["family"] = "native"
        out["requested"] = to_bytes(*m.groups())
    m = RE_TOTAL_FREE.search(msg)
    if m:
        out["total"] = to_bytes(m.group(1), m.group(2))
        out["free"] = to_bytes(m.group(3), m.group(4))
    for key, rx in (
        ("allowed", RE_ALLOWED),
        ("allocated_by_pytorch", RE_ALLOC),
        ("private_pools", RE_PRIVATE),
        ("reserved_unallocated", RE_UNALLOC),
        ("this_process", RE_SELF),
    ):
        m = rx.search(msg)
        if m:
            out[key] = to_bytes(*m.groups())
    out["other_processes"] = [
        {"pid": int(p), "bytes": to_bytes(n, u)} for p, n, u in RE_PROCESS.findall(msg)
    ]
    return out


def card_figures(fig: dict[str, Any], card_bytes: int | None) -> dict[str, Any] | None:
    """What the same failure prints on a real card of ``card_bytes``: total = the card, the
    holder gone, everything else (free, this process, allocated, unallocated, request) as
    printed. None when the message had no native figures."""
    if fig.get("family") != "native" or card_bytes is None:
        return None
    return {
        "total": card_bytes,
        "free": fig["free"],
        "requested": fig["requested"],
        "this_process": fig["this_process"],
        "allocated_by_pytorch": fig["allocated_by_pytorch"],
        "reserved_unallocated": fig["reserved_unallocated"],
        "reserved_by_pytorch": (fig["allocated_by_pytorch"] or 0)
        + (fig["reserved_unallocated"] or 0)
        if fig["allocated_by_pytorch"] is not None
        else None,
        "allowed": fig["allowed"],
        "other_processes": [],
    }


def message_as_card(msg: str | None, card_bytes: int | None) -> str | None:
    """The raw message rewritten as the real card prints it: the total capacity becomes the
    card's, ``Process P has X memory in use.`` segments (the holder) are dropped. Derived text,
    never a log line: rows keep it beside the raw message."""
    if not msg or card_bytes is None or not RE_TOTAL_FREE.search(msg):
        return None
    out = re.sub(
        r"(total capac\w* of )" + SIZE, lambda m: m.group(1) + fmt_size(card_bytes), msg, count=1
    )
    return re.sub(r"Process \d+ has " + SIZE + r" memory in use\. ?", "", out)


# --------------------------------------------------------------------------------------------
# The holder: the process side
# --------------------------------------------------------------------------------------------


def holder_main(dry: bool) -> int:
    """Hold GPU memory on command (protocol in the module docstring)."""
    if dry:  # no GPU: answer the protocol with made-up figures
        total = int(139.8 * GiB)
        want = total - 500 * MiB
        print(f"READY {os.getpid()} {total} {total - 500 * MiB}", flush=True)
        for line in sys.stdin:
            parts = line.split()
            if not parts or parts[0] == "QUIT":
                break
            if parts[0] == "FREE":
                print(f"FREE {min(want, total)}", flush=True)
            elif parts[0] == "LEAVE":
                want = int(parts[1])
                held = max(0, total - 500 * MiB - want)
                print(f"HELD {held} FREE {min(want, total)}", flush=True)
        return 0

    import torch

    chunks: list[Any] = []
    free, total = torch.cuda.mem_get_info()
    print(f"READY {os.getpid()} {total} {free}", flush=True)

    def take(n: int) -> None:
        n -= n % (2 * MiB)
        if n > 0:
            chunks.append(torch.empty(n, dtype=torch.uint8, device="cuda"))

    def leave(want: int) -> tuple[int, int]:
        chunks.clear()
        torch.cuda.synchronize()
        free = torch.cuda.mem_get_info()[0]
        take(free - want)
        for _ in range(4):  # land within [want, want + 2 MiB) where the driver lets us
            free = torch.cuda.mem_get_info()[0]
            d = free - want
            if d >= 2 * MiB:
                take(d)
            elif d < 0 and chunks:
                last = chunks.pop()
                size = last.numel()
                del last
                x = -d  # bytes missing; give back that, rounded up to the 2 MiB page
                take(size - (x + (-x) % (2 * MiB)))
            else:
                break
        held = sum(int(c.numel()) for c in chunks)
        return held, int(torch.cuda.mem_get_info()[0])

    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "QUIT":
            break
        if parts[0] == "FREE":
            print(f"FREE {int(torch.cuda.mem_get_info()[0])}", flush=True)
        elif parts[0] == "LEAVE":
            try:
                held, free = leave(int(parts[1]))
                print(f"HELD {held} FREE {free}", flush=True)
            except Exception as e:  # never hang the runner: answer with the error
                print(f"ERROR {type(e).__name__}: {str(e)[:300]!r}", flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# The holder: the runner's side
# --------------------------------------------------------------------------------------------


class Holder:
    """Client for ``cards.py holder``: one process for the whole run, resized per card."""

    def __init__(self, env: dict[str, str], dry: bool = False) -> None:
        env = dict(env)
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            env.pop(k, None)
        cmd = [sys.executable, str(HERE / "cards.py"), "holder"] + (["--dry"] if dry else [])
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1
        )
        ready = self._read(120.0)
        if not ready.startswith("READY"):
            self.close()
            raise RuntimeError(f"holder did not start: {ready!r}")
        _, pid, total, free = ready.split()
        self.pid, self.total, self.free_alone = int(pid), int(total), int(free)
        self.leaving: int | None = None
        self.held = 0
        self.free = self.free_alone

    def _read(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            return "TIMEOUT"
        return self.proc.stdout.readline().strip()

    def leave(self, nbytes: int, force: bool = False) -> tuple[int, int]:
        """Hold all but ``nbytes``; (held, free) as the holder measured them."""
        if self.leaving == nbytes and not force:
            return self.held, self.free
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"LEAVE {int(nbytes)}\n")
        self.proc.stdin.flush()
        ans = self._read(120.0)
        if not ans.startswith("HELD"):
            raise RuntimeError(f"holder failed: {ans!r}")
        _, held, _, free = ans.split()
        self.leaving, self.held, self.free = nbytes, int(held), int(free)
        return self.held, self.free

    def free_now(self) -> int:
        """Free memory on the GPU now, as the holder sees it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("FREE\n")
        self.proc.stdin.flush()
        ans = self._read(30.0)
        if not ans.startswith("FREE"):
            raise RuntimeError(f"holder failed: {ans!r}")
        return int(ans.split()[1])

    def settle(self, limit_s: float = 5.0) -> int:
        """Wait (up to ``limit_s``) until the last job's memory is back: free within 8 MiB of
        what the holder leaves; return the free bytes."""
        t0 = time.time()
        free = self.free_now()
        while free < self.free - 8 * MiB:
            if time.time() - t0 > limit_s:
                break
            time.sleep(0.1)
            free = self.free_now()
        return free

    def release(self) -> tuple[int, int]:
        """Hold nothing (the holder keeps only its own context)."""
        return self.leave(1 << 50)

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.write("QUIT\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=15)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def leave_bytes(card_gib: float, mode: str, context_bytes: int) -> int:
    """Free memory the holder leaves for a card of ``card_gib``."""
    n = int(card_gib * GiB)
    return n + context_bytes if mode == "start" else n


# --------------------------------------------------------------------------------------------
# Launching one job: a forked child of an import-torch'ed parent, or a fresh interpreter
# --------------------------------------------------------------------------------------------


@dataclass
class Handle:
    pid: int
    log: Path
    t0: float
    popen: subprocess.Popen | None = None
    rc: int | None = None
    wall: float = 0.0


class Launcher:
    """Start a job script as its own process with its own environment.

    ``fork`` (default on the GPU): the runner imports torch once (never initialising CUDA) and
    forks one child per run; the child sets its environment (``PYTORCH_CUDA_ALLOC_CONF`` among
    it), points stdout/stderr at the log and runs the script as ``__main__``. CUDA, and with it
    the allocator and its settings, is initialised in the child, so every run is a fresh CUDA
    process; only the ~2-5 s of ``import torch`` is saved. An uncaught exception is printed as
    the interpreter prints it (the launcher's own frames left out) and the child exits 1.
    ``subprocess``: ``python3 script ...`` per run (compiled bytecode cached under
    ``PYTHONPYCACHEPREFIX``).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        if mode == "fork":
            import torch

            if torch.cuda.is_initialized():
                raise RuntimeError("the launcher must not initialise CUDA")

    def start(self, script: Path, argv: list[str], env: dict[str, str], log: Path) -> Handle:
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        if self.mode == "subprocess":
            with open(log, "wb") as f:
                p = subprocess.Popen(
                    [sys.executable, str(script), *argv],
                    env=env,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    cwd=str(script.parent),
                    start_new_session=True,
                )
            return Handle(p.pid, log, t0, popen=p)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # child: never returns
            code = 1
            try:
                code = _child(script, argv, env, log)
            finally:
                os._exit(code)
        return Handle(pid, log, t0)

    def poll(self, h: Handle) -> int | None:
        if h.rc is not None:
            return h.rc
        if h.popen is not None:
            rc = h.popen.poll()
        else:
            pid, status = os.waitpid(h.pid, os.WNOHANG)
            rc = None if pid == 0 else os.waitstatus_to_exitcode(status)
        if rc is not None:
            h.rc, h.wall = rc, time.time() - h.t0
        return h.rc

    def kill(self, h: Handle) -> None:
        try:
            if h.popen is not None:
                os.killpg(h.pid, signal.SIGKILL)
            else:
                os.kill(h.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, h: Handle, timeout: float) -> tuple[int, float]:
        """(exit status, seconds); 124 when it ran past ``timeout`` (then killed)."""
        while True:
            rc = self.poll(h)
            if rc is not None:
                return rc, h.wall
            if time.time() - h.t0 > timeout:
                self.kill(h)
                while self.poll(h) is None:
                    time.sleep(0.05)
                with open(h.log, "a") as f:
                    f.write("\n[run_cards] TIMEOUT: killed\n")
                h.rc = 124
                return 124, time.time() - h.t0
            time.sleep(0.02)


def _child(script: Path, argv: list[str], env: dict[str, str], log: Path) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    fd = os.open(str(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", 0), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", 0), write_through=True)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(str(script.parent))
    sys.path[0] = str(script.parent)
    sys.argv = [str(script), *argv]
    import runpy

    try:
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as e:
        c = e.code
        if c is None:
            code = 0
        elif isinstance(c, int):
            code = c
        else:
            print(c, file=sys.stderr)
            code = 1
    except BaseException as e:  # as the interpreter prints an uncaught exception
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != str(script):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb if tb is not None else e.__traceback__)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    return code


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "holder":
        sys.exit(holder_main("--dry" in sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
