"""Exactly-once source support (KIP-618) on a real broker: a distributed worker with
``exactly.once.source.support=enabled`` writes each batch of a FileStream source with its
offsets in one transaction; the worker is killed with SIGKILL while lines keep coming,
a new one resumes, and a read_committed reader sees every line once, in order (the
transaction the kill left open is aborted when the new task fences the old)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from test_connect import Worker, distributed_properties, file_source, wait_for

LINES = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    process.start()
    yield process
    process.stop()


class CommittedReader:
    """The topic's values as a read_committed consumer sees them, read as they come."""

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "eos-check",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.values: list[str] = []

    def read(self) -> int:
        for message in self.consumer.consume(1000, 0.2):
            if message.error() is None:
                self.values.append(json.loads(message.value())["payload"])
        return len(self.values)


def test_a_killed_worker_neither_loses_nor_doubles_a_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    properties = distributed_properties(tmp_path, broker, "connect-eos")
    with properties.open("a") as handle:
        handle.write(
            "exactly.once.source.support=enabled\n"
            "session.timeout.ms=6000\n"  # the dead worker leaves the group sooner
            # at least once, offsets would be committed this seldom: a kill repeats lines
            "offset.flush.interval.ms=60000\n"
        )
    source_file = tmp_path / "lines.txt"
    source_file.write_text("".join(f"line {n}\n" for n in range(1000)))
    writing = threading.Event()

    def keep_writing() -> None:  # lines keep coming while the worker dies and comes back
        with source_file.open("a") as handle:
            for n in range(1000, LINES):
                handle.write(f"line {n}\n")
                handle.flush()
                if n % 100 == 0:
                    time.sleep(0.05)
        writing.set()

    worker = Worker("distributed", properties)
    reader = CommittedReader(broker, "eos-lines")
    try:
        connector = file_source("eos-src", source_file, "eos-lines", **{"batch.size": "50"})
        connector["config"]["exactly.once.support"] = "required"
        assert worker.call("POST", "/connectors", connector)[0] == 201
        writer = threading.Thread(target=keep_writing)
        writer.start()
        wait_for(lambda: reader.read() >= 500, "some lines committed")
        worker.proc.kill()  # SIGKILL: a transaction may be open
        worker.proc.wait(10)
        worker = Worker("distributed", properties)
        writer.join(60)
        assert writing.is_set()
        wait_for(lambda: reader.read() >= LINES, "every line", timeout=60)
        time.sleep(0.5)
        reader.read()
        assert reader.values == [f"line {n}" for n in range(LINES)]
    finally:
        reader.consumer.close()
        worker.stop()
