"""Reading a pod spec's containers: environment variables as the kubelet reads them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_env_values_read_each_variable_once_like_env_value() -> None:
    from gpu_auditor.base.podspec import env_value, env_values

    c = {"env": [{"name": "A", "valueFrom": {}}, {"name": "A", "value": "first"},
                 {"name": "A", "value": "second"}, {"name": "B", "value": 5},
                 {"name": "B", "value": "later"}, {"name": ["x"], "value": "y"}, "junk"]}
    assert env_values(c, ("A", "B", "C")) == {"A": "first"}
    assert [env_value(c, v) for v in ("A", "B", "C")] == ["first", None, None]
