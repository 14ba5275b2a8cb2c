"""What a container's spec declares for the allocator: its literal env values, its allocator
setting variables and the torch release from its env or image tag.

One definition for both readers: the operator (a failed pod, `controller.pod`) and the
admission checks (a pod or a pod template before it runs, `admission`). The spec is the
tenant's: any shape is accepted, and what is not of the documented shape reads as absent.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, Final

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


def env_value(container: Mapping[str, Any], variable: str) -> str | None:
    """A literal env value from the spec (valueFrom references are not resolved). A value that
    is not a string is absent: the API server refuses one, and a manifest's YAML alias can make
    one of any size (its `str()` is never taken)."""
    return env_values(container, (variable,)).get(variable)


def env_values(container: Mapping[str, Any], variables: Collection[str]) -> dict[str, str]:
    """The literal values of ``variables``, as `env_value` reads each, in one pass over the env:
    a YAML alias can give many containers one long env list, and each pass is paid per
    container."""
    env = container.get("env")
    found: dict[str, str] = {}
    decided: set[str] = set()
    for item in env if isinstance(env, list) else ():
        if not isinstance(item, Mapping) or "value" not in item:
            continue
        name = item.get("name")
        if isinstance(name, str) and name in variables and name not in decided:
            decided.add(name)
            value = item["value"]
            if isinstance(value, str):
                found[name] = value
    return found


def torch_version_hint(container: Mapping[str, Any]) -> str | None:
    """The torch release the job declares: env TORCH_VERSION / PYTORCH_VERSION, else an image
    tag like pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime. Only `major.minor`, each at most
    three digits, is ever passed on."""
    return release_hint(env_values(container, TORCH_VARIABLES), container.get("image"))


def release_hint(env: Mapping[str, str], image: object) -> str | None:
    """`torch_version_hint` from the literal values of TORCH_VARIABLES (`env_values`) and the
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
