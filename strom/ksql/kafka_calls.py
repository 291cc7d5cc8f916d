"""The ksql server's blocking calls to the cluster, shared by the command topic and the
statements: creating a topic (one that exists meanwhile is fine), deleting one,
reading a topic's metadata without creating it, and producing one record and waiting
for its acknowledgement. A failure is ``KafkaCallError`` with the cluster's one-line
reason.

confluent-kafka blocks: call these from a worker thread. Does not own the clients.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30.0


class KafkaCallError(Exception):
    """The cluster refused or did not answer; ``str()`` is its reason."""


def _reason(exc: KafkaException) -> tuple[int | None, str]:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return error.code(), error.str()
    return None, str(exc)


def _wait(future: Any, tolerated: int) -> None:
    """The admin call's outcome; the error ``tolerated`` counts as done."""
    try:
        future.result()
    except KafkaException as exc:
        code, reason = _reason(exc)
        if code != tolerated:
            raise KafkaCallError(reason) from None


def create_topic(admin: AdminClient, topic: NewTopic) -> None:
    """Create ``topic``; one created meanwhile is fine."""
    futures = admin.create_topics([topic], operation_timeout=TIMEOUT_S)
    _wait(futures[topic.topic], KafkaError.TOPIC_ALREADY_EXISTS)


def delete_topic(admin: AdminClient, name: str) -> None:
    """Delete the topic; one already gone is fine."""
    futures = admin.delete_topics([name], operation_timeout=TIMEOUT_S)
    _wait(futures[name], KafkaError.UNKNOWN_TOPIC_OR_PART)


def topic_metadata(admin: AdminClient, name: str) -> Any:
    """The topic's metadata, None when there is none. All topics are asked for: a
    request naming the topic would let a broker auto-create it."""
    found = admin.list_topics(timeout=TIMEOUT_S).topics.get(name)
    return found if found is not None and found.error is None else None


def produce_and_wait(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    *,
    partition: int = -1,
    timestamp: int = 0,
) -> int:
    """Produce one record and wait for it; its offset. ``partition`` -1: the
    partitioner's choice; ``timestamp`` 0: the time of sending."""
    outcome: dict[str, Any] = {}

    def delivered(err: KafkaError | None, message: Any) -> None:
        outcome["error"] = err
        outcome["offset"] = message.offset() if err is None else None

    producer.produce(
        topic,
        value=value,
        key=key,
        partition=partition,
        timestamp=timestamp,
        on_delivery=delivered,
    )
    producer.flush(TIMEOUT_S)
    if "error" not in outcome:
        raise KafkaCallError(f"no acknowledgement from the cluster in {TIMEOUT_S:.0f} s")
    if outcome["error"] is not None:
        raise KafkaCallError(outcome["error"].str())
    return int(outcome["offset"])
