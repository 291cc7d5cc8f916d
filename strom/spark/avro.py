"""Avro in Confluent's wire format in Spark columns, with a schema registry: the
``from_avro``/``to_avro`` of Spark's Avro package for records that carry a magic byte
and a schema id (what confluent-kafka's ``AvroSerializer`` and Confluent's REST proxy
write).

    from strom.spark.avro import from_confluent_avro, to_confluent_avro
    orders = df.select(from_confluent_avro("value", registry_url, subject="orders-value")
                       .alias("order")).select("order.*")
    out = orders.select(to_confluent_avro(F.struct("*"), registry_url, "totals-value")
                        .alias("value"))

Decoding: the reader schema (a subject's latest version, or a schema id) is fetched on
the driver and gives the column's Spark type; each record is read with the schema its
own id names (fetched once per worker and cached), resolved to the reader schema by
Avro's rules, so records written with older compatible schemas decode too. A value
that is not in the wire format fails the task (``mode="FAILFAST"``, as Spark's
``from_avro``) or becomes null (``"PERMISSIVE"``). Encoding: the schema (given, then
registered under the subject as a serialiser would, or the subject's latest) is fixed
on the driver; each struct is written with it behind its id.

Types map as Spark's Avro package maps them: records to structs, arrays, maps (string
keys), enums to strings, fixed and bytes to binary, a union of null and one type to
that type made nullable, ``date``, ``timestamp-millis``/``-micros`` and ``decimal``
logical types to DateType, TimestampType and DecimalType. A union of several non-null
types is refused when the column is planned (Spark would give a struct of members).

Does not own reading or writing Kafka (the ``strom`` data source).
"""

from __future__ import annotations

import datetime
import functools
import io
import json
import struct
import threading
from typing import Any

MAGIC = 0
_HEADER = struct.Struct(">bI")
MODES = ("FAILFAST", "PERMISSIVE")

# One registry client and parsed schemas per worker process, shared by its tasks.
_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_schemas: dict[tuple[str, int], Any] = {}
_lock = threading.Lock()


class AvroColumnError(ValueError):
    """A schema Strom cannot map to a Spark type, or an option out of range."""


def _client(url: str, config: dict[str, str] | None) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = (url, tuple(sorted((config or {}).items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = SchemaRegistryClient({**(config or {}), "url": url})
        return client


def _parsed(url: str, config: dict[str, str] | None, schema_id: int) -> Any:
    import fastavro

    with _lock:
        found = _schemas.get((url, schema_id))
    if found is None:
        text = _client(url, config).get_schema(schema_id).schema_str
        found = fastavro.parse_schema(json.loads(text))
        with _lock:
            _schemas[(url, schema_id)] = found
    return found


def spark_type(schema: Any, named: dict[str, Any] | None = None) -> Any:
    """The Spark type of an Avro schema (parsed JSON: a name, a dict or a union list)."""
    from pyspark.sql import types as T

    named = {} if named is None else named
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise AvroColumnError(
                f"a union of several non-null types ({schema}) has no Spark type here"
            )
        return spark_type(branches[0], named)
    if isinstance(schema, str):
        primitive = {
            "null": T.NullType(),
            "boolean": T.BooleanType(),
            "int": T.IntegerType(),
            "long": T.LongType(),
            "float": T.FloatType(),
            "double": T.DoubleType(),
            "bytes": T.BinaryType(),
            "string": T.StringType(),
        }
        if schema in primitive:
            return primitive[schema]
        if schema in named:
            return named[schema]
        raise AvroColumnError(f"unknown Avro type {schema!r}")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "date" and kind == "int":
        return T.DateType()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return T.TimestampType()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        fields = []
        for field in schema["fields"]:
            field_type = field["type"]
            nullable = isinstance(field_type, list) and "null" in field_type
            fields.append(T.StructField(field["name"], spark_type(field_type, named), nullable))
        result = T.StructType(fields)
        named[schema["name"]] = result
        if schema.get("namespace"):
            named[f"{schema['namespace']}.{schema['name']}"] = result
        return result
    if kind == "enum":
        named[schema["name"]] = T.StringType()
        return T.StringType()
    if kind == "fixed":
        named[schema["name"]] = T.BinaryType()
        return T.BinaryType()
    if kind == "array":
        items = schema["items"]
        contains_null = isinstance(items, list) and "null" in items
        return T.ArrayType(spark_type(items, named), contains_null)
    if kind == "map":
        values = schema["values"]
        contains_null = isinstance(values, list) and "null" in values
        return T.MapType(T.StringType(), spark_type(values, named), contains_null)
    return spark_type(kind, named)


def _aware(value: Any) -> Any:
    """``value`` with its naive datetimes (Spark hands timestamps to Python in local
    time) made aware, so that Avro writes the instant Spark means."""
    if isinstance(value, datetime.datetime):
        return value.astimezone() if value.tzinfo is None else value
    if isinstance(value, dict):
        return {k: _aware(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_aware(v) for v in value]
    return value


def _reader_schema(
    url: str, config: dict[str, str] | None, subject: str | None, schema_id: int | None
) -> tuple[int, str]:
    if (subject is None) == (schema_id is None):
        raise AvroColumnError("give one of subject= (its latest version) or schema_id=")
    client = _client(url, config)
    if schema_id is not None:
        return schema_id, client.get_schema(schema_id).schema_str
    latest = client.get_latest_version(subject)
    return latest.schema_id, latest.schema.schema_str


def _column(data: Any) -> Any:
    from pyspark.sql import functions as F

    return F.col(data) if isinstance(data, str) else data


def from_confluent_avro(
    data: Any,
    registry_url: str,
    subject: str | None = None,
    schema_id: int | None = None,
    mode: str = "FAILFAST",
    registry_config: dict[str, str] | None = None,
) -> Any:
    """A column of the records in ``data`` (a binary column or its name), decoded.

    ``registry_config``: confluent-kafka SchemaRegistryClient settings beside the URL
    (``basic.auth.user.info``, ``ssl.ca.location`` ...)."""
    from pyspark.sql.functions import udf

    if mode not in MODES:
        raise AvroColumnError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    reader_id, reader_text = _reader_schema(registry_url, registry_config, subject, schema_id)
    reader_json = json.loads(reader_text)
    result_type = spark_type(reader_json)
    decode = functools.partial(
        _decode, registry_url, registry_config, reader_id, mode == "FAILFAST"
    )
    return udf(decode, result_type, useArrow=False)(_column(data))


def to_confluent_avro(
    data: Any,
    registry_url: str,
    subject: str,
    schema: str | None = None,
    registry_config: dict[str, str] | None = None,
) -> Any:
    """A binary column of ``data`` (a struct column or its name) in Confluent's wire
    format: written with ``schema`` (Avro JSON text, registered under ``subject`` as a
    serialiser registers it), or with the subject's latest schema when none is given."""
    from confluent_kafka.schema_registry import Schema
    from pyspark.sql import types as T
    from pyspark.sql.functions import udf

    client = _client(registry_url, registry_config)
    if schema is None:
        latest = client.get_latest_version(subject)
        schema_id, schema = latest.schema_id, latest.schema.schema_str
    else:
        schema_id = client.register_schema(subject, Schema(schema, "AVRO"))
    spark_type(json.loads(schema))  # a schema with no Spark type is refused here
    encode = functools.partial(
        _encode, registry_url, registry_config, schema_id, "timestamp-m" in schema
    )
    return udf(encode, T.BinaryType(), useArrow=False)(_column(data))


# What the columns run on the workers: module functions, so that Spark ships a reference
# to them (and the worker's caches above), not copies.


def _decode(
    url: str, config: dict[str, str] | None, reader_id: int, failfast: bool, value: bytes | None
) -> Any:
    import fastavro

    if value is None:
        return None
    if len(value) < _HEADER.size or value[0] != MAGIC:
        if failfast:
            raise ValueError(
                "a value not in Confluent's wire format (magic byte 0, schema id); "
                "use mode='PERMISSIVE' to read it as null"
            )
        return None
    _, writer_id = _HEADER.unpack_from(value)
    reader = _parsed(url, config, reader_id)
    writer = _parsed(url, config, writer_id)
    try:
        return fastavro.schemaless_reader(io.BytesIO(value[_HEADER.size :]), writer, reader)
    except Exception:
        if failfast:
            raise
        return None


def _encode(
    url: str, config: dict[str, str] | None, schema_id: int, has_timestamps: bool, value: Any
) -> bytes | None:
    import fastavro

    if value is None:
        return None
    writer = _parsed(url, config, schema_id)
    record = value.asDict(recursive=True) if hasattr(value, "asDict") else value
    if has_timestamps:
        record = _aware(record)
    out = io.BytesIO()
    out.write(_HEADER.pack(MAGIC, schema_id))
    fastavro.schemaless_writer(out, writer, record)
    return out.getvalue()
