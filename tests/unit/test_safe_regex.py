"""Client-sent regular expressions compiled with RE2 (strom.coordinator.safe_regex)."""

from __future__ import annotations

import pytest

from strom.coordinator.safe_regex import InvalidRegex, compile_pattern


def test_whole_names_and_searches() -> None:
    pattern = compile_pattern("orders-(eu|us)")
    assert pattern.fullmatch("orders-eu")
    assert not pattern.fullmatch("orders-eu-dlq")
    assert pattern.search("old-orders-us-2")


def test_what_re2_cannot_run_in_linear_time_is_invalid() -> None:
    for text in ("(a)\\1", "(?=a)b", "(a"):
        with pytest.raises(InvalidRegex):
            compile_pattern(text)


def test_a_catastrophic_pattern_for_backtracking_is_answered() -> None:
    # Python's re would take about 2**40 steps here; RE2 answers in linear time.
    assert not compile_pattern("(a+)+b").fullmatch("a" * 40)
