"""A group consumer in a child process, for tests that kill group members.

``python group_consumer.py CLIENT BOOTSTRAP GROUP TOPIC [ASSIGNOR]`` subscribes with
confluent-kafka, kafka-python or aiokafka and writes one JSON line per event to
stdout: ``{"assigned": [partitions]}`` after each rebalance, ``{"records":
[[partition, offset], ...]}`` once a polled batch is processed, then commits
synchronously (commits after processing: at-least-once) and writes ``{"committed":
[[partition, next offset], ...]}`` for the batch's partitions, or ``{"commit_failed":
error}``. ASSIGNOR "kip848"
makes confluent-kafka use group.protocol=consumer. It runs until killed or
until stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading

# A killed member is noticed after this; a live one a loaded machine leaves without CPU
# for a second or two keeps its place (its failed commits would fail the tests).
SESSION_TIMEOUT_MS = 4000
HEARTBEAT_MS = 300
stop = threading.Event()


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def committed(records: list[list[int]]) -> None:
    """Tell the test where a successful commit left the batch's partitions."""
    ends: dict[int, int] = {}
    for partition, offset in records:
        ends[partition] = max(ends.get(partition, -1), offset + 1)
    emit({"committed": sorted(ends.items())})


def watch_stdin() -> None:
    sys.stdin.read()
    stop.set()


def run_confluent(bootstrap: str, group: str, topic: str, assignor: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if assignor == "kip848":  # the broker assigns; timeouts are the broker's
        config["group.protocol"] = "consumer"
    else:
        config["session.timeout.ms"] = SESSION_TIMEOUT_MS
        config["heartbeat.interval.ms"] = HEARTBEAT_MS
        config["partition.assignment.strategy"] = assignor
    consumer = Consumer(config)

    owned: set[int] = set()

    def assigned(c, partitions) -> None:
        owned.update(tp.partition for tp in partitions)
        emit({"assigned": sorted(owned)})

    def revoked(c, partitions) -> None:
        owned.difference_update(tp.partition for tp in partitions)
        emit({"assigned": sorted(owned)})

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    while not stop.is_set():
        messages = consumer.consume(200, 0.2)
        records = [[m.partition(), m.offset()] for m in messages if not m.error()]
        if records:
            emit({"records": records})
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                emit({"commit_failed": str(exc)})
            else:
                committed(records)
    consumer.close()


def run_kafka_python(bootstrap: str, group: str, topic: str, assignor: str) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked) -> None:
            pass

        def on_partitions_assigned(self, assigned) -> None:
            emit({"assigned": sorted(tp.partition for tp in assigned)})

    consumer.subscribe([topic], listener=Listener())
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=200)
        records = [[m.partition, m.offset] for batch in batches.values() for m in batch]
        if records:
            emit({"records": records})
            try:
                consumer.commit()
            except KafkaError as exc:
                emit({"commit_failed": str(exc)})
            else:
                committed(records)
    consumer.close()


def run_aiokafka(bootstrap: str, group: str, topic: str, assignor: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked) -> None:
            pass

        async def on_partitions_assigned(self, assigned) -> None:
            emit({"assigned": sorted(tp.partition for tp in assigned)})

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        consumer.subscribe([topic], listener=Listener())
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                records = [[m.partition, m.offset] for batch in batches.values() for m in batch]
                if records:
                    emit({"records": records})
                    try:
                        await consumer.commit()
                    except KafkaError as exc:
                        emit({"commit_failed": str(exc)})
                    else:
                        committed(records)
        finally:
            await consumer.stop()

    asyncio.run(main())


CLIENTS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}

if __name__ == "__main__":
    client, bootstrap, group, topic = sys.argv[1:5]
    assignor = sys.argv[5] if len(sys.argv) > 5 else "range"
    # The clients' own log goes to stderr; a failing test prints its tail.
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(threadName)s %(name)s %(message)s",
    )
    threading.Thread(target=watch_stdin, daemon=True).start()
    CLIENTS[client](bootstrap, group, topic, assignor)
