"""Figures from one failure's lines, per family (see ``formats``).

PyTorch 2.1+ (one line)::

    CUDA out of memory. Tried to allocate X. GPU N has a total capacity of T of which F is free.
    [Including non-PyTorch memory, this process has P memory in use. ][Process N has U memory in
    use. ...][L allowed; ]Of the allocated memory A is allocated by PyTorch, [with PP allocated in
    private pools (e.g., CUDA Graphs), ]and R is reserved by PyTorch but unallocated. ...

PyTorch 1.x: ``Tried to allocate X (GPU N; T total capacity; A already allocated; F free;
[L allowed; ]RT reserved in total by PyTorch)`` (1.0–1.3: ``U cached)``). cudaMallocAsync: a
block of ``Name : value`` lines. In a container torch may not recognise its own process and
print it as ``Process <hostpid> has ...`` with no "this process" segment; then the process whose
memory is the closest above what PyTorch reserved is taken as the job's own (``_own_process``).

Every pattern here starts on a word, never on a number, and every number in it is bounded
(``sizes.NUMBER_PATTERN``, ``_INT``): a search is linear in the message whatever its digits. A
figure that does not fit (more than 20 digits, above 2^64 bytes) is absent, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from . import formats
from .impossible import IMPOSSIBLE_REQUEST_BYTES
from .logtext import Hit, Line
from .model import Figures, OomEvent, OtherProcess
from .sizes import MAX_DIGITS, MAX_SIZE_BYTES, SIZE_PATTERN, is_no_limit, to_bytes, to_count

MESSAGE_MAX_LINES: Final = 8
"""Lines after the failure line that may still belong to its message (wrapped or multi-line)."""

MESSAGE_MAX_CHARS: Final = 4000
"""The failure message kept in a diagnosis (the operator writes it into an annotation)."""

MESSAGE_LEAD_CHARS: Final = 512
"""Text kept before the failure's own wording on its line (``[rank0]: RuntimeError: ``, the
exception's module path): more is progress output that would push the figures past
``MESSAGE_MAX_CHARS``."""

_INT: Final = rf"(?<![\d.,])\d{{1,{MAX_DIGITS}}}(?![\d.,])"
"""A bounded integer (a pid, a device index, a byte count) not inside a longer run of digits."""

_S: Final = SIZE_PATTERN.replace("?P<num>", "").replace("?P<unit>", "")


def _size_re(template: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(template.replace("{S}", f"({_S})"), flags)


_SIZE_SPLIT: Final = re.compile(SIZE_PATTERN, re.IGNORECASE)  # a size some field matched


def _bytes_of(text: str | None) -> int | None:
    if text is None:
        return None
    match = _SIZE_SPLIT.search(text)
    if match is None:
        return None
    return to_bytes(match.group("num"), match.group("unit"))


def _find(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    if match is None:
        return None
    return _bytes_of(next((g for g in match.groups() if g is not None), None))


# read without case: people paste the message lower-cased into issue titles
_TORCH_FIELDS: Final = {
    "requested": _size_re(r"Tried to allocate {S}", re.IGNORECASE),
    "total": _size_re(r"total capaci?ty of {S}|{S} total capacity", re.IGNORECASE),
    "free": _size_re(r"of which {S} is free|; {S} free", re.IGNORECASE),
    "process": _size_re(r"this process has {S} memory in use", re.IGNORECASE),
    "allowed": _size_re(r"{S} allowed;", re.IGNORECASE),
    "allocated": _size_re(
        r"Of the allocated memory {S} is allocated by PyTorch|{S} already allocated",
        re.IGNORECASE,
    ),
    "private": _size_re(r"with {S} allocated in private pools", re.IGNORECASE),
    "unallocated": _size_re(
        r"and {S} is reserved by PyTorch but unallocated|; {S} cached\)", re.IGNORECASE
    ),
    "reserved_total": _size_re(r"{S} reserved in total by PyTorch", re.IGNORECASE),
}
_GPU_INDEX: Final = re.compile(r"GPU (\d{1,5})[;, ]", re.IGNORECASE)
_PROCESS: Final = re.compile(rf"(?<!this )Process ({_INT}) has ({_S}) memory in use")
_ASYNC_FIELDS: Final = {
    "allocated": _size_re(r"Currently allocated\s*:\s*{S}"),
    "requested": _size_re(r"Requested\s*:\s*{S}"),
    "total": _size_re(r"Device limit\s*:\s*{S}"),
    "free": _size_re(r"Free \(according to CUDA\)\s*:\s*{S}"),
    "allowed": _size_re(r"PyTorch limit \(set by user-supplied memory fraction\)\s*:\s*{S}"),
}
_ASYNC_DEVICE: Final = re.compile(r"Allocation on device (\d{1,5})\b")
_MESSAGE_END: Final = re.compile(
    r"Memory Management|reserved in total by PyTorch\)|but unallocated\.|\bcached\)"
)
_DIM: Final = rf"\d{{1,{MAX_DIGITS}}}"
_TF_SHAPE: Final = re.compile(
    r"OOM when allocating tensor with shape\s{0,8}"
    rf"\[((?:{_DIM},\s{{0,2}}){{0,31}}{_DIM})?\] and type (\w{{1,16}})\b"
)
_TF_DTYPE_BYTES: Final[dict[str, int]] = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "complex64": 8,
    "complex128": 16,
}
_BFC_LIMIT: Final = re.compile(rf"^\s*Limit:\s+({_INT})\s*$")
_BFC_IN_USE: Final = re.compile(rf"^\s*InUse:\s+({_INT})\s*$")
_XLA_REQUEST: Final = _size_re(r"(?:trying to allocate|allocating|allocate request for) {S}")
_CUPY: Final = re.compile(
    r"Out of memory allocating ([\d,]{1,32}) bytes \(allocated so far: ([\d,]{1,32}) bytes\)"
)
_CUPY_OLD: Final = re.compile(
    r"out of memory to allocate ([\d,]{1,32}) bytes \(total ([\d,]{1,32}) bytes\)"
)
_ONNX_REQUEST: Final = re.compile(r"requested buffer of size (\d{1,32})\b")
_VLLM_NEEDED: Final = _size_re(r"\({S} KV cache is needed")
_VLLM_STARTUP: Final = re.compile(
    formats.VLLM_FREE_ON_DEVICE + r"([\d.]{1,24})/([\d.]{1,24}) GiB\) on startup is less than "
    r"desired GPU memory utilization \([\d.]{1,24}, ([\d.]{1,24}) GiB\)"
)
_VLLM_AVAILABLE: Final = _size_re(r"available KV cache memory \({S}\)")
_BYTES_REQUEST: Final = re.compile(
    r"(?:allocate|calloc|malloc|alloc)\w{0,24}\s{1,8}(?:memory\s{1,8})?([\d,]{1,32}) bytes"
)
_THEANO: Final = re.compile(
    r"Error allocating (\d{1,20}) bytes of device memory \(out of memory\)\. Driver report "
    r"(\d{1,20}) bytes free and (\d{1,20}) bytes total"
)
"""Theano's device allocator: the request, then the driver's free and total figures."""
_DIRECTML_REQUEST: Final = re.compile(r"\bCould not allocate tensor with (\d{1,20}) bytes\b")
_GGML_CPU_BUFFER: Final = re.compile(r"\bto allocate (?:CPU )?buffer of size (\d{1,20})\b")
"""llama.cpp's (ggml's) CPU backend's buffer, in bytes."""
_NUMPY_REQUEST: Final = re.compile(
    r"\bUnable to allocate (\d{1,12}(?:\.\d{1,6})?)\.? ?((?:[KMGTPE]i?B|bytes)) for an array\b"
)
"""NumPy's request, in its binary units ("502. MiB": a whole number keeps its point)."""
_DRIVER_REQUEST: Final = re.compile(r"failed to allocate [^(\n]{0,200}\((\d{1,32}) bytes\)")
_FAISS_REQUEST: Final = re.compile(
    formats.FAISS_ALLOC_FAIL + r"[^\n]{0,200}? size (\d{1,32}) bytes"
)
"""Faiss 1.7+'s request: "alloc fail type ... size 4513349632 bytes (cudaMalloc error ...)"."""
_FAISS_TAIL: Final = re.compile(formats.FAISS_REQUEST_TAIL)
"""The same request on its own line, where Faiss's message broke before it."""
_XGBOOST: Final = re.compile(formats.XGBOOST_ALLOC_ERROR)
_XGBOOST_FIGURE: Final = re.compile(r"^[ \t]{0,8}- (Free|Requested) memory: (\d{1,20})[ \t]*$")
"""XGBoost's two lines under its failure ("- Free memory: N", "- Requested memory: M")."""
_SPLIT_ATTENTION: Final = re.compile(
    formats.SPLIT_ATTENTION
    + r"[^\n]{0,40}?Need: ?(\d{1,6}\.\d) ?GB free, Have: ?(\d{1,6}\.\d) ?GB free"
)
"""The split attention's figures: one slice's need (its whole need over the 64 slices it tried)
and what was free (the driver's free plus PyTorch's idle cache); its "GB" are GiB (1024**3)."""
_CATBOOST_REQUEST: Final = re.compile(
    formats.CATBOOST_OUT_OF_MEMORY + r"(\d{1,12}(?:\.\d{1,12})?)(?: MB)?; Free "
)
"""CatBoost's request, in its MB (1024 * 1024 bytes). Its "Free" is what is left of its own pool
(gpu_ram_part of the card, taken up front), not the device's: not read."""
_TENSORRT_REQUEST: Final = re.compile(r"Requested amount of GPU memory \((\d{1,32}) bytes\)")
"""TensorRT's warning beside its failure, "... could not be allocated"; the request is named
first (public14 r-006's post cut the line after it)."""
_PADDLE_MALLOC: Final = _size_re(r"Cannot malloc {S} GPU memory")
_PADDLE_SIZE: Final = r"\d{1,12}(?:\.\d{1,12})? ?[KMG]?B"
"""A size as Paddle's HumanReadableSize prints it, which may run into the next word."""
_PADDLE: Final = re.compile(
    rf"Cannot allocate ({_S}) memory on GPU \d{{1,5}}, "
    # Paddle 2.x says what this process's allocator holds before the free figure
    rf"(?:(\d{{1,12}}(?:\.\d{{1,12}})?[KMG]?B) memory has been allocated and )?"
    rf"available memory is only\s{{0,64}}({_S})"
)
# the legacy allocator: the request, the device's free and total, what this process's Paddle uses
_PADDLE_LEGACY: Final = re.compile(  # its sizes run into the next word ("5.937500MBtotal")
    rf"Cannot allocate ({_PADDLE_SIZE}) in GPU \d{{1,5}}, "
    rf"available ({_PADDLE_SIZE}),?\s{{0,4}}total (\d{{1,20}})"
)
_PADDLE_USED: Final = re.compile(r"GPU memory used: ?\s{0,8}(\d{1,12}(?:\.\d{1,12})? ?[kKMG]?B)")
_GGML_REQUEST: Final = _size_re(r"alloc_buffer: allocating {S} on device \d{1,5}")
_GGML_BUFFER: Final = re.compile(r"failed to allocate CUDA\d{0,3} buffer of size (\d{1,20})\b")
"""llama.cpp's request: its CUDA buffer type's "allocating 2508.00 MiB on device 0: cudaMalloc
failed", or the allocator's "failed to allocate CUDA0 buffer of size 2629828608" after it."""
_BFC_ROUNDED: Final = re.compile(r"\(rounded to (\d{1,20})\)")
_TORCH_WARNING: Final = re.compile(
    r"trying to (?:allocate|map) (\d{1,20}) bytes \(free: (\d{1,20}), total: (\d{1,20})\)"
)
_ONNX_LIMIT: Final = re.compile(r"smaller than requested bytes of (\d{1,20})")
_HAMI: Final = re.compile(r"\]: Device \d{1,3} OOM (\d{1,20}) / (\d{1,20})\b")
_TF_TOTAL: Final = _size_re(r"(?:Total memory|totalMemory):\s{0,8}{S}")
_TF_FREE: Final = _size_re(r"(?:Free memory|freeMemory):\s{0,8}{S}")
_TF_BANNER_CHARS: Final = 16384


def tensorflow_banner(precontext: str) -> tuple[int | None, int | None]:
    """The GPU's total and free memory as TensorFlow 1.x printed them when it found the device
    ("Total memory: 7.92GiB" / "Free memory: 190.31MiB", or "totalMemory: ... freeMemory: ..."):
    the last ones in the text before the failure. TensorFlow's GiB/MiB are binary."""
    tail = precontext[-_TF_BANNER_CHARS:]
    totals = list(_TF_TOTAL.finditer(tail))
    frees = list(_TF_FREE.finditer(tail))
    total = _bytes_of(totals[-1].group(1)) if totals else None
    free = _bytes_of(frees[-1].group(1)) if frees else None
    return total, free


_BINARY_UNITS: Final = {"kb": "KiB", "mb": "MiB", "gb": "GiB", "tb": "TiB"}
_MPS_SIZE: Final = r"([\d.]{1,24} ?(?:[KMGT]?i?B|bytes))"
_MPS: Final = re.compile(
    rf"MPS backend out of memory \(MPS allocated: {_MPS_SIZE}, other allocations: {_MPS_SIZE}"
    rf"(?:, max allowed: {_MPS_SIZE})?\)(?:\. Tried to allocate {_MPS_SIZE})?"
)
"""PyTorch's MPS allocator: what it holds (its tensors and its cache), what else the process has
on the device (Metal's driver allocations past its own), its high watermark (absent with
PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0: the review, MPSAllocator.mm), and the request; KB/MB/GB
are powers of 1024 (c10's format_size), later releases print KiB/MiB/GiB."""


def _binary_bytes(text: str) -> int | None:
    """A size whose KB/MB/GB mean powers of 1024, as PaddlePaddle prints them
    (``HumanReadableSize``: "1.531250GB" is 1.53125 GiB)."""
    match = _SIZE_SPLIT.search(text)
    if match is None:
        return None
    unit = match.group("unit") or ""
    return to_bytes(match.group("num"), _BINARY_UNITS.get(unit.lower(), unit))


def _from_failure(text: str, found: tuple[str, int, int] | None) -> str:
    """``text`` from where its failure's wording (``found`` in it) begins, less any progress
    output before it: the part after the last carriage return, at most ``MESSAGE_LEAD_CHARS``
    before the wording."""
    if found is None:
        return text
    begin = max(text.rfind("\r", 0, found[1]) + 1, found[1] - MESSAGE_LEAD_CHARS)
    return text[begin:]


_FIGURE_AFTER: Final = frozenset({formats.XLA, formats.ONNXRUNTIME})
"""Families whose wording is whole before the request it goes on to give ("... trying to
allocate 5520758552 bytes."); the others' wordings hold a figure."""
_CONTINUES: Final = re.compile(r"^\s*(?:[a-z(]|\d(?!\d{3}-\d\d-\d\d))")
"""A line that goes on with a sentence (a lower-case word, a figure), not a new record (a
capitalized word, a bracket, a date)."""


def _figure_wrapped(hit: Hit, found: tuple[str, int, int] | None) -> bool:
    """Whether the failure line ends before its sentence's figure (its wording ``found`` in it)
    and the next line goes on with it: a console that wraps at its width (Rich's log handler, 80
    columns in a container) broke the line after the wording."""
    if found is None or not hit.after:
        return False
    rest = hit.line.text[found[2] :]
    return not any(c.isdigit() for c in rest) and _CONTINUES.match(hit.after[0].text) is not None


def message_text(hit: Hit) -> str:
    """The failure line plus the lines that continue its message."""
    found = formats.find_failure(hit.line.text)
    parts = [_from_failure(hit.line.text, found)]
    if hit.family in (formats.TORCH_ASYNC,):
        parts += [x.text for x in hit.after[:MESSAGE_MAX_LINES]]
    elif hit.family == formats.PADDLE:  # the free figure wraps onto the next line
        parts += [x.text for x in hit.after[:1]]
    elif hit.family in _FIGURE_AFTER and _figure_wrapped(hit, found):
        parts += [hit.after[0].text]
    elif hit.family == formats.TORCH and not _MESSAGE_END.search(hit.line.text):
        for line in hit.after[:MESSAGE_MAX_LINES]:
            if not line.text.strip() or line.text.startswith(("Traceback", "During handling")):
                break
            parts.append(line.text)
            if _MESSAGE_END.search(line.text):
                break
    return " ".join(p.strip() for p in parts)[:MESSAGE_MAX_CHARS]


def _own_process(
    processes: list[OtherProcess], reserved: int | None
) -> tuple[OtherProcess | None, list[OtherProcess]]:
    """The job's own process among those the message lists as "Process N": PyTorch says "this
    process" only when NVML's pid is its own, and in a container (a PID namespace) it never is.
    The failing process holds a CUDA context, so NVML lists it: the one process listed is the
    job (every collector of the public sets read a lone "Process N" so: a-016, a-038, b-021,
    p-031, p-032, s-014, s-023, t-027, v-015, v-033); of several, the one closest above what
    PyTorch reserved. A message cut before PyTorch's own figures still lists the job (public7
    y-008)."""
    if len(processes) == 1 and (reserved is None or processes[0].bytes >= reserved):
        return processes[0], []
    if reserved is None or reserved <= 0:
        return None, processes
    candidates = [p for p in processes if p.bytes >= reserved]
    if not candidates:
        return None, processes
    own = min(candidates, key=lambda p: p.bytes - reserved)
    return own, [p for p in processes if p is not own]


HAMI_LINES_BEFORE: Final = 64
"""How far before another stack's failure a HAMi refusal is looked for: the traceback that
raises it (PyTorch's caching allocator frees its cache, retries, then raises) lies between."""


def hami_refusal(before: str) -> tuple[int, int] | None:
    """``(usage with the request, the pod's limit)`` of the last HAMi refusal line among the
    last ``HAMI_LINES_BEFORE`` lines of ``before``; None when there is none."""
    for line in reversed(before.splitlines()[-HAMI_LINES_BEFORE:]):
        if formats.match_line(line) == formats.HAMI:
            figures = _hami_figures(line)
            if figures.process_bytes is not None and figures.allowed_bytes is not None:
                return figures.process_bytes, figures.allowed_bytes
    return None


def _hami_figures(text: str) -> Figures:
    """HAMi's refusal: what the container would hold with the request, then its limit."""
    over = _HAMI.search(text)
    if over is None:
        return Figures()
    return Figures(
        process_bytes=_plain_bytes(over.group(1)), allowed_bytes=_plain_bytes(over.group(2))
    )


def _torch_figures(message: str) -> Figures:
    found = {name: _find(pattern, message) for name, pattern in _TORCH_FIELDS.items()}
    allocated = found["allocated"]
    unallocated = found["unallocated"]
    if unallocated is None and found["reserved_total"] is not None and allocated is not None:
        unallocated = max(0, found["reserved_total"] - allocated)
    processes = [
        OtherProcess(pid, size)
        for m in _PROCESS.finditer(message)
        if (pid := to_count(m.group(1))) is not None and (size := _bytes_of(m.group(2))) is not None
    ]
    process = found["process"]
    reserved = None if allocated is None else allocated + (unallocated or 0)
    unseen = process == 0 and bool(reserved)
    if unseen:
        # NVML gave no usage for the job's own process (public14 m-018 in a container: "this
        # process has 0 bytes memory in use" beside 36.46 GiB allocated by PyTorch; four more
        # logs of the public sets print it): no figure. PyTorch named it "this process", so
        # NVML's pids are the job's: every process listed beside it is another.
        process = None
    if process is None and processes and not unseen:
        own, processes = _own_process(processes, reserved)
        process = own.bytes if own else None
    gpu = _GPU_INDEX.search(message)
    allowed = found["allowed"]
    return Figures(
        requested_bytes=found["requested"],
        total_bytes=found["total"],
        free_bytes=found["free"],
        # NVML's "not available" (Windows' WDDM driver) prints as 2^64 (public12 c-005, "this
        # process has 17179869184.00 GiB memory in use"); any figure past what a machine has is
        # no figure either (impossible.py)
        process_bytes=None if process is not None and process >= IMPOSSIBLE_REQUEST_BYTES
        else process,
        allocated_bytes=allocated,
        reserved_unallocated_bytes=unallocated,
        allowed_bytes=None if is_no_limit(allowed) else allowed,
        other_processes=tuple(processes),
        private_pool_bytes=found["private"],
        gpu_index=int(gpu.group(1)) if gpu else None,
    )


def _async_figures(message: str) -> Figures:
    found = {name: _find(pattern, message) for name, pattern in _ASYNC_FIELDS.items()}
    device = _ASYNC_DEVICE.search(message)
    allowed = found["allowed"]
    return Figures(
        requested_bytes=found["requested"],
        total_bytes=found["total"],
        free_bytes=found["free"],
        allocated_bytes=found["allocated"],
        allowed_bytes=None if is_no_limit(allowed) else allowed,
        gpu_index=int(device.group(1)) if device else None,
    )


def _bfc_stats(lines: Sequence[Line]) -> tuple[int | None, int | None]:
    limit = in_use = None
    for line in lines:
        if (m := _BFC_LIMIT.match(line.text)) is not None:
            limit = _plain_bytes(m.group(1))
        elif (m := _BFC_IN_USE.match(line.text)) is not None:
            in_use = _plain_bytes(m.group(1))
    return limit, in_use


def _tensor_bytes(shape: str, dtype: str) -> int | None:
    """Bytes of a tensor ``shape`` (``"64,512,8192"``; ``""`` for a scalar, one element) of
    ``dtype``; None when any dimension is not a number or the product is above
    ``MAX_SIZE_BYTES``."""
    item = _TF_DTYPE_BYTES.get(dtype)
    dims = [to_count(d) for d in shape.replace(" ", "").split(",") if d]
    if item is None:
        return None
    total = item
    for dim in dims:
        if dim is None:
            return None
        total *= dim
        if total > MAX_SIZE_BYTES:
            return None
    return total


def _tensorflow_figures(message: str, hit: Hit) -> Figures:
    shape = _TF_SHAPE.search(message)
    requested = _tensor_bytes(shape.group(1) or "", shape.group(2)) if shape is not None else None
    limit, in_use = _bfc_stats(hit.before)
    return Figures(requested_bytes=requested, allowed_bytes=limit, allocated_bytes=in_use)


def _plain_bytes(text: str) -> int | None:
    return to_bytes(text, "bytes")


def _possible(figures: Figures) -> Figures:
    """The figures without a free figure above the device's total: no device has more free than
    it has, so the allocator printed a bogus value (public9 o-009: "of which 17179869183.96 GiB
    is free" on a 512 MiB AMD iGPU under HIP), and a verdict must not read room from it."""
    f = figures
    if f.free_bytes is not None and f.total_bytes is not None and f.free_bytes > f.total_bytes:
        return replace(f, free_bytes=None)
    return f


def parse_hit(hit: Hit) -> OomEvent:
    """The failure's figures, framework, backend and message."""
    message = message_text(hit)
    family = hit.family
    figures = Figures()
    backend: str | None = None
    if family == formats.TORCH:
        figures, backend = _torch_figures(message), "native"
    elif family == formats.MPS:
        match = _MPS.search(message)
        if match is not None:
            sizes = [None if g is None else _binary_bytes(g) for g in match.groups()]
            ours, others, watermark, wanted = sizes
            figures = Figures(
                wanted, allocated_bytes=ours, allowed_bytes=watermark,
                process_bytes=None if ours is None or others is None else ours + others,
            )
    elif family == formats.TORCH_ASYNC:
        figures, backend = _async_figures(message), "cudaMallocAsync"
    elif family == formats.TENSORFLOW:
        figures = _tensorflow_figures(message, hit)
    elif family == formats.VLLM_STARTUP:
        match = _VLLM_STARTUP.search(message)
        if match is not None:
            free, total, wanted = (to_bytes(match.group(i), "GiB") for i in (1, 2, 3))
            figures = Figures(wanted, total_bytes=total, free_bytes=free)
    elif family == formats.BFC:
        rounded = _BFC_ROUNDED.search(message)
        figures = Figures(
            _plain_bytes(rounded.group(1)) if rounded else _find(_XLA_REQUEST, message)
        )
        if formats.BFC_DUMP_TOTAL.decode("ascii") in message:  # the summary: its Stats below
            limit, in_use = _bfc_stats(hit.after)
            figures = Figures(None, allowed_bytes=limit, allocated_bytes=in_use)
    elif family == formats.TORCH_WARNING:
        warned = _TORCH_WARNING.search(message)
        if warned is not None:
            requested, free, total = (_plain_bytes(warned.group(i)) for i in (1, 2, 3))
            figures = Figures(requested, total_bytes=total, free_bytes=free)
    elif family == formats.HAMI:
        figures = _hami_figures(message)
    elif family == formats.ONNXRUNTIME_LIMIT:
        asked = _ONNX_LIMIT.search(message)
        figures = Figures(_plain_bytes(asked.group(1)) if asked is not None else None)
    elif family == formats.XLA:
        limit, in_use = _bfc_stats(hit.before)
        figures = Figures(_find(_XLA_REQUEST, message), allowed_bytes=limit, allocated_bytes=in_use)
    elif family == formats.CUPY:
        match = _CUPY.search(message)
        old = _CUPY_OLD.search(message)
        if match is not None:
            figures = Figures(
                _plain_bytes(match.group(1)), allocated_bytes=_plain_bytes(match.group(2))
            )
        elif old is not None:  # older CuPy: the request and the device's total
            figures = Figures(_plain_bytes(old.group(1)), total_bytes=_plain_bytes(old.group(2)))
    elif family == formats.ONNXRUNTIME:
        onnx = _ONNX_REQUEST.search(message)
        figures = Figures(_plain_bytes(onnx.group(1)) if onnx is not None else None)
    elif family == formats.VLLM:
        figures = Figures(_find(_VLLM_NEEDED, message), free_bytes=_find(_VLLM_AVAILABLE, message))
    elif family == formats.PADDLE:
        match = _PADDLE.search(message)
        malloc = _PADDLE_MALLOC.search(message)
        if malloc is not None:
            figures = Figures(_binary_bytes(malloc.group(1)))
        legacy = _PADDLE_LEGACY.search(message)
        if match is not None:
            # each size pattern holds three groups (the size, its number, its unit); group 4 is
            # what Paddle 2.x says its allocator holds
            requested, free = _binary_bytes(match.group(1)), _binary_bytes(match.group(5))
            held = match.group(4)
            figures = Figures(
                requested,
                free_bytes=free,
                allocated_bytes=_binary_bytes(held) if held is not None else None,
            )
        elif legacy is not None:
            found = _PADDLE_USED.search(message)
            used = _binary_bytes(found.group(1)) if found is not None else None
            figures = Figures(
                _binary_bytes(legacy.group(1)),
                total_bytes=_plain_bytes(legacy.group(3)),
                free_bytes=_binary_bytes(legacy.group(2)),
                allocated_bytes=used,
                reserved_unallocated_bytes=0 if used is not None else None,
            )

    elif family in (formats.MXNET, formats.CUDA_ERROR) and (
        formats.framework_of(family, message) == "llama.cpp"
    ):
        nearby = [message] + [x.text for x in (*hit.after[:2], *hit.before[-2:])]
        for text in nearby:
            buffer = _GGML_BUFFER.search(text)
            size = _find(_GGML_REQUEST, text) or (buffer and _plain_bytes(buffer.group(1)))
            if size:
                figures = Figures(size)
                break
    elif family == formats.TENSORRT:
        nearby = [message] + [x.text for x in (*hit.before[-3:], *hit.after[:3])]
        for text in nearby:
            if (match := _TENSORRT_REQUEST.search(text)) is not None:
                figures = Figures(_plain_bytes(match.group(1)))
                break
    elif family == formats.CUDA_ERROR and (match := _THEANO.search(message)):
        requested, free, total = (_plain_bytes(match.group(i)) for i in (1, 2, 3))
        figures = Figures(requested, total_bytes=total or None, free_bytes=free if total else None)
    elif family == formats.CUDA_ERROR and (match := _SPLIT_ATTENTION.search(message)):
        # one decimal of GiB: a "0.0" is under 0.05 GiB, not nothing (it raises only when the
        # need is past what is free: the round's review), so a zero is not read
        need, have = (to_bytes(match.group(i), "GiB") or None for i in (1, 2))
        figures = Figures(need, free_bytes=have)
    elif family == formats.CUDA_ERROR and (match := _CATBOOST_REQUEST.search(message)):
        figures = Figures(_binary_bytes(match.group(1) + "MB"))
    elif family in (formats.CUDA_ERROR, formats.DRIVER) and _XGBOOST.search(message):
        below = {m.group(1): _plain_bytes(m.group(2))
                 for x in hit.after[:2] if (m := _XGBOOST_FIGURE.match(x.text))}
        figures = Figures(below.get("Requested"), free_bytes=below.get("Free"))
    elif family in (formats.NCCL, formats.HOST_ALLOC, formats.DRIVER, formats.CUDA_ERROR):
        nearby = [message] + [x.text for x in hit.before[-3:]]
        for text in nearby:
            match = (
                _BYTES_REQUEST.search(text)
                or _DRIVER_REQUEST.search(text)
                or _FAISS_REQUEST.search(text)
                or _FAISS_TAIL.search(text)
                or _DIRECTML_REQUEST.search(text)
                or _GGML_CPU_BUFFER.search(text)
            )
            if match is not None:
                figures = Figures(_plain_bytes(match.group(1)))
                break
            if (match := _NUMPY_REQUEST.search(text)) is not None:
                figures = Figures(to_bytes(match.group(1), match.group(2)))
                break
    rocm = "HIP out of memory" in message or "HIP error" in message or "hipError" in message
    return OomEvent(
        family=family,
        framework=formats.framework_of(family, message),
        message=message,
        figures=_possible(figures),
        backend=backend,
        rocm=rocm,
        rank=hit.line.rank,
    )
