"""The local runtime statistics (``strom.ksql.query_stats``) built from Spark's progress
reports, in ksqlDB's wording: per topic, summed over queries; records shared between a
query's topics by how far their offsets moved; the format of ksqlDB's
``MetricCollectors.format``."""

from __future__ import annotations

from strom.ksql.query_stats import OBSERVED, RuntimeStats, Stat, format_stats, iso_time, share_out

AT = 1_767_225_600_123  # 2026-01-01T00:00:00.123Z


def batch(start: dict | None, end: dict, rows: int, written: int = 0) -> dict:
    import json

    return {
        "sources": [
            {
                "startOffset": json.dumps(start) if start is not None else None,
                "endOffset": json.dumps(end),
                "numInputRows": rows,
            }
        ],
        "sink": {"description": "strom", "numOutputRows": written},
    }


def test_consumer_and_producer_totals_per_topic_summed_over_queries() -> None:
    now = [AT]
    stats = RuntimeStats(clock_ms=lambda: now[0])
    stats.started("CSAS_A_1", "A")
    stats.started("CSAS_B_3", "B")
    stats.progress("CSAS_A_1", batch(None, {"src": {"0": 2, "1": 1}}, 3, written=2))
    now[0] += 1000
    stats.progress("CSAS_A_1", batch({"src": {"0": 2, "1": 1}}, {"src": {"0": 4, "1": 1}}, 2, 1))
    stats.progress("CSAS_B_3", batch(None, {"src": {"0": 4, "1": 1}}, 5, written=5))

    [rate, total] = stats.topic_stats("src")
    assert (rate.name, total.name, total.value, total.timestamp) == (
        "consumer-messages-per-sec",
        "consumer-total-messages",
        10.0,
        AT + 1000,
    )
    assert rate.value == 10 * 1000 / 30_000  # Kafka's Rate: at least a 30 s span
    assert [(s.name, s.value) for s in stats.topic_stats("A")][1] == ("total-messages", 3.0)
    assert stats.statistics("b") == (
        "messages-per-sec:      0.17   total-messages:         5     last-message: "
        "2026-01-01T00:00:01.123Z"
    )
    assert stats.consumed_offsets("CSAS_A_1") == {"src": {0: 4, 1: 1}}
    stats.stopped("CSAS_B_3")  # as ksqlDB's collectors close with their query
    assert stats.statistics("B") == ""
    assert [s.value for s in stats.topic_stats("src")][1] == 5.0


def test_a_query_of_two_topics_shares_its_rows_by_the_offsets_moved() -> None:
    stats = RuntimeStats(clock_ms=lambda: AT)
    stats.started("CSAS_J_0", "J")
    stats.progress("CSAS_J_0", batch(None, {"l": {"0": 3}, "r": {"0": 1}}, 4))
    stats.progress(
        "CSAS_J_0", batch({"l": {"0": 3}, "r": {"0": 1}}, {"l": {"0": 3}, "r": {"0": 2}}, 1)
    )
    assert stats.topic_stats("l")[1].value == 3.0
    assert stats.topic_stats("r")[1].value == 2.0
    assert stats.topic_stats("J") == []  # nothing written yet: no producer stats


def test_processing_log_entries_are_not_counted_as_the_sinks_records() -> None:
    stats = RuntimeStats(clock_ms=lambda: AT)
    stats.started("CSAS_C_2", "C")
    report = batch(None, {"src": {"0": 3}}, 3, written=3)
    report["observedMetrics"] = {OBSERVED: {"written": 3, "logged": 1}}
    stats.progress("CSAS_C_2", report)
    assert [(s.name, s.value) for s in stats.topic_stats("C")] == [
        ("messages-per-sec", 2 / 30),
        ("total-messages", 2.0),
    ]


def test_share_out_keeps_the_total_when_offsets_and_records_differ() -> None:
    # transaction markers take offsets: 6 offsets moved for 4 records
    assert share_out(4, {"a": 3, "b": 3}) == {"a": 2, "b": 2}
    assert share_out(1, {"a": 2, "b": 0}) == {"a": 1}
    assert share_out(0, {"a": 2}) == {}
    assert sum(share_out(7, {"a": 1, "b": 1, "c": 1}).values()) == 7


def test_format_and_times_as_ksqldb_prints_them() -> None:
    stats = [Stat("consumer-messages-per-sec", 0.0, AT), Stat("consumer-total-messages", 12.0, AT)]
    assert format_stats(stats, "last-message") == (
        "consumer-messages-per-sec:         0 consumer-total-messages:        12 "
        "    last-message: 2026-01-01T00:00:00.123Z"
    )
    assert format_stats([], "last-message") == ""
    assert iso_time(0) == "n/a"
    assert iso_time(AT - 123) == "2026-01-01T00:00:00Z"
    assert iso_time(AT - 23) == "2026-01-01T00:00:00.1Z"
