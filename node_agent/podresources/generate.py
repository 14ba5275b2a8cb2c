"""Regenerate the kubelet pod-resources v1 Python modules from ``v1/api.proto``.

Run from the repository root: ``python -m node_agent.podresources.generate`` (needs
grpcio-tools, a dev dependency). The proto is compiled with the repository root as its include
path so the generated ``api_pb2_grpc`` imports ``node_agent.podresources.v1.api_pb2`` by its
package path. The generated code pins the minimum grpcio / protobuf runtime of the grpcio-tools
that made it: keep ``pyproject.toml`` in step when regenerating.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = Path("node_agent/podresources/v1/api.proto")


def main() -> int:
    from grpc_tools import protoc  # dev-only dependency

    root = Path(__file__).resolve().parents[2]
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"--python_out={root}",
        f"--grpc_python_out={root}",
        str(root / PROTO),
    ]
    return int(protoc.main(args))


if __name__ == "__main__":
    sys.exit(main())
