"""Kubernetes names: what the API server accepts as a label or a subdomain, and path segments
escaped whole."""

from __future__ import annotations

import pytest

from gpu_auditor.base import names

pytestmark = pytest.mark.unit


def test_namespaces_are_labels_of_at_most_63_and_names_subdomains_of_at_most_253() -> None:
    assert names.is_label("a" * 63) and not names.is_label("a" * 64)
    assert not names.is_label("a.b")
    assert names.is_subdomain("a" * 63 + "." + "b" * 189) and not names.is_subdomain("a" * 254)


def test_every_segment_is_escaped_with_nothing_left_safe() -> None:
    assert names.segment("a/b?c#d%e f") == "a%2Fb%3Fc%23d%25e%20f"
