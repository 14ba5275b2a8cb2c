"""A child process of the local control plane: started with its log in a file, stopped cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PROXY_VARIABLES = (
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)


class ClusterError(RuntimeError):
    """The local control plane could not be built, started or reached."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_environment() -> dict[str, str]:
    """The environment for children: no proxies, since everything talks over loopback."""
    return {k: v for k, v in os.environ.items() if k not in _PROXY_VARIABLES}


@dataclass
class Component:
    """One binary of the control plane with its arguments and log file."""

    name: str
    argv: Sequence[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_environment(),
                start_new_session=True,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `ready` until it holds; fail with the log tail if the process dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise ClusterError(
                    f"{self.name} exited (code {self.proc.returncode if self.proc else '?'}) "
                    f"before {what}; log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise ClusterError(
            f"{self.name} not {what} after {timeout:.0f}s; log {self.log_path}:\n{self.log_tail()}"
        )
