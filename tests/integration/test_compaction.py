"""Compaction over the wire: a compacted topic with gaps is read to its end by
confluent-kafka, kafka-python and aiokafka; keyless records are refused with
INVALID_RECORD; writes made while the cleaner runs are kept; a ``kill -9`` during a
cleaning loses nothing that compaction should keep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import KafkaError, Producer
from kafka_helpers import (
    consume_to_end,
    create_topic,
    read_with_aiokafka,
    read_with_kafka_python,
)

from strom.storage.checkpoint import read_checkpoint

FAST_CLEANER = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "100"}
COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "4000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
    "file.delete.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("compaction") / "data", FAST_CLEANER)
    process.start()
    yield process
    if process.alive():
        process.stop()


def _produce_rounds(bootstrap: str, topic: str, rounds: range, keys: int, **config) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **config})
    for r in rounds:
        for k in range(keys):
            producer.produce(topic, key=b"key-%d" % k, value=b"%d:" % r + b"v" * 90, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


BACKLOG = 3_000  # records the busy writer may be ahead of the cleaner


def _cleaned_upto(broker: BrokerProcess, topic: str) -> int:
    return read_checkpoint(Path(broker.data_dir) / "cleaner-offset-checkpoint").get((topic, 0), 0)


def _wait_cleaned(broker: BrokerProcess, topic: str, at_least: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while (upto := _cleaned_upto(broker, topic)) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    assert upto >= at_least, f"not cleaned up to {at_least} in time:\n{broker.logs()}"
    return upto


def _latest_per_key(messages) -> dict[bytes, bytes]:
    return {m.key(): m.value() for m in messages}


def test_every_client_reads_a_compacted_topic_to_its_end(broker) -> None:
    topic = "compacted"
    create_topic(broker.bootstrap, topic, 1, COMPACT)
    _produce_rounds(broker.bootstrap, topic, range(20), 50)
    _produce_rounds(broker.bootstrap, topic, range(20, 21), 1)  # rolls: the rest is closed
    end = 20 * 50 + 1
    upto = _wait_cleaned(broker, topic, 900)

    messages = consume_to_end(broker.bootstrap, topic, timeout=30)
    offsets = [m.offset() for m in messages]
    assert offsets == sorted(set(offsets)) and offsets[-1] == end - 1
    assert len(offsets) < end  # gaps: superseded records are gone
    expected = {b"key-%d" % k: b"19:" + b"v" * 90 for k in range(50)}
    expected[b"key-0"] = b"20:" + b"v" * 90
    assert _latest_per_key(messages) == expected
    assert all(
        o >= upto or m.value().startswith(b"19:") for o, m in zip(offsets, messages, strict=True)
    )

    read = read_with_kafka_python(broker.bootstrap, topic, end - 1, idle_s=10)
    assert [r.offset for r in read] == offsets
    read = read_with_aiokafka(broker.bootstrap, topic, end - 1)
    assert [r.offset for r in read] == offsets


def test_keyless_records_are_refused(broker) -> None:
    """Kafka names each keyless record of the batch (KIP-467): librdkafka fails those
    with INVALID_RECORD and the keyed records of the same batch with its "different
    record" error, and appends nothing."""
    topic = "compacted-keyless"
    create_topic(broker.bootstrap, topic, 1, COMPACT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    outcomes: dict[bytes, KafkaError | None] = {}
    # (librdkafka tells the records apart only when the broker names more than one)
    batch = [(b"k", b"keyed 0"), (None, b"keyless 1"), (b"k", b"keyed 2"), (None, b"keyless 3")]
    for key, value in batch:
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=0,
            on_delivery=lambda err, msg: outcomes.__setitem__(msg.value(), err),
        )
    assert producer.flush(10) == 0
    assert {value: err and err.code() for value, err in outcomes.items()} == {
        b"keyed 0": KafkaError._INVALID_DIFFERENT_RECORD,
        b"keyless 1": KafkaError.INVALID_RECORD,
        b"keyed 2": KafkaError._INVALID_DIFFERENT_RECORD,
        b"keyless 3": KafkaError.INVALID_RECORD,
    }
    assert consume_to_end(broker.bootstrap, topic) == []


def test_writes_during_cleaning_are_kept(broker) -> None:
    topic = "compacted-busy"
    create_topic(broker.bootstrap, topic, 1, COMPACT)
    stop = threading.Event()
    rounds = [0]
    failed: list[BaseException] = []

    def write() -> None:
        # Paced (about 40 records a millisecond at most): unpaced, the writer and the
        # broker fill both cores, the idle-priority cleaner starves, and the log grows
        # to millions of records that the final read has to get through. Held back
        # while more than BACKLOG records are beyond the cleaned offset: on a loaded
        # machine the idle-priority cleaner falls behind, and each cleaning would take
        # longer than the one before (a second cleaning of 110,000 records once missed
        # the 30 s wait).
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
            cleaned = 0
            while not stop.is_set() or rounds[0] < 30:
                while rounds[0] * 40 - cleaned > BACKLOG and not stop.is_set():
                    cleaned = _cleaned_upto(broker, topic)
                    if rounds[0] * 40 - cleaned > BACKLOG:
                        producer.poll(0.05)
                for k in range(40):
                    value = b"%d" % rounds[0]
                    producer.produce(topic, key=b"key-%d" % k, value=value, partition=0)
                producer.poll(0.001)
                if len(producer) > 20_000:
                    producer.flush(30)
                rounds[0] += 1
            assert producer.flush(30) == 0, "records neither acknowledged nor failed"
        except BaseException as exc:  # the test fails with it, not just the thread
            failed.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        _wait_cleaned(broker, topic, 1)
        first = _cleaned_upto(broker, topic)
        _wait_cleaned(broker, topic, first + 1)  # at least two cleanings while writing
    finally:
        stop.set()
        writer.join(60)
    assert not writer.is_alive(), "the writer did not finish within 60 s"
    assert not failed, f"the writer failed: {failed[0]!r}"
    last = rounds[0] - 1
    messages = consume_to_end(broker.bootstrap, topic, timeout=30)
    assert _latest_per_key(messages) == {b"key-%d" % k: b"%d" % last for k in range(40)}
    offsets = [m.offset() for m in messages]
    assert offsets == sorted(set(offsets))


def _cleaning_files(broker: BrokerProcess, topic: str) -> list[str]:
    """The files a cleaning under way is writing (``*.cleaned``) or swapping in."""
    directory = Path(broker.data_dir) / f"{topic}-0"
    return sorted(p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap"))


def _wait_for(condition, timeout: float, what: str, broker: BrokerProcess) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert broker.alive(), f"the broker exited while waiting for {what}:\n{broker.logs()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{broker.logs()}"
        time.sleep(0.01)


def test_kill_during_cleaning_loses_nothing(fresh_broker) -> None:
    """kill -9 lands during a cleaning: as it starts, half a second in (its worker is
    starting or reading for the offset map), and while it writes the cleaned segment.
    The cleaner's I/O limit makes a cleaning take 6 s at least (about 3 MB read twice at
    1 MB/s), so each kill is known to land before it ended; the test checks that it did
    (no "cleaned" line before the kill)."""
    fresh_broker.overrides.update(FAST_CLEANER)
    fresh_broker.overrides["log.cleaner.enable"] = "false"
    fresh_broker.overrides["log.cleaner.io.max.bytes.per.second"] = "1000000"
    fresh_broker.start()
    topic = "compacted-killed"
    create_topic(fresh_broker.bootstrap, topic, 1, {**COMPACT, "segment.bytes": "200000"})
    _produce_rounds(fresh_broker.bootstrap, topic, range(60), 500)
    _produce_rounds(fresh_broker.bootstrap, topic, range(60, 61), 1)
    expected = {b"key-%d" % k: b"59:" + b"v" * 90 for k in range(500)}
    expected[b"key-0"] = b"60:" + b"v" * 90
    fresh_broker.stop()
    fresh_broker.overrides["log.cleaner.enable"] = "true"

    def started() -> bool:
        return "cleaning started" in fresh_broker.log_path.read_text(errors="replace")

    for kill_at in ("start", "offset map", "cleaned segment"):
        fresh_broker.log_path.write_bytes(b"")  # this round looks for new lines only
        fresh_broker.start()
        _wait_for(started, 30, "cleaning", fresh_broker)
        if kill_at == "offset map":
            time.sleep(0.5)  # the offset map alone takes 3 s at least to read
        elif kill_at == "cleaned segment":
            _wait_for(
                lambda: _cleaning_files(fresh_broker, topic), 60, "cleaned files", fresh_broker
            )
        fresh_broker.kill()
        before_kill = fresh_broker.log_path.read_text(errors="replace")
        assert "cleaned offsets up to" not in before_kill, f"killed after the cleaning ({kill_at})"
        left = _cleaning_files(fresh_broker, topic)
        assert bool(left) == (kill_at == "cleaned segment"), left

        messages = consume_after_restart(fresh_broker, topic)
        assert _latest_per_key(messages) == expected
        offsets = [m.offset() for m in messages]
        assert offsets == sorted(set(offsets))
        assert not _cleaning_files(fresh_broker, topic)
        if left:
            restarted = fresh_broker.log_path.read_text(errors="replace")[len(before_kill) :]
            assert "rolled back an unfinished cleaning" in restarted, restarted[-3000:]
        fresh_broker.kill()


def consume_after_restart(broker: BrokerProcess, topic: str):
    broker.overrides["log.cleaner.enable"] = "false"  # read what the crash left
    broker.start()
    try:
        return consume_to_end(broker.bootstrap, topic, timeout=30)
    finally:
        broker.overrides["log.cleaner.enable"] = "true"
