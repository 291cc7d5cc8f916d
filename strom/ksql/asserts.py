"""ASSERT TOPIC and ASSERT SCHEMA: wait, up to a timeout, until a topic or a schema is
there (or, with NOT EXISTS, gone), as ksqlDB's server does for migration scripts.

The check is tried at once and then every 100 ms until the statement's TIMEOUT (or the
server's ``ksql.assert.topic.default.timeout.ms`` / ``ksql.assert.schema.default.
timeout.ms``, 1 s by default) has passed; the last check's failure is the answer:
``AssertionFailed``, which the server gives as ksqlDB's 417 error. A topic asserted to
exist is also checked against the PARTITIONS and REPLICAS its WITH clause names.

Owns the checks and their wording; the callers own the clients (an admin client, the
registry's) and the HTTP answer. Blocking: call from a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from strom.ksql import statements as st
from strom.ksql.kafka_calls import TIMEOUT_S

RETRY_MS = 100
# the registry's answers that mean "no such schema" and "no such subject"
_NOT_FOUND = (40403, 40401)


class AssertionFailed(Exception):
    """The assertion did not hold within its timeout; ``str()`` is ksqlDB's reason."""


def timeout_ms(statement: st.AssertTopic | st.AssertSchema, default_ms: int) -> int:
    return statement.timeout.milliseconds if statement.timeout is not None else default_ms


def retried(check: Callable[[], None], timeout: int) -> None:
    """``check`` until it passes: tried once, then again every 100 ms for ``timeout``
    milliseconds; its last ``AssertionFailed`` if it never does."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            check()
            return
        except AssertionFailed:
            if time.monotonic() + RETRY_MS / 1000 > deadline:
                raise
        time.sleep(RETRY_MS / 1000)


def check_topic(admin: Any, statement: st.AssertTopic) -> None:
    """One check of ASSERT [NOT EXISTS] TOPIC against the cluster (``admin``:
    confluent-kafka's AdminClient)."""
    topic = statement.topic
    try:
        found = admin.list_topics(timeout=TIMEOUT_S).topics.get(topic)
    except Exception as exc:  # the client's failure, whatever its kind
        raise AssertionFailed(f"Cannot check topic existence: {exc}") from None
    exists = found is not None and found.error is None
    if not statement.exists:
        if exists:
            raise AssertionFailed(f"Topic {topic} exists")
        return
    if not exists:
        raise AssertionFailed(f"Topic {topic} does not exist")
    partitions = found.partitions
    replicas = len(partitions[0].replicas) if partitions else 0
    errors = []
    for name, expected in statement.properties.items():
        actual = {"PARTITIONS": len(partitions), "REPLICAS": replicas}.get(name.upper())
        if actual is None:
            errors.append(f"Cannot assert unknown topic property: {name}")
        elif not (type(expected) is int and expected == actual):
            errors.append(
                f"Mismatched configuration for topic {topic}: For config {name.lower()}, "
                f"expected {expected} got {actual}"
            )
    if errors:
        raise AssertionFailed("\n".join(errors))


def schema_id_of(statement: st.AssertSchema) -> int | None:
    """The statement's ID, which must be an integer; ``ValueError`` with ksqlDB's words."""
    if statement.subject is None and statement.schema_id is None:
        raise ValueError("ASSERT SCHEMA statements much include a subject name or an id")
    value = statement.schema_id
    if value is not None and type(value) is not int:
        raise ValueError("ID must be an integer")
    return value


def check_schema(registry: Any, statement: st.AssertSchema) -> None:
    """One check of ASSERT [NOT EXISTS] SCHEMA against the schema registry
    (``registry``: confluent-kafka's SchemaRegistryClient)."""
    subject = statement.subject
    schema_id = schema_id_of(statement)
    try:
        if subject is not None and schema_id is not None:
            exists = subject in registry.get_subjects_by_schema_id(schema_id)
        elif schema_id is not None:
            registry.get_schema(schema_id)
            exists = True
        else:
            registry.get_versions(subject)
            exists = True
    except Exception as exc:  # the registry's answer, or its client's failure
        if getattr(exc, "error_code", None) not in _NOT_FOUND:
            raise AssertionFailed(f"Cannot check schema existence: {exc}") from None
        exists = False
    named = (f" subject name {subject}" if subject is not None else "") + (
        f" id {schema_id}" if schema_id is not None else ""
    )
    if statement.exists and not exists:
        raise AssertionFailed(f"Schema with{named} does not exist")
    if not statement.exists and exists:
        raise AssertionFailed(f"Schema with{named} exists")


def topic_entity(text: str, statement: st.AssertTopic) -> dict[str, Any]:
    return {
        "@type": "assert_topic",
        "statementText": text,
        "topicName": statement.topic,
        "exists": statement.exists,
        "warnings": [],
    }


def schema_entity(text: str, statement: st.AssertSchema) -> dict[str, Any]:
    return {
        "@type": "assert_schema",
        "statementText": text,
        "subject": statement.subject,
        "id": statement.schema_id,
        "exists": statement.exists,
        "warnings": [],
    }
