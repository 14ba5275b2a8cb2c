"""The webhook's, the env reader's, explain's and the kubeconfig's parsers, fuzzed (issue 26):
a million inputs each, no crash, and no input costing more than 10x the mean per byte.

Parsers, each with the only exception it may raise:

- ``admission-review``: a request body as the webhook server handles it once read: the
  length and parse-cost bounds (`webhook.limits`), then `webhook.server.answer` on one of its
  four paths (JSON, the AdmissionReview, the checks or the probe's injection), never raises;
- ``container-env``: a container's JSON (any shape) read by `base.containerenv.container_env`
  (the kubelet's rules) and checked by `admission.findings.check_container`, never raises;
- ``explain-annotations``: a pod's `actions` and `evidence` annotations (any text) read by
  `commands.explanation.read_diagnosis` into the core's types, never raises;
- ``kubeconfig``: a kubeconfig file's bytes through `base.kubeconfig.parse_yaml` and
  `parse_kubeconfig` (aliases, types, paths), ConfigError.

Inputs are mutations of valid inputs (bytes flipped, runs inserted and deleted, chunks
duplicated, the format's own tokens spliced in, truncations), random bytes, and hand-made worst
shapes at each parser's bound. Each input is timed alone (``perf_counter_ns``). "10x the mean
per byte", as bench/fuzz_agent_parsers.py reads it: inputs are grouped by what became of them
(read, refused, ...); in each group a call's fixed cost ``a`` (the mean of its inputs of at
most 64 bytes, or of its smallest 5% when few are that small: a container with findings is
never 64 bytes) and a cost per byte ``b`` predict an input's cost as ``a + b x bytes``, where
``b`` is the larger of the group's own and the costliest group's (of 100 inputs or more): a
refusal may be found at the first byte or the last, and neither may cost more than 10x reading
that many bytes as the parser reads whole inputs; an
input over 10x that is timed again five times (the least counts: a GC pause or the scheduler
is not the parser's) and is a violation if it still is.

    .venv/bin/python bench/fuzz_operator_parsers.py                  # 1,000,000 each
    .venv/bin/python bench/fuzz_operator_parsers.py --count 20000    # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import heapq
import json
import os
import platform
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from gpu_auditor.admission.findings import check_container  # noqa: E402
from gpu_auditor.base.containerenv import container_env  # noqa: E402
from gpu_auditor.base.errors import ConfigError  # noqa: E402
from gpu_auditor.base.kubeconfig import parse_kubeconfig, parse_yaml  # noqa: E402
from gpu_auditor.commands.explanation import read_diagnosis  # noqa: E402
from gpu_auditor.webhook.limits import MAX_BODY, MAX_PARSE_COST, parse_cost  # noqa: E402
from gpu_auditor.webhook.server import ROUTES, Settings, answer  # noqa: E402

SETTINGS = Settings(probe_image="registry.example/gpu-auditor:probe")
PATHS = sorted(ROUTES)
ALLOC = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCH_VERSION", "PYTORCH_VERSION")

# ---- the parsers, as each is called on what arrives ----------------------------------------


def admission_review(data: bytes, path: str) -> str:
    if len(data) > MAX_BODY:
        return "refused: length"
    if parse_cost(data) > MAX_PARSE_COST:
        return "refused: parse cost"
    reply = answer(path, data, SETTINGS)
    if reply.status == 400:
        return "bad-request: not JSON" if b"not JSON" in reply.body else "bad-request: review"
    return f"answered {reply.result}"


def container_env_reader(data: bytes) -> str:
    try:
        container = json.loads(data)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(container, dict):
        return "not an object"
    env = container_env(container, ALLOC)
    findings = check_container(container)
    return f"read, {'known' if all(v.known for v in env.values()) else 'unknown'}, " \
           f"{'findings' if findings else 'clean'}"


def explain_annotations(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    actions, _, evidence = text.partition("\x00")
    notes: list[str] = []
    malformed: list[str] = []
    read = read_diagnosis({"diagnosis": "fragmentation", "actions": actions,
                           "evidence": evidence}, notes, malformed)
    assert read is not None
    why = sorted({m.split(" annotation is ", 1)[-1] for m in malformed})
    return f"malformed: {', '.join(why)}" if why else "read"


def kubeconfig(data: bytes) -> str:
    try:
        parsed = parse_yaml(data, "fuzzed kubeconfig")
    except ConfigError as err:
        if "not UTF-8" in str(err) or "larger than" in str(err):
            return "refused: not UTF-8 or too large"
        if _YAML_LINE.search(str(err)):
            return "refused: YAML error"
        return "refused: its aliases, depth or values"
    try:
        parse_kubeconfig(parsed if isinstance(parsed, dict) else {}, Path("/tmp"), "fuzzed")
    except ConfigError:
        return "refused: its content"
    return "read"


# ---- valid inputs to mutate ------------------------------------------------------------------


def pod(rng: random.Random) -> dict[str, Any]:
    containers = []
    for i in range(rng.randint(1, 4)):
        env: list[Any] = [{"name": "TORCH_VERSION", "value": rng.choice(["2.1.0", "2.4", "2.0"])}]
        for _ in range(rng.randint(0, 3)):
            env.append({"name": "PYTORCH_CUDA_ALLOC_CONF", "value": rng.choice([
                "expandable_segments:True", "expandable_segment:True",
                "$(BASE),max_split_size_mb:64", "garbage_collection_threshold:0.6",
                "backend:cudaMallocAsync", "$$(X)"])})
        if rng.random() < 0.3:
            env.insert(0, {"name": "BASE", "value": "expandable_segments:True"})
        if rng.random() < 0.2:
            env.append({"name": "PYTORCH_ALLOC_CONF",
                        "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}})
        container: dict[str, Any] = {"name": f"c{i}", "image": "pytorch/pytorch:2.4.0-cuda12.4",
                                     "env": env}
        if rng.random() < 0.3:
            container["envFrom"] = [{"configMapRef": {"name": "base"}, "prefix": rng.choice(
                ["", "B", "PYTORCH_"])}]
        containers.append(container)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "labels": {"gpu-auditor.io/probe": "true"},
                         "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
            "spec": {"containers": containers}}


def review(rng: random.Random) -> bytes:
    obj = pod(rng)
    if rng.random() < 0.3:
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"metadata": {}, "spec": obj["spec"]}}}
    request: dict[str, Any] = {"uid": "u-1", "operation": rng.choice(["CREATE", "UPDATE"]),
                               "namespace": "ml", "object": obj,
                               "userInfo": {"username": rng.choice(
                                   ["alice", "system:serviceaccount:kube-system:job-controller"])}}
    if request["operation"] == "UPDATE":
        request["oldObject"] = pod(rng)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request}).encode()


def container_json(rng: random.Random) -> bytes:
    return json.dumps(pod(rng)["spec"]["containers"][0]).encode()


def annotations(rng: random.Random) -> bytes:
    actions = json.dumps(["set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                          "a smaller batch"])
    evidence = json.dumps({
        "container": "main", "restartCount": 0, "exitCode": 1, "terminationReason": "Error",
        "source": "log", "framework": "pytorch", "torchVersionHint": "2.4", "oomCount": 2,
        "contributing": ["capacity"], "otherPodsOnGPU": ["ml/notebook-1"],
        "figures": {"requestedBytes": 4 << 30, "totalBytes": 140 << 30, "freeBytes": 1 << 30,
                    "processBytes": 130 << 30, "allocatedBytes": 120 << 30,
                    "reservedUnallocatedBytes": 2 << 30, "allowedBytes": None,
                    "otherProcesses": [{"pid": rng.randint(1, 99999), "bytes": 1 << 30,
                                        "namespace": "ml", "pod": "notebook-1"}]},
        "currentAllocConfProblems": ["expandable_segment is unknown"]})
    return (actions + "\x00" + evidence).encode()


KUBECONFIG = """\
apiVersion: v1
kind: Config
current-context: x
clusters:
- name: c
  cluster:
    server: https://api.example:6443
    certificate-authority-data: {ca}
    proxy-url: http://proxy.example:3128
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: &cfg {{region: eu-west-1, audience: [a, b]}}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--cluster, x]
      env: [{{name: PROFILE, value: ml}}]
      interactiveMode: Never
      provideClusterInfo: true
- name: v
  user: {{token: abc, client-certificate: c.crt, client-key: c.key}}
contexts:
- name: x
  context: {{cluster: c, user: u, namespace: ml}}
- name: y
  context: {{cluster: c, user: v, extra: *cfg}}
"""


def kubeconfig_text(rng: random.Random) -> bytes:
    return KUBECONFIG.format(ca="Y2E=" * rng.randint(1, 8)).encode()


TOKENS: dict[str, list[bytes]] = {
    "json": [b"{", b"}", b"[", b"]", b'"', b",", b":", b"null", b"true", b"1e999", b"-0",
             b"\\u0000", b"\\ud800", b'"$(', b"$$", b")", b"PYTORCH_CUDA_ALLOC_CONF", b"valueFrom",
             b"envFrom", b'"value":', b'"name":', b"9" * 40, b'"env":[', b'"containers":[{'],
    "yaml": [b"&a ", b"*a", b"[*a,*a,*a]", b"{", b"}", b"[", b"]", b"- ", b": ", b"!!binary ",
             b"!!python/object ", b"<<: *a", b"---\n", b"\n  ", b"'", b'"', b"%YAML 1.1\n",
             b"? ", b"|\n", b"9" * 40, b"~", b"2023-02-30"],
}


def mutate(data: bytes, rng: random.Random, tokens: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        at = rng.randint(0, len(out)) if out else 0
        if op < 0.2 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randint(0, 7)
        elif op < 0.4:
            out[at:at] = rng.choice(tokens) * rng.choice([1, 1, 2, 16, 256])
        elif op < 0.55 and out:
            del out[at:at + rng.randint(1, 64)]
        elif op < 0.7 and out:
            chunk = bytes(out[at:at + rng.randint(1, 512)])
            out[at:at] = chunk * rng.randint(1, 32)
        elif op < 0.8:
            out = out[:at]
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    return bytes(out)


LEAVES: list[Any] = [None, True, 0, -1, 2**70, 1.5, "", "x" * 5000, "$(", "$$", "$(A)$(A)",
                    "$(PYTORCH_CUDA_ALLOC_CONF)", "expandable_segments:True", "k:1," * 200,
                    [], {}, [{"name": "A"}], {"configMapKeyRef": {}}, "\u0000\u202e", "é" * 50,
                    *ALLOC, "valueFrom", "envFrom"]


def mutate_structure(obj: Any, rng: random.Random) -> Any:
    """A valid object changed where it is read: a leaf replaced (another type, a reference, a
    long string), a list item repeated, a key dropped or added; JSON-valid, so the parser's
    later stages are reached."""
    for _ in range(rng.randint(1, 5)):
        parent: Any = None
        key: Any = None
        node = obj
        for _ in range(rng.randint(0, 8)):
            if isinstance(node, dict) and node:
                parent, key = node, rng.choice(list(node))
            elif isinstance(node, list) and node:
                parent, key = node, rng.randrange(len(node))
            else:
                break
            node = parent[key]
        if parent is None:
            continue
        op = rng.random()
        if op < 0.5:
            parent[key] = copy.deepcopy(rng.choice(LEAVES))
        elif op < 0.7 and isinstance(parent, list):
            parent[key:key] = [copy.deepcopy(parent[key])
                               for _ in range(rng.choice([1, 2, 50, 500]))]
        elif op < 0.8 and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, dict):
            parent[rng.choice(["env", "envFrom", "value", "name", "prefix", "figures",
                               "otherProcesses", *ALLOC])] = copy.deepcopy(rng.choice(LEAVES))
    return obj


def worst_shapes(kind: str) -> list[bytes]:
    """Hand-made shapes at each parser's bound."""
    if kind == "admission-review":
        doubling = b'{"name":"A","value":"$(A)$(A)"},' * 2000
        return [b"[" * 100_000 + b"]" * 100_000, b"[" + b"{}," * 300_000 + b"{}]",
                b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"9" * 5000,
                review(random.Random(1)).replace(b'"env": [', b'"env": [' + doubling),
                review(random.Random(2)).replace(b"expandable_segments:True", b"k:1," * 1000)]
    if kind == "container-env":
        doubled = [{"name": "A", "value": "x"}] + [{"name": "A", "value": "$(A)$(A)"}] * 64
        chain = [{"name": f"V{i}", "value": f"$(V{i - 1})"} for i in range(5000)]
        prefixes = [{"prefix": "P" * i, "configMapRef": {"name": "c"}} for i in range(200)]
        return [json.dumps({"env": doubled}).encode(),
                json.dumps({"env": [{"name": "X", "value": "$(" * 30_000}]}).encode(),
                json.dumps({"env": chain}).encode(),
                json.dumps({"envFrom": prefixes,
                            "env": [{"name": "X", "value": "$(PPPP)" * 1000}]}).encode()]
    if kind == "explain-annotations":
        others = {"figures": {"otherProcesses": [{"pid": 1, "bytes": 1}] * 10_000}}
        shapes = {"container": [[[[1]]]] * 1000, "contributing": ["a"] * 100_000}
        return [b"[" * 100_000 + b"\x00" + b"{" * 100_000,
                json.dumps(["x" * 1000] * 2000).encode() + b"\x00" + json.dumps(others).encode(),
                b"\x00" + json.dumps(shapes).encode()]
    return [b"a: &a [" + b"x," * 9 + b"x]\n" + b"".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n".encode()
                for i in range(8)) + b"current-context: *i\n",
            b"current-context: " + b"[" * 100_000 + b"]" * 100_000,
            b"a: &a [*a]\n", b"x: " + b"y" * (1 << 20), b"- " * 50_000]


GENERATORS: dict[str, tuple[Callable[[random.Random], bytes], str]] = {
    "admission-review": (review, "json"),
    "container-env": (container_json, "json"),
    "explain-annotations": (annotations, "json"),
    "kubeconfig": (kubeconfig_text, "yaml"),
}


def inputs(kind: str, count: int, rng: random.Random) -> Any:
    make, tokens = GENERATORS[kind]
    worst = worst_shapes(kind)
    for i in range(count):
        if i < len(worst):
            yield worst[i]
        elif rng.random() < 0.03:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(0, 256)))
        elif tokens == "json" and rng.random() < 0.5:
            yield _structural(make(rng), rng)
        else:
            yield mutate(make(rng), rng, TOKENS[tokens])


def _structural(data: bytes, rng: random.Random) -> bytes:
    text = data.decode()
    if "\x00" in text:  # explain's two annotations
        first, _, second = text.partition("\x00")
        return (json.dumps(mutate_structure(json.loads(first), rng)) + "\x00"
                + json.dumps(mutate_structure(json.loads(second), rng))).encode()
    return json.dumps(mutate_structure(json.loads(text), rng)).encode()


# ---- running and judging ---------------------------------------------------------------------


_YAML_LINE = re.compile(r"line (\d+), column (\d+)")


def call(kind: str, data: bytes, path: str) -> str:
    if kind == "admission-review":
        return admission_review(data, path)
    if kind == "container-env":
        return container_env_reader(data)
    if kind == "explain-annotations":
        return explain_annotations(data)
    return kubeconfig(data)


KEPT = 2000
"""Inputs kept for re-timing: the slowest per byte (ns over bytes + 64) of the run."""


def run(kind: str, count: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    samples: list[tuple[str, int, int]] = []  # outcome, bytes, ns
    kept: list[tuple[float, int, str, int, int, bytes, str]] = []  # a min-heap
    crashes: list[dict[str, Any]] = []
    started = time.monotonic()
    for n, data in enumerate(inputs(kind, count, rng)):
        path = rng.choice(PATHS)
        t0 = time.perf_counter_ns()
        try:
            outcome = call(kind, data, path)
        except Exception as exc:  # every exception but the allowed ones is a crash
            crashes.append({"error": f"{type(exc).__name__}: {exc}"[:300],
                            "input": repr(data[:200]), "bytes": len(data)})
            continue
        ns = time.perf_counter_ns() - t0
        size = len(data)
        samples.append((outcome, size, ns))
        entry = (ns / (size + 64), n, outcome, size, ns, data, path)
        if len(kept) < KEPT:
            heapq.heappush(kept, entry)
        elif entry[0] > kept[0][0]:
            heapq.heapreplace(kept, entry)
    groups: dict[str, list[tuple[int, int]]] = {}
    for outcome, size, ns in samples:
        groups.setdefault(outcome, []).append((size, ns))
    fitted = {o: _model(points) for o, points in groups.items()}
    # An input is held to reading whole inputs of its size: a refusal found at the first byte
    # and one found at the last are the same outcome at very different costs, and neither may
    # cost more than 10x reading that many bytes as the parser reads a whole input.
    b_read = max((b for o, (_, b) in fitted.items() if len(groups[o]) >= 100), default=0.0)
    model = {o: (a, max(b, b_read)) for o, (a, b) in fitted.items()}
    over = sum(1 for outcome, size, ns in samples
               if ns > 10 * (model[outcome][0] + model[outcome][1] * size))
    worst, violations = 0.0, []
    for _, _, outcome, size, ns, data, path in kept:
        a, b = model[outcome]
        if ns <= 10 * (a + b * size):
            continue
        retimed = min(_time(kind, data, path) for _ in range(5))
        ratio = retimed / (a + b * size)
        worst = max(worst, ratio)
        if ratio > 10:
            violations.append({"outcome": outcome, "bytes": size, "ms": round(retimed / 1e6, 2),
                               "ratio": round(ratio, 1), "input": repr(data[:120])})
    a_all, b_all = _model([(size, ns) for _, size, ns in samples])
    return {
        "parser": kind, "inputs": count, "crashes": len(crashes), "crash_examples": crashes[:5],
        "largest_input": max((s for _, s, _ in samples), default=0),
        "a_us": round(a_all / 1000, 1), "b_ns_per_byte": round(b_all, 1),
        "max_ms": round(max((ns for _, _, ns in samples), default=0) / 1e6, 2),
        "over_10x_first": over, "worst_ratio_retimed": round(worst, 1),
        "violations": violations[:10], "violation_count": len(violations),
        "b_reference_ns_per_byte": round(b_read, 1),
        "outcomes": {o: {"count": len(p), "ns_per_byte": round(fitted[o][1], 1)}
                     for o, p in sorted(groups.items())},
        "seconds": round(time.monotonic() - started, 1),
    }


def _model(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(a, b): a call's fixed cost (the mean of the group's smallest inputs: those of at most
    64 bytes, or its smallest 5% when it has too few of those) and the rest per byte."""
    small = [ns for size, ns in points if size <= 64]
    if len(small) < 20:
        by_size = sorted(points)
        small = [ns for _, ns in by_size[:max(20, len(by_size) // 20)]]
    a = sum(small) / len(small) if small else 0.0
    total_bytes = sum(size for size, _ in points) or 1
    b = max(sum(ns for _, ns in points) - a * len(points), 0.0) / total_bytes
    return a, b


def _time(kind: str, data: bytes, path: str) -> int:
    t0 = time.perf_counter_ns()
    with contextlib.suppress(Exception):  # counted already
        call(kind, data, path)
    return time.perf_counter_ns() - t0


def markdown(results: list[dict[str, Any]], command: str) -> str:
    lines = ["# The webhook's, the env reader's, explain's and the kubeconfig's parsers, fuzzed "
             "(issue 26)", "",
             f"Command: `{command}`; Python {platform.python_version()}; {platform.machine()}, "
             f"{os.cpu_count()} CPUs; load average at the end {list(os.getloadavg())}. Each "
             "parser gets mutations of valid inputs, random bytes and hand-made worst shapes at "
             "its bound; a crash is any exception but the parser's own error. Cost: each input "
             "against `a + b x bytes` of the inputs with the same outcome (a: the mean cost of "
             "its inputs of at most 64 bytes, or of its smallest 5%; b: the larger of its own per "
             "byte and the costliest outcome's, so a refusal is held to reading its bytes "
             "whole); "
             "of the 2,000 slowest per byte, those over 10x "
             "are re-timed five times (least); the worst ratio after re-timing is shown. The "
             "columns a and b are the whole run's.", "",
             "| parser | inputs | crashes | largest input | a: fixed us | b: ns/byte "
             "| max ms/input | over 10x at first timing | worst ratio re-timed | violations "
             "| seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['parser']} | {r['inputs']:,} | {r['crashes']} | "
                     f"{r['largest_input']:,} | {r['a_us']} | {r['b_ns_per_byte']} | "
                     f"{r['max_ms']} | {r['over_10x_first']} | {r['worst_ratio_retimed']} | "
                     f"{r['violation_count']} | {r['seconds']} |")
    lines += ["", "Reference ns/byte (the costliest outcome's): " + ", ".join(
        f"{r['parser']} {r['b_reference_ns_per_byte']}" for r in results)]
    lines += ["", "Outcomes: " + "; ".join(
        f"{r['parser']}: " + ", ".join(f"{o} {v['count']:,} ({v['ns_per_byte']} ns/byte)"
                                       for o, v in r["outcomes"].items()) for r in results)]
    for r in results:
        for v in r["violations"]:
            lines.append(f"- violation, {r['parser']}: {v}")
        for c in r["crash_examples"]:
            lines.append(f"- crash, {r['parser']}: {c}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--parsers", nargs="*", choices=sorted(GENERATORS),
                        default=sorted(GENERATORS))
    parser.add_argument("--out", type=Path, default=RESULTS / "fuzz_operator_parsers.json")
    args = parser.parse_args()
    command = " ".join(["python", "bench/fuzz_operator_parsers.py", *sys.argv[1:]])
    results = []
    for kind in args.parsers:
        result = run(kind, args.count, args.seed)
        print(json.dumps({k: v for k, v in result.items() if k != "violations"}), flush=True)
        results.append(result)
    text = markdown(results, command)
    print(text)
    args.out.write_text(json.dumps({"command": command, "results": results}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text)
    return 1 if any(r["crashes"] or r["violation_count"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
