"""Writes the node's GPUNodeReport: create-or-replace, on material change, at most every N s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

from node_agent.model import Snapshot
from node_agent.report import GROUP, PLURAL, VERSION, build_body, build_spec, material_change

log = logging.getLogger(__name__)


class ClusterObjects(Protocol):
    """Cluster-scoped custom objects (``node_agent.apiclient.ApiClient``; tests fake it). A
    failure raises an exception whose ``status`` is the HTTP status (``apiclient.ApiError``)."""

    def get_cluster_object(self, group: str, version: str, plural: str, name: str, *,
                           timeout: float) -> dict[str, Any]: ...

    def create_cluster_object(self, group: str, version: str, plural: str,
                              body: dict[str, Any], *, timeout: float) -> dict[str, Any]: ...

    def replace_cluster_object(self, group: str, version: str, plural: str, name: str,
                               body: dict[str, Any], *, timeout: float) -> dict[str, Any]: ...


def _status(err: Exception) -> int | None:
    """The HTTP status of a failed request (None when there was no response)."""
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


class ReportPublisher:
    """``api`` writes the report (an ``apiclient.ApiClient``); ``errors`` is the agent's error
    counter (``apiserver`` is incremented on each failed write)."""

    def __init__(self, api: ClusterObjects, errors: MutableMapping[str, int], *,
                 min_interval: float = 30.0, timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._errors = errors
        self._min_interval = min_interval
        self._timeout = timeout
        self._clock = clock
        self._last_spec: dict[str, Any] | None = None
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
        except Exception as err:  # ApiError (HTTP, connection, timeout), bad answers
            self._errors["apiserver"] = self._errors.get("apiserver", 0) + 1
            log.warning("writing GPUNodeReport %s failed: %s", spec["nodeName"],
                        getattr(err, "reason", None) or err)
            return False
        self._last_spec, self._last_write = spec, now
        self.writes += 1
        return True

    def _write(self, spec: dict[str, Any], retry: bool = True) -> None:
        name = spec["nodeName"]
        body = build_body(spec)
        args = (GROUP, VERSION, PLURAL)
        if self._resource_version is None:
            try:
                current = self._api.get_cluster_object(*args, name, timeout=self._timeout)
                self._resource_version = current["metadata"]["resourceVersion"]
            except Exception as err:
                if _status(err) != 404:
                    raise
                created = self._api.create_cluster_object(*args, body, timeout=self._timeout)
                self._resource_version = created["metadata"]["resourceVersion"]
                return
        body["metadata"]["resourceVersion"] = self._resource_version
        try:
            replaced = self._api.replace_cluster_object(*args, name, body, timeout=self._timeout)
        except Exception as err:
            self._resource_version = None  # someone else wrote or deleted it: re-read next time
            if retry and _status(err) in (404, 409):
                self._write(spec, retry=False)
                return
            raise
        self._resource_version = replaced["metadata"]["resourceVersion"]
