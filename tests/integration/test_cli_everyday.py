"""The everyday tools (`strom get-offsets`, `delete-records`, `dump-log`, output forms,
config files, completion) run as a user runs them: subprocesses against one real broker
shared by the module, checked by their output and exit code.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, strom, tool
from confluent_kafka import Producer

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
    ok(tool(broker, "topics", "--create", "--topic", name, "--partitions", str(partitions)))
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
    assert offsets(broker, "--topic", topic, "--time", "-2") == [f"{topic}:{p}:0" for p in range(3)]
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
    assert "could not match" in one_line_error(partial, 1)
    assert offsets(broker, "--topic-partitions", f"{topic}:1-") == [f"{topic}:1:8", f"{topic}:2:0"]


def test_get_offsets_bad_arguments_are_one_line(broker: BrokerProcess) -> None:
    assert "--time" in one_line_error(tool(broker, "get-offsets", "--time", "soon"), 2)
    missing = tool(broker, "get-offsets", "--topic", "no-such-topic-here")
    assert "could not match any topic-partitions" in one_line_error(missing, 1)


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

    path = tmp_path / "bad.json"
    path.write_text('{"partitions": [], "version": 2}')
    line = one_line_error(tool(broker, "delete-records", "--offset-json-file", str(path)), 2)
    assert "unsupported version" in line, line
    missing = tool(broker, "delete-records", "--offset-json-file", str(tmp_path / "none.json"))
    assert "No such file" in one_line_error(missing, 2)
    assert "--offset" in one_line_error(tool(broker, "delete-records", "--topic", topic), 2)


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

    assert "no such file" in one_line_error(strom("dump-log", "--files", "/nope/0.log"), 2)
