"""The e2e group: our image, built from the Dockerfile by scripts/build-image.sh, run as users
run it (tiers in docs/real-node.md). Needs root, podman, buildah and runc; without them the
tests skip with the reason shown, unless GPU_AUDITOR_REQUIRE_E2E=1 (set by `make test`, so CI),
where that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from e2e_support import Podman, build_image, e2e_unavailable_reason


def _unavailable(reason: str) -> None:
    if os.environ.get("GPU_AUDITOR_REQUIRE_E2E") == "1":
        pytest.fail(f"e2e required (GPU_AUDITOR_REQUIRE_E2E=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def image() -> str:
    """The reference of this tree's image (localhost/gpu-auditor:ctx-<hash of the context>)."""
    if reason := e2e_unavailable_reason():
        _unavailable(reason)
    return build_image()


@pytest.fixture(scope="session")
def podman(image: str) -> Iterator[Podman]:
    runner = Podman(image)
    yield runner
    runner.cleanup()
