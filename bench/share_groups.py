"""Share groups (KIP-932): throughput of share consumers on one partition, and how soon
a dead consumer's records reach another.

Starts a real broker process on a free port with its data in a temp dir, then:
  1. produces N records of 100 B to a one-partition topic and reads them with four
     ShareConsumer processes of one share group (implicit acknowledgement): records/s
     together, from the first record received to the last; the group's start offset
     must reach N (every record acknowledged) and the duplicates are counted,
  2. a consumer process acquires records (lock duration L) and is killed with SIGKILL
     while it holds them; another consumer of the group, already polling, receives
     them: the time from the kill to the last of them, against L + 1 s.
Prints one line per figure. Usage: python bench/share_groups.py [--records N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402
from kio.schema.describe_share_group_offsets.v1.request import (  # noqa: E402
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from raw_client import RawClient  # noqa: E402

CONSUMERS = 4
LOCK_MS = 2000
OVERRIDES = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "share.coordinator.state.topic.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}


def _group_configs(admin: AdminClient, group: str, **configs: str) -> None:
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)


def _start_offset(port: int, group: str, topic: str) -> int:
    with RawClient(port) as client:
        response = client.request(
            DescribeShareGroupOffsetsRequest(
                groups=(
                    DescribeShareGroupOffsetsRequestGroup(
                        group_id=group,
                        topics=(
                            DescribeShareGroupOffsetsRequestTopic(
                                topic_name=topic, partitions=(0,)
                            ),
                        ),
                    ),
                )
            )
        )
    return int(response.groups[0].topics[0].partitions[0].start_offset)


def _consume(
    bootstrap: str,
    group: str,
    topic: str,
    count: Synchronized,  # type: ignore[type-arg]
    first_at: Synchronized,  # type: ignore[type-arg]
    stop: Event,
) -> None:
    """A share consumer process: counts what it receives until told to stop."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    while not stop.is_set():
        messages = consumer.poll(0.2)
        got = sum(1 for m in messages if m.error() is None)
        if got:
            with first_at.get_lock():
                if first_at.value == 0.0:
                    first_at.value = time.perf_counter()
            with count.get_lock():
                count.value += got
    consumer.close()


def throughput(broker: BrokerProcess, admin: AdminClient, records: int) -> None:
    from compare_strom import produce as produce_figure

    topic, group = "work", "workers"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    produced = produce_figure(broker.bootstrap, topic, records, 100, "1", 300, partitions=1)
    if produced.value is None:
        raise SystemExit(f"produce: {produced.note}")
    print(f"produced {records:,} records of 100 B: {produced.value:,.0f} records/s")
    _group_configs(admin, group, share_auto_offset_reset="earliest")
    count = multiprocessing.Value("q", 0)
    first_at = multiprocessing.Value("d", 0.0)
    stop = multiprocessing.Event()
    workers = [
        multiprocessing.Process(
            target=_consume, args=(broker.bootstrap, group, topic, count, first_at, stop)
        )
        for _ in range(CONSUMERS)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with count.get_lock():
            if count.value >= records:
                break
        time.sleep(0.01)
    done_at = time.perf_counter()
    with count.get_lock():
        received = count.value
    finished = -1
    while time.monotonic() < deadline:  # the last polls' implicit acknowledgements land
        finished = _start_offset(broker.port, group, topic)
        if finished >= records:
            break
        time.sleep(0.2)
    stop.set()
    for worker in workers:
        worker.join(30)
    elapsed = done_at - first_at.value
    print(
        f"{CONSUMERS} share consumers, one partition: {received / elapsed:,.0f} records/s "
        f"together ({received:,} received in {elapsed:.2f} s, "
        f"{max(received - records, 0):,} redelivered; start offset {finished:,} of {records:,})"
    )


def _victim(bootstrap: str, group: str, topic: str, holding: Synchronized) -> None:  # type: ignore[type-arg]
    """Acquires records and holds them (explicit mode, never acknowledged) until killed;
    the records of its one poll stand for the work it was doing."""
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    while True:
        got = sum(1 for m in consumer.poll(0.2) if m.error() is None)
        if got:
            with holding.get_lock():
                holding.value += got
            while True:  # holds them: polls no more, as a stuck worker would
                time.sleep(1)


def redelivery(broker: BrokerProcess, admin: AdminClient) -> None:
    from confluent_kafka import Producer

    topic, group, records = "jobs", "job-workers", 200
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _group_configs(
        admin,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms=str(LOCK_MS),
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=b"job-%04d" % i + b"x" * 92)
    producer.flush(30)
    holding = multiprocessing.Value("q", 0)  # what the victim's one poll returned
    victim = multiprocessing.Process(target=_victim, args=(broker.bootstrap, group, topic, holding))
    victim.start()
    deadline = time.monotonic() + 60
    while holding.value == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    acquired_at = time.perf_counter()
    held = int(holding.value)
    if held == 0:
        raise SystemExit("the first consumer acquired nothing")
    survivor = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    survivor.subscribe([topic])
    survivor.poll(1.0)  # joins the group; everything is held by the other
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.perf_counter()
    victim.join()
    seen: set[int] = set()
    while len(seen) < held and time.monotonic() < deadline:
        for message in survivor.poll(0.1):
            if message.error() is None:
                seen.add(message.offset())
    took = time.perf_counter() - killed_at
    since_acquired = time.perf_counter() - acquired_at
    survivor.close()
    bound = LOCK_MS / 1000 + 1
    verdict = "within" if took <= bound else "OVER"
    print(
        f"redelivery after a consumer's SIGKILL: the {held} records it held at another "
        f"consumer {took:.2f} s after the kill, {since_acquired:.2f} s after it acquired them "
        f"({verdict} the lock duration {LOCK_MS / 1000:.0f} s + 1 s = {bound:.0f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            throughput(broker, admin, args.records)
            redelivery(broker, admin)
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
