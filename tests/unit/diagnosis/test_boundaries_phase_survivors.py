"""The backward phase by function name alone (issue 18, mutation survivor): a frame named
``_engine_run_backward`` outside torch/autograd, with no ``.backward(`` in its code line, is
still the backward pass (the name, any case, is the whole evidence). Literal frames."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.phase import failure_phase

pytestmark = pytest.mark.unit


def tb(path: str, func: str, code: str) -> str:
    return ("Traceback (most recent call last):\n"
            f'  File "{path}", line 7, in {func}\n    {code}\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")


@pytest.mark.parametrize(
    ("func", "phase"),
    [
        ("_engine_run_backward", "backward"),
        ("_Engine_Run_Backward", "backward"),
        ("run_backward", "backward"),
        ("_engine_run_forward", None),
    ],
)
def test_a_backward_function_name_is_the_backward_phase(func: str, phase: str | None) -> None:
    assert failure_phase(tb("/app/lib.py", func, "x = compute(y)")) == phase
