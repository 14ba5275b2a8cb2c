"""Client for the kubelet pod-resources v1 gRPC API (which pod was allocated which device, by a
device plugin or through DRA ResourceClaims): ``unary`` (one unary gRPC call over HTTP/2 on the
unix socket, with ``h2``), ``messages`` (the answers, parsed by ``protobuf`` from the proto's
descriptor in ``api_descriptor``), ``client`` (``List``, ``GetAllocatableResources``). The
proto and the grpcio stubs the tests serve it from: ``tests/podresources/``.
"""

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
