"""A data directory written by the single-node Strom from before the cluster (a fixture
made by that version: a compacted topic with configs and 20 records, a consumer group
with committed offsets, in tests/fixtures/single-node-data) is taken over on first
start: its topics keep their ids and configs, the records are there, the group's
committed offsets are intact, and it starts again from its metadata log afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka_helpers import consume_to_end

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "single-node-data"


def _check(bootstrap: str, topic_id: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["kept-orders"].partitions) == 2
    described = admin.describe_topics(TopicCollection(["kept-orders"]))["kept-orders"].result(10)
    bits = described.topic_id
    high = bits.get_most_significant_bits() & (2**64 - 1)
    low = bits.get_least_significant_bits() & (2**64 - 1)
    assert uuid.UUID(int=(high << 64) | low) == uuid.UUID(topic_id)
    resource = ConfigResource("topic", "kept-orders")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "123456789"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
    committed = consumer.committed(
        [TopicPartition("kept-orders", 0), TopicPartition("kept-orders", 1)], timeout=10
    )
    consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 7), (1, 3)]
    values = sorted(m.value() for m in consume_to_end(bootstrap, "kept-orders"))
    assert values == sorted(f"v{i}".encode() for i in range(20))


def test_a_single_node_data_dir_is_taken_over_on_first_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    legacy = json.loads((data / "strom-metadata.json").read_text())
    topic_id = next(t["id"] for t in legacy["topics"] if t["name"] == "kept-orders")
    broker = BrokerProcess(data, {"offsets.topic.num.partitions": "3"})
    broker.start()
    try:
        _check(broker.bootstrap, topic_id)
        assert (data / "strom-metadata.json.migrated").exists()
        assert not (data / "strom-metadata.json").exists()
        broker.restart()  # now from the metadata log alone
        _check(broker.bootstrap, topic_id)
    finally:
        broker.stop()


def test_a_truncated_single_node_metadata_file_is_one_line(tmp_path: Path) -> None:
    """Before, the broker hung without a word: the carry-over failed in a background task
    and the node waited forever to be unfenced."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    legacy = data / "strom-metadata.json"
    legacy.write_text(legacy.read_text()[:40])
    broker = BrokerProcess(data)
    done = subprocess.run(broker.command(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"strom broker: {legacy} is not valid JSON ({_json_error(legacy)}); restore it from a "
        "backup, or move it away to start without its topics"
    ]
    assert legacy.exists()  # nothing carried over, nothing renamed


def _json_error(path: Path) -> str:
    try:
        json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    raise AssertionError("the file parsed")
