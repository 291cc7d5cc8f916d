"""Stream time by source partition in the server's push queries
(``strom.ksql.push_queries.PushQuery.process``): a record's windows are judged late
against its own partition's stream time, as a Kafka Streams task's, not the most
advanced partition's. No broker."""

from __future__ import annotations

import json
from typing import Any

from test_ksql_joins import planned

from strom.ksql.push_queries import PushQuery
from strom.ksql.readers import SourceRecord

CLICKS = (
    "CREATE STREAM clicks (id STRING KEY, page STRING) "
    "WITH (kafka_topic='clicks', value_format='JSON', partitions=2)"
)


def _record(partition: int, offset: int, key: str, page: str, timestamp: int) -> SourceRecord:
    value = json.dumps({"PAGE": page}).encode()
    return SourceRecord("clicks", partition, offset, timestamp, key.encode(), value)


def _counts(query: PushQuery, records: list[SourceRecord]) -> list[tuple[Any, ...]]:
    out = []
    for record in records:
        for change in query.process(record):
            assert change.value is not None
            out.append((change.value["PAGE"], change.window, change.value["N"]))
    return out


def test_a_push_aggregation_judges_late_records_by_their_own_partition() -> None:
    plan = planned(
        CLICKS,
        "SELECT page, COUNT(*) AS n FROM clicks "
        "WINDOW TUMBLING (SIZE 10 SECONDS, GRACE PERIOD 0 SECONDS) GROUP BY page EMIT CHANGES",
    )
    query = PushQuery("push", plan, {}, None, "earliest", None, "log")
    records = [
        _record(0, 0, "a", "home", 100_000),  # partition 0 is far ahead
        _record(1, 0, "b", "cart", 5_000),  # partition 1's window [0, 10 s) is still open
        _record(1, 1, "c", "cart", 6_000),
        _record(1, 2, "d", "cart", 20_000),  # partition 1 moves past [0, 10 s)
        _record(1, 3, "e", "cart", 7_000),  # late in its own partition: dropped
        _record(0, 1, "f", "home", 95_000),  # partition 0's window [90 s, 100 s) is closed
    ]
    assert _counts(query, records) == [
        ("home", (100_000, 110_000), 1),
        ("cart", (0, 10_000), 1),
        ("cart", (0, 10_000), 2),
        ("cart", (20_000, 30_000), 1),
    ]


def test_a_push_query_with_limit_0_reaches_its_limit_at_once() -> None:
    plan = planned(CLICKS, "SELECT * FROM clicks EMIT CHANGES LIMIT 0")
    # no consumer is made: the client configuration names no broker
    query = PushQuery("push", plan, {}, None, "earliest", None, "log")
    emitted: list[list[Any]] = []
    assert query.run(emitted.append, [0]) is True
    assert emitted == []
