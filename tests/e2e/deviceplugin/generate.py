"""Regenerate the device-plugin v1beta1 Python modules from ``v1beta1/api.proto`` (needs
grpcio-tools, a dev dependency): ``python tests/e2e/deviceplugin/generate.py``. As for
node_agent/podresources, tests/e2e is the include path, so the generated ``api_pb2_grpc``
imports ``deviceplugin.v1beta1.api_pb2`` by its package path.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    from grpc_tools import protoc

    include = Path(__file__).resolve().parents[1]
    proto = include / "deviceplugin" / "v1beta1" / "api.proto"
    return int(protoc.main(["grpc_tools.protoc", f"-I{include}", f"--python_out={include}",
                            f"--grpc_python_out={include}", str(proto)]))


if __name__ == "__main__":
    sys.exit(main())
