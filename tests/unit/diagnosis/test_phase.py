"""Where the job failed, from its last traceback: each pattern, innermost first, forward last."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis import diagnose
from gpu_auditor.diagnosis.phase import (
    CUDA_INIT,
    context_phase,
    engine_warm_up,
    failure_phase,
)

pytestmark = pytest.mark.unit

SITE = "/usr/lib/python3.11/site-packages"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


def tb(*frames: tuple[str, str, str]) -> str:
    """A traceback, outermost frame first: (file, function, code line)."""
    body = "".join(f'  File "{f}", line 7, in {fn}\n    {code}\n' for f, fn, code in frames)
    return "Traceback (most recent call last):\n" + body + OOM


MAIN = ("/app/train.py", "<module>", "main()")
FORWARD = (f"{SITE}/torch/nn/modules/module.py", "_call_impl", "return forward_call(*a)")


@pytest.mark.parametrize(
    ("frame", "phase"),
    [
        (
            (f"{SITE}/torch/optim/adamw.py", "step", "exp_avg = torch.zeros_like(p)"),
            "optimizer-step",
        ),
        (("/app/train.py", "train", "optimizer.step()"), "optimizer-step"),
        (("/app/train.py", "train", "self.optim.step()"), "optimizer-step"),
        ((f"{SITE}/torch/autograd/__init__.py", "backward", "_engine_run_backward("), "backward"),
        (
            (f"{SITE}/torch/autograd/graph.py", "_engine_run_backward", "return Variable._x()"),
            "backward",
        ),
        (("/app/lib.py", "run_backward", "x = 1"), "backward"),
        (("/app/train.py", "train", "loss.backward()"), "backward"),
        (
            (f"{SITE}/torch/cuda/graphs.py", "__enter__", "self.cuda_graph.capture_begin()"),
            "graph-capture",
        ),
        (("/app/vllm/cuda_graph_runner.py", "capture_model", "x = 1"), "graph-capture"),
        (("/app/runner.py", "capture_graphs", "x = 1"), "graph-capture"),
        (("/app/cudagraph_runner.py", "capture", "x = 1"), "graph-capture"),
        (("/app/runner.py", "run_cudagraph", "x = 1"), "graph-capture"),
        # vLLM's warm-up after its budget went to the weights and the KV cache (issue 24,
        # seventh round)
        (
            (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run",
             "sampler_output = self.sampler(logits=logits)"),
            "engine-warm-up",
        ),
        ((f"{SITE}/vllm/v1/worker/gpu_model_runner.py", "_dummy_pooler_run", "x = 1"),
         "engine-warm-up"),
        ((f"{SITE}/vllm/v1/worker/gpu_model_runner.py", "_dummy_pooler_run_task", "x = 1"),
         "engine-warm-up"),
        ((f"{SITE}/vllm/v1/worker/gpu/model_runner.py", "dummy_pooler_run", "x = 1"),
         "engine-warm-up"),
        ((f"{SITE}/torch/serialization.py", "load", "return _load(f)"), "loading"),
        ((f"{SITE}/safetensors/torch.py", "load_file", "x = 1"), "loading"),
        (("/app/model.py", "load_state_dict", "x = 1"), "loading"),
        (("/app/model.py", "_load_from_state_dict", "x = 1"), "loading"),
        (("/app/model.py", "from_pretrained", "x = 1"), "loading"),
        (("/app/model.py", "_load_pretrained_model", "x = 1"), "loading"),
        (("/app/model.py", "load_checkpoint", "x = 1"), "loading"),
        (("/app/train.py", "main", "sd = torch.load(path)"), "loading"),
        (("/app/train.py", "main", "m = Model.from_pretrained(name)"), "loading"),
        ((f"{SITE}/torch/nn/modules/module.py", "_apply", "param_applied = fn(param)"), "loading"),
        # Module.to()'s closure (issue 24)
        ((f"{SITE}/torch/nn/modules/module.py", "convert", "return t.to(device)"), "loading"),
        # the first CUDA call creating the context (issue 24)
        ((f"{SITE}/torch/cuda/__init__.py", "_lazy_init", "x = 1"), "cuda-init"),
        (("/app/train.py", "main", "torch._C._cuda_init()"), "cuda-init"),
        (FORWARD, "forward"),
        ((f"{SITE}/torch/nn/modules/module.py", "_wrapped_call_impl", "return x"), "forward"),
    ],
)
def test_each_pattern_names_its_phase(frame: tuple[str, str, str], phase: str) -> None:
    assert failure_phase(tb(MAIN, frame)) == phase


@pytest.mark.parametrize(
    "frame",
    [
        ("/app/train.py", "train", "x = model(batch)"),
        ("/app/capture.py", "capture", "x = 1"),  # capture but no graph
        ("/app/vllm/model_runner.py", "capture_model", "x = 1"),  # idem (module doc's example)
        ("/app/my/torch/nn/modules/module.py", "_apply_x", "x = 1"),
        (f"{SITE}/torch/nn/modules/module.py", "_apply_x", "x = 1"),  # no phase of its own
        (f"{SITE}/torch/nn/modules/linear.py", "_call_impl", "x = 1"),
        # near misses of issue 24's patterns: convert and _lazy_init outside torch's own files,
        # another function of torch/cuda/__init__.py, _cuda_init without its call
        ("/app/model.py", "convert", "return t.to(device)"),
        (f"{SITE}/torch/nn/modules/linear.py", "convert", "x = 1"),
        ("/app/lazy.py", "_lazy_init", "x = 1"),
        (f"{SITE}/torch/cuda/__init__.py", "synchronize", "x = 1"),
        (f"{SITE}/torch/cuda/memory.py", "_lazy_init", "x = 1"),
        ("/app/train.py", "main", "torch._C._cuda_init"),
    ],
)
def test_frames_of_no_phase(frame: tuple[str, str, str]) -> None:
    assert failure_phase(tb(MAIN, frame)) is None


def test_windows_paths_and_upper_case_are_read() -> None:
    frame = ("C:\\Python\\Lib\\site-packages\\Torch\\Optim\\adam.py", "step", "x = 1")
    assert failure_phase(tb(MAIN, frame)) == "optimizer-step"


def test_the_first_cuda_call_inside_moving_a_module_is_cuda_init() -> None:
    # model.cuda() -> Module._apply -> convert -> torch.cuda._lazy_init: the context's creation
    # is innermost, the move to the GPU outside it
    apply = (f"{SITE}/torch/nn/modules/module.py", "_apply", "param_applied = fn(param)")
    convert = (f"{SITE}/torch/nn/modules/module.py", "convert", "return t.to(device)")
    init = (f"{SITE}/torch/cuda/__init__.py", "_lazy_init", "torch._C._cuda_init()")
    assert failure_phase(tb(MAIN, apply, convert, init)) == "cuda-init"
    assert failure_phase(tb(MAIN, apply, convert)) == "loading"


def test_the_innermost_phase_wins() -> None:
    backward = ("/app/train.py", "train", "loss.backward()")
    optim = (f"{SITE}/torch/optim/adamw.py", "step", "x = 1")
    assert failure_phase(tb(MAIN, backward, optim)) == "optimizer-step"
    assert failure_phase(tb(MAIN, optim, backward)) == "backward"


def test_forward_only_when_nothing_more_specific_matched() -> None:
    backward = ("/app/train.py", "train", "loss.backward()")
    # a forward frame inside the backward (checkpoint recomputation) is the backward
    assert failure_phase(tb(MAIN, backward, FORWARD)) == "backward"
    assert failure_phase(tb(MAIN, FORWARD, backward)) == "backward"
    assert failure_phase(tb(MAIN, FORWARD, ("/app/x.py", "f", "y = 1"))) == "forward"


def test_only_the_last_traceback_is_read() -> None:
    first = tb(MAIN, ("/app/train.py", "train", "loss.backward()"))
    second = tb(MAIN, FORWARD)
    assert failure_phase(first + "retrying\n" + second) == "forward"
    assert failure_phase(second + "retrying\n" + first) == "backward"
    assert failure_phase("no traceback here\n" + OOM) is None
    # without a header (issue 24) the frames before the failure are read: a pasted fragment
    assert failure_phase(tb(MAIN, FORWARD)[1:]) == "forward"


def test_a_fragment_without_its_header_is_read_from_the_last_64_kib() -> None:
    # a paste that starts at the frames: the frames within MAX_TRACEBACK_BYTES (64 KiB) of the
    # end are read. The window's first character starts a line: a frame whose "File" is inside
    # it is read (from 2 characters of its indent cut off), one whose "File" is cut is not.
    backward = tb(MAIN, ("/app/train.py", "train", "loss.backward()"))
    fragment = backward[backward.index("  File") :]
    assert fragment.startswith('  File "/app/train.py"')
    assert failure_phase(fragment) == "backward"
    frame = '  File "/app/train.py", line 7, in train\n    loss.backward()\n'
    for size, read in ((65536 + 2, True), (65536 + 3, False)):
        filler = size - len(frame) - len(OOM)
        text = frame + "-" * (filler - 1) + "\n" + OOM
        assert len(text) == size
        assert (failure_phase(text) == "backward") is read, size


def test_a_traceback_at_the_very_start_is_read() -> None:
    assert failure_phase(tb(("/app/train.py", "train", "loss.backward()"))) == "backward"


def test_the_code_line_is_the_one_right_under_its_frame() -> None:
    # the lines after a frame's code line (a comment, 3.11's carets) are not its code
    text = tb(MAIN, ("/app/a.py", "f", "y = 1"), FORWARD).replace(
        "    y = 1\n", "    y = 1\n    # loss.backward( in a comment\n    ^^^^^\n"
    )
    assert failure_phase(text) == "forward"


def test_a_frame_without_a_code_line_has_no_code() -> None:
    # no source line under the second frame: the next frame's header is not its code, even
    # when the header's file name looks like a call
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 1, in <module>\n'
        "    main()\n"
        '  File "<stdin>", line 2, in main\n'
        '  File "/app/loss.backward(x).py", line 3, in f\n'
        "    y = 1\n" + OOM
    )
    assert failure_phase(text) is None


def test_a_code_line_is_read_up_to_512_characters() -> None:
    def code(pad: int) -> str:
        return tb(MAIN, ("/app/t.py", "t", "x" * pad + ".backward()"))

    assert failure_phase(code(502)) == "backward"  # ".backward(" ends at character 512
    assert failure_phase(code(503)) is None


def test_only_the_first_64_kib_of_the_traceback_are_read() -> None:
    filler = "".join(f'  File "/app/f{i}.py", line 1, in f\n    pass\n' for i in range(3000))
    head = "Traceback (most recent call last):\n" + filler
    assert len(head) > 64 * 1024
    assert failure_phase(head + '  File "/app/t.py", line 1, in t\n    loss.backward()\n') is None
    short = "Traceback (most recent call last):\n" + filler[: 60 * 1024]
    short = short[: short.rfind("  File")]
    assert failure_phase(short + '  File "/app/t.py", line 1, in t\n    loss.backward()\n') == (
        "backward"
    )


@pytest.mark.parametrize(
    "marker",
    [
        "find_executable_batch_size",
        "Decreasing batch size to: 16",
        "No executable batch size found",
    ],
)
def test_a_retry_loop_that_shrank_the_batch_wins_over_the_frames(marker: str) -> None:
    text = marker + "\n" + tb(MAIN, ("/app/train.py", "train", "loss.backward()"))
    assert failure_phase(text) == "retry-exhausted"


# A retry loop of the job's own that shrank its batch and still ran out: read from the lines it
# logged for each caught out-of-memory error, whatever its wording (not only Accelerate's).

FINAL = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 3.10 GiB is free. Including non-PyTorch memory, this process "
    "has 76.04 GiB memory in use. Of the allocated memory 75.50 GiB is allocated by PyTorch, and "
    "40.00 MiB is reserved by PyTorch but unallocated.\n"
)


TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in <module>\n'
    "    loss = model(batch)\n"
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1532, '
    "in _call_impl\n"
    "    return forward_call(*args, **kwargs)\n"
)


@pytest.mark.parametrize(
    "lines",
    [
        # a Lightning-style tuner line, a home-made back-off, a tqdm-ish status, JSON records
        ["Batch size 64 failed with OOM, trying batch size 32", "Batch size 32 failed with OOM"],
        ["[WARN] OOM with batch_size: 16 -> halving", "[WARN] OOM with batch_size: 8 -> halving"],
        [
            "Ran out of memory (batch 256); retrying at 128",
            "Ran out of memory (batch 128); retrying at 64",
            "Ran out of memory (batch 64); giving up",
        ],
        [
            '{"event": "cuda_oom", "msg": "CUDA out of memory", "batch_size": 12}',
            '{"event": "cuda_oom", "msg": "CUDA out of memory", "batch_size": 6}',
        ],
        ["reducing batch-size to 24 after an out of memory", "out of memory: batch-size 12"],
        # equal steps are allowed once the sizes shrank overall (a retry at the same size)
        ["OOM at batch 8", "OOM at batch 8", "OOM at batch 4"],
    ],
)
def test_a_shrinking_batch_after_caught_ooms_is_a_retry_loop(lines: list[str]) -> None:
    log = "\n".join(["step 1 loss 2.0", *lines, TB]) + FINAL
    assert failure_phase(log) == "retry-exhausted"


@pytest.mark.parametrize(
    "lines",
    [
        ["Batch size 64 failed with OOM, trying batch size 32"],  # one report is no loop
        ["OOM at batch 8", "OOM at batch 8"],  # the same size twice: no back-off
        ["OOM at batch 4", "OOM at batch 8"],  # growing: a batch *index*, or a tuner going up
        ["skipped batch 17 after OOM", "skipped batch 40 after OOM", "skipped batch 41 (OOM)"],
        ["OOM at batch 8", "OOM at batch 4", "OOM at batch 6"],  # grew again: not a back-off
        ["batch_size=64 done", "batch_size=32 done"],  # no out-of-memory word on the lines
        ["ROOM at batch 8", "ROOM at batch 4"],  # "OOM" only as a word
        ["CUDA out of memory", "CUDA out of memory"],  # no batch size named
        ["out of memory at batch_size=", "out of memory at batch_size="],  # no number
        ["out of memory at batchsize8", "out of memory at batchsize4"],  # not a word boundary
    ],
)
def test_other_lines_are_not_a_retry_loop(lines: list[str]) -> None:
    log = "\n".join(["step 1 loss 2.0", *lines, TB]) + FINAL
    assert failure_phase(log) == "forward"


def test_the_batch_size_is_looked_for_within_sixteen_characters_of_its_word() -> None:
    near = "OOM: batch size" + " " * 16 + "8"  # 16 characters between "size" and the number
    far = "OOM: batch size" + " " * 17 + "8"  # 17
    assert failure_phase(f"{near}\n{near.replace(' 8', ' 4')}\n{TB}{FINAL}") == "retry-exhausted"
    assert failure_phase(f"{far}\n{far.replace(' 8', ' 4')}\n{TB}{FINAL}") == "forward"


def test_a_report_is_read_in_a_lines_first_4096_characters() -> None:
    inside = "x" * 4080 + " OOM batch 8"  # 4092 characters: the size is read
    outside = "x" * 4090 + " OOM batch 8"  # its end is past 4096
    smaller = "OOM batch 4"
    assert failure_phase(f"{inside}\n{smaller}\n{TB}{FINAL}") == "retry-exhausted"
    assert failure_phase(f"{outside}\n{smaller}\n{TB}{FINAL}") == "forward"


def test_the_retry_loop_changes_the_first_action_not_the_verdict() -> None:
    lines = "OOM at batch_size=32, retrying\nOOM at batch_size=16, retrying\n"
    plain = diagnose("step 1\n" + TB + FINAL)
    retried = diagnose("step 1\n" + lines + TB + FINAL)
    assert plain.kind == retried.kind == "capacity"
    assert plain.recommendation.alloc_conf is None and retried.recommendation.alloc_conf is None
    assert plain.recommendation.actions[0].startswith("reduce peak memory: a smaller batch")
    assert retried.recommendation.actions[0].startswith(
        "the job's own retry loop already shrank the batch and still ran out"
    )
    assert not any(a.startswith("reduce peak memory") for a in retried.recommendation.actions)
    assert dict(retried.extra)["phase"] == "retry-exhausted"


# The backward phase by function name alone (issue 18, mutation survivor): a frame named
# ``_engine_run_backward`` outside torch/autograd, with no ``.backward(`` in its code line, is
# still the backward pass (the name, any case, is the whole evidence). Literal frames.

def one_frame_tb(path: str, func: str, code: str) -> str:
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
    assert failure_phase(one_frame_tb("/app/lib.py", func, "x = compute(y)")) == phase


def test_a_fragment_whose_first_frame_starts_the_text_unindented_is_read() -> None:
    # a paste that lost its indent: the very first character is the first frame's "File"
    fragment = (
        'File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 300, in _lazy_init\n'
        "torch._C._cuda_init()\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    assert failure_phase(fragment) == "cuda-init"
    assert failure_phase(" " + fragment) == "cuda-init"


@pytest.mark.parametrize(
    "message",
    [
        "Failed to create stream executor for device CUDA:0: : CUDA_ERROR_OUT_OF_MEMORY: out of "
        "memory",
        "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY; total memory "
        "reported: 11721506816",
        "Call to cuCtxCreate results in CUDA_ERROR_OUT_OF_MEMORY",
    ],
)
def test_a_message_that_names_the_contexts_creation_is_cuda_init(message: str) -> None:
    assert context_phase(message) == CUDA_INIT


@pytest.mark.parametrize(
    "message",
    [
        "failed to allocate 3.90G (4190109696 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY",
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.80 GiB",
        # past the first 512 characters: another sentence, not this failure's
        "x" * 512 + "create stream executor",
    ],
)
def test_other_messages_are_not_the_contexts_creation(message: str) -> None:
    assert context_phase(message) is None


def test_vllm_s_wrapper_after_the_failure_says_it_was_the_engine_s_warm_up() -> None:
    wrapper = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.\n"
    )
    assert engine_warm_up("\n" + wrapper)
    assert engine_warm_up(wrapper.replace("sampler with", "pooler (task='embed') with"))
    # not the engine's progress line, which names the warm-up with no failure
    assert not engine_warm_up("INFO warming up sampler with 256 dummy requests\n")
