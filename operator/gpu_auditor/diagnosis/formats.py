"""The OOM message families: which log line *is* an out-of-memory failure, and whose.

A family is named after the stack and wording that printed it. ``match_line`` confirms a line
the scanner's keyword prefilter flagged; everything here is anchored on wording that only the
failure itself prints, so a log line that merely mentions out-of-memory handling, TensorFlow's
BFC "The caller indicates that this is not a failure" warning, or a successful run never match.

``PRIORITY`` ranks families by how much they tell: when one failure prints several matching lines
(an exception and its re-raise, NCCL's warning and torch's ``DistBackendError``), the richest
line represents the event.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Final, Protocol

TORCH = "torch"  # CUDA/HIP out of memory. Tried to allocate ... (1.x and 2.x wording)
TORCH_ASYNC = "torch-async"  # backend:cudaMallocAsync: would exceed allowed memory
TORCH_RAW = "torch-raw"  # CUDA error: out of memory (no figures)
TENSORFLOW = "tensorflow"  # OOM when allocating tensor ...
BFC = "bfc"  # Allocator (GPU_0_bfc) ran out of memory trying to allocate X ... requested by op
VLLM_STARTUP = "vllm-startup"  # vLLM: Free memory on device (F/T GiB) on startup is less than ...
XLA = "xla"  # RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...
CUPY = "cupy"  # cupy.cuda.memory.OutOfMemoryError: Out of memory allocating ...
NCCL = "nccl"  # Cuda failure 'out of memory'
CUDA_LIBRARY = "cuda-library"  # CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED
VLLM = "vllm"  # KV cache does not fit
ENGINE_NO_CACHE = "engine-no-cache"  # vLLM/SGLang: the weights leave no memory for a KV cache
ENGINE_WARMUP = "engine-warmup"  # vLLM: CUDA out of memory occurred when warming up sampler ...
DRIVER = "cuda-driver"  # CUDA_ERROR_OUT_OF_MEMORY / cudaErrorMemoryAllocation in an error
HOST_ALLOC = "host-alloc"  # DefaultCPUAllocator: can't allocate memory (host RAM)
HOST_KILLED = "host-killed"  # the kernel killed the job or a DataLoader worker (host RAM)
RAY_KILLED = "ray-killed"  # Ray's memory monitor killed workers as the node's host RAM ran low
TENSORRT = "tensorrt"  # TensorRT's allocator: Error Code 1: Cuda Runtime (out of memory)
PADDLE = "paddle"  # PaddlePaddle: Out of memory error on GPU N. Cannot allocate ...
MXNET = "mxnet"  # MXNet's storage manager: cudaMalloc failed: out of memory (also AITemplate's)
ONNXRUNTIME = "onnxruntime"  # BFCArena::AllocateRawInternal Failed to allocate memory
ONNXRUNTIME_LIMIT = "onnxruntime-limit"  # BFCArena: Available memory of N is smaller than requested
CUDA_ERROR = "cuda-error"  # any stack's own check of a CUDA call: CUDA error 2 ... out of memory
TORCH_WARNING = "torch-warning"  # CUDACachingAllocator: memory allocation failed with OOM
TGI = "tgi"  # text-generation-inference: Not enough memory to handle N prefill tokens
RETRY_EXHAUSTED = "retry-exhausted"  # Accelerate's find_executable_batch_size reached zero
HAMI = "hami"  # HAMi-core (Kubernetes vGPU): Device N OOM <usage + request> / <the pod's limit>
EXCEPTION_NAME = "exception-name"  # IPython's traceback head: OutOfMemoryError   Traceback ...
MPS = "mps"  # Apple's MPS backend: MPS backend out of memory (MPS allocated: ..., max allowed: ...)
SKIPPED = "skipped-batch"  # fairseq's, Boltz's: WARNING: ran out of memory, skipping batch

PRIORITY: Final[dict[str, int]] = {
    TORCH: 10,
    TORCH_ASYNC: 10,
    MPS: 10,
    CUPY: 8,
    XLA: 8,
    PADDLE: 8,
    TENSORRT: 6,
    MXNET: 6,
    ONNXRUNTIME: 6,
    TGI: 8,
    TENSORFLOW: 8,
    VLLM: 8,
    NCCL: 5,
    CUDA_LIBRARY: 5,
    DRIVER: 4,
    TORCH_RAW: 3,
    CUDA_ERROR: 3,
    TORCH_WARNING: 2,
    ENGINE_NO_CACHE: 8,
    ENGINE_WARMUP: 8,
    ONNXRUNTIME_LIMIT: 6,
    HAMI: 8,
    EXCEPTION_NAME: 0,
    SKIPPED: 0,  # a caught OOM: any other failure near it is the one (the round's review)
    HOST_ALLOC: 2,
    RETRY_EXHAUSTED: 2,
    BFC: 2,
    VLLM_STARTUP: 8,
    HOST_KILLED: 1,
    RAY_KILLED: 1,
}

HAMI_ALLOCATE: Final = "cuMemoryAllocate failed"
"""HAMi-core's own allocation through the driver failing: the card, not the pod's vGPU limit."""
TF_CPU_ALLOCATOR: Final = r"[^\n]{0,300}?/device:CPU:\d{1,3} by allocator (?:cpu|mklcpu)\b"
"""The rest of TensorFlow's "OOM when allocating tensor ..." when the op's device is the host's
and its allocator TensorFlow's CPU one: host memory ran out, not the GPU's (not ``gpu_host_bfc``,
the pinned memory the GPU's copies use)."""
DRIVER_CHECK: Final = "CUDA driver error: out of memory"
"""PyTorch's C10_CUDA_DRIVER_CHECK on a driver-API call (cuMemCreate, cuMemMap: the path of
``expandable_segments:True``) that returned CUDA_ERROR_OUT_OF_MEMORY. Those calls fail with
memory free on WSL2 and Jetsons (unslothai/unsloth#2401), and with the GPU full anywhere."""
NVML_ASSERT: Final = "NVML_SUCCESS == r INTERNAL ASSERT FAILED"
"""PyTorch's TORCH_INTERNAL_ASSERT on nvmlDeviceGetComputeRunningProcesses' result, whose only
caller builds the "Process N has X memory in use" part of the OOM message: a cudaMalloc had
failed. The assert's file and line may follow on the next line."""
SKIPPED_BATCH: Final = "ran out of memory, skipping batch"
"""fairseq's trainer's warning (Boltz's predictor copied it): it caught PyTorch's OOM and goes on
without the batch."""
SPLIT_ATTENTION: Final = (
    r"\bNot enough memory, use lower resolution \(max approx\. \d{1,6}x\d{1,6}\)"
)
"""The split attention Stable Diffusion's forks copied (``split_cross_attention_forward``) refusing
to run: even in 64 slices one slice needs more than the GPU has free ("Need: 3.7GB free,
Have:3.1GB free", GiB); its own words name the lever, a lower resolution."""
XLA_CONSTANT: Final = "bytes for new constant"
"""XLA's GPU executable failing to allocate a compiled program's constant on the device."""
TH_HOST_ALLOC: Final = "Torch: not enough memory"
"""TH's (PyTorch before 1.0) host allocator refusing, "... you tried to allocate 2GB. Buy new
RAM!": host memory, like the DefaultCPUAllocator's that replaced it."""

KEYWORDS: Final[tuple[bytes, ...]] = (
    b"out of memory",
    b"Out of memory",
    b"OOM when allocating",
    b"_ALLOC_FAILED",
    b"_ALLOCATION_FAIL",
    b"OUT_OF_MEMORY",
    b"memory for the cache blocks",
    b"KV cache memory",
    b"stored in KV cache",
    b"can't allocate memory",
    b"cudaErrorMemoryAllocation",
    b"hipErrorOutOfMemory",
    b"No executable batch size found",
    b"Killed",
    b"to allocate memory",
    b"Not enough memory to handle",
    b"not enough memory",
    b"Tried to allocate",
    b"killed",
    b"Out Of Memory",
    b"kill event",
    b"Failed to allocate request",
    b"INTERNAL: Failed to allocate",  # XLA's constant (not the bare words: the round's review)
    b"RuntimeException: Failed to allocate",  # ND4J's device allocator, as Java raises it
    b"Cannot malloc",
    b"Free memory on device",
    b"OutOfMemory",
    b"Available memory of",
    b"out_of_memory: ",
    b"killed due to memory pressure",
    b"Task was killed due to the node running low on memory",
    b"memory reserved for KV Cache is -",
    b"to allocate CUDA",
    b"memory for the KV cache",
    b"Not enough memory",
    b"bytes on memory",
    b"memory allocation failed with OOM",
    b"GPU memory used",
    b"Memory on the node (",
    b"due to insufficient GPU memory",
    b"low on resource: memory",
    b"memory mapping failed with OOM",
    b"low memory! at or below",
    b"Memory allocation failed.",
    b"memory::allocation::BadAlloc'",
    b"(-4:Insufficient memory)",
    b"of the memory on node",
    b"to allocate ROCm",
    b"to allocate Vulkan",
    b"to allocate SYCL",
    b"memory_saver.cpp] CUresult error",
    b"EigenAllocator for GPU ran out of memory",
    b"OOM ",
    b"Memory allocation error on worker",
    b"out-of-memory and exited",
    b"not enough GPU video memory",
    b"OUT_OF_DEVICE_MEMORY",
    b"MemoryError: Unable to allocate",
    HAMI_ALLOCATE.encode(),
    b"OOM-killed",
    b"Out of GPU memory",
    b"LSF memory usage limit",
    b"MemoryError: std::bad_alloc: RMM failure at:",
    b"allocMemorySpace(faiss::gpu::MemorySpace",
    b"_alloc_buffer: failed to allocate buffer of size",
    b"to allocate CPU buffer of size",
    b"Memory not available to allocate buffer",
    # gfortran's runtime (os_error with ENOMEM); IPython's traceback head, the name padded to its
    # column (a shorter pad, or "system error" alone, cost 20-66x on logs of such lines: the
    # round's review F5)
    b"Operating system error: Cannot allocate memory",
    b"MemoryError                ",
)
"""Byte strings at least one of which every family's failure line contains (second filter)."""


def _any_of(words: list[str]) -> str:
    """One regex that finds any of ``words``, their common prefixes written once: Python's
    ``re`` tries the alternatives of a flat ``a|b|c`` one by one at each position, so every
    keyword added to a flat alternation slowed the scan of lines that hold an anchor (public
    sets' "memory" lines: 40 -> 56 keywords cost 10 % of the scan's throughput). A word that
    another word starts with ends the branch: finding the shorter one is enough."""
    tree: dict[str, dict[str, Any]] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        parts = [re.escape(char) + branch(rest) for char, rest in sorted(node.items())]
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

    return branch(tree)


KEYWORD_PATTERN: Final = _any_of([k.decode("ascii") for k in KEYWORDS])
"""``KEYWORDS`` as one pattern (str; the scan compiles its bytes)."""

ANCHORS: Final[tuple[bytes, ...]] = (
    b"emory",
    b"MEMORY",
    b"OOM ",
    b"ALLOC_FAILED",
    # cuRAND's ALLOCATION_FAILED, OpenCL's ALLOCATION_FAILURE: their own anchor, not a shorter
    # "ALLOC", which a logger's GPU_MEM_ALLOCATED on every line made 6x slower (the review)
    b"ALLOCATION_FAIL",
    b"in KV cache",
    b"executable batch",
    b"Killed",
    b"to allocate",
    b"killed",
    b"Memory",
    b"kill event",
    b"Cannot malloc",
)
"""Fewer, shorter strings, one inside every keyword: the scan searches the whole input only for
these (each search is one C pass over the chunk), then checks the hit's line for a keyword."""


LOCALIZED_KILLED: Final[tuple[str, ...]] = (
    "Забіты", "Безусловно прекъснат", "Matat", "Zabit (SIGKILL)", "Dræbt", "Getötet",
    "Σκοτώθηκε", "Buĉita", "Terminado (killed)", "Tapettu", "Processus arrêté", "Matado",
    "Ubijen", "Kilőve", "Terbunuh", "Ucciso", "強制終了", "죽었음", "Nutraukta (killed)", "Drept",
    "Geëlimineerd", "Unicestwiony", "Morto", "Убито", "Zabitý", "Pobit", "Убијен", "Dödad",
    "Süreç durduruldu", "Вбито", "Bị buộc kết thúc", "已杀死", "強制結束",
)  # fmt: skip
"""What a shell in another language prints for a SIGKILLed foreground job instead of "Killed":
``strsignal(SIGKILL)`` in every translation glibc 2.36 ships (libc-l10n's ``libc.mo``, msgid
"Killed"; public20 n-009's "Processus arrêté", public22 v-004's and x-005's "已杀死"). No anchor
of the scan is in them (one more anchor is one more pass over every chunk), so the scan reads
them on the log's last line only (``logtext.LogScanner.finish``), where the shell prints it."""

BARE_MEMORY_ERROR_PATTERN: Final = r"^[ \t]{0,8}MemoryError:?[ \t]{0,8}$"
"""Python's own MemoryError with nothing after it: CPython could not get host memory (a
library's MemoryError, pyopencl's or RMM's, prints its module and a message). Read on the log's
last line only, where an uncaught one ends the job: a test runner's or a caught one has the job's
own lines after it (the review's cases 03-05), and no keyword of the scan is in it (one on every
line that names MemoryError cost 45x on such a log: the review)."""

HOST_REFUSED_PATTERN: Final = (
    r"^[ \t]{0,8}(?:[\w.]{1,60}: )?\[Errno 12\] Cannot allocate memory\b|"
    r"\[WinError 1455\]|\bThe paging file is too small for this operation to complete\b|"
    r"\bDie Auslagerungsdatei ist zu klein, um diesen Vorgang durchzuführen\b|"
    # NumPy's refused array as an application printed it, after at most two error-level words
    # ("ERROR: Unable to allocate 3.60 GiB for an array with shape ...": public34 l-018), and
    # nothing after NumPy's own words (not "INFO: ...; falling back": the round's review)
    r"^[ \t]{0,8}(?:(?:ERROR|Error|error|CRITICAL|Critical|FATAL|Fatal|Exception): ){0,2}"
    r"Unable to allocate \d{1,12}\.?\d{0,6} ?(?:[KMGT]iB|bytes) for an array with shape "
    r"\([^()\n]{0,200}\) and data type \w{1,32}[ \t]{0,8}$"
)
"""The host's kernel refusing memory as Python raises it: Linux's ENOMEM (a fork, an mmap:
"OSError: [Errno 12] Cannot allocate memory") and Windows' commit limit (ERROR_COMMITMENT_LIMIT,
1455, "The paging file is too small ...", in English and German), as the traceback's last line
(public12 c-021, public13 g-026, public23 z-023, public28 x-011). Like the bare ``MemoryError``,
read on the log's last line only: no keyword of the scan is in them, and a caught one has the
job's own lines after it. (The fifth round's review dropped ENOMEM read anywhere: a limit, not the
OOM killer, may refuse it (overcommit, ``ulimit -v``); it is host memory refused all the same, and
the three threads that settled it were memory, none a limit on mappings.) NumPy's "Unable to
allocate X for an array with shape" is read there too when an application printed it without the
exception's name (the name's own line is HOST_ALLOC's anywhere): NumPy's ``_ArrayMemoryError``,
host memory refused, as in all eleven threads of the public sets that print it."""

_LOCALIZED_KILLED_WORDS: Final = "|".join(map(re.escape, LOCALIZED_KILLED))
LOCALIZED_KILLED_PATTERN: Final = r"^[ \t]{0,8}(?:" + _LOCALIZED_KILLED_WORDS + r")[ \t]{0,8}$"
"""One localized "Killed" alone on its line (not after a "]" as the English one may be: several
of these are common words, "[GAME] Morto" is a game's log: the round's review)."""

KILLED_AFTER_BAR_PATTERN: Final = (
    r"\b\d{1,9}/\d{1,9}\b[^\n]{0,80}?(?:/s\b|/it\b|ETA:)[^\n]{0,80}?(?<=[\ds\]█▏▎▍▌▋▊▉])"
    r"(Killed|" + _LOCALIZED_KILLED_WORDS + r")[ \t]{0,8}$"
)
"""A shell's "Killed" (or its translation) glued to a progress bar drawn without a newline: the
bar's count (N/M), then its rate or its ETA (tqdm's "10.81it/s]", mmcv's "1.5 task/s, ... ETA:
2621s", Keras's "- ETA: 365s - loss: 2.1371"), the word right after its last character, no
space nor colon between (public15 v-027, public23 y-011, public27 j-005). Read on the log's last
line only, where the shell prints it (``logtext.LogScanner``), and there the word alone is
confirmed: a line's own ": Morto" or "| Status: Ucciso" is not (the round's review)."""


BFC_DUMP_TOTAL: Final = b"Sum Total of in-use chunks: "
"""The BFC allocator's (TensorFlow's, XLA's) memory summary, which it prints only on the failing
path, after "ran out of memory trying to allocate ..." and before the framework's error
(``BFCAllocator::DumpMemoryLog``, called from ``AllocateRawInternal`` when an allocation it may
not fall back from fails). Posts often quote the summary alone (public12 e-023, public22 x-019,
x-023: cut before the error). No anchor of the scan is in it: read only where the scan found no
failure, from the log's last ``logtext.TAIL_BYTES`` (``logtext.LogScanner.finish``)."""

TAIL_WORDINGS: Final[tuple[bytes, ...]] = (
    BFC_DUMP_TOTAL,
    # NVIDIA DALI's device allocator (its CUDABadAlloc: "Can't allocate N bytes on device D.",
    # or its bare what(), "CUDA allocation failed"), and nvJPEG's allocator failing inside DALI's
    # decoder: the last lines of DALI's "Critical error in pipeline" (public24 f-004, f-005,
    # f-007, f-008)
    b"Can't allocate ",
    b"CUDA allocation failed",
    b"NVJPEG_STATUS_ALLOCATOR_FAILURE",
    # PyTorch's caching allocator asserting inside the function that lists the GPU's processes
    # for its OOM message (reportProcessMemoryInfo): NVML refused the list (a MIG slice, Jetson,
    # an unprivileged container), so the OOM surfaces as this assert (public33 j-001, j-002;
    # pytorch/pytorch#112377, #185240, #197312)
    NVML_ASSERT.encode(),
)
"""Failure wordings with no anchor of the scan in them, read the way ``BFC_DUMP_TOTAL`` is: only
where the scan found no failure, the last of them in the log's last ``logtext.TAIL_BYTES`` (an
anchor more is one more pass over every chunk of every log)."""


class _Searcher(Protocol):
    """What ``find_failure`` needs of a family's pattern (a compiled regex has it)."""

    @property
    def pattern(self) -> str: ...

    def search(
        self, string: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[str] | None: ...


class _WordBeforeCode:
    """DRIVER's pattern, ``(?:Error|...|failed to allocate)\\b.{0,200}?(?:<code>)``, searched code
    first: the regex tries up to 200 characters after every ``Error`` of a line (a line of
    ``Error`` words costs some 200 steps a character); here each code looks back once, over at
    most ``_REACH`` characters. It finds the same leftmost match start as the regex. The words
    include TensorFlow's stream executor's "failed to allocate X (N bytes) from device:
    CUDA_ERROR_OUT_OF_MEMORY", cuDNN's "There was an error before creating cudnn handle", and a
    device context that could not be created ("Failed to create stream executor for device
    CUDA:0: : CUDA_ERROR_OUT_OF_MEMORY", XLA/JAX on a GPU another process had filled, measured
    on the H200: evaluation/results/library-errors; TensorFlow's "failed call to
    cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY")."""

    pattern: Final = (
        r"(?:Error|ERROR|error|INTERNAL|Exception|exception|failed to allocate|"
        r"failed to alloc(?! \d{1,20} bytes on host)|Failed|failed call to)\b.{0,200}?"
        r"(?:CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|hipErrorOutOfMemory)"
    )
    _code: Final = re.compile(
        r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|hipErrorOutOfMemory"
    )
    _word: Final = re.compile(
        r"(?:Error|ERROR|error|INTERNAL|Exception|exception|failed to allocate|"
        r"failed to alloc(?! \d{1,20} bytes on host)|Failed|failed call to)\b"
    )
    _GAP: Final = 200
    _LONGEST: Final = len("failed to allocate")
    _REACH: Final = _GAP + _LONGEST

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        line, end = string, min(len(string), endpos)
        seen = pos  # words starting before this were looked at for an earlier code: none fit
        for code in self._code.finditer(line, pos, end):
            at = code.start()
            start = max(seen, at - self._REACH)
            seen = max(pos, at + 1 - self._LONGEST)
            # one character past ``at`` so that ``\b`` sees what follows the word
            while (word := self._word.search(line, start, min(at + 1, end))) is not None:
                fits = word.end() <= at and at - word.end() <= self._GAP
                if fits and line.find("\n", word.end(), at) < 0:
                    return word
                start = word.start() + 1
        return None


KEY_CHARS: Final = 300
"""Characters of a failure line, from its wording on, that identify one failure message."""

MAX_MATCH_CHARS: Final = 256
"""The longest text any family's pattern matches (DRIVER's: a 9-letter word, up to 200
characters, a 25-letter code). Every pattern here is bounded: a long line cannot make one
attempt expensive."""

VLLM_FREE_ON_DEVICE: Final = r"Free memory on device (?:[\w:]{1,24} )?\("
"""vLLM's start check up to its figures; 0.11+ names the device ("on device cuda:0 (")."""
FAISS_ALLOC_FAIL: Final = r"\bStandardGpuResources: alloc fail\b"
"""Faiss 1.7+'s resources refusing an allocation (its figures follow on the line)."""
FAISS_REQUEST_TAIL: Final = r"\bsize (\d{1,32}) bytes \(cudaMalloc error out of memory \[2\]\)"
"""The end of that refusal, Faiss's own format of cudaMalloc's error, with the request."""
XGBOOST_ALLOC_ERROR: Final = r"\bMemory allocation error on worker \d{1,6}: "
"""XGBoost's device allocator's LOG(FATAL); its figures follow on the next two lines."""
CATBOOST_OUT_OF_MEMORY: Final = r"\bError: Out of memory\. Requested "
"""CatBoost's pool failing, before "<request>[ MB]; Free <free>[ MB]"."""

_FAMILIES: Final[tuple[tuple[str, _Searcher], ...]] = (
    (
        TORCH,
        re.compile(
            # (Intel's XPU backend prints the same message: public21 t-006, t-014; Huawei
            # Ascend's torch_npu its 1.x form, "(NPU 0; ...": public24 c-002)
            r"\b(?:CUDA|HIP|XPU|NPU) out of memory\. (?:Tried to allocate|GPU \d)|"
            # ...cut to its 1.x figures' first, "(GPU 1; 14.76 GiB total capacity;)" (public7
            # z-023)
            r"\b(?:CUDA|HIP) out of memory\. ?\(GPU \d{1,5}; [\d.]{1,24} [KMG]iB total capacity\b|"
            # ...its period lost in a paste (public10 q-024)
            r"\b(?:CUDA|HIP) out of memory Tried to allocate [\d.]{1,24} [KMG]iB\b|"
            r"\b(?:CUDA|HIP) out of memory\.\s{0,64}$|"
            r"OutOfMemoryError: (?:CUDA|HIP|XPU) out of memory|"
            # ...torch 1.x's exception cut at its first sentence, its period lost (public32
            # f-014, g-005)
            r"\bRuntimeError: (?:CUDA|HIP) out of memory[ \t]{0,8}$|"
            # its driver-API check, as the line's end (public33 k-010, after its blind score;
            # not in a warning's parentheses: SGLang goes on after "(CUDA driver error: ...)")
            r"(?<!\()\b" + DRIVER_CHECK + r"[ \t]{0,8}$|"
            # the same message lower-cased, as people paste it into issue titles
            r"\b(?:cuda|hip) out of memory[.,] ?[Tt]ried to allocate \d|"
            # the message pasted from its second sentence (1.x: "(GPU 0; 7.92 GiB total ...")
            r"^Tried to allocate [\d.]{1,24} [KMG]iB \(GPU \d{1,5}; |"
            # ...or from its 2.x second sentence, after words of the poster's own
            r"(?<!memory\. )\bTried to allocate [\d.]{1,24} [KMG]iB\. GPU \d{1,5}\b"
        ),
    ),
    # PyTorch's MPS allocator at its high watermark (Apple silicon, unified memory; public21's
    # t-001, t-008, t-010, t-018 to t-023, t-027)
    (MPS, re.compile(r"\bMPS backend out of memory \(MPS allocated: ")),
    (
        TORCH_ASYNC,
        re.compile(
            r"would exceed allowed memory\.? \(out of memory\)|"
            # the same message cut to its first words, as ComfyUI (which runs cudaMallocAsync)
            # prints it (public10 r-025)
            r"\bOutOfMemoryError: Allocation on device(?: \d{1,5})?[ \t]{0,8}$"
        ),
    ),
    (
        TENSORFLOW,
        re.compile(
            r"\bOOM when allocating tensor\b(?!" + TF_CPU_ALLOCATOR + r")|"
            # TensorFlow 1's Eigen allocator aborting the process
            r"\bEigenAllocator for GPU ran out of memory when allocating\b|"
            # TensorFlow 2's eager ops
            r"ResourceExhaustedError: {0,4}"
            # (TensorFlow 2.11 on names the op's function first: public24 f-009)
            r"(?:\{\{function_node [^{}\n]{1,300}\}\} {0,4})?failed to allocate memory\b"
        ),
    ),
    # the BFC allocator (TensorFlow, XLA) failing an op's allocation; its "not a failure" warning
    # says "caller" instead. The framework's own error, when it follows, is the richer line.
    (
        BFC,
        re.compile(
            r"ran out of memory trying to allocate [^\n]{0,64}requested by op\b|"
            r"ran out of memory trying to allocate [\d.]{1,24}[KMGT]?i?B \(rounded to \d{1,20}\)|"
            # TensorFlow 1.x's failing path, before it printed the rounded size (its "not a
            # failure" warning has no summary to follow)
            r"ran out of memory trying to allocate [\d.]{1,24}[KMGT]?i?B\.\s{1,4}"
            r"Current allocation summary follow|"
            # the summary itself (read only where a log was cut inside it: BFC_DUMP_TOTAL)
            + BFC_DUMP_TOTAL.decode("ascii") + r"\d"
        ),
    ),
    (
        XLA,
        re.compile(
            r"RESOURCE_EXHAUSTED:.{0,80}?(?:Out of memory|out of memory|"
            r"CUDA_ERROR_OUT_OF_MEMORY)|"
            # older XLA/JAX releases
            r"Resource exhausted: Out of memory while trying to allocate|"
            # bindings that print XLA's status without its code (Elixir's EXLA; public15 v-021)
            r"\bOut of memory while trying to allocate \d{1,20} bytes\.|"
            r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Failed to allocate request for \d|"
            # XLA's TPU compiler before its "XLA:TPU compile permanent error" (TensorFlow on
            # TPUs, 2019: tensorflow/tpu#598; xlacompile.py)
            r"\bCompilation failure: Ran out of memory in memory space [a-z]{1,12}\.|"
            # a compiled program's constant, which XLA's GPU executable allocates on the device
            # outside the BFC pool JAX preallocated (StreamExecutor's Allocate returned null:
            # public35 n-010; XLA_PYTHON_CLIENT_PREALLOCATE=false fixed google-research/scenic's
            # other threads)
            r"\bINTERNAL: Failed to allocate \d{1,20} " + XLA_CONSTANT + r"\b"
        ),
    ),
    (
        PADDLE,
        re.compile(
            r"Out of memory error on GPU \d{1,5}\. Cannot allocate|"
            r"Cannot malloc [\d.]{1,24} MB GPU memory|"
            # the legacy and the retry allocators' checks
            r"\bCannot allocate [\d.]{1,24}[KMG]?B in GPU \d{1,5}, available|"
            # its allocator's exception uncaught by a C++ program (Paddle Inference)
            r"\bterminate called after throwing an instance of "
            r"'paddle::memory::allocation::BadAlloc'"
        ),
    ),
    (
        TENSORRT,
        re.compile(
            r"Error [Cc]ode 1: [Cc]uda Runtime \(out of memory\)|"
            r"\bCuda Error in \w{1,40}: 2 \(out of memory\)|"  # its safe runtime's allocator
            # TensorRT-LLM's executor, one of its components (KV cache) not created
            r"\bExecutor creation failed due to insufficient GPU memory\b"
        ),
    ),
    (
        MXNET,
        re.compile(
            r"cudaMalloc(?: retry)? failed: out of memory|"
            # its pooled storage manager before 1.0
            r"storage_manager\.h:\d{1,6}: Memory allocation failed\.|"
            r"DeviceMalloc\([^)\n]{0,64}\) API call failed: out of memory"
        ),
    ),
    (
        ONNXRUNTIME,
        re.compile(
            # ONNX Runtime 1.15 on prints the method's signature before its message
            r"BFCArena::AllocateRawInternal(?:\([^)\n]{0,160}\))? Failed to allocate memory for "
            r"requested buffer"
        ),
    ),
    # HAMi-core, the library HAMi injects into a pod to enforce its vGPU memory
    # (nvidia.com/gpumem): an allocation past the pod's limit is refused (allocator.c's
    # oom_check: "Device %d OOM %lu / %lu", the usage with the request, then the limit;
    # public12 f-016, where torch then said only "CUDA error: unrecognized error code")
    (
        HAMI,
        re.compile(
            r"\[HAMI-core ERROR \([^\n]{0,160}?\)\]: Device \d{1,3} OOM \d{1,20} / \d{1,20}\b"
        ),
    ),
    # IPython heads a traceback with the exception's bare name (public13 k-007, public9 n-007):
    # torch's, CuPy's or Ray's (a host kill) OutOfMemoryError, so the least telling of all (any
    # other wording of the failure, Ray's kill line included, represents it)
    # (and Python's MemoryError's: a host refusal or a GPU library's, RMM's and CuPy's raise it
    # too: of the sets' nine such heads, one host, three GPU, five never settled; public37 u-029,
    # cut before its message)
    (
        EXCEPTION_NAME,
        re.compile(r"^(?:OutOfMemory|Memory)Error {2,64}Traceback \(most recent call last\)"),
    ),
    # fairseq's trainer (and Boltz's predictor, which copied it) catching PyTorch's OOM and
    # skipping the batch: the failure only where the log ends at it (aftermath.py; public32
    # f-021, f-027), and of the lowest rank, so a later failure near it is the one read
    (SKIPPED, re.compile(r"\bWARNING: " + SKIPPED_BATCH + r"\b")),
    # the arena's own limit (the CUDA provider's gpu_mem_limit) reached, not the device
    (
        ONNXRUNTIME_LIMIT,
        re.compile(r"Available memory of \d{1,20} is smaller than requested bytes"),
    ),
    (
        TGI,
        re.compile(
            r"Not enough memory to handle \d{1,9} (?:total tokens with \d{1,9} )?prefill tokens"
        ),
    ),
    (
        VLLM_STARTUP,
        # vLLM 0.11+ names the device: "Free memory on device cuda:0 (22.65/79.18 GiB)"
        re.compile(
            VLLM_FREE_ON_DEVICE + r"[\d./ ]{1,32}GiB\) on startup is less than desired"
        ),
    ),
    (
        CUPY,
        re.compile(
            r"OutOfMemoryError: (?:Out of memory allocating|out of memory to allocate) \d|"
            # Chainer's trainer prints the message without its name (public10 s-015)
            r"\bout of memory to allocate \d{1,20} bytes \(total \d{1,20} bytes\)|"
            # CuPy 7's wording, its figures with thousands separators (under Chainer's trainer)
            r"\bOut of memory allocating [\d,]{1,26} bytes \(allocated so far: [\d,]{1,26} bytes\)"
        ),
    ),
    (NCCL, re.compile(r"Cuda failure (?:\d{1,4} )?'?out of memory'?")),
    (
        CUDA_LIBRARY,
        re.compile(
            r"\b(?:CUBLAS|CUDNN|CUSOLVER|CUFFT|CUSPARSE)_STATUS_ALLOC_FAILED\b|"
            # cuFFT's own name for it; cuRAND's (its generator's memory: Caffe's check in
            # BVLC/caffe#1026, CuPy's CURANDError under spaCy in public21 r-009)
            r"\bCUFFT_ALLOC_FAILED\b|\bCURAND_STATUS_ALLOCATION_FAILED\b|"
            # OpenCL's failure to allocate a buffer's storage on the device (pyopencl's
            # MemoryError under tinygrad: public24 c-023), not its OUT_OF_RESOURCES, which
            # NVIDIA's OpenCL also returns for a kernel's faults
            r"\b(?:CL_)?MEM_OBJECT_ALLOCATION_FAILURE\b|"
            # MIOpen (ROCm's cuDNN) refusing a buffer larger than hipMemGetInfo's free memory
            # (its Handle::Create; public34 m-023: Keras on TensorFlow-ROCm)
            r"\bMIOpen Error: [^\n]{0,300}?\bMemory not available to allocate buffer: \d{1,20}\b"
        ),
    ),
    (
        VLLM,
        re.compile(
            r"larger than the available KV cache memory|"
            r"larger than the maximum number of tokens that can be stored in KV cache"
        ),
    ),
    # the engine's memory budget (vLLM's gpu_memory_utilization, SGLang's --mem-fraction-static)
    # is spent on the weights before any KV cache: the budget is the limit that bites
    # vLLM's warm-up of its sampler (or pooler) with max_num_seqs dummy requests after its
    # budget went to the weights and the KV cache; it names its levers (public26 e-017)
    (
        ENGINE_WARMUP,
        re.compile(
            r"\bCUDA out of memory occurred when warming up (?:the )?\w{1,20} with \d{1,9}\s{1,8}"
            r"dummy requests\b"
        ),
    ),
    (
        ENGINE_NO_CACHE,
        re.compile(
            r"No available memory for the cache blocks|"
            r"leave no GPU memory for the KV cache under --mem-fraction-static|"
            r"Not enough memory\. Please try to increase --mem-fraction-static|"
            # vLLM's profile, printed before the error: the budget less the weights is negative
            r"the rest of the memory reserved for KV Cache is -\d|"
            # ...and V1's (public11 u-021)
            r"\bAvailable KV cache memory: -\d"
        ),
    ),
    (DRIVER, _WordBeforeCode()),
    (
        TORCH_RAW,
        re.compile(
            r"\b(?:CUDA|HIP) [Ee]rror: out of memory\b|"
            # torch 0.x's THC wording; CTranslate2 (faster-whisper)
            r"\bcuda runtime error \(2\) : out of memory|"
            r"\b(?:CUDA|cuda) failed with error out of memory\b|"
            # PyTorch's OOM re-raised by the job with its own words on when it ran out (GPL's
            # "CUDA out of memory during query generation (...)": public37 u-022), at a line's
            # start: in this lower family, so PyTorch's own message with its figures before it
            # is the one read (the round's review F1), and not a test's "E   RuntimeError" (F2)
            r"^[ \t]{0,8}RuntimeError: (?:CUDA|HIP) out of memory (?:during|while|when|after) \w|"
            # PyTorch's ExceptionWrapper re-raising a replica's OOM (nn.DataParallel), its own
            # message and figures cut away (public26 e-021)
            r"\bOutOfMemoryError: Caught OutOfMemoryError in (?:replica \d{1,4} on device "
            r"\d{1,4}|DataLoader worker process \d{1,4})\b|"
            # torch 0.x's check, printed before its RuntimeError
            r"\bTHCudaCheck FAIL file=(?![^\n]{0,200}?HostAllocator)[^\n]{1,200}? error=2 : out of "
            r"memory\b|"
            # THC's error without its "cuda runtime error (2) :" head, as an issue's title keeps
            # it: cudaGetErrorString's words, then THC's device-side source (public21 s-025,
            # public25 a-016); not its pinned host allocator
            r"(?:^|[\s:])out of memory at \S{0,200}/THC/(?!\S{0,100}HostAllocator)\S{1,100}\.cu:\d|"
            # its OOM message lost to an assert listing the GPU's processes (TAIL_WORDINGS)
            r"\b" + NVML_ASSERT + r" at\b"
        ),
    ),
    # a CUDA call's out-of-memory error (code 2) as another stack's own check prints it: llama.cpp
    # and AMReX ("CUDA error 2 at/in ...: out of memory"), Caffe and MXNet ("Check failed: error
    # == cudaSuccess (2 vs. 0) out of memory"), TurboMind ("CUDA runtime error: out of memory"),
    # XLA's kernels ("cudaFuncSetAttribute(...): out of memory"). No figures: the kind comes from
    # the phase and the node, or stays unknown.
    (
        CUDA_ERROR,
        re.compile(
            r"\b(?:CUDA|Cuda|GPU) (?:[Ee]rror|ERROR|failure)\b:? ?\(?2?\)?[^\n]{0,200}?"
            r"\bout of memory\b|"
            # (its period dropped in a retyped post: public27 j-018)
            r"\bcudaSuccess \(2 vs\.? 0\)[^\n]{0,120}?\bout of memory\b|"
            r"\bCUDA [Rr]untime [Ee]rror:? ?\(?2?\)?:? ?out of memory\b|"
            # dlib's check; OpenCV's CUDA module (4.x, and 2.4's wording)
            r"\bError while calling cuda\w{1,40}\([^\n]{0,160}?\bcode: 2, reason: out of memory\b|"
            r"\(-217:Gpu API call\) out of memory\b|\bGpu API call \(out of memory\)|"
            # Vulkan's device memory refused, as Omniverse Kit (Isaac Sim) logs it (public23
            # b-002, b-018, b-025); not the bare enum nor vulkan-hpp's exception: llama.cpp's
            # Vulkan backend prints that one and falls back to host memory (the census's review)
            r"\bVkResult: ERROR_OUT_OF_DEVICE_MEMORY\b|"
            # ...and TVM's Vulkan runtime failing its check on it (MLC LLM: public29 r-005)
            r"\bCheck failed: \(__e == VK_SUCCESS\) is false: Vulkan Error, code=-2: "
            r"VK_ERROR_OUT_OF_DEVICE_MEMORY\b|"
            # Isaac Gym's PhysX CUDA check (public23 b-024); a CUDA check macro's "Error <string>
            # at line N in file F" (bitsandbytes' ops.cu, public23 z-019); heFFTe's (a-012)
            r"\bGym cuda error: out of memory\b|"
            # the CUDA SDK samples' cutil check, which projects copied (InfiniTAM's ORUtils:
            # public37 t-026): "F(N) : cudaSafeCall() Runtime API error [2]: out of memory."
            r"\bcudaSafeCall\(\) Runtime API error (?:2)?: out of memory\b|"
            # PhysX's GPU allocator (Isaac Gym, Isaac Sim) with cudaErrorMemoryAllocation (2)
            # (public36 r-017, r-024; its fixed buffers' overflows are not memory running out)
            r"\bPxgCudaDeviceMemoryAllocator fail to allocate memory \d{1,20} bytes!! Result = 2\b|"
            # the split attention of Stable Diffusion's forks (AUTOMATIC1111, InvokeAI, ComfyUI's
            # sub-quadratic fallback) when 64 slices still need more than is free (public35
            # o-029)
            + SPLIT_ATTENTION + r"|"
            r"\bError out of memory at line \d{1,6} in file [^\n]{1,300}?\.cuh?\b|"
            # ...and the same check with its source file before the line (CHARMM's FFTDock:
            # public32 f-022)
            r"\bError out of memory at [^\s:]{1,300}\.cuh?:\d{1,6}\b|"
            r"\bcudaMalloc\(\) failed with message: out of memory\b|"
            # DALI's (TAIL_WORDINGS)
            r"\bCan't allocate \d{1,20} bytes on device \d{1,3}\.[ \t]{0,8}$|"
            r"^[ \t]{0,8}(?:what\(\):[ \t]{1,8})?CUDA allocation failed[ \t]{0,8}$|"
            r"\bNVJPEG error \"5\" : NVJPEG_STATUS_ALLOCATOR_FAILURE\b|"
            # Theano's device allocator, with the driver's figures (public14 r-012, public21
            # r-014, public24 f-019; glued to a Keras bar's last figure in f-019: no word
            # boundary before it)
            r"Error allocating \d{1,20} bytes of device memory \(out of memory\)|"
            # torch-directml (Windows, AMD and Intel cards through DirectML): its allocator's
            # refusal (public21 t-022, t-024; ComfyUI#3869, Fooocus#1088 quote it too)
            r"\bCould not allocate tensor with \d{1,20} bytes\. There is not enough GPU video "
            r"memory available\b|"
            # Faiss's GPU resources; a thrust algorithm's system_error (XGBoost's gpu_hist)
            r"\b[Ff]ailed to cudaMalloc \d{1,20} bytes(?: on device \d{1,3})? "
            r"\(error 2 out of memory|"
            # ...and Faiss 1.3's assertion, before it printed the error (public31 c-029; the
            # census's Faiss 1.3 abort)
            r"\bFaiss assertion 'cudaMalloc\(p, size\) == cudaSuccess' failed in [^\n]{0,200}?"
            r"\ballocMemorySpace\b[^\n]{0,200}?details: Failed to cudaMalloc \d{1,20} bytes\b|"
            # ...and Faiss 1.7+'s (its bench_gpu_1bn.py quotes one)
            + FAISS_ALLOC_FAIL + r"[^\n]{0,180}?\(cudaMalloc error out of memory "
            r"\[2\]\)|"
            # (its request's line alone, where the message broke before it: public26 h-002)
            + FAISS_REQUEST_TAIL + "|"
            r"\bthrust::system::system_error'\s{0,8}what\(\):[^\n]{0,180}?: out of memory\b|"
            # torch_memory_saver (SGLang, verl): cuMemCreate's CUresult 2, CUDA_ERROR_OUT_OF_MEMORY
            # (its later wording "CUresult error: 2 (out of memory) ... func=cu_mem_create":
            # public36 s-002, slime)
            r"\[torch_memory_saver\.cpp\] CUresult error(?:\s{1,4}result=|: )2\b|"
            # TensorRT-LLM's own check ("CUDA runtime error in <call>: out of memory"), the
            # gpuErrchk idiom's "GPUassert: <error> <file> <line>", Thrust's algorithms
            r"\bCUDA runtime error in [^\n]{1,160}?: out of memory\b|\bGPUassert: out of memory\b|"
            r"\bparallel_for failed: out of memory\b|"
            r"\bcuda[A-Z]\w{1,40}\([^\n]{0,160}?\)\s{0,4}:\s{0,4}out of memory\b|"
            # tiny-cuda-nn (instant-ngp, nerfstudio): its cudaMalloc check (public12 c-008)
            r"\bcuda[A-Z]\w{1,40}\([^\n]{0,160}?\) failed with error out of memory\b|"
            # kmcuda's Python binding (public12 e-030)
            r"\bMemoryError: Failed to allocate memory on GPU\b|"
            # ND4J's (Deeplearning4j's) CUDA allocator (public34 m-011; deeplearning4j#8253)
            r"\bFailed to allocate \d{1,20} bytes from DEVICE \[\d{1,3}\] memory\b|"
            # Legion/Realm (Legate, cuPyNumeric): the framebuffer memory of a GPU
            r"Failed to allocate \d{1,20} bytes on memory \w{1,24} \(of kind GPU_FB_MEM\)|"
            # Thrust's allocator; RAPIDS' RMM (its pool's own limit, or the device)
            r"\bbad_alloc: cudaErrorMemoryAllocation\b|\bout_of_memory: (?:RMM failure|CUDA error)|"
            # ...RMM before its out_of_memory type, as Python's MemoryError (public7 z-016; not
            # Java's wrapper in a Spark task, which Spark retries: public31 c-015 stays unread)
            r"\bMemoryError: std::bad_alloc: RMM failure at:[^\n]{1,300}?: Maximum pool size "
            r"exceeded\b|"
            # Apple's Metal refusing a command buffer its memory (MLX, llama.cpp's Metal backend:
            # public31 a-002, d-021)
            r"\bInsufficient Memory \(0{0,8}8:kIOGPUCommandBufferCallbackErrorOutOfMemory\)|"
            # Julia's CUDA.jl (OutOfGPUMemoryError; its usage lines follow) (public28 z-018)
            r"\bOut of GPU memory trying to allocate [\d.]{1,24} [KMGT]?i?B\b|"
            # the CUDA driver API's failure as PyCUDA raises it (public22 u-001, u-002: cryoSPARC);
            # the runtime's error name with its string, as many checks print them (u-010)
            # (not cuMemHostAlloc: pinned host memory, the review: cryosparc-issues#258)
            r"\bcuMemAlloc(?:Pitch|Managed)?(?:_v2)? failed: out of memory\b|"
            r"\bcudaErrorMemoryAllocation: out of memory\b|"
            # RELION's CUDA check and its own allocator (public22 u-003, u-004, u-006)
            r"\bout of memory in [^\n]{1,200}? at line \d{1,6} \(error-code 2\)|"
            r"\bCudaCustomAllocator out of memory\b|"
            # quantum simulators on the GPU: PennyLane Lightning's CUDA check, NVIDIA cuStateVec
            # (public22 u-007, u-008, u-009)
            r"\bError in PennyLane Lightning: out of memory\b|\[custatevec\] %?out of memory\b|"
            # HAMi-core's own allocation through the driver failing with CUDA_ERROR_OUT_OF_MEMORY:
            # the card, which HAMi shares between pods, not the pod's vGPU limit (its refusal is
            # the HAMI family) (public26 e-007)
            r"\[HAMI-core ERROR \([^\n]{0,160}?\)\]: " + HAMI_ALLOCATE + r" res=2\b|"
            # HugeCTR's check: "Runtime error: " + cudaGetErrorString + its source file and line
            # (public20 m-010)
            r"\bRuntime error: out of memory [^\s]{1,200}\.(?:cuh?|[ch]pp|h):\d{1,6}\b|"
            # a check that prints its source file and line, then cudaGetErrorString's words and
            # nothing more, as the error itself (torch 1.x's profiler: public25 a-026), not a
            # relay of another check's line (ollama's "llama.go:455: 2 at ...cu:N: out of memory");
            # a CUDA source (.cu, or a C++ file named for CUDA), not a host allocator's (the
            # review: SQLite's store, a pinned staging pool print the same words)
            r"(?:^[ \t]{0,8}|[Ee]rror: )(?![^\s:]{0,200}(?:[Hh]ost|[Pp]inned))[^\s:]{0,200}"
            r"(?:\.cuh?|cuda[^\s:/]{0,60}\.(?:cpp|cc)):\d{1,6}: out of memory[ \t]{0,8}$|"
            # MNN's CUDA backend refusing a layer's buffer (public20 o-006; its CPU, OpenCL, Vulkan
            # and Hexagon backends print the same words with their own names: the review)
            r"\bOut of memory when \w{1,64} is acquired in Cuda\w{1,64}|"
            # the RAPIDS Accelerator for Spark: the job aborted, its task's last failure a GPU
            # allocation its retry framework gave up on (the bare exception is a task attempt
            # Spark retries: the census's review; its CPU twin is the host's)
            r"\bJob aborted due to stage failure: [^\n]{0,400}?\bGPU OutOfMemory: could not split "
            r"inputs and retry\b|"
            # llama.cpp's (ggml's) backend buffers
            r"\b(?:failed|unable) to allocate (?:CUDA|ROCm|Vulkan|SYCL)\d{0,3} buffer\b|"
            # CatBoost's device pool (it takes gpu_ram_part of the card up front): its
            # TOutOfMemoryError, in MB, " MB" printed since 0.8 (public18 h-010)
            + CATBOOST_OUT_OF_MEMORY + r"[\d.]{1,24}(?: MB)?; Free [\d.]{1,24}\b|"
            # XGBoost's device allocator, a LOG(FATAL) (public15 v-009, v-010; census); it wraps
            # any pending CUDA error the same way (dmlc/xgboost#8493: no kernel image), so the
            # allocator's own words must follow
            + XGBOOST_ALLOC_ERROR + r"(?:Caching allocator|[^\n]{0,120}?"
            r"(?:out of memory|cudaErrorMemoryAllocation|out_of_memory))"
        ),
    ),
    # PyTorch's caching allocator warns before it raises or before a caller falls back
    (
        TORCH_WARNING,
        re.compile(
            r"memory (?:allocation|mapping) failed with OOM on device \d{1,5} while trying to "
            r"(?:allocate|map) \d{1,20} bytes"
        ),
    ),
    (
        HOST_ALLOC,
        re.compile(
            r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|"
            # llama.cpp's (ggml's) CPU backend: the host's RAM (public33 i-003, i-004, i-026; its
            # GPU backends' buffers are the CUDA_ERROR family's)
            # (the line ggml prints, not a client's error quoting the server's: the round's
            # review, ollama/ollama#16968)
            r"^[ \t]{0,8}ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of "
            r"size \d{1,20}\b|^[ \t]{0,8}\w{1,60}: (?:failed|unable) to allocate CPU buffer of "
            r"size \d{1,20}\b|"
            # gfortran's runtime when an ALLOCATE's malloc returns NULL (its next line: "Allocation
            # would exceed memory limit" or "Error allocating N bytes"): public37 v-007
            r"^[ \t]{0,8}Operating system error: Cannot allocate memory[ \t]{0,8}$|"
            # TensorFlow's own CPU allocator (the op ran on the host: public12 e-026, public29
            # p-009)
            r"\bOOM when allocating tensor\b(?=" + TF_CPU_ALLOCATOR + r")|"
            # TH's host allocator, PyTorch before 1.0 (public21 r-022, public28 x-015)
            # (THRealloc's "reallocate" too: public34 m-002)
            r"\b" + TH_HOST_ALLOC + r": you tried to (?:re)?allocate \d{1,9}GB\b|"
            # the host's kernel refusing memory, as the log's last line (logtext's end read)
            + HOST_REFUSED_PATTERN + "|"
            # OpenCV's host allocator
            r"\(-4:Insufficient memory\) Failed to allocate \d{1,20} bytes\b|"
            # Python's own MemoryError alone on the log's last line (read there only:
            # logtext's end-of-log read), and NumPy's refused array as a traceback's last line,
            # not its words quoted in a message the job went on after (public20 p-027, public23
            # a-017, public25 a-022, b-012, d-017); NumPy 2's module path; NumPy 1.16's form
            # without the size; a size past TiB is a size computed wrong, not read
            + BARE_MEMORY_ERROR_PATTERN + "|"
            r"^[ \t]{0,8}(?:numpy\.(?:_?core\.)?_exceptions\.)?_?(?:Array)?MemoryError: Unable to "
            r"allocate (?:\d{1,12}\.?\d{0,6} ?(?:[KMGT]iB|bytes) for an )?array with shape\b"
        ),
    ),
    # Accelerate catches each OOM, halves the batch and retries; at zero it raises this, and the
    # caught OOMs may never reach the log (the probe's records do, one per OOM)
    (RETRY_EXHAUSTED, re.compile(r"No executable batch size found, reached zero")),
    # the kernel's OOM killer took a DataLoader worker, or the job itself: the shell reports a
    # SIGKILLed foreground job as a bare "Killed" (after a progress bar's "]" when one was drawn)
    (
        HOST_KILLED,
        re.compile(
            r"DataLoader worker \(pid\(?s?\)? [\d, ]{1,64}\)? is killed by signal: Killed|"
            # (as people retype it: public24 c-006's "worker(pid xxxxx) is killed by signal:killed")
            r"DataLoader worker ?\(pid ?\w{1,16}\) is killed by signal: ?[Kk]illed\b|"
            # (after a bar cut mid-draw, its last block: public24 d-020's "77%|█████Killed")
            # (the line may be padded, as a terminal pads it after a bar: public36 s-016)
            r"(?:^|[\]█▏▎▍▌▋▊▉])[ \t]{0,8}Killed[ \t]{0,200}$|"
            r"\bline \d{1,9}: {1,8}\d{1,9} Killed\b|"
            # the bare line in the shell's language (read on the log's last line only)
            + LOCALIZED_KILLED_PATTERN + "|"
            # zsh's job report; the kernel's own words (dmesg); Slurm's cgroup OOM killer
            r"(?:^|\])\[\d{1,5}\][ \t]{1,16}\d{1,9} killed[ \t]{1,16}\S|"
            # zsh's report of its foreground job, bash's of a job by its pid (public29 q-016,
            # q-014: the same SIGKILL the bare "Killed" reports)
            r"^zsh: killed[ \t]{1,16}\S|^[ \t]{0,8}\d{1,9} Killed[ \t]{2,32}\S|"
            # (the memory cgroup's wording too: a Kubernetes or Slurm limit; like the kernel's
            # own, it names whatever process it killed, public12 f-015's job among them)
            # (a post that dropped the pid keeps the name in its parentheses, or writes a
            # placeholder for it: public22 w-017, public28 z-017's "<PID> (python)")
            # (its space after the colon lost, as a platform's report reprints it, full-width
            # punctuation after the pid: public37 t-018)
            r"\b(?:Out of memory|Memory cgroup out of memory):[ \t]?Kill(?:ed)? process "
            r"(?:\d{1,9}\b|\([^\s()]{1,64}\)|<\w{1,16}> \()|"
            r"\bDetected \d{1,9} oom[_-]kill events?(?:\(s\))? in \w|"
            r"\btask \d{1,9}: Out Of Memory\b|"
            # PBS's memory limit; earlyoom (the userspace killer) at its threshold
            r"\bPBS: job killed: mem (?:job total )?\d{1,20} ?kb exceeded limit\b|"
            # the kubelet's eviction under node memory pressure, as the pod's status and the
            # pipelines that quote it print it (public11 t-011, t-012, v-030)
            r"\bThe node was low on resource: memory\b|"
            r"\blow memory! at or below SIG(?:TERM|KILL) limits: mem\b|"
            # Open MPI's launcher: a rank SIGKILLed
            r"\bexited on signal 9 \(Killed\)|"
            # systemd's account of a unit's process the kernel's OOM killer took (public18
            # g-009: a llama.cpp server's unit); Slurm's accounting killing a job over its
            # memory limit (public18 h-009, h-011; not its "Exceeded step memory limit at some
            # point", which a step that was not killed prints too)
            # (its "Failed with result 'oom-kill'" follows that line: not read, no keyword of the
            # scan's is in it)
            r"\bA process (?:of this unit )?has been killed by the OOM killer\b|"
            r"\bexceeded memory limit \(\d{1,24} > \d{1,24}\), being killed\b|"
            # LSF's memory limit killing a job (evaluation/hostprint v-014; not YARN's
            # container kill, which Spark retries and may finish after: the round's review)
            r"\bTERM_MEMLIMIT: job killed after reaching LSF memory usage limit\b|"
            # Google's managed training (Cloud ML Engine, Vertex AI) reporting a replica its
            # container's memory limit killed (public19 l-023)
            r"\bThe replica [\w -]{1,64}? ran out-of-memory and exited with a non-zero status "
            r"of \d{1,3}\b|"
            # runc (under containerd or CRI-O) reporting the kernel's OOM killer took a
            # container's init at its memory limit, as the kubelet's event quotes it (public26
            # e-019)
            r"\bcontainer init was OOM-killed\b"
        ),
    ),
    # Ray's memory monitor kills workers when the node's host memory runs low
    (
        RAY_KILLED,
        re.compile(
            r"Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)|"
            r"OutOfMemoryError: Task was killed due to the node running low on memory|"
            # Ray 2.55+ counts the workers it killed (public18 g-018, a Serve replica's check)
            r"\b\d{1,9} worker\(s\) were killed due to the node running low on memory\b|"
            # Ray before 1.x: its monitor raised in the worker over the node's threshold
            r"\bRayOutOfMemoryError: More than \d{1,3}% of the memory on node\b|"
            # the monitor's own account of a kill, and the line every one of its reports ends
            # with (public9 n-019, o-011, o-012: the first lines cut or hard-wrapped)
            r"\bMemory on the node \([^\n]{0,200}?\) where the (?:task|actor)\b|"
            r"Refer to the documentation on how to address the out of memory issue: ?(?:https:|$)"
        ),
    ),
)


def match_line(line: str) -> str | None:
    """The family whose failure ``line`` reports, or None for any other line."""
    found = match_failure(line)
    return found[0] if found else None


def match_failure(line: str) -> tuple[str, str] | None:
    """``(family, key)``: the key is the line from the match on (the message with its figures),
    equal when the same failure is printed twice."""
    found = find_failure(line)
    if found is None:
        return None
    family, start, _ = found
    return family, line[start : start + KEY_CHARS]


def find_failure(
    line: str, pos: int = 0, endpos: int | None = None, *, before: int | None = None
) -> tuple[str, int, int] | None:
    """``(family, start, end)``: of the families whose wording occurs in ``line[pos:endpos]``
    starting before ``before``, the one of highest ``PRIORITY`` (the first in ``_FAMILIES``
    order among equals), and where that wording is. The same rule as between lines, so two
    wordings get one diagnosis whether they share a line, a 64 KiB block of one, or neither.
    Characters before ``pos`` are still seen by the patterns' ``\\b``."""
    end = len(line) if endpos is None else endpos
    limit = end if before is None else before
    best: tuple[str, int, int] | None = None
    for family, pattern in _FAMILIES:
        if best is not None and PRIORITY[family] <= PRIORITY[best[0]]:
            continue
        match = pattern.search(line, pos, end)
        if match is not None and match.start() < limit:
            best = family, match.start(), match.end()
    return best


_GGML: Final = re.compile(r"\bggml|\bllama[_.]|\bllama runner\b|\bollama\b|\bCUDA\d{0,3} buffer\b")
"""llama.cpp and what embeds it (ollama) print cudaMalloc's failure in MXNet's words."""

_JAXLIB: Final = re.compile(r"\bjax|external/org_tensorflow/")
"""jaxlib's own sources: it builds TensorFlow's XLA as a dependency, under bazel's
``external/org_tensorflow/`` (TensorFlow's own paths start at ``tensorflow/``)."""

_TENSORFLOW_XLA: Final = re.compile(r"tensorflow|ResourceExhaustedError")

_FRAMEWORK_MARKERS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("vllm", re.compile(r"\bvllm\b|gpu_memory_utilization", re.IGNORECASE)),
    ("cupy", re.compile(r"\bcupy|\bCURANDError\b")),  # CuPy's cuRAND error class
    ("opencl", re.compile(
        r"\bpyopencl\b|\b(?:CL_)?MEM_OBJECT_ALLOCATION_FAILURE\b|\bcl[A-Z]\w{3,40} failed: ")),
    ("jax", re.compile(r"\bjax|XlaRuntimeError|JaxRuntimeError|external/org_tensorflow/")),
    ("tensorflow", re.compile(r"\btensorflow\b|ResourceExhaustedError|\btf\.")),
    ("numba", re.compile(r"\bnumba\b")),
    ("onnxruntime", re.compile(r"\bonnxruntime\b")),
    ("tensorrt", re.compile(r"\[TensorRT-LLM\]|\btensorrt_llm\b")),
    ("paddle", re.compile(r"\bpaddle\b", re.IGNORECASE)),
    ("mxnet", re.compile(r"\bMXNet|\bmxnet\b|\bmshadow\b")),
    # (Caffe's CURAND_CHECK and CUBLAS_CHECK name their variable "status": BVLC/caffe#1026)
    ("caffe", re.compile(
        r"\bcaffe\b|\bsyncedmem\.cpp\b|"
        r"\bCheck failed: status == CU(?:RAND|BLAS)_STATUS_SUCCESS\b")),
    ("opencv", re.compile(r"\bcv2\.error\b|\bOpenCV\(\d")),
    ("faiss", re.compile(r"\bfaiss::|\bStandardGpuResources\b|" + FAISS_REQUEST_TAIL)),
    ("xgboost", re.compile(
        r"\bxgboost|\bXGBoost|updater_gpu_hist|\bMemory allocation error on worker \d")),
    ("catboost", re.compile(r"\bcatboost|\bCatBoost|\bNCudaLib::")),
    # (these by their failures' own words: a path through them beside another stack's
    # failure names that stack, the review's lesson from NumPy)
    ("pycuda", re.compile(r"\bpycuda\._driver\b|\bcuMemAlloc\w{0,12} failed: out of memory")),
    ("relion", re.compile(r"\bCudaCustomAllocator\b|\bat line \d{1,6} \(error-code 2\)")),
    ("pennylane", re.compile(r"\bError in PennyLane Lightning\b")),
    ("custatevec", re.compile(r"\[custatevec\]")),
    # HugeCTR's log prefix and its check's words (a source file and line after them), not its
    # name: a HugeCTR path beside a PyTorch failure is PyTorch's
    ("hugectr", re.compile(
        r"\[HCTR\]|\bRuntime error: out of memory \S{1,200}\.(?:cuh?|[ch]pp|h):\d{1,6}\b")),
    ("mnn", re.compile(r"\bOut of memory when \w{1,64} is acquired in Cuda\w")),
    ("numpy", re.compile(
        r"MemoryError: Unable to allocate (?:[^\n]{1,40} for an )?array with shape\b")),
    ("julia", re.compile(r"\bOut of GPU memory trying to allocate\b")),  # CUDA.jl's own words
    ("hami", re.compile(r"\[HAMI-core ERROR \([^\n]{0,160}?\)\]: " + HAMI_ALLOCATE + r"\b")),
    ("directml", re.compile(r"\bThere is not enough GPU video memory available\b")),
    ("omniverse", re.compile(r"\bVkResult: ERROR_OUT_OF_DEVICE_MEMORY\b")),  # Isaac Sim's Kit
    ("mlx", re.compile(r"\[METAL\] Command buffer execution failed: Insufficient Memory\b")),
    ("metal", re.compile(r"\bkIOGPUCommandBufferCallbackErrorOutOfMemory\b")),
    ("isaacgym", re.compile(r"\bGym cuda error: ")),
    # PhysX's GPU allocator: Isaac Gym's, Isaac Sim's, SAPIEN's
    ("physx", re.compile(r"\bPxgCudaDeviceMemoryAllocator\b")),
    ("gfortran", re.compile(r"^[ \t]{0,8}Operating system error: Cannot allocate memory\b")),
    ("nd4j", re.compile(r"\bnd4j\b|\bbytes from DEVICE \[\d{1,3}\] memory\b")),
    ("theano", re.compile(r"\bbytes of device memory \(out of memory\)")),
    ("dali", re.compile(r"\bNVJPEG error \"5\" : NVJPEG_STATUS_ALLOCATOR_FAILURE\b")),
    ("spark-rapids", re.compile(r"\bcom\.nvidia\.spark\.rapids\b|SplitAndRetryOOM\b")),
    ("pytorch", re.compile(r"\btorch\b|RuntimeError|c10::|AcceleratorError")),
)

_FAMILY_FRAMEWORK: Final[dict[str, str | None]] = {
    TORCH: "pytorch",
    TORCH_ASYNC: "pytorch",
    MPS: "pytorch",
    TORCH_RAW: "pytorch",
    TENSORFLOW: "tensorflow",
    XLA: "jax",
    CUPY: "cupy",
    PADDLE: "paddle",
    TENSORRT: "tensorrt",
    MXNET: "mxnet",
    ONNXRUNTIME: "onnxruntime",
    ONNXRUNTIME_LIMIT: "onnxruntime",
    CUDA_ERROR: None,
    TORCH_WARNING: "pytorch",
    TGI: "tgi",
    HOST_KILLED: None,
    RAY_KILLED: None,
    BFC: None,
    VLLM_STARTUP: "vllm",
    NCCL: "nccl",
    CUDA_LIBRARY: "pytorch",
    VLLM: "vllm",
    ENGINE_NO_CACHE: "vllm",
    ENGINE_WARMUP: "vllm",
    DRIVER: None,
    HOST_ALLOC: "pytorch",
    RETRY_EXHAUSTED: "pytorch",
    HAMI: None,
    EXCEPTION_NAME: None,
    SKIPPED: "pytorch",
}


NPU_OOM: Final = "NPU out of memory"
"""Ascend's torch_npu's words in PyTorch's message (its own allocator; torch 1.x's wording on any
release): the TORCH pattern's alternation reads them, and these mark the message as torch_npu's."""


_LIBRARY_NAMED: Final = re.compile(
    r"\b(CUBLAS|CUDNN|CUSOLVER|CUFFT|CUSPARSE|CURAND)_|\b(?:CL_)?(MEM_OBJECT)_ALLOCATION_FAILURE\b|"
    r"\b(MIOpen) Error: "
)
_LIBRARY_NAMES: Final = {
    "CUBLAS": "cuBLAS", "CUDNN": "cuDNN", "CUSOLVER": "cuSOLVER", "CUFFT": "cuFFT",
    "CUSPARSE": "cuSPARSE", "CURAND": "cuRAND", "MEM_OBJECT": "OpenCL", "MIOpen": "MIOpen",
}  # fmt: skip


def library_named(line: str) -> str | None:
    """The library whose own status a ``CUDA_LIBRARY`` failure prints (cuBLAS, cuRAND, OpenCL's
    buffer allocation ...), by its documented name; None when the line names none of them."""
    match = _LIBRARY_NAMED.search(line)
    if match is None:
        return None
    return _LIBRARY_NAMES[match.group(1) or match.group(2) or match.group(3)]


CAP_REFUSED: Final = "would exceed allowed memory"
"""PyTorch's cudaMallocAsync backend's words for a failure, with its figures on the lines after
(allocated, requested, the device, its free memory, the fraction's limit): printed whether the
fraction or the device refused."""


def framework_of(family: str, line: str) -> str | None:
    """The stack that raised the failure: the family's own, refined by markers on the line."""
    if family == TORCH and NPU_OOM in line:  # Ascend's torch_npu: its own allocator
        return "torch-npu"
    if family == XLA and not _JAXLIB.search(line) and _TENSORFLOW_XLA.search(line):
        return "tensorflow"
    if family == ENGINE_NO_CACHE and "mem-fraction-static" in line:
        return "sglang"
    if family in (MXNET, CUDA_ERROR, HOST_ALLOC) and _GGML.search(line):
        return "llama.cpp"
    if family == NCCL:  # NCCL's own name, unless the line names JAX or TensorFlow
        return _marked(line, ("jax", "tensorflow")) or NCCL
    if family == HOST_ALLOC and "DefaultCPUAllocator" not in line:
        return _marked(line)  # OpenCV's, TH's (Lua Torch7's too), the kernel's: their markers
    if family == CUDA_LIBRARY and library_named(line) in ("cuRAND", "OpenCL", "MIOpen"):
        # PyTorch has no OpenCL backend nor cuRAND's host API, and MIOpen's own words are any
        # ROCm stack's (TensorFlow's in public34 m-023): no default
        return _marked(line)
    if family in (TORCH_RAW, DRIVER, CUDA_LIBRARY, HOST_KILLED, RAY_KILLED, BFC, CUDA_ERROR, HAMI):
        return _marked(line) or _FAMILY_FRAMEWORK.get(family)
    return _FAMILY_FRAMEWORK.get(family)


def _marked(line: str, among: tuple[str, ...] | None = None) -> str | None:
    """The first stack of ``_FRAMEWORK_MARKERS`` (or of those ``among`` them) the line names."""
    return next(
        (name for name, marker in _FRAMEWORK_MARKERS
         if (among is None or name in among) and marker.search(line)),
        None,
    )
