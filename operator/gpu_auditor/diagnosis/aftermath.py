"""After the reported failure: did the job go on and die of something else?

A job may catch an out-of-memory error (log it, halve its batch, skip the batch) and go on; when
it later dies of an unrelated error, that error ended the container, and a diagnosis of the OOM
would put a wrong cause (and a wrong setting) on the pod. This reads what the log printed after
the reported failure (``ScanResult.tail``: at most the log's last ``logtext.TAIL_BYTES``) and
names the later error when all of these hold:

- a Python traceback (``Traceback (most recent call last):``) starts after the failure, printed
  by the failure's own process: the same rank prefix (a launcher's or another rank's traceback is
  another process, which the failure may well have brought down);
- it is the job's own exception, not Python reporting one on the way out: the line before it
  does not chain it to an earlier exception (``During handling of the above exception``,
  ``The above exception was the direct cause``) and does not say it came from a thread,
  ``__del__`` or ``atexit`` (``Exception in thread``, ``Exception ignored in``, ``Error in
  atexit``), which the failure's own unwinding sets off;
- none of its lines (up to the next traceback) holds a failure wording of any family (a
  re-raised OOM, a child's OOM quoted by ``mp.spawn``, an exception message that names one, a
  re-print of the OOM after it), and its exception is not one that only
  reports another process's exit (``CONSEQUENCES``: launchers, a signal from one, a peer gone)
  or the device the failure left unusable (``_NO_DEVICE``);
- the traceback ends in an exception line within the tail (named with its control and format
  characters as ``?``, at most ``MAX_EXCEPTION_CHARS``).

The failure's process's tracebacks are read from the last back: those printed on the way out and
those of a consequence are passed over; the first other one decides (a traceback chained to an
earlier one is decided by the first of its chain: chained to the failure's own, it is the
failure's aftermath). A log that only quotes an OOM message, or that goes on after one
and ends without a traceback, is not told apart (the failure is then still reported).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from . import formats
from .logtext import Line, normalize_text

TRACEBACK: Final = "Traceback (most recent call last):"
_CHAINED: Final = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_ON_THE_WAY_OUT: Final = ("Exception in thread", "Exception ignored in", "Error in atexit")
CONSEQUENCES: Final = frozenset(
    {
        "ChildFailedError",  # torchrun / torch.distributed.elastic: a worker failed
        "CalledProcessError",  # accelerate launch, deepspeed, subprocess.run(check=True)
        "ProcessRaisedException",  # torch.multiprocessing.spawn: a child raised
        "ProcessExitedException",  # torch.multiprocessing.spawn: a child exited
        "SignalException",  # torchrun's workers, ended by the agent's SIGTERM
        "KeyboardInterrupt",  # SIGINT from a launcher stopping its workers
        "SystemExit",
        "BrokenPipeError",  # the reader of a pipe (a parent, a worker) is gone
        "ConnectionResetError",
        "DistBackendError",  # NCCL: a peer failed
        "DistNetworkError",
    }
)
"""Exceptions that report another process's end, not a failure of the job's own: after an OOM
they are its consequences, wherever they are printed."""
_PEER_GONE: Final = re.compile(
    r"\bNCCL\b|ProcessGroup|\bgloo\b|[Cc]onnection (?:closed|reset) by peer"
    r"|communicator was aborted|Watchdog caught collective"
)
"""An exception whose message reports a collective or a peer failing (``RuntimeError`` before
torch 2.1 named no ``DistBackendError``): another rank's end, a consequence like those above."""
_NO_DEVICE: Final = re.compile(r"no supported devices found|Unable to initialize backend")
"""An exception whose message says the stack could not start on its device: after a failure to
create the device's context (XLA/JAX's "Failed to create stream executor ...:
CUDA_ERROR_OUT_OF_MEMORY", measured on the H200: evaluation/results/library-errors) it is that
failure's consequence, raised by the job's first array operation."""
_EXCEPTION: Final = re.compile(r"([A-Za-z_][\w.]{0,255})(?::|$)")
_BARE_NAME: Final = re.compile(
    r"(?:Error|Exception|Interrupt|Exit|Iteration|Warning|Failure|Timeout)$"
)
"""What an exception's name without a message ends with (Python's own: ``KeyboardInterrupt``,
``SystemExit``, ``StopIteration``, ``MemoryError``; a library's by the same convention). A bare
word that does not is a line the post cut ("Run", the first letters of "RuntimeError: ...":
public29 p-006's traceback, pasted after its own message): nothing is read into it."""
MAX_EXCEPTION_CHARS: Final = 200


def later_failure(tail: str, rank: str | None) -> str | None:
    """The exception line that ended the job after the reported failure (module doc), or None
    when nothing after it says the failure was handled. ``rank``: the failure's rank prefix."""
    lines = normalize_text(tail)
    by_rank: dict[str | None, list[Line]] = {}
    for line in lines:
        by_rank.setdefault(line.rank, []).append(line)
    own = _decide(by_rank.get(rank, []))
    if own is not None or rank is not None or len(by_rank) < 2:
        return own if isinstance(own, str) else None
    # a failure printed without a rank prefix (the job's own logger), every rank's traceback
    # after it rank-prefixed: the prefix is torchrun's on the tracebacks that end a worker, so
    # the failure was not what ended its worker unless one of them reports it again
    ranked = [_decide(group) for key, group in by_rank.items() if key is not None]
    if any(verdict is AGAIN for verdict in ranked):
        return None
    return next((verdict for verdict in ranked if isinstance(verdict, str)), None)


class _Again:
    """What ``_decide`` gives when a process's last word is the failure again."""


AGAIN: Final = _Again()


def _decide(own: list[Line]) -> str | _Again | None:
    """One process's lines after the failure: the exception that ended it, ``AGAIN`` (its last
    word is the failure again) or None (nothing to read)."""
    starts = [i for i, line in enumerate(own) if line.text.strip() == TRACEBACK]
    ended: str | None = None  # the last exception of a chain, while its first is looked for
    stops = [*starts[1:], len(own)]  # each traceback ends where the next begins
    for start, stop in reversed(list(zip(starts, stops, strict=False))):
        before = next((x.text.strip() for x in reversed(own[:start]) if x.text.strip()), "")
        if before.startswith(_ON_THE_WAY_OUT):
            continue
        text = _exception_line(own, start, stop)
        if text is None:
            return None  # cut short, or not a traceback Python printed: read nothing into it
        if any(formats.find_failure(line.text) is not None for line in own[start:stop]):
            return AGAIN  # the failure again (re-raised, quoted, in its message or after it)
        name = _EXCEPTION.match(text)
        if name is None or (name.end() == len(text) and not _BARE_NAME.search(name.group(1))):
            return None
        if name.group(1).rpartition(".")[2] in CONSEQUENCES or _PEER_GONE.search(text):
            continue
        if _NO_DEVICE.search(text):
            continue
        if ended is None:
            ended = text
        if before not in _CHAINED:
            return _visible(ended[:MAX_EXCEPTION_CHARS])
    if ended is not None:  # a chain whose first exception is the failure's own
        return AGAIN
    return None


def _exception_line(lines: list[Line], start: int, stop: int) -> str | None:
    """The traceback's final line: the first one in ``lines[start + 1 : stop]`` that is not
    blank and not indented past the ``Traceback`` header (frames, their code and its carets
    are). A line indented less than the header is another writer's, printed into a traceback a
    logger indented (public9 o-007: "stdout:" inside a logged traceback): nothing is read."""
    header = _indent(lines[start].text)
    for i in range(start + 1, stop):
        text = lines[i].text
        if not text.strip():
            continue
        indent = _indent(text)
        if indent > header:
            continue
        return text.strip() if indent == header else None
    return None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _visible(text: str) -> str:
    """The tenant's text with control and format characters (escape sequences, bidi
    overrides) as ``?``: it is printed to terminals and written in JSON."""
    return "".join("?" if unicodedata.category(c)[0] == "C" else c for c in text)


def skipped_then_more(family: str, after: str) -> bool:
    """Whether the failure is a trainer's report that it skipped the batch that ran out of memory
    (``formats.SKIPPED``: fairseq's, Boltz's) and the log goes on after it: such a report is the
    failure only where the log ends at it (public32 f-021, f-027). What follows is not read for
    progress: fairseq's JSON records and a lone interval line are progress no pattern reads, and
    a Boltz run whose only batch was skipped prints its bar after (the round's review)."""
    return family == formats.SKIPPED and bool(after.strip())
