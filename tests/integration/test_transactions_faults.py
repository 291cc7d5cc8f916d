"""Transactions through faults: the broker killed (-9) in the middle of transactions, a
producer killed with its transaction open, and the coordinator's node killed in a
three-node cluster.

The checker reads the topics back with plain confluent-kafka consumers and judges by
the values alone (``<producer>:<transaction>:<record>``): every transaction is either
wholly visible to read_committed readers or not at all, and every transaction its
producer saw committed is among the visible ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

from cluster_process import Cluster
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka_helpers import create_topic, wait_until
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from raw_client import RawClient

from strom.protocol.errors import ErrorCode

RECORDS_PER_TXN = 6

# A producer process: transactions of RECORDS_PER_TXN records spread over the topic's
# partitions, one line on stdout after each commit returns, until it is killed.
PRODUCER_SCRIPT = """
import sys
from confluent_kafka import Producer
bootstrap, topic, name, records, timeout_ms = sys.argv[1:6]
producer = Producer({
    "bootstrap.servers": bootstrap,
    "transactional.id": name,
    "transaction.timeout.ms": int(timeout_ms),
    "linger.ms": 1,
})
producer.init_transactions(60)
print("ready", flush=True)
txn = 0
while True:
    producer.begin_transaction()
    for i in range(int(records)):
        producer.produce(topic, f"{name}:{txn}:{i}".encode())
    if int(records) == 0:
        producer.produce(topic, f"{name}:{txn}:open".encode())
        producer.flush(30)
        print("open", flush=True)
        sys.stdin.read()
    producer.commit_transaction(60)
    print(f"committed {txn}", flush=True)
    txn += 1
"""


def _spawn_producer(
    bootstrap: str, topic: str, name: str, records: int, timeout_ms: int = 60000
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            PRODUCER_SCRIPT,
            bootstrap,
            topic,
            name,
            str(records),
            str(timeout_ms),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[str]:
    """Every value of ``topic`` up to the end its ``isolation`` level reaches."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[str] = []
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
            values.append(msg.value().decode())
            at_end.discard(msg.partition())
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"{topic} not read to its end: {sorted(at_end)}"
    return values


def _transactions(values: list[str]) -> dict[tuple[str, str], set[str]]:
    by_txn: dict[tuple[str, str], set[str]] = defaultdict(set)
    for value in values:
        name, txn, record = value.split(":")
        by_txn[(name, txn)].add(record)
    return by_txn


def _assert_all_or_nothing(values: list[str]) -> dict[tuple[str, str], set[str]]:
    by_txn = _transactions(values)
    assert len(values) == sum(len(records) for records in by_txn.values()), "a record twice"
    whole = {str(i) for i in range(RECORDS_PER_TXN)}
    half = {key: sorted(records) for key, records in by_txn.items() if records != whole}
    assert not half, f"transactions half visible to read_committed: {half}"
    return by_txn


def _end_offsets(bootstrap: str, topic: str, partitions: int, isolation: IsolationLevel) -> list:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    futures = admin.list_offsets(wanted, isolation_level=isolation, request_timeout=10)
    return [futures[tp].result(15).offset for tp in sorted(futures, key=lambda t: t.partition)]


def _lso_reaches_end(bootstrap: str, topic: str, partitions: int) -> bool:
    """ListOffsets answers read_committed the last stable offset: equal to the end of
    the log once no transaction is left open."""
    stable = _end_offsets(bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED)
    end = _end_offsets(bootstrap, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
    return stable == end


def _committed_lines(proc: subprocess.Popen[str]) -> list[int]:
    out, _ = proc.communicate(timeout=10)
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]


def _read_commits(proc: subprocess.Popen[str], count: int, timeout: float = 60) -> list[int]:
    """Read the producer's output until it has reported ``count`` commits; those."""
    commits: list[int] = []
    deadline = time.monotonic() + timeout
    while len(commits) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"producer exited after {len(commits)} commits")
        if line.startswith("committed"):
            commits.append(int(line.split()[1]))
    assert len(commits) == count, f"{len(commits)} commits in {timeout}s"
    return commits


def _wait_line(proc: subprocess.Popen[str], want: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"producer exited before {want!r}")
        if line.strip() == want:
            return
    raise AssertionError(f"producer did not print {want!r} in {timeout}s")


def test_broker_killed_in_the_middle_of_transactions(fresh_broker) -> None:
    """Three producers commit transactions across three partitions; the broker is
    killed -9 under them, then the producers. After a restart every transaction is
    committed or aborted, none half visible, every acknowledged commit is there, and the
    coordinator serves the same transactional ids again."""
    broker = fresh_broker
    broker.start()
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    names = [f"crash-{i}-{topic}" for i in range(3)]
    procs = [_spawn_producer(broker.bootstrap, topic, name, RECORDS_PER_TXN) for name in names]
    early: dict[str, list[int]] = {}
    try:
        for proc in procs:
            _wait_line(proc, "ready")
        # Each producer has committed transactions and goes on with more: the kill comes
        # in the middle of them, however fast this machine is.
        for name, proc in zip(names, procs, strict=True):
            early[name] = _read_commits(proc, 3)
        broker.kill()
    finally:
        for proc in procs:
            proc.kill()
    acknowledged = {
        name: early.get(name, []) + _committed_lines(proc)
        for name, proc in zip(names, procs, strict=True)
    }
    assert all(acknowledged.values()), acknowledged

    broker.start()
    # New instances of the same ids: the coordinator, reloaded from __transaction_state,
    # ends whatever each predecessor left open and serves the next transaction.
    for name in names:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name})
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            producer.produce(topic, f"{name}:after:{i}".encode())
        producer.commit_transaction(60)

    wait_until(lambda: _lso_reaches_end(broker.bootstrap, topic, 3), 30, "every txn ended")
    visible = _assert_all_or_nothing(_read_all(broker.bootstrap, topic, 3, "read_committed"))
    for name, txns in acknowledged.items():
        missing = [t for t in txns if (name, str(t)) not in visible]
        assert not missing, f"{name}: acknowledged commits lost: {missing}"
        assert (name, "after") in visible
    everything = _transactions(_read_all(broker.bootstrap, topic, 3, "read_uncommitted"))
    assert set(visible) <= set(everything)


def test_transaction_of_a_killed_producer_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    from broker_process import BrokerProcess

    broker = BrokerProcess(
        tmp_path / "data",
        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"},
    )
    broker.start()
    proc = None
    try:
        topic = f"abandoned-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, 1)
        # The transaction times out 6 s after it began: the check that it holds the LSO
        # comes right after the kill (with 2 s, a loaded machine's kill, produce and
        # ListOffsets once came after the abort and the check failed).
        proc = _spawn_producer(broker.bootstrap, topic, f"gone-{topic}", 0, timeout_ms=6000)
        _wait_line(proc, "ready")
        _wait_line(proc, "open")
        os.kill(proc.pid, signal.SIGKILL)
        # While the transaction is open the LSO holds read_committed readers before it.
        assert not _lso_reaches_end(broker.bootstrap, topic, 1)
        proc.wait(10)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(topic, b"plain:0:after")
        plain.flush(10)
        wait_until(lambda: _lso_reaches_end(broker.bootstrap, topic, 1), 30, "the abort")
        assert _read_all(broker.bootstrap, topic, 1, "read_committed") == ["plain:0:after"]
        assert _read_all(broker.bootstrap, topic, 1, "read_uncommitted") == [
            f"gone-{topic}:0:open",
            "plain:0:after",
        ]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if broker.alive():
            broker.kill()


def _transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with RawClient(int(port)) as client:
        response = client.request(
            FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,))
        )
    (found,) = response.coordinators
    assert found.error_code == ErrorCode.none, found
    return int(found.node_id)


def test_coordinator_moves_when_its_node_is_killed(tmp_path: Path) -> None:
    """Three nodes, the transaction state replicated three times: the node coordinating
    a transactional id is killed -9 with a transaction open; the producer commits it
    through the new coordinator, and the next ones too."""
    cluster = Cluster.combined(tmp_path)
    try:
        cluster.start_all()
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 30, "three brokers")
        topic = f"moving-{uuid.uuid4().hex[:8]}"
        futures = admin.create_topics([NewTopic(topic, 3, replication_factor=3)])
        futures[topic].result(30)
        name = f"mover-{topic}"
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": name, "linger.ms": 1}
        )
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            producer.produce(topic, f"{name}:0:{i}".encode())
        producer.commit_transaction(60)

        coordinator = _transaction_coordinator(bootstrap, name)
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            producer.produce(topic, f"{name}:1:{i}".encode())
        producer.flush(30)
        cluster.nodes[coordinator].kill()
        survivors = cluster.bootstrap()
        wait_until(
            lambda: _transaction_coordinator(survivors, name) != coordinator,
            30,
            "a new coordinator",
        )
        producer.commit_transaction(60)
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            producer.produce(topic, f"{name}:2:{i}".encode())
        producer.commit_transaction(60)

        wait_until(lambda: _lso_reaches_end(survivors, topic, 3), 30, "every txn ended")
        visible = _assert_all_or_nothing(_read_all(survivors, topic, 3, "read_committed"))
        assert sorted(txn for _, txn in visible) == ["0", "1", "2"]
    finally:
        cluster.kill_all()
