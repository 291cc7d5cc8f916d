"""What the Spark tests share: producing records whose offsets they know, and running a
streaming query to the end of what is there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer


@dataclass(frozen=True)
class Produced:
    key: bytes | None
    value: bytes
    partition: int
    offset: int
    timestamp_ms: int
    headers: list[tuple[str, bytes]] | None


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> list[Produced]:
    """Produce ``records`` (kwargs of Producer.produce) and return them with their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    done: list[Produced] = []
    errors: list[Any] = []

    def delivered(err: Any, msg: Any, headers: list[tuple[str, bytes]] | None) -> None:
        if err is not None:
            errors.append(err)
            return
        partition, offset, ts = msg.partition(), msg.offset(), msg.timestamp()[1]
        done.append(Produced(msg.key(), msg.value(), partition, offset, ts, headers))

    for record in records:
        headers = record.get("headers")
        producer.produce(
            topic, on_delivery=lambda err, msg, h=headers: delivered(err, msg, h), **record
        )
    assert producer.flush(30) == 0
    if errors:
        raise KafkaException(errors[0])
    return done


def read_stream(spark: Any, options: dict[str, str], checkpoint: Path) -> list[Any]:
    """Run a streaming query with Trigger.AvailableNow from ``checkpoint``; return its rows."""
    rows: list[Any] = []
    df = spark.readStream.format("strom").options(**options).load()
    query = (
        df.writeStream.foreachBatch(lambda batch, _id: rows.extend(batch.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()
    assert not query.isActive, "the AvailableNow query did not finish"
    return rows
