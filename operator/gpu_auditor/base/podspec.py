"""What a container's spec declares for the allocator: the variables of its setting and the
torch release from its env (read by `containerenv`, as the kubelet sets it) or image tag.

One definition for every reader: the operator (a failed pod, `controller.pod`), the admission
checks (a pod or a pod template before it runs, `admission`) and `explain`. The spec is the
tenant's: any shape is accepted, and what is not of the documented shape reads as absent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from gpu_auditor.base.containerenv import container_env, known_values

ALLOC_CONF_VARIABLES: Final = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""Both names work from torch 2.10; the old one wins when both are set, so it is read first."""
TORCH_VARIABLES: Final = ("TORCH_VERSION", "PYTORCH_VERSION")
"""Where a job declares its torch release, in the order they are read."""
MAX_IMAGE: Final = 1024
"""Characters of an image reference searched for a torch release (a registry path, a 128-char
tag and a digest fit in 512)."""

# pytorch/pytorch:2.1.0-cuda12.1-...: a torch release in the tag. NGC's nvcr.io/nvidia/pytorch:24.01
# tags are year.month, not torch releases: only majors 1 and 2 count.
_TORCH_IN_IMAGE = re.compile(r"(?:pytorch|torch)[^:/]*:v?([12]\.\d{1,2})(?![\d])", re.IGNORECASE)
_TORCH_IN_ENV = re.compile(r"(\d{1,3}\.\d{1,3})(?:[.+-]|$)")


def torch_version_hint(container: Mapping[str, Any]) -> str | None:
    """The torch release the job declares: env TORCH_VERSION / PYTORCH_VERSION, else an image
    tag like pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime. Only `major.minor`, each at most
    three digits, is ever passed on."""
    return release_hint(known_values(container_env(container, TORCH_VARIABLES)),
                        container.get("image"))


def release_hint(env: Mapping[str, str], image: object) -> str | None:
    """`torch_version_hint` from the known values of TORCH_VARIABLES (`containerenv`) and the
    container's image."""
    for variable in TORCH_VARIABLES:
        value = env.get(variable)
        match = _TORCH_IN_ENV.match(value[:32]) if value else None
        if match:
            return match.group(1)
    if not isinstance(image, str) or len(image) > MAX_IMAGE:
        return None
    match = _TORCH_IN_IMAGE.search(image)
    return match.group(1) if match else None
