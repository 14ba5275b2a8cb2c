"""How large a kubelet's pod-resources ``List`` answer really is, and what reading one costs:
the figures behind the client's size cap (``client.MAX_MESSAGE``) and its work budget
(``messages.MAX_ITEMS``), and behind protobuf over the hand-written decoder (issues 25, 26).

1. **sizes**: answers built with the kubelet's own messages (``tests/podresources/v1``, the
   real v1 proto) for a 110-pod node (the kubelet's default maxPods) and a 250-pod node: every
   pod with 1-3 containers (names as long as Deployments make them), 8 pods with a GPU each
   (device IDs, NUMA topology), 30% Guaranteed with exclusive CPUs and memory blocks (the
   static CPU and memory managers), 4 pods with a DRA claim (driver, pool, device, CDI id);
   and a *generous* 250-pod node: every pod Guaranteed with 3-4 containers, 64 GPU pods, 64
   DRA pods;
2. **reading**: each answer read by this tree (protobuf's upb parser + the walk into plain
   values) and by the hand-written decoder of a base commit (``wire.py``, taken from git),
   median of 20, in one process;
3. **hostile answers at the cap** (1 MiB): the smallest items the message allows, ~500,000 of
   them, in fresh processes: time and peak RSS for both readers.

    .venv/bin/python bench/podresources_answer.py     # writes bench/results/podresources_answer.*
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "bench" / "results"
BASE = "385fa18"  # the hand-written decoder's last commit
CAP = 1 << 20


def realistic(pods: int, rng: random.Random, *, gpu_pods: int = 8, guaranteed: float = 0.3,
              dra_pods: int = 4, containers: tuple[int, int] = (1, 3)) -> bytes:
    """A ListPodResourcesResponse as a kubelet of such a node sends it."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.podresources.v1 import api_pb2 as pb

    out = pb.ListPodResourcesResponse()
    cpu = 0
    for i in range(pods):
        p = out.pod_resources.add(name=f"inference-server-{i:04d}-7d9f8c6b5-x2k4q",
                                  namespace=f"team-{i % 17:02d}-payments-production")
        for c in range(rng.randint(*containers)):
            cr = p.containers.add(name=f"container-sidecar-{c}")
            if i < gpu_pods and c == 0:
                d = cr.devices.add(resource_name="nvidia.com/gpu",
                                   device_ids=[f"GPU-{i:08x}-1d2e-4f3a-8b9c-{i:012x}"])
                d.topology.nodes.add(ID=i % 2)
            if rng.random() < guaranteed:
                n = rng.choice([2, 4, 8, 16])
                cr.cpu_ids.extend(range(cpu, cpu + n))
                cpu = (cpu + n) % 192
                for kind in ("memory", "hugepages-1Gi"):
                    m = cr.memory.add(memory_type=kind, size=rng.randint(1, 64) << 30)
                    m.topology.nodes.add(ID=rng.randint(0, 1))
            if gpu_pods <= i < gpu_pods + dra_pods and c == 0:
                dr = cr.dynamic_resources.add(claim_name=f"gpu-claim-{i}-abcde",
                                              claim_namespace=p.namespace)
                cl = dr.claim_resources.add(driver_name="gpu.nvidia.com",
                                            pool_name="node-gpu-worker-0042",
                                            device_name=f"gpu-{i}")
                cl.cdi_devices.add(name=f"k8s.gpu.nvidia.com/claim=0a1b2c3d-4e5f-6a7b-8c9d-"
                                        f"{i:012x}-gpu-{i}")
    return bytes(out.SerializeToString())


def _ld(field: int, payload: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return bytes([field << 3 | 2]) + _VarintBytes(len(payload)) + payload


def hostile() -> dict[str, bytes]:
    return {
        "524,288 empty pods": _ld(1, b"") * (CAP // 2),
        "one device with 524,284 empty IDs": _ld(1, _ld(3, _ld(2, _ld(2, b"") * (CAP // 2 - 8)))),
        "one pod with 524,283 empty containers": _ld(1, _ld(3, b"") * (CAP // 2 - 8)),
        "524,284 unknown varint fields": _ld(1, b"\x78\x01" * (CAP // 2 - 8)),
    }


def old_decoder(tmp: Path) -> Any:
    source = subprocess.run(["git", "-C", str(REPO), "show",
                             f"{BASE}:node_agent/podresources/wire.py"],
                            capture_output=True, text=True, check=True).stdout
    path = tmp / "old_wire.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_wire", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_wire"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def median_ms(fn: Any, data: bytes, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn(data)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1e3, 3)


_ONE = r"""
import importlib.util, json, resource, sys, time
sys.path[:0] = [sys.argv[3], sys.argv[3] + '/operator']
data = open(sys.argv[2], 'rb').read()
if sys.argv[1] == 'old':
    spec = importlib.util.spec_from_file_location('old_wire', sys.argv[4])
    m = importlib.util.module_from_spec(spec); sys.modules['old_wire'] = m
    spec.loader.exec_module(m)
    read, error = m.list_response, m.WireError
else:
    from node_agent.podresources import messages
    read, error = messages.list_response, messages.WireError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    n = len(read(data)); outcome = f'read {n} pods'
except error as err:
    outcome = f'refused: {str(err)[:60]}'
ms = (time.perf_counter() - t) * 1e3
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({'ms': round(ms, 1), 'peak_rss_mib': round(peak / 1024, 1),
                  'rss_added_mib': round((peak - before) / 1024, 1), 'outcome': outcome}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "podresources_answer"))
    a = ap.parse_args()
    sys.path[:0] = [str(REPO), str(REPO / "operator")]
    from node_agent.podresources import client, messages

    rng = random.Random(1)
    answers = {"110 pods": realistic(110, rng), "250 pods": realistic(250, rng),
               "250 pods, generous": realistic(250, rng, guaranteed=1.0, containers=(3, 4),
                                               gpu_pods=64, dra_pods=64)}
    result: dict[str, Any] = {"python": platform.python_version(), "base": BASE,
                              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                              "cap_bytes": client.MAX_MESSAGE, "max_items": messages.MAX_ITEMS,
                              "answers": {}, "hostile": {}}
    with tempfile.TemporaryDirectory(prefix="podresources-") as tmp:
        old = old_decoder(Path(tmp))
        for name, data in answers.items():
            pods = messages.list_response(data)
            items = sum(1 + len(p.devices) + len(p.claims) + sum(len(d.device_ids)
                                                                   for d in p.devices)
                        for p in pods)
            result["answers"][name] = {
                "bytes": len(data), "pods": len(pods), "items_at_least": items,
                "protobuf_ms": median_ms(messages.list_response, data),
                "hand_written_ms": median_ms(old.list_response, data),
                "same_values": [(p.namespace, p.name, len(p.devices), len(p.claims))
                                for p in pods] == [(p.namespace, p.name, len(p.devices),
                                                    len(p.claims))
                                                   for p in old.list_response(data)],
            }
            print(name, result["answers"][name], flush=True)
        old_path = Path(tmp) / "old_wire.py"
        for name, data in hostile().items():
            path = Path(tmp) / "answer.bin"
            path.write_bytes(data)
            row = {"bytes": len(data)}
            for reader in ("protobuf", "old"):
                done = subprocess.run([sys.executable, "-c", _ONE, reader, str(path), str(REPO),
                                       str(old_path)], capture_output=True, text=True,
                                      timeout=300)
                row[reader] = json.loads(done.stdout) if done.returncode == 0 \
                    else {"error": done.stderr[-300:]}
            result["hostile"][name] = row
            print(name, row, flush=True)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    Path(a.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# The kubelet's pod-resources answer: its size, and what reading it costs", "",
        f"Command: `python bench/podresources_answer.py`; Python {r['python']}; {r['machine']}; "
        f"load average at the end {r['load_average']}. Answers built with the kubelet's v1 "
        "messages (see the script's docstring for the node each stands for); *protobuf*: this "
        "tree (upb's parser and the walk into plain values); *hand-written*: the decoder of "
        f"`{r['base']}` (`node_agent/podresources/wire.py`), in the same process, median of 20.",
        "",
        "| answer | bytes | pods | protobuf ms | hand-written ms | same values |",
        "|---|---|---|---|---|---|",
    ]
    for name, a in r["answers"].items():
        lines.append(f"| {name} | {a['bytes']:,} | {a['pods']} | {a['protobuf_ms']} | "
                     f"{a['hand_written_ms']} | {a['same_values']} |")
    generous = r["answers"]["250 pods, generous"]["bytes"]
    lines += ["", f"The cap: {r['cap_bytes']:,} bytes, {r['cap_bytes'] / generous:.1f}x the "
              f"generous 250-pod answer; the work budget: {r['max_items']:,} pods, containers, "
              "devices, IDs and claims together.", "",
              "## Hostile answers at the cap (a fresh process each)", "",
              "| answer | bytes | protobuf: ms, peak RSS MiB, outcome | hand-written: ms, peak "
              "RSS MiB, outcome |", "|---|---|---|---|"]
    for name, h in r["hostile"].items():
        cells = []
        for reader in ("protobuf", "old"):
            x = h[reader]
            cells.append(f"{x['ms']} ms, {x['peak_rss_mib']} MiB, {x['outcome']}"
                         if "ms" in x else x.get("error", "?"))
        lines.append(f"| {name} | {h['bytes']:,} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
