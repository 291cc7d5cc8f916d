"""Replication figures with three real broker processes on this machine.

Three combined nodes (``strom broker`` processes, tests/cluster_process.py) on
127.0.0.1; the client is confluent-kafka in this process. Every figure counts only
records whose delivery report came back without an error.

- produce: N records of 100 B, acks=all, to a 6-partition topic with replication factor
  3 and to one with replication factor 1, in the same run; with the client's defaults
  (librdkafka: acks=all, linger.ms 5, batch.size 1 MB) and tuned (linger.ms 20,
  batch.num.messages 100 k, queue.buffering.max.messages 2 M). Kafka's
  2014 figure for 3x synchronous replication was 0.51x of unreplicated.
- consume: the RF=3 topic read back by one consumer (defaults, then
  fetch.queue.backoff.ms=10 and queued.min.messages 1 M).
- unavailability after ``kill -9`` of a partition's leader (not the active controller,
  so that the figure is the partition's failover, not the quorum's): an idempotent
  acks=all producer writes to that partition every millisecond; the figure is the
  time from the kill to the first acknowledgement after it. The leader is replaced
  once the controller fences the dead broker: ``broker.session.timeout.ms`` (set to
  2 s here, heartbeats every 0.5 s) plus the client's metadata refresh; target <= the
  session timeout + 1 s. After SIGTERM instead: controlled shutdown moves the
  leadership first; the figure is the longest gap between acknowledgements from the
  signal until 3 s later (target < 0.3 s).
- reassignment: a partition holding ~256 MB (100 KB records) moved from one broker to
  another (AlterPartitionReassignments); MB/s from the request to its completion
  (ListPartitionReassignments empty and the new replica alone in the ISR).

Usage: python bench/replication.py [--records N] [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_partition_reassignments.v0 import request as alter_req
from kio.schema.list_partition_reassignments.v0 import request as list_req

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cluster_process import Cluster  # noqa: E402

from strom.wire_client import WireConnection  # noqa: E402

RECORD = b"x" * 100
SETTINGS = {
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "10000",
    "min.insync.replicas": "2",
}
TUNED_PRODUCER = {
    "linger.ms": 20,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
}
TUNED_CONSUMER = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 1_000_000}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: NewTopic) -> None:
    admin = _admin(bootstrap)  # must outlive its future
    admin.create_topics([topic])[topic.topic].result(60)


def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _partition(bootstrap: str, topic: str, index: int = 0):  # type: ignore[no-untyped-def]
    return _admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[index]


def produce(bootstrap: str, topic: str, count: int, extra: dict) -> float:  # type: ignore[type-arg]
    delivered = failed = 0
    errors: set[str] = set()

    def report(error, _message) -> None:  # type: ignore[no-untyped-def]
        nonlocal delivered, failed
        if error is None:
            delivered += 1
        else:
            failed += 1
            errors.add(error.name())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **extra})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    if failed or delivered != count:
        raise RuntimeError(
            f"{failed} deliveries failed ({', '.join(sorted(errors))}), "
            f"{delivered} of {count} acknowledged"
        )
    return count / elapsed


def consume(bootstrap: str, topic: str, count: int, extra: dict) -> float:  # type: ignore[type-arg]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    consumer.subscribe([topic])
    got = 0
    started = None
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        batch = consumer.consume(10_000, 0.5)
        if batch and started is None:
            started = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return count / elapsed


def _controller_id(bootstrap: str) -> int:
    admin = _admin(bootstrap)
    return admin.describe_cluster(request_timeout=10).result(15).controller.id


def unavailability(cluster: Cluster, topic: str, how: str) -> float:
    """Seconds from the kill (the longest gap after SIGTERM) to the next acknowledgement."""
    bootstrap = cluster.bootstrap()
    acks: list[tuple[float, float]] = []  # (sent, acknowledged)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    )

    def run_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sent = time.monotonic()

            def report(error, _message, sent=sent) -> None:  # type: ignore[no-untyped-def]
                if error is None:
                    acks.append((sent, time.monotonic()))

            producer.produce(topic, RECORD, partition=0, on_delivery=report)
            producer.poll(0.001)

    run_for(1.0)
    leader = _partition(bootstrap, topic).leader
    victim = cluster.nodes[leader]
    signalled = time.monotonic()
    if how == "kill":
        victim.kill()
    else:
        victim.proc.send_signal(15)  # type: ignore[union-attr]
    run_for(6.0)
    producer.flush(30)
    # Only records sent after the fault count: an earlier record's report may be
    # served after it, from an answer that came before.
    after = sorted(acked for sent, acked in acks if sent > signalled)
    if not after:
        raise RuntimeError("no acknowledgement after the fault")
    if how == "kill":
        figure = after[0] - signalled
    else:
        window = [signalled] + [t for t in after if t < signalled + 3.0]
        figure = max(b - a for a, b in zip(window, window[1:], strict=False))
        victim.proc.wait(30)  # type: ignore[union-attr]
    victim.start()
    _wait(lambda: len(_partition(cluster.bootstrap(), topic).isrs) == 3, 60, "the ISR whole again")
    return figure


def _send(port: int, request):  # type: ignore[no-untyped-def]
    conn = WireConnection("127.0.0.1", port, "bench", connect_timeout_s=5, request_timeout_s=60)
    try:
        return conn.request(request)
    finally:
        conn.close()


def reassignment(cluster: Cluster, megabytes: int) -> float:
    bootstrap = cluster.bootstrap()
    _create(
        bootstrap,
        NewTopic("moving", num_partitions=1, replica_assignment=[[1]]),
    )
    value = b"y" * 100_000
    count = megabytes * 1_000_000 // len(value)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    errors: list[str] = []

    def report(error, _message) -> None:  # type: ignore[no-untyped-def]
        if error is not None:
            errors.append(error.name())

    for _ in range(count):
        while True:
            try:
                producer.produce("moving", value, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) or errors:
        raise RuntimeError(f"the fill did not finish: {sorted(set(errors))[:3]}")
    size = sum(p.stat().st_size for p in (cluster.nodes[1].data_dir / "moving-0").glob("*.log"))
    if size < megabytes * 500_000:
        raise RuntimeError(f"only {size} bytes in moving-0")
    port = cluster.nodes[1].port
    started = time.monotonic()
    response = _send(
        port,
        alter_req.AlterPartitionReassignmentsRequest(
            timeout=datetime.timedelta(seconds=30),
            topics=(
                alter_req.ReassignableTopic(
                    name="moving",
                    partitions=(alter_req.ReassignablePartition(partition_index=0, replicas=(2,)),),
                ),
            ),
        ),
    )
    if response.responses[0].partitions[0].error_code != 0:
        raise RuntimeError(f"reassignment refused: {response}")

    def done() -> bool:
        listed = _send(
            port,
            list_req.ListPartitionReassignmentsRequest(
                timeout=datetime.timedelta(seconds=30), topics=None
            ),
        )
        return not listed.topics

    _wait(done, 600, "the reassignment")
    elapsed = time.monotonic() - started
    return size / 1e6 / elapsed


def _summary(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:,.2f}"
    return f"{statistics.median(values):,.2f} (range {min(values):,.2f}-{max(values):,.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reassign-mb", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="one run, fewer records")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.records, args.reassign_mb = 1, 100_000, 64
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-repl-") as root:
        cluster = Cluster.combined(Path(root), overrides=SETTINGS)
        try:
            cluster.start_all()
            bootstrap = cluster.bootstrap()
            _wait(lambda: len(_admin(bootstrap).list_topics(timeout=5).brokers) == 3, 30, "brokers")
            for run in range(args.runs):
                for rf in (3, 1):
                    for label, extra in (("defaults", {}), ("tuned", TUNED_PRODUCER)):
                        topic = f"p{rf}-{label}-{run}"
                        _create(bootstrap, NewTopic(topic, 6, rf))
                        rate = produce(bootstrap, topic, args.records, extra)
                        figures.setdefault(f"produce acks=all RF={rf}, {label} (rec/s)", []).append(
                            rate
                        )
                        if rf == 3:
                            rate = consume(
                                bootstrap,
                                topic,
                                args.records,
                                TUNED_CONSUMER if label == "tuned" else {},
                            )
                            figures.setdefault(f"consume RF=3, {label} (rec/s)", []).append(rate)
                controller = _controller_id(bootstrap)
                for how in ("kill", "sigterm"):
                    topic = f"avail-{how}-{run}"
                    others = [n for n in (1, 2, 3) if n != controller]
                    assignment = [others[run % 2], controller, others[(run + 1) % 2]]
                    _create(
                        bootstrap,
                        NewTopic(topic, num_partitions=1, replica_assignment=[assignment]),
                    )
                    _wait(
                        lambda t=topic, b=bootstrap: len(_partition(b, t).isrs) == 3, 30, "full ISR"
                    )
                    label = (
                        "unavailability after kill -9 of the leader (s)"
                        if how == "kill"
                        else "longest gap after SIGTERM of the leader (s)"
                    )
                    figures.setdefault(label, []).append(unavailability(cluster, topic, how))
                    bootstrap = cluster.bootstrap()
            figures["reassignment of one partition (MB/s)"] = [
                reassignment(cluster, args.reassign_mb)
            ]
        finally:
            cluster.kill_all()
    rf3 = statistics.median(figures["produce acks=all RF=3, defaults (rec/s)"])
    rf1 = statistics.median(figures["produce acks=all RF=1, defaults (rec/s)"])
    width = max(len(k) for k in figures)
    print(f"3 brokers on 127.0.0.1, {args.records:,} records of 100 B, {args.runs} run(s)")
    for name, values in figures.items():
        print(f"{name:<{width}}  {_summary(values)}")
    print(f"{'RF=3 / RF=1 produce with defaults':<{width}}  {rf3 / rf1:.2f}x")


if __name__ == "__main__":
    main()
