"""kopf's floor for the operator's job: the baseline of bench/operator_scale.py.

One ``@kopf.on.event('v1', 'pods')`` handler: for a pod with a container that terminated
OOMKilled (current or last state) and no ``gpu-auditor.io/diagnosis`` annotation yet, it sets that
one annotation to ``host-oom-killed`` through kopf's own ``patch`` (kopf sends it as one PATCH
after the handler returns). No diagnosis, no Event, no owner, no fresh GET, no thread pool (an
async handler), kopf's settings left at their defaults.

    .venv/bin/python bench/baseline_operator.py --kubeconfig K --liveness-port L
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

KEY = "gpu-auditor.io/diagnosis"


def oom_killed(status: Mapping[str, Any]) -> bool:
    """True when a container's current or last state is a termination with reason OOMKilled."""
    for container in status.get("containerStatuses") or []:
        for state in (container.get("state"), container.get("lastState")):
            if ((state or {}).get("terminated") or {}).get("reason") == "OOMKilled":
                return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--liveness-port", type=int, required=True)
    args = parser.parse_args(argv)
    # kopf's login reads the default kubeconfig location, fixed when kubernetes is imported.
    os.environ["KUBECONFIG"] = args.kubeconfig

    import kopf

    @kopf.on.event("v1", "pods")
    async def mark_oom_killed(
        body: kopf.Body, type: str | None, patch: kopf.Patch, **_: Any
    ) -> None:
        if type == "DELETED" or KEY in body.metadata.annotations:
            return
        if oom_killed(body.status):
            patch.metadata.annotations[KEY] = "host-oom-killed"

    kopf.run(
        standalone=True, clusterwide=True,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
