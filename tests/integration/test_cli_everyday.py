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
from cli_helpers import ok, one_line_error, tool
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
