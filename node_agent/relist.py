"""When the agent lists something from the API server again, and how a failed list is told.

This node's pods (``pods.ApiPods``) and its ResourceSlices (``dra.DraSlices``) are both kept
from one list: listed the first time they are needed, again every ``max_age`` s, and sooner
when a pass meets something the last list did not have (a new pod UID, a claimed device), but
at most every ``min_refresh`` s. A failed list keeps the last good answer, counts one API error,
and is logged once until a list works again (and that is logged too): a broken grant is one
log line, not one per pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Relist:
    """The schedule and the failure log of one kind of list (``what`` names it in the log)."""

    def __init__(self, what: str, *, min_refresh: float = 15.0, max_age: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._min_refresh = min_refresh
        self._max_age = max_age
        self._clock = clock
        self._last: float | None = None
        self._failing = False
        self.lists = 0  # lists attempted (for tests and the bench)

    def due(self, missing: Callable[[], bool]) -> bool:
        """Never listed, older than ``max_age``, or ``missing()`` and older than
        ``min_refresh`` (``missing`` is asked only then)."""
        if self._last is None:
            return True
        age = self._clock() - self._last
        return age >= self._max_age or (age >= self._min_refresh and missing())

    def refresh(self, missing: Callable[[], bool], fetch: Callable[[], None]) -> int:
        """Run ``fetch`` when due; returns the number of API errors (0 or 1). ``fetch`` keeps
        its result only when it succeeds (any exception: the last answer stays)."""
        if not self.due(missing):
            return 0
        self._last = self._clock()
        self.lists += 1
        try:
            fetch()
        except Exception as err:  # an APIError class, or a malformed answer
            if not self._failing:
                log.warning("%s failed, keeping the last answer (logged once until it works "
                            "again): %s", self.what, err)
            self._failing = True
            return 1
        if self._failing:
            log.warning("%s works again", self.what)
        self._failing = False
        return 0
