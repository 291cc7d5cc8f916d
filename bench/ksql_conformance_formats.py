"""ksqlDB conformance: the schema registry's formats (AVRO, PROTOBUF, JSON_SR) for
``bench/ksql_conformance.py``.

Starts a schema registry (``strom schema-registry``) beside the harness's broker, for
the ksql server's ``ksql.schema.registry.url``. Before a case's statements run, the
schemas its ``topics`` entries give (``keySchema`` / ``valueSchema``: an Avro schema, a
JSON schema, or ``.proto`` text) are registered under ``<topic>-key`` / ``<topic>-value``
in the format the entry, or the CREATE statement reading the topic, names (the registry
checks no compatibility, as the mock of ksqlDB's test driver does). The schema ids a
case's statements name (KEY_SCHEMA_ID / VALUE_SCHEMA_ID) are the ids that mock gives:
those the case names, then, counting from 1, every topic's schemas (the case's, or those
of a CREATE statement's columns) in the order of ksqlDB's HashMap of topics; each is
rewritten to the id its schema has here (``SchemaIds``). An input is
written with the schema the case gives its topic, else the latest of its subject (the
one the server registered at CREATE) in Confluent's wire format: a zero byte, the schema id
(4 bytes), then Avro binary, Protobuf message indexes and the message, or JSON. A
record read back is decoded with the schema its id names, as plain JSON values (Avro's
and Protobuf's decimals, dates, times and timestamps as ksqlDB's test driver gives them:
numbers, days, milliseconds).

An input value is fitted to the schema as ksqlDB's test driver fits its JSON to it:
fields matched by name, case aside; a field the value lacks null; numbers converted to
the schema's type. A JSON_SR value too (``json_sr_value``), as the driver's Connect
data of the JSON schema written by the JSON Schema converter: written under the
schema's field names, a field the schema lacks left out, scalars as the schema types
them, a Connect DECIMAL to its scale.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
import re
import struct
import threading
from typing import Any

from service_process import ServiceProcess

REGISTRY_FORMATS = ("AVRO", "PROTOBUF", "JSON_SR")
NOSR = "PROTOBUF_NOSR"  # the message alone, its schema the columns'

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_WIDE_DECIMALS = decimal.Context(prec=1000)  # ksqlDB's DECIMAL precision is at most 38


def start_registry(bootstrap: str) -> ServiceProcess:
    """A schema registry on the broker ``bootstrap`` (its ``url`` for the server)."""
    return ServiceProcess(
        ["schema-registry", "--bootstrap-server", bootstrap, "--listener", "http://127.0.0.1:0"]
    )


def topic_format(topic: dict[str, Any], statements: list[str], part: str) -> str | None:
    """The format of ``part`` ("key" or "value") of a case's ``topics`` entry: the
    entry's, else that of a CREATE statement reading the topic."""
    for name in (f"{part}Format", "format"):
        if topic.get(name):
            return str(topic[name]).upper()
    for setting in (f"{part.upper()}_FORMAT", "FORMAT"):
        given = statement_setting(str(topic["name"]), statements, setting)
        if given:
            return given.upper()
    return None


def statement_setting(topic: str, statements: list[str], setting: str) -> str | None:
    """A WITH setting's text in the first statement naming KAFKA_TOPIC ``topic``."""
    for statement in statements:
        found = re.search(r"(?i)KAFKA_TOPIC\s*=\s*'([^']*)'", statement)
        if found is None or found.group(1).upper() != topic.upper():
            continue
        given = re.search(rf"(?i)(?<![A-Z_]){setting}\s*=\s*'([^']*)'", statement)
        if given:
            return given.group(1)
    return None


def nullable_setting(name: str, statements: list[str], side: str) -> str | None:
    """``<side>_PROTOBUF_NULLABLE_REPRESENTATION`` (upper case) of the statement creating
    the stream or table ``name``, for PROTOBUF_NOSR's message of its columns."""
    for statement in statements:
        created = re.match(
            r"(?is)\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:STREAM|TABLE)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
            r"`?([A-Za-z0-9_]+)`?",
            statement,
        )
        if created is None or created.group(1).upper() != name.upper():
            continue
        given = re.search(
            rf"(?i)(?<![A-Z_]){side}_PROTOBUF_NULLABLE_REPRESENTATION\s*=\s*'([^']*)'", statement
        )
        return given.group(1).upper() if given else None
    return None


class RegistryCodec:
    """Schemas registered, records written and read in the registry's formats."""

    def __init__(self, url: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        from strom.ksql.registry_formats import RegistryFormats

        self.client = SchemaRegistryClient({"url": url})
        # ksqlDB's test driver's registry (a mock) checks no compatibility: a case's
        # schema for a query's sink is replaced by the query's own
        self.client.set_compatibility(level="NONE")
        self.formats = RegistryFormats(url, {})  # Protobuf readers of registered schemas
        self._lock = threading.Lock()
        self._schemas: dict[tuple[int, bool], Any] = {}
        self._given: dict[str, int] = {}  # a case's schemas' ids by subject
        self._full_names: dict[str, str] = {}  # a case's Protobuf messages by subject

    # -- registering

    def register_topics(self, case: dict[str, Any], suffix: str) -> SchemaIds:
        """The schemas the case's ``topics`` entries give, registered under its suffixed
        topics; and the ids ksqlDB's test driver's registry (a mock) gives the schemas of
        the case, which its statements' KEY_SCHEMA_ID / VALUE_SCHEMA_ID name
        (``SchemaIds``)."""
        from confluent_kafka.schema_registry import Schema, SchemaReference

        ids = SchemaIds(self.client)
        statements = case.get("statements", [])
        given: dict[tuple[str, str], str] = {}  # (topic, part): the schema's identity
        for topic in case.get("topics", []):
            for part in ("key", "value"):
                text = topic.get(f"{part}Schema")
                if text is None:
                    continue
                fmt = topic_format(topic, statements, part)
                if fmt not in REGISTRY_FORMATS:
                    fmt = _guessed_format(text)
                schema_type = {"AVRO": "AVRO", "PROTOBUF": "PROTOBUF", "JSON_SR": "JSON"}[fmt]
                text = text if isinstance(text, str) and fmt == "PROTOBUF" else json.dumps(text)
                subject = f"{topic['name']}{suffix}-{part}"
                references = []
                numbered = topic.get(f"{part}SchemaId") is not None
                for reference in topic.get(f"{part}SchemaReferences", []):
                    named = reference["schema"]
                    named = named if isinstance(named, str) else json.dumps(named)
                    kind = {"JSON_SR": "JSON"}.get(reference.get("format", fmt), schema_type)
                    where = f"{reference['name']}{suffix}"
                    reference_id = self.client.register_schema(where, Schema(named, kind))
                    if numbered:  # the driver registers a numbered schema's references
                        ids.register(str(reference["name"]), f"id {reference_id}", reference_id)
                    version = self.client.get_latest_version(where).version
                    references.append(SchemaReference(reference["name"], where, version))
                schema_id = self.client.register_schema(
                    subject, Schema(text, schema_type, references)
                )
                full_name = statement_setting(
                    str(topic["name"]), statements, f"{part.upper()}_SCHEMA_FULL_NAME"
                )
                with self._lock:
                    self._given[subject] = schema_id
                    if full_name:
                        self._full_names[subject] = full_name
                given[(str(topic["name"]), part)] = f"id {schema_id}"
                if numbered:
                    ids.register(
                        f"{topic['name']}-{part}",
                        f"id {schema_id}",
                        schema_id,
                        int(topic[f"{part}SchemaId"]),
                    )
        # then, as the driver makes its topics, every topic's schemas, named by the case
        # or made of a CREATE statement's columns, in the order of Java's HashMap
        derived = statement_schemas(statements, case.get("properties", {}))
        names = [str(t["name"]) for t in case.get("topics", [])]
        names += [name for name, _ in derived if name not in names]
        for record in [*case.get("inputs", []), *case.get("outputs", [])]:
            if record["topic"] not in names:
                names.append(str(record["topic"]))
        schemas: dict[tuple[str, str], tuple[str, int | str]] = {}
        for name, parts in derived:
            for part, identity in parts.items():
                schemas[(name, part)] = (identity, f"{name}{suffix}-{part}")
        for (name, part), identity in given.items():
            schemas[(name, part)] = (identity, int(identity.split()[1]))
        for name in java_hash_order(names):
            for part in ("key", "value"):
                if (name, part) in schemas:
                    identity, target = schemas[(name, part)]
                    ids.register(f"{name}-{part}", identity, target)
        return ids

    # -- writing

    def encode(self, value: Any, fmt: str, topic: str, is_key: bool) -> bytes | None:
        """``value`` (the case's JSON) written with the schema the case gives its topic,
        else with the subject's latest (the server's)."""
        if value is None:
            return None
        subject = f"{topic}-{'key' if is_key else 'value'}"
        with self._lock:
            schema_id = self._given.get(subject)
        if schema_id is None:
            schema_id = self.client.get_latest_version(subject).schema_id
        header = b"\0" + struct.pack(">I", schema_id)
        if fmt == "AVRO":
            import fastavro

            parsed = self._schema(schema_id)
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, avro_value(parsed, value))
            return header + out.getvalue()
        if fmt == "PROTOBUF":
            from strom.ksql import protobuf_rows

            with self._lock:
                full_name = self._full_names.get(subject)
            indexes = self._message_index(schema_id, full_name)
            message_class = self.formats.protobuf_class(schema_id, indexes)
            row = value if isinstance(value, dict) else {_only_field(message_class): value}
            message = protobuf_rows.fill(message_class(), protobuf_row(message_class, row))
            return header + _indexes_bytes(indexes) + message.SerializeToString()
        schema = json.loads(self.client.get_schema(schema_id).schema_str)
        return header + json_text(json_sr_value(schema, value)).encode()

    # -- reading

    def decode(self, data: bytes, fmt: str) -> Any:
        """A record written in Confluent's wire format as plain JSON values."""
        if len(data) < 5 or data[0] != 0:
            return data.decode(errors="replace")
        (schema_id,) = struct.unpack(">I", data[1:5])
        body = data[5:]
        if fmt == "JSON_SR":
            return json.loads(body)
        if fmt == "PROTOBUF":
            from strom.ksql import protobuf_rows

            indexes, body = _message_indexes(body)
            message = self.formats.protobuf_class(schema_id, indexes).FromString(body)
            return plain_json(protobuf_rows.plain(message))
        import fastavro

        schema = self._schema(schema_id, for_reading=True)
        return plain_json(fastavro.schemaless_reader(io.BytesIO(body), schema, None))

    def _message_index(self, schema_id: int, full_name: str | None) -> list[int]:
        """The indexes of top-level message ``full_name`` in the schema, else [0]."""
        if full_name is None:
            return [0]
        files = self.formats._protobuf_files(self.client.get_schema(schema_id))[0]
        main = files[-1]
        prefix = f"{main.package}." if main.package else ""
        for index, message in enumerate(main.message_type):
            if full_name in (message.name, prefix + message.name):
                return [index]
        return [0]

    def _schema(self, schema_id: int, for_reading: bool = False) -> Any:
        """The id's Avro schema parsed; ``for_reading``: without the date logical type, so
        that a DATE outside Python's years 1-9999 reads as its int of days."""
        import fastavro

        cache_key = (schema_id, for_reading)
        with self._lock:
            found = self._schemas.get(cache_key)
        if found is None:
            text = json.loads(self.client.get_schema(schema_id).schema_str)
            found = fastavro.parse_schema(_without_dates(text) if for_reading else text)
            with self._lock:
                self._schemas[cache_key] = found
        return found


def _without_dates(schema: Any) -> Any:
    """An Avro schema (JSON) whose date-typed ints are plain ints."""
    if isinstance(schema, list):
        return [_without_dates(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("logicalType") == "date":
        return {k: v for k, v in schema.items() if k != "logicalType"}
    return {k: _without_dates(v) for k, v in schema.items()}


def with_schema_ids(statement: str, ids: SchemaIds) -> str:
    """The statement's KEY_SCHEMA_ID / VALUE_SCHEMA_ID as the registry gave the ids."""
    return re.sub(
        r"(?i)\b((?:KEY|VALUE)_SCHEMA_ID\s*=\s*)(\d+)",
        lambda m: m.group(1) + str(ids.real(int(m.group(2)))),
        statement,
    )


class SchemaIds:
    """The ids ksqlDB's test driver's registry (a mock) gives a case's schemas, and the
    schemas they stand for here. The mock counts from 1, gives a schema registered
    again (under any subject) its first id, and a schema registered with an id that id
    (the counter untouched). A schema the case names stands for the id the registry
    gave it; one a CREATE statement's columns make, for its subject's latest, read when
    a statement names it (the server registers it at CREATE)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._count = 0
        self._by_identity: dict[str, int] = {}
        self._by_subject: dict[tuple[str, str], int] = {}
        self._targets: dict[int, int | str] = {}  # a mock id: a registry id or a subject

    def register(
        self, subject: str, identity: str, target: int | str, given: int | None = None
    ) -> int:
        """The mock's id of the schema ``identity`` registered under ``subject``."""
        known = self._by_subject.get((subject, identity))
        if known is not None and given in (None, known):
            return known
        if given is not None:
            number = self._by_identity[identity] = given
        elif identity in self._by_identity:
            number = self._by_identity[identity]
        else:
            self._count += 1
            number = self._by_identity[identity] = self._count
        self._by_subject[(subject, identity)] = number
        self._targets[number] = target
        return number

    def real(self, number: int) -> int:
        """The registry's id for the mock's ``number`` (the number when none)."""
        target = self._targets.get(number)
        if isinstance(target, int):
            return target
        if target is None:
            return number
        try:
            return int(self._client.get_latest_version(target).schema_id)
        except Exception:  # noqa: BLE001 - not registered (yet): the number as it is
            return number


def java_hash_order(names: list[str]) -> list[str]:
    """Distinct ``names`` (in the order put) in the order a Java HashMap of them gives:
    by bucket (the String hash's spread, masked by the table's size), then as put."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        data = name.encode("utf-16-be")  # Java's chars: UTF-16 code units
        h = 0
        for i in range(0, len(data), 2):
            h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)


def statement_schemas(
    statements: list[str], properties: dict[str, Any]
) -> list[tuple[str, dict[str, str]]]:
    """The topics of the CREATE STREAM / TABLE statements naming their columns, with the
    identity of each part's schema (``key`` / ``value``) in a registry format: the
    format, the columns and the settings ksqlDB makes the schema of, as ksqlDB's test
    driver infers them before the statements run."""
    from strom.ksql import statements as st
    from strom.ksql.parser import parse_statement

    defaults = {k.lower(): str(v) for k, v in properties.items()}
    found: list[tuple[str, dict[str, str]]] = []
    for text in statements:
        try:
            statement = parse_statement(text)
        except Exception:  # noqa: BLE001 - one ksqlDB refuses later, or ours does not read
            continue
        if not isinstance(statement, st.CreateSource) or not statement.elements:
            continue
        props = {k.upper(): str(v) for k, v in statement.properties.items()}
        topic = props.get("KAFKA_TOPIC")
        if topic is None:
            continue
        parts: dict[str, str] = {}
        for part in ("key", "value"):
            fmt = props.get(f"{part.upper()}_FORMAT") or props.get("FORMAT")
            fmt = fmt or defaults.get(f"ksql.persistence.default.format.{part}")
            fmt = (fmt or ("KAFKA" if part == "key" else "")).upper()
            columns = [
                (e.name, str(e.type))
                for e in statement.elements
                if e.is_key == (part == "key") and (part == "key" or e.constraint is None)
            ]
            if fmt not in REGISTRY_FORMATS or not columns:
                continue
            settings = sorted((k, v) for k, v in props.items() if _shapes_schema(k, part))
            parts[part] = json.dumps(["columns", fmt, part, columns, settings])
        if parts:
            found.append((topic, parts))
    return found


def type_text(schema: dict[str, Any]) -> str:
    """A column's SQL type from its schema in DESCRIBE's answer (ksqlDB's FieldInfo)."""
    kind = str(schema.get("type", "STRING"))
    if kind == "DECIMAL":
        params = schema.get("parameters") or {}
        return f"DECIMAL({params.get('precision', 10)}, {params.get('scale', 0)})"
    if kind == "ARRAY":
        return f"ARRAY<{type_text(schema.get('memberSchema') or {})}>"
    if kind == "MAP":
        return f"MAP<STRING, {type_text(schema.get('memberSchema') or {})}>"
    if kind == "STRUCT":
        inner = ", ".join(
            f"`{f['name']}` {type_text(f.get('schema') or {})}" for f in schema.get("fields") or []
        )
        return f"STRUCT<{inner}>"
    return kind


def _sql_columns(columns: list[tuple[str, str]]) -> tuple[tuple[str, Any], ...]:
    """(name, type text) columns as (name, SqlType), read by Strom's parser."""
    from strom.ksql.parser import parse_statement

    listed = ", ".join(f"`{name}` {text}" for name, text in columns)
    statement: Any = parse_statement(
        f"CREATE STREAM x ({listed}) WITH (kafka_topic='x', value_format='JSON');"
    )
    return tuple((e.name, e.type) for e in statement.elements)


def encode_nosr(
    value: Any, columns: list[tuple[str, str]], nullable: str | None = None
) -> bytes | None:
    """A PROTOBUF_NOSR key or value: the message of the columns (its nullable
    representation ``nullable``), no header."""
    from strom.ksql import protobuf_rows

    if value is None or not columns:
        return None
    typed = _sql_columns(columns)
    if not isinstance(value, dict):
        value = {typed[0][0]: value}
    by_name = {k.upper(): v for k, v in value.items()}
    row = {name: value.get(name, by_name.get(name.upper())) for name, _ in typed}
    message_class = protobuf_rows._columns_class(typed, nullable)
    filled = protobuf_rows.fill(message_class(), protobuf_row(message_class, row))
    return bytes(filled.SerializeToString())


def decode_nosr(data: bytes, columns: list[tuple[str, str]], nullable: str | None = None) -> Any:
    from strom.ksql import protobuf_rows

    return plain_json(protobuf_rows.read_bare(_sql_columns(columns), data, nullable))


def sink_fields(value: Any, columns: list[tuple[str, str]]) -> Any:
    """A decoded record's fields the source has columns for (its case aside), as ksqlDB's
    test driver reads a sink through its columns: a field of the writer's schema beyond
    them (written with a schema id) left out."""
    if not isinstance(value, dict) or not columns:
        return value
    names = {name.upper() for name, _ in columns}
    if not any(k.upper() in names for k in value):
        return value  # an unwrapped struct value: its own fields
    return {k: v for k, v in value.items() if k.upper() in names}


def _shapes_schema(setting: str, part: str) -> bool:
    """A WITH setting that changes the schema ksqlDB makes of ``part``'s columns."""
    if part == "value" and setting == "WRAP_SINGLE_VALUE":
        return True
    return setting.startswith(part.upper()) and setting.endswith(("FULL_NAME", "REPRESENTATION"))


def _guessed_format(schema: Any) -> str:
    if isinstance(schema, str) and "syntax" in schema:
        return "PROTOBUF"
    if isinstance(schema, dict) and ("properties" in schema or "$schema" in schema):
        return "JSON_SR"
    return "AVRO"


def _message_indexes(body: bytes) -> tuple[list[int], bytes]:
    """Confluent's Protobuf message indexes (zigzag varints: a count, then the indexes;
    a lone 0 for [0]) and the message after them."""
    position = 0

    def varint() -> int:
        nonlocal position
        shift = result = 0
        while True:
            byte = body[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    count = varint()
    indexes = [varint() for _ in range(count)] if count else [0]
    return indexes, body[position:]


def _indexes_bytes(indexes: list[int]) -> bytes:
    """Confluent's message indexes: a lone 0 for [0], else zigzag varints of the count
    and the indexes."""
    if indexes == [0]:
        return b"\0"
    out = bytearray()
    for number in (len(indexes), *indexes):
        value = (number << 1) ^ (number >> 63)
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def _only_field(message_class: Any) -> str:
    fields = message_class.DESCRIPTOR.fields
    return str(fields[0].name) if fields else ""


def protobuf_row(message_class: Any, row: dict[str, Any]) -> dict[str, Any]:
    """A case's row for ``protobuf_rows.fill``, fitted to the message as ksqlDB's test
    driver fits its JSON to a schema: a field the message lacks (its case aside) left
    out, at any depth; a DECIMAL given as a number or text as a Decimal; BYTES given as
    base64 text as bytes; an integer given as text a number; a TIMESTAMP's or DATE's
    number as it is."""
    return _fit_message(message_class.DESCRIPTOR, row)


def _fit_message(descriptor: Any, row: dict[str, Any]) -> dict[str, Any]:
    from strom.ksql import protobuf_rows

    out: dict[str, Any] = {}
    for name, value in row.items():
        union = protobuf_rows._union_named(descriptor, name)
        if union is not None and isinstance(value, dict):
            out[name] = _fit_message(descriptor, value)
            continue
        field = next((f for f in descriptor.fields if f.name.upper() == name.upper()), None)
        if field is None:
            continue  # the driver's struct takes only the schema's fields
        target = field.message_type
        if target is not None and target.GetOptions().map_entry and isinstance(value, dict):
            entry = target.fields_by_name["value"]
            out[name] = {k: _fit_field(entry, v) for k, v in value.items()}
        elif field.is_repeated and isinstance(value, list):
            out[name] = [_fit_field(field, item) for item in value]
        else:
            out[name] = _fit_field(field, value)
    return out


def _fit_field(field: Any, value: Any) -> Any:
    """One value (not a list's or map's whole) as ``field`` takes it."""
    if value is None:
        return None
    target = field.message_type
    if target is None:
        if field.type == field.TYPE_BYTES and isinstance(value, str):
            return base64.b64decode(value)
        if field.cpp_type in _PROTO_INTEGERS and isinstance(value, str):
            try:
                return int(value)  # an integer given as text, as the driver converts it
            except ValueError:
                return value
        return value
    full_name = target.full_name
    if full_name == "confluent.type.Decimal":
        if isinstance(value, float) or isinstance(value, str) and _DECIMAL_RE.fullmatch(value):
            return decimal.Decimal(str(value))
        return value
    if full_name == "google.protobuf.BytesValue" and isinstance(value, str):
        return base64.b64decode(value)
    if isinstance(value, dict) and not full_name.startswith(("google.", "confluent.")):
        return _fit_message(target, value)
    return value


_DECIMAL_RE = re.compile(r"-?\d+(\.\d+)?")
_PROTO_INTEGERS = (1, 2, 3, 4)  # FieldDescriptor.CPPTYPE_INT32, INT64, UINT32, UINT64


# ---------------------------------------------------------------- JSON_SR values

_CONNECT_INTEGERS = ("int8", "int16", "int32", "int64")
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def json_sr_value(schema: Any, value: Any) -> Any:
    """The case's JSON ``value`` fitted to the JSON ``schema`` as ksqlDB's test driver
    fits it (its spec turned into Connect data of the schema's Connect type, then
    written by the JSON Schema converter): an object's fields matched by name, case
    aside, and written under the schema's names, a field the schema lacks left out, at
    any depth; an integer or number given as text a number; a string given as a number
    or boolean its text; a boolean given as text ``true`` (case aside) or not; a
    DECIMAL (``connect.type`` bytes, ``connect.name`` Connect's Decimal) to its scale.
    What the schema does not say (a union of several types, a reference) is left as it
    is."""
    if value is None or not isinstance(schema, dict):
        return value
    for union in ("oneOf", "anyOf"):
        if union in schema:
            present = [s for s in schema[union] if s.get("type") != "null"]
            return json_sr_value(present[0], value) if len(present) == 1 else value
    kind = schema.get("type")
    if isinstance(kind, list):
        present = [k for k in kind if k != "null"]
        kind = present[0] if len(present) == 1 else None
    connect = schema.get("connect.type")
    if connect == "bytes" and schema.get("connect.name") == _CONNECT_DECIMAL:
        scale = int((schema.get("connect.parameters") or {}).get("scale", 0))
        return decimal.Decimal(str(value)).quantize(
            decimal.Decimal(1).scaleb(-scale), context=_WIDE_DECIMALS
        )
    if kind == "object" and isinstance(value, dict):
        if "properties" in schema:
            names = {name.upper(): name for name in schema["properties"]}
            out = {}
            for name, item in value.items():
                real = names.get(str(name).upper())
                if real is not None:  # the driver's struct takes only the schema's fields
                    out[real] = json_sr_value(schema["properties"][real], item)
            return out
        values = schema.get("additionalProperties")
        return {str(k): json_sr_value(values, v) for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [json_sr_value(schema.get("items"), item) for item in value]
    if kind == "integer" or connect in _CONNECT_INTEGERS:
        return _json_number(value, int)
    if kind == "number":
        return _json_number(value, float)
    if kind == "string" and not isinstance(value, (dict, list)):
        return _java_text(value)
    if kind == "boolean" and not isinstance(value, (dict, list)):
        return value if isinstance(value, bool) else str(value).lower() == "true"
    return value


def _json_number(value: Any, kind: type) -> Any:
    """A number given as text parsed as Java's ``Long.valueOf`` / ``Double.valueOf``
    parse it; a number is written as given; what the driver would refuse (a fraction
    for an integer, text not a number) is left as it is (the case's error)."""
    if not isinstance(value, str):
        return value
    try:
        return int(value) if kind is int else float(value)
    except ValueError:
        return value


def _java_text(value: Any) -> Any:
    """A scalar's text as the driver's ``toString`` makes it (Java's for a boolean and
    a double)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_text(value)
    return str(value)


def java_double_text(value: float) -> str:
    """Java's ``Double.toString``: positional from 10^-3 to 10^7 (at least one decimal),
    else ``d.dddE<n>``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    shown = "".join(map(str, digits))
    mantissa = shown[0] + "." + (shown[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + exponent}"


def json_text(value: Any) -> str:
    """``value`` as JSON text, a Decimal as its number (its digits, scale kept)."""
    marks: dict[str, str] = {}

    def marked(item: Any) -> Any:
        if isinstance(item, decimal.Decimal):
            mark = f"@@decimal{len(marks)}@@"
            marks[f'"{mark}"'] = str(item)
            return mark
        if isinstance(item, dict):
            return {k: marked(v) for k, v in item.items()}
        if isinstance(item, list):
            return [marked(v) for v in item]
        return item

    text = json.dumps(marked(value))
    for mark, number in marks.items():
        text = text.replace(mark, number, 1)
    return text


# ---------------------------------------------------------------- Avro values


def avro_value(schema: Any, value: Any, strict: bool = False) -> Any:
    """The case's JSON ``value`` fitted to the parsed Avro ``schema``; a number given
    for a string as its text, unless ``strict`` (a union's branches tried first)."""
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_value(branches[0], value, strict)
        for loose in (False, True) if not strict else (False,):
            for branch in branches:  # the first branch the value fits
                try:
                    fitted = avro_value(branch, value, not loose)
                except (TypeError, ValueError, KeyError, AttributeError):
                    continue
                if _fits(branch, fitted):
                    return fitted
        return value
    if isinstance(schema, str):
        return _avro_primitive(schema, value, strict)
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal":
        # an Avro decimal may hold more digits than the default context's 28
        return decimal.Decimal(str(value)).quantize(
            decimal.Decimal(1).scaleb(-schema.get("scale", 0)), context=_WIDE_DECIMALS
        )
    if logical == "date" and isinstance(value, int):
        return value  # fastavro writes the days as they are (a date would stop at year 1)
    if logical == "time-millis" and isinstance(value, int):
        return (datetime.datetime.min + datetime.timedelta(milliseconds=value)).time()
    if logical in ("timestamp-millis", "timestamp-micros") and isinstance(value, int):
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if kind == "record":
        if not isinstance(value, dict):
            raise TypeError("not a record")
        by_name = {k.upper(): v for k, v in value.items()}
        return {
            f["name"]: avro_value(
                f["type"], value.get(f["name"], by_name.get(f["name"].upper())), strict
            )
            for f in schema["fields"]
        }
    if kind == "array":
        if not isinstance(value, list):
            raise TypeError("not an array")
        return [avro_value(schema["items"], item, strict) for item in value]
    if kind == "map":
        if not isinstance(value, dict):
            raise TypeError("not a map")
        return {k: avro_value(schema["values"], v, strict) for k, v in value.items()}
    if kind == "enum":
        return value
    if isinstance(kind, (str, list, dict)) and kind not in ("fixed",):
        return avro_value(kind, value, strict)
    return value


def _avro_primitive(name: str, value: Any, strict: bool) -> Any:
    if name in ("int", "long"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"not an {name}")
        return int(value)
    if name in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"not a {name}")
        return float(value)
    if name == "string":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not strict:
            return str(value)
        if not isinstance(value, str):
            raise TypeError("not a string")
        return value
    if name == "boolean":
        if not isinstance(value, bool):
            raise TypeError("not a boolean")
        return value
    if name == "bytes":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    return value


def _fits(schema: Any, value: Any) -> bool:
    import fastavro.validation

    try:
        return bool(fastavro.validation.validate(value, schema, raise_errors=False))
    except Exception:  # noqa: BLE001 - a schema the validator does not take: not this branch
        return False


def plain_json(value: Any) -> Any:
    """A decoded record as JSON values: decimals as numbers, dates as days, times and
    timestamps as milliseconds, bytes as base64 text."""
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_json(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return (stamp - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.date):
        return (value - _EPOCH_DATE).days
    if isinstance(value, datetime.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + (
            value.microsecond // 1000
        )
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value
