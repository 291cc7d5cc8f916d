"""The ``strom`` sink's ``exactlyOnce`` option under a real crash. Two streaming queries
read the same topic, one into a sink with exactlyOnce and one into a sink without it;
they run in a child process (its own Python driver, JVM and Python workers) that is
killed with SIGKILL in the middle of a micro-batch, at a point the test waits for: in
each query one write task has written (with exactlyOnce: committed) its part of the
micro-batch, the other has written some records and stalls before the rest. Both
queries are then restarted from their checkpoints in the shared session and run to the
end of their input.

With exactlyOnce, a read_committed reader sees every input record exactly once: the replay
skips the task that had committed, and the stalled task's open transaction is aborted
when its successor fences it (a read_uncommitted reader sees those aborted records).
Without it, the same crash leaves both tasks' records of that micro-batch twice.

Run as a script, this module is the child process: it starts both queries with the stall
and waits to be killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

PARTITIONS = 2
PER_PARTITION = 150
PER_TRIGGER = 100  # 50 records of each partition per micro-batch: micro-batches 0-2
LAST_BATCH = 2
CRASH_START, CRASH_END = 50, 100  # micro-batch 1 reads these offsets of each partition
STALL_AT = 70  # the task of source partition 1 stalls at this offset of micro-batch 1
STALL_MS = 300_000
# The stalled task hands the sink its rows before offset 70 in Arrow batches of 10 rows,
# each sent to the sink's Python worker at once: Spark's JVM fills a buffer of
# spark.buffer.size bytes (64 KiB) before it sends anything to a Python worker.
ROWS_PER_ARROW_BATCH = 10
SPARK_BUFFER_BYTES = 16


def start_query(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    exactly_once: bool,
    stall: bool,
) -> Any:
    """source -> sink, record ``i`` of source partition ``p`` as value ``p{p}-{i}`` to sink
    partition ``p``. With ``stall`` the query runs until stopped and the row at offset
    STALL_AT of source partition 1 sleeps in the JVM (``java_method``) before it reaches
    the sink; without, it runs to the end of its input (Trigger.AvailableNow)."""
    from pyspark.sql import functions as F

    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
        .load()
    )
    value = F.col("value").cast("string")
    if stall:
        at = (F.col("partition") == 1) & (F.col("offset") == STALL_AT)
        sleep = F.expr(f"substring(java_method('java.lang.Thread', 'sleep', {STALL_MS}L), 1, 0)")
        value = F.concat(value, F.coalesce(F.when(at, sleep), F.lit("")))
    writer = (
        df.select(value.alias("value"), "partition")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", str(exactly_once).lower())
        .option("checkpointLocation", checkpoint)
    )
    if not stall:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _child(bootstrap: str, source: str, queries: list[dict[str, Any]]) -> None:
    import strom.spark

    spark = strom.spark.local_session(
        "strom-eos-crash",
        master="local[4]",  # two queries, two tasks each, two of them stalled
        **{
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(ROWS_PER_ARROW_BATCH),
            "spark.buffer.size": str(SPARK_BUFFER_BYTES),
            "spark.ui.showConsoleProgress": "false",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    for query in queries:
        start_query(spark, bootstrap, source, **query, stall=True)
    spark.streams.awaitAnyTermination(STALL_MS / 1000)


if __name__ == "__main__":
    _child(**json.loads(sys.argv[1]))
    sys.exit(0)


import pytest  # noqa: E402

pytest.importorskip(
    "pyspark", reason="PySpark is not installed (the spark extra: pip install -e '.[spark]')"
)

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from kafka_helpers import create_topic  # noqa: E402
from spark_helpers import produce  # noqa: E402

Counts = dict[int, int]


def _read(bootstrap: str, topic: str, isolation: str) -> dict[int, list[str]]:
    """Every value of each partition of ``topic`` to its end as ``isolation`` sees it (for
    read_committed the end is the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eos-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            values[msg.partition()].append(msg.value().decode())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, f"did not reach the end of {topic} ({isolation})"
    return values


def _values(partition: int, start: int, end: int) -> list[str]:
    return [f"p{partition}-{i}" for i in range(start, end)]


def _counts(bootstrap: str, topic: str, isolation: str) -> Counts:
    return {p: len(v) for p, v in _read(bootstrap, topic, isolation).items()}


def _crash_mid_batch(
    bootstrap: str, source: str, sinks: dict[bool, str], checkpoints: dict[bool, Path], log: Path
) -> None:
    """Run both queries in a child process until micro-batch 1 is half written by each,
    then SIGKILL the child's process group (its driver and JVM)."""
    # Source partition 0's task has written (with exactlyOnce: committed) all of
    # micro-batch 1; partition 1's has written offsets 50-69 and stalls at 70.
    written = {0: CRASH_END, 1: STALL_AT}
    want: dict[tuple[bool, str], Counts] = {
        (True, "read_uncommitted"): written,
        (True, "read_committed"): {0: CRASH_END, 1: CRASH_START},
        (False, "read_uncommitted"): written,
        (False, "read_committed"): written,
    }
    args = {
        "bootstrap": bootstrap,
        "source": source,
        "queries": [
            {"sink": sinks[eos], "checkpoint": str(checkpoints[eos]), "exactly_once": eos}
            for eos in (True, False)
        ],
    }
    with open(log, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, __file__, json.dumps(args)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).parent,
            start_new_session=True,  # its JVM joins its process group
        )
    try:
        deadline = time.monotonic() + 300  # a loaded 2-core machine needs minutes
        while True:
            # one reader a round until the first sink has what the crash point needs,
            # then all four (each is a consumer of its own: four a round, for a minute,
            # cost the broker and this process more than the wait)
            seen: dict[tuple[bool, str], Counts] = {}
            for eos, iso in want:
                seen[eos, iso] = _counts(bootstrap, sinks[eos], iso)
                if seen[eos, iso] != want[eos, iso]:
                    break
            if seen == want:
                break
            if child.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the child did not reach the crash point ({seen}, exit code "
                    f"{child.poll()}):\n" + log.read_text(errors="replace")[-5000:]
                )
            time.sleep(0.5)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(30)


@pytest.mark.timeout(900)  # a child JVM, a crash and a restart: minutes on a loaded machine
def test_kill_mid_batch_then_restart(spark, broker, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    source = f"eos-in-{suffix}"
    sinks = {True: f"eos-out-{suffix}", False: f"alo-out-{suffix}"}
    checkpoints = {eos: tmp_path / f"checkpoint-{eos}" for eos in (True, False)}
    for topic in (source, *sinks.values()):
        create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(
        broker.bootstrap,
        source,
        [
            {"value": f"p{p}-{i}".encode(), "partition": p}
            for i in range(PER_PARTITION)
            for p in range(PARTITIONS)
        ],
    )

    _crash_mid_batch(broker.bootstrap, source, sinks, checkpoints, tmp_path / "child.log")
    # the open transaction of exactlyOnce's stalled task is invisible to read_committed
    assert _read(broker.bootstrap, sinks[True], "read_committed") == {
        0: _values(0, 0, CRASH_END),
        1: _values(1, 0, CRASH_START),
    }

    queries = {
        eos: start_query(
            spark,
            broker.bootstrap,
            source,
            sinks[eos],
            str(checkpoints[eos]),
            exactly_once=eos,
            stall=False,
        )
        for eos in (True, False)
    }
    for query in queries.values():
        query.awaitTermination(240)
        assert query.exception() is None, query.exception()
        assert not query.isActive, "a restarted query did not finish"

    every = {p: _values(p, 0, PER_PARTITION) for p in range(PARTITIONS)}
    # exactlyOnce: each record once, in order, to read_committed; the aborted transaction's
    # records only to read_uncommitted
    committed = _read(broker.bootstrap, sinks[True], "read_committed")
    assert committed == every
    written = _read(broker.bootstrap, sinks[True], "read_uncommitted")
    aborted = Counter(sum(written.values(), [])) - Counter(sum(committed.values(), []))
    assert aborted == Counter(_values(1, CRASH_START, STALL_AT))
    # each task's marker: the last micro-batch it committed, in a group of its own
    for task in range(PARTITIONS):
        markers = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"strom-eos-{queries[True].id}-{task}",
            }
        )
        try:
            (marker,) = markers.committed([TopicPartition(sinks[True], 0)], timeout=30)
        finally:
            markers.close()
        assert marker.offset == LAST_BATCH

    # at-least-once: what micro-batch 1 wrote before the crash is there twice
    twice = {0: _values(0, CRASH_START, CRASH_END), 1: _values(1, CRASH_START, STALL_AT)}
    written = _read(broker.bootstrap, sinks[False], "read_uncommitted")
    for p in range(PARTITIONS):
        assert Counter(written[p]) == Counter(every[p]) + Counter(twice[p])


def test_a_task_sees_the_jvm_it_runs_in_and_its_death(spark) -> None:
    """The check before each commit: a Spark task finds the JVM that runs it, and a java
    process that is gone (or any other process) does not count as alive."""
    from strom.spark.exactly_once import jvm_alive, jvm_ancestor

    found = spark.sparkContext.parallelize([0], 1).map(lambda _: jvm_ancestor()).collect()
    assert found[0] is not None and jvm_alive(found[0])
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not jvm_alive(sleeper.pid)  # not a java process
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not jvm_alive(sleeper.pid)  # gone
    assert jvm_alive(None)  # no JVM found: nothing to check
