"""The OOM probe's record in a termination message: searched for only at the message's end."""

from __future__ import annotations

import pytest

from gpu_auditor.controller.probe import record_in_message

from .controller_helpers import record_of

pytestmark = pytest.mark.unit


def test_a_huge_forged_message_is_searched_only_at_its_end() -> None:
    record = record_of("frag_pinned")
    assert record_in_message("x" * 10_000_000 + "\n" + record) is not None
    assert record_in_message(record + "\n" + "x" * 70_000) is None
