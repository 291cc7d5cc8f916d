"""Confluent's ``io.confluent.connect.avro.AvroConverter``: Connect data to and from Avro
in Confluent's wire format (a zero byte, the schema's id in four bytes, the Avro binary),
the schema kept in a schema registry (Strom's or Confluent's).

Writing: the Connect schema becomes an Avro schema as Confluent's AvroData makes it
(``avro_schema``): INT8/INT16 an ``int`` marked ``"connect.type"``, INT64 ``long``,
FLOAT32/64 ``float``/``double``, a struct a ``record`` named by the schema's name (else
``io.confluent.connect.avro.ConnectDefault``), an optional schema a union with ``null``
first (default null), a map with string keys a ``map``, any other map an array of
``MapEntry`` records, Decimal ``bytes`` with the ``decimal`` logical type, Date ``int``
``date``, Time ``int`` ``time-millis``, Timestamp ``long`` ``timestamp-millis``, Connect's
name, version, doc and parameters as ``connect.*`` properties. It is registered under the
subject ``<topic>-value`` (``-key`` for keys; TopicNameStrategy) when
``auto.register.schemas`` (true), else the subject's latest version is used.

Reading: the schema the id names (fetched once, cached) gives the Connect schema
(``connect_schema``): records written by any Avro serialiser read as structs, a union of
null and one type as that type made optional, enums as strings, fixed as bytes, the
logical types as Connect's, the ``connect.*`` properties back. Values of the logical
types are Connect's numbers (days, ms since midnight, ms since the epoch) and Decimal.

The registry is reached with confluent-kafka's client, as Strom's Spark and ksql formats
reach it. Settings: ``schema.registry.url`` (required), ``basic.auth.credentials.source`` with
``basic.auth.user.info`` (USER_INFO) or ``schema.registry.basic.auth.user.info``
(SASL_INHERIT is not served), ``auto.register.schemas``, ``use.latest.version``,
``schema.registry.ssl.truststore.location`` (PEM). Does not own the registry.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
import threading
import urllib.parse
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import fastavro
import httpx2
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from strom.connect import config_def as cd
from strom.connect.converters import Converter
from strom.connect.data import (
    ARRAY,
    BOOLEAN,
    BYTES,
    DATE,
    DECIMAL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    MAP,
    STRING,
    STRUCT,
    TIME,
    TIMESTAMP,
    DataException,
    Field,
    Schema,
    Struct,
)

MAGIC = 0
WRITER_CACHE_SIZE = 1000
DEFAULT_PRECISION = 64
_HEADER = struct.Struct(">bI")
NAMESPACE = "io.confluent.connect.avro"
DEFAULT_NAME = "ConnectDefault"
_PRIMITIVE_AVRO = {
    INT8: "int",
    INT16: "int",
    INT32: "int",
    INT64: "long",
    FLOAT32: "float",
    FLOAT64: "double",
    BOOLEAN: "boolean",
    STRING: "string",
    BYTES: "bytes",
}
_AVRO_PRIMITIVE = {
    "int": INT32,
    "long": INT64,
    "float": FLOAT32,
    "double": FLOAT64,
    "boolean": BOOLEAN,
    "string": STRING,
    "bytes": BYTES,
}
_LOGICAL = {
    DATE: ("int", "date"),
    TIME: ("int", "time-millis"),
    TIMESTAMP: ("long", "timestamp-millis"),
}
_EPOCH = datetime.date(1970, 1, 1)
T = TypeVar("T")


class RegistryError(DataException):
    """The schema registry refused, or could not be reached: one line."""


class RegistryClient:
    """The converter's calls to a schema registry through confluent-kafka's client (as
    ``strom.spark.avro`` and ksql's formats make them), its errors made one line, and
    each schema parsed once."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.url = str(settings["url"])
        self.client = SchemaRegistryClient(settings)
        self.by_id: dict[int, Any] = {}
        self.lock = threading.Lock()

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except SchemaRegistryError as exc:
            raise RegistryError(
                f"schema registry {what}: {exc.http_status_code} {exc.error_message}"
            ) from None
        except (httpx2.HTTPError, OSError) as exc:
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {exc}") from None

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registered if new (the client caches)."""
        return self._call(
            f"register under {subject}",
            lambda: self.client.register_schema(subject, RegistrySchema(schema, "AVRO")),
        )

    def latest(self, subject: str) -> tuple[int, str]:
        found = self._call(f"latest of {subject}", lambda: self.client.get_latest_version(subject))
        if found.schema_id is None or found.schema.schema_str is None:
            raise RegistryError(f"schema registry: the latest of {subject} has no schema")
        return found.schema_id, found.schema.schema_str

    def parsed(self, schema_id: int) -> Any:
        with self.lock:
            known = self.by_id.get(schema_id)
        if known is not None:
            return known
        text = self._call(f"schema {schema_id}", lambda: self.client.get_schema(schema_id))
        parsed = fastavro.parse_schema(json.loads(text.schema_str or "null"))
        with self.lock:
            self.by_id[schema_id] = parsed
        return parsed


# Connect schemas to Avro ------------------------------------------------------------------


def avro_schema(schema: Schema) -> Any:
    """The Avro schema (JSON form) of a Connect schema, as Confluent's AvroData makes it."""
    return _to_avro(schema, [0])


def _connect_props(schema: Schema) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if schema.name:
        props["connect.name"] = schema.name
    if schema.version is not None:
        props["connect.version"] = schema.version
    if schema.doc:
        props["connect.doc"] = schema.doc
    if schema.parameters:
        props["connect.parameters"] = dict(schema.parameters)
    return props


def _to_avro(schema: Schema, unnamed: list[int]) -> Any:
    avro = _to_avro_required(schema, unnamed)
    return ["null", avro] if schema.optional else avro


def _to_avro_required(schema: Schema, unnamed: list[int]) -> Any:
    if schema.name == DECIMAL:
        scale = int((schema.parameters or {}).get("scale", "0"))
        precision = int(
            (schema.parameters or {}).get("connect.decimal.precision", DEFAULT_PRECISION)
        )
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": precision,
            "scale": scale,
            **_connect_props(schema),
        }
    if schema.name in _LOGICAL:
        base, logical = _LOGICAL[schema.name]
        return {"type": base, "logicalType": logical, **_connect_props(schema)}
    if schema.type in _PRIMITIVE_AVRO:
        avro: dict[str, Any] = {"type": _PRIMITIVE_AVRO[schema.type]}
        if schema.type in (INT8, INT16):
            avro["connect.type"] = schema.type
        props = _connect_props(schema)
        return {**avro, **props} if (props or schema.type in (INT8, INT16)) else avro["type"]
    if schema.type == ARRAY:
        assert schema.value_schema is not None
        return {"type": "array", "items": _to_avro(schema.value_schema, unnamed)}
    if schema.type == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if schema.key_schema.type == STRING and not schema.key_schema.optional:
            return {"type": "map", "values": _to_avro(schema.value_schema, unnamed)}
        entry = {
            "type": "record",
            "name": "MapEntry",
            "namespace": NAMESPACE,
            "fields": [
                {"name": "key", "type": _to_avro(schema.key_schema, unnamed)},
                {"name": "value", "type": _to_avro(schema.value_schema, unnamed)},
            ],
        }
        return {"type": "array", "items": entry}
    if schema.type == STRUCT:
        if schema.name:
            namespace, _, name = schema.name.rpartition(".")
        else:
            unnamed[0] += 1
            namespace = NAMESPACE
            name = DEFAULT_NAME if unnamed[0] == 1 else f"{DEFAULT_NAME}{unnamed[0]}"
        fields = []
        for field in schema.fields:
            entry_schema: dict[str, Any] = {
                "name": field.name,
                "type": _to_avro(field.schema, unnamed),
            }
            if field.schema.optional:
                entry_schema["default"] = None
            elif field.schema.default is not None:
                entry_schema["default"] = field.schema.default
            fields.append(entry_schema)
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            record["namespace"] = namespace
        props = _connect_props(schema)
        props.pop("connect.name", None)  # the record's own name says it
        return {**record, **props}
    raise DataException(f"Unknown schema type: {schema.type}")


# Avro to Connect schemas ------------------------------------------------------------------


def connect_schema(avro: Any) -> Schema:
    """The Connect schema of a parsed Avro schema (fastavro's form)."""
    return _to_connect(avro, optional=False)


def _to_connect(avro: Any, optional: bool) -> Schema:
    if isinstance(avro, list):
        members = [m for m in avro if m != "null"]
        if len(members) == 1:
            return _to_connect(members[0], optional=len(members) < len(avro) or optional)
        raise DataException("Avro unions of several types are not served as Connect data")
    if isinstance(avro, str):
        if avro in _AVRO_PRIMITIVE:
            return Schema(_AVRO_PRIMITIVE[avro], optional=optional)
        raise DataException(f"Avro type {avro} is not served as Connect data")
    kind = avro["type"]
    version = avro.get("connect.version")
    doc = avro.get("connect.doc") or avro.get("doc")
    parameters = avro.get("connect.parameters")
    logical = avro.get("logicalType")
    if logical == "decimal":
        scale = int(avro.get("scale", 0))
        params = dict(parameters or {}) | {"scale": str(scale)}
        precision = int(avro.get("precision", DEFAULT_PRECISION))
        if precision != DEFAULT_PRECISION:  # a Connect Decimal says none: 64 is Avro's for it
            params.setdefault("connect.decimal.precision", str(precision))
        return Schema(BYTES, optional, name=DECIMAL, version=1, parameters=params)
    for connect_name, (base, avro_logical) in _LOGICAL.items():
        if logical == avro_logical and kind == base:
            return Schema(_AVRO_PRIMITIVE[base], optional, name=connect_name, version=1)
    if kind in _AVRO_PRIMITIVE:
        connect_type = avro.get("connect.type") or _AVRO_PRIMITIVE[kind]
        return Schema(
            connect_type,
            optional,
            name=avro.get("connect.name"),
            version=version,
            doc=doc,
            parameters=parameters,
        )
    if kind == "enum":
        return Schema(STRING, optional, name=avro.get("name"), doc=doc)
    if kind == "fixed":
        return Schema(BYTES, optional, name=avro.get("name"))
    if kind == "array":
        items = avro["items"]
        if isinstance(items, dict) and items.get("name") == f"{NAMESPACE}.MapEntry":
            entry = {f["name"]: f["type"] for f in items["fields"]}
            return Schema.map(
                _to_connect(entry["key"], False), _to_connect(entry["value"], False), optional
            )
        return Schema.array(_to_connect(items, False), optional)
    if kind == "map":
        return Schema.map(Schema(STRING), _to_connect(avro["values"], False), optional)
    if kind == "record":
        fields = tuple(
            Field(f["name"], index, _to_connect(f["type"], False))
            for index, f in enumerate(avro["fields"])
        )
        name = avro.get("name")
        if name and name.startswith(f"{NAMESPACE}.{DEFAULT_NAME}"):
            name = None
        return Schema(
            STRUCT,
            optional,
            name=name,
            version=version,
            doc=doc,
            parameters=parameters,
            fields=fields,
        )
    raise DataException(f"Avro type {kind} is not served as Connect data")


# Values -----------------------------------------------------------------------------------


def _to_avro_value(schema: Schema, value: Any) -> Any:
    if value is None:
        if not schema.optional and schema.default is None:
            raise DataException("Conversion error: null value for field that is required")
        return schema.default if not schema.optional else None
    if schema.name == DECIMAL:
        if not isinstance(value, Decimal):
            value = Decimal(str(value))
        return value
    if schema.name == DATE:
        return _EPOCH + datetime.timedelta(days=int(value)) if isinstance(value, int) else value
    if schema.type == STRUCT:
        if not isinstance(value, Struct):
            raise DataException(f"Expected a Struct for {schema.name or 'a struct'}")
        return {f.name: _to_avro_value(f.schema, value.values.get(f.name)) for f in schema.fields}
    if schema.type == ARRAY:
        assert schema.value_schema is not None
        return [_to_avro_value(schema.value_schema, v) for v in value]
    if schema.type == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if schema.key_schema.type == STRING and not schema.key_schema.optional:
            return {k: _to_avro_value(schema.value_schema, v) for k, v in value.items()}
        return [
            {
                "key": _to_avro_value(schema.key_schema, k),
                "value": _to_avro_value(schema.value_schema, v),
            }
            for k, v in value.items()
        ]
    return value


def _to_connect_value(schema: Schema, value: Any) -> Any:
    if value is None:
        return None
    if schema.name == DECIMAL:
        return value if isinstance(value, Decimal) else Decimal(value)
    if schema.name == DATE and isinstance(value, datetime.date):
        return (value - _EPOCH).days
    if schema.name == TIME and isinstance(value, datetime.time):
        return (value.hour * 3600 + value.minute * 60 + value.second) * 1000 + (
            value.microsecond // 1000
        )
    if schema.name == TIMESTAMP and isinstance(value, datetime.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return int(aware.timestamp() * 1000)
    if schema.type == STRUCT:
        return Struct(
            schema, {f.name: _to_connect_value(f.schema, value.get(f.name)) for f in schema.fields}
        )
    if schema.type == ARRAY:
        assert schema.value_schema is not None
        return [_to_connect_value(schema.value_schema, v) for v in value]
    if schema.type == MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if isinstance(value, list):
            return {
                _to_connect_value(schema.key_schema, e["key"]): _to_connect_value(
                    schema.value_schema, e["value"]
                )
                for e in value
            }
        return {k: _to_connect_value(schema.value_schema, v) for k, v in value.items()}
    if schema.type == STRING and isinstance(value, str):
        return value
    return value


def _credentials_in(url: str) -> tuple[str, str | None]:
    """The URL without its ``user:password@``, and those credentials (None if none)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.username:
        return url, None
    host = parts.netloc.rsplit("@", 1)[1]
    credentials = (
        f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    )
    return parts._replace(netloc=host).geturl(), credentials


class AvroConverter(Converter):
    CONFIG_DEF = Converter.CONFIG_DEF.merged(
        cd.ConfigDef(
            [
                cd.ConfigKey(
                    "schema.registry.url",
                    cd.STRING,
                    cd.REQUIRED,
                    cd.HIGH,
                    "Comma-separated list of URLs for schema registry instances.",
                ),
                cd.ConfigKey(
                    "auto.register.schemas",
                    cd.BOOLEAN,
                    True,
                    cd.MEDIUM,
                    "Specify if the Serializer should attempt to register the Schema.",
                ),
                cd.ConfigKey(
                    "use.latest.version",
                    cd.BOOLEAN,
                    False,
                    cd.LOW,
                    "Use the latest version of the subject's schema to write.",
                ),
                cd.ConfigKey(
                    "basic.auth.credentials.source",
                    cd.STRING,
                    "URL",
                    cd.MEDIUM,
                    "How to find the registry's credentials: USER_INFO or URL.",
                    check=cd.one_of("URL", "USER_INFO", case_sensitive=False),
                ),
                cd.ConfigKey(
                    "basic.auth.user.info",
                    cd.PASSWORD,
                    None,
                    cd.MEDIUM,
                    "The registry's user and password, USER:PASSWORD.",
                ),
                cd.ConfigKey(
                    "schema.registry.basic.auth.user.info",
                    cd.PASSWORD,
                    None,
                    cd.MEDIUM,
                    "The registry's user and password, USER:PASSWORD.",
                ),
                cd.ConfigKey(
                    "schema.registry.ssl.truststore.location",
                    cd.STRING,
                    None,
                    cd.MEDIUM,
                    "The PEM file of the CAs that sign the registry's certificate.",
                ),
            ]
        )
    )

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        url = str(self.settings["schema.registry.url"])
        user_info = (
            self.settings["basic.auth.user.info"]
            or self.settings["schema.registry.basic.auth.user.info"]
        )
        url, in_url = _credentials_in(url)
        if self.settings["basic.auth.credentials.source"].upper() == "URL":
            user_info = in_url or user_info
        settings: dict[str, Any] = {"url": url}
        if user_info:
            settings["basic.auth.user.info"] = str(user_info)
        truststore = self.settings["schema.registry.ssl.truststore.location"]
        if truststore:
            settings["ssl.ca.location"] = truststore
        self.registry = RegistryClient(settings)
        self.auto_register = bool(self.settings["auto.register.schemas"])
        self.use_latest = bool(self.settings["use.latest.version"])
        self.written: dict[tuple[str, int], tuple[Schema, int, Any]] = {}

    def _subject(self, topic: str) -> str:
        return f"{topic}-{'key' if self.is_key else 'value'}"

    def _writer(self, topic: str, schema: Schema) -> tuple[int, Any]:
        """The schema id and parsed Avro schema to write ``schema`` to ``topic`` with,
        cached by the schema object (a connector reuses its schemas)."""
        known = self.written.get((topic, id(schema)))
        if known is not None and known[0] is schema:
            return known[1], known[2]
        if self.use_latest or not self.auto_register:
            schema_id, text = self.registry.latest(self._subject(topic))
            avro = json.loads(text)
        else:
            avro = avro_schema(schema)
            schema_id = self.registry.register(self._subject(topic), json.dumps(avro))
        parsed = fastavro.parse_schema(avro)
        if len(self.written) >= WRITER_CACHE_SIZE:
            self.written.clear()
        self.written[(topic, id(schema))] = (schema, schema_id, parsed)
        return schema_id, parsed

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None and (schema is None or schema.optional):
            return None
        if schema is None:
            raise DataException("AvroConverter needs a schema: schemaless data cannot be written")
        schema_id, parsed = self._writer(topic, schema)
        out = io.BytesIO()
        out.write(_HEADER.pack(MAGIC, schema_id))
        try:
            fastavro.schemaless_writer(out, parsed, _to_avro_value(schema, value))
        except (ValueError, TypeError, AttributeError) as exc:
            raise DataException(
                f"Failed to serialize Avro data from topic {topic}: {exc}"
            ) from None
        return out.getvalue()

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if data is None:
            return None, None
        if len(data) < _HEADER.size or data[0] != MAGIC:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to Avro: Unknown magic byte!"
            )
        _, schema_id = _HEADER.unpack_from(data)
        parsed = self.registry.parsed(schema_id)
        try:
            value = fastavro.schemaless_reader(io.BytesIO(data[_HEADER.size :]), parsed, None)
        except (ValueError, EOFError, IndexError) as exc:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to Avro: {exc}"
            ) from None
        schema = connect_schema(parsed)
        return schema, _to_connect_value(schema, value)
