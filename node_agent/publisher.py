"""Writes the node's GPUNodeReport: create-or-replace, on material change, at most every N s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

from gpu_auditor.base.errors import APIConflictError, APIError, APINotFoundError
from gpu_auditor.base.nodereport import SpecBody
from node_agent.model import Snapshot
from node_agent.report import build_body, build_spec, material_change

log = logging.getLogger(__name__)


class Reports(Protocol):
    """The node's GPUNodeReport (``node_agent.kube.AgentApi``; tests fake it). A failure raises
    a ``gpu_auditor.base.errors.APIError`` class."""

    def read_report(self, name: str, *, timeout: float) -> Any: ...

    def create_report(self, body: Any, *, timeout: float) -> Any: ...

    def replace_report(self, name: str, body: Any, *, timeout: float) -> Any: ...


class ReportPublisher:
    """``api`` writes the report (a ``node_agent.kube.AgentApi``); ``errors`` is the agent's
    error counter (``apiserver`` is incremented on each failed write)."""

    def __init__(self, api: Reports, errors: MutableMapping[str, int], *,
                 min_interval: float = 30.0, timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._errors = errors
        self._min_interval = min_interval
        self._timeout = timeout
        self._clock = clock
        self._last_spec: SpecBody | None = None
        self._last_write: float | None = None
        self._resource_version: str | None = None
        self.writes = 0

    def maybe_publish(self, snapshot: Snapshot, *, force: bool = False) -> bool:
        """Publish when the report changed materially and the last write is old enough
        (or ``force``). Returns True when written; a failure is counted and retried later."""
        spec = build_spec(snapshot)
        now = self._clock()
        if not force:
            if self._last_write is not None and now - self._last_write < self._min_interval:
                return False
            if not material_change(self._last_spec, spec):
                return False
        try:
            self._write(spec)
        except Exception as err:  # an APIError class (HTTP, connection, timeout), bad answers
            self._errors["apiserver"] = self._errors.get("apiserver", 0) + 1
            log.warning("writing GPUNodeReport %s failed: %s", spec["nodeName"], err)
            return False
        self._last_spec, self._last_write = spec, now
        self.writes += 1
        return True

    def _write(self, spec: SpecBody, retry: bool = True) -> None:
        name = spec["nodeName"]
        body = build_body(spec)
        if self._resource_version is None:
            try:
                current = self._api.read_report(name, timeout=self._timeout)
                self._resource_version = current["metadata"]["resourceVersion"]
            except APINotFoundError:
                created = self._api.create_report(body, timeout=self._timeout)
                self._resource_version = created["metadata"]["resourceVersion"]
                return
        body["metadata"]["resourceVersion"] = str(self._resource_version)
        try:
            replaced = self._api.replace_report(name, body, timeout=self._timeout)
        except (APINotFoundError, APIConflictError):
            self._resource_version = None  # someone else wrote or deleted it: re-read
            if retry:
                self._write(spec, retry=False)
                return
            raise
        except APIError:
            self._resource_version = None
            raise
        self._resource_version = replaced["metadata"]["resourceVersion"]
