"""`strom groups` and `strom consume --group` run as a user runs them, against real groups.

A real broker process; real confluent-kafka consumers join groups and commit; the
tools run as subprocesses. Offsets shown or set by the tool are checked against
what the test produced and committed, and read back with OffsetFetch.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess, free_port
from cli_helpers import ok, one_line_error, strom, table_rows, tool
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_helpers import create_topic, wait_until

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-cli") / "data", OVERRIDES)
    process.start()
    yield process
    if process.alive():
        process.stop()


def new_topic(broker: BrokerProcess, partitions: int) -> str:
    name = f"grp-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def produce(
    broker: BrokerProcess,
    topic: str,
    counts: dict[int, int],
    timestamps: Callable[[int], int] | None = None,
) -> None:
    """``counts[p]`` records to partition p; with ``timestamps``, one batch per record."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for partition, count in counts.items():
        for i in range(count):
            extra = {"timestamp": timestamps(i)} if timestamps else {}
            producer.produce(topic, value=b"p%d-%d" % (partition, i), partition=partition, **extra)
            if timestamps:
                producer.flush(10)
    assert producer.flush(15) == 0


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    """OffsetFetch of every committed partition of ``group``."""
    client = admin(broker)
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    parts = result[group].result(timeout=15).topic_partitions
    return {(tp.topic, tp.partition): tp.offset for tp in parts if tp.offset >= 0}


def commit_offsets(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit as a consumer that assigned its partitions itself (no group membership)."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def member(
    broker: BrokerProcess, group: str, topic: str, partitions: int, **extra: object
) -> Consumer:
    """A consumer subscribed in ``group`` that owns all ``partitions`` of ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )
    consumer.subscribe([topic])

    def assigned() -> bool:
        consumer.poll(0.2)  # records read here are not looked at
        return len(consumer.assignment()) == partitions

    wait_until(assigned, 30, "the group's assignment")
    return consumer


def first_offsets(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The offset a new member of ``group`` reads first in each partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            first.setdefault(msg.partition(), msg.offset())
    finally:
        consumer.close()
    return first


def groups(broker: BrokerProcess, *args: str):
    return tool(broker, "groups", *args)


def rows_of(stdout: str, group: str) -> list[list[str]]:
    return [row for row in table_rows(stdout) if row[0] == group]


def test_list_and_describe_show_members_offsets_and_lag(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 3)
    produce(broker, topic, {0: 10, 1: 20, 2: 30})
    group = f"lag-{uuid.uuid4().hex[:6]}"
    consumer = member(broker, group, topic, 3, **{"client.id": "lag-reader"})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 15)], asynchronous=False
        )
        member_id = consumer.memberid()

        assert group in ok(groups(broker, "--list")).stdout.split()
        stable = ok(groups(broker, "--list", "--state", "Stable")).stdout
        assert [group, "Stable"] in table_rows(stable)
        empty = ok(groups(broker, "--list", "--state", "empty")).stdout
        assert group not in [row[0] for row in table_rows(empty)]

        described = ok(groups(broker, "--describe", "--group", group)).stdout
        rows = rows_of(described, group)
        members = [row for row in rows if len(row) == 6]
        assert members == [[group, member_id, "/127.0.0.1", "lag-reader", "3", f"{topic}:0,1,2"]]
        offsets = {int(row[2]): row[3:] for row in rows if len(row) == 9}
        # committed 4 of 10, 15 of 20, nothing of 30: lag = log end - committed
        assert offsets == {
            0: ["4", "10", "6", member_id, "/127.0.0.1", "lag-reader"],
            1: ["15", "20", "5", member_id, "/127.0.0.1", "lag-reader"],
            2: ["-", "30", "-", member_id, "/127.0.0.1", "lag-reader"],
        }

        only_members = ok(groups(broker, "--describe", "--group", group, "--members")).stdout
        assert [len(row) for row in rows_of(only_members, group)] == [6]
        state = rows_of(ok(groups(broker, "--describe", "--group", group, "--state")).stdout, group)
        assert len(state) == 1 and state[0][2:] == ["range", "Stable", "1"]
    finally:
        consumer.close()

    after = ok(groups(broker, "--describe", "--group", group)).stdout
    assert f"Consumer group '{group}' has no active members." in after
    offsets = {int(row[2]): row[3:] for row in rows_of(after, group)}
    assert offsets == {0: ["4", "10", "6", "-", "-", "-"], 1: ["15", "20", "5", "-", "-", "-"]}
    assert [group, "Empty"] in table_rows(ok(groups(broker, "--list", "--state")).stdout)


def test_describe_shows_a_kip848_group(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 2)
    produce(broker, topic, {0: 5, 1: 7})
    group = f"next-{uuid.uuid4().hex[:6]}"
    consumer = member(
        broker, group, topic, 2, **{"group.protocol": "consumer", "client.id": "next-gen"}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 7)], asynchronous=False
        )
        member_id = consumer.memberid()
        rows = rows_of(ok(groups(broker, "--describe", "--group", group)).stdout, group)
        assert [row for row in rows if len(row) == 6] == [
            [group, member_id, "/127.0.0.1", "next-gen", "2", f"{topic}:0,1"]
        ]
        offsets = {int(row[2]): row[3:6] for row in rows if len(row) == 9}
        assert offsets == {0: ["2", "5", "3"], 1: ["7", "7", "0"]}
        state = ok(groups(broker, "--describe", "--group", group, "--state")).stdout
        assert [row[2:] for row in rows_of(state, group)] == [["uniform", "Stable", "1"]]
        refused = groups(
            broker,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        )
        assert "active members" in one_line_error(refused, 1)
    finally:
        consumer.close()


def test_describe_unknown_group_is_one_line_error(broker: BrokerProcess) -> None:
    result = groups(broker, "--describe", "--group", "no-such-group")
    assert "does not exist" in one_line_error(result, 1)


BASE_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(
    "scenario, expected",
    [
        # partition 0: records 2..9 (log start moved to 2), partition 1: 0..9; committed 5, 5
        (["--to-earliest"], {0: 2, 1: 0}),
        (["--to-latest"], {0: 10, 1: 10}),
        (["--to-offset", "7"], {0: 7, 1: 7}),
        (["--to-offset", "1"], {0: 2, 1: 1}),  # clamped to the log start
        # record i has timestamp BASE_MS + i s: the first at or after 3.5 s is record 4
        (["--to-datetime", "2023-11-14T22:13:23.500Z"], {0: 4, 1: 4}),
        (["--shift-by", "-4"], {0: 2, 1: 1}),
        (["--shift-by", "100"], {0: 10, 1: 10}),  # clamped to the log end
    ],
    ids=[
        "earliest",
        "latest",
        "offset",
        "offset-clamped",
        "datetime",
        "shift-back",
        "shift-clamped",
    ],
)
def test_reset_offsets_dry_run_then_execute(
    broker: BrokerProcess, scenario: list[str], expected: dict[int, int]
) -> None:
    topic = new_topic(broker, 2)
    produce(broker, topic, {0: 10, 1: 10}, timestamps=lambda i: BASE_MS + i * 1000)
    client = admin(broker)  # must outlive the future
    deleted = client.delete_records([TopicPartition(topic, 0, 2)])
    next(iter(deleted.values())).result(timeout=15)
    group = f"reset-{uuid.uuid4().hex[:6]}"
    before = {(topic, 0): 5, (topic, 1): 5}
    commit_offsets(broker, group, before)

    plan = ok(groups(broker, "--reset-offsets", "--group", group, "--topic", topic, *scenario))
    assert "--execute" in plan.stderr  # the dry-run notice
    planned = {int(row[2]): (int(row[3]), int(row[4])) for row in rows_of(plan.stdout, group)}
    assert planned == {p: (5, offset) for p, offset in expected.items()}
    assert committed(broker, group) == before

    executed = ok(
        groups(
            broker, "--reset-offsets", "--group", group, "--topic", topic, *scenario, "--execute"
        )
    )
    assert {int(row[2]): int(row[4]) for row in rows_of(executed.stdout, group)} == expected
    assert committed(broker, group) == {(topic, p): o for p, o in expected.items()}

    produce(broker, topic, {0: 1, 1: 1})  # offset 10: something to read after a reset to the end
    assert first_offsets(broker, group, topic, 2) == expected


def test_reset_selected_partitions_and_all_topics(broker: BrokerProcess) -> None:
    first, second = new_topic(broker, 3), new_topic(broker, 1)
    produce(broker, first, {0: 6, 1: 6, 2: 6})
    produce(broker, second, {0: 6})
    group = f"sel-{uuid.uuid4().hex[:6]}"
    commit_offsets(broker, group, {(first, 0): 3, (first, 1): 3, (second, 0): 3})

    ok(
        groups(
            broker,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            f"{first}:1,2",
            "--to-latest",
            "--execute",
        )
    )
    assert committed(broker, group) == {(first, 0): 3, (first, 1): 6, (first, 2): 6, (second, 0): 3}

    ok(
        groups(
            broker,
            "--reset-offsets",
            "--group",
            group,
            "--all-topics",
            "--to-earliest",
            "--execute",
        )
    )
    assert committed(broker, group) == {(first, 0): 0, (first, 1): 0, (first, 2): 0, (second, 0): 0}

    missing = groups(
        broker, "--reset-offsets", "--group", group, "--topic", f"{first}:7", "--to-earliest"
    )
    assert "no partition 7" in one_line_error(missing, 1)
    unknown = groups(
        broker, "--reset-offsets", "--group", group, "--topic", "no-such-topic", "--to-earliest"
    )
    assert "does not exist" in one_line_error(unknown, 1)


def test_reset_execute_refused_while_a_member_is_active(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)
    produce(broker, topic, {0: 5})
    group = f"busy-{uuid.uuid4().hex[:6]}"
    consumer = member(broker, group, topic, 1)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        refused = groups(
            broker,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        )
        line = one_line_error(refused, 1)
        assert "active members" in line and "Stable" in line
        assert committed(broker, group) == {(topic, 0): 3}
        plan = ok(
            groups(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
        )
        assert [row[3:] for row in rows_of(plan.stdout, group)] == [["3", "0"]]
        assert committed(broker, group) == {(topic, 0): 3}
    finally:
        consumer.close()
    ok(
        groups(
            broker,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        )
    )
    assert committed(broker, group) == {(topic, 0): 0}


def test_shift_by_without_committed_offset_is_one_line_error(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)
    result = groups(
        broker,
        "--reset-offsets",
        "--group",
        f"new-{uuid.uuid4().hex[:6]}",
        "--topic",
        topic,
        "--shift-by",
        "1",
    )
    assert "no committed offset" in one_line_error(result, 1)


def test_delete_groups(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)
    produce(broker, topic, {0: 3})
    first, second = (f"del-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for group in (first, second):
        commit_offsets(broker, group, {(topic, 0): 2})
    listed = ok(groups(broker, "--list")).stdout.split()
    assert first in listed and second in listed
    every = ok(groups(broker, "--describe", "--all-groups")).stdout
    for group in (first, second):
        assert [row[1:4] for row in rows_of(every, group)] == [[topic, "0", "2"]]
    plan = ok(groups(broker, "--reset-offsets", "--all-groups", "--all-topics", "--shift-by", "-1"))
    for group in (first, second):
        assert [row[1:] for row in rows_of(plan.stdout, group)] == [[topic, "0", "2", "1"]]

    deleted = ok(groups(broker, "--delete", "--group", first, "--group", second)).stdout
    assert f"Deleted consumer group '{first}'." in deleted
    assert f"Deleted consumer group '{second}'." in deleted
    listed = ok(groups(broker, "--list")).stdout.split()
    assert first not in listed and second not in listed
    assert committed(broker, first) == {}
    assert "does not exist" in one_line_error(groups(broker, "--describe", "--group", first), 1)
    again = groups(broker, "--delete", "--group", first)
    assert "GROUP_ID_NOT_FOUND" in one_line_error(again, 1)

    active = f"del-{uuid.uuid4().hex[:6]}"
    consumer = member(broker, active, topic, 1)
    try:
        refused = groups(broker, "--delete", "--group", active)
        assert "NON_EMPTY_GROUP" in one_line_error(refused, 1)
    finally:
        consumer.close()


def test_delete_offsets(broker: BrokerProcess) -> None:
    first, second = new_topic(broker, 2), new_topic(broker, 2)
    produce(broker, first, {0: 4, 1: 4})
    produce(broker, second, {0: 4, 1: 4})
    group = f"delo-{uuid.uuid4().hex[:6]}"
    commit_offsets(broker, group, {(first, 0): 1, (first, 1): 2, (second, 0): 3, (second, 1): 4})

    result = ok(groups(broker, "--delete-offsets", "--group", group, "--topic", first))
    assert sorted(table_rows(result.stdout)) == [
        [first, "0", "Successful"],
        [first, "1", "Successful"],
    ]
    assert committed(broker, group) == {(second, 0): 3, (second, 1): 4}
    ok(groups(broker, "--delete-offsets", "--group", group, "--topic", f"{second}:1"))
    assert committed(broker, group) == {(second, 0): 3}

    unknown = groups(broker, "--delete-offsets", "--group", "no-such-group", "--topic", first)
    assert "GROUP_ID_NOT_FOUND" in one_line_error(unknown, 1)

    consumer = member(broker, group, second, 2)
    try:
        subscribed = groups(broker, "--delete-offsets", "--group", group, "--topic", second)
        assert "not deleted" in one_line_error(subscribed, 1)
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in subscribed.stdout
        assert committed(broker, group) == {(second, 0): 3}
    finally:
        consumer.close()


def test_consume_with_group_commits_and_the_next_run_continues(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 2)
    produce(broker, topic, {0: 10, 1: 10})
    everything = sorted(f"p{p}-{i}" for p in range(2) for i in range(10))
    group = f"console-{uuid.uuid4().hex[:6]}"

    first = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            "8",
            "--timeout-ms",
            "30000",
        )
    )
    first_values = first.stdout.split()
    assert len(first_values) == 8
    offsets = committed(broker, group)
    assert sum(offsets.values()) == 8  # the offsets of exactly the records printed

    second = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            "12",
            "--timeout-ms",
            "30000",
        )
    )
    second_values = second.stdout.split()
    assert sorted(first_values + second_values) == everything
    assert committed(broker, group) == {(topic, 0): 10, (topic, 1): 10}

    described = ok(groups(broker, "--describe", "--group", group)).stdout
    assert {row[5] for row in rows_of(described, group)} == {"0"}  # no lag left

    fresh = ok(
        tool(broker, "consume", "--topic", topic, "--group", f"{group}-new", "--timeout-ms", "2000")
    )
    assert fresh.stdout == ""  # a new group without --from-beginning starts at the log end


@pytest.mark.parametrize(
    "args",
    [
        ["groups"],
        ["groups", "--describe"],
        ["groups", "--list", "--group", "g"],
        ["groups", "--list", "--state", "Sleepy"],
        ["groups", "--describe", "--group", "g", "--to-earliest"],
        ["groups", "--describe", "--group", "g", "--state", "Stable"],
        ["groups", "--reset-offsets", "--group", "g", "--topic", "t"],
        ["groups", "--reset-offsets", "--group", "g", "--to-earliest"],
        [
            "groups",
            "--reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--all-topics",
            "--to-earliest",
        ],
        [
            "groups",
            "--reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--to-latest",
        ],
        ["groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "x"],
        ["groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "-1"],
        ["groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"],
        ["groups", "--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
        [
            "groups",
            "--reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--dry-run",
            "--execute",
        ],
        ["groups", "--delete"],
        ["groups", "--delete-offsets", "--group", "g"],
        ["groups", "--delete-offsets", "--group", "g", "--group", "h", "--topic", "t"],
    ],
)
def test_bad_argument_is_one_line_and_exit_2(args: list[str]) -> None:
    one_line_error(strom(*args, timeout=30), 2)


@pytest.mark.parametrize(
    "args",
    [
        ["groups", "--list"],
        ["groups", "--describe", "--group", "g"],
        ["consume", "--topic", "t", "--group", "g"],
    ],
)
def test_unreachable_broker_is_one_line_error(args: list[str]) -> None:
    result = strom(*args, "--bootstrap-server", f"127.0.0.1:{free_port()}", timeout=30)
    assert "cannot reach a broker" in one_line_error(result, 1)
