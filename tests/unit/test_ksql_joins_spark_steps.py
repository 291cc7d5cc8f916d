"""The Spark side of a flow of joins (``strom.ksql.runtime``) without Spark: records
keyed for their first stage by the ``mapInArrow`` step, then each stage's stateful
processor run group by group as ``transformWithStateInPandas`` runs it (a state per
group), the rows of later stages passed on; the sink's records compared with the
outputs ksqlDB gives. No broker, no SparkSession."""

from __future__ import annotations

import json
import pickle
import random
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from test_ksql_joins import planned

from strom.ksql import runtime
from strom.ksql.join_flow import AGGREGATE, ORDER, REGROUP, flowing, stages
from strom.ksql.packed_output import in_join_order, unpack_in_order
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
    plan: QueryPlan,
    records: list[Any] = RECORDS,
    backwards: bool = False,
    partitions: dict[str, int] | None = None,
    throw: bool = False,
) -> list[tuple[Any, Any, int]]:
    """The records through the query's Spark steps: (key, value, timestamp) of each
    sink record (processing log entries as ("log", the entry's type)). Each step runs
    its keys in the order their rows come, or (``backwards``) the other way round, as
    Spark may run them. ``partitions``: a topic's source partition (0 when not given);
    the results are gathered by the partition they carry, one task's after another's.
    ``throw``: ksql.timestamp.throw.on.invalid (the row that fails the query: ("failed",
    its text, 0))."""
    partitions = partitions or {}
    spec = runtime.QuerySpec(
        "Q", plan, {"bootstrap.servers": "unused"}, None, {}, "log", False, "earliest", 100, throw
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "key": [k.encode() for _, k, _, _ in records],
            "value": [
                v if isinstance(v, bytes) else None if v is None else json.dumps(v).encode()
                for _, _, v, _ in records
            ],
            "topic": [t for t, _, _, _ in records],
            "partition": [partitions.get(t, 0) for t, _, _, _ in records],
            "offset": [  # each topic's own, as Kafka gives them
                sum(1 for other in records[:index] if other[0] == record[0])
                for index, record in enumerate(records)
            ],
            "timestamp": pa.array([ts * 1000 for *_, ts in records], pa.timestamp("us")),
        }
    )
    flow_stages = stages(plan)
    ordered = flow_stages[-1].kind == ORDER
    joins = [i for i, s in enumerate(flow_stages) if s.kind not in (REGROUP, AGGREGATE, ORDER)]
    if not flowing(plan):  # a join on the sources' keys: one keyed step
        [keyed] = list(runtime.run_join_keying(spec, iter([batch])))
        frames = []
        groups = list(keyed.to_pandas().groupby("grp", sort=False))
        for group, rows in reversed(groups) if backwards else groups:
            processor = runtime._join_processor(spec)
            processor.init(_Handle())
            frames += list(processor.handleInputRows((group,), iter([rows]), None))
        joins = []
    [keyed] = list(runtime.run_flow_keying(spec, iter([batch])))
    frame = keyed.to_pandas() if joins else pd.concat(frames, ignore_index=True)
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
    if plan.aggregation is not None:  # the aggregation's steps, then its order
        if any(s.kind == REGROUP for s in flow_stages):
            frame = _by_group(frame, runtime._regroup_processor(spec), backwards)
        frame = _by_group(frame, runtime._aggregate_processor(spec), backwards)
    # the results gathered by source partition, a task each, its rows in either order
    tasks = []
    for _, task in frame.groupby("part", sort=True):
        rows = task.iloc[::-1] if backwards else task
        batch = pa.RecordBatch.from_pandas(rows, preserve_index=False)
        ordering = (
            runtime.run_in_order(spec, iter([batch]))
            if ordered
            else in_join_order(iter([batch]))
            if plan.aggregation is None
            else unpack_in_order(iter([batch]))
        )
        tasks += [b.to_pandas() for b in ordering]
    frame = pd.concat(tasks, ignore_index=True)
    out = []
    for topic, key, value, timestamp in frame.itertuples(index=False, name=None):
        if topic == "log":
            out.append(("log", json.loads(value)["message"]["type"], 0))
        elif topic == runtime.FAILED_TOPIC:
            out.append(("failed", value.decode(), 0))
        else:
            out.append((key, None if value is None else json.loads(value), int(timestamp)))
    return out


def _by_group(frame: pd.DataFrame, processor: Any, backwards: bool) -> pd.DataFrame:
    """A keyed step's processor run group by group (its groups in either order)."""
    frames = []
    groups = list(frame.groupby("grp", sort=False))
    for group, rows in reversed(groups) if backwards else groups:
        processor.init(_Handle())
        frames += list(processor.handleInputRows((group,), iter([rows]), None))
    return pd.concat(frames, ignore_index=True)


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


INTERLEAVED = [
    ("customers", "c1", {"NAME": "Ada"}, 1),
    ("customers", "c2", {"NAME": "Bob"}, 2),
    ("items", "i1", {"PRICE": 10}, 3),
    ("items", "i2", {"PRICE": 5}, 4),
    ("orders", "o1", {"CUSTOMER": "c1", "ITEM": "i1", "QTY": 1}, 10),
    ("orders", "o2", {"CUSTOMER": "c2", "ITEM": "i2", "QTY": 2}, 11),
    ("orders", "o3", {"CUSTOMER": "c1", "ITEM": "i2", "QTY": 3}, 12),
    ("customers", "c2", {"NAME": "Bob B"}, 13),
    ("orders", "o4", {"CUSTOMER": "c2", "ITEM": "i1", "QTY": 4}, 14),
    ("orders", "o5", {"CUSTOMER": "c1", "ITEM": "i1", "QTY": 5}, 15),
]  # one micro-batch: the keys' records interleaved


@pytest.mark.parametrize("backwards", [False, True])
def test_a_stream_table_join_gives_its_results_in_the_order_of_their_records(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE STREAM named AS SELECT o.customer, o.id AS order_id, c.name FROM orders o "
        "JOIN customers c ON o.customer = c.id",
    )
    assert not flowing(plan)  # one keyed step, its keys run in either order
    assert run_on_spark_steps(plan, INTERLEAVED, backwards) == [
        (b"c1", {"ORDER_ID": "o1", "NAME": "Ada"}, 10),
        (b"c2", {"ORDER_ID": "o2", "NAME": "Bob"}, 11),
        (b"c1", {"ORDER_ID": "o3", "NAME": "Ada"}, 12),
        (b"c2", {"ORDER_ID": "o4", "NAME": "Bob B"}, 14),
        (b"c1", {"ORDER_ID": "o5", "NAME": "Ada"}, 15),
    ]  # as ksqlDB writes them, not key by key


@pytest.mark.parametrize("backwards", [False, True])
def test_a_chain_of_joins_gives_its_results_in_the_order_of_their_records(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE STREAM priced AS SELECT o.item, o.id AS order_id, c.name, "
        "i.price * o.qty AS total FROM orders o JOIN customers c ON o.customer = c.id "
        "JOIN items i ON o.item = i.id",
    )
    assert run_on_spark_steps(plan, INTERLEAVED, backwards) == [
        (b"i1", {"ORDER_ID": "o1", "NAME": "Ada", "TOTAL": 10}, 10),
        (b"i2", {"ORDER_ID": "o2", "NAME": "Bob", "TOTAL": 10}, 11),
        (b"i2", {"ORDER_ID": "o3", "NAME": "Ada", "TOTAL": 15}, 12),
        (b"i1", {"ORDER_ID": "o4", "NAME": "Bob B", "TOTAL": 40}, 14),
        (b"i1", {"ORDER_ID": "o5", "NAME": "Ada", "TOTAL": 50}, 15),
    ]


@pytest.mark.parametrize("backwards", [False, True])
def test_grouped_table_table_join_takes_its_rows_in_the_order_of_their_records(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE caps AS SELECT a.customer, SUM(l.cap) AS cap, COUNT(*) AS n "
        "FROM accounts a JOIN limits l ON a.id = l.id GROUP BY a.customer",
    )
    records = [
        ("limits", "a1", {"CAP": 10}, 1),  # the limits' offset 0
        ("accounts", "a8", {"CUSTOMER": "c8", "BALANCE": 0}, 2),  # no limit: no row
        ("accounts", "a9", {"CUSTOMER": "c9", "BALANCE": 0}, 3),
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 1}, 4),  # the accounts' offset 2
        ("limits", "a1", {"CAP": 20}, 5),  # the limits' offset 1: a1's row of time 5 last
        ("accounts", "a2", {"CUSTOMER": "c1", "BALANCE": 1}, 6),
        ("limits", "a2", {"CAP": 300}, 7),
    ]  # two topics' offsets do not order the joined rows: their times do
    assert run_on_spark_steps(plan, records, backwards) == [
        (b"c1", {"CAP": 10, "N": 1}, 4),
        (b"c1", {"CAP": 20, "N": 1}, 5),  # a1's row replaced within c1: one row
        (b"c1", {"CAP": 320, "N": 2}, 7),
    ]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_table_table_join_gives_its_results_in_the_order_of_their_records(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE capped AS SELECT a.id, a.balance, l.cap FROM accounts a "
        "LEFT JOIN limits l ON a.id = l.id",
    )
    records = [
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 1}, 1),
        ("accounts", "a2", {"CUSTOMER": "c1", "BALANCE": 2}, 2),
        ("limits", "a1", {"CAP": 10}, 3),
        ("limits", "a2", {"CAP": 20}, 3),  # a tie: the limits' offsets order them
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 3}, 4),
        ("limits", "a2", None, 5),
    ]
    assert run_on_spark_steps(plan, records, backwards) == [
        (b"a1", {"BALANCE": 1, "CAP": None}, 1),
        (b"a2", {"BALANCE": 2, "CAP": None}, 2),
        (b"a1", {"BALANCE": 1, "CAP": 10}, 3),
        (b"a2", {"BALANCE": 2, "CAP": 20}, 3),
        (b"a1", {"BALANCE": 3, "CAP": 10}, 4),
        (b"a2", {"BALANCE": 2, "CAP": None}, 5),
    ]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_grouped_table_table_join_takes_the_left_tables_change_first_at_a_tie(
    backwards: bool,
) -> None:
    """Every record at one time: each account joins with no limit first, then the
    limits change the sums (ksqlDB's sum int left join of table)."""
    plan = planned(
        *SOURCES,
        "CREATE TABLE caps AS SELECT a.id, SUM(l.cap) AS cap FROM accounts a "
        "LEFT JOIN limits l ON a.id = l.id GROUP BY a.id",
    )
    records = [
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 1}, 0),
        ("accounts", "a2", {"CUSTOMER": "c1", "BALANCE": 2}, 0),
        ("limits", "a1", {"CAP": 5}, 0),
        ("limits", "a2", {"CAP": 10}, 0),
        ("limits", "a1", {"CAP": 20}, 0),
        ("limits", "a1", None, 0),
    ]
    assert run_on_spark_steps(plan, records, backwards) == [
        (b"a1", {"CAP": 0}, 0),
        (b"a2", {"CAP": 0}, 0),
        (b"a1", {"CAP": 5}, 0),
        (b"a2", {"CAP": 10}, 0),
        (b"a1", {"CAP": 20}, 0),
        (b"a1", {"CAP": 0}, 0),
    ]


@pytest.mark.parametrize("backwards", [False, True])
def test_a_table_table_join_takes_the_left_tables_change_first_at_a_tie(
    backwards: bool,
) -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE capped AS SELECT a.id, a.balance, l.cap FROM accounts a "
        "LEFT JOIN limits l ON a.id = l.id",
    )
    records = [
        ("limits", "a1", {"CAP": 10}, 0),  # written first, taken after the account
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 1}, 0),
    ]
    assert run_on_spark_steps(plan, records, backwards) == [
        (b"a1", {"BALANCE": 1, "CAP": None}, 0),
        (b"a1", {"BALANCE": 1, "CAP": 10}, 0),
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


def test_a_foreign_key_join_gathers_its_results_by_the_left_rows_partition() -> None:
    plan = planned(
        *SOURCES,
        "CREATE TABLE owners AS SELECT a.id, c.name, a.balance FROM accounts a "
        "LEFT JOIN customers c ON a.customer = c.id",
    )
    records = [
        ("customers", "c1", {"NAME": "Ada"}, 1),
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 1}, 2),
        ("customers", "c1", {"NAME": "Ada L"}, 3),  # made a1's result from partition 0
        ("accounts", "a1", {"CUSTOMER": "c1", "BALANCE": 2}, 4),
    ]  # the accounts in partition 1: a1's results all in its task, ksqlDB's
    assert run_on_spark_steps(plan, records, partitions={"accounts": 1}) == [
        (b"a1", {"NAME": "Ada", "BALANCE": 1}, 2),
        (b"a1", {"NAME": "Ada L", "BALANCE": 1}, 3),
        (b"a1", {"NAME": "Ada L", "BALANCE": 2}, 4),
    ]


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
             pickle.dumps(("left", runtime_row(order))), 1),
            (pickle.dumps("c1"), 0, 0, 1, 0, pd.Timestamp(1000, unit="us", tz="UTC"),
             pickle.dumps(("right", runtime_row(customer))), 1),
        ],
        columns=["grp", "stage", "part", "off", "seq", "ts", "payload", "at"],
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


def _record_at_a_time(plan: QueryPlan, records: list[Any]) -> list[tuple[Any, Any, int]]:
    """A stream-table join's sink records from the operators run record after record
    in one process (a state per join key), in time order, a table's change before a
    stream's record at a tie, as ``run_on_spark_steps`` gives them."""
    from strom.ksql.operators import Operators
    from strom.ksql.readers import RecordError, RecordReader, RecordWriter, SourceRecord

    assert plan.join is not None and plan.sink is not None
    operators = Operators(plan)
    readers = {plan.source.topic: RecordReader(plan.source), plan.join.right.topic: None}
    readers[plan.join.right.topic] = RecordReader(plan.join.right)
    writer = RecordWriter(plan.sink)
    states: dict[Any, dict[str, Any]] = {}
    out: list[tuple[Any, Any, int]] = []
    timed = sorted(enumerate(records), key=lambda r: (r[1][3], r[1][0] == plan.source.topic, r[0]))
    for offset, (topic, key, value, ts) in timed:
        encoded = value if isinstance(value, bytes) or value is None else json.dumps(value)
        record = SourceRecord(
            topic,
            0,
            offset,
            ts,
            key.encode(),
            encoded.encode() if isinstance(encoded, str) else encoded,
        )
        try:
            row = readers[topic].read(record)
        except RecordError:
            out.append(("log", 0, 0))
            continue
        side = "left" if topic == plan.source.topic else "right"
        join_key = operators.key_of(side, row)
        if join_key is None:
            continue
        state = states.setdefault(join_key, {})
        for change in operators.join_step(state, side, row, ts):
            body = writer.value(change.value)
            out.append(
                (
                    writer.key(change.key, change.window),
                    None if body is None else json.loads(body),
                    change.timestamp,
                )
            )
    return out


@pytest.mark.parametrize("kind", ["JOIN", "LEFT JOIN"])
def test_a_stream_table_join_on_spark_steps_gives_what_the_record_path_gives(kind: str) -> None:
    """Random micro-batches of orders and customer changes (deletes, unknown customers,
    null and unreadable values, ties in time): the keyed step's sink records, record
    for record, as the operators give them one record after another."""
    plan = planned(
        *SOURCES,
        f"CREATE STREAM named AS SELECT o.customer, o.id AS order_id, o.qty, c.name "
        f"FROM orders o {kind} customers c ON o.customer = c.id",
    )
    rng = random.Random(471)
    for _ in range(20):
        records: list[Any] = []
        ts = 0
        for n in range(rng.randint(1, 60)):
            ts += rng.choice((0, 0, 1, 2))
            customer = f"c{rng.randint(0, 5)}"
            if rng.random() < 0.3:
                name = rng.choice((None, {"NAME": f"n{n}"}, {"NAME": None}, {}))
                records.append(("customers", customer, name, ts))
            else:
                value = rng.choice(
                    (
                        {"CUSTOMER": customer, "QTY": n},
                        {"CUSTOMER": customer, "QTY": n},
                        {"CUSTOMER": None, "QTY": n},
                        None,
                        b"not json",
                    )
                )
                records.append(("orders", f"o{n}", value, ts))
        records += [  # one result at least (the steps' harness takes one)
            ("customers", "c0", {"NAME": "last"}, ts + 1),
            ("orders", "o-last", {"CUSTOMER": "c0", "QTY": 0}, ts + 1),
        ]
        expected = _record_at_a_time(plan, records)
        for backwards in (False, True):
            got = run_on_spark_steps(plan, records, backwards)
            # the log entries (unreadable records) in any place: a tie's offsets are
            # of two topics
            assert [r for r in got if r[0] != "log"] == [r for r in expected if r[0] != "log"]
            assert got.count(("log", 0, 0)) == expected.count(("log", 0, 0))


def test_a_keys_rows_are_taken_as_a_stable_sort_by_time_tie_partition_and_offset() -> None:
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 40)
        frame = pd.DataFrame(
            {
                "part": pd.array([rng.randint(0, 2) for _ in range(n)], dtype="int32"),
                "off": pd.array([rng.randint(0, 5) for _ in range(n)], dtype="int64"),
                "seq": pd.array([rng.randint(0, 1) for _ in range(n)], dtype="int32"),
                "ts": pd.to_datetime(
                    [rng.randint(0, 3) * 1000 for _ in range(n)], unit="us", utc=True
                ),
                "payload": list(range(n)),
            }
        )
        expected = frame.sort_values(["ts", "seq", "part", "off"], kind="stable")["payload"]
        taken = frame["payload"].to_numpy()[runtime._in_time_order(frame)]
        assert taken.tolist() == expected.tolist()


def test_a_join_steps_output_frame_converts_as_the_general_one() -> None:
    rows = [
        ("sink", b"k", b"{}", 5, 5, 1, 0, 3, 0),
        ("log", None, b"entry", None, 6, 0, 1, 4, 1),
    ]
    for chosen in (rows, rows[:1]):
        schema = pa.schema(
            [("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
             ("timestamp", pa.int64()), ("at", pa.int64()), ("tie", pa.int32()),
             ("part", pa.int32()), ("off", pa.int64()), ("seq", pa.int64())]
        )  # fmt: skip
        fast = pa.Table.from_pandas(runtime._joined_frame(chosen), schema, preserve_index=False)
        general = pa.Table.from_pandas(runtime._frame(chosen), schema, preserve_index=False)
        assert fast.to_pylist() == general.to_pylist()
