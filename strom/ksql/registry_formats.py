"""Rows in the schema registry's formats, AVRO, JSON_SR and PROTOBUF, for INSERT VALUES,
``/inserts-stream`` and query sinks: Confluent's wire format (a zero byte, the schema
id, the data) through confluent-kafka's serializers and the registry named by
``ksql.schema.registry.url``.

Owns the schema of a source's key or value as ksqlDB writes it: Avro, a record
``io.confluent.ksql.avro_schemas.KsqlDataSourceSchema`` of optional fields (a union with
null, default null; DECIMAL as bytes with the decimal logical type, DATE, TIME and
TIMESTAMP with theirs, a STRUCT as a nested record ``KsqlDataSourceSchema_<FIELD>``);
JSON_SR, an object of optional properties; PROTOBUF, the messages of
``strom.ksql.protobuf_rows`` (its file as a base64 descriptor, as confluent-kafka
registers it). A single key column is written alone, as is a single value column with
``WRAP_SINGLE_VALUE=false`` (not in PROTOBUF: a message always). The schema is
registered under ``<topic>-key`` / ``<topic>-value`` when a CREATE statement names the
source's columns, and for a persistent query's sink at its CREATE ... AS SELECT
(``register``, as ksqlDB's schema register injector does), else by the first record
written with it. A source created with KEY_SCHEMA_ID / VALUE_SCHEMA_ID has that schema
registered under its subject at CREATE, and its rows written with it
(``strom.ksql.schema_ids``).

A CREATE statement without value (or key) columns in AVRO, JSON_SR or PROTOBUF takes
them from the latest schema of ``<topic>-value`` (``<topic>-key``), or the schema its
KEY_SCHEMA_ID / VALUE_SCHEMA_ID names, as ksqlDB infers them: a record's, object's or
message's fields upper-cased as columns (an Avro schema an id names: its own names, as
ksqlDB's ORIGINAL_FIELD_NAME policy) (PROTOBUF: the only top-level message, or the
one ``*_SCHEMA_FULL_NAME`` names), a schema of another type as one column ``ROWVAL``
(``ROWKEY``), optional unions read as their type. A Protobuf record is read with its
writer's message (``protobuf_class``: the schema by id with the subjects it references,
``.proto`` text compiled by ``strom.services.protobuf_schemas``). Blocking (the
registry client): call from a worker thread.

Does not own the other formats (``strom.ksql.formats``).
"""

from __future__ import annotations

import base64
import decimal
import functools
import json
import threading
from collections.abc import Callable
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import protobuf_rows, schema_ids
from strom.ksql.metastore import Column, DataSource, KsqlStatementError

REGISTRY_WRITTEN = ("AVRO", "JSON_SR", "PROTOBUF")
INFERRED_FORMATS = ("AVRO", "JSON_SR", "PROTOBUF")  # columns read from the registry when not given
_NAMESPACE = "io.confluent.ksql.avro_schemas"
_RECORD = "KsqlDataSourceSchema"
_AVRO_PRIMITIVES = {
    "BOOLEAN": "boolean",
    "INTEGER": "int",
    "BIGINT": "long",
    "DOUBLE": "double",
    "STRING": "string",
    "BYTES": "bytes",
    "DATE": {"type": "int", "logicalType": "date"},
    "TIME": {"type": "int", "logicalType": "time-millis"},
    "TIMESTAMP": {"type": "long", "logicalType": "timestamp-millis"},
}
_JSON_PRIMITIVES = {
    "BOOLEAN": "boolean",
    "INTEGER": "integer",
    "BIGINT": "integer",
    "DOUBLE": "number",
    "STRING": "string",
    "BYTES": "string",
    "DATE": "integer",
    "TIME": "integer",
    "TIMESTAMP": "integer",
}


def _optional(schema: Any) -> list[Any]:
    return ["null", schema]


def avro_type(sql_type: ex.SqlType, record_name: str) -> Any:
    if isinstance(sql_type, ex.DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": sql_type.precision,
            "scale": sql_type.scale,
        }
    if isinstance(sql_type, ex.ArrayType):
        return {"type": "array", "items": _optional(avro_type(sql_type.element, record_name))}
    if isinstance(sql_type, ex.MapType):
        return {"type": "map", "values": _optional(avro_type(sql_type.value, record_name))}
    if isinstance(sql_type, ex.StructType):
        return avro_record(
            [Column(f.name, f.type) for f in sql_type.fields], record_name, nested=True
        )
    return _AVRO_PRIMITIVES[str(sql_type)]


def _avro_name(name: str) -> str:
    """A field's name as Avro takes it, or Avro's refusal in ksqlDB's words."""
    if not name:
        raise KsqlStatementError("Schema is not compatible with Avro: Empty name")
    if not (name[0].isalpha() or name[0] == "_"):
        raise KsqlStatementError(
            f"Schema is not compatible with Avro: Illegal initial character: {name}"
        )
    if not all(c.isalnum() or c in "_." for c in name[1:]):  # a dot: ksqlDB makes it "_"
        raise KsqlStatementError(
            f"Schema is not compatible with Avro: Illegal character in: {name}"
        )
    return name


def avro_record(
    columns: list[Column], name: str = _RECORD, nested: bool = False, namespace: str = _NAMESPACE
) -> Any:
    for column in columns:
        _avro_name(column.name)
    fields = [
        {
            "name": c.name,
            "type": _optional(avro_type(c.type, f"{name}_{c.name}")),
            "default": None,
        }
        for c in columns
    ]
    record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if not nested and namespace:
        record["namespace"] = namespace
    return record


def json_type(sql_type: ex.SqlType) -> dict[str, Any]:
    if isinstance(sql_type, ex.DecimalType):
        return {"type": "number"}
    if isinstance(sql_type, ex.ArrayType):
        return {"type": "array", "items": _json_optional(json_type(sql_type.element))}
    if isinstance(sql_type, ex.MapType):
        return {"type": "object", "additionalProperties": _json_optional(json_type(sql_type.value))}
    if isinstance(sql_type, ex.StructType):
        return json_object([Column(f.name, f.type) for f in sql_type.fields])
    return {"type": _JSON_PRIMITIVES[str(sql_type)]}


def _json_optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [{"type": "null"}, schema]}


def json_object(columns: list[Column]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {c.name: _json_optional(json_type(c.type)) for c in columns},
    }


def _json_ready(value: Any) -> Any:
    """A row's value as JSON Schema data: DECIMAL as a number, BYTES as base64."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    return value


class RegistryFormats:
    """The schema registry's side of the sources: confluent-kafka's serializers for
    their schemas, and the columns of a topic's latest schema; one registry client."""

    def __init__(self, url: str | None, client_settings: dict[str, str]) -> None:
        self._url = url
        self._settings = client_settings
        self._client: Any = None
        self._serializers: dict[tuple[str, str, str], Callable[[Any], bytes]] = {}
        self._readers: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._messages: dict[tuple[int, str | None], Any] = {}  # a given schema id's
        self._avro_schemas: dict[int, Any] = {}  # parsed, for reading (``avro_schema``)
        self._lock = threading.Lock()

    def _registry(self) -> Any:
        if self._url is None:
            raise KsqlStatementError(
                "Schema registry url is not set: the AVRO, PROTOBUF and JSON_SR formats need "
                "'ksql.schema.registry.url' in the server's properties"
            )
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            try:
                self._client = SchemaRegistryClient({"url": self._url, **self._settings})
            except ValueError as exc:  # a setting the client refuses
                raise KsqlStatementError(f"ksql.schema.registry settings: {exc}") from None
        return self._client

    def client(self) -> Any:
        """The registry's client (confluent-kafka's SchemaRegistryClient), made on first
        use; ``KsqlStatementError`` when the server has no registry."""
        return self._registry()

    def serialize(
        self, source: DataSource, field: str, columns: tuple[Column, ...], row: dict[str, Any]
    ) -> bytes | None:
        """``field`` ("key" or "value") of ``row`` in the source's registry format."""
        fmt = source.key_format if field == "key" else source.value_format
        if not columns:
            return None
        schema_id = given_schema_id(source, field)
        if schema_id is not None:
            return self._with_schema_id(source, field, fmt, columns, row, schema_id)
        alone = _written_alone(source, field, fmt, columns)
        if alone:
            data = row.get(columns[0].name)
            if data is None:
                return None
        else:
            data = {c.name: row.get(c.name) for c in columns}
        serializer = self._serializer(source, field, fmt, columns, alone)
        try:
            return serializer(data)
        except Exception as exc:  # the serializer's, the registry's or its client's error
            raise KsqlStatementError(f"Could not serialize the {field} as {fmt}: {exc}") from None

    def register(self, source: DataSource, generated: bool = True, if_absent: bool = False) -> None:
        """Register the schemas of a source as ksqlDB does at CREATE, under
        ``<topic>-key`` and ``<topic>-value``: the schema KEY_SCHEMA_ID / VALUE_SCHEMA_ID
        names (refused when the subject gives it another id); when ``generated`` (the
        statement named its columns, or a query's sink), the schema ksqlDB writes the
        columns with (so the first row reuses its id), unless ``if_absent`` (a CREATE
        STREAM or TABLE, not AS SELECT) and the subject has a schema already: ksqlDB's
        schema register injector leaves an existing subject to the source's reads."""
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        for field, fmt, columns in (
            ("key", source.key_format, source.key_columns),
            ("value", source.value_format, source.value_columns),
        ):
            if fmt not in REGISTRY_WRITTEN or not columns:
                continue
            subject = f"{source.topic}-{field}"
            schema_id = given_schema_id(source, field)
            if schema_id is not None:
                self._register_given(source.topic, subject, field, schema_id)
                continue
            if not generated:
                continue
            if fmt == "PROTOBUF":
                schema_text = _row_messages(columns, _nullable(source, field)).schema_text()
            else:
                alone = _written_alone(source, field, fmt, columns)
                schema_text = _schema_text(fmt, columns, alone, _full_name(source, field))
            kind = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF"}.get(fmt, "JSON")
            if if_absent and self._subject_exists(subject):
                continue
            try:
                self._registry().register_schema(subject, Schema(schema_text, kind))
            except SchemaRegistryError as exc:
                raise KsqlStatementError(
                    f"Could not register schema for topic: {source.topic} "
                    f"(subject {subject}): {exc}"
                ) from None

    def _subject_exists(self, subject: str) -> bool:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            self._registry().get_latest_version(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return False
            raise KsqlStatementError(f"Could not read subject {subject}: {exc}") from None
        return True

    def _registered(self, schema_id: int) -> Any:
        """The schema ``schema_id``; one line when the registry has none."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return self._registry().get_schema(schema_id)
        except SchemaRegistryError as exc:
            raise KsqlStatementError(f"Schema registry: schema id {schema_id}: {exc}") from None

    def avro_schema(self, schema_id: int) -> Any:
        """The AVRO schema ``schema_id`` (its references too) parsed by fastavro for reading,
        its DATE, TIME and TIMESTAMP logical types read as their numbers
        (``plain_temporal``). Raises the registry's error."""
        from fastavro import parse_schema

        with self._lock:
            found = self._avro_schemas.get(schema_id)
        if found is not None:
            return found
        schema = self._registry().get_schema(schema_id)
        named: dict[str, Any] = {}
        self._avro_references(schema, named, set())
        found = parse_schema(plain_temporal(json.loads(schema.schema_str)), named_schemas=named)
        with self._lock:
            self._avro_schemas[schema_id] = found
        return found

    def _avro_references(self, schema: Any, named: dict[str, Any], seen: set[Any]) -> None:
        """The named types of the schemas ``schema`` refers to (theirs first) into ``named``."""
        from fastavro import parse_schema

        for reference in schema.references or []:
            at = (reference.subject, reference.version)
            if at in seen:
                continue
            seen.add(at)
            referred = self._registry().get_version(reference.subject, reference.version).schema
            self._avro_references(referred, named, seen)
            parse_schema(plain_temporal(json.loads(referred.schema_str)), named_schemas=named)

    def _register_given(self, topic: str, subject: str, field: str, schema_id: int) -> None:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        schema = self._registered(schema_id)
        try:
            registered = self._registry().register_schema(subject, schema)
        except SchemaRegistryError as exc:
            raise KsqlStatementError(
                f"Could not register schema for topic: {topic} (subject {subject}): {exc}"
            ) from None
        if registered != schema_id:
            raise KsqlStatementError(
                f"Schema id registered is {registered} which is different from provided "
                f"{schema_ids.SCHEMA_ID_PROPERTIES[field]} {schema_id}.\nTopic: {topic}\n"
                f"Subject: {subject}\nSchema: {schema.schema_str}"
            )

    def _with_schema_id(
        self,
        source: DataSource,
        field: str,
        fmt: str,
        columns: tuple[Column, ...],
        row: dict[str, Any],
        schema_id: int,
    ) -> bytes | None:
        """A key or value written with the registered schema ``schema_id``."""
        schema = self._registered(schema_id)
        data: Any = {c.name: row.get(c.name) for c in columns}
        try:
            if fmt == "PROTOBUF":
                full_name = source.properties.get(f"{field.upper()}_SCHEMA_FULL_NAME")
                message_class = self._protobuf_message_class(schema, schema_id, full_name)
                return schema_ids.encode_protobuf(message_class, schema_id, data)
            parsed = json.loads(schema.schema_str)
            record = isinstance(parsed, dict) and parsed.get("type") in ("record", "object")
            if not record or _written_alone(source, field, fmt, columns):
                # a column written alone: ROWKEY / ROWVAL, or a key's one column (a STRUCT
                # key written as the schema's record or object itself)
                data = row.get(columns[0].name)
                if data is None:
                    return None
            if fmt == "AVRO":
                return schema_ids.encode_avro(schema.schema_str, schema_id, data)
            return schema_ids.encode_json(schema.schema_str, schema_id, data)
        except KsqlStatementError:
            raise
        except Exception as exc:  # the encoder's: a value the schema does not hold
            raise KsqlStatementError(
                f"Could not serialize the {field} as {fmt} with schema id {schema_id}: {exc}"
            ) from None

    def _protobuf_message_class(self, schema: Any, schema_id: int, full_name: Any) -> Any:
        from google.protobuf import message_factory

        name = None if full_name is None else str(full_name)
        with self._lock:
            found = self._messages.get((schema_id, name))
        if found is not None:
            return found
        files = self._protobuf_files(schema)[0]
        made = message_factory.GetMessageClass(_named_message(files, name, "", "", False))
        with self._lock:
            self._messages[(schema_id, name)] = made
        return made

    def columns_of_id(
        self,
        topic: str,
        fmt: str,
        is_key: bool,
        schema_id: int,
        full_name: str | None,
        wrapped: bool = True,
    ) -> list[Column]:
        """The columns of the schema KEY_SCHEMA_ID / VALUE_SCHEMA_ID names, checked to be
        of the side's format, as ksqlDB checks it."""
        schema = self._registered(schema_id)
        fetched = schema.schema_type or "AVRO"
        if fetched != {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF"}.get(fmt, "JSON"):
            setting = schema_ids.SCHEMA_ID_PROPERTIES["key" if is_key else "value"]
            raise KsqlStatementError(
                f"Format and fetched schema type using {setting} {schema_id} are different. "
                f"Format: [{fmt}], Fetched schema type: [{fetched}]."
            )
        subject = f"{topic}-{'key' if is_key else 'value'}"
        # the schema's own field names (nested too), as ksqlDB reads a schema an id
        # names in any format (its ORIGINAL_FIELD_NAME policy); a subject's latest
        # schema's upper-cased
        return self._columns_of(schema, fmt, is_key, full_name, topic, subject, wrapped, False)

    def _serializer(
        self, source: DataSource, field: str, fmt: str, columns: tuple[Column, ...], alone: bool
    ) -> Callable[[Any], bytes]:
        schema_text = _schema_text(fmt, columns, alone, _full_name(source, field))
        nullable = _nullable(source, field)
        cache_key = (source.topic, field, schema_text + (nullable or ""))
        with self._lock:
            found = self._serializers.get(cache_key)
            if found is not None:
                return found
            from confluent_kafka.schema_registry.avro import AvroSerializer
            from confluent_kafka.schema_registry.error import SchemaRegistryError
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            from confluent_kafka.serialization import MessageField, SerializationContext

            client = self._registry()
            context = SerializationContext(
                source.topic, MessageField.KEY if field == "key" else MessageField.VALUE
            )
            try:
                if fmt == "AVRO":
                    avro = AvroSerializer(client, schema_text)
                    made: Callable[[Any], bytes] = lambda data: avro(data, context)  # noqa: E731
                elif fmt == "PROTOBUF":
                    made = _protobuf_writer(client, columns, context, nullable)
                else:
                    as_json = JSONSerializer(schema_text, client)
                    made = lambda data: as_json(_json_ready(data), context)  # noqa: E731
            except (SchemaRegistryError, ValueError) as exc:
                raise KsqlStatementError(f"Could not use the {fmt} schema: {exc}") from None
            self._serializers[cache_key] = made
            return made

    def protobuf_class(self, schema_id: int, indexes: list[int]) -> Any:
        """The message class a Protobuf record was written with: schema ``schema_id``
        from the registry, the message at ``indexes``."""
        from google.protobuf import message_factory

        with self._lock:
            found = self._readers.get((schema_id, tuple(indexes)))
        if found is not None:
            return found
        registered = self._registry().get_schema(schema_id)
        descriptor = protobuf_message(self._protobuf_files(registered)[0], indexes)
        made = message_factory.GetMessageClass(descriptor)
        with self._lock:
            self._readers[(schema_id, tuple(indexes))] = made
        return made

    def _protobuf_files(self, schema: Any) -> tuple[list[Any], dict[str, str]]:
        """The files of a registered Protobuf ``schema`` and of the subjects it
        references (each before the files importing it), and the referenced schemas'
        texts by import name."""
        files: list[Any] = []
        imports: dict[str, str] = {}
        for reference in schema.references or []:
            version = self._registry().get_version(reference.subject, reference.version)
            found, deeper = self._protobuf_files(version.schema)
            found[-1].name = reference.name  # the file as the schema imports it
            files += found
            imports.update(deeper)
            imports[reference.name] = version.schema.schema_str
        return files + protobuf_files(schema.schema_str, imports), imports

    def inferred_columns(
        self,
        topic: str,
        fmt: str,
        is_key: bool,
        full_name: str | None = None,
        wrapped: bool = True,
    ) -> list[Column]:
        """The columns of ``<topic>-key`` / ``<topic>-value``'s latest schema; PROTOBUF:
        of its message ``full_name`` (``KEY_SCHEMA_FULL_NAME`` / ``VALUE_SCHEMA_FULL_NAME``),
        or of its only top-level message (several refused, as ksqlDB refuses them); not
        ``wrapped`` (WRAP_SINGLE_VALUE=false), a record or object one column too."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        subject = f"{topic}-{'key' if is_key else 'value'}"
        try:
            registered = self._registry().get_latest_version(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise KsqlStatementError(_schema_missing(topic, subject, is_key)) from None
            raise KsqlStatementError(f"Schema registry: {exc}") from None
        return self._columns_of(registered.schema, fmt, is_key, full_name, topic, subject, wrapped)

    def _columns_of(
        self,
        schema: Any,
        fmt: str,
        is_key: bool,
        full_name: str | None,
        topic: str,
        subject: str,
        wrapped: bool = True,
        upper: bool = True,
    ) -> list[Column]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        namespace = "KEY" if is_key else "VALUE"
        text = schema.schema_str
        try:
            if fmt == "PROTOBUF":
                files = self._protobuf_files(schema)[0]
                message = _named_message(files, full_name, topic, subject, is_key)
                return [
                    Column(n, t, namespace) for n, t in protobuf_rows.columns_of(message, upper)
                ]
            try:
                schema = json.loads(text)
            except ValueError as exc:
                raise KsqlStatementError(
                    f"Schema of subject {subject} is not JSON: {exc}"
                ) from None
            if fmt == "AVRO":
                return avro_columns(schema, namespace, wrapped, upper)
            return json_schema_columns(schema, namespace, wrapped, upper)
        except (KeyError, TypeError, ValueError, IndexError, SchemaRegistryError) as exc:
            raise KsqlStatementError(
                f"Unable to verify if the {namespace.lower()} schema for topic: {topic} is "
                f"compatible with ksqlDB.\nReason: {exc}"
            ) from None


def given_schema_id(source: DataSource, field: str) -> int | None:
    """KEY_SCHEMA_ID / VALUE_SCHEMA_ID of a source, for its ``field`` ("key", "value")."""
    found = source.properties.get(schema_ids.SCHEMA_ID_PROPERTIES[field])
    return None if found is None else int(found)


def _written_alone(source: DataSource, field: str, fmt: str, columns: tuple[Column, ...]) -> bool:
    """Whether a key or value of one column is written as that column alone, not in a
    record: a single key column, a single value column with ``WRAP_SINGLE_VALUE=false``."""
    return (
        fmt != "PROTOBUF"  # a Protobuf record is always a message
        and len(columns) == 1
        and (field == "key" or source.wrap_single_value is False)
    )


def _full_name(source: DataSource, field: str) -> str | None:
    """KEY_SCHEMA_FULL_NAME / VALUE_SCHEMA_FULL_NAME (VALUE_AVRO_SCHEMA_FULL_NAME)."""
    found = source.properties.get(f"{field.upper()}_SCHEMA_FULL_NAME")
    if found is None and field == "value":
        found = source.properties.get("VALUE_AVRO_SCHEMA_FULL_NAME")
    return None if found is None else str(found)


def _schema_text(
    fmt: str, columns: tuple[Column, ...], alone: bool, full_name: str | None = None
) -> str:
    """The schema a key or value of ``columns`` is written with, as JSON text; an Avro
    record named ``full_name`` when given (ksqlDB's name otherwise)."""
    if fmt == "AVRO":
        namespace, _, name = (full_name or f"{_NAMESPACE}.{_RECORD}").rpartition(".")
        schema: Any = (
            avro_type(columns[0].type, _RECORD)
            if alone
            else avro_record(list(columns), name, namespace=namespace)
        )
    elif fmt == "PROTOBUF":
        schema = [[c.name, str(c.type)] for c in columns]
    else:
        schema = json_type(columns[0].type) if alone else json_object(list(columns))
    return json.dumps(schema)


def _schema_missing(topic: str, subject: str, is_key: bool) -> str:
    return (
        f"Schema for message {'keys' if is_key else 'values'} on topic '{topic}' does not "
        f"exist in the Schema Registry.\nSubject: {subject}\nPossible causes include:\n"
        "- The topic itself does not exist\n\t-> Use SHOW TOPICS; to check\n"
        "- Messages on the topic are not serialized using a format Schema Registry supports\n"
        f"\t-> Use PRINT '{topic}' FROM BEGINNING; to verify\n"
        "- Messages on the topic have not been serialized using a Confluent Schema Registry "
        "supported serializer\n"
        "- The schema is registered on a different instance of the Schema Registry\n"
        "- You do not have permissions to access the Schema Registry."
    )


_FROM_AVRO = {
    "int": "INTEGER",
    "long": "BIGINT",
    "float": "DOUBLE",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
    "bytes": "BYTES",
    "enum": "STRING",
    "fixed": "BYTES",
}
_FROM_AVRO_LOGICAL = {"date": "DATE", "time-millis": "TIME", "timestamp-millis": "TIMESTAMP"}


_PLAIN_TEMPORAL = ("date", "time-millis", "timestamp-millis")


def plain_temporal(schema: Any) -> Any:
    """The Avro schema (parsed JSON) without its ``date``, ``time-millis`` and
    ``timestamp-millis`` logical types: fastavro then reads the int of days, the ms of
    the day and the epoch ms that ksqlDB's DATE, TIME and TIMESTAMP hold, where it would
    make Python dates and datetimes, which hold only the years 1 to 9999 (ksqlDB's DATE
    is any int32 of days)."""
    if isinstance(schema, list):
        return [plain_temporal(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: plain_temporal(v) for k, v in schema.items() if k != "logicalType"}
    if "logicalType" in schema and schema["logicalType"] not in _PLAIN_TEMPORAL:
        out["logicalType"] = schema["logicalType"]
    return out


def _from_avro(schema: Any, upper: bool = True) -> ex.SqlType:
    if isinstance(schema, list):
        present = [s for s in schema if s != "null"]
        if len(present) != 1:
            raise ValueError(f"unions of several types are not supported: {schema}")
        return _from_avro(present[0], upper)
    if isinstance(schema, str):
        return ex.PrimitiveType(_FROM_AVRO[schema])
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal":
        return ex.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _FROM_AVRO_LOGICAL:
        return ex.PrimitiveType(_FROM_AVRO_LOGICAL[logical])
    if kind == "array":
        return ex.ArrayType(_from_avro(schema["items"], upper))
    if kind == "map":
        return ex.MapType(ex.PrimitiveType("STRING"), _from_avro(schema["values"], upper))
    if kind == "record":
        fields = tuple(
            ex.StructField(_named(f["name"], upper), _from_avro(f["type"], upper))
            for f in schema["fields"]
        )
        return ex.StructType(fields)
    return _from_avro(kind, upper)


def _named(name: str, upper: bool) -> str:
    """A field's name as a column's or struct field's: upper-cased, or (a schema named
    by KEY_SCHEMA_ID / VALUE_SCHEMA_ID) as the schema has it, as ksqlDB names them."""
    return name.upper() if upper else name


def avro_columns(
    schema: Any, namespace: str, wrapped: bool = True, upper: bool = True
) -> list[Column]:
    if wrapped and isinstance(schema, dict) and schema.get("type") == "record":
        return [
            Column(_named(f["name"], upper), _from_avro(f["type"], upper), namespace)
            for f in schema["fields"]
        ]
    alone = "ROWKEY" if namespace == "KEY" else "ROWVAL"
    return [Column(alone, _from_avro(schema, upper), namespace)]


_FROM_JSON = {"integer": "BIGINT", "number": "DOUBLE", "string": "STRING", "boolean": "BOOLEAN"}


def _from_json(schema: dict[str, Any], upper: bool = True) -> ex.SqlType:
    for union in ("oneOf", "anyOf"):
        if union in schema:
            present = [s for s in schema[union] if s.get("type") != "null"]
            if len(present) != 1:
                raise ValueError(f"unions of several types are not supported: {schema}")
            return _from_json(present[0], upper)
    kind = schema.get("type")
    if isinstance(kind, list):
        present = [k for k in kind if k != "null"]
        return _from_json({**schema, "type": present[0]}, upper)
    if kind == "array":
        return ex.ArrayType(_from_json(schema.get("items", {"type": "string"}), upper))
    if kind == "object":
        if "properties" in schema:
            return ex.StructType(
                tuple(
                    ex.StructField(_named(name, upper), _from_json(sub, upper))
                    for name, sub in schema["properties"].items()
                )
            )
        values = schema.get("additionalProperties")
        return ex.MapType(
            ex.PrimitiveType("STRING"),
            _from_json(values, upper) if isinstance(values, dict) else ex.PrimitiveType("STRING"),
        )
    return ex.PrimitiveType(_FROM_JSON[str(kind)])


def json_schema_columns(
    schema: dict[str, Any], namespace: str, wrapped: bool = True, upper: bool = True
) -> list[Column]:
    if wrapped and schema.get("type") == "object" and "properties" in schema:
        return [
            Column(_named(name, upper), _from_json(sub, upper), namespace)
            for name, sub in schema["properties"].items()
        ]
    alone = "ROWKEY" if namespace == "KEY" else "ROWVAL"
    return [Column(alone, _from_json(schema, upper), namespace)]


def _protobuf_writer(
    client: Any, columns: tuple[Column, ...], context: Any, nullable: str | None
) -> Callable[[Any], bytes]:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    message_class = _row_messages(columns, nullable).message_class()
    serializer = ProtobufSerializer(message_class, client, {"use.deprecated.format": False})
    return lambda row: serializer(protobuf_rows.fill(message_class(), row), context)


def _nullable(source: DataSource, field: str) -> str | None:
    """The source's ``*_PROTOBUF_NULLABLE_REPRESENTATION`` of ``field`` (key or value)."""
    return protobuf_rows.nullable_representation(source.properties, field)


def _row_messages(
    columns: tuple[Column, ...], nullable: str | None = None
) -> protobuf_rows.RowMessages:
    try:
        return protobuf_rows.RowMessages([(c.name, c.type) for c in columns], nullable)
    except protobuf_rows.ProtobufRowError as exc:
        raise KsqlStatementError(str(exc)) from None


def protobuf_files(text: str, imports: dict[str, str] | None = None) -> list[Any]:
    """The FileDescriptorProtos of a registered Protobuf schema (a base64 descriptor, or
    ``.proto`` text compiled), the schema's own file last; ``imports``: the schemas of
    its references (and theirs) by import name, for the compiler."""
    from strom.services.protobuf_schemas import file_descriptor

    found = file_descriptor(text)
    if found is not None:
        return [found]
    from google.protobuf import descriptor_pb2

    return [
        descriptor_pb2.FileDescriptorProto.FromString(serialized)
        for serialized in _compiled(text, tuple(sorted((imports or {}).items())))
    ]


@functools.lru_cache(maxsize=64)
def _compiled(text: str, imports: tuple[tuple[str, str], ...]) -> tuple[bytes, ...]:
    """``.proto`` text compiled (protoc in a child process, so once a text): its files
    serialized, its own last."""
    from google.protobuf import descriptor_pb2

    from strom.services.protobuf_schemas import ProtoSchemaError, compile_proto

    known = dict(imports)
    for serialized in protobuf_rows.known_files():
        proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        if not proto.name.startswith("google/protobuf/"):  # protoc has those
            known.setdefault(proto.name, base64.b64encode(serialized).decode())
    try:
        return tuple(f.SerializeToString() for f in compile_proto(text, known).file)
    except ProtoSchemaError as exc:
        raise ValueError(f"the Protobuf schema does not compile: {exc}") from None


def _named_message(
    files: list[Any], full_name: str | None, topic: str, subject: str, is_key: bool
) -> Any:
    """The message a CREATE infers its columns from: ``full_name``, else the file's only
    top-level message."""
    pool = protobuf_rows.pool_with(files)
    main = files[-1]
    prefix = f"{main.package}." if main.package else ""
    if full_name is None:
        names = [prefix + m.name for m in main.message_type]
        if len(names) > 1:
            listed = "\n".join(f"- {n}" for n in names)
            setting = "KEY_SCHEMA_FULL_NAME" if is_key else "VALUE_SCHEMA_FULL_NAME"
            raise KsqlStatementError(
                f"{'Key' if is_key else 'Value'} schema has multiple schema definitions. \n\n"
                f"{listed}\n\nPlease specify a schema full name in the WITH clause using "
                f"{setting}"
            )
        return protobuf_message(files, [0])
    try:
        return pool.FindMessageTypeByName(full_name)
    except KeyError:
        raise KsqlStatementError(_schema_missing(topic, subject, is_key)) from None


def protobuf_message(files: list[Any], indexes: list[int]) -> Any:
    """The message descriptor at Confluent's message ``indexes`` of the last file."""
    pool = protobuf_rows.pool_with(files)
    main = files[-1]
    message = main.message_type[indexes[0]]
    path = [message.name]
    for index in indexes[1:]:
        message = message.nested_type[index]
        path.append(message.name)
    return pool.FindMessageTypeByName(".".join(([main.package] if main.package else []) + path))
