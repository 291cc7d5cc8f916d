"""Data on disk that the metadata does not know is never served as a new topic's.

Each partition directory names its topic's id in ``partition.metadata``, as Kafka's do.
With the metadata log gone, a topic created again under the same name gets a new id: the
old directory is set aside (``*-stray``, kept) and the new topic starts empty.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka import Producer
from kafka_helpers import consume_all, create_topic

from strom.storage.log_manager import read_partition_topic_id


def test_a_new_topic_never_serves_an_old_topics_records(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        create_topic(broker.bootstrap, "reused", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(5):
            producer.produce("reused", f"old-{i}".encode())
        producer.flush(10)
        assert len(consume_all(broker.bootstrap, "reused", 5)) == 5
        old_id = read_partition_topic_id(tmp_path / "data" / "reused-0")
        assert old_id is not None
        broker.stop()

        # The metadata is lost; the partition's data stays on disk.
        shutil.rmtree(tmp_path / "data" / "__cluster_metadata-0")
        broker.start()
        create_topic(broker.bootstrap, "reused", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("reused", b"new-0")
        producer.flush(10)
        values = [m.value() for m in consume_all(broker.bootstrap, "reused", 1)]
        assert values == [b"new-0"]
        new_id = read_partition_topic_id(tmp_path / "data" / "reused-0")
        assert new_id is not None and new_id != old_id
        (stray,) = (tmp_path / "data").glob("reused-0.*-stray")
        assert read_partition_topic_id(stray) == old_id
        assert any(stray.glob("*.log"))
    finally:
        if broker.alive():
            broker.kill()
