"""The apply-recommendation webhook's owner reads: the one module of the webhook server that
calls the API, and only when `--apply-recommendations` is on (docs/webhook.md).

Everything else of the server needs no credentials (the API server calls it, it calls nothing).
Putting an owner's recommended setting into its next pod (`admission.apply`) needs the owner's
annotations, and which owner that is must be verified link by link (`admission.ownerchain`):
that takes GETs of the pod's owners, read-only, with the webhook's own service account (the
chart grants `get` on exactly the kinds a chain may read, and nothing else).

The server's worker threads wait on these reads, and the API server gives an admission 3 s: each
read has a 1 s deadline and is never retried (a 429 or 503 is an answer: the pod is admitted
unchanged), and a read answered in the last seconds is reused (a JobSet that recreates 16 pods
reads its Job and JobSet once, not 16 times).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

from gpu_auditor.base.client import ApiClient
from gpu_auditor.base.errors import APIError
from gpu_auditor.base.jobkinds import JobKind
from gpu_auditor.base.kubeconfig import load_config

USER_AGENT: Final = "gpu-auditor-webhook"
TIMEOUT: Final = 1.0
"""Seconds one owner read may take (a chain reads 1-3 objects; the admission has 3 s)."""
TTL: Final = 2.0
"""Seconds a read is reused."""
CAPACITY: Final = 256
"""Reads kept for reuse at most."""


class NoRetry(APIError):
    """The API server asked to come back later: the webhook does not wait."""


def _no_wait(_: float) -> None:
    raise NoRetry("the API server asked to retry later; the webhook does not wait", status=503)


class OwnerReader:
    """`admission.ownerchain.Read` over the API: a GET per object, reused for `ttl` seconds."""

    def __init__(self, api: ApiClient, *, timeout: float = TIMEOUT, ttl: float = TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.timeout = timeout
        self.ttl = ttl
        self.clock = clock
        self._kept: OrderedDict[str, tuple[float, Mapping[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0

    def __call__(self, kind: JobKind, namespace: str, name: str) -> Mapping[str, Any]:
        """The object; raises an `errors.APIError` class (or `names.InvalidName`)."""
        path = kind.path(namespace, name)
        now = self.clock()
        with self._lock:
            kept = self._kept.get(path)
            if kept is not None and now - kept[0] < self.ttl:
                return kept[1]
        self.reads += 1
        found = self.api.request("GET", path, timeout=self.timeout)
        obj: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        with self._lock:
            self._kept[path] = (now, obj)
            self._kept.move_to_end(path)
            while len(self._kept) > CAPACITY:
                self._kept.popitem(last=False)
        return obj


def owner_reader(kubeconfig: str | None) -> OwnerReader:
    """The reader with the webhook's credentials: `kubeconfig` (or `$KUBECONFIG`), else its
    service account. Raises ConfigError."""
    return OwnerReader(ApiClient(load_config(kubeconfig), user_agent=USER_AGENT, sleep=_no_wait))
