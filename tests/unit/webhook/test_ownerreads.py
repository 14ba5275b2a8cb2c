"""The webhook's owner reads: a GET per object with a short deadline, reused for a moment, and
never a wait for a retry the API server asks for."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base.errors import APIError
from gpu_auditor.webhook import ownerreads
from gpu_auditor.webhook.ownerreads import NoRetry, OwnerReader

pytestmark = pytest.mark.unit


class Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def request(self, method: str, path: str, *, timeout: float) -> Any:
        self.calls.append((method, path, timeout))
        return {"metadata": {"name": path.rsplit("/", 1)[-1]}}


def test_a_read_is_a_get_with_the_deadline_and_is_reused_for_its_ttl() -> None:
    api, now = Api(), [100.0]
    reader = OwnerReader(api, clock=lambda: now[0])  # type: ignore[arg-type]
    first = reader(jk.JOB, "ml", "train")
    assert first == {"metadata": {"name": "train"}}
    assert api.calls == [("GET", "/apis/batch/v1/namespaces/ml/jobs/train", 1.0)]
    now[0] += 1.5
    assert reader(jk.JOB, "ml", "train") is first and len(api.calls) == 1
    now[0] += 1.0
    reader(jk.JOB, "ml", "train")
    assert len(api.calls) == 2


def test_a_retry_the_api_server_asks_for_is_an_error_at_once() -> None:
    with pytest.raises(NoRetry) as raised:
        ownerreads._no_wait(1.0)
    assert isinstance(raised.value, APIError)


def test_names_are_validated_before_any_request() -> None:
    api = Api()
    reader = OwnerReader(api)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        reader(jk.JOB, "ml", "../secrets")
    assert api.calls == []
