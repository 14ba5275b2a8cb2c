"""Label selectors as Kubernetes reads them (the operator's owners and the webhook's chain)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_auditor.base.selectors import selector_matches

pytestmark = pytest.mark.unit

LABELS = {"app": "train", "tier": "gpu"}


@pytest.mark.parametrize(("selector", "selects"), [
    ({"matchLabels": {"app": "train"}}, True),
    ({"matchLabels": {"app": "web"}}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, False),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
    ({"matchExpressions": ["app"]}, False),
    ({}, False), (None, False), ("app=train", False), ({"matchLabels": ["app"]}, False),
])
def test_a_selector_selects_as_kubernetes_reads_it(selector: Any, selects: bool) -> None:
    assert selector_matches(selector, LABELS) is selects
