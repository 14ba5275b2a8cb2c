"""Client for the kubelet pod-resources v1 gRPC API (which pod was allocated which device).

``v1/`` holds the modules generated from ``v1/api.proto`` (see ``generate.py``).
"""
