"""The everyday tools (`strom get-offsets`, `delete-records`, `dump-log`, output forms,
config files, completion) run as a user runs them: subprocesses against one real broker
shared by the module, checked by their output and exit code.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, strom, tool
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_helpers import create_topic

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Small segments and a dense index, so dump-log finds several of each."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("everyday") / "data",
        {"log.segment.bytes": "4096", "log.index.interval.bytes": "256"},
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = f"day-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions)
    return name


def produce(broker: BrokerProcess, topic: str, counts: dict[int, int], **extra) -> None:
    """``counts[p]`` records to partition p, record i stamped BASE_TS + 1000 * i, one batch
    each (Strom answers a time lookup with a batch's base offset, not a record's)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **extra})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(
                topic,
                key=f"k{i}".encode(),
                value=f"value-{partition}-{i}".encode(),
                partition=partition,
                timestamp=BASE_TS + 1000 * i,
                headers=[("h", b"v")],
            )
            producer.flush(10)
    assert producer.flush(10) == 0


def offsets(broker: BrokerProcess, *args: str) -> list[str]:
    return ok(tool(broker, "get-offsets", *args)).stdout.splitlines()


# get-offsets ------------------------------------------------------------------------


def test_get_offsets_latest_earliest_max_timestamp_and_by_time(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 3)
    produce(broker, topic, {0: 5, 1: 8})
    assert offsets(broker, "--topic", topic) == [f"{topic}:0:5", f"{topic}:1:8", f"{topic}:2:0"]
    assert offsets(broker, "--topic", topic, "--partitions", "1", "--time", "max-timestamp") == [
        f"{topic}:1:7"
    ]
    # The first offset stamped at or after the time; none past the last record.
    at = str(BASE_TS + 2500)
    assert offsets(broker, "--topic", topic, "--partitions", "0,1", "--time", at) == [
        f"{topic}:0:3",
        f"{topic}:1:3",
    ]
    assert offsets(broker, "--topic", topic, "--time", str(BASE_TS + 10**9)) == []
    # A regular expression over whole names, and Kafka's rule list.
    prefix = topic[:8]
    assert f"{topic}:1:8" in offsets(broker, "--topic", f"{prefix}.*")
    partial = tool(broker, "get-offsets", "--topic", prefix)  # the regex must match whole names
    assert one_line_error(partial, 1) == (
        "strom get-offsets: could not match any topic-partitions with the specified filters"
    )
    assert offsets(broker, "--topic-partitions", f"{topic}:1-") == [f"{topic}:1:8", f"{topic}:2:0"]


# delete-records -----------------------------------------------------------------------


def test_delete_records_from_a_json_file_and_the_shortcut(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(broker, 2)
    produce(broker, topic, {0: 10, 1: 6})
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 4},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    out = ok(tool(broker, "delete-records", "--offset-json-file", str(plan))).stdout
    assert out.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 4",
        f"partition: {topic}-1\tlow_watermark: 6",
    ]
    assert offsets(broker, "--topic", topic, "--time", "earliest") == [
        f"{topic}:0:4",
        f"{topic}:1:6",
    ]
    shortcut = tool(broker, "delete-records", "--topic", topic, "--partition", "0", "--offset", "7")
    assert f"partition: {topic}-0\tlow_watermark: 7" in ok(shortcut).stdout
    assert offsets(broker, "--topic", topic, "--partitions", "0", "--time", "-2") == [
        f"{topic}:0:7"
    ]


def test_delete_records_failures_and_bad_files(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(broker, 1)
    produce(broker, topic, {0: 3})
    beyond = tool(broker, "delete-records", "--topic", topic, "--partition", "0", "--offset", "9")
    assert one_line_error(beyond, 1) == "strom delete-records: 1 of 1 partitions failed"
    assert f"partition: {topic}-0\terror: OFFSET_OUT_OF_RANGE" in beyond.stdout


# dump-log ---------------------------------------------------------------------------


def field(line: str, name: str) -> str:
    return line.split(f"{name}: ", 1)[1].split(" ", 1)[0]


def test_dump_log_decodes_batches_records_markers_and_indexes(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(broker, 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0}
    )
    for i in range(60):
        producer.produce(
            topic, key=f"k{i}".encode(), value=b"v" * 80 + str(i).encode(), partition=0
        )
        if i % 5 == 4:
            producer.flush(10)  # batches of up to 5 records
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, key=b"tk", value=b"in-txn", partition=0, headers=[("h1", b"x")])
    txn.commit_transaction(10)

    directory = broker.data_dir / f"{topic}-0"
    logs = sorted(directory.glob("*.log"))
    assert len(logs) >= 2, logs  # 4096-byte segments rolled
    first = logs[0]
    files = [first, first.with_suffix(".index"), first.with_suffix(".timeindex")]
    out = ok(strom("dump-log", "--files", ",".join(map(str, files)), "--print-data-log")).stdout
    lines = out.splitlines()
    assert lines[0] == f"Dumping {first}" and lines[1] == "Log starting offset: 0"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    records = [line for line in lines if line.startswith("| offset:")]
    assert batches and all(field(b, "isvalid") == "true" for b in batches)
    first_batch = batches[0]
    assert (field(first_batch, "baseOffset"), field(first_batch, "lastOffset")) == ("0", "4")
    assert field(first_batch, "count") == "5" and field(first_batch, "baseSequence") == "0"
    assert field(first_batch, "lastSequence") == "4" and int(field(first_batch, "producerId")) >= 0
    assert field(first_batch, "compresscodec") == "none"
    assert field(first_batch, "isTransactional") == "false"
    assert len(records) == sum(int(field(b, "count")) for b in batches)
    assert [int(field(r, "offset")) for r in records] == list(range(len(records)))
    assert "sequence: 7" in records[7] and f"key: k7 payload: {'v' * 80}7" in records[7]
    positions = {field(b, "position") for b in batches}
    index_lines = lines[lines.index(f"Dumping {files[1]}") + 1 : lines.index(f"Dumping {files[2]}")]
    assert index_lines, "the rolled segment has index entries (log.index.interval.bytes=256)"
    assert all(field(e, "position") in positions for e in index_lines)
    time_lines = lines[lines.index(f"Dumping {files[2]}") + 1 :]
    assert time_lines and all(line.startswith("timestamp: ") for line in time_lines)

    # The active segment holds the transaction and its commit marker; without
    # --print-data-log no payloads, with --deep-iteration the record lines.
    last = ok(strom("dump-log", "--files", str(logs[-1]), "--deep-iteration")).stdout
    control = [line for line in last.splitlines() if "isControl: true" in line]
    assert len(control) == 1 and field(control[0], "isTransactional") == "true"
    assert "endTxnMarker: COMMIT coordinatorEpoch:" in last
    assert "headerKeys: [h1]" in last and "payload:" not in last

    # A damaged copy: a flipped byte fails the CRC, a torn tail is reported.
    damaged = tmp_path / first.name
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF
    damaged.write_bytes(bytes(data) + b"\x00" * 7)
    broken = ok(strom("dump-log", "--files", str(damaged))).stdout.splitlines()
    assert field(broken[2], "isvalid") == "false"
    assert broken[-1] == f"Found 7 invalid bytes at the end of {first.name}"


# Output forms, topic filters, config files ---------------------------------------------


def commit(broker: BrokerProcess, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
    )
    consumer.close()


def test_json_and_plain_output_topic_filters_and_command_config(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic, other = new_topic(broker, 2), new_topic(broker, 1)
    produce(broker, topic, {0: 3})
    group = f"g-{topic}"
    commit(broker, group, {(topic, 0): 2})  # also creates __consumer_offsets

    everything = ok(tool(broker, "topics", "--list")).stdout.split()
    assert "__consumer_offsets" in everything and topic in everything
    external = ok(tool(broker, "topics", "--list", "--exclude-internal")).stdout.split()
    assert "__consumer_offsets" not in external and topic in external
    chosen = tool(broker, "topics", "--list", "--include", f"{topic}|{other}", "--output", "json")
    assert json.loads(ok(chosen).stdout) == [{"topic": t} for t in sorted([topic, other])]

    described = json.loads(
        ok(tool(broker, "topics", "--describe", "--topic", topic, "--output", "json")).stdout
    )
    assert [(d["topic"], d["partition"], d["leader"], d["partition_count"]) for d in described] == [
        (topic, 0, 1, 2),
        (topic, 1, 1, 2),
    ]
    # Piped without --output: a header line, then tab-separated rows.
    plain = ok(tool(broker, "groups", "--describe", "--group", group)).stdout.splitlines()
    header = plain.index(
        "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID"
    )
    assert plain[header + 1] == f"{group}\t{topic}\t0\t2\t3\t1\t-\t-\t-"
    (row,) = json.loads(
        ok(tool(broker, "groups", "--describe", "--group", group, "--output", "json")).stdout
    )
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (2, 3, 1)
    assert row["consumer_id"] == "-"

    config = tmp_path / "admin.properties"
    config.write_text("# admin client\nclient.id = strom-admin-test\nsocket.timeout.ms: 9000\n")
    listed = tool(broker, "topics", "--list", "--command-config", str(config))
    assert topic in ok(listed).stdout.split()
    config.write_text("no.such.property=1\n")
    unknown = tool(broker, "get-offsets", "--command-config", str(config))
    assert "no.such.property" in one_line_error(unknown, 1)


def test_groups_reset_by_duration_export_and_from_file(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(broker, 1)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(6):  # three records two hours old, three new
        producer.produce(topic, value=b"x", partition=0, timestamp=now - 7_200_000 * (i < 3))
        producer.flush(10)
    group = f"g-{topic}"
    commit(broker, group, {(topic, 0): 1})

    reset = ["--reset-offsets", "--group", group, "--topic", topic]
    exported = ok(tool(broker, "groups", *reset, "--by-duration", "PT1H", "--export"))
    assert exported.stdout == f"{topic},0,3\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,2\n")
    done = ok(
        tool(
            broker,
            "groups",
            "--reset-offsets",
            "--group",
            group,
            "--from-file",
            str(plan),
            "--execute",
        )
    )
    assert f"{group}\t{topic}\t0\t1\t2" in done.stdout
    (row,) = json.loads(
        ok(tool(broker, "groups", "--describe", "--group", group, "--output", "json")).stdout
    )
    assert row["current_offset"] == 2


def test_produce_and_consume_with_config_files_and_a_format(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(broker, 1)
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text("linger.ms=0\nclient.id=strom-test-producer\n")
    sent = tool(
        broker,
        "produce",
        "--topic",
        topic,
        "--producer.config",
        str(producer_config),
        "--property",
        "parse.key=true",
        stdin="k1\tone\nk2\ttwo\n",
    )
    ok(sent)
    consumer_config = tmp_path / "consumer.properties"
    consumer_config.write_text("client.id=strom-test-consumer\nfetch.wait.max.ms=50\n")
    read = tool(
        broker,
        "consume",
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--consumer.config",
        str(consumer_config),
        "-f",
        r"%t %p:%o %k=%v (%K/%V)\n",
    )
    assert ok(read).stdout == f"{topic} 0:0 k1=one (2/3)\n{topic} 0:1 k2=two (2/3)\n"
