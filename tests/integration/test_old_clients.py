"""Old clients against a real broker: the versions Kafka 3.9 served and Kafka 4 dropped.

- Sarama 1.22 from Debian's Go packages: create a topic, ListTopics, DescribeConfig, an
  idempotent producer, and a consumer group that commits with Sarama's default offset
  settings (OffsetCommit v1); confluent-kafka sees the same committed offsets.
- kafka-go 0.2.1 from Debian: CreateTopics v0, its Writer (Produce v2, magic 1 message
  sets) and a partition Reader (Fetch v2) and a group Reader; confluent-kafka reads the
  same records from the log.
- Debian's Burrow 1.2.1 (with the ZooKeeper it needs for itself): its lag endpoint
  reports a group's lag exactly, and follows a new commit.

The Go programs are under tests/go/ and are built here with Debian's Go and packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, free_port
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_helpers import consume_all, create_topic

GO_SOURCES = Path(__file__).resolve().parent.parent / "go"
GOPATH = "/usr/share/gocode"
ZOOKEEPER_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"


def go_build(name: str, out: Path) -> Path:
    binary = out / name
    subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=GO_SOURCES / name,
        env={**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH},
        check=True,
        capture_output=True,
        timeout=300,
    )
    return binary


@pytest.fixture(scope="module")
def go_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("go")
    return {name: go_build(name, out) for name in ("sarama_client", "kafka_go_client")}


def run_client(binary: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def no_handler_failures(broker: BrokerProcess) -> None:
    failed = [line for line in broker.logs().splitlines() if "failed" in line and "ERROR" in line]
    assert not failed, failed


def committed(broker: BrokerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_sarama_122(go_clients: dict[str, Path], broker: BrokerProcess) -> None:
    topic, group = f"sarama-{uuid.uuid4().hex[:6]}", f"sarama-g-{uuid.uuid4().hex[:6]}"
    seen = run_client(go_clients["sarama_client"], broker.bootstrap, topic, group)
    assert seen["partitions"] == 3 and seen["cleanup.policy"] == "delete"
    assert seen["consumed"] == 30
    produced = {int(p): offset for p, offset in seen["produced"].items()}
    assert sum(produced.values()) == 30
    # Sarama reads its commits back (OffsetFetch v1), and so does confluent-kafka.
    assert {int(p): offset for p, offset in seen["committed"].items()} == produced
    assert committed(broker, group, topic, 3) == produced
    no_handler_failures(broker)


def test_kafka_go_021(go_clients: dict[str, Path], broker: BrokerProcess) -> None:
    topic, group = f"kgo-{uuid.uuid4().hex[:6]}", f"kgo-g-{uuid.uuid4().hex[:6]}"
    seen = run_client(go_clients["kafka_go_client"], broker.bootstrap, topic, group)
    expected = [f"{i}:k{i}=v{i}" for i in range(20)]
    assert seen["partition"] == expected
    assert seen["group"] == expected
    # What it wrote is in the log as any client reads it.
    records = [(m.key(), m.value()) for m in consume_all(broker.bootstrap, topic, 20)]
    assert records == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    assert committed(broker, group, topic, 1) == {0: 20}
    no_handler_failures(broker)


class ZooKeeper:
    """A standalone ZooKeeper server (Burrow keeps its own state in one)."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            # C1 only and the serial collector: a JVM that starts sooner, for a test's server
            ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", ZOOKEEPER_CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.port), str(folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.answers():
            assert self.proc.poll() is None, "ZooKeeper exited"
            assert time.monotonic() < deadline, "ZooKeeper did not start"
            time.sleep(0.2)

    def answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                return b"Zookeeper version" in s.recv(1024)
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """One ZooKeeper (a JVM's start) for the module's Burrows, each under a root of its own."""
    server = ZooKeeper(tmp_path_factory.mktemp("zk"))
    yield server
    server.stop()


@pytest.fixture(params=["0.8.2", "0.10.0"])  # Burrow's default, and groups read from Fetch v2
def burrow(
    request: pytest.FixtureRequest, tmp_path: Path, broker: BrokerProcess, zookeeper: ZooKeeper
) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "burrow"
    config.mkdir()
    (config / "burrow.toml").write_text(
        f"""
[general]
pidfile="{tmp_path / "burrow.pid"}"
[logging]
level="info"
[zookeeper]
servers=["127.0.0.1:{zookeeper.port}"]
root-path="/burrow-{request.param}"
[client-profile.strom]
client-id="burrow-strom"
kafka-version="{request.param}"
[cluster.strom]
class-name="kafka"
servers=["{broker.bootstrap}"]
client-profile="strom"
topic-refresh=2
offset-refresh=1
[consumer.strom]
class-name="kafka"
cluster="strom"
servers=["{broker.bootstrap}"]
client-profile="strom"
[httpserver.default]
address="127.0.0.1:{port}"
[evaluator.default]
class-name="caching"
expire-cache=1
[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
"""
    )
    log = (tmp_path / "burrow.log").open("wb")
    proc = subprocess.Popen(
        ["Burrow", "--config-dir", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(30)
        log.close()


def burrow_get(burrow: str, path: str) -> dict[str, Any] | None:
    """Burrow's JSON answer to a GET, or None while it has none (404, not up yet)."""
    try:
        with urllib.request.urlopen(burrow + path, timeout=10) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, OSError):
        return None


def lag_of(burrow: str, group: str) -> dict[str, Any] | None:
    return burrow_get(burrow, f"/v3/kafka/strom/consumer/{group}/lag")


def wait_for_lag(burrow: str, group: str, expected: dict[int, int]) -> dict[str, Any]:
    """Burrow's lag answer once it shows ``expected`` (partition: lag)."""
    deadline = time.monotonic() + 90
    answer = None
    while time.monotonic() < deadline:
        answer = lag_of(burrow, group)
        status = (answer or {}).get("status") or {}
        lags = {p["partition"]: p.get("current_lag") for p in status.get("partitions") or []}
        if lags == expected:
            return answer
        time.sleep(0.5)
    raise AssertionError(f"Burrow never showed lag {expected}: {answer}")


def test_burrow_reports_a_groups_lag_exactly(burrow: str, broker: BrokerProcess) -> None:
    topic, group = f"lag-{uuid.uuid4().hex[:6]}", f"burrow-g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(50):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    # Burrow drops a commit for a partition whose end offset it has not fetched yet, so
    # the group commits once Burrow shows the topic's end offsets.
    deadline = time.monotonic() + 60
    while (known := burrow_get(burrow, f"/v3/kafka/strom/topic/{topic}")) is None or known.get(
        "offsets"
    ) != [25, 25]:
        assert time.monotonic() < deadline, f"Burrow never showed {topic}'s offsets: {known}"
        time.sleep(0.2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 20)], asynchronous=False
    )
    answer = wait_for_lag(burrow, group, {0: 15, 1: 5})
    assert answer["status"]["totallag"] == 20
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 25), TopicPartition(topic, 1, 25)], asynchronous=False
    )
    consumer.close()
    answer = wait_for_lag(burrow, group, {0: 0, 1: 0})
    assert answer["status"]["totallag"] == 0
    no_handler_failures(broker)
