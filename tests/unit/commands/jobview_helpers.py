"""A distributed job's object and pods as the operator leaves them (its own builders), for the
job view's tests."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from gpu_auditor.base.contract import EventReason
from gpu_auditor.controller import jobnotes
from gpu_auditor.controller.jobnotes import RootCause
from gpu_auditor.controller.pod import DiagnosedKeys, Termination
from gpu_auditor.controller.rootcause import Failure, Read, verdicts

P = "gpu-auditor.io/"
T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
ROOT_NOTES = {
    f"{P}diagnosis": "fragmentation",
    f"{P}summary": "fragmentation: 6.91 GiB reserved but unallocated + 1.75 GiB free would cover "
                   "the 4.00 GiB request",
    f"{P}actions": json.dumps(["set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]),
    f"{P}recommended-alloc-conf": "expandable_segments:True",
    f"{P}evidence": json.dumps({"container": "main", "restartCount": 0, "exitCode": 1,
                                "terminationReason": "Error", "source": "log",
                                "figures": {"requestedBytes": 4 * 2**30,
                                            "freeBytes": 1879048192},
                                "framework": "pytorch"}),
}


def fail(pod: str, seconds: int, read: Read, how: str) -> Failure:
    return Failure("ml", pod, f"uid-{pod}", "main", 0, T0 + dt.timedelta(seconds=seconds), read,
                   how)


def written_job() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A JobSet whose rank 3 OOMed and whose ranks 0-2 failed 4 s later of NCCL timeouts."""
    root = RootCause(fail("train-workers-3-0-a", 0, Read.OOM, "fragmentation"), ROOT_NOTES,
                     EventReason.CUDA_OUT_OF_MEMORY, 3, "replicatedJob workers, job 3, index 0")
    peers = [fail(f"train-workers-{i}-0-a", 4, Read.CONSEQUENCE, "nccl-timeout")
             for i in (0, 1, 2)]
    (verdict,) = verdicts([root.failure, *peers])
    obj = {"metadata": {"namespace": "ml", "name": "train", "uid": "js-uid", "annotations": {
        k: v for k, v in jobnotes.job_annotations(root, verdict, prefix=P, now=T0).items()
        if v is not None}}}
    t = Termination("main", 0, "Error", 1, "", T0, previous=False)
    pods = [{"metadata": {"namespace": "ml", "name": peer.pod, "annotations": {
        k: v for k, v in jobnotes.pointer_annotations(
            peer, t, root, verdict, prefix=P, previous_keys=DiagnosedKeys(), now=T0).items()
        if v is not None}}} for peer in peers]
    pods.append({"metadata": {"namespace": "ml", "name": root.failure.pod,
                              "annotations": dict(ROOT_NOTES)}})
    return obj, pods
