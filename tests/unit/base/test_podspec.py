"""The torch release and allocator variables a container's spec declares (`base.podspec`);
its env is read by `base.containerenv` (tests/unit/base/test_containerenv.py)."""

from __future__ import annotations

import pytest

from gpu_auditor.base.podspec import torch_version_hint

pytestmark = pytest.mark.unit


def test_the_release_comes_from_the_last_entry_of_its_variable_as_the_kubelet_sets_it() -> None:
    """The first entry was read (env_values), the kubelet runs the container with the last."""
    c = {"env": [{"name": "TORCH_VERSION", "valueFrom": {}},
                 {"name": "TORCH_VERSION", "value": "2.0.1"},
                 {"name": "TORCH_VERSION", "value": "2.4.0"}, {"name": ["x"], "value": "y"},
                 "junk"], "image": "pytorch/pytorch:2.1.0-cuda12.1"}
    assert torch_version_hint(c) == "2.4"


def test_a_release_the_spec_does_not_hold_falls_back_to_the_image_tag() -> None:
    c = {"env": [{"name": "TORCH_VERSION", "valueFrom": {"configMapKeyRef": {}}}],
         "envFrom": [{"configMapRef": {"name": "versions"}}],
         "image": "pytorch/pytorch:2.1.0-cuda12.1"}
    assert torch_version_hint(c) == "2.1"
    assert torch_version_hint({"env": [{"name": "PYTORCH_VERSION", "value": "$(V)"},
                                       {"name": "TORCH_VERSION", "value": 2.4}]}) is None
