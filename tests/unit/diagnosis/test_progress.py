"""progress.made_progress: did the job finish a step before it ran out of memory?"""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.progress import (
    MAX_LINE_CHARS,
    MAX_PROGRESS_BYTES,
    STEADY,
    after_its_only_loop,
    finished_steps,
    made_progress,
    steps_of_the_failing_work,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text",
    [
        "step 50 seq_len 1152 loss 0.5680\nstep 100 seq_len 1376 loss 0.1440\n",
        "Epoch 1\n...\nEpoch 2\n",
        "turn 20: session 11 | allocated 114.32 GiB\nturn 40: session 14\n",
        "batch 1/8 domain=legal\nbatch 2/8 domain=web\n",
        "iter 10 lr 3e-4\niter 20 lr 3e-4\n",
        "step 1 warmup done: kept 161 blocks\n",
        " 31%|█████▏          | 331/1063 [01:06<03:59,  3.06it/s]",
        "{'loss': 2.3105, 'learning_rate': 4.9e-05, 'epoch': 0.01}\n"
        "{'loss': 2.1022, 'learning_rate': 4.8e-05, 'epoch': 0.02}\n",
        "2024-02-01 10:00:00 | train_inner | epoch 001 | update 100 | loss 4.1\n"
        "2024-02-01 10:01:00 | train_inner | epoch 001 | update 200 | loss 3.9\n",
    ],
)
def test_a_counter_that_advanced_a_finished_step_a_bar_or_two_losses_is_progress(
    text: str,
) -> None:
    assert made_progress(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 7.93 GiB total",
        # the Trainer's banner: plural counters are settings, not progress
        "***** Running training *****\n  Num examples = 1000\n  Num Epochs = 3\n"
        "  Gradient Accumulation steps = 4\n  Total optimization steps = 1000\n",
        "Epoch 1/10\n",  # an epoch started, none finished
        "  0%|          | 0/1063 [00:00<?, ?it/s]",
        "batch_size 32, max_steps=1000\n",
        "{'loss': 2.3105, 'epoch': 0.01}\n",  # one loss: one step may still be the first
        "step 3 of the data pipeline\n",  # one value, no finish
        "epoch 0.5 lr 0.1\nepoch 0.75 lr 0.1\n",  # fractions are not counters
    ],
)
def test_a_start_a_banner_or_a_single_counter_is_not_progress(text: str) -> None:
    assert not made_progress(text)


def test_only_the_end_of_the_log_is_read() -> None:
    early = "step 1\nstep 2\n"
    assert made_progress(early + "x" * 100)
    assert not made_progress(early + ("x" * 99 + "\n") * (MAX_PROGRESS_BYTES // 100 + 1))


def test_a_counter_past_the_first_characters_of_a_line_is_not_read() -> None:
    line = " " * MAX_LINE_CHARS + "step 1 done\n"
    assert not made_progress(line)
    assert made_progress(" " * (MAX_LINE_CHARS - len("step 1 done")) + "step 1 done\n")


@pytest.mark.parametrize(
    ("text", "progress"),
    [
        ("  0%|          | 1/1063 [00:01<20:00,  1.01s/it]", True),  # the first iteration done
        ("100%|##########| 1063/1063 [03:59<00:00,  4.43it/s]", True),  # the last
        ("  0%|          | 0/1063 [00:00<?, ?it/s]", False),
        ("| 1064/1063 [03:59<00:00,  4.43it/s]", False),  # past its total: not a bar's count
    ],
)
def test_a_bar_counts_from_its_first_iteration_to_its_total(text: str, progress: bool) -> None:
    assert made_progress(text) is progress


def test_two_counters_each_at_one_value_are_not_progress() -> None:
    # each counter is read on its own: step 1 and epoch 2 are two starts, not an advance
    assert not made_progress("step 1\nepoch 2\n")
    assert made_progress("step 1\nepoch 2\nstep 2\n")


def test_a_finish_word_counts_only_after_its_counter() -> None:
    assert not made_progress("loading done, step 1\n")
    assert made_progress("step 1 done\n")


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("", 0),
        ("step 50 loss 0.5\nstep 100 loss 0.4\n", 100),  # the counter's highest value
        ("batch 1/8 domain=legal\nbatch 5/8 domain=code\n", 5),
        ("step 1 warmup done: kept 161 blocks\n", 1),
        (" 31%|███      | 331/1063 [01:06<03:59,  3.06it/s]", 331),
        ("{'loss': 2.3}\n{'loss': 2.2}\n{'loss': 2.1}\n", 3),  # lines reporting a loss
        ("Epoch 1\nEpoch 2\n", STEADY),  # a finished epoch is many steps
        ("step 3\nstep 4\n{'loss': 1}\n{'loss': 1}\n{'loss': 1}\n{'loss': 1}\n{'loss': 1}\n", 5),
    ],
)
def test_finished_steps_is_the_most_any_progress_line_shows(text: str, steps: int) -> None:
    assert finished_steps(text) == steps
    assert made_progress(text) is (steps >= 1)


@pytest.mark.parametrize("bar", [
    # public22 v-019: a 27B model's shards, then its first allocation failed
    "Loading checkpoint shards: 100%|██████████| 8/8 [00:41<00:00,  5.20s/it]",
    "Fetching 12 files: 100%|██████████| 12/12 [00:00<00:00, 1540.73it/s]",
    "Map: 100%|██████████| 1000/1000 [00:01<00:00, 913.24 examples/s]",
    "Downloading shards: 100%|██████████| 4/4 [02:10<00:00, 32.6s/it]",
    "Generating train split: 100%|██████████| 52002/52002 [00:00<00:00, 94315.55 examples/s]",
])  # fmt: skip
def test_a_bar_counting_what_the_job_set_up_is_no_step(bar: str) -> None:
    assert finished_steps(bar + "\n") == 0


def test_a_work_bar_after_a_setup_bar_still_counts() -> None:
    log = (
        "Loading checkpoint shards: 100%|██████████| 8/8 [00:41<00:00,  5.20s/it]\n"
        " 31%|███       | 331/1063 [01:06<03:59,  3.06it/s]\n"
    )
    assert finished_steps(log) == 331


def test_a_setup_bar_glued_to_work_bars_hides_only_itself() -> None:
    """The review: tqdm's carriage returns lost, one line holds the shards' bar and the steps'."""
    line = (
        "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.5s/it]  0%|   | "
        "1/400 [00:01<10:00] 10%|###| 41/400 [00:40<06:00] 90%|#########| 361/400 [06:00<00:40]"
    )
    assert finished_steps(line + "\n") == 361


def test_a_setup_bar_after_a_work_bar_on_its_line_does_not_hide_it() -> None:
    line = (
        " 10%|#         | 41/400 [00:40<06:00,  1.02it/s]Loading checkpoint shards: 100%|####| "
        "2/2 [00:03<00:00,  1.5s/it]"
    )
    assert finished_steps(line + "\n") == 41


# -- issue 24, ninth round: the work that failed after the job's one loop -------------------------

BAR_DONE = "100%|██████████| 200/200 [16:11<00:00,  4.86s/it]\n"  # public23 z-021


@pytest.mark.parametrize(("precontext", "after"), [
    (BAR_DONE, True),  # the loop finished; saving the model failed after it
    ("  0%|          | 0/200\r 50%|█████     | 100/200 [08:00<08:00]\r" + BAR_DONE, True),
    (BAR_DONE + "Saving model to out/\n", True),  # lines without progress after it
    ("100%|██| 200/200 [16:11<00:00, loss=0.31]\n", True),  # a loss on the bar's own line
    # the bar had not reached its total: the loop was running
    ("50%|█████     | 100/200 [08:00<08:00]\n", False),
    # a counter advanced: what follows each epoch's bar ran before
    ("Epoch 1: 100%|██| 200/200 [01:00<00:00]\nEpoch 2: 100%|██| 200/200 [01:00<00:00]\n", False),
    # progress after the finished bar: a second loop (a loss line, a step counter)
    (BAR_DONE + "step 5 loss 0.3\n", False),
    (BAR_DONE + "eval loss: 0.25\n", False),
    (BAR_DONE + " 10%|█         | 20/200 [00:10<01:30]\n", False),
    # the round's review: a loop that ran before the work that failed
    ("steps:  10%|█         | 100/1000 [01:40<15:00, avr_loss=0.112]\n"  # kohya, then samples
     "generating sample images: 100%|██████████| 30/30 [00:09<00:00]\n", False),
    ("Train: 100%|██| 500/500 [01:00<00:00, loss=0.51]\nValid: 100%|██| 125/125 [00:09<00:00]\n"
     "Train: 100%|██| 500/500 [01:00<00:00, loss=0.48]\n", False),  # epochs without a counter
    (BAR_DONE + "  0%|          | 0/200 [00:00<?, ?it/s]\n", False),  # a new pass at 0
    # one bar drawn at its total again and again: tqdm redraws it on close, on tqdm.write and
    # set_postfix (the second review)
    (BAR_DONE * 4, True),
    # Lightning's sanity check before training is no loop of the job's work
    ("Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:01<00:00]\n"
     "Epoch 0: 100%|██████████| 500/500 [05:00<00:00, v_num=0]\n", True),
    # a second total, counting up from more than the first had: two loops all the same
    (" 50%|█████     | 5/10 [00:05<00:05]\n100%|██████████| 30/30 [00:30<00:00]\n", False),
    # two counters at one value each: neither advanced
    ("epoch 1 step 5 warming up\n" + BAR_DONE, True),
    # a setup bar at its total is no loop of the job's
    ("Loading checkpoint shards: 100%|██████████| 8/8 [00:10<00:00]\n", False),
    ("", False),
])  # fmt: skip
def test_a_finished_bar_with_nothing_after_it_is_the_end_of_the_only_loop(
    precontext: str, after: bool
) -> None:
    assert after_its_only_loop(precontext) is after


def test_the_failing_work_has_no_steps_after_the_only_loop() -> None:
    assert finished_steps(BAR_DONE) == 200
    assert steps_of_the_failing_work(BAR_DONE) == 0
    two = "Epoch 1: 100%|██| 200/200 [01:00<00:00]\nEpoch 2: 100%|██| 200/200 [01:00<00:00]\n"
    assert steps_of_the_failing_work(two) == finished_steps(two) > 0
