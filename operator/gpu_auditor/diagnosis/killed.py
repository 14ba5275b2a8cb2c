"""A log with no out-of-memory words whose job was killed by signal 9: say what that most often
is, without calling it an OOM.

A launcher's report of a worker SIGKILLed (torchrun's ``exitcode: -9`` and ``Signal 9
(SIGKILL) received``, DeepSpeed's ``return code = -9``, accelerate's ``Signals.SIGKILL: 9``, a
shell's or a container's exit code 137) says how the process died, not why. In the public threads
that settled it (``evaluation/unworded``, ``d-*`` and the threads their collector skipped), the
kernel's OOM killer taking host memory was the cause in 7 of 10; a scheduler, a user or a GPU OOM
elsewhere the rest. That is too few for a verdict on a pod (a wrong annotation is worse than
none), enough for an action on the CLI's "not found": where to look. The operator reads the
container's own ``OOMKilled`` reason instead.
"""

from __future__ import annotations

import re
from typing import Final

from .logtext import quoted

_KILLED: Final = re.compile(
    r"\bexitcode: -9\b|\bSignal 9 \(SIGKILL\) received by PID \d{1,9}|"
    r"\breturn code = -9\b|\bSignals\.SIGKILL: 9\b|"
    r"\b(?:exit(?:ed)? (?:with )?(?:code|status)|exit code:?) 137\b"
)

KILLED_ACTION: Final = (
    "the job was killed by signal 9 ({line}) and the log says nothing of memory: most often the "
    "kernel's OOM killer taking host (CPU) memory; check the pod's last state (kubectl describe "
    "pod: OOMKilled), the node's dmesg, and the container's memory limit"
)


def killed_by_signal(tail: str) -> str | None:
    """The last line of ``tail`` that reports a process killed by signal 9, stripped and cut to
    ``logtext.QUOTED_CHARS`` (non-printable characters as ``?``); None when none does."""
    for line in reversed(tail.splitlines()):
        if _KILLED.search(line) is not None:
            return quoted(line)
    return None
