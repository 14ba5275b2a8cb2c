"""Run the diagnosis core off the operator's process, with a time budget.

A log, a termination message and an env value are the tenant's text. The core promises to return
on any input, but a regression (a super-linear regex, a deep recursion) would hold the GIL: in a
thread it stalls kopf's event loop and every other handler, and a thread cannot be stopped; a
timeout on it only stops waiting. So the core runs in worker processes (`diagnosischild.py`), each
answering one request at a time, and a worker late past the budget is killed (SIGKILL) and
replaced. Measured in bench/results/operator_offloop.md: a worker costs about 18 MiB of RSS and
a fraction of a millisecond per diagnosis; a 3 s GIL-holding computation stalled the event loop
for 3 s in a thread and not at all in a worker.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any, Protocol

from gpu_auditor.controller import diagnosischild as protocol
from gpu_auditor.diagnosis import Diagnosis
from gpu_auditor.diagnosis.consequence import FailureReading

log = logging.getLogger("gpu_auditor.operator")

DEFAULT_BUDGET = 10.0
"""Seconds one diagnosis may take: a 1 MiB log takes about 0.2 s on a loaded 2-core machine."""
DEFAULT_WORKERS = 2


class Diagnoser(Protocol):
    """What the OOM path calls: `DiagnosisPool`, or an inline stand-in in tests."""

    def diagnose(self, text: bytes | str, **options: Any) -> Diagnosis: ...


class ReadingDiagnoser(Diagnoser, Protocol):
    """What the path of distributed jobs calls as well: the diagnosis and how the log failed
    (a consequence of another pod's end, and when), read in one pass over the pipe."""

    def diagnose_reading(self, text: bytes | str, reference: dt.datetime | None,
                         **options: Any) -> tuple[Diagnosis, FailureReading]: ...


class DiagnosisFailed(Exception):
    """The diagnosis raised, ran over its budget, or its worker died. `reason` labels the
    failure metric: `error`, `timeout` or `crashed`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class _Worker:
    """One worker process and its two pipes."""

    def __init__(self, function: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", protocol.__name__, function],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.requests: IO[bytes] = self.proc.stdin
        self.answers: IO[bytes] = self.proc.stdout

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, request: tuple[Any, ...], budget: float) -> Any:
        """The worker's answer; raises DiagnosisFailed (timeout, crashed)."""
        try:
            protocol.write_frame(self.requests, request)
        except (BrokenPipeError, OSError) as exc:
            raise DiagnosisFailed("crashed", f"worker {self.pid} gone: {exc}") from exc
        deadline = time.monotonic() + budget
        header = self._read(protocol.HEADER.size, deadline, budget)
        (size,) = protocol.HEADER.unpack(header)
        return pickle.loads(self._read(size, deadline, budget))

    def _read(self, size: int, deadline: float, budget: float) -> bytes:
        fd = self.answers.fileno()
        chunks: list[bytes] = []
        missing = size
        while missing:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0.0))[0] if left > 0 else []
            if not ready:
                raise DiagnosisFailed("timeout", f"no answer within the {budget:g} s budget")
            chunk = os.read(fd, min(missing, 1 << 20))
            if not chunk:
                try:
                    code: int | None = self.proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    code = None
                raise DiagnosisFailed("crashed", f"worker {self.pid} exited ({code})")
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.requests, self.answers):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("diagnosis worker %d did not exit after SIGKILL", self.pid)


class DiagnosisPool:
    """At most `size` worker processes, started when first needed and kept for the next
    diagnosis; one that fails (late, dead) is killed and a fresh one started next time."""

    def __init__(self, size: int = DEFAULT_WORKERS, budget: float = DEFAULT_BUDGET,
                 function: str = protocol.DEFAULT_FUNCTION) -> None:
        if size < 1 or budget <= 0:
            raise ValueError("a diagnosis pool needs at least one worker and a positive budget")
        self.size = size
        self.budget = budget
        self.function = function
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._all: set[_Worker] = set()

    def diagnose(self, text: bytes | str, **options: Any) -> Diagnosis:
        """`gpu_auditor.diagnosis.diagnose(text, **options)` in a worker, within the budget.

        The budget counts from the moment a worker has the request, not the wait for a free
        worker (at most `size` diagnoses run at once). Raises DiagnosisFailed."""
        value = self._ask((text, options))
        if not isinstance(value, Diagnosis):
            raise DiagnosisFailed("error", f"the diagnosis returned {type(value).__name__}")
        return value

    def diagnose_reading(self, text: bytes | str, reference: dt.datetime | None,
                         **options: Any) -> tuple[Diagnosis, FailureReading]:
        """The diagnosis and `consequence.read_failure(text, reference)`, in one worker
        request, within the budget. Raises DiagnosisFailed."""
        value = self._ask((text, options, reference))
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Diagnosis)
                and isinstance(value[1], FailureReading)):
            raise DiagnosisFailed("error", f"the diagnosis returned {type(value).__name__}")
        return value[0], value[1]

    def _ask(self, request: tuple[Any, ...]) -> object:
        with self._slots:
            worker = self._take()
            try:
                status, value = worker.ask(request, self.budget)
            except DiagnosisFailed:
                self._discard(worker)
                raise
            except Exception as exc:  # a garbled answer: do not trust that worker again
                self._discard(worker)
                raise DiagnosisFailed("crashed", protocol.describe(exc)) from exc
            self._give_back(worker)
        if status != "ok":
            raise DiagnosisFailed("error", str(value))
        return value

    def pids(self) -> Sequence[int]:
        with self._lock:
            return sorted(w.pid for w in self._all)

    def close(self) -> None:
        with self._lock:
            workers, self._idle = list(self._all), []
            self._all.clear()
        for worker in workers:
            worker.kill()

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        worker = _Worker(self.function)
        with self._lock:
            self._all.add(worker)
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()
        log.warning("diagnosis worker %d killed and will be replaced", worker.pid)
