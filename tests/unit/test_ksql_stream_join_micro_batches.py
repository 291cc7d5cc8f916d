"""A stream-stream join with a GRACE PERIOD on Spark's steps (``strom.ksql.runtime``)
fed as records arrive over time: one record a micro-batch, as Spark runs them: the
keying ``mapInArrow`` step, then each key's ``transformWithStateInPandas`` processor
(its state kept from one micro-batch to the next) with the micro-batch's watermark,
then the key's event-time timers the watermark has reached; the watermark of the next
micro-batch is the largest of the keyed rows' watermark column (``wm``) so far, the query
setting no delay on it (Spark's starts at 0). The expected records are ksqlDB's for the same
statements and inputs (joins.json's 'stream stream ... join with out of order and
custom grace period'). No broker, no SparkSession."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
import test_ksql_joins_spark_steps as steps
from test_ksql_joins import planned

from strom.ksql import runtime
from strom.ksql.packed_output import in_join_order

SOURCES = (
    "CREATE STREAM LEFT_STREAM (id STRING KEY, l1 VARCHAR) "
    "WITH (kafka_topic='left_topic', value_format='JSON')",
    "CREATE STREAM RIGHT_STREAM (id STRING KEY, l2 VARCHAR) "
    "WITH (kafka_topic='right_topic', value_format='JSON')",
)


class _Timers:
    def __init__(self, watermark: int) -> None:
        self.watermark = watermark

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark


class _TimedHandle(steps._Handle):
    """A group's handle: its state and its event-time timers."""

    def __init__(self) -> None:
        self.timers: set[int] = set()

    def registerTimer(self, due: int) -> None:
        self.timers.add(due)

    def deleteTimer(self, due: int) -> None:
        self.timers.discard(due)


def _micro_batch(records: list[Any], offsets: dict[str, int]) -> pa.RecordBatch:
    batch = {"key": [], "value": [], "topic": [], "partition": [], "offset": [], "timestamp": []}
    for topic, key, value, ts in records:
        batch["key"].append(key.encode())
        batch["value"].append(json.dumps(value).encode())
        batch["topic"].append(topic)
        batch["partition"].append(0)
        batch["offset"].append(offsets.get(topic, 0))
        offsets[topic] = offsets.get(topic, 0) + 1
        batch["timestamp"].append(ts * 1000)
    batch["timestamp"] = pa.array(batch["timestamp"], pa.timestamp("us"))  # type: ignore[assignment]
    return pa.RecordBatch.from_pydict(batch)


def one_record_a_micro_batch(plan: Any, records: list[Any]) -> list[tuple[Any, Any, int]]:
    """The sink's records (key, value, timestamp) of the records fed one a micro-batch."""
    spec = runtime.QuerySpec(
        "Q", plan, {"bootstrap.servers": "unused"}, None, {}, "log", False, "earliest", 100
    )
    processors: dict[bytes, tuple[Any, _TimedHandle]] = {}
    offsets: dict[str, int] = {}
    watermark = 0
    out = []
    for record in records:
        [keyed] = list(runtime.run_join_keying(spec, iter([_micro_batch([record], offsets)])))
        timers = _Timers(watermark)
        frames = []
        keyed_frame = keyed.to_pandas()
        marks = keyed.column("wm").cast(pa.int64()).to_pylist()  # in microseconds
        for group, rows in keyed_frame.drop(columns="wm").groupby("grp", sort=False):
            if group not in processors:
                handle = _TimedHandle()
                processor = runtime._join_processor(spec)
                processor.init(handle)
                processors[group] = (processor, handle)
            frames += list(processors[group][0].handleInputRows((group,), iter([rows]), timers))
        for group, (processor, handle) in processors.items():  # then the timers due
            for due in sorted(t for t in handle.timers if t <= watermark):
                handle.timers.discard(due)
                frames += list(processor.handleExpiredTimer((group,), timers, None))
        watermark = max([watermark] + [mark // 1000 for mark in marks])
        if frames:
            frame = pd.concat(frames, ignore_index=True)
            for batch in in_join_order(iter([pa.RecordBatch.from_pandas(frame)])):
                for topic, key, value, ts in batch.to_pandas().itertuples(index=False):
                    assert topic != "log"
                    out.append((key, None if value is None else json.loads(value), int(ts)))
    return out


@pytest.mark.parametrize(
    ("kind", "records", "expected"),
    [
        (
            "LEFT",
            [
                ("left_topic", "0", {"L1": "A"}, 0),
                ("right_topic", "0", {"L2": "a"}, 60000),
                ("left_topic", "1", {"L1": "B"}, 330000),
                ("left_topic", "2", {"L1": "C"}, 90000),
                ("right_topic", "2", {"L2": "c"}, 90000),
                ("left_topic", "3", {"L1": "D"}, 60000),
                ("right_topic", "3", {"L2": "d"}, 60000),
            ],
            [
                (b"0", {"L1": "A", "L2": "a"}, 60000),
                (b"2", {"L1": "C", "L2": None}, 90000),
                (b"3", {"L1": "D", "L2": None}, 60000),
            ],
        ),
        (
            "RIGHT",
            [
                ("left_topic", "0", {"L1": "A"}, 0),
                ("right_topic", "0", {"L2": "a"}, 60000),
                ("left_topic", "1", {"L1": "B"}, 330000),
                ("left_topic", "2", {"L1": "C"}, 90000),
                ("right_topic", "2", {"L2": "c"}, 90000),
                ("right_topic", "3", {"L2": "d"}, 60000),
                ("left_topic", "3", {"L1": "D"}, 90000),
            ],
            [
                (b"0", {"L1": "A", "L2": "a"}, 60000),
                (b"2", {"L1": None, "L2": "c"}, 90000),
                (b"3", {"L1": None, "L2": "d"}, 60000),
                (b"3", {"L1": "D", "L2": "d"}, 90000),
            ],
        ),
        (
            "FULL OUTER",
            [
                ("left_topic", "0", {"L1": "A"}, 0),
                ("right_topic", "0", {"L2": "a"}, 60000),
                ("right_topic", "1", {"L2": "b"}, 330000),
                ("right_topic", "2", {"L2": "c"}, 90000),
                ("left_topic", "2", {"L1": "C"}, 90000),
                ("right_topic", "3", {"L2": "d"}, 60000),
                ("left_topic", "3", {"L1": "D"}, 60000),
            ],
            [
                (b"0", {"T_ID": "0", "TT_ID": "0", "L1": "A", "L2": "a"}, 60000),
                (b"2", {"T_ID": None, "TT_ID": "2", "L1": None, "L2": "c"}, 90000),
                (b"2", {"T_ID": "2", "TT_ID": None, "L1": "C", "L2": None}, 90000),
                (b"3", {"T_ID": None, "TT_ID": "3", "L1": None, "L2": "d"}, 60000),
                (b"3", {"T_ID": "3", "TT_ID": None, "L1": "D", "L2": None}, 60000),
            ],
        ),
    ],
)
def test_an_outer_row_waits_for_the_stream_time_not_the_first_watermark(
    kind: str, records: list[Any], expected: list[Any]
) -> None:
    """A, alone in the first micro-batch (watermark 0), waits for its match a: its
    window (1 minute) and grace (1 minute) close at stream time 120000, which no
    record reached. In the right join d, kept by the right side's window store (its
    side's time is 90000, though the stream time is 330000), still meets D."""
    selected = "ROWKEY AS ID, t.id, tt.id" if kind == "FULL OUTER" else "t.id"
    plan = planned(
        *SOURCES,
        f"CREATE STREAM J AS SELECT {selected}, l1, l2 FROM LEFT_STREAM t {kind} JOIN "
        "RIGHT_STREAM tt WITHIN 1 minute GRACE PERIOD 1 minute ON t.id = tt.id",
    )
    assert one_record_a_micro_batch(plan, records) == expected
