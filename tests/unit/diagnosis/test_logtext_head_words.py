"""The log's head (its first 64 KiB, read for a release banner) never ends in a word its bound
cut: ``torch 1.1`` of ``torch 1.13.1`` would read as release 1.1. The same whatever the chunks."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.logtext import scan_bytes

BANNER = b"\nstarting: torch 1.1"
HEAD = b"=" * (65536 - len(BANNER)) + BANNER  # exactly the 64 KiB head
CHUNKS = (1, 7, 4096, 65535, 65536, 65537, 1 << 20)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_a_word_cut_by_the_bound_is_dropped(chunk: int) -> None:
    head = scan_bytes(HEAD + b"3.1+cu117 on NVIDIA A100\n", chunk_bytes=chunk).head
    assert head.endswith("\nstarting: torch ")
    assert len(head) == 65536 - len("1.1")


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("after", [b" on NVIDIA A100\n", b"\n", b"\r", b"\tx", b""])
def test_a_word_the_bound_did_not_cut_is_kept(chunk: int, after: bytes) -> None:
    # followed by a space, a line end, or nothing at all: the word is whole
    head = scan_bytes(HEAD + after, chunk_bytes=chunk).head
    assert head.endswith("\nstarting: torch 1.1")
    assert len(head) == 65536


def test_a_head_that_is_one_long_word_is_dropped_whole() -> None:
    assert scan_bytes(b"x" * 70000 + b"\n").head == ""


def test_a_short_log_is_its_own_head() -> None:
    assert scan_bytes(b"torch 2.3.1 ready").head == "torch 2.3.1 ready"
