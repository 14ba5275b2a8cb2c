"""A failure whose wording a console or a paste broke across two lines (wrapped.py).

The real cases: public b-022 (JAX 2019, "Resource exhausted: Out" / "of memory while trying to
allocate ...") and public3 r-021 (MXNet, "cudaMalloc fail" / "ed: out of memory"), both as their
posters pasted them; and what Rich's log handler printed at 80 columns (its console width in a
container), captured from rich 15 (import-linter's dependency) here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.wrapped import _may_hold_one, rejoin

pytestmark = pytest.mark.unit

EVALUATION = Path(__file__).resolve().parents[3] / "evaluation"

RICH_XLA = (
    "ERROR    step 1200: jaxlib.xla_extension.XlaRuntimeError:           richxla.py:7\n"
    "         RESOURCE_EXHAUSTED: Out of memory while trying to allocate             \n"
    "         5520758552 bytes.                                                      \n"
)
"""Rich's ``RichHandler`` at 80 columns: the figure on the next line."""

MESSAGES = (
    "2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/"
    "local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out of memory while "
    "trying to allocate 5520758552 bytes.",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
    "allocate 5520758552 bytes.",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor "
    "with shape[64,512,56,56] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by "
    "allocator GPU_0_bfc",
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated "
    "so far: 3,221,225,472 bytes).",
    "mxnet.base.MXNetError: [10:11:12] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
    "failed: out of memory",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine.",
)


def _log(failure: str) -> str:
    return f'step 1 loss 0.3\nTraceback (most recent call last):\n  File "t.py"\n{failure}\n'


def test_a_jax_message_broken_inside_out_of_memory_is_read_joined() -> None:
    d = diagnose((EVALUATION / "public" / "logs" / "b-022.log").read_bytes())
    assert (d.detected, d.framework) == (True, "jax")
    assert d.figures.requested_bytes == 5520758552


def test_an_mxnet_message_broken_inside_a_word_is_read_joined() -> None:
    d = diagnose((EVALUATION / "public3" / "logs" / "r-021.log").read_bytes())
    assert (d.detected, d.framework) == (True, "mxnet")


def test_richs_wrapped_figure_is_read_from_the_next_line() -> None:
    d = diagnose(RICH_XLA)
    assert (d.detected, d.framework, d.kind) == (True, "jax", "capacity")
    assert d.figures.requested_bytes == 5520758552


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("width", [60, 70, 80, 100, 120])
def test_a_word_wrap_at_a_console_width_loses_no_failure(message: str, width: int) -> None:
    whole = diagnose(_log(message))
    lines = textwrap.wrap(message, width)
    wrapped = diagnose(_log("\n".join(lines)))
    assert whole.detected
    # (at 60, "RESOURCE_EXHAUSTED:" / "Out of memory ...": the break falls in the gap XLA's
    # pattern allows after its status; the second line is XLA's status without its code, which
    # bindings print too: read on its own)
    assert (wrapped.detected, wrapped.framework) == (True, whole.framework)


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("width", [60, 80, 85, 120])
def test_a_column_wrap_inside_a_word_loses_no_failure(message: str, width: int) -> None:
    cut = "\n".join(message[i : i + width] for i in range(0, len(message), width))
    d = diagnose(_log(cut))
    assert (d.detected, d.framework) == (True, diagnose(_log(message)).framework)


@pytest.mark.parametrize("text", [
    "checking for leaks: ran out\nof memory budget for the report, skipping",  # no family's words
    "the docs say CUDA out\nof memory errors are common",  # torch's wording needs its figures
    "Resource exhausted: Out\n\nof memory while trying to allocate 5520758552 bytes.",  # a gap
])  # fmt: skip
def test_lines_that_only_follow_each_other_are_not_joined(text: str) -> None:
    assert rejoin(text) is None
    assert not diagnose(text).detected


def test_lines_of_two_ranks_are_not_joined() -> None:
    text = "[rank0]: Resource exhausted: Out\n[rank1]: of memory while trying to allocate 8 bytes."
    assert rejoin(text) is None
    joined = rejoin(text.replace("[rank1]", "[rank0]"))
    assert joined == "[rank0]: Resource exhausted: Out of memory while trying to allocate 8 bytes."


def test_only_the_broken_pair_is_joined_and_the_other_lines_stay() -> None:
    text = "epoch 3\nRESOURCE_EXHAUSTED: Out of\nmemory while trying to allocate 8 bytes.\nbye"
    assert rejoin(text) == (
        "epoch 3\nRESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes.\nbye"
    )


def test_a_log_whose_failure_is_whole_is_read_as_before() -> None:
    text = _log(MESSAGES[1])
    assert rejoin(text) is None
    assert diagnose(text).figures.requested_bytes == 5520758552


def test_a_padded_line_and_an_indented_one_are_joined_by_one_space() -> None:
    """Rich pads a wrapped line to the console's width and indents the next (RICH_XLA)."""
    text = "RESOURCE_EXHAUSTED: Out      \n         of memory while trying to allocate 8 bytes."
    assert rejoin(text) == "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes."


@pytest.mark.parametrize("text", [
    "epoch 3\nRESOURCE_EXHAUSTED: Out of memory while trying to allocate 8 bytes.",  # line 2 alone
    "RESOURCE_EXHAUSTED: Out of memory\nwhile the loader ran",  # line 1 alone, up to its end
    # the last line and the first are not neighbours
    "of memory while trying to allocate 8 bytes.\nepoch 3\nRESOURCE_EXHAUSTED: Out",
])  # fmt: skip
def test_a_wording_whole_on_one_line_or_across_no_break_is_not_joined(text: str) -> None:
    assert rejoin(text) is None


def test_a_keyword_at_the_text_s_very_start_counts() -> None:
    text = "out of memory to allocate 205520896 bytes (total\n16068929536 bytes)"
    assert rejoin(text) == text.replace("\n", " ")


@pytest.mark.parametrize(("tail", "may"), [
    ("step 1 loss 0.3\nstep 2 loss 0.2\n", False),
    ("the run was Kil\nled", True),  # an anchor broken inside a word
    ("trying to\nallocate", True),  # ...or between two of its words
    ("trying to  allocate", False),  # two spaces on one line: no break to read away
    ("out of memory", True),
])  # fmt: skip
def test_a_tail_is_read_pair_by_pair_only_where_an_anchor_may_be(tail: str, may: bool) -> None:
    assert _may_hold_one(tail) is may


def test_only_the_wording_at_the_break_is_weighed_not_a_richer_one_far_after_it() -> None:
    """The search around a break reaches ``_REACH`` characters each side: a wording of a
    higher-priority family further along the second line (which the scan reads on its own)
    does not hide the one the break cut."""
    far = " " * 300 + "CUDA out of memory. Tried to allocate 1.00 MiB (GPU 0; 1 GiB total"
    text = f"RESOURCE_EXHAUSTED: Out\nof memory while trying to allocate 8 bytes.{far}"
    assert rejoin(text) == text.replace("\n", " ")


def test_a_break_in_a_gap_its_pattern_allows_is_not_joined() -> None:
    """public11 t-018 (TensorFlow 1.x, 2017): "failed call to cuDevicePrimary" / "CtxRetain:
    CUDA_ERROR_OUT_OF_MEMORY". The driver family allows 200 characters between its word and its
    code, so the break fell in that gap: it cannot be told from two lines that follow each
    other, and is not joined (a miss, rather than the false OOMs below)."""
    text = ("E tensorflow/core/common_runtime/direct_session.cc:138] Internal: failed call to "
            "cuDevicePrimary\nCtxRetain: CUDA_ERROR_OUT_OF_MEMORY; total memory reported: 1\n")
    assert rejoin(text) is None
    assert not diagnose(text).detected


@pytest.mark.parametrize("text", [
    # found in review: each pair matched across the break through a family's gap
    "[ERROR] CUDA error: an illegal memory access was encountered\n"
    "Hint: if this is not an out of memory problem, set CUDA_LAUNCH_BLOCKING=1\n",
    "INFO: GPU failure detection enabled\nINFO: will retry requests that fail with out of memory\n",
    "RuntimeError: CUDA error: device-side assert triggered\nsee the notes for out of memory\n",
    "grpc: RESOURCE_EXHAUSTED: received message larger than max\nretrying; this is not out of "
    "memory\n",
])  # fmt: skip
def test_two_lines_that_a_pattern_s_gap_would_bridge_are_not_an_oom(text: str) -> None:
    assert rejoin(text) is None
    assert not diagnose(text).detected


@pytest.mark.parametrize(("rank", "prefix"), [
    ("main", "[pod/job-0/main] "),  # kubectl logs --prefix: a container's name
    ("1234567", "(RayWorker pid=1234567) "),  # a 7-digit pid
    ("3", "[rank3]: "),
])  # fmt: skip
def test_a_rejoined_line_keeps_a_rank_the_scan_reads_back(rank: str, prefix: str) -> None:
    text = (f"{prefix}RESOURCE_EXHAUSTED: Out\n{prefix}of memory while trying to allocate "
            "8 bytes.\n")
    joined = rejoin(text)
    assert joined is not None
    d = diagnose(text)
    assert d.detected and d.to_json_dict()["rank"] == rank
    assert d.message is not None and d.message.startswith("RESOURCE_EXHAUSTED: Out of memory")
