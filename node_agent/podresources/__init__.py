"""Client for the kubelet pod-resources v1 gRPC API (which pod was allocated which device, by a
device plugin or through DRA ResourceClaims), on the standard library: ``h2grpc`` (one unary
gRPC call over HTTP/2 on the unix socket), ``hpack`` (its header compression), ``wire`` (the
messages, decoded from the protobuf wire format), ``client`` (``List``,
``GetAllocatableResources``). The proto and the grpcio stubs the tests serve it from:
``tests/podresources/``.
"""
