"""``strom transactions`` (kafka-transactions.sh) against a real broker: transactions
opened by confluent-kafka producers are listed, described, shown in their partition's
producer state, and ended by ``abort`` (by start offset, and by producer id and epochs),
after which read_committed consumers read past them; ``find-hanging`` does not report
a transaction its coordinator knows; ``list`` on three brokers merges what each
coordinates; bad arguments are one line and a nonzero exit."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker_process import free_port
from cli_helpers import ok, one_line_error, strom, table_rows, tool
from cluster_process import Cluster
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as Tp
from confluent_kafka.admin import AdminClient
from kafka_helpers import create_topic, wait_until

TXN_TIMEOUT_MS = 600_000  # long enough that the coordinator never aborts on its own here
PRODUCERS_HEADER = [
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
]


def transactions(broker, *args: str):
    return tool(broker, "transactions", *args)


def _broker_id(broker) -> int:
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    (broker_id,) = metadata.brokers
    return broker_id


def _open_transaction(broker, topic: str, transactional_id: str) -> Producer:
    """Two plain records (offsets 0 and 1), then a transaction of three records left open
    (offsets 2-4), then one more plain record (offset 5)."""
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(2):
        plain.produce(topic, f"before-{i}".encode())
    plain.flush(10)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"in-txn-{i}".encode())
    assert producer.flush(10) == 0, "the transaction's records were not all written"
    plain.produce(topic, b"after")
    plain.flush(10)
    return producer


def _values(broker, topic: str, isolation: str) -> list[bytes]:
    """Partition 0 of ``topic`` from its start to the end ``isolation`` sees (for
    read_committed, the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([Tp(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise KafkaException(msg.error())
            values.append(msg.value())
        raise AssertionError(f"never reached the end of {topic}-0 ({isolation})")
    finally:
        consumer.close()


def _producer_rows(broker, topic: str) -> list[list[str]]:
    result = ok(transactions(broker, "describe-producers", "--topic", topic, "--partition", "0"))
    assert all(column in result.stdout for column in PRODUCERS_HEADER)
    return table_rows(result.stdout)


def test_list_describe_describe_producers_and_abort_by_start_offset(broker) -> None:
    topic = f"hang-{uuid.uuid4().hex[:8]}"
    transactional_id = f"tx-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    broker_id = _broker_id(broker)
    _producer = _open_transaction(broker, topic, transactional_id)

    # The open transaction, as its partition's leader knows it: it starts at offset 2.
    rows = _producer_rows(broker, topic)
    open_rows = [row for row in rows if row[5] != "None"]
    assert len(open_rows) == 1, rows
    producer_id, epoch, _coordinator_epoch, last_sequence, last_timestamp, start = open_rows[0]
    assert start == "2"
    assert last_sequence == "2"  # three records, sequences 0-2
    assert int(last_timestamp) > 0

    # As its coordinator knows it, listed by every broker (Kafka's shape: the bootstrap
    # option before the command) and described.
    listed = ok(strom("transactions", "--bootstrap-server", broker.bootstrap, "list"))
    assert [transactional_id, str(broker_id), producer_id, "Ongoing"] in table_rows(listed.stdout)
    older = ok(transactions(broker, "list", "--duration-filter", "0"))
    assert transactional_id in [row[0] for row in table_rows(older.stdout)]
    hour = ok(transactions(broker, "list", "--duration-filter", "3600000"))
    assert transactional_id not in [row[0] for row in table_rows(hour.stdout)]

    described = ok(transactions(broker, "describe", "--transactional-id", transactional_id))
    for column in ("CoordinatorId", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs"):
        assert column in described.stdout
    (row,) = table_rows(described.stdout)
    coordinator, txn_id, pid, txn_epoch, state, timeout, start_ms, duration, partitions = row
    assert (coordinator, txn_id, pid, txn_epoch, state) == (
        str(broker_id),
        transactional_id,
        producer_id,
        epoch,
        "Ongoing",
    )
    assert timeout == str(TXN_TIMEOUT_MS)
    assert int(start_ms) > 0 and int(duration) >= 0
    assert partitions == f"{topic}-0"

    # read_committed readers stop at the open transaction's first offset.
    assert _values(broker, topic, "read_committed") == [b"before-0", b"before-1"]

    aborted = ok(
        transactions(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    )
    assert producer_id in aborted.stdout

    # Ended: no open transaction on the partition; its records are invisible to
    # read_committed readers, which now read past it to the plain record after it.
    assert all(row[5] == "None" for row in _producer_rows(broker, topic))
    assert _values(broker, topic, "read_committed") == [b"before-0", b"before-1", b"after"]
    assert _values(broker, topic, "read_uncommitted") == [
        b"before-0",
        b"before-1",
        b"in-txn-0",
        b"in-txn-1",
        b"in-txn-2",
        b"after",
    ]
    # Nothing open starts there any more.
    again = transactions(
        broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2"
    )
    assert "no open transaction starts at offset 2" in one_line_error(again, 1)


def test_abort_by_producer_id_and_epochs(broker) -> None:
    topic = f"hang-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    _producer = _open_transaction(broker, topic, f"tx-{topic}")
    (open_row,) = [row for row in _producer_rows(broker, topic) if row[5] != "None"]
    producer_id, epoch, coordinator_epoch = open_row[:3]
    assert _values(broker, topic, "read_committed") == [b"before-0", b"before-1"]

    ok(
        transactions(
            broker,
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--producer-id",
            producer_id,
            "--producer-epoch",
            epoch,
            "--coordinator-epoch",
            coordinator_epoch,
        )
    )
    assert all(row[5] == "None" for row in _producer_rows(broker, topic))
    assert _values(broker, topic, "read_committed") == [b"before-0", b"before-1", b"after"]


def test_find_hanging_leaves_out_what_the_coordinator_knows(broker) -> None:
    topic = f"known-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    broker_id = str(_broker_id(broker))
    producer = _open_transaction(broker, topic, f"tx-{topic}")
    (open_row,) = [row for row in _producer_rows(broker, topic) if row[5] != "None"]
    found = ok(
        transactions(
            broker, "find-hanging", "--broker-id", broker_id, "--max-transaction-timeout", "0"
        )
    )
    assert "Duration(min)" in found.stdout
    assert open_row[0] not in [row[2] for row in table_rows(found.stdout)]
    by_topic = ok(
        transactions(
            broker,
            "find-hanging",
            "--topic",
            topic,
            "--partition",
            "0",
            "--max-transaction-timeout",
            "0",
        )
    )
    assert table_rows(by_topic.stdout) == []
    producer.abort_transaction(30)


def test_describe_without_an_open_transaction(broker) -> None:
    """An id whose producer has no transaction under way: Kafka's -1 start time shows as
    None."""
    transactional_id = f"idle-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    described = ok(transactions(broker, "describe", "--transactional-id", transactional_id))
    (row,) = table_rows(described.stdout)
    assert row[1] == transactional_id
    assert row[4] == "Empty"
    assert row[6:9] == ["None", "None", ""]


def test_unknown_things_are_one_line_and_exit_1(broker) -> None:
    unknown_id = transactions(broker, "describe", "--transactional-id", "nobody-here")
    assert "TRANSACTIONAL_ID_NOT_FOUND" in one_line_error(unknown_id, 1)
    no_topic = transactions(broker, "describe-producers", "--topic", "no-such", "--partition", "0")
    assert "no-such" in one_line_error(no_topic, 1)
    topic = f"one-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    no_partition = transactions(broker, "describe-producers", "--topic", topic, "--partition", "7")
    assert "no partition 7" in one_line_error(no_partition, 1)
    nothing_open = transactions(
        broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0"
    )
    assert "no open transaction starts at offset 0" in one_line_error(nothing_open, 1)
    no_broker = transactions(
        broker, "describe-producers", "--topic", topic, "--partition", "0", "--broker-id", "99"
    )
    assert "broker 99" in one_line_error(no_broker, 1)


def test_unreachable_broker_and_bad_arguments() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    unreachable = [
        ("list",),
        ("describe", "--transactional-id", "x"),
        ("describe-producers", "--topic", "t", "--partition", "0"),
        ("abort", "--topic", "t", "--partition", "0", "--start-offset", "3"),
    ]
    bad = [
        (),
        ("bogus",),
        ("describe",),
        ("describe-producers", "--topic", "t"),
        ("describe-producers", "--topic", "t", "--partition", "x"),
        ("describe-producers", "--topic", "t", "--partition", "-1"),
        ("abort", "--topic", "t", "--partition", "0"),
        ("abort", "--topic", "t", "--partition", "0", "--start-offset", "-1"),
        ("abort", "--topic", "t", "--partition", "0", "--producer-id", "5"),
        (
            "abort",
            "--topic",
            "t",
            "--partition",
            "0",
            "--producer-id",
            "5",
            "--producer-epoch",
            "0",
        ),
        ("abort", "--topic", "t", "--partition", "0", "--start-offset", "1", "--producer-id", "5"),
        ("list", "--duration-filter", "soon"),
        ("find-hanging",),
        ("find-hanging", "--partition", "0", "--broker-id", "1"),
    ]
    runs = [("transactions", *args, "--bootstrap-server", nowhere) for args in unreachable]
    runs += [("transactions", "--bootstrap-server", nowhere, *args) for args in bad]
    with ThreadPoolExecutor(8) as pool:  # each is a process start: run them side by side
        results = list(pool.map(lambda args: strom(*args), runs))
    for args, result in zip(unreachable, results[: len(unreachable)], strict=True):
        assert nowhere in one_line_error(result, 1), args
    for args, result in zip(bad, results[len(unreachable) :], strict=True):
        assert one_line_error(result, 2).startswith("strom transactions"), args
    assert "HOST:PORT" in one_line_error(
        strom("transactions", "--bootstrap-server", "nope", "describe", "--transactional-id", "x"),
        1,
    )


def test_list_merges_the_coordinators_of_three_brokers(tmp_path: Path) -> None:
    """Transactional ids spread over the coordinators of a three-node cluster: ``list``,
    given one broker, shows each id once with the coordinator ``describe`` names."""
    cluster = Cluster.combined(tmp_path)
    producers: list[Producer] = []
    try:
        cluster.start_all()
        bootstrap = cluster.bootstrap()
        wait_until(
            lambda: (
                sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=3).brokers)
                == [1, 2, 3]
            ),
            20,
            "three brokers",
        )
        coordinators: dict[str, str] = {}
        for i in range(12):
            transactional_id = f"spread-{i}"
            producer = Producer(
                {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
            )
            producer.init_transactions(30)
            producers.append(producer)
            described = ok(
                strom(
                    "transactions",
                    "--bootstrap-server",
                    bootstrap,
                    "describe",
                    "--transactional-id",
                    transactional_id,
                )
            )
            (row,) = table_rows(described.stdout)
            coordinators[transactional_id] = row[0]
            if i >= 3 and len(set(coordinators.values())) >= 2:
                break
        assert len(set(coordinators.values())) >= 2, coordinators
        listed = ok(strom("transactions", "--bootstrap-server", cluster.nodes[1].bootstrap, "list"))
        rows = [row for row in table_rows(listed.stdout) if row[0] in coordinators]
        assert sorted(row[0] for row in rows) == sorted(coordinators)  # each id once
        assert {row[0]: row[1] for row in rows} == coordinators
        assert {row[3] for row in rows} == {"Empty"}
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for producer in producers:
            producer.flush(0)
        cluster.kill_all()
