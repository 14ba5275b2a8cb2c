"""The webhook's own decision (`gpu_auditor.webhook.server.answer`) served by aiohttp.web, the
HTTP server the operator extra already installs (kopf's): the baseline bench/hostile_webhook.py
puts beside our bounded server (`--aiohttp`). Configured as a careful user would: bodies up to
3 MiB (`client_max_size`), the answer in a thread (the loop keeps serving), TLS from the same
files, the certificate of the process's start.

    python bench/webhook_aiohttp.py --port 8443 --cert-file tls.crt --key-file tls.key
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "operator")]

from aiohttp import web  # noqa: E402

from gpu_auditor.webhook.limits import MAX_BODY  # noqa: E402
from gpu_auditor.webhook.server import Settings, answer  # noqa: E402


def app() -> web.Application:
    settings = Settings()

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        reply = await asyncio.get_running_loop().run_in_executor(
            None, answer, request.path, body, settings)
        return web.Response(status=reply.status, body=reply.body,
                            content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    application = web.Application(client_max_size=MAX_BODY)
    application.router.add_post("/{tail:.*}", handle)
    application.router.add_get("/healthz", healthz)
    return application


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind-address", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-file", required=True)
    parser.add_argument("--key-file", required=True)
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert_file, args.key_file)
    web.run_app(app(), host=args.bind_address, port=args.port, ssl_context=context,
                print=None, access_log=None)


if __name__ == "__main__":
    main()
