"""Label selectors as Kubernetes reads them: whether a workload's `spec.selector` selects a set
of labels (`matchLabels` and `matchExpressions`: In, NotIn, Exists, DoesNotExist).

One rule for the operator (is this pod really its owner's?) and the admission webhook (the same
question before it applies an owner's recommended setting to a next pod). A selector that is
missing, empty (the API server gives no controller an empty one) or malformed selects nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selector_matches(selector: object, labels: Mapping[str, Any]) -> bool:
    """Whether a label selector, as the API serves it, selects `labels` (Kubernetes' own rule:
    every `matchLabels` pair and every `matchExpressions` requirement). False for a selector
    that is missing, empty or malformed."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    return all(_requirement_matches(e, labels) for e in expressions)


def _requirement_matches(requirement: object, labels: Mapping[str, Any]) -> bool:
    """One `matchExpressions` item: In, NotIn (also true without the label), Exists,
    DoesNotExist; any other operator or shape matches nothing."""
    if not isinstance(requirement, Mapping):
        return False
    key, operator = requirement.get("key"), requirement.get("operator")
    values = requirement.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list):
        return False
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    return operator == "DoesNotExist" and key not in labels
