"""The diagnosis pool's child process:
`python -m gpu_auditor.controller.diagnosischild [module:function]`.

It imports the diagnosis core only (about 18 MiB of RSS, not the operator's 90), reads one
request at a time from stdin and answers on stdout, in frames: an 8-byte big-endian length, then
a pickle. A request is `(text, options)`; the answer is `("ok", Diagnosis)` or
`("error", "<Type>: <message>")`. A request `(text, options, reference)` also reads how the log
failed (`gpu_auditor.diagnosis.consequence.read_failure(text, reference)`, for the pods of a
distributed job); its answer is `("ok", (Diagnosis, FailureReading))`. The operator kills the
process when an answer is late (`diagnosispool.DiagnosisPool`), which a thread could not do to
a computation stuck in C code.

Pickle is safe here: both ends are this package, and the request carries only the log bytes
(data, not code) and plain option values.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable
from typing import IO, Any

from gpu_auditor.diagnosis.consequence import read_failure

HEADER = struct.Struct(">Q")
DEFAULT_FUNCTION = "gpu_auditor.diagnosis:diagnose"
MESSAGE_LIMIT = 200
"""Characters of an exception message sent back (the rest of a message can echo the input)."""


def load(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


def write_frame(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next frame's value; None at end of input."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def serve(function: Callable[..., Any], requests: IO[bytes], answers: IO[bytes]) -> None:
    while (request := read_frame(requests)) is not None:
        text, options, *reading = request
        try:
            value = function(text, **options)
            if reading:
                value = (value, read_failure(text, reading[0]))
            answer: tuple[str, object] = ("ok", value)
        except Exception as exc:  # the core promises never to raise; say what it raised
            answer = ("error", describe(exc))
        write_frame(answers, answer)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the operator dies, even in the middle of a computation
    (end of input alone would only be seen after it)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    _die_with_parent()
    function = load(argv[0] if argv else DEFAULT_FUNCTION)
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else written to stdout (a stray print) goes to stderr
    serve(function, requests, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
