"""The conformance harness' choice of the cases whose inputs it feeds one at a time
(``bench/ksql_conformance.py``'s ``in_file_order_only``): those on several topics
whose file order the timestamp rule (smallest next time first; a source's TIMESTAMP
column's value when it has one) would not keep."""

from __future__ import annotations

import sys
from pathlib import Path

# appended, not put first: bench/ksql.py must not hide the PyPI package ``ksql`` from
# the tests that import it in the same process
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from ksql_conformance import Source, in_file_order_only, record_time  # noqa: E402


def rec(topic: str, ts: int, value: dict | None = None) -> dict:
    return {"topic": topic, "key": 1, "value": value or {}, "timestamp": ts}


def test_inputs_the_timestamp_rule_reorders_across_topics_are_fed_one_at_a_time() -> None:
    # the left's second record (time 20) comes before the right's (time 10) in the file
    inputs = [rec("left", 0), rec("left", 20), rec("right", 10)]
    assert in_file_order_only(inputs, "", {})
    # in time order across topics, or all on one topic: written at once
    assert not in_file_order_only([rec("left", 0), rec("right", 10), rec("left", 20)], "", {})
    assert not in_file_order_only([rec("left", 20), rec("left", 0)], "", {})
    # equal times keep the file's order
    assert not in_file_order_only([rec("left", 5), rec("left", 5), rec("right", 5)], "", {})


def test_a_sources_timestamp_column_gives_the_time() -> None:
    s1 = Source("S1", "s1__C1C", "KAFKA", "JSON", None, timestamp="TS")
    sources = {"s1__C1C": s1}
    inputs = [rec("s1", 0, {"TS": 0}), rec("s2", 0), rec("s1", 0, {"ts": 11_000}), rec("s2", 0)]
    assert record_time(inputs[2], s1) == 11_000
    assert record_time(rec("s1", 7, {"TS": "not a number"}), s1) == 7
    # s1's second record (11000) waits for s2's second (0): not the file's order
    assert in_file_order_only(inputs, "__C1C", sources)
    assert not in_file_order_only(inputs, "__C1C", {})
