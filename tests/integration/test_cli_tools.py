"""The Kafka-style tools (`strom topics/produce/consume/configs/perf-test`) run as a user runs them.

Every test starts the real `strom` command as a subprocess against a real broker
process and checks its output and exit code; timings are never asserted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest
from broker_process import free_port
from cli_helpers import STROM, ok, one_line_error, strom, tool
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient


def new_topic(broker, partitions: int = 1, *extra: str) -> str:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    ok(tool(broker, "topics", "--create", "--topic", name, "--partitions", str(partitions), *extra))
    return name


def test_topics_create_list_describe_alter_delete(broker) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = ok(
        tool(
            broker,
            "topics",
            "--create",
            "--topic",
            name,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=123456",
            "--config",
            "cleanup.policy=delete",
        )
    )
    assert name in created.stdout

    again = tool(broker, "topics", "--create", "--topic", name, "--partitions", "3")
    assert "TOPIC_ALREADY_EXISTS" in one_line_error(again, 1)
    ok(tool(broker, "topics", "--create", "--topic", name, "--if-not-exists"))

    assert name in ok(tool(broker, "topics", "--list")).stdout.split()

    described = ok(tool(broker, "topics", "--describe", "--topic", name)).stdout
    assert f"Topic: {name}" in described
    assert "PartitionCount: 3" in described and "ReplicationFactor: 1" in described
    assert "retention.ms=123456" in described and "cleanup.policy=delete" in described
    topic_id = described.split("TopicId:")[1].split()[0]
    assert len(topic_id) >= 22 and topic_id != "AAAAAAAAAAAAAAAAAAAAAA"
    assert "Leader" in described and "Isr" in described

    ok(tool(broker, "topics", "--alter", "--topic", name, "--partitions", "5"))
    assert "PartitionCount: 5" in ok(tool(broker, "topics", "--describe", "--topic", name)).stdout
    shrink = tool(broker, "topics", "--alter", "--topic", name, "--partitions", "2")
    one_line_error(shrink, 1)

    ok(tool(broker, "topics", "--delete", "--topic", name))
    deadline = time.monotonic() + 30
    while name in ok(tool(broker, "topics", "--list")).stdout.split():
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.2)
    ok(tool(broker, "topics", "--delete", "--topic", name, "--if-exists"))
    ok(tool(broker, "topics", "--describe", "--topic", name, "--if-exists"))
    missing = tool(broker, "topics", "--delete", "--topic", name)
    assert "does not exist" in one_line_error(missing, 1)


def test_topics_create_with_broker_defaults(broker) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    ok(tool(broker, "topics", "--create", "--topic", name))
    assert "PartitionCount: 1" in ok(tool(broker, "topics", "--describe", "--topic", name)).stdout


def test_produce_keys_and_headers_then_consume_with_print_properties(broker) -> None:
    topic = new_topic(broker)
    lines = "h1:v1,h2:v2\tk1:first\n\tk2:second\nh3\tk3:third:with:colons\n"
    ok(
        tool(
            broker,
            "produce",
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--property",
            "parse.headers=true",
            "--compression-type",
            "lz4",
            "--producer-property",
            "acks=all",
            stdin=lines,
        )
    )
    result = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "3",
            "--property",
            "print.key=true",
            "--property",
            "print.headers=true",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
            "--property",
            "key.separator=|",
        )
    )
    assert result.stdout.splitlines() == [
        "Partition:0|Offset:0|h1:v1,h2:v2|k1|first",
        "Partition:0|Offset:1|NO_HEADERS|k2|second",
        "Partition:0|Offset:2|h3:null|k3|third:with:colons",
    ]
    assert "Processed a total of 3 messages" in result.stderr


def test_consume_prints_timestamp_and_plain_values(broker) -> None:
    topic = new_topic(broker)
    ok(tool(broker, "produce", "--topic", topic, stdin="a\nb\n"))
    plain = ok(tool(broker, "consume", "--topic", topic, "--from-beginning", "--max-messages", "2"))
    assert plain.stdout == "a\nb\n"
    stamped = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "1",
            "--property",
            "print.timestamp=true",
        )
    )
    kind, rest = stamped.stdout.split(":", 1)
    assert kind == "CreateTime"
    millis, value = rest.rstrip("\n").split("\t")
    assert int(millis) > 0 and value == "a"


def test_consume_from_beginning_versus_latest(broker) -> None:
    topic = new_topic(broker, 2)
    ok(tool(broker, "produce", "--topic", topic, stdin="".join(f"m{i}\n" for i in range(10))))
    everything = ok(
        tool(broker, "consume", "--topic", topic, "--from-beginning", "--timeout-ms", "3000")
    )
    assert sorted(everything.stdout.split()) == sorted(f"m{i}" for i in range(10))
    assert "Processed a total of 10 messages" in everything.stderr
    only_new = ok(tool(broker, "consume", "--topic", topic, "--timeout-ms", "1500"))
    assert only_new.stdout == ""


def test_produce_to_partition_and_consume_from_offset(broker) -> None:
    topic = new_topic(broker, 3)
    ok(
        tool(
            broker,
            "produce",
            "--topic",
            topic,
            "--partition",
            "2",
            stdin="".join(f"r{i}\n" for i in range(6)),
        )
    )
    from_offset = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--partition",
            "2",
            "--offset",
            "3",
            "--max-messages",
            "3",
            "--property",
            "print.offset=true",
        )
    )
    assert from_offset.stdout.splitlines() == ["Offset:3\tr3", "Offset:4\tr4", "Offset:5\tr5"]
    earliest = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--partition",
            "2",
            "--offset",
            "earliest",
            "--max-messages",
            "1",
        )
    )
    assert earliest.stdout == "r0\n"
    latest = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--partition",
            "2",
            "--offset",
            "latest",
            "--timeout-ms",
            "1000",
        )
    )
    assert latest.stdout == ""
    empty = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--partition",
            "0",
            "--from-beginning",
            "--timeout-ms",
            "1000",
        )
    )
    assert empty.stdout == ""


def test_consume_with_group_still_reads(broker) -> None:
    topic = new_topic(broker)
    ok(tool(broker, "produce", "--topic", topic, stdin="x\n"))
    result = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--group",
            "readers",
            "--from-beginning",
            "--max-messages",
            "1",
        )
    )
    assert result.stdout == "x\n"


def test_produce_reports_bad_lines_and_exits_non_zero(broker) -> None:
    topic = new_topic(broker)
    result = tool(
        broker,
        "produce",
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin="k:good\nno separator\nk2:fine\n",
    )
    assert "line 2" in one_line_error(result, 1)
    consumed = ok(
        tool(broker, "consume", "--topic", topic, "--from-beginning", "--max-messages", "2")
    )
    assert consumed.stdout == "good\nfine\n"


def test_produce_null_marker_and_ignore_error(broker) -> None:
    topic = new_topic(broker)
    ok(
        tool(
            broker,
            "produce",
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "null.marker=NULL",
            "--property",
            "ignore.error=true",
            stdin="NULL\tv1\nk2\tNULL\nwhole line\n",
        )
    )
    result = ok(
        tool(
            broker,
            "consume",
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            "3",
            "--property",
            "print.key=true",
            "--property",
            "null.literal=<nil>",
        )
    )
    assert result.stdout.splitlines() == ["<nil>\tv1", "k2\t<nil>", "<nil>\twhole line"]


def test_configs_describe_alter_delete(broker) -> None:
    topic = new_topic(broker)
    before = ok(
        tool(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic)
    )
    assert "retention.ms" not in before.stdout

    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            "retention.ms=86400000,cleanup.policy=[compact,delete]",
        )
    )
    after = ok(
        tool(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic)
    ).stdout
    assert "retention.ms" in after and "86400000" in after
    assert "compact,delete" in after and "DYNAMIC_TOPIC_CONFIG" in after
    assert (
        "retention.ms=86400000" in ok(tool(broker, "topics", "--describe", "--topic", topic)).stdout
    )

    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--delete-config",
            "retention.ms",
        )
    )
    deleted = ok(
        tool(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic)
    ).stdout
    assert "retention.ms" not in deleted and "compact,delete" in deleted

    every = ok(
        tool(
            broker,
            "configs",
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--all",
        )
    ).stdout
    assert "retention.ms" in every and "segment.bytes" in every

    unknown = tool(
        broker,
        "configs",
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        "no.such.config=1",
    )
    one_line_error(unknown, 1)
    missing = tool(
        broker,
        "configs",
        "--describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "no-such-topic-here",
    )
    assert "does not exist" in one_line_error(missing, 1)


def test_configs_describe_broker(broker) -> None:
    result = ok(
        tool(
            broker,
            "configs",
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--all",
        )
    )
    assert "num.partitions" in result.stdout


def _perf_produce(broker, topic: str, records: int, size: int, *options: str):
    """``strom perf-test produce`` of ``records`` records of ``size`` bytes; must succeed."""
    return ok(
        tool(
            broker,
            "perf-test",
            "produce",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            *options,
        )
    )


def test_perf_test_produce_and_consume_json(broker) -> None:
    topic = new_topic(broker, 3)
    produced = _perf_produce(
        broker,
        topic,
        5000,
        100,
        "--throughput",
        "-1",
        "--json",
        "--producer-props",
        "acks=1",
        "linger.ms=5",
    )
    summary = json.loads(produced.stdout)
    assert summary["records_sent"] == 5000 and summary["records_delivered"] == 5000
    assert summary["errors"] == 0 and summary["record_size"] == 100
    assert summary["records_per_sec"] > 0 and summary["mb_per_sec"] > 0
    latency = summary["latency_ms"]
    assert set(latency) == {"avg", "p50", "p95", "p99", "p99.9", "max"}
    assert (
        0
        <= latency["p50"]
        <= latency["p95"]
        <= latency["p99"]
        <= latency["p99.9"]
        <= latency["max"]
    )

    throttled = _perf_produce(broker, topic, 200, 10, "--throughput", "1000", "--json")
    assert json.loads(throttled.stdout)["records_delivered"] == 200

    consumed = ok(
        tool(broker, "perf-test", "consume", "--topic", topic, "--messages", "5200", "--json")
    )
    summary = json.loads(consumed.stdout)
    assert summary["records"] == 5200
    assert summary["bytes"] == 5000 * 100 + 200 * 10
    assert {"elapsed_s", "records_per_sec", "mb_per_sec"} <= set(summary)

    human = _perf_produce(broker, topic, 100, 10, "--no-progress")
    assert "100 records sent" in human.stdout and "99.9th" in human.stdout

    short = tool(
        broker,
        "perf-test",
        "consume",
        "--topic",
        topic,
        "--messages",
        "99999",
        "--timeout",
        "1000",
        "--json",
    )
    assert short.returncode == 1 and json.loads(short.stdout)["records"] == 5300

    # At 4 records/s the tool waits 250 ms between records. The reported latency is
    # the broker's answer (about a millisecond here), not that wait: it was 250 ms
    # when the wait was a sleep, as delivery reports were only served after it.
    slow = _perf_produce(
        broker, topic, 6, 10, "--throughput", "4", "--json", "--producer-props", "linger.ms=0"
    )
    assert json.loads(slow.stdout)["latency_ms"]["p50"] < 125


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "--list"],
        ["topics", "--describe", "--topic", "t"],
        ["produce", "--topic", "t"],
        ["consume", "--topic", "t"],
        ["configs", "--describe", "--entity-type", "topics", "--entity-name", "t"],
        ["perf-test", "produce", "--topic", "t", "--num-records", "10", "--record-size", "10"],
        ["perf-test", "consume", "--topic", "t", "--messages", "10"],
    ],
)
def test_unreachable_broker_is_one_line_error(args: list[str]) -> None:
    started = time.monotonic()
    result = strom(*args, "--bootstrap-server", f"127.0.0.1:{free_port()}", stdin="x\n", timeout=30)
    line = one_line_error(result, 1)
    assert "cannot reach a broker" in line
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    "args",
    [
        ["topics"],
        ["topics", "--create"],
        ["topics", "--list", "--partitions", "x"],
        ["topics", "--create", "--topic", "t", "--config", "novalue"],
        ["produce"],
        ["produce", "--topic", "t", "--property", "no.such.property=1"],
        ["consume", "--topic", "t", "--offset", "5"],
        ["consume", "--topic", "t", "--partition", "0", "--offset", "soon"],
        ["configs", "--alter", "--entity-type", "topics", "--entity-name", "t"],
        ["configs", "--describe", "--entity-type", "groups", "--entity-name", "t"],
        ["perf-test", "produce", "--topic", "t"],
        ["perf-test", "consume", "--topic", "t", "--messages", "many"],
        ["perf-test"],
        ["no-such-tool"],
    ],
)
def test_bad_argument_is_one_line_and_exit_2(args: list[str]) -> None:
    one_line_error(strom(*args, timeout=30), 2)


# Runs the command it is given with SIGINT at its default, as a shell in a terminal
# starts it, whatever this process has: a suite started in the background has SIGINT
# ignored, and an ignored signal stays ignored across exec (the tool rightly honours
# that, as any program started with ``cmd &`` from a script does). An exec'd wrapper
# rather than preexec_fn, which is not safe in a process with threads (the clients').
AS_FROM_A_TERMINAL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_consume_exits_cleanly_on_sigint_and_sigterm(broker, stop: signal.Signals) -> None:
    topic = new_topic(broker)
    ok(tool(broker, "produce", "--topic", topic, stdin="first\n"))
    proc = subprocess.Popen(
        [
            *AS_FROM_A_TERMINAL,
            *STROM,
            "consume",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "first\n"  # it is consuming: stop it now
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "Processed a total of 1 messages" in err


def group_consumer(broker, topic: str, group: str) -> subprocess.Popen[str]:
    """`strom consume` in ``group`` from the beginning, its output piped."""
    command = [*STROM, "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic]
    command += ["--group", group, "--from-beginning"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_consume_in_a_group_stopped_by_sigterm_commits_and_leaves(broker) -> None:
    """kill / timeout / systemd stop a group consumer as Ctrl-C does: what it printed is
    committed, it leaves the group at once, and the next run goes on after it."""
    topic = new_topic(broker)
    group = f"term-{topic}"
    ok(tool(broker, "produce", "--topic", topic, stdin="a\nb\nc\n"))
    proc = group_consumer(broker, topic, group)
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in range(3)] == ["a\n", "b\n", "c\n"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (described,) = admin.describe_consumer_groups([group]).values()
    assert described.result(15).members == []  # left, not a ghost until its session ends
    (offsets,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert [tp.offset for tp in offsets.result(15).topic_partitions] == [3]
    ok(tool(broker, "produce", "--topic", topic, stdin="d\n"))
    again = tool(broker, "consume", "--topic", topic, "--group", group, "--max-messages", "1")
    assert ok(again).stdout == "d\n"


def test_a_stopped_group_consumer_commits_exactly_the_lines_it_printed(broker) -> None:
    """A group consumer stopped mid-batch (its output blocked behind a reader that has
    not read yet, SIGTERM then) commits the offsets of the lines it printed, not of the
    rest of the batch it had fetched: the committed offsets add up to the lines read."""
    import select

    topic = new_topic(broker, 2)
    group = f"exact-{topic}"
    lines = "".join(f"{i:06d}{'x' * 94}\n" for i in range(3000))
    ok(tool(broker, "produce", "--topic", topic, stdin=lines))
    proc = group_consumer(broker, topic, group)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 30)[0], "nothing printed"
        time.sleep(1)  # the 300 kB it prints fill the pipe: it blocks mid-batch
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    printed = out.count("\n")
    assert 0 < printed < 3000 and out.endswith("\n")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (offsets,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = [tp.offset for tp in offsets.result(15).topic_partitions]
    assert sum(max(o, 0) for o in committed) == printed, (committed, printed)
    assert f"Processed a total of {printed} messages" in err


def test_unknown_broker_and_oversized_record_are_one_readable_line(broker) -> None:
    """configs for a broker id the cluster lacks answers at once (it waited 15 s for a
    timeout); a record over the producer's message.max.bytes names its size and the
    settings involved (it printed a raw KafkaError repr)."""
    line = one_line_error(
        tool(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "7"), 1
    )
    assert line == "strom configs: broker 7 is not in the cluster (brokers: 1)"
    topic = new_topic(broker)
    big = tool(broker, "produce", "--topic", topic, stdin="a" * 2_000_000 + "\n")
    line = one_line_error(big, 1)
    assert line.startswith("strom produce: line 1 not sent: MSG_SIZE_TOO_LARGE: "), line
    assert "2,000,000 bytes" in line and "message.max.bytes" in line
    assert "KafkaError{" not in line


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    result = ok(strom("--version"))
    assert result.stdout.strip() == f"strom {version('strom')}"
