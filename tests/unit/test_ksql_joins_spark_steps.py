"""The Spark side of a flow of joins (``strom.ksql.runtime``) without Spark: records
keyed for their first stage by the ``mapInArrow`` step, then each stage's stateful
processor run group by group as ``transformWithStateInPandas`` runs it (a state per
group), the rows of later stages passed on; the sink's records compared with the
outputs ksqlDB gives. No broker, no SparkSession."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from test_ksql_joins import planned

from strom.ksql import runtime
from strom.ksql.join_flow import AGGREGATE, ORDER, REGROUP, stages
from strom.ksql.planner import QueryPlan

SOURCES = (
    "CREATE STREAM orders (id STRING KEY, customer STRING, item STRING, qty INTEGER) "
    "WITH (kafka_topic='orders', value_format='JSON')",
    "CREATE TABLE customers (id STRING PRIMARY KEY, name STRING) "
    "WITH (kafka_topic='customers', value_format='JSON')",
    "CREATE TABLE items (id STRING PRIMARY KEY, price INTEGER) "
    "WITH (kafka_topic='items', value_format='JSON')",
    "CREATE TABLE accounts (id STRING PRIMARY KEY, customer STRING, balance INTEGER) "
    "WITH (kafka_topic='accounts', value_format='JSON')",
    "CREATE TABLE limits (id STRING PRIMARY KEY, cap INTEGER) "
    "WITH (kafka_topic='limits', value_format='JSON')",
)
RECORDS: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("customers", "c1", {"NAME": "Ada"}, 1),
    ("items", "i1", {"PRICE": 10}, 3),
    ("items", "i2", {"PRICE": 5}, 4),
    ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 100}, 5),
    ("accounts", "a2", {"CUSTOMER": "c9", "BALANCE": 50}, 6),
    ("limits", "a1", {"CAP": 500}, 7),
    ("orders", "o1", {"CUSTOMER": "c1", "ITEM": "i1", "QTY": 2}, 10),
    ("orders", "o2", {"CUSTOMER": "c1", "ITEM": "i2", "QTY": 3}, 11),
    ("orders", "o3", {"CUSTOMER": "c2", "ITEM": "i1", "QTY": 1}, 12),  # no customer c2
    ("orders", "o4", b"not json", 13),  # type: ignore[list-item]
    ("customers", "c1", {"NAME": "Ada L"}, 20),
    ("accounts", "a2", None, 21),
]


class _State:
    """A value state, as the state store keeps it for one group."""

    def __init__(self) -> None:
        self.value: Any = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class _Handle:
    def getValueState(self, name: str, schema: Any) -> _State:
        return _State()

    def registerTimer(self, due: int) -> None:
        raise AssertionError("no stream-stream join here: no timers")


def run_on_spark_steps(
    plan: QueryPlan, records: list[Any] = RECORDS, backwards: bool = False
) -> list[tuple[Any, Any, int]]:
    """The records through the query's Spark steps: (key, value, timestamp) of each
    sink record (processing log entries as ("log", the entry's type)). Each step runs
    its keys in the order their rows come, or (``backwards``) the other way round, as
    Spark may run them."""
    spec = runtime.QuerySpec(
        "Q", plan, {"bootstrap.servers": "unused"}, None, {}, "log", False, "earliest", 100
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "key": [k.encode() for _, k, _, _ in records],
            "value": [
                v if isinstance(v, bytes) else None if v is None else json.dumps(v).encode()
                for _, _, v, _ in records
            ],
            "topic": [t for t, _, _, _ in records],
            "partition": [0] * len(records),
            "offset": list(range(len(records))),
            "timestamp": pa.array([ts * 1000 for *_, ts in records], pa.timestamp("us")),
        }
    )
    [keyed] = list(runtime.run_flow_keying(spec, iter([batch])))
    frame = keyed.to_pandas()
    flow_stages = stages(plan)
    ordered = flow_stages[-1].kind == ORDER
    joins = [i for i, s in enumerate(flow_stages) if s.kind not in (REGROUP, AGGREGATE, ORDER)]
    for index in joins:
        last = index == joins[-1] and not ordered
        output = "chain" if not last else ("records" if plan.aggregation is None else "grouped")
        frames = []
        groups = list(frame.groupby("grp", sort=False))
        for group, rows in reversed(groups) if backwards else groups:
            processor = runtime._flow_processor(spec, index, output)
            processor.init(_Handle())
            frames += list(processor.handleInputRows((group,), iter([rows]), None))
        frame = pd.concat(frames, ignore_index=True)
    if ordered:  # the results gathered by key in one task, in either order
        rows = frame.iloc[::-1] if backwards else frame
        batch = pa.RecordBatch.from_pandas(rows, preserve_index=False)
        frame = pd.concat(
            [b.to_pandas() for b in runtime.run_in_order(spec, iter([batch]))], ignore_index=True
        )
    assert plan.aggregation is None  # the aggregation's steps are the existing ones
    out = []
    for topic, key, value, timestamp in frame.itertuples(index=False, name=None):
        if topic == "log":
            out.append(("log", json.loads(value)["message"]["type"], 0))
        else:
            out.append((key, None if value is None else json.loads(value), int(timestamp)))
    return out


def test_a_chain_of_joins_on_spark_steps() -> None:
    plan = planned(
        *SOURCES,
        "CREATE STREAM priced AS SELECT o.item, o.id AS order_id, c.name, "
        "i.price * o.qty AS total FROM orders o JOIN customers c ON o.customer = c.id "
        "JOIN items i ON o.item = i.id",
    )
    assert sorted(run_on_spark_steps(plan), key=repr) == [
        ("log", 0, 0),  # o4 does not read: a deserialization error, passed on to the sink
        (b"i1", {"ORDER_ID": "o1", "NAME": "Ada", "TOTAL": 20}, 10),
        (b"i2", {"ORDER_ID": "o2", "NAME": "Ada", "TOTAL": 15}, 11),
    ]


def test_a_foreign_key_join_on_spark_steps() -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE owners AS SELECT a.id, c.name, a.balance FROM accounts a "
        "LEFT JOIN customers c ON a.customer = c.id",
    )
    outputs = run_on_spark_steps(plan)
    assert [o for o in outputs if o[0] == b"a1"] == [
        (b"a1", {"NAME": "Ada", "BALANCE": 100}, 5),
        (b"a1", {"NAME": "Ada L", "BALANCE": 100}, 20),
    ]
    assert [o for o in outputs if o[0] == b"a2"] == [
        (b"a2", {"NAME": None, "BALANCE": 50}, 6),
        (b"a2", None, 21),
    ]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_foreign_key_join_gives_its_results_in_the_order_of_their_records(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE owners AS SELECT a.id, c.name, a.balance FROM accounts a "
        "LEFT JOIN customers c ON a.customer = c.id",
    )
    records = [
        ("customers", "c1", {"NAME": "Ada"}, 1),
        ("customers", "c2", {"NAME": "Bob"}, 2),
        ("accounts", "a3", {"CUSTOMER": "c2", "BALANCE": 1}, 8),
        ("accounts", "a4", {"CUSTOMER": "c1", "BALANCE": 7}, 9),
        ("accounts", "a3", {"CUSTOMER": "c1", "BALANCE": 2}, 10),
        ("accounts", "a3", {"CUSTOMER": "c2", "BALANCE": 3}, 11),
        ("customers", "c1", {"NAME": "Ada L"}, 12),  # a3 no longer refers to c1
    ]  # one micro-batch: a3's results come from the joins of c1 and of c2
    assert run_on_spark_steps(plan, records, backwards) == [
        (b"a3", {"NAME": "Bob", "BALANCE": 1}, 8),
        (b"a4", {"NAME": "Ada", "BALANCE": 7}, 9),
        (b"a3", {"NAME": "Ada", "BALANCE": 2}, 10),
        (b"a3", {"NAME": "Bob", "BALANCE": 3}, 11),
        (b"a4", {"NAME": "Ada L", "BALANCE": 7}, 12),
    ]  # each key's newest last, and the keys' results in the order of their records


def test_a_foreign_key_join_then_a_key_join_on_spark_steps() -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE capped AS SELECT a.id, c.name, l.cap FROM accounts a "
        "LEFT JOIN customers c ON a.customer = c.id JOIN limits l ON a.id = l.id",
    )
    assert sorted(run_on_spark_steps(plan), key=lambda record: record[2]) == [
        (b"a1", {"NAME": "Ada", "CAP": 500}, 7),
        (b"a1", {"NAME": "Ada L", "CAP": 500}, 20),
    ]


def test_a_join_before_an_aggregation_gives_the_aggregations_rows() -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE spent AS SELECT c.name, SUM(o.qty) AS qty FROM orders o "
        "JOIN customers c ON o.customer = c.id GROUP BY c.name",
    )
    spec = runtime.QuerySpec(
        "Q", plan, {"bootstrap.servers": "unused"}, None, {}, "log", False, "earliest", 100
    )
    order = {"ID": "o1", "CUSTOMER": "c1", "ITEM": "i1", "QTY": 2, "ROWTIME": 10}
    customer = {"ID": "c1", "NAME": "Ada", "ROWTIME": 1}
    rows = pd.DataFrame(
        [
            (pickle.dumps("c1"), 0, 0, 0, 1, pd.Timestamp(1000, unit="us", tz="UTC"),
             pickle.dumps(("left", runtime_row(order)))),
            (pickle.dumps("c1"), 0, 0, 1, 0, pd.Timestamp(1000, unit="us", tz="UTC"),
             pickle.dumps(("right", runtime_row(customer)))),
        ],
        columns=["grp", "stage", "part", "off", "seq", "ts", "payload"],
    )  # fmt: skip
    processor = runtime._flow_processor(spec, 0, "grouped")
    processor.init(_Handle())
    [grouped] = list(processor.handleInputRows((pickle.dumps("c1"),), iter([rows]), None))
    assert list(grouped.columns) == ["grp", "part", "off", "seq", "ts", "payload"]
    [(group, payload)] = zip(grouped["grp"], grouped["payload"], strict=True)
    columns, sign = pickle.loads(payload)
    assert pickle.loads(group) == ("Ada",) and sign == 1 and columns["O_QTY"] == 2


def runtime_row(columns: dict[str, Any]) -> Any:
    from strom.ksql.readers import Row

    return Row({**columns, "ROWPARTITION": 0, "ROWOFFSET": 0})
