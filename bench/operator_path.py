"""How many stops an OOM log makes from the kopf handler to the annotation, and how many of them
go back into a file already visited.

Runs one CUDA OOM (a corpus log, a pod with a Job owner) through `handlers.pod_event` with an
in-memory API and the diagnosis core called in this process, and traces every Python call
(`sys.setprofile`) into the operator's own files (`gpu_auditor/controller`, `gpu_auditor/base`,
`node_agent`; the diagnosis core counts as one file, `diagnosis/*`, entered once per call of
it). A stop is a call that lands in another file than the last call did; a return to a file
already visited is a revisit. Works on any tree of the repository (`--tree`), so the same
script counts the code before and after a change:

    git archive <commit> | tar -x -C /tmp/before
    .venv/bin/python bench/operator_path.py --tree /tmp/before
    .venv/bin/python bench/operator_path.py --tree .
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any


def run(tree: Path) -> dict[str, Any]:
    sys.path[:0] = [str(tree / "operator"), str(tree)]
    from types import SimpleNamespace

    from gpu_auditor.controller import handlers
    from gpu_auditor.controller.service import OperatorConfig, Services
    from gpu_auditor.diagnosis import diagnose

    log = (tree / "tests/fixtures/oom/corpus/seed_example_fragmentation.log").read_bytes()
    pod = {
        "metadata": {"namespace": "ml", "name": "train-x", "uid": "uid-1", "annotations": {},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "train", "uid": "job-uid",
                                          "controller": True}]},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"name": "main", "image": "pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime",
             "env": [{"name": "PYTORCH_CUDA_ALLOC_CONF",
                      "value": "garbage_collection_threshold:0.6"}]}]},
        "status": {"containerStatuses": [{"name": "main", "restartCount": 0, "state": {
            "terminated": {"exitCode": 1, "reason": "Error",
                           "finishedAt": "2026-11-29T10:00:00Z"}}}]},
    }
    marks: list[str] = []

    class Kube:
        def read_log(self, *_: Any, **__: Any) -> bytes:
            return log

        def read_node_report(self, node: str) -> dict[str, Any] | None:
            return None

        def post_event(self, *_: Any, **__: Any) -> bool:
            return True

        def patch_pod_annotations(self, *_: Any, **__: Any) -> None:
            marks.append("pod-annotated")

        def read_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
            return {"metadata": {"uid": "job-uid"}}

        def patch_workload(self, *_: Any, **__: Any) -> None:
            marks.append("owner-annotated")

    class Inline:
        def diagnose(self, text: bytes | str, **options: Any) -> Any:
            return diagnose(text, **options)

    services = Services(kube=Kube(), config=OperatorConfig(),  # type: ignore[arg-type]
                        diagnoser=Inline(), schedule=lambda *_: True)
    memo = SimpleNamespace(services=services)
    ours = [str((tree / "operator/gpu_auditor/controller").resolve()),
            str((tree / "operator/gpu_auditor/base").resolve()),
            str((tree / "node_agent").resolve())]
    core = str((tree / "operator/gpu_auditor/diagnosis").resolve())
    stops: list[str] = []
    at_pod: list[int] = []
    depth_in_core = [0]
    body = copy.deepcopy(pod)
    raw_ids = set()

    def collect(value: Any) -> None:
        if isinstance(value, dict | list):
            raw_ids.add(id(value))
            for item in value.values() if isinstance(value, dict) else value:
                collect(item)

    collect(body)
    raw_calls: dict[str, int] = {}
    work: dict[str, int] = {}
    counted = {"torch_version_hint": "torch release worked out",
               "current_alloc_conf": "current alloc conf worked out",
               "validate_alloc_conf": "alloc conf validated", "check": "alloc conf validated"}

    def where(filename: str) -> str | None:
        path = str(Path(filename).resolve())
        if path.startswith(core):
            return "diagnosis/*"
        for root in ours:
            if path.startswith(root):
                return str(Path(path).relative_to(tree.resolve()))
        return None

    def profile(frame: Any, event: str, _: Any) -> None:
        if event == "call":
            place = where(frame.f_code.co_filename)
            name = frame.f_code.co_name
            what = counted.get(name)
            if what and (name != "check" or frame.f_code.co_filename.endswith("allocconf.py")):
                work[what] = work.get(what, 0) + 1
            if place is not None and place != "diagnosis/*" and any(
                    id(v) in raw_ids for v in list(frame.f_locals.values())):
                raw_calls[place] = raw_calls.get(place, 0) + 1
            if place == "diagnosis/*":
                depth_in_core[0] += 1
                if depth_in_core[0] > 1:
                    return
            if place is not None and (not stops or stops[-1] != place):
                stops.append(place)
        elif event == "return" and where(frame.f_code.co_filename) == "diagnosis/*":
            depth_in_core[0] -= 1
        if marks and not at_pod:
            at_pod.append(len(stops))

    sys.setprofile(profile)
    try:
        handlers.pod_event(body=body, type="MODIFIED", memo=memo)
    finally:
        sys.setprofile(None)
    assert marks == ["pod-annotated", "owner-annotated"], marks

    def summary(path: list[str]) -> dict[str, Any]:
        files = list(dict.fromkeys(path))
        return {"stops": len(path), "files": len(files), "revisits": len(path) - len(files),
                "path": path}

    return {"to_pod_annotation": summary(stops[: at_pod[0]]),
            "to_owner_annotation": summary(stops),
            "calls_given_the_raw_pod_by_file": raw_calls,
            "work": work}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.tree.resolve())
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for part in ("to_pod_annotation", "to_owner_annotation"):
        found = result[part]
        print(f"{part}: {found['stops']} stops in {found['files']} files, "
              f"{found['revisits']} back into a file already visited")
        print("  " + " > ".join(p.rsplit("/", 1)[-1] for p in found["path"]))
    raw = result["calls_given_the_raw_pod_by_file"]
    print(f"calls given the raw pod (or a part of it): {sum(raw.values())}: "
          + ", ".join(f"{k.rsplit('/', 1)[-1]} {v}" for k, v in raw.items()))
    print("work: " + ", ".join(f"{k} {v}x" for k, v in result["work"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
