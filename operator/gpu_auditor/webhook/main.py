"""`gpu-auditor-webhook`: the admission webhook server (docs/webhook.md).

It needs no Kubernetes credentials: the API server calls it, it calls nothing.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

try:
    import prometheus_client  # noqa: F401
except ImportError as missing:  # the light install: the CLI and the core only
    raise SystemExit(f"gpu-auditor-webhook needs the operator extra ({missing.name} is not "
                     "installed): pip install 'gpu-auditor[operator]'") from None

import contextlib

from gpu_auditor.base.contract import DEFAULT_ANNOTATION_PREFIX
from gpu_auditor.base.errors import ConfigError
from gpu_auditor.base.names import is_subdomain

from .applying import Applier
from .server import Settings, WebhookServer
from .tls import Certificate

log = logging.getLogger("gpu_auditor.webhook")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
SWITCH_INTERVAL = 0.001


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu-auditor-webhook",
        description="Admission webhooks: warn about invalid PYTORCH_CUDA_ALLOC_CONF settings, "
                    "inject the OOM probe into opted-in pods.",
    )
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8443, help="HTTPS port (default %(default)s)")
    parser.add_argument("--cert-file", help="serving certificate (PEM); reloaded when it changes")
    parser.add_argument("--key-file", help="its private key (PEM)")
    parser.add_argument("--insecure-http", action="store_true",
                        help="serve plain HTTP (tests and benchmarks only: the API server "
                             "calls webhooks over HTTPS)")
    parser.add_argument("--metrics-port", type=int, default=9403, help="0 disables /metrics")
    parser.add_argument("--metrics-bind-address", default="0.0.0.0")
    parser.add_argument("--probe-image", help="image holding /opt/gpu-auditor/probe; without "
                        "it, the inject webhooks change nothing")
    parser.add_argument("--probe-image-pull-policy", choices=PULL_POLICIES)
    parser.add_argument("--apply-recommendations", action="store_true",
                        help="put owners' recommended allocator settings into their next pods "
                             "(the /apply paths; reads the pods' owners with the service "
                             "account's credentials, or --kubeconfig)")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig for the owner reads of --apply-recommendations "
                             "(default $KUBECONFIG, else the service account)")
    parser.add_argument("--annotation-prefix", default=DEFAULT_ANNOTATION_PREFIX,
                        help="the operator's annotation prefix (default %(default)s)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    for flag in ("bind_address", "metrics_bind_address"):
        try:
            ipaddress.ip_address(getattr(args, flag))
        except ValueError:
            parser.error(f"--{flag.replace('_', '-')} must be an IP address")
    if not args.insecure_http and not (args.cert_file and args.key_file):
        parser.error("--cert-file and --key-file are required (or --insecure-http)")
    if not 0 < args.port < 65536 or not 0 <= args.metrics_port < 65536:
        parser.error("--port must be in 1..65535 and --metrics-port in 0..65535")
    if args.probe_image is not None and not 0 < len(args.probe_image) <= 512:
        parser.error("--probe-image must be an image reference")
    prefix = args.annotation_prefix
    if not prefix.endswith("/") or not is_subdomain(prefix[:-1]) or len(prefix) > 64:
        parser.error("--annotation-prefix must look like 'example.com/' (at most 64 "
                     "characters)")
    return args


def build(args: argparse.Namespace) -> WebhookServer:
    certificate = None if args.insecure_http else Certificate(args.cert_file, args.key_file)
    applier = None
    if args.apply_recommendations:  # the API client is imported only then (docs/webhook.md)
        from .ownerreads import owner_reader

        applier = Applier(owner_reader(args.kubeconfig), args.annotation_prefix)
    settings = Settings(args.probe_image, args.probe_image_pull_policy, applier)
    metrics = (args.metrics_bind_address, args.metrics_port) if args.metrics_port else None
    return WebhookServer((args.bind_address, args.port), certificate, settings,
                         metrics_address=metrics)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = build(args)
    except (OSError, ValueError, ConfigError) as exc:  # a bad key pair, a port in use, no
        # credentials for --apply-recommendations
        print(f"gpu-auditor-webhook: cannot start: {exc}", file=sys.stderr)
        return 2
    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    # The event loop's thread waits for the GIL while a worker answers: 5 ms at a time by
    # default, several times per request (accept, handshake, read, write). 1 ms keeps a cheap
    # admission from waiting that long at each step beside an expensive one.
    sys.setswitchinterval(SWITCH_INTERVAL)
    log.info("serving admission webhooks on %s:%d", args.bind_address, server.server_port)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
