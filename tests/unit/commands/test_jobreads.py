"""jobreads: which word names a job, and what explain KIND/NAME reads (GETs only)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.base import jobkinds as jk
from gpu_auditor.base.errors import APIForbiddenError, APINotFoundError
from gpu_auditor.commands.jobreads import read_all, target

pytestmark = pytest.mark.unit


class Api:
    """Answers GETs from a map of path -> body (or an exception); records each request."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                timeout: float = 10.0) -> Any:
        self.sent.append((method, path, dict(query or {})))
        answer = self.answers.get(path, APINotFoundError("not found", status=404))
        if isinstance(answer, Exception):
            raise answer
        return answer


def obj(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name, "uid": "u-1"}, **extra}


def test_kind_slash_name_names_a_job_and_namespace_slash_pod_does_not() -> None:
    assert target("jobset/train") == ((jk.JOBSET,), "train")
    assert target("PyTorchJob/pj") == ((jk.PYTORCHJOB,), "pj")
    assert target("lws/serve") == ((jk.LEADERWORKERSET,), "serve")
    assert target("mpijobs/m") == ((jk.MPIJOB_V1, jk.MPIJOB), "m")
    assert target("ml/trainer-0") is None and target("trainer-0") is None
    assert target("jobset/a/b") is None


def test_a_jobset_its_pods_by_their_label_and_its_events_are_read() -> None:
    api = Api({"/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/train": obj("train"),
               "/api/v1/namespaces/ml/pods": {"items": [{"metadata": {"name": "p"}}],
                                              "metadata": {}},
               "/api/v1/namespaces/ml/events": {"items": []}})
    reads = read_all(api, (jk.JOBSET,), "ml", "train")  # type: ignore[arg-type]
    assert reads.kind is jk.JOBSET and len(reads.pods) == 1 and reads.notes == ()
    assert [(m, p, q) for m, p, q in api.sent][1:] == [
        ("GET", "/api/v1/namespaces/ml/pods",
         {"labelSelector": "jobset.sigs.k8s.io/jobset-name=train", "limit": "1000"}),
        ("GET", "/api/v1/namespaces/ml/events", {"fieldSelector": "involvedObject.uid=u-1"})]
    assert {m for m, _, _ in api.sent} == {"GET"}


def test_an_mpijob_is_looked_for_in_either_api() -> None:
    api = Api({"/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/m": obj("m"),
               "/api/v1/namespaces/ml/pods": {"items": []},
               "/api/v1/namespaces/ml/events": {"items": []}})
    reads = read_all(api, (jk.MPIJOB_V1, jk.MPIJOB), "ml", "m")  # type: ignore[arg-type]
    assert reads.kind is jk.MPIJOB


def test_a_rayjobs_pods_are_its_clusters() -> None:
    api = Api({"/apis/ray.io/v1/namespaces/ml/rayjobs/rj":
               obj("rj", status={"rayClusterName": "rj-abcde"}),
               "/api/v1/namespaces/ml/pods": {"items": []},
               "/api/v1/namespaces/ml/events": {"items": []}})
    read_all(api, (jk.RAYJOB,), "ml", "rj")  # type: ignore[arg-type]
    assert api.sent[1][2]["labelSelector"] == "ray.io/cluster=rj-abcde"


def test_pods_or_events_the_account_may_not_read_become_notes() -> None:
    forbidden = APIForbiddenError("forbidden", status=403)
    api = Api({"/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/pj": obj("pj"),
               "/api/v1/namespaces/ml/pods": forbidden, "/api/v1/namespaces/ml/events": forbidden})
    reads = read_all(api, (jk.PYTORCHJOB,), "ml", "pj")  # type: ignore[arg-type]
    assert reads.notes == ("the PyTorchJob's pods: forbidden to your account",
                           "Events: forbidden to your account")


def test_a_missing_job_raises_not_found() -> None:
    with pytest.raises(APINotFoundError):
        read_all(Api({}), (jk.JOBSET,), "ml", "gone")  # type: ignore[arg-type]
