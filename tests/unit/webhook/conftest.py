"""Fixtures of the webhook's tests (webhook_helpers.py): a certificate and the running server."""

from __future__ import annotations

from .webhook_helpers import running, tls

__all__ = ["running", "tls"]  # fixtures
