"""The order a join's Spark steps (``strom.ksql.runtime``) take records in when the
records go back in time: each source partition's in offset order, partitions chosen
between by their records' own timestamps (the order they were written in), whatever a
TIMESTAMP column says; the results written in that order too. Through the keying
``mapInArrow`` and the keyed step as ``test_ksql_joins_spark_steps`` runs them, each
key's groups in either order. The expected records are those ksqlDB gives for the same
statements and inputs (join-with-custom-timestamp.json). No broker, no SparkSession."""

from __future__ import annotations

from typing import Any

import pytest
import test_ksql_joins_spark_steps as steps
from test_ksql_joins import planned

S1 = (
    "CREATE STREAM S1 (ID STRING KEY, NAME varchar, TS bigint) "
    "WITH (timestamp='TS', kafka_topic='s1', value_format='JSON')"
)


@pytest.fixture(autouse=True)
def _timers_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream-stream join's step registers timers (none fires here)."""
    monkeypatch.setattr(steps._Handle, "registerTimer", lambda self, due: None, raising=False)


def _both_ways(plan: Any, records: list[Any]) -> list[tuple[Any, Any, int]]:
    got = steps.run_on_spark_steps(plan, records)
    assert steps.run_on_spark_steps(plan, records, backwards=True) == got
    return got


def test_a_stream_table_join_takes_records_as_written_not_by_their_timestamp_columns() -> None:
    """Each stream record comes after the table's row for its key in the topics, but
    before it by the TIMESTAMP columns: it joins that row."""
    table = (
        "CREATE TABLE T1 (ID STRING PRIMARY KEY, F1 varchar, RTS bigint) "
        "WITH (timestamp='RTS', kafka_topic='t1', value_format='JSON')"
    )
    plan = planned(
        S1,
        table,
        "CREATE STREAM J WITH (timestamp='TS') AS SELECT S1.ID, S1.NAME, S1.TS, "
        "T1.F1 FROM S1 JOIN T1 ON S1.ID = T1.ID",
    )
    records = [
        ("t1", "0", {"F1": "blah", "RTS": 10000}, 10000),
        ("s1", "0", {"NAME": "zero", "TS": 0}, 10000),
        ("t1", "10", {"F1": "foo", "RTS": 13000}, 90000),
        ("s1", "10", {"NAME": "100", "TS": 11000}, 800000),
        ("s1", "0", {"NAME": "jan", "TS": 8000}, 0),  # written last, stamped 0
    ]
    assert _both_ways(plan, records) == [
        (b"0", {"NAME": "zero", "TS": 0, "F1": "blah"}, 0),
        (b"10", {"NAME": "100", "TS": 11000, "F1": "foo"}, 11000),
        (b"0", {"NAME": "jan", "TS": 8000, "F1": "blah"}, 8000),
    ]


def test_a_table_change_that_goes_back_in_time_still_replaces_the_row() -> None:
    """The customer's second change is stamped before the first: Kafka Streams takes it
    after (offset order), so the order joins the second name."""
    plan = planned(
        *steps.SOURCES,
        "CREATE STREAM named AS SELECT o.customer, o.id AS order_id, c.name "
        "FROM orders o JOIN customers c ON o.customer = c.id",
    )
    records = [
        ("customers", "c1", {"NAME": "first"}, 10),
        ("customers", "c1", {"NAME": "second"}, 5),
        ("orders", "o1", {"CUSTOMER": "c1"}, 20),
    ]
    assert _both_ways(plan, records) == [
        (b"c1", {"ORDER_ID": "o1", "NAME": "second"}, 20),
    ]


def test_a_stream_stream_join_writes_its_results_in_the_order_records_were_written() -> None:
    """jan (TS 8 s) is written after 100 (TS 11 s): its result comes after 100's,
    though its time is earlier."""
    s2 = "CREATE STREAM S2 (ID STRING KEY, F1 varchar) WITH (kafka_topic='s2', value_format='JSON')"
    plan = planned(
        S1,
        s2,
        "CREATE STREAM J WITH (timestamp='TS') AS SELECT S1.ID, S1.NAME, S1.TS, "
        "S2.F1 FROM S1 JOIN S2 WITHIN 11 SECONDS ON S1.ID = S2.ID",
    )
    records = [
        ("s1", "0", {"NAME": "zero", "TS": 0}, 0),
        ("s2", "0", {"F1": "blah"}, 10000),
        ("s2", "10", {"F1": "foo"}, 13000),
        ("s1", "10", {"NAME": "100", "TS": 11000}, 22000),
        ("s1", "0", {"NAME": "jan", "TS": 8000}, 33000),
    ]
    assert _both_ways(plan, records) == [
        (b"0", {"NAME": "zero", "TS": 0, "F1": "blah"}, 0),
        (b"10", {"NAME": "100", "TS": 11000, "F1": "foo"}, 11000),
        (b"0", {"NAME": "jan", "TS": 8000, "F1": "blah"}, 8000),
    ]


def test_partitions_are_taken_by_their_lowest_next_timestamp() -> None:
    """The customers in partition 0, the orders in partition 1: o2 (time 2) goes back
    in time after o1 (time 20), and is taken after it; the customer's change of time
    30 comes after every order, its partition's next timestamp being the highest."""
    plan = planned(
        *steps.SOURCES,
        "CREATE STREAM named AS SELECT o.customer, o.id AS order_id, c.name "
        "FROM orders o LEFT JOIN customers c ON o.customer = c.id",
    )
    records = [
        ("customers", "c1", {"NAME": "Ada"}, 1),
        ("orders", "o1", {"CUSTOMER": "c1"}, 20),
        ("orders", "o2", {"CUSTOMER": "c1"}, 2),
        ("orders", "o3", {"CUSTOMER": "c1"}, 25),
        ("customers", "c1", {"NAME": "Ada L"}, 30),
    ]
    partitions = {"customers": 0, "orders": 1}
    got = steps.run_on_spark_steps(plan, records, partitions=partitions)
    assert steps.run_on_spark_steps(plan, records, True, partitions) == got
    assert [(v["ORDER_ID"], v["NAME"], t) for _, v, t in got] == [
        ("o1", "Ada", 20),
        ("o2", "Ada", 2),
        ("o3", "Ada", 25),
    ]


def test_a_chain_of_joins_takes_a_table_change_that_goes_back_in_time_after_the_first() -> None:
    """The flow's stages take records as the single join does: the customer's second
    name, stamped before the first but written after it, is the one the order joins."""
    plan = planned(
        *steps.SOURCES,
        "CREATE STREAM priced AS SELECT o.item, o.id AS order_id, c.name, "
        "i.price * o.qty AS total FROM orders o JOIN customers c ON o.customer = c.id "
        "JOIN items i ON o.item = i.id",
    )
    records = [
        ("items", "i1", {"PRICE": 10}, 1),
        ("customers", "c1", {"NAME": "first"}, 10),
        ("customers", "c1", {"NAME": "second"}, 5),
        ("orders", "o1", {"CUSTOMER": "c1", "ITEM": "i1", "QTY": 2}, 20),
    ]
    assert _both_ways(plan, records) == [
        (b"i1", {"ORDER_ID": "o1", "NAME": "second", "TOTAL": 20}, 20),
    ]
