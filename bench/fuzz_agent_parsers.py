"""Every parser of what reaches the agent from outside, fuzzed (issue 26): a million inputs each,
no crash, and no input costing more than 10x the mean per byte.

Parsers, each with the only exception it may raise:

- ``http-head``: a request head from any pod (``http_server.take_head`` then ``parse_head``,
  Accept-Encoding included), BadRequest;
- ``podresources-message``: a kubelet's ``List`` answer (``podresources.messages``), WireError;
- ``http2-frames``: the kubelet's HTTP/2 byte stream read by the client
  (``podresources.unary``: h2's state machine, our bounds, the gRPC frame and trailers) over a
  socket that hands back the fuzzed bytes, GrpcError;
- ``cgroup``: ``/proc/<pid>/cgroup`` text a process controls (``cgroup.parse_cgroup_file``),
  never raises;
- ``proc-stat``: ``/proc/<pid>/stat`` and ``comm`` (``procfs.parse_start_time`` ValueError,
  ``clean_comm`` never raises).

Inputs are mutations (bit flips, inserted and deleted runs, duplicated chunks, splices of the
format's own tokens, truncations) of valid inputs, plus random bytes and a few hand-made
worst shapes at each parser's size bound. Each input is timed alone (``perf_counter_ns``).
"10x the mean per byte": inputs are grouped by what became of them (read whole, refused,
...: an answer protobuf refuses at its tenth byte costs 2 ns/byte, one read into values
~90, and neither says anything about the other); in each group the mean cost per byte ``b``
(its nanoseconds over its bytes) and a call's fixed cost ``a`` (the mean of its inputs of at
most 64 bytes) predict an input's cost as ``a + b x bytes``. An input costing more than 10x
that is timed again five times (the least counts, so a GC pause or the scheduler is not
blamed on the parser) and is a violation if it still does. A parser that is superlinear
anywhere (a quadratic rescan, a per-byte loop in Python on some shape) shows there. The
whole run's ``a`` and ``b`` are reported beside.

    .venv/bin/python bench/fuzz_agent_parsers.py                 # 1,000,000 each, writes
    .venv/bin/python bench/fuzz_agent_parsers.py --count 20000   # bench/results/ (quicker)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "bench" / "results"
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from node_agent.cgroup import parse_cgroup_file  # noqa: E402
from node_agent.http_server import BadRequest, parse_head, take_head  # noqa: E402
from node_agent.podresources import messages, unary  # noqa: E402
from node_agent.podresources.messages import WireError  # noqa: E402
from node_agent.procfs import clean_comm, parse_start_time  # noqa: E402

# ---- the parsers, as each is called on what arrives ----------------------------------------


def http_head(data: bytes) -> str:
    buffer = bytearray(data)
    try:
        head, _ = take_head(buffer, 0)
        if head is None:
            return "incomplete"
        parse_head(head)
    except BadRequest:
        return "refused"
    return "read"


def podresources_message(data: bytes) -> str:
    try:
        messages.list_response(data)
    except WireError as err:  # protobuf refused it, or a bound stopped the walk
        return "refused" if str(err).startswith("not a") else "read, then refused"
    return "read"


class _FedSocket:
    """What the client's socket needs: recv hands back the fuzzed stream, sends go nowhere."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def recv(self, n: int) -> bytes:
        chunk, self.data = bytes(self.data[:n]), self.data[n:]
        return chunk

    def sendall(self, data: bytes) -> None:
        pass

    def settimeout(self, t: float) -> None:
        pass


def http2_frames(data: bytes) -> str:
    call = unary._Call(_FedSocket(data), time.monotonic() + 60, 1 << 20)  # type: ignore[arg-type]
    call.h2.initiate_connection()
    call.h2.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/v1/List"),
                             (":authority", "localhost")])
    call.h2.send_data(1, b"\x00\x00\x00\x00\x00", end_stream=True)
    call.h2.data_to_send()
    try:
        while not call.ended:
            call.read()
        unary._result(call.blocks, bytes(call.body), 1 << 20)
    except unary.GrpcError:
        return "refused"
    return "read"


def cgroup(data: bytes) -> str:
    return str(type(parse_cgroup_file(data.decode("utf-8", "replace"))).__name__)


def proc_stat(data: bytes) -> str:
    clean_comm(data[:256])
    try:
        parse_start_time(data)
    except ValueError:  # the procfs reader counts it as a failed read
        return "refused"
    return "read"


# ---- valid inputs to mutate ----------------------------------------------------------------

def _heads() -> list[bytes]:
    return [b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9401\r\nAccept: application/openmetrics-"
            b"text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3\r\nAccept-Encoding: gzip"
            b"\r\nUser-Agent: Prometheus/3.0.0\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: 10.0.0.1:9401\r\nUser-Agent: kube-probe/1.34\r\n"
            b"Accept: */*\r\nConnection: close\r\n\r\n",
            b"\r\nHEAD /metrics HTTP/1.0\nConnection: keep-alive\n\n",
            b"\n" * 8192 + b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 64
            + b"\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * 8160 + b"\r\n\r\n"]


def _answers() -> list[bytes]:
    from tests.podresources.v1 import api_pb2 as pb

    small = pb.ListPodResourcesResponse(pod_resources=[
        pb.PodResources(name=f"trainer-{i}", namespace="ml", containers=[
            pb.ContainerResources(name="main", cpu_ids=[2, 3], devices=[pb.ContainerDevices(
                resource_name="nvidia.com/gpu", device_ids=[f"GPU-{i:08x}-aaaa-4bbb-8ccc-"
                                                            f"{i:012x}::{i % 4}"],
                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]))],
                memory=[pb.ContainerMemory(memory_type="memory", size=2**34)],
                dynamic_resources=[pb.DynamicResource(
                    claim_name="gpu", claim_namespace="ml", claim_resources=[pb.ClaimResource(
                        driver_name="gpu.nvidia.com", pool_name="node-1", device_name="gpu-0",
                        cdi_devices=[pb.CDIDevice(name="k8s.gpu.nvidia.com/claim=x")])])])])
        for i in range(3)]).SerializeToString()
    sys.path.insert(0, str(HERE))
    from podresources_answer import realistic

    return [small, realistic(110, random.Random(1))]


def _frames() -> list[bytes]:
    from hpack import Encoder

    def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + \
            stream.to_bytes(4, "big") + payload

    enc = Encoder()
    body = b"\x00" + (10).to_bytes(4, "big") + b"\x0a\x08\x0a\x02p0\x12\x02ns"
    ok = (frame(4, 0, 0, (3).to_bytes(2, "big") + (100).to_bytes(4, "big")) + frame(4, 1, 0)
          + frame(1, 4, 1, enc.encode([(":status", "200"), ("content-type", "application/grpc")]))
          + frame(0, 0, 1, body) + frame(6, 0, 0, b"12345678")
          + frame(1, 5, 1, enc.encode([("grpc-status", "0"), ("grpc-message", "")])))
    denied = frame(4, 0, 0) + frame(1, 5, 1, Encoder().encode(
        [(":status", "200"), ("grpc-status", "7"), ("grpc-message", "denied%20here")]))
    padded = frame(4, 0, 0) + frame(1, 0x4 | 0x8, 1, b"\x03" + Encoder().encode(
        [(":status", "200")]) + b"\x00" * 3) + frame(0, 0x8 | 0x1, 1, b"\x02" + body + b"\0\0")
    return [ok, denied, padded]


def _cgroups() -> list[bytes]:
    uid = "0a1b2c3d_1111_4222_8333_444455556666"
    cid = "ab" * 32
    return [f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
            f"cri-containerd-{cid}.scope\n".encode(),
            f"12:memory:/kubepods/besteffort/pod{uid.replace('_', '-')}/{cid}\n"
            f"11:cpu,cpuacct:/kubepods/besteffort/pod{uid.replace('_', '-')}/{cid}\n1:name="
            "systemd:/\n".encode(),
            f"0::/system.slice/containerd.service/kubepods-pod{uid}.slice:cri-containerd:"
            f"{cid}\n".encode(), b"0::/../../kubepods-pod" + b"a" * 3000 + b".slice\n",
            b"0::/user.slice/user-1000.slice/session-2.scope\n"]


def _stats() -> list[bytes]:
    return [b"4101 (python3) S 1 4101 4101 0 -1 4194560 " + b"0 " * 13 + b"1234567 " + b"0 " * 30,
            b"1 (a) b) c (d) R " + b"9 " * 40, b"python\n"]


TOKENS = [b"\r\n", b"\n", b"\x00", b"\xff", b"\x80", b":", b"/", b".slice", b"kubepods",
          b"pod", b"::", b"\x00\x00\x40\x00", b"\x08\x01", b"\x12\x00", b"\x0a\x7f", b"GET ",
          b" HTTP/1.1", b"q=0", b"gzip", b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", b"\x01\x05"]


def mutate(rng: random.Random, seeds: list[bytes], cap: int) -> bytes:
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(7)
        pos = rng.randint(0, len(data))
        if op == 0 and data:  # flip bits
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:  # insert a token, repeated
            data[pos:pos] = rng.choice(TOKENS) * rng.choice((1, 1, 2, 16, 512))
        elif op == 2 and data:  # delete a run
            del data[pos:pos + rng.randint(1, 64)]
        elif op == 3 and data:  # duplicate a chunk
            chunk = data[pos:pos + rng.randint(1, 256)]
            data[pos:pos] = chunk * rng.choice((1, 2, 8))
        elif op == 4:  # truncate
            del data[pos:]
        elif op == 5:  # random bytes
            data[pos:pos] = rng.randbytes(rng.randint(1, 32))
        elif op == 6 and data:  # splice another seed's tail
            other = rng.choice(seeds)
            data[pos:] = other[rng.randint(0, len(other)):]
    return bytes(data[:cap])


def worst_shapes(name: str) -> list[bytes]:
    """Hand-made inputs at each parser's bound: the shapes that cost most per byte."""
    if name == "http-head":
        return [b"\n" * 9000, b"\r" * 9000, b"GET / HTTP/1.1\r\n" + b"X: y\n" * 2000,
                b"GET / HTTP/1.1\r\nAccept-Encoding: " + b"gzip;q=1;" * 800 + b"\r\n\r\n",
                b"GET / HTTP/1.1\r\nAccept-Encoding: " + b"," * 8000 + b"\r\n\r\n"]
    if name == "podresources-message":
        def ld(n: int, b: bytes) -> bytes:
            from google.protobuf.internal.encoder import _VarintBytes
            return bytes([n << 3 | 2]) + _VarintBytes(len(b)) + b
        cap = 1 << 20
        return [ld(1, b"") * (cap // 2), ld(1, ld(3, ld(2, ld(2, b"") * (cap // 2 - 8)))),
                ld(1, ld(3, b"") * (cap // 2 - 8)), ld(1, (b"\x78\x01") * (cap // 2 - 8))]
    if name == "http2-frames":
        head = _frames()[0][:60]
        return [head + (b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678") * 15_000,
                head + (b"\x00\x00\x00\x04\x00\x00\x00\x00\x00") * 30_000,
                head + (b"\x00\x00\x01\x00\x00\x00\x00\x00\x01\x00") * 25_000]
    if name == "cgroup":
        return [b"0::/" + b"kubepods-pod" * 5000 + b"\n", b"0::/" + b"a/" * 30_000 + b"\n",
                b"1:a:/x\n" * 9000, b"0::/" + b"-pod" * 16_000]
    return [b"1 (" + b")" * 4000 + b" S" + b" 1" * 40, b"(" * 4096]


PARSERS: dict[str, tuple[Callable[[bytes], str], Callable[[], list[bytes]], int]] = {
    "http-head": (http_head, _heads, 9_000),
    "podresources-message": (podresources_message, _answers, 64 * 1024),
    "http2-frames": (http2_frames, _frames, 16 * 1024),
    "cgroup": (cgroup, _cgroups, 64 * 1024),
    "proc-stat": (proc_stat, _stats, 4096),
}


def fuzz(name: str, count: int, seed: int) -> dict[str, Any]:
    parse, seeds_of, cap = PARSERS[name]
    rng = random.Random(seed)
    seeds = seeds_of()
    crashes: list[dict[str, str]] = []
    sizes: list[int] = []
    costs: list[int] = []
    outcomes: list[str] = []
    inputs: dict[int, bytes] = {}  # kept only for inputs worth re-timing
    clock = time.perf_counter_ns
    worst = worst_shapes(name)
    started = time.monotonic()
    for i in range(count):
        if i < len(worst):
            data = worst[i]
        elif i % 10 == 0:
            data = rng.randbytes(rng.randint(0, 512))
        else:
            data = mutate(rng, seeds, cap)
        t = clock()
        try:
            outcome = parse(data)
        except Exception as err:  # a crash is what we look for
            outcome = "crash"
            if len(crashes) < 20:
                crashes.append({"error": f"{type(err).__name__}: {err}"[:300],
                                "input_hex": data[:200].hex()})
        costs.append(clock() - t)
        outcomes.append(outcome)
        sizes.append(len(data))
        if len(inputs) < 200_000:
            inputs[i] = data
    # the model, per outcome (read whole / refused / ...): a fixed cost per call plus the mean
    # cost per byte of the inputs with that outcome; re-time those above 10x its prediction,
    # the least of five counts
    model: dict[str, tuple[float, float]] = {}
    for label in set(outcomes):
        pairs = [(n, c) for n, c, o in zip(sizes, costs, outcomes, strict=True) if o == label]
        small = [c for n, c in pairs if n <= 64] or [min(c for _, c in pairs)]
        model[label] = (sum(small) / len(small),
                        sum(c for _, c in pairs) / max(sum(n for n, _ in pairs), 1))
    suspects = [i for i, (n, c, o) in enumerate(zip(sizes, costs, outcomes, strict=True))
                if c > 10 * (model[o][0] + model[o][1] * n)]
    violations = []
    retimed = 0
    worst_ratio = 0.0
    for i in suspects:
        data = inputs.get(i)
        if data is None:
            continue
        retimed += 1
        best = min(_timed(parse, data) for _ in range(5))
        fixed, per_byte = model[outcomes[i]]
        ratio = best / (fixed + per_byte * len(data))
        worst_ratio = max(worst_ratio, ratio)
        if ratio > 10:
            violations.append({"bytes": len(data), "ns": best, "ratio": round(ratio, 1),
                               "outcome": outcomes[i], "input_hex": data[:120].hex()})
    small_all = [c for n, c in zip(sizes, costs, strict=True) if n <= 64]
    fixed = sum(small_all) / max(len(small_all), 1)
    per_byte = sum(costs) / max(sum(sizes), 1)
    classes: dict[int, list[float]] = {}
    for n, c in zip(sizes, costs, strict=True):
        classes.setdefault(max(n, 1).bit_length(), []).append(c / max(n, 1))
    means = {k: sum(v) / len(v) for k, v in classes.items()}
    total_bytes = sum(sizes)
    return {
        "inputs": count, "seconds": round(time.monotonic() - started, 1),
        "bytes": total_bytes, "largest": max(sizes),
        "mean_ns_per_byte": round(sum(costs) / max(total_bytes, 1), 1),
        "mean_us_per_input": round(sum(costs) / count / 1000, 2),
        "max_ms_per_input": round(max(costs) / 1e6, 2),
        "fixed_ns": round(fixed), "ns_per_byte": round(per_byte, 1),
        "outcomes": {label: {"inputs": outcomes.count(label), "fixed_ns": round(a),
                             "ns_per_byte": round(b, 1)} for label, (a, b) in model.items()},
        "worst_retimed_ratio": round(worst_ratio, 1),
        "crashes": crashes, "suspects_over_10x_first_timing": len(suspects),
        "retimed": retimed, "violations": violations[:20], "violation_count": len(violations),
        "classes": {str(1 << (k - 1)): {"inputs": len(v), "mean_ns_per_byte": round(means[k], 1)}
                    for k, v in sorted(classes.items())},
    }


def _timed(parse: Callable[[bytes], str], data: bytes) -> int:
    t = time.perf_counter_ns()
    with contextlib.suppress(Exception):  # counted in the first pass
        parse(data)
    return time.perf_counter_ns() - t


def markdown(result: dict[str, Any], command: str) -> str:
    lines = ["# The agent's parsers, fuzzed (issue 26)", "",
             f"Command: `{command}`; Python {result['python']}; {result['machine']}; load "
             f"average at the end {result['load_average']}. Each parser gets the same number of "
             "inputs (mutations of valid ones, random bytes, hand-made worst shapes at its "
             "bound); a crash is any exception but the parser's own error. Cost: each input "
             "against `a + b x bytes` of the inputs with the same outcome (read whole, refused; "
             "a: their mean cost at most 64 bytes, b: their ns per byte), re-timed five times "
             "(least) when over 10x; the worst ratio after re-timing is shown. The columns a "
             "and b are the whole run's.", "",
             "| parser | inputs | crashes | largest input | a: fixed us | b: ns/byte | "
             "max ms/input | over 10x at first timing | worst ratio re-timed | violations | "
             "seconds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["parsers"].items():
        lines.append(f"| {name} | {r['inputs']:,} | {len(r['crashes'])} | {r['largest']:,} | "
                     f"{r['fixed_ns'] / 1000:.1f} | {r['ns_per_byte']} | "
                     f"{r['max_ms_per_input']} | {r['suspects_over_10x_first_timing']} | "
                     f"{r['worst_retimed_ratio']} | {r['violation_count']} | {r['seconds']} |")
    lines += ["", "Outcomes: " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v['inputs']:,} ({v['ns_per_byte']} ns/byte)"
                                for k, v in r["outcomes"].items())
        for name, r in result["parsers"].items())]
    for name, r in result["parsers"].items():
        for c in r["crashes"][:5]:
            lines.append(f"\n{name} crash: `{c['error']}` on `{c['input_hex'][:80]}`")
        for v in r["violations"][:5]:
            lines.append(f"\n{name} over 10x: {v}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--only", choices=sorted(PARSERS))
    ap.add_argument("--out", default=str(RESULTS / "fuzz_agent_parsers"))
    a = ap.parse_args()
    result: dict[str, Any] = {"python": platform.python_version(),
                              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                              "count": a.count, "seed": a.seed, "parsers": {}}
    for name in [a.only] if a.only else PARSERS:
        result["parsers"][name] = fuzz(name, a.count, a.seed)
        r = result["parsers"][name]
        print(name, {k: r[k] for k in ("inputs", "seconds", "mean_us_per_input",
                                        "max_ms_per_input", "violation_count")},
              "crashes", len(r["crashes"]), flush=True)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    command = "python bench/fuzz_agent_parsers.py" + "".join(f" {x}" for x in sys.argv[1:])
    Path(a.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))
    return 1 if any(r["crashes"] or r["violation_count"]
                    for r in result["parsers"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
