"""Where a job was when it ran out of memory, read from the Python traceback before the failure.

The phase decides the first action: memory a job needs while building optimizer state is not
fixed by the same change as activation memory in the backward pass, a CUDA graph's private pool,
or a checkpoint being loaded. Frames are read from the innermost outwards; the first that belongs
to a phase names it (``forward`` only when nothing more specific matched):

- ``optimizer-step``: ``torch/optim/`` frames, or a frame running ``optimizer.step()``;
- ``backward``: ``torch/autograd/`` frames, ``_engine_run_backward``, or a frame running
  ``.backward(``;
- ``graph-capture``: ``torch/cuda/graphs.py`` or a frame whose function or file names a graph
  capture (``capture_model``, ``cudagraph``...);
- ``loading``: ``torch/serialization.py``, ``load_state_dict``, ``from_pretrained``, safetensors,
  or moving a module to the GPU (``Module._apply`` under ``.to(``/``.cuda(``);
- ``cuda-init``: the job's first CUDA call creating its context (``torch/cuda/__init__.py``'s
  ``_lazy_init``, ``torch._C._cuda_init``), or, in any stack, a failure message that names the
  context's creation (``context_phase``);
- ``engine-warm-up``: an inference engine's dummy run of its sampler or pooler, with
  ``max_num_seqs`` requests at once, while it profiles its memory or warms up after allocating
  its KV cache: vLLM's ``_dummy_sampler_run``/``_dummy_pooler_run``(``_task``) frames, or its
  wrapper after the failure, "out of memory occurred when warming up sampler with N dummy
  requests" (``engine_warm_up``; public18 g-007, fixed by a lower gpu_memory_utilization and
  max_num_seqs);
- ``forward``: ``torch/nn/modules/module.py`` call frames;
- ``startup`` (TensorFlow): the failure follows TensorFlow's "Creating TensorFlow device" (1.x)
  or "Created device ..." (2.x) with no finished step after it: its start-up reservation of the
  GPU (``tensorflow_phase``).

A log that shows the job's own retry loop shrinking its batch is ``retry-exhausted`` whatever
the frames: a smaller batch has already been tried. That is Hugging Face Accelerate's
``find_executable_batch_size`` by its wording, or any loop of the job's own that logs its caught
out-of-memory errors with a batch size: at least two lines that say "out of memory" (or "OOM")
and name a batch size, the sizes never growing and the last smaller than the first (a line's
first 4096 characters are read). Only the last traceback before the failure is read, at most
``MAX_TRACEBACK_BYTES`` of it (without a ``Traceback`` header, a pasted fragment, the frames in
the last ``MAX_TRACEBACK_BYTES`` before the failure); every frame pattern is a plain substring
test, the retry patterns bounded regular expressions (linear time).
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from .progress import made_progress

OPTIMIZER_STEP: Final = "optimizer-step"
BACKWARD: Final = "backward"
GRAPH_CAPTURE: Final = "graph-capture"
LOADING: Final = "loading"
CUDA_INIT: Final = "cuda-init"
STARTUP: Final = "startup"
FORWARD: Final = "forward"
RETRY_EXHAUSTED: Final = "retry-exhausted"
ENGINE_WARM_UP: Final = "engine-warm-up"
PHASES: Final = (
    OPTIMIZER_STEP, BACKWARD, GRAPH_CAPTURE, LOADING, CUDA_INIT, FORWARD, RETRY_EXHAUSTED, STARTUP,
    ENGINE_WARM_UP,
)

MAX_TRACEBACK_BYTES: Final = 64 * 1024
# the indent is blanks but never a newline: ``^\s*`` under MULTILINE would read a run of empty
# lines again from each of its line starts (quadratic on a traceback of blank lines)
_FRAME = re.compile(
    r'^[ \t\r\f\v]*File "([^"\n]{0,512})", line \d{1,9}, in ([^\n]{0,256})$', re.MULTILINE
)
_RETRY_MARKERS: Final = (
    "find_executable_batch_size",
    "Decreasing batch size to",
    "No executable batch size found",
)


# both read a lowercased line (a case-sensitive pattern is scanned faster than IGNORECASE); the
# possessive ``{0,16}+`` stops at the first digit as a lazy repeat would, without backtracking
_OOM_WORDS = re.compile(r"out of memory|\boom\b")
_BATCH_SIZE = re.compile(r"\bbatch(?:[ _-]?size)?\b[^\d\n]{0,16}+(\d{1,9})\b")
_MAX_RETRY_LINE: Final = 4096  # a line's first characters read for a retry report


def _shrinking_retries(text: str) -> bool:
    """The job's own loop caught out-of-memory errors and shrank its batch (module doc)."""
    sizes: list[int] = []
    for line in text.splitlines():
        line = line[:_MAX_RETRY_LINE].lower()
        if _OOM_WORDS.search(line) is None:
            continue
        size = _BATCH_SIZE.search(line)
        if size is not None:
            sizes.append(int(size.group(1)))
    if len(sizes) < 2 or sizes[-1] >= sizes[0]:
        return False
    return all(later <= earlier for earlier, later in itertools.pairwise(sizes))


def _frames(traceback: str) -> list[tuple[str, str, str]]:
    """(file, function, code line) per frame, outermost first."""
    out: list[tuple[str, str, str]] = []
    matches = list(_FRAME.finditer(traceback))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(traceback)
        code = traceback[m.end() : end].strip().split("\n", 1)[0][:512]
        out.append((m.group(1).replace("\\", "/"), m.group(2).strip(), code))
    return out


def _phase_of(path: str, func: str, code: str) -> str | None:
    low_path, low_func = path.lower(), func.lower()
    if ("/torch/cuda/__init__.py" in low_path and low_func == "_lazy_init") or (
        "_cuda_init()" in code
    ):
        return CUDA_INIT
    if "/torch/optim/" in low_path or "optimizer.step(" in code or "optim.step(" in code:
        return OPTIMIZER_STEP
    if (
        "/torch/autograd/" in low_path
        or low_func in ("_engine_run_backward", "run_backward")
        or ".backward(" in code
    ):
        return BACKWARD
    if (
        "/torch/cuda/graphs.py" in low_path
        or ("capture" in low_func and "graph" in (low_func + low_path))
        or "cudagraph" in low_func
    ):
        return GRAPH_CAPTURE
    if low_func in _WARM_UP_FRAMES:
        return ENGINE_WARM_UP
    if (
        "/torch/serialization.py" in low_path
        or "safetensors" in low_path
        or low_func
        in (
            "load_state_dict",
            "_load_from_state_dict",
            "from_pretrained",
            "_load_pretrained_model",
            "load_checkpoint",
        )
        or "torch.load(" in code
        or "from_pretrained(" in code
    ):
        return LOADING
    if low_func in ("_apply", "convert") and "/torch/nn/modules/module.py" in low_path:
        return LOADING  # Module.to()/.cuda() moving the weights (``convert`` is to()'s closure)
    module = "/torch/nn/modules/module.py" in low_path
    if module and low_func in ("_call_impl", "_wrapped_call_impl"):
        return FORWARD
    return None


_WARM_UP_FRAMES: Final = (
    "_dummy_sampler_run", "_dummy_pooler_run", "_dummy_pooler_run_task", "dummy_pooler_run"
)
_WARM_UP_WRAPPER: Final = "out of memory occurred when warming up "


def engine_warm_up(tail: str) -> bool:
    """vLLM's wrapper of the failure follows it: the OOM happened in a dummy run (module doc).
    ``tail``: the log after the failure, as the scan keeps it (within the log's last
    ``logtext.TAIL_BYTES``)."""
    return _WARM_UP_WRAPPER in tail


def failure_phase(precontext: str) -> str | None:
    """The phase of the job's last traceback before the failure, or None when none is readable."""
    if any(marker in precontext for marker in _RETRY_MARKERS) or _shrinking_retries(precontext):
        return RETRY_EXHAUSTED
    start = precontext.rfind("Traceback (most recent call last):")
    if start < 0:  # a pasted fragment: the frames before the failure, without their header
        start = max(0, len(precontext) - MAX_TRACEBACK_BYTES)
    frames = _frames(precontext[start : start + MAX_TRACEBACK_BYTES])
    found: str | None = None
    for path, func, code in reversed(frames):
        phase = _phase_of(path, func, code)
        if phase is None:
            continue
        if phase != FORWARD:
            return phase
        found = found or phase
    return found


_CONTEXT_CREATION: Final = (
    "create stream executor",  # XLA/JAX, TensorFlow: the device's executor and its context
    "cuDevicePrimaryCtxRetain",
    "cuCtxCreate",
    "call to cuInit",
)


def context_phase(message: str) -> str | None:
    """``cuda-init`` when the failure message itself says the device context could not be
    created: on the H200 a JAX job started beside a process that had filled the GPU failed with
    "Failed to create stream executor for device CUDA:0: : CUDA_ERROR_OUT_OF_MEMORY" before
    any frame of its own (evaluation/results/library-errors)."""
    head = message[:512]
    return CUDA_INIT if any(words in head for words in _CONTEXT_CREATION) else None


_TF_DEVICE_CREATED: Final = (
    "Creating TensorFlow device",
    "Created TensorFlow device",
    "Created device /",
)


def tensorflow_phase(precontext: str) -> str | None:
    """``startup`` when TensorFlow created its GPU device and the job finished no step after it:
    the failure is TensorFlow's own reservation of the GPU at start, not the model's work."""
    tail = precontext[-MAX_TRACEBACK_BYTES:]
    at = max(tail.rfind(marker) for marker in _TF_DEVICE_CREATED)
    if at < 0 or made_progress(tail[at:]):
        return None
    return STARTUP
