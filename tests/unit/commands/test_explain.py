"""`gpu-auditor explain POD` end to end against a stand-in API server on loopback: what it
prints, and its exit status when an annotation or the API's answer is not of its shape
(issue 26, item 8)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpu_auditor.cli import main

from .explain_helpers import PREFIX, failed_pod, operator_annotations

pytestmark = pytest.mark.unit

Answer = Callable[[str], tuple[int, bytes]]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Answer]]]:
    """A plain-HTTP API server on loopback answering GETs from ``routes`` (path prefix ->
    answer), and a kubeconfig for it."""
    routes: dict[str, Answer] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            for prefix, answer in routes.items():
                if self.path.startswith(prefix):
                    status, body = answer(self.path)
                    break
            else:
                status, body = 404, b'{"kind": "Status", "message": "not found"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    yield config, routes
    server.shutdown()
    server.server_close()


def explain(config: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["explain", "--kubeconfig", str(config), "-n", "ml", "finetune-7b-abc12", *argv],
                stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


POD_PATH = "/api/v1/namespaces/ml/pods/finetune-7b-abc12"


def serve_pod(routes: dict[str, Answer], annotations: dict[str, str]) -> None:
    body = json.dumps(failed_pod(annotations)).encode()
    routes[POD_PATH] = lambda _: (200, body)


def test_a_diagnosed_pod_is_explained_exit_0_and_1_with_exit_code(
    api: tuple[Path, dict[str, Answer]]
) -> None:
    config, routes = api
    serve_pod(routes, operator_annotations("fragmentation.log"))
    code, out, err = explain(config)
    assert code == 0 and "Diagnosis: fragmentation" in out, err
    assert explain(config, "--exit-code")[0] == 1


@pytest.mark.parametrize("field", ["actions", "evidence"])
def test_a_malformed_annotation_exits_2_after_printing_what_it_can(
    api: tuple[Path, dict[str, Answer]], field: str
) -> None:
    """A pod's own annotation nested 100,000 deep raised RecursionError: a traceback and exit
    1, which `--exit-code` users read as "diagnosed"."""
    config, routes = api
    notes = operator_annotations("fragmentation.log")
    notes[f"{PREFIX}{field}"] = "[" * 100_000 + "]" * 100_000
    serve_pod(routes, notes)
    for argv in ((), ("--exit-code",), ("--json",)):
        code, out, err = explain(config, *argv)
        assert code == 2, err
        assert "fragmentation" in out  # the rest is printed
        assert f"the {field} annotation is nested too deeply to read (printed without it)" in err
        assert "Traceback" not in err


def test_an_api_answer_nested_too_deeply_is_one_line_and_exit_2(
    api: tuple[Path, dict[str, Answer]]
) -> None:
    config, routes = api
    routes[POD_PATH] = lambda _: (200, b"[" * 100_000 + b"]" * 100_000)
    code, out, err = explain(config)
    assert code == 2 and out == ""
    assert err.strip().endswith("the response is nested too deeply to read"), err


def test_a_deep_answer_for_the_events_is_a_note_not_a_failure(
    api: tuple[Path, dict[str, Answer]]
) -> None:
    config, routes = api
    serve_pod(routes, operator_annotations("fragmentation.log"))
    routes["/api/v1/namespaces/ml/events"] = lambda _: (200, b"[" * 100_000 + b"]" * 100_000)
    code, out, err = explain(config)
    assert code == 0, err
    assert "Events: GET" in out and "nested too deeply" in out
