"""The processing log, as ksqlDB keeps it: the records a query could not read (and the
expressions it could not compute) written as JSON to the topic
``<ksql.service.id>ksql_processing_log``, read back as the stream KSQL_PROCESSING_LOG.

Owns the stream's declaration (its columns as ksqlDB's ``ProcessingLogMessageSchema``)
and the entries' JSON: ``{"level": "ERROR", "logger":
"processing.<query id>.KsqlTopic.Source.deserializer", "time": ms, "message": {"type":
0, "deserializationError": {"target", "errorMessage", "recordB64", "cause", "topic"},
...}}`` (type 0 a record that does not deserialize, 1 a row an expression failed on or whose
TIMESTAMP column gives no time).
The record's bytes are left out (``recordB64`` null), as ksqlDB leaves them out unless
``ksql.logging.processing.rows.include`` is true.

Does not own writing the entries (the queries' sinks and producers do).
"""

from __future__ import annotations

import json
import time
from typing import Any

STREAM_NAME = "KSQL_PROCESSING_LOG"
DESERIALIZATION_ERROR = 0
RECORD_PROCESSING_ERROR = 1


def topic_name(service_id: str) -> str:
    return f"{service_id}ksql_processing_log"


def create_statement(topic: str) -> str:
    """The CREATE STREAM that declares the log, as ksqlDB's server declares it."""
    return (
        f"CREATE STREAM {STREAM_NAME} (LOGGER STRING, LEVEL STRING, `TIME` BIGINT, "
        "MESSAGE STRUCT<`TYPE` INTEGER, DESERIALIZATIONERROR STRUCT<TARGET STRING, "
        "ERRORMESSAGE STRING, RECORDB64 STRING, CAUSE ARRAY<STRING>, `topic` STRING>, "
        "RECORDPROCESSINGERROR STRUCT<ERRORMESSAGE STRING, RECORD STRING, "
        "CAUSE ARRAY<STRING>>, PRODUCTIONERROR STRUCT<ERRORMESSAGE STRING>, "
        "SERIALIZATIONERROR STRUCT<TARGET STRING, ERRORMESSAGE STRING, RECORD STRING, "
        "CAUSE ARRAY<STRING>, `topic` STRING>>) "
        f"WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON')"
    )


def _entry(logger: str, message: dict[str, Any]) -> bytes:
    body = {
        "type": None,
        "deserializationError": None,
        "recordProcessingError": None,
        "productionError": None,
        "serializationError": None,
        "kafkaStreamsThreadError": None,
        **message,
    }
    return json.dumps(
        {"level": "ERROR", "logger": logger, "time": int(time.time() * 1000), "message": body}
    ).encode()


def deserialization_error(query_id: str, target: str, error: str, topic: str) -> bytes:
    return _entry(
        f"processing.{query_id}.KsqlTopic.Source.deserializer",
        {
            "type": DESERIALIZATION_ERROR,
            "deserializationError": {
                "target": target,
                "errorMessage": f"Failed to deserialize {target} from topic: {topic}. {error}",
                "recordB64": None,
                "cause": [error],
                "topic": topic,
            },
        },
    )


def timestamp_error(query_id: str, error: str) -> bytes:
    """A record whose TIMESTAMP column gives no time, as ksqlDB's
    LoggingTimestampExtractor logs it (whether or not the query then fails on it)."""
    return _entry(
        f"processing.{query_id}.KsqlTopic.Source",
        {
            "type": RECORD_PROCESSING_ERROR,
            "recordProcessingError": {
                "errorMessage": "Failed to extract timestamp from row",
                "record": None,
                "cause": [error],
            },
        },
    )


def processing_error(query_id: str, error: str) -> bytes:
    return _entry(
        f"processing.{query_id}.Project",
        {
            "type": RECORD_PROCESSING_ERROR,
            "recordProcessingError": {"errorMessage": error, "record": None, "cause": []},
        },
    )
