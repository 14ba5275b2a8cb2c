"""The apply-recommendation webhook's decision for one pod: its owners read and verified
(`ownerreads`, `admission.ownerchain`), the first of them (top first) that recommends a setting
whose trial is open, and that setting merged into the pod (`admission.apply`).

Never in the way: a chain that does not verify, an owner that cannot be read, or nothing to
apply admits the pod as it is (`skipped`, logged); the server counts the result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.admission.apply import Recommended, apply, recommended, wants_recommendation
from gpu_auditor.admission.ownerchain import Owner, Read, Refused, owners
from gpu_auditor.admission.review import Outcome, Request
from gpu_auditor.base.errors import APIError
from gpu_auditor.base.names import InvalidName

log = logging.getLogger("gpu_auditor.webhook")


@dataclass(frozen=True)
class Applier:
    """What the apply paths need: the owner reader and the operator's annotation prefix."""

    read: Read
    prefix: str

    def __call__(self, request: Request, *, namespace_opted_in: bool) -> Outcome:
        pod: Mapping[str, Any] = request.obj
        if pod.get("kind") != "Pod" or request.operation != "CREATE" or \
                not wants_recommendation(pod, namespace_opted_in=namespace_opted_in):
            return Outcome(True, "skipped", ())
        try:
            chain = owners(pod, request.namespace, self.read)
        except Refused as exc:
            log.info("request %s: owner not verified, nothing applied: %s", request.uid, exc)
            return Outcome(True, "skipped", ())
        except (APIError, InvalidName) as exc:
            log.warning("request %s: owner not read, nothing applied: %s", request.uid, exc)
            return Outcome(True, "skipped", ())
        found = self.recommendation(chain)
        if found is None:
            return Outcome(True, "skipped", ())
        trial = found.trial
        why = f"pod {trial.failed_pod} ran out of memory ({trial.kind})" if trial else ""
        done = apply(pod, found, prefix=self.prefix, why=why)
        if not done.patch:
            return Outcome(True, "skipped", done.warnings)
        log.info("request %s: %s", request.uid, done.note)
        return Outcome(True, "applied", done.warnings, patch=done.patch)

    def recommendation(self, chain: list[Owner]) -> Recommended | None:
        """The first owner, top first, with a recommendation that may be applied."""
        for owner in chain:
            found = recommended(owner.annotations, self.prefix, owner.shown)
            if found is not None:
                return found
        return None
