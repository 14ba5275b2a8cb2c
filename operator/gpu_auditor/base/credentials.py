"""The credential a request carries now: a fixed token or certificate, a token file that rotates,
or what an `exec` credential plugin prints.

- A token file (a pod's projected service account token, a kubeconfig's `tokenFile`) is re-read
  every `token_refresh` seconds and at once after a 401.
- An exec plugin (`client.authentication.k8s.io/v1` or `v1beta1`) is run as kubectl runs it
  (client-go's plugin/pkg/client/auth/exec): its command found on OUR `PATH` (the kubeconfig's
  `env` is the plugin's environment, it never chooses the binary), and never in the current
  directory (`.` or an empty or relative entry of `PATH`: Go's `exec.ErrDot`); the kubeconfig's
  `env` added to ours, `KUBERNETES_EXEC_INFO` holding the ExecCredential request
  (`spec.interactive`, and `spec.cluster` with `provideClusterInfo`), standard input passed on
  only when the plugin may be interactive and there is a terminal, its standard error passed
  through. Its output is read up to `EXEC_OUTPUT_LIMIT` and the plugin killed past it (300 MB
  of output cost 598 MB before). Its answer (a token, or a client certificate and key) is kept
  until `EXPIRY_MARGIN` seconds before its `expirationTimestamp` (without one: until a 401),
  then the plugin is run again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_auditor.base.errors import APICredentialsError, ConfigError
from gpu_auditor.base.kubeconfig import ClusterConfig, ExecConfig

log = logging.getLogger(__name__)

EXEC_TIMEOUT = 120.0
"""Seconds an exec plugin may run (a cloud CLI fetching a token; kubectl waits forever)."""
EXEC_OUTPUT_LIMIT = 1 << 20
"""Bytes of a plugin's output read at most (an ExecCredential with a certificate and its key is
some 5 KB)."""
EXPIRY_MARGIN = 10.0
"""Seconds before its expiry that an exec credential is fetched again (requests in flight)."""


@dataclass(frozen=True)
class Credential:
    """What a request authenticates with besides the kubeconfig's own client certificate."""

    token: str | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    expires_at: dt.datetime | None = None
    """When an exec credential expires (UTC); None: until the server says 401."""


Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]
"""subprocess.run's shape (tests hand in a fake); `run_bounded` by default."""


def run_bounded(argv: list[str], *, env: Mapping[str, str], stdin: Any, timeout: float,
                limit: int = EXEC_OUTPUT_LIMIT, **_: Any) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run for a plugin: its standard output read as it comes, at most ``limit`` + 1
    bytes kept (the plugin is killed once it passes ``limit``: the caller refuses such an
    answer), the whole run within ``timeout`` (subprocess.TimeoutExpired past it), standard
    error passed through."""
    deadline = time.monotonic() + timeout
    process = subprocess.Popen(argv, env=dict(env), stdin=stdin, stdout=subprocess.PIPE)
    assert process.stdout is not None
    chunks: list[bytes] = []
    size = 0
    with process, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while size <= limit:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                process.kill()
                raise subprocess.TimeoutExpired(argv, timeout)
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk[: limit + 1 - size])
            size += len(chunk)
        if size > limit:
            process.kill()
        try:
            code = process.wait(max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(argv, code, b"".join(chunks), None)


def find_command(command: str, environ: Mapping[str, str]) -> str:
    """The plugin's binary as Go's exec.Command finds it: a command with a slash as it is (a
    relative one was made relative to its kubeconfig), else the first match on ``environ``'s
    PATH (the caller's, not the kubeconfig's `env`); a match through `.`, an empty entry or
    any relative entry is refused (exec.ErrDot), as kubectl refuses it. FileNotFoundError when
    there is none."""
    if os.sep in command or (os.altsep and os.altsep in command):
        return command
    for entry in environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(entry or ".", command)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if not os.path.isabs(candidate):
            raise APICredentialsError(
                f"exec plugin {command}: found as {candidate}, in the current directory "
                "through PATH; not run (kubectl refuses it too): give its absolute path")
        return candidate
    raise FileNotFoundError(command)


class Credentials:
    """Thread-safe; `current()` for each request, `refresh()` after a 401."""

    def __init__(self, cfg: ClusterConfig, *, token_refresh: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 run: Runner = run_bounded, stdin_is_terminal: Callable[[], bool] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.config = cfg
        self._token_refresh = token_refresh
        self._clock = clock
        self._now = now
        self._run = run
        self._tty = stdin_is_terminal or (lambda: sys.stdin is not None and sys.stdin.isatty())
        self._environ = environ
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._current = Credential(token=cfg.token)
        self.exec_runs = 0
        # The first fetch happens now, so a config that cannot authenticate fails at start.
        if cfg.token_file is not None:
            try:
                self._current = Credential(token=self._read_token())
            except OSError as err:
                raise ConfigError(f"cannot read token file {cfg.token_file}: {err}") from err
            self._read_at = clock()
        elif cfg.exec is not None:
            try:
                self._current = self._exec(cfg.exec)
            except APICredentialsError as err:
                raise ConfigError(str(err)) from err

    @property
    def rotating(self) -> bool:
        """Whether fetching again may help after a 401."""
        return self.config.token_file is not None or self.config.exec is not None

    def current(self) -> Credential:
        with self._lock:
            if self.config.exec is not None:
                if self._expired():
                    self._current = self._exec(self.config.exec)
            elif self.config.token_file is not None and self._stale():
                self._reread()
            return self._current

    def _expired(self) -> bool:
        expires = self._current.expires_at
        margin = dt.timedelta(seconds=EXPIRY_MARGIN)
        return expires is not None and self._now() >= expires - margin

    def _stale(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self._token_refresh

    def refresh(self) -> Credential:
        """Fetch again now (the server said 401): re-read the token file, re-run the plugin."""
        with self._lock:
            if self.config.exec is not None:
                self._current = self._exec(self.config.exec)
            elif self.config.token_file is not None:
                self._reread()
            return self._current

    # -- token files --

    def _read_token(self) -> str:
        assert self.config.token_file is not None
        return self.config.token_file.read_text().strip()

    def _reread(self) -> None:
        try:
            self._current = Credential(token=self._read_token())
        except OSError as err:  # keep the last one; the server will say if it expired
            log.warning("cannot re-read token file %s: %s", self.config.token_file, err)
        self._read_at = self._clock()

    # -- exec plugins --

    def _exec(self, plugin: ExecConfig) -> Credential:
        interactive = plugin.interactive_mode != "Never" and self._tty()
        if plugin.interactive_mode == "Always" and not interactive:
            raise APICredentialsError(f"exec plugin {plugin.command}: interactiveMode Always "
                                      "needs a terminal on standard input")
        spec: dict[str, Any] = {"interactive": interactive}
        if plugin.cluster is not None:
            spec["cluster"] = dict(plugin.cluster)
        ours = os.environ if self._environ is None else self._environ
        env = dict(ours)
        env.update(plugin.env)
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec})
        self.exec_runs += 1
        try:
            command = find_command(plugin.command, ours)  # our PATH, not the plugin's env
            done = self._run([command, *plugin.args], env=env,
                             stdin=None if interactive else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, timeout=EXEC_TIMEOUT, check=False,
                             limit=EXEC_OUTPUT_LIMIT)
        except FileNotFoundError as err:
            hint = f" ({plugin.install_hint.strip()})" if plugin.install_hint else ""
            raise APICredentialsError(f"exec plugin {plugin.command} not found{hint}") from err
        except (OSError, subprocess.SubprocessError) as err:
            raise APICredentialsError(f"exec plugin {plugin.command}: {err}") from err
        if len(done.stdout or b"") > EXEC_OUTPUT_LIMIT:  # stopped there (killed)
            raise APICredentialsError(f"exec plugin {plugin.command}: more than "
                                      f"{EXEC_OUTPUT_LIMIT} bytes of output")
        if done.returncode != 0:
            raise APICredentialsError(f"exec plugin {plugin.command} exited with status "
                                      f"{done.returncode}")
        return parse_exec_credential(done.stdout, plugin)


def parse_exec_credential(output: bytes, plugin: ExecConfig) -> Credential:
    """The credential in an exec plugin's standard output; raises APICredentialsError."""
    what = f"exec plugin {plugin.command}"
    if len(output) > EXEC_OUTPUT_LIMIT:
        raise APICredentialsError(f"{what}: more than {EXEC_OUTPUT_LIMIT} bytes of output")
    try:
        body = json.loads(output)
    except ValueError as err:
        raise APICredentialsError(f"{what}: its output is not JSON") from err
    if not isinstance(body, dict) or body.get("kind") != "ExecCredential":
        raise APICredentialsError(f"{what}: its output is not an ExecCredential")
    if body.get("apiVersion") != plugin.api_version:
        raise APICredentialsError(f"{what}: answered {body.get('apiVersion')!r}, the kubeconfig "
                                  f"asks for {plugin.api_version!r}")
    status = body.get("status")
    if not isinstance(status, dict):
        raise APICredentialsError(f"{what}: no status in its ExecCredential")
    token, cert, key = (status.get("token"), status.get("clientCertificateData"),
                        status.get("clientKeyData"))
    if any(v is not None and not isinstance(v, str) for v in (token, cert, key)):
        raise APICredentialsError(f"{what}: token and certificate data must be strings")
    if bool(cert) != bool(key):
        raise APICredentialsError(f"{what}: a client certificate needs its key and the other "
                                  "way round")
    if not token and not cert:
        raise APICredentialsError(f"{what}: neither a token nor a client certificate")
    expires = status.get("expirationTimestamp")
    return Credential(
        token=token or None,
        cert_pem=cert.encode() if cert else None,
        key_pem=key.encode() if key else None,
        expires_at=_timestamp(expires, what) if expires else None,
    )


def _timestamp(value: object, what: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as err:
        raise APICredentialsError(f"{what}: expirationTimestamp {value!r} is not RFC 3339"
                                  ) from err
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
