"""Kafka Connect on Strom: a real broker, a real distributed Connect worker process
(``strom connect-distributed``) on a free port, driven over plain HTTP as curl would and
with a Kafka Connect client from PyPI (kafka-connect-py), and a standalone worker.

Covers every REST path's answer and its errors (Kafka Connect's codes and error JSON),
FileStream source -> topic -> FileStream sink end to end with the JsonConverter
envelope, pause/resume/stop, restarts, a failed task with its trace, KIP-875 offsets,
KIP-558 active topics (listed, reset, cleared on delete, tracking or its reset off),
config validation listing every error, single message transforms chained from a
FileStream source, a sink tolerating a bad record into a dead letter queue with Kafka's
context headers (and the same record failing a task that tolerates nothing), a source
skipping a record its producer refuses, the
loggers, the ``strom connectors`` client, and a worker restarted from its topics
resuming at its committed offsets with no line lost or repeated. One broker and one
distributed worker serve the module.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from service_process import ServiceProcess

POLL_S = 0.05
WAIT_S = 30.0


def wait_for(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """``check()``'s first truthy answer, polled every 50 ms."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last answer {answer!r}")
        time.sleep(POLL_S)


class Worker(ServiceProcess):
    """A ``strom connect-*`` process; ``call`` speaks to its REST API."""

    def __init__(self, mode: str, properties: Path, *connector_files: Path) -> None:
        log_path = properties.with_name(f"{properties.stem}-{uuid.uuid4().hex[:6]}.log")
        super().__init__([f"connect-{mode}", str(properties), *map(str, connector_files)], log_path)

    def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        return status, json.loads(text) if text.strip() else None

    def status(self, name: str) -> dict[str, Any] | None:
        code, body = self.call("GET", f"/connectors/{name}/status")
        return body if code == 200 else None

    def wait_state(self, name: str, state: str, tasks: int | None = 1) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.status(name)
            if status is None or status["connector"]["state"] != state:
                return None
            states = [t["state"] for t in status["tasks"]]
            if tasks is not None and states != [state] * tasks:
                return None
            return status

        return wait_for(reached, f"{name} {state}")

    def wait_task_failed(self, name: str) -> dict[str, Any]:
        """The connector's status once its first task is FAILED."""

        def failed() -> dict[str, Any] | None:
            status = self.status(name)
            if status and status["tasks"] and status["tasks"][0]["state"] == "FAILED":
                return status
            return None

        return wait_for(failed, f"{name}'s task FAILED")


def error_of(answer: tuple[int, Any]) -> tuple[int, str]:
    code, body = answer
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == code
    return code, body["message"]


def distributed_properties(directory: Path, broker: BrokerProcess, group: str) -> Path:
    path = directory / "worker.properties"
    path.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        f"group.id={group}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter.schemas.enable=true\n"
        f"config.storage.topic={group}-configs\n"
        f"offset.storage.topic={group}-offsets\n"
        f"status.storage.topic={group}-status\n"
        "config.storage.replication.factor=1\n"
        "offset.storage.replication.factor=1\n"
        "status.storage.replication.factor=1\n"
        "heartbeat.interval.ms=300\n"  # a worker joining or leaving is seen at once
        "offset.storage.partitions=3\n"
        "status.storage.partitions=2\n"
        "offset.flush.interval.ms=200\n"
        "listeners=http://127.0.0.1:0\n"
        "plugin.path=/usr/share/java\n"
    )
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker, with groups formed at once: every worker start joins the
    leader election's group and each sink connector's group (Kafka's 3 s initial delay
    would be paid at each)."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "data", {"group.initial.rebalance.delay.ms": "0"}
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("connect")


@pytest.fixture(scope="module")
def worker(broker: BrokerProcess, workdir: Path) -> Iterator[Worker]:
    process = Worker("distributed", distributed_properties(workdir, broker, "connect-it"))
    yield process
    if process.proc.poll() is None:
        process.stop()


def file_source(name: str, path: Path, topic: str, **extra: str) -> dict[str, Any]:
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": str(path),
        "topic": topic,
        **extra,
    }
    return {"name": name, "config": config}


def file_sink(name: str, path: Path, topic: str, **extra: str) -> dict[str, Any]:
    config = {"connector.class": "FileStreamSink", "file": str(path), "topics": topic, **extra}
    return {"name": name, "config": config}


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def topic_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.2):
            if message.error() is None:
                values.append(message.value())
    extra = consumer.consume(100, 0.5)  # nothing more than expected
    values += [m.value() for m in extra if m.error() is None]
    consumer.close()
    return values


def test_root_and_plugins(worker: Worker) -> None:
    code, root = worker.call("GET", "/")
    assert code == 200 and root["version"] == "4.0.0" and root["kafka_cluster_id"]
    assert worker.call("GET", "/health") == (
        200,
        {
            "status": "healthy",
            "message": "Worker has completed startup and is ready to handle requests.",
        },
    )
    code, plugins = worker.call("GET", "/connector-plugins")
    classes = {p["class"]: p["type"] for p in plugins}
    assert classes == {
        "org.apache.kafka.connect.file.FileStreamSinkConnector": "sink",
        "org.apache.kafka.connect.file.FileStreamSourceConnector": "source",
        "io.confluent.connect.jdbc.JdbcSinkConnector": "sink",
        "io.confluent.connect.jdbc.JdbcSourceConnector": "source",
        "io.debezium.connector.postgresql.PostgresConnector": "source",
        "strom.connect.connectors.lake_sink.LakeSinkConnector": "sink",
        "io.confluent.connect.hdfs3.Hdfs3SinkConnector": "sink",
        "io.confluent.connect.hdfs.HdfsSinkConnector": "sink",
    }
    _, everything = worker.call("GET", "/connector-plugins?connectorsOnly=false")
    assert {
        "class": "org.apache.kafka.connect.json.JsonConverter",
        "type": "converter",
    }.items() <= next(
        p for p in everything if p["type"] == "converter" and p["class"].endswith(".JsonConverter")
    ).items()
    code, keys = worker.call("GET", "/connector-plugins/FileStreamSource/config")
    assert code == 200
    topic = next(k for k in keys if k["name"] == "topic")
    assert topic["required"] is True and topic["type"] == "STRING"
    assert "tasks.max" in {k["name"] for k in keys}
    assert error_of(worker.call("GET", "/connector-plugins/NoSuch/config")) == (
        404,
        "Unknown plugin NoSuch.",
    )


def test_validate_lists_every_error(worker: Worker) -> None:
    body = {
        "connector.class": "FileStreamSource",
        "name": "v",
        "batch.size": "many",
        "tasks.max": "0",
        "transforms": "route",
    }
    code, infos = worker.call(
        "PUT", "/connector-plugins/FileStreamSourceConnector/config/validate", body
    )
    assert code == 200
    assert infos["name"] == "FileStreamSource" and infos["error_count"] == 4
    errors = {
        c["value"]["name"]: c["value"]["errors"] for c in infos["configs"] if c["value"]["errors"]
    }
    assert errors == {
        "topic": ['Missing required configuration "topic" which has no default value.'],
        "batch.size": ["Invalid value many for configuration batch.size: Not a number of type INT"],
        "tasks.max": ["Invalid value 0 for configuration tasks.max: Value must be at least 1"],
        "transforms.route.type": [
            'Missing required configuration "transforms.route.type" which has no default value.'
        ],
    }
    assert "Common" in infos["groups"]
    definition = next(
        c["definition"] for c in infos["configs"] if c["definition"]["name"] == "topic"
    )
    assert definition["importance"] == "HIGH" and definition["required"] is True
    sink = {"connector.class": "FileStreamSink", "name": "s", "topics": "a", "topics.regex": "b.*"}
    _, sink_infos = worker.call("PUT", "/connector-plugins/FileStreamSink/config/validate", sink)
    assert sink_infos["error_count"] == 2
    mismatch = worker.call(
        "PUT",
        "/connector-plugins/FileStreamSink/config/validate",
        {"connector.class": "FileStreamSource"},
    )
    assert error_of(mismatch) == (
        400,
        "Included connector type FileStreamSource does not match request type FileStreamSink",
    )
    code, message = error_of(
        worker.call("PUT", "/connector-plugins/x/config/validate", {"connector.class": "x"})
    )
    assert (
        code == 400
        and "Failed to find any class that implements Connector and which name matches x" in message
    )


def test_bad_requests(worker: Worker, workdir: Path) -> None:
    code, message = error_of(
        worker.call("POST", "/connectors", {"name": "b", "config": {"file": "/x"}})
    )
    assert code == 400 and "contains no connector type" in message
    code, message = error_of(
        worker.call(
            "POST", "/connectors", {"name": "b", "config": {"connector.class": "com.example.Nope"}}
        )
    )
    assert code == 400 and "com.example.Nope" in message
    code, message = error_of(
        worker.call("POST", "/connectors", file_source("b", workdir / "b.txt", ""))
    )
    assert code == 400
    assert message.startswith(
        "Connector configuration is invalid and contains the following 1 error(s):\n"
        "Invalid value  for configuration topic: String must be non-empty"
    )
    mismatch = worker.call(
        "PUT", "/connectors/b/config", {"name": "c", "connector.class": "FileStreamSink"}
    )
    assert error_of(mismatch) == (
        400,
        "Connector name configuration (c) doesn't match connector name in the URL (b)",
    )
    assert error_of(worker.call("POST", "/connectors", raw=b"{not json"))[0] == 400
    ghost = "Connector ghost not found"
    for method, path, answer in [
        ("GET", "/connectors/ghost", ghost),
        ("GET", "/connectors/ghost/config", ghost),
        ("GET", "/connectors/ghost/tasks", ghost),
        ("DELETE", "/connectors/ghost", ghost),
        ("GET", "/connectors/ghost/offsets", ghost),
        ("GET", "/connectors/ghost/status", "No status found for connector ghost"),
        ("GET", "/connectors/ghost/tasks/0/status", "No status found for task ghost-0"),
        ("PUT", "/connectors/ghost/pause", "Unknown connector ghost"),
        ("PUT", "/connectors/ghost/stop", "Unknown connector ghost"),
        ("POST", "/connectors/ghost/restart", "Unknown connector: ghost"),
        ("POST", "/connectors/ghost/tasks/0/restart", "Unknown connector: ghost"),
        ("GET", "/no/such/path", "HTTP 404 Not Found"),
    ]:
        assert error_of(worker.call(method, path)) == (404, answer), path
    wrong_method = worker.call("POST", "/connectors/ghost/status")
    assert error_of(wrong_method) == (405, "HTTP 405 Method Not Allowed")


def test_file_source_to_topic_to_file_sink(
    worker: Worker, broker: BrokerProcess, workdir: Path
) -> None:
    source_file, sink_file = workdir / "e2e-in.txt", workdir / "e2e-out.txt"
    source_file.write_text("alpha\nbeta\n")
    code, info = worker.call("POST", "/connectors", file_source("e2e-src", source_file, "e2e"))
    assert code == 201
    assert info == {
        "name": "e2e-src",
        "config": {**file_source("e2e-src", source_file, "e2e")["config"], "name": "e2e-src"},
        "tasks": [],
        "type": "source",
    }
    assert error_of(
        worker.call("POST", "/connectors", file_source("e2e-src", source_file, "e2e"))
    ) == (409, "Connector e2e-src already exists")
    code, _ = worker.call(
        "PUT", "/connectors/e2e-sink/config", file_sink("e2e-sink", sink_file, "e2e")["config"]
    )
    assert code == 201
    worker.wait_state("e2e-src", "RUNNING")
    worker.wait_state("e2e-sink", "RUNNING")
    with source_file.open("a") as handle:
        handle.write("gamma\r\ndelta\n")
    wait_for(lambda: lines_of(sink_file) == ["alpha", "beta", "gamma", "delta"], "the sink file")
    values = topic_values(broker, "e2e", 4)
    assert values[0] == b'{"schema":{"type":"string","optional":false},"payload":"alpha"}'
    assert len(values) == 4
    code, listed = worker.call("GET", "/connectors")
    assert code == 200 and {"e2e-src", "e2e-sink"} <= set(listed)
    _, expanded = worker.call("GET", "/connectors?expand=status&expand=info")
    assert expanded["e2e-src"]["status"]["connector"]["state"] == "RUNNING"
    assert expanded["e2e-sink"]["info"]["type"] == "sink"
    assert expanded["e2e-sink"]["info"]["tasks"] == [{"connector": "e2e-sink", "task": 0}]
    _, tasks = worker.call("GET", "/connectors/e2e-src/tasks")
    assert (
        tasks[0]["id"] == {"connector": "e2e-src", "task": 0}
        and tasks[0]["config"]["topic"] == "e2e"
    )
    code, task_status = worker.call("GET", "/connectors/e2e-src/tasks/0/status")
    assert code == 200 and task_status["state"] == "RUNNING" and task_status["id"] == 0
    committed = {"partition": {"filename": str(source_file)}, "offset": {"position": 24}}
    wait_for(
        lambda: worker.call("GET", "/connectors/e2e-src/offsets")[1] == {"offsets": [committed]},
        "source offsets",
    )
    sink_committed = {
        "partition": {"kafka_topic": "e2e", "kafka_partition": 0},
        "offset": {"kafka_offset": 4},
    }
    wait_for(
        lambda: (
            worker.call("GET", "/connectors/e2e-sink/offsets")[1] == {"offsets": [sink_committed]}
        ),
        "sink offsets",
    )
    code, updated = worker.call("PATCH", "/connectors/e2e-sink/config", {"tasks.max": 2})
    assert code == 200 and updated["config"]["tasks.max"] == "2"
    wait_for(
        lambda: len(worker.call("GET", "/connectors/e2e-sink/tasks")[1]) == 2, "two sink tasks"
    )
    code, config = worker.call("GET", "/connectors/e2e-sink/config")
    assert code == 200 and config["topics"] == "e2e"
    cli = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "connectors", "--url", worker.url, "list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert any(
        line.startswith("e2e-src\tsource\tRUNNING\t0:RUNNING") for line in cli.stdout.splitlines()
    )


def status_records(broker: BrokerProcess, topic: str, key: bytes) -> list[bytes | None]:
    """The values of every record of ``topic`` with ``key``, oldest first."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[bytes | None] = []
    positions = dict.fromkeys(partitions, 0)
    deadline = time.monotonic() + WAIT_S
    while any(positions[p] < ends[p] for p in partitions) and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.2):
            if message.error() is None:
                positions[message.partition()] = message.offset() + 1
                if message.key() == key:
                    values.append(message.value())
    consumer.close()
    return values


def test_active_topics(worker: Worker, broker: BrokerProcess, workdir: Path) -> None:
    """KIP-558: the topic a source wrote to and the one a sink read from are listed, with
    Kafka's records in the status topic; a reset empties the list (a source writing
    again lists its topic again), and a deleted connector's topics are gone."""
    source_file, sink_file = workdir / "active-in.txt", workdir / "active-out.txt"
    source_file.write_text("first\n")
    assert (
        worker.call("POST", "/connectors", file_source("at-src", source_file, "active"))[0] == 201
    )
    assert worker.call("POST", "/connectors", file_sink("at-sink", sink_file, "active"))[0] == 201
    for name in ("at-src", "at-sink"):
        wait_for(
            lambda name=name: (
                worker.call("GET", f"/connectors/{name}/topics")
                == (200, {name: {"topics": ["active"]}})
            ),
            f"{name}'s active topic",
        )
    written = status_records(broker, "connect-it-status", b"status-topic-active:connector-at-src")
    assert written and written[-1] is not None
    document = json.loads(written[-1])
    assert set(document) == {"topic"} and isinstance(document["topic"]["discoverTimestamp"], int)
    assert {k: v for k, v in document["topic"].items() if k != "discoverTimestamp"} == {
        "name": "active",
        "connector": "at-src",
        "task": 0,
    }
    assert worker.call("GET", "/connectors/no-such/topics") == (200, {"no-such": {"topics": []}})
    assert worker.call("PUT", "/connectors/at-src/topics/reset") == (202, None)
    assert worker.call("GET", "/connectors/at-src/topics") == (200, {"at-src": {"topics": []}})
    written = status_records(broker, "connect-it-status", b"status-topic-active:connector-at-src")
    assert written[-1] is None  # Kafka's tombstone
    with source_file.open("a") as handle:
        handle.write("second\n")
    wait_for(lambda: lines_of(sink_file) == ["first", "second"], "the sink file")
    wait_for(
        lambda: (
            worker.call("GET", "/connectors/at-src/topics")[1] == {"at-src": {"topics": ["active"]}}
        ),
        "the source's topic recorded again",
    )
    assert worker.call("DELETE", "/connectors/at-sink")[0] == 204
    wait_for(
        lambda: worker.call("GET", "/connectors/at-sink/topics")[1] == {"at-sink": {"topics": []}},
        "the deleted sink's topics reset",
    )
    written = status_records(broker, "connect-it-status", b"status-topic-active:connector-at-sink")
    assert written[-1] is None
    assert worker.call("DELETE", "/connectors/at-src")[0] == 204


def test_pause_resume_stop_and_offsets(worker: Worker, workdir: Path) -> None:
    source_file, sink_file = workdir / "pause-in.txt", workdir / "pause-out.txt"
    source_file.write_text("one\n")
    worker.call("POST", "/connectors", file_source("p-src", source_file, "pause"))
    worker.call("POST", "/connectors", file_sink("p-sink", sink_file, "pause"))
    wait_for(lambda: lines_of(sink_file) == ["one"], "the first line")
    assert worker.call("PUT", "/connectors/p-src/pause") == (202, None)
    worker.wait_state("p-src", "PAUSED")
    with source_file.open("a") as handle:
        handle.write("two\n")
    time.sleep(0.5)  # a paused source reads nothing: the line stays unread meanwhile
    assert lines_of(sink_file) == ["one"]
    assert worker.call("PUT", "/connectors/p-src/resume") == (202, None)
    worker.wait_state("p-src", "RUNNING")
    wait_for(lambda: lines_of(sink_file) == ["one", "two"], "the line after resume")
    refused = worker.call(
        "PATCH",
        "/connectors/p-src/offsets",
        {"offsets": [{"partition": {"filename": str(source_file)}, "offset": {"position": 0}}]},
    )
    code, message = error_of(refused)
    assert code == 400 and message.startswith(
        "Connectors must be in the STOPPED state before their offsets can be modified."
    )
    assert worker.call("PUT", "/connectors/p-src/stop") == (204, None)
    stopped = worker.wait_state("p-src", "STOPPED", tasks=0)
    assert stopped["tasks"] == []
    assert worker.call("GET", "/connectors/p-src/tasks") == (200, [])
    bad = worker.call(
        "PATCH",
        "/connectors/p-src/offsets",
        {"offsets": [{"partition": {"filename": str(source_file)}, "offset": {"position": -1}}]},
    )
    assert error_of(bad) == (
        400,
        "The value for the 'position' key in the offset should be a non-negative value",
    )
    assert error_of(worker.call("PATCH", "/connectors/p-src/offsets", {"offsets": []}))[0] == 400
    altered = worker.call(
        "PATCH",
        "/connectors/p-src/offsets",
        {"offsets": [{"partition": {"filename": str(source_file)}, "offset": {"position": 4}}]},
    )
    assert altered == (
        200,
        {"message": "The offsets for this connector have been altered successfully"},
    )
    assert worker.call("GET", "/connectors/p-src/offsets")[1]["offsets"][0]["offset"] == {
        "position": 4
    }
    assert worker.call("PUT", "/connectors/p-src/resume") == (202, None)
    worker.wait_state("p-src", "RUNNING")
    wait_for(
        lambda: lines_of(sink_file) == ["one", "two", "two"], "the line read again from position 4"
    )
    worker.call("PUT", "/connectors/p-sink/stop")
    worker.wait_state("p-sink", "STOPPED", tasks=0)
    reset = worker.call("DELETE", "/connectors/p-sink/offsets")
    assert reset[0] == 200 and "have been reset successfully" in reset[1]["message"]
    assert worker.call("GET", "/connectors/p-sink/offsets") == (200, {"offsets": []})
    assert worker.call("DELETE", "/connectors/p-sink") == (204, None)
    assert worker.call("DELETE", "/connectors/p-src") == (204, None)
    wait_for(lambda: worker.status("p-src") is None, "the deleted connector's status to go")


def test_failed_task_and_restarts(worker: Worker, workdir: Path) -> None:
    missing = workdir / "not-yet" / "out.txt"
    worker.call("POST", "/connectors", file_sink("f-sink", missing, "fail"))
    status = worker.wait_state("f-sink", "RUNNING", tasks=None)
    status = worker.wait_task_failed("f-sink")
    assert "Couldn't find or create file" in status["tasks"][0]["trace"]
    assert "Traceback" in status["tasks"][0]["trace"]
    missing.parent.mkdir()
    code, restarting = worker.call(
        "POST", "/connectors/f-sink/restart?includeTasks=true&onlyFailed=true"
    )
    assert code == 202
    assert restarting["connector"]["state"] == "RUNNING"  # not failed: not restarted
    assert restarting["tasks"][0]["state"] == "RESTARTING"
    worker.wait_state("f-sink", "RUNNING")
    assert worker.call("POST", "/connectors/f-sink/restart") == (204, None)
    assert worker.call("POST", "/connectors/f-sink/tasks/0/restart") == (204, None)
    assert error_of(worker.call("POST", "/connectors/f-sink/tasks/7/restart")) == (
        404,
        "Unknown task: f-sink-7",
    )
    worker.wait_state("f-sink", "RUNNING")
    worker.call("DELETE", "/connectors/f-sink")


def test_transforms_chain_from_file_source(
    worker: Worker, workdir: Path, broker: BrokerProcess
) -> None:
    """FileStream source -> HoistField + InsertField + RegexRouter -> the routed topic."""
    source_file = workdir / "smt.txt"
    source_file.write_text("one\ntwo\n")
    chain = {
        "transforms": "hoist,insert,route",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "line",
        "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.insert.static.field": "origin",
        "transforms.insert.static.value": "file",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)-raw",
        "transforms.route.replacement": "$1-lines",
    }
    code, _ = worker.call(
        "POST", "/connectors", file_source("smt-src", source_file, "smt-raw", **chain)
    )
    assert code == 201
    values = [json.loads(v) for v in topic_values(broker, "smt-lines", 2)]
    assert [v["payload"] for v in values] == [
        {"line": "one", "origin": "file"},
        {"line": "two", "origin": "file"},
    ]
    assert values[0]["schema"]["fields"] == [
        {"type": "string", "optional": False, "field": "line"},
        {"type": "string", "optional": True, "field": "origin"},
    ]
    worker.call("DELETE", "/connectors/smt-src")


def test_source_skips_a_record_the_producer_refuses(
    worker: Worker, workdir: Path, broker: BrokerProcess
) -> None:
    """errors.tolerance=all: a line too large for the producer is skipped (KIP-779)."""
    source_file = workdir / "large.txt"
    source_file.write_text(f"small\n{'x' * 2000}\nafter\n")
    settings = {"errors.tolerance": "all", "producer.override.message.max.bytes": "1000"}
    config = file_source("large-src", source_file, "large-lines", **settings)
    assert worker.call("POST", "/connectors", config)[0] == 201
    values = [json.loads(v)["payload"] for v in topic_values(broker, "large-lines", 2)]
    assert values == ["small", "after"]
    assert worker.wait_state("large-src", "RUNNING")
    worker.call("DELETE", "/connectors/large-src")


def test_sink_tolerates_a_bad_record_into_the_dead_letter_queue(
    worker: Worker, workdir: Path, broker: BrokerProcess
) -> None:
    topic, queue = "dlq-in", "dlq-out"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    good = b'{"schema":{"type":"string","optional":false},"payload":"%s"}'
    for value in (good % b"first", b"not json", good % b"second"):
        producer.produce(topic, value, b"k", headers=[("origin", b"test")])
    producer.flush(10)
    out = workdir / "dlq-sink.txt"
    errors = {
        "errors.tolerance": "all",
        "errors.log.enable": "true",
        "errors.deadletterqueue.topic.name": queue,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true",
    }
    assert worker.call("POST", "/connectors", file_sink("dlq-sink", out, topic, **errors))[0] == 201
    wait_for(lambda: lines_of(out) == ["first", "second"], "the good records in the file")
    assert worker.wait_state("dlq-sink", "RUNNING")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"dlq-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(queue, 0, 0)])
    message = wait_for(lambda: next(iter(consumer.consume(1, 0.2)), None), "the dead letter")
    consumer.close()
    assert (message.key(), message.value()) == (b"k", b"not json")
    headers = dict(message.headers())
    assert headers["origin"] == b"test"
    assert {k: v for k, v in headers.items() if "stacktrace" not in k and "message" not in k} == {
        "origin": b"test",
        "__connect.errors.topic": topic.encode(),
        "__connect.errors.partition": b"0",
        "__connect.errors.offset": b"1",
        "__connect.errors.connector.name": b"dlq-sink",
        "__connect.errors.task.id": b"0",
        "__connect.errors.stage": b"VALUE_CONVERTER",
        "__connect.errors.class.name": b"org.apache.kafka.connect.json.JsonConverter",
        "__connect.errors.exception.class.name": b"strom.connect.data.DataException",
    }
    assert b"serialization error" in headers["__connect.errors.exception.message"]
    assert b"Traceback" in headers["__connect.errors.exception.stacktrace"]
    worker.call("DELETE", "/connectors/dlq-sink")
    strict = file_sink("strict-sink", workdir / "strict.txt", topic)
    assert worker.call("POST", "/connectors", strict)[0] == 201
    failed = worker.wait_task_failed("strict-sink")
    assert "Tolerance exceeded in error handler" in failed["tasks"][0]["trace"]
    assert "serialization error" in failed["tasks"][0]["trace"]
    worker.call("DELETE", "/connectors/strict-sink")


def test_console_connect_page(worker: Worker, broker: BrokerProcess, workdir: Path) -> None:
    """``strom console --connect-url``: the connectors, their class, state and tasks, and a
    pause through the page's form; the same form without its token is refused and does
    nothing."""
    source_file = workdir / "console-in.txt"
    source_file.write_text("a\n")
    worker.call("POST", "/connectors", file_source("console-src", source_file, "console-lines"))
    worker.wait_state("console-src", "RUNNING")
    console = ServiceProcess(
        ["console", "--bootstrap-server", broker.bootstrap, "--listener", "http://127.0.0.1:0",
         "--connect-url", worker.url]
    )  # fmt: skip
    pause = f"{console.url}/connect/console-src/pause"
    try:
        with urllib.request.urlopen(console.url + "/connect", timeout=30) as response:
            page = response.read().decode()
        assert "console-src" in page and "FileStreamSourceConnector" in page
        assert "0: RUNNING" in page
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None and 'action="/connect/console-src/pause"' in page
        forged = urllib.request.Request(pause, data=b"x=1", headers={"Origin": console.url})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=30)
        assert refused.value.code == 403
        assert worker.status("console-src")["connector"]["state"] == "RUNNING"
        form = f"csrf_token={token.group(1)}".encode()
        posted = urllib.request.Request(pause, data=form, headers={"Origin": console.url})
        with urllib.request.urlopen(posted, timeout=30) as response:
            assert "/connect?note=Pause" in response.url
        worker.wait_state("console-src", "PAUSED")
        with urllib.request.urlopen(console.url + "/connect", timeout=30) as response:
            assert "0: PAUSED" in response.read().decode()
    finally:
        console.stop()
        worker.call("DELETE", "/connectors/console-src")


def test_loggers(worker: Worker) -> None:
    code, loggers = worker.call("GET", "/admin/loggers")
    assert code == 200 and loggers["root"]["level"] in ("INFO", "WARN")
    code, changed = worker.call("PUT", "/admin/loggers/strom.connect", {"level": "DEBUG"})
    assert code == 200 and "strom.connect" in changed and "strom.connect.herder" in changed
    code, level = worker.call("GET", "/admin/loggers/strom.connect.herder")
    assert code == 200 and level["level"] == "DEBUG" and level["last_modified"] > 0
    assert worker.call("PUT", "/admin/loggers/strom.connect", {"level": "INFO"})[0] == 200
    assert error_of(worker.call("PUT", "/admin/loggers/x", {"level": "LOUD"})) == (
        404,
        "invalid log level 'LOUD'.",
    )
    assert error_of(worker.call("PUT", "/admin/loggers/x", {})) == (
        400,
        "Desired 'level' parameter was not specified in request.",
    )
    assert error_of(worker.call("GET", "/admin/loggers/no.such.logger")) == (
        404,
        "Logger no.such.logger not found.",
    )


def test_kafka_connect_py_client(worker: Worker, workdir: Path) -> None:
    kafka_connect = pytest.importorskip("kafka_connect")
    client = kafka_connect.KafkaConnect(url=worker.url)
    assert client.get_cluster_info()["version"] == "4.0.0"
    source_file = workdir / "client-in.txt"
    source_file.write_text("x\n")
    created = client.create_connector(file_source("client-src", source_file, "client"))
    assert created["name"] == "client-src"
    worker.wait_state("client-src", "RUNNING")
    assert client.get_connector_status("client-src")["connector"]["state"] == "RUNNING"
    client.pause_connector("client-src")
    worker.wait_state("client-src", "PAUSED")
    client.resume_connector("client-src")
    worker.wait_state("client-src", "RUNNING")
    assert "client-src" in client.list_connectors()
    client.delete_connector("client-src")
    assert "client-src" not in client.list_connectors()


def test_restarted_worker_resumes_at_committed_offsets(
    worker: Worker, broker: BrokerProcess, workdir: Path
) -> None:
    """Last in the module: the shared worker is stopped and started again."""
    source_file, sink_file = workdir / "resume-in.txt", workdir / "resume-out.txt"
    source_file.write_text("".join(f"line {n}\n" for n in range(100)))
    worker.call(
        "POST", "/connectors", file_source("r-src", source_file, "resume", **{"batch.size": "7"})
    )
    worker.call("POST", "/connectors", file_sink("r-sink", sink_file, "resume"))
    wait_for(lambda: len(lines_of(sink_file)) == 100, "the first 100 lines")
    worker.stop()
    with source_file.open("a") as handle:  # written while no worker runs
        handle.write("".join(f"line {n}\n" for n in range(100, 150)))
    worker.start()
    worker.wait_state("r-src", "RUNNING")
    wait_for(lambda: len(lines_of(sink_file)) >= 150, "the lines written while stopped")
    time.sleep(0.5)  # anything repeated would arrive meanwhile
    assert lines_of(sink_file) == [f"line {n}" for n in range(150)]
    assert len(topic_values(broker, "resume", 150)) == 150
    _, offsets = worker.call("GET", "/connectors/r-src/offsets")
    assert offsets["offsets"][0]["offset"]["position"] == source_file.stat().st_size


def test_second_worker_forwards_and_takes_over(worker: Worker, workdir: Path) -> None:
    """A second worker of the group shares the tasks with the first (Kafka's group
    protocol), forwards writes to the leader and a task's restart to the worker running
    it; when the leader stops, the other takes everything over at the committed
    offsets."""
    follower = Worker("distributed", workdir / "worker.properties")
    workers = {w.url.split("//")[1]: w for w in (worker, follower)}
    try:
        source_file, sink_file = workdir / "takeover-in.txt", workdir / "takeover-out.txt"
        source_file.write_text("before\n")
        for one in workers.values():  # each forwards to the leader, or is it
            name = f"t-src-{one is follower}"
            assert (
                one.call("POST", "/connectors", file_source(name, source_file, "takeover"))[0]
                == 201
            )
        assert (
            follower.call("POST", "/connectors", file_sink("t-sink", sink_file, "takeover"))[0]
            == 201
        )
        leader_id = follower.wait_state("t-sink", "RUNNING")["connector"]["worker_id"]
        wait_for(lambda: lines_of(sink_file) == ["before", "before"], "the leader's copies")
        for one in workers.values():  # one of them has it from the status topic (KIP-558)
            wait_for(
                lambda one=one: (
                    one.call("GET", "/connectors/t-sink/topics")[1]
                    == {"t-sink": {"topics": ["takeover"]}}
                ),
                "the sink's active topic on each worker",
            )
        names = ("t-src-True", "t-src-False", "t-sink")

        def owners() -> dict[str, str] | None:
            found = {}
            for name in names:
                status = follower.status(name) or {"tasks": []}
                found |= {f"{name}-{t['id']}": t["worker_id"] for t in status["tasks"]}
            return found if len(found) == 3 and set(found.values()) == set(workers) else None

        for task, owner in wait_for(owners, "the tasks shared by both workers").items():
            name, number = task.rsplit("-", 1)
            other_worker = next(w for url, w in workers.items() if url != owner)
            path = f"/connectors/{name}/tasks/{number}/restart"
            assert other_worker.call("POST", path) == (204, None)  # forwarded to its worker
        workers.pop(leader_id).stop()
        (other_id, other), *_ = workers.items()
        wait_for(
            lambda: (s := other.status("t-sink")) and s["connector"]["worker_id"] == other_id,
            "the other worker taking over",
        )
        with source_file.open("a") as handle:
            handle.write("after\n")
        expected = ["before", "before", "after", "after"]
        wait_for(lambda: lines_of(sink_file) == expected, "the new leader's copies")
    finally:
        for one in (worker, follower):
            if one.proc.poll() is None:
                one.stop()


def test_standalone_worker(broker: BrokerProcess, tmp_path: Path) -> None:
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("standalone\n")
    worker_file = tmp_path / "standalone.properties"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "offset.flush.interval.ms=200\nlisteners=http://127.0.0.1:0\n"
        "topic.tracking.allow.reset=false\n"
    )
    source = tmp_path / "source.properties"
    source.write_text(
        f"name=sa-src\nconnector.class=FileStreamSource\nfile={source_file}\ntopic=standalone\n"
    )
    sink = tmp_path / "sink.json"
    sink.write_text(json.dumps(file_sink("sa-sink", sink_file, "standalone")))
    process = Worker("standalone", worker_file, source, sink)
    try:
        wait_for(lambda: lines_of(sink_file) == ["standalone"], "the standalone sink")
        assert process.call("GET", "/connectors")[1] == ["sa-sink", "sa-src"]
        for name in ("sa-src", "sa-sink"):  # KIP-558's active topics, kept in memory
            wait_for(
                lambda name=name: (
                    process.call("GET", f"/connectors/{name}/topics")[1]
                    == {name: {"topics": ["standalone"]}}
                ),
                f"{name}'s active topic",
            )
        assert error_of(process.call("PUT", "/connectors/sa-src/topics/reset")) == (
            403,
            "Topic tracking reset is disabled.",
        )
        assert process.call("DELETE", "/connectors/sa-sink")[0] == 204
        wait_for(
            lambda: (
                process.call("GET", "/connectors/sa-sink/topics")[1] == {"sa-sink": {"topics": []}}
            ),
            "the deleted sink's topics reset",
        )
    finally:
        process.stop()
    offsets = json.loads((tmp_path / "offsets").read_text())
    assert offsets == {
        json.dumps(["sa-src", {"filename": str(source_file)}], separators=(",", ":")): {
            "position": 11
        }
    }


def test_topic_tracking_disabled(broker: BrokerProcess, tmp_path: Path) -> None:
    worker_file = tmp_path / "untracked.properties"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "listeners=http://127.0.0.1:0\ntopic.tracking.enable=false\n"
    )
    process = Worker("standalone", worker_file)
    try:
        for method, path in (("GET", "/topics"), ("PUT", "/topics/reset")):
            answer = process.call(method, "/connectors/any" + path)
            assert error_of(answer) == (403, "Topic tracking is disabled.")
    finally:
        process.stop()


def run_standalone(worker_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "connect-standalone", str(worker_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_worker_refuses_bad_settings_in_one_line(broker: BrokerProcess, tmp_path: Path) -> None:
    worker_file = tmp_path / "bad.properties"
    converters = "key.converter=StringConverter\nvalue.converter=JsonConverter\n"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n{converters}offset.flush.interval.ms=soon\noffset.storage.file.filename=/tmp/o\n"
    )
    run = run_standalone(worker_file)
    assert run.returncode == 2
    assert (
        run.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "Invalid value soon for configuration offset.flush.interval.ms: Not a number of type "
            "LONG (see strom connect-standalone --help)"
        )
    )
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\nvalue.converter=y\noffset.storage.file.filename=/tmp/o\n"
    )
    run = run_standalone(worker_file)
    assert run.returncode == 2 and 'Missing required configuration "key.converter"' in run.stderr
    assert "Traceback" not in run.stderr
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\nkey.converter=com.example.Avro\nvalue.converter=y\noffset.storage.file.filename=/tmp/o\n"
    )
    run = run_standalone(worker_file)
    assert run.returncode == 2
    assert (
        "Invalid value com.example.Avro for configuration key.converter: "
        "Class com.example.Avro could not be found." in run.stderr
    )
