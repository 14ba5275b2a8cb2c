"""The serving certificate, reloaded when its files change (a rotated Secret is updated in the
mounted volume in place; no restart). A reload that fails keeps the previous certificate and
says so once per change."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

log = logging.getLogger("gpu_auditor.webhook")

CHECK_EVERY = 5.0
"""Seconds between two looks at the files' change times (kubelet syncs Secrets in ~1 minute)."""


class Certificate:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self._cert, self._key = cert_file, key_file
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = self._load()  # a bad pair at start is a startup error (raises)
        self._checked = time.monotonic()

    def context(self) -> ssl.SSLContext:
        """The current context; looks at the files at most every CHECK_EVERY seconds."""
        now = time.monotonic()
        if now - self._checked >= CHECK_EVERY:
            with self._lock:
                if now - self._checked >= CHECK_EVERY:
                    self._checked = now
                    self._reload_if_changed()
        return self._context

    def _files_stamp(self) -> tuple[float, float]:
        try:
            return os.stat(self._cert).st_mtime, os.stat(self._key).st_mtime
        except OSError:
            return (0.0, 0.0)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._cert, self._key)
        return context

    def _reload_if_changed(self) -> None:
        stamp = self._files_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._context = self._load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("serving certificate changed but cannot be loaded (%s); keeping the "
                        "previous one", exc)
            return
        log.info("serving certificate reloaded from %s", self._cert)
