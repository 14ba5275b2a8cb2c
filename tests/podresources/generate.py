"""Regenerate the kubelet pod-resources v1 Python modules from ``v1/api.proto`` (needs
grpcio-tools, a dev dependency): ``python tests/podresources/generate.py``.

Only the tests use them: a real grpcio server answering as the kubelet does, which the agent's
own client (``node_agent.podresources``: HTTP/2 and the protobuf wire format on the standard
library) must understand. The repository root is the include path, so the generated
``api_pb2_grpc`` imports ``tests.podresources.v1.api_pb2`` by its package path.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    from grpc_tools import protoc  # dev-only dependency

    root = Path(__file__).resolve().parents[2]
    proto = root / "tests" / "podresources" / "v1" / "api.proto"
    return int(protoc.main(["grpc_tools.protoc", f"-I{root}", f"--python_out={root}",
                            f"--grpc_python_out={root}", str(proto)]))


if __name__ == "__main__":
    sys.exit(main())
