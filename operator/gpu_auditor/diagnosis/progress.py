"""Did the job get anywhere before it ran out of memory? Read from the log before the failure.

A job that completed steps before its OOM had already run its step's peak with room to spare:
what broke it then is what changed since (the cache's idle pieces, a longer sequence, memory kept
across steps). A job that failed before finishing a step has not reached its peak yet, and the
rest of the step needs more than the failing allocation shows. ``classify`` reads fragmentation
differently in the two cases (``thresholds.FRAG_MIN_SHARE_WITHOUT_PROGRESS``).

Progress is any of, in the text before the failure (at most ``MAX_PROGRESS_BYTES`` of its end):

- one counter (``step``, ``iter``/``iteration``, ``epoch``, ``batch``, ``turn``, ``update``, in the
  singular: a plural is a setting, "Total optimization steps = 1000") at two different values, as
  training and serving loops print them (``step 50 ... step 100``, ``Epoch 1 ... Epoch 2``);
- a counter at one value on a line that says it finished (``step 1 warmup done``);
- a progress bar (tqdm) past its first iteration (``331/1063 [01:06<03:59``), unless it counts
  what the job set up (shards loaded, files fetched, a dataset mapped: ``_SETUP_BAR``);
- two lines reporting a loss (``loss 0.5680``, ``'loss': 2.31``): steps that ran to the end.

``finished_steps`` says how many (classify reads a few steps apart from a steady run:
``thresholds.FRAG_STEADY_STEPS``). Every pattern is a bounded regular expression over lowercased
lines (linear time); a line's first ``MAX_LINE_CHARS`` characters are read.
"""

from __future__ import annotations

import re
from typing import Final

MAX_PROGRESS_BYTES: Final = 64 * 1024
MAX_LINE_CHARS: Final = 1024

_COUNTER: Final = re.compile(
    r"\b(step|iter|iteration|epoch|batch|turn|update)\b[ \t:=#\[]{0,4}(\d{1,9})(?![\d.])"
)
_DONE: Final = re.compile(r"\b(?:done|finished|complete|completed)\b")
_BAR: Final = re.compile(r"(?<![\d.])(\d{1,9})/(\d{1,9}) \[\d")
_SETUP_BAR: Final = re.compile(
    r"\b(?:loading|downloading|fetching|resolving|extracting|uploading|map|filter|tokeniz\w{0,8}"
    r"|generating \w{1,16} split|sanity checking)\b"
)
"""A bar counting what the job set up, not its work: checkpoint shards loaded (transformers'
"Loading checkpoint shards: 100%| 8/8"), files fetched, a dataset mapped or tokenized (public22
v-019: a 27B model's shards all loaded on one 24 GB card, then its first allocation failed;
the shards are no step of the job's); Lightning's sanity check of a few validation batches
before training (the second review)."""
_LOSS: Final = re.compile(r"\bloss\b['\"]?[ \t:=]{1,4}-?\d")


STEADY: Final = 1_000_000
"""What a finished epoch counts as: many steps."""

_EPOCH: Final = "epoch"


def finished_steps(precontext: str) -> int:
    """How many steps the log shows finished before the failure (0: none; an advanced epoch
    counter counts as ``STEADY``): the most of a step-like counter's value (once it advanced, or
    on a line saying it finished), a progress bar's count, and the lines reporting a loss."""
    seen: dict[str, set[int]] = {}
    losses = 0
    best = 0
    for line in _lines(precontext):
        for done, _ in _work_bars(line):
            best = max(best, done)
        if _LOSS.search(line):
            losses += 1
            if losses >= 2:
                best = max(best, losses)
        for match in _COUNTER.finditer(line):
            name, value = match.group(1), int(match.group(2))
            values = seen.setdefault(name, set())
            values.add(value)
            if len(values) >= 2 or _DONE.search(line, match.end()):
                best = max(best, STEADY if name == _EPOCH else max(values))
    return best


def _lines(precontext: str) -> list[str]:
    return [raw[:MAX_LINE_CHARS].lower() for raw in precontext[-MAX_PROGRESS_BYTES:].splitlines()]


def _work_bars(line: str, first: int = 1) -> list[tuple[int, int]]:
    """``(done, total)`` of each bar on ``line`` at ``first`` iterations or more that counts the
    job's work, not its setup (``_SETUP_BAR``, read between the bar before it and this one)."""
    bars = []
    previous = 0  # where the bar before this one on the line ended (tqdm's "\r" lost)
    for bar in _BAR.finditer(line):
        done, total = int(bar.group(1)), int(bar.group(2))
        setup = _SETUP_BAR.search(line, previous, bar.start()) is not None
        previous = bar.end()
        if first <= done <= total and not setup:
            bars.append((done, total))
    return bars


def after_its_only_loop(precontext: str) -> bool:
    """The log's work bars are one loop's, and it had finished: one total, never going back (a
    bar back at a lower count, or at 0, is another pass), the last at its total with no progress
    after it, and no counter advanced. The work that failed after it (saving, exporting) ran no
    step before, and its peak is unseen, as a job's that finished no step (public23 z-021: a
    LoRA run's 200/200 steps, then saving the model ran out; the thread's fix was a library's).
    Bars of two totals (training and evaluation, a sampler), a bar back at a lower count or an
    advanced counter show the work after a loop ran before (the round's review: kohya's sample
    images between training steps, epochs without a counter, image generations, each from its
    first step). How often a bar is drawn at its total says nothing: tqdm redraws it on close, on
    every ``tqdm.write`` and ``set_postfix`` (the second review)."""
    complete = False
    loop: tuple[int, int] | None = None  # (total, last count) of the one loop so far
    counters: dict[str, set[int]] = {}
    for line in _lines(precontext):
        bars = _work_bars(line, first=0)
        for done, total in bars:
            if loop is not None and (total != loop[0] or done < loop[1]):
                return False
            loop = total, done
        if bars:
            complete = bars[-1][0] == bars[-1][1]
        elif _LOSS.search(line) or _COUNTER.search(line):
            complete = False
        for match in _COUNTER.finditer(line):
            values = counters.setdefault(match.group(1), set())
            values.add(int(match.group(2)))
            if len(values) >= 2:
                return False
    return complete


def steps_of_the_failing_work(precontext: str) -> int:
    """``finished_steps``, or 0 ``after_its_only_loop``: the steps that show the failing work's
    peak (what ``classify`` and ``recommend`` weigh)."""
    return 0 if after_its_only_loop(precontext) else finished_steps(precontext)


def made_progress(precontext: str) -> bool:
    """The job finished at least one step before the failure (module doc)."""
    return finished_steps(precontext) >= 1
