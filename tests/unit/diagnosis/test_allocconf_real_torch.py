"""Every value the recommender can produce is accepted by a real torch's allocator parser.

Runs where torch is importable (``torch==2.13.0`` installs from local disk on these machines; the
CUDA wheel's parser works without a GPU: ``torch._C._accelerator_setAllocatorSettings`` checks
the CUDA keys and values). The tests that need torch are skipped, with the reason, elsewhere
(``GPU_AUDITOR_REQUIRE_TORCH=1`` makes that a failure); the one that needs none always runs.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from types import ModuleType

import pytest

from gpu_auditor.diagnosis import diagnose, validate_alloc_conf

from .diagnosis_helpers import PROGRESS, torch_oom

pytestmark = pytest.mark.unit

try:
    import torch as _torch
except ImportError:  # only this: a torch that is installed but broken fails here, loudly
    _torch = None
RELEASE = ".".join(_torch.__version__.split(".")[:2]) if _torch is not None else None


def _need_torch() -> ModuleType:
    if _torch is None:
        if os.environ.get("GPU_AUDITOR_REQUIRE_TORCH") == "1":
            pytest.fail("torch is not installed, and GPU_AUDITOR_REQUIRE_TORCH=1", pytrace=False)
        pytest.skip("torch is not installed in this environment")
    return _torch


def _setter() -> Callable[[str], None]:
    torch = _need_torch()
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        pytest.skip(f"torch {torch.__version__} has no _accelerator_setAllocatorSettings")
    return setter  # type: ignore[no-any-return]


# a job that made progress: 9 % idle is fragmentation (and gets a setting) only after steps
FRAG = PROGRESS + torch_oom(
    requested=2, total=79.15, free=1.2, process=77.8, allocated=70.1, unallocated=6.9
)
CURRENTS = [
    None,
    "",
    "expandable_segments:False",
    "max_split_size_mb:256",
    "garbage_collection_threshold:0.6",
    "garbage_collection_threshold:0.6,max_split_size_mb:512",
    "roundup_power2_divisions:[256:1,512:2,>:8]",
    "pinned_use_background_threads:True",
    "foo:1,max_split_size_mb:10",
    "expandable_segments:yes",
    "backend:native",
]
VERSIONS = ["1.13", "2.0", "2.1", "2.4", "2.11", *([RELEASE] if RELEASE else [])]


def recommended_values() -> set[str]:
    values = set()
    for current, version in itertools.product(CURRENTS, VERSIONS):
        rec = diagnose(FRAG, torch_version=version, alloc_conf=current).recommendation
        if rec.alloc_conf is not None:
            values.add(rec.alloc_conf)
    return values


def test_recommender_produces_several_values() -> None:
    assert len(recommended_values()) >= 5


@pytest.mark.parametrize("value", sorted(recommended_values()))
def test_recommended_value_is_accepted_by_real_torch(value: str) -> None:
    setter = _setter()
    setter(value)  # raises ValueError/RuntimeError when torch rejects it
    setter("expandable_segments:False")


@pytest.mark.parametrize(
    "value",
    [
        "foo:1",
        "max_split_size_mb:10",
        "garbage_collection_threshold:1.5",
        "expandable_segments:yes",
        "roundup_power2_divisions:3",
        "backend:foo",
        "pinned_num_register_threads:3",
    ],
)
def test_validator_flags_what_real_torch_rejects(value: str) -> None:
    setter = _setter()
    with pytest.raises((ValueError, RuntimeError)) as raised:
        setter(value)
    problems = validate_alloc_conf(value, torch_version=RELEASE or "")
    assert problems
    assert _same_words(str(raised.value).splitlines()[0].strip(), problems[0].strip())


def _same_words(torch_says: str, we_say: str) -> bool:
    """Equal, except for the name torch gives its config parser: on torch 2.11 (H200,
    evaluation/results/gpu-alloc-conf-check.json) the env var a job sets is parsed by the CUDA
    config
    ("Unrecognized key 'foo' in CUDA allocator config.", which we print, since that is what the
    job's log shows) while this test's setter, ``_accelerator_setAllocatorSettings``, words the
    same rejection "... in Accelerator allocator config."."""
    if torch_says == we_say:
        return True
    names = ("in CUDA allocator config.", "in Accelerator allocator config.")
    return any(
        torch_says.replace(a, "@") == we_say.replace(b, "@") for a in names for b in names
    )
