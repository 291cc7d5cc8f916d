"""DescribeLogDirs and ``strom log-dirs --describe`` against real brokers: the sizes
reported (through the tool, and in raw v1 and v4 answers) are the sizes of the segment
files on disk; a topic list filters; the replicas of a replicated partition report the
same size on every broker."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from cli_helpers import ok, one_line_error, strom, tool
from cluster_process import Cluster
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_helpers import wait_until
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_log_dirs.v1 import request as v1
from kio.schema.describe_log_dirs.v4 import request as v4
from raw_client import RawClient

from strom.protocol.errors import ErrorCode


def _described(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    return json.loads(lines[2])


def _on_disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_sizes_are_the_segment_files_on_disk(broker, tmp_path) -> None:
    topic = f"dirs-{uuid.uuid4().hex[:8]}"
    other = f"other-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for _name, futures in admin.create_topics(
        [NewTopic(topic, 2, 1), NewTopic(other, 1, 1)]
    ).items():
        futures.result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(500):
        producer.produce(topic, value=b"v" * 100, partition=i % 2)
    assert producer.flush(15) == 0
    described = _described(ok(tool(broker, "log-dirs", "--describe", "--topic-list", topic)).stdout)
    (entry,) = described["brokers"]
    (log_dir,) = entry["logDirs"]
    assert log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}  # the topic list filters
    data = Path(log_dir["logDir"])
    for name, size in sizes.items():
        assert size == _on_disk(data / name) > 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])
    everything = _described(ok(tool(broker, "log-dirs", "--describe")).stdout)
    names = {p["partition"] for p in everything["brokers"][0]["logDirs"][0]["partitions"]}
    assert {f"{topic}-0", f"{topic}-1", f"{other}-0"} <= names


def test_raw_request_v1_and_v4(broker) -> None:
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(200):
        producer.produce(topic, value=b"r" * 50, partition=0)
    assert producer.flush(15) == 0
    client = RawClient(broker.port)
    try:
        versions = client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        (advertised,) = [k for k in versions.api_keys if k.api_key == 35]
        assert (advertised.min_version, advertised.max_version) == (0, 4)
        # partition 7 does not exist: it is left out, as Kafka leaves out what it does not host
        old = client.request(
            v1.DescribeLogDirsRequest(
                topics=(v1.DescribableLogDirTopic(topic=topic, partitions=(0, 1, 7)),)
            )
        )
        new = client.request(
            v4.DescribeLogDirsRequest(
                topics=(v4.DescribableLogDirTopic(topic=topic, partitions=(0, 1, 7)),)
            )
        )
        everything = client.request(v4.DescribeLogDirsRequest(topics=None))
    finally:
        client.close()
    for response in (old, new):
        (result,) = response.results
        assert result.error_code == ErrorCode.none
        (described,) = result.topics
        assert described.name == topic
        sizes = {p.partition_index: p.partition_size for p in described.partitions}
        assert sizes.keys() == {0, 1}
        for index, size in sizes.items():
            assert size == _on_disk(Path(result.log_dir) / f"{topic}-{index}")
        assert sizes[0] > 0 and sizes[1] == 0
        assert all(p.offset_lag == 0 and not p.is_future_key for p in described.partitions)
    assert new.error_code == ErrorCode.none
    (result,) = new.results
    assert result.total_bytes >= result.usable_bytes > 0
    assert topic in {t.name for t in everything.results[0].topics}


def test_bad_arguments_and_unreachable_brokers(broker) -> None:
    one_line_error(strom("log-dirs"), 2)
    one_line_error(tool(broker, "log-dirs", "--describe", "--broker-list", "x"), 2)
    assert "unknown broker" in one_line_error(
        tool(broker, "log-dirs", "--describe", "--broker-list", "99"), 1
    )
    one_line_error(strom("log-dirs", "--describe", "--bootstrap-server", "127.0.0.1:1"), 1)


def test_replicas_report_the_same_size(tmp_path: Path) -> None:
    cluster = Cluster.combined(
        tmp_path, overrides={"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
    )
    try:
        cluster.start_all()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        wait_until(lambda: len(admin.list_topics(timeout=3).brokers) == 3, 15, "3 brokers")
        admin.create_topics([NewTopic("copied", 1, 3)])["copied"].result(15)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        for _ in range(300):
            producer.produce("copied", value=b"w" * 200)
        assert producer.flush(15) == 0

        def sizes() -> dict[int, int]:
            result = ok(
                strom(
                    "log-dirs",
                    "--describe",
                    "--bootstrap-server",
                    cluster.bootstrap(),
                    "--topic-list",
                    "copied",
                )
            )
            described = _described(result.stdout)
            return {
                b["broker"]: p["size"]
                for b in described["brokers"]
                for d in b["logDirs"]
                for p in d["partitions"]
            }

        deadline = time.monotonic() + 15
        while len(set(sizes().values())) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        final = sizes()
        assert sorted(final) == [1, 2, 3]
        assert len(set(final.values())) == 1
        assert set(final.values()) == {_on_disk(cluster.nodes[1].data_dir / "copied-0")}
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()
