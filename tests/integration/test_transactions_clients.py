"""Transactions with clients other than librdkafka: aiokafka's transactional producer
(committed and aborted transactions; consume-transform-produce with the offsets sent to
the transaction), kafka-python's (2.x has init_transactions, begin/commit/abort_transaction
and send_offsets_to_transaction; 2.3.3 here) and faust (faust-streaming), which processes
exactly once through one aiokafka transactional producer per input partition, run as
workers in child processes (tests/faust_app.py).

Each reader reads a topic from its start to its end: read_committed readers (librdkafka,
aiokafka and kafka-python consumers) see the committed records only, read_uncommitted
readers the aborted ones as well.

What the clients do not do, found writing these tests (none of it is the broker's):

- kafka-python 2.3.3 aborting while a produce request is in flight loops on a ValueError
  in its I/O thread and the abort never ends; the test flushes before it aborts.
- faust-streaming 0.15.3 sends outputs to a topic its consumer does not subscribe to
  outside any transaction (faust issue 177); tests/faust_app.py subscribes to its sink.
- faust commits on a timer and every N records, in tasks of their own, so a transaction
  can carry an output whose input's offset is not acknowledged yet: that offset goes in
  the next transaction. A worker killed before it commits that one gets the input
  processed again, and its output is committed twice (two runs of three killing a
  worker at a random point). The faust test therefore kills a worker that has committed
  no transaction at all (its commit settings keep them open), so none of its outputs can
  have been committed without its input's offset.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata
from kafka_helpers import create_topic, wait_until
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

FAUST_APP = Path(__file__).parent.parent / "faust_app.py"


def _read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    """Every value of ``topic`` from its start to its end for ``isolation``, read by
    librdkafka (the end a read_committed reader sees is the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            values.append(msg.value())
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return values


async def _aio_read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    """The same as :func:`_read` with aiokafka's consumer: up to the end offsets it reports
    for ``isolation`` (the last stable offsets for read_committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation
    )
    await consumer.start()
    try:
        tps = [AioTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, "aiokafka did not reach the end offsets"
            batch = await consumer.getmany(timeout_ms=500)
            values += [r.value for records in batch.values() for r in records]
        return values
    finally:
        await consumer.stop()


def _kp_read(bootstrap: str, topic: str, isolation: str, partitions: int) -> list[bytes]:
    """The same as :func:`_read` with kafka-python's consumer."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation
    )
    try:
        tps = [KpTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "kafka-python did not reach the end offsets"
            batch = consumer.poll(timeout_ms=500)
            values += [r.value for records in batch.values() for r in records]
        return values
    finally:
        consumer.close()


def _committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = check.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
    finally:
        check.close()
    return [tp.offset for tp in offsets]


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


# -- aiokafka ----------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_aiokafka_committed_and_aborted_transactions(broker) -> None:
    topic = f"aio-txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}"
        )
        await asyncio.wait_for(producer.start(), 30)  # start() runs InitProducerId
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send(topic, f"committed-{i}".encode(), partition=i % 2)
            await producer.begin_transaction()
            sent = [
                await producer.send(topic, f"aborted-{i}".encode(), partition=i % 2)
                for i in range(5)
            ]
            await asyncio.wait_for(asyncio.gather(*sent), 30)  # in the log before the abort
            await asyncio.wait_for(producer.abort_transaction(), 30)
            async with producer.transaction():
                await producer.send(topic, b"after-abort", partition=0)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(produce(), 120))

    committed = sorted([f"committed-{i}".encode() for i in range(10)] + [b"after-abort"])
    everything = sorted(committed + [f"aborted-{i}".encode() for i in range(5)])
    assert sorted(_read(broker.bootstrap, topic, "read_committed", 2)) == committed
    assert sorted(_read(broker.bootstrap, topic, "read_uncommitted", 2)) == everything
    aio_committed = asyncio.run(_aio_read(broker.bootstrap, topic, "read_committed", 2))
    assert sorted(aio_committed) == committed
    aio_uncommitted = asyncio.run(_aio_read(broker.bootstrap, topic, "read_uncommitted", 2))
    assert sorted(aio_uncommitted) == everything


@pytest.mark.timeout(240)
def test_aiokafka_consume_transform_produce(broker) -> None:
    source = f"aio-in-{uuid.uuid4().hex[:8]}"
    sink = f"aio-out-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, sink, 3)
    total = 300
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(total):
        plain.produce(source, str(i).encode(), partition=i % 3)
    assert plain.flush(10) == 0
    group = f"eos-{source}"

    async def process() -> bool:
        consumer = AIOKafkaConsumer(
            source,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{source}"
        )
        await consumer.start()
        await producer.start()
        try:
            done = 0
            aborted_once = False
            while done < total:
                batch = await consumer.getmany(timeout_ms=1000, max_records=50)
                records = [r for got in batch.values() for r in got]
                if not records:
                    continue
                await producer.begin_transaction()
                for r in records:
                    await producer.send(sink, b"out-" + r.value, partition=r.partition)
                if not aborted_once and done >= total // 3:
                    # Abort one batch half way: rewind to the committed offsets, redo it.
                    aborted_once = True
                    await producer.flush()
                    await producer.abort_transaction()
                    for tp in batch:
                        committed = await consumer.committed(tp)
                        consumer.seek(tp, committed if committed is not None else 0)
                    continue
                offsets = {tp: got[-1].offset + 1 for tp, got in batch.items() if got}
                await producer.send_offsets_to_transaction(offsets, group)
                await producer.commit_transaction()
                done += len(records)
            return aborted_once
        finally:
            await producer.stop()
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(process(), 180))

    out = _read(broker.bootstrap, sink, "read_committed", 3)
    counts = Counter(out)
    assert len(out) == total and set(counts.values()) == {1}
    assert counts.keys() == {f"out-{i}".encode() for i in range(total)}
    # read_uncommitted also sees the aborted batch's records.
    assert len(_read(broker.bootstrap, sink, "read_uncommitted", 3)) > total
    # The group's offsets were committed with the transactions: the end of the input.
    assert _committed_offsets(broker.bootstrap, group, source, 3) == [100, 100, 100]


# -- kafka-python ------------------------------------------------------------------------


def _kp_producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id, max_block_ms=30_000
    )
    producer.init_transactions()
    return producer


@pytest.mark.timeout(180)
def test_kafka_python_committed_and_aborted_transactions(broker) -> None:
    topic = f"kp-txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    producer = _kp_producer(broker.bootstrap, f"tx-{topic}")
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        futures = [producer.send(topic, f"aborted-{i}".encode(), partition=i % 2) for i in range(5)]
        producer.flush(30)
        for future in futures:  # in the log before the abort
            future.get(timeout=30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"after-abort", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)

    committed = sorted([f"committed-{i}".encode() for i in range(10)] + [b"after-abort"])
    everything = sorted(committed + [f"aborted-{i}".encode() for i in range(5)])
    assert sorted(_read(broker.bootstrap, topic, "read_committed", 2)) == committed
    assert sorted(_read(broker.bootstrap, topic, "read_uncommitted", 2)) == everything
    assert sorted(_kp_read(broker.bootstrap, topic, "read_committed", 2)) == committed
    assert sorted(_kp_read(broker.bootstrap, topic, "read_uncommitted", 2)) == everything


@pytest.mark.timeout(180)
def test_kafka_python_send_offsets_to_transaction(broker) -> None:
    source = f"kp-in-{uuid.uuid4().hex[:8]}"
    sink = f"kp-out-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    group = f"kp-eos-{source}"
    producer = _kp_producer(broker.bootstrap, f"tx-{source}")
    tp = KpTopicPartition(source, 0)
    try:
        producer.begin_transaction()
        producer.send(sink, b"aborted", partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(99, "", -1)}, group)
        # kafka-python 2.3.3 fails its I/O thread, in a loop, when abort_transaction()
        # finds a produce request in flight (RecordAccumulator.abort_undrained_batches
        # removes a drained batch from its queue: ValueError "not in deque"), and the
        # abort never ends. Let the records be written first.
        producer.flush(30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(sink, b"committed", partition=0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(42, "", -1)}, group)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    assert _read(broker.bootstrap, sink, "read_committed", 1) == [b"committed"]
    assert _committed_offsets(broker.bootstrap, group, source, 1) == [42]


# -- faust -------------------------------------------------------------------------------


class _FaustWorker:
    """``tests/faust_app.py`` as a worker process (its own process group), logging to
    ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(FAUST_APP), "worker", "--without-web", "--loglevel", "info"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        assert self.proc.poll() is None, f"faust worker exited:\n{self.log()}"

    def log(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the worker; SIGKILL it once it logs "Closing event loop" (its services
        are stopped, its consumer has left the group: faust 0.15.3 often stays on for good
        after that line) or if it has not exited after 10 s. The tests stop a worker this
        way only once its input is committed or when its transactions are to be aborted."""
        if self.proc.poll() is None:
            written = self.log_path.stat().st_size
            os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + 10
            while self.proc.poll() is None and time.monotonic() < deadline:
                if b"Closing event loop" in self.log_path.read_bytes()[written:]:
                    break
                time.sleep(0.1)
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _faust_transactional_ids(port: int, app_id: str) -> set[str]:
    with RawClient(port) as client:
        listed = client.request(ListTransactionsRequest())
    assert listed.error_code == ErrorCode.none
    return {
        t.transactional_id
        for t in listed.transaction_states
        if t.transactional_id.startswith(app_id)
    }


@pytest.mark.timeout(400)
def test_faust_exactly_once_worker_killed_with_open_transactions(broker, tmp_path: Path) -> None:
    """A faust agent with processing_guarantee="exactly_once": a first worker processes
    and commits half the input and stops; a second one, committing only after 100,000
    records or an hour, writes the outputs of the other half in open transactions and is
    killed (SIGKILL); a third takes its transactional ids over, which aborts them, and does
    that half again. read_committed readers see each output exactly once,
    read_uncommitted readers see the aborted half as well."""
    source = f"faust-in-{uuid.uuid4().hex[:8]}"
    sink = f"faust-out-{uuid.uuid4().hex[:8]}"
    partitions = 3
    half = 150
    total = 2 * half
    create_topic(broker.bootstrap, source, partitions)
    create_topic(broker.bootstrap, sink, partitions)
    app_id = f"strom-eos-{source}"
    env = {
        **os.environ,
        "FAUST_BROKER": f"kafka://{broker.bootstrap}",
        "FAUST_APP_ID": app_id,
        "FAUST_SOURCE": source,
        "FAUST_SINK": sink,
        "FAUST_PARTITIONS": str(partitions),
        "FAUST_DATADIR": str(tmp_path / "faust-data"),
    }
    plain = Producer({"bootstrap.servers": broker.bootstrap})

    def produce(numbers: range) -> None:
        for i in numbers:
            plain.produce(source, str(i).encode(), partition=i % partitions)
        assert plain.flush(10) == 0

    def run_until(worker: _FaustWorker, condition, what: str) -> None:
        def check() -> bool:
            worker.check_alive()
            return condition()

        try:
            wait_until(check, 120, what)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{worker.log()}") from None

    def input_committed(count: int) -> bool:
        try:
            offsets = _committed_offsets(broker.bootstrap, app_id, source, partitions)
        except KafkaException:
            # librdkafka asks for stable offsets: while a transaction holding offsets of
            # the group is open, the broker answers UNSTABLE_OFFSET_COMMIT and the call
            # times out.
            return False
        return sum(max(o, 0) for o in offsets) == count

    def outputs(isolation: str) -> list[bytes]:
        return _read(broker.bootstrap, sink, isolation, partitions)

    produce(range(half))
    first = _FaustWorker(env, tmp_path / "faust-1.log")
    try:
        run_until(first, lambda: input_committed(half), "the first half to be committed")
    finally:
        first.stop()

    produce(range(half, total))
    lazy = {**env, "FAUST_COMMIT_EVERY": "100000", "FAUST_COMMIT_INTERVAL": "3600"}
    second = _FaustWorker(lazy, tmp_path / "faust-2.log")
    try:
        run_until(
            second,
            lambda: len(outputs("read_uncommitted")) >= total,
            "the second half's outputs in open transactions",
        )
        assert len(outputs("read_committed")) == half, second.log()
    finally:
        second.stop(signal.SIGKILL)

    third = _FaustWorker(env, tmp_path / "faust-3.log")
    try:
        run_until(third, lambda: input_committed(total), "the second half to be committed")
    finally:
        third.stop()

    committed = Counter(outputs("read_committed"))
    assert committed == Counter(f"out-{i}".encode() for i in range(total)), [
        (value, n) for value, n in committed.items() if n != 1
    ]
    uncommitted = outputs("read_uncommitted")
    assert Counter(uncommitted) == committed + Counter(
        f"out-{i}".encode() for i in range(half, total)
    )
    # Commit and abort markers take offsets of their own.
    assert sum(_end_offsets(broker.bootstrap, sink, partitions)) > len(uncommitted)
    # One transactional id per input partition, "<app id>-<topic group>-<partition>".
    assert len(_faust_transactional_ids(broker.port, app_id)) >= partitions
