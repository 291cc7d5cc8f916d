"""Kafka's transforms over the fields of a record's key or value, each on a Struct with
its Connect schema (schemaful) or on a dict (schemaless), with Kafka's settings, defaults
and messages: ``InsertField`` (topic, partition, offset, timestamp, a static value; a
name ending ``!`` is a required field, ``?`` or nothing optional), ``ReplaceField``
(``include``, ``exclude``, ``renames``), ``MaskField`` (``fields``, ``replacement``),
``ValueToKey`` (``fields``), ``ExtractField`` (``field``, nested with
``field.syntax.version=V2``), ``HoistField`` (``field``), ``Flatten`` (``delimiter``) and
``HeaderFrom`` (``fields``, ``headers``, ``operation`` move or copy) and
``SetSchemaMetadata`` (``schema.name``, ``schema.version``).

A null key or value passes unchanged where Kafka's does. Each ``X$Key`` / ``X$Value`` of
Kafka is ``XKey`` / ``XValue`` here (``base.SidedTransformation``). Values of Kafka's
logical Timestamp are milliseconds since the epoch (what the JsonConverter writes), so
InsertField's ``timestamp.field`` is the record's timestamp as it is.

HeaderFrom adds each field's value with its schema as a typed header (a
``SchemaAndValue``), which the connector's header converter writes (Kafka's
SimpleHeaderConverter by default: a string as it is, a number as its text, a struct as
``{"field":value}``).

Does not own chaining or predicates (``chain``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from strom.config import ConfigError
from strom.connect import config_def as cd
from strom.connect.data import (
    ARRAY,
    INT32,
    INT64,
    PRIMITIVE_TYPES,
    STRING,
    STRUCT,
    TIMESTAMP,
    DataException,
    Schema,
    SchemaAndValue,
    Struct,
)
from strom.connect.transforms.base import (
    KEY,
    REPLACE_NULL_WITH_DEFAULT,
    VALUE,
    ConnectRecord,
    SidedTransformation,
    Transformation,
    checked_by,
    field_value,
    java_list,
    require_map,
    require_sink_record,
    require_struct,
    struct_schema_like,
)

OPTIONALITY_DOC = (
    "Suffix with <code>!</code> to make this a required field, or <code>?</code> to keep it "
    "optional (the default)."
)
TIMESTAMP_SCHEMA = Schema(INT64, name=TIMESTAMP, version=1)


def non_empty_list(name: str, value: Any) -> None:
    """Kafka's ``NonEmptyListValidator``."""
    if not value:
        raise cd.invalid(name, java_list(value or []), "Empty list")


def _fields_key(documentation: str) -> cd.ConfigKey:
    return cd.ConfigKey(
        "fields", cd.LIST, cd.REQUIRED, cd.HIGH, documentation, check=non_empty_list
    )


# InsertField


@dataclasses.dataclass(frozen=True)
class _Insertion:
    """A field InsertField adds: its name and whether its schema is optional."""

    name: str
    optional: bool

    @staticmethod
    def parse(spec: str | None) -> _Insertion | None:
        if spec is None:
            return None
        if spec.endswith("?"):
            return _Insertion(spec[:-1], True)
        if spec.endswith("!"):
            return _Insertion(spec[:-1], False)
        return _Insertion(spec, True)


def _insertion_key(name: str, documentation: str) -> cd.ConfigKey:
    return cd.ConfigKey(name, cd.STRING, None, cd.MEDIUM, documentation)


class InsertField(SidedTransformation):
    """Insert field(s) using attributes from the record metadata or a configured static
    value."""

    PURPOSE = "field insertion"
    CONFIG_DEF = cd.ConfigDef(
        [
            _insertion_key("topic.field", f"Field name for Kafka topic. {OPTIONALITY_DOC}"),
            _insertion_key("partition.field", f"Field name for Kafka partition. {OPTIONALITY_DOC}"),
            _insertion_key(
                "offset.field",
                "Field name for Kafka offset - only applicable to sink connectors.<br/>"
                + OPTIONALITY_DOC,
            ),
            _insertion_key(
                "timestamp.field", f"Field name for record timestamp. {OPTIONALITY_DOC}"
            ),
            _insertion_key("static.field", f"Field name for static data field. {OPTIONALITY_DOC}"),
            _insertion_key("static.value", "Static field value, if field name configured."),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        s = self.settings
        self.topic_field = _Insertion.parse(s["topic.field"])
        self.partition_field = _Insertion.parse(s["partition.field"])
        self.offset_field = _Insertion.parse(s["offset.field"])
        self.timestamp_field = _Insertion.parse(s["timestamp.field"])
        self.static_field = _Insertion.parse(s["static.field"])
        self.static_value = s["static.value"]
        self.replace_null = s["replace.null.with.default"]
        insertions = (
            self.topic_field,
            self.partition_field,
            self.offset_field,
            self.timestamp_field,
            self.static_field,
        )
        if all(i is None for i in insertions):
            raise ConfigError("No field insertion configured")
        if self.static_field is not None and self.static_value is None:
            raise cd.invalid(
                "static.value",
                None,
                f"No value specified for static field: {self.static_field.name}",
            )

    def _insertions(self, record: ConnectRecord) -> list[tuple[_Insertion, Schema, Any]]:
        """(field, its schema when required, value) for each field to insert."""
        out: list[tuple[_Insertion, Schema, Any]] = []
        if self.topic_field is not None:
            out.append((self.topic_field, Schema(STRING), record.topic))
        if self.partition_field is not None:
            out.append((self.partition_field, Schema(INT32), record.kafka_partition))
        if self.offset_field is not None:
            offset = require_sink_record(record, self.PURPOSE).kafka_offset
            out.append((self.offset_field, Schema(INT64), offset))
        if self.timestamp_field is not None:
            out.append((self.timestamp_field, TIMESTAMP_SCHEMA, record.timestamp))
        if self.static_field is not None:
            out.append((self.static_field, Schema(STRING), self.static_value))
        return out

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        if value is None:
            return record
        schema = self.operating_schema(record)
        insertions = self._insertions(record)
        if schema is None:
            updated = dict(require_map(value, self.PURPOSE))
            for insertion, _, inserted in insertions:
                if inserted is not None:
                    updated[insertion.name] = inserted
            return self.with_operand(record, None, updated)
        struct = require_struct(value, self.PURPOSE)
        fields = [(f.name, f.schema) for f in struct.schema.fields]
        fields += [(i.name, dataclasses.replace(s, optional=i.optional)) for i, s, _ in insertions]
        new_schema = struct_schema_like(struct.schema, fields)
        values = {f.name: field_value(struct, f, self.replace_null) for f in struct.schema.fields}
        for insertion, _, inserted in insertions:
            if inserted is not None:
                values[insertion.name] = inserted
        return self.with_operand(record, new_schema, Struct(new_schema, values))


class InsertFieldKey(InsertField):
    SIDE = KEY


class InsertFieldValue(InsertField):
    SIDE = VALUE


# ReplaceField


def parse_renames(mappings: list[str]) -> dict[str, str]:
    renames: dict[str, str] = {}
    for mapping in mappings:
        parts = mapping.split(":")
        if len(parts) != 2:
            raise cd.invalid("renames", java_list(mappings), f"Invalid rename mapping: {mapping}")
        renames[parts[0]] = parts[1]
    return renames


class ReplaceField(SidedTransformation):
    """Filter or rename fields."""

    PURPOSE = "field replacement"
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "exclude",
                cd.LIST,
                "",
                cd.MEDIUM,
                "Fields to exclude. This takes precedence over the fields to include.",
            ),
            cd.ConfigKey(
                "include",
                cd.LIST,
                "",
                cd.MEDIUM,
                "Fields to include. If specified, only these fields will be used.",
            ),
            cd.ConfigKey(
                "renames",
                cd.LIST,
                "",
                cd.MEDIUM,
                "Field rename mappings.",
                check=checked_by(parse_renames),
            ),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.exclude = set(self.settings["exclude"])
        self.include = set(self.settings["include"])
        self.renames = parse_renames(self.settings["renames"])
        self.replace_null = self.settings["replace.null.with.default"]

    def kept(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def renamed(self, name: str) -> str:
        return self.renames.get(name, name)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        if value is None:
            return record
        schema = self.operating_schema(record)
        if schema is None:
            updated = {
                self.renamed(k): v
                for k, v in require_map(value, self.PURPOSE).items()
                if self.kept(k)
            }
            return self.with_operand(record, None, updated)
        struct = require_struct(value, self.PURPOSE)
        kept = [f for f in struct.schema.fields if self.kept(f.name)]
        new_schema = struct_schema_like(
            struct.schema, [(self.renamed(f.name), f.schema) for f in kept]
        )
        values = {self.renamed(f.name): field_value(struct, f, self.replace_null) for f in kept}
        return self.with_operand(record, new_schema, Struct(new_schema, values))


class ReplaceFieldKey(ReplaceField):
    SIDE = KEY


class ReplaceFieldValue(ReplaceField):
    SIDE = VALUE


# MaskField


def _masked_default(value: Any) -> Any:
    if isinstance(value, bool):
        return False
    for kind in (int, float, Decimal, str, list, dict):
        if isinstance(value, kind):
            return kind()
    raise DataException(f"Cannot mask value of type: {type(value).__name__}")


def _masked_with(value: Any, replacement: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise DataException(
            f"Cannot mask value of type {type(value).__name__} with custom replacement."
        )
    if isinstance(value, str):
        return replacement
    try:
        return type(value)(replacement)
    except (ValueError, InvalidOperation):
        raise DataException(f"Unable to convert {replacement} (str) to number") from None


class MaskField(SidedTransformation):
    """Mask specified fields with a valid null value for the field type (0, false, empty
    string...), or a replacement converted to the field's type."""

    PURPOSE = "mask fields"
    CONFIG_DEF = cd.ConfigDef(
        [
            _fields_key("Names of fields to mask."),
            cd.ConfigKey(
                "replacement",
                cd.STRING,
                None,
                cd.LOW,
                "Custom value replacement, that will be applied to all 'fields' values "
                "(numeric or non-empty string values only).",
                check=cd.non_empty,
            ),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.masked_fields = set(self.settings["fields"])
        self.replacement: str | None = self.settings["replacement"]
        self.replace_null = self.settings["replace.null.with.default"]

    def masked(self, value: Any) -> Any:
        if value is None:
            return None
        if self.replacement is None:
            return _masked_default(value)
        return _masked_with(value, self.replacement)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        schema = self.operating_schema(record)
        if schema is None:
            updated = dict(require_map(value, self.PURPOSE))
            for name in self.masked_fields:
                updated[name] = self.masked(updated.get(name))
            return self.with_operand(record, None, updated)
        struct = require_struct(value, self.PURPOSE)
        values = {}
        for f in struct.schema.fields:
            original = field_value(struct, f, self.replace_null)
            values[f.name] = self.masked(original) if f.name in self.masked_fields else original
        return self.with_operand(record, schema, Struct(struct.schema, values))


class MaskFieldKey(MaskField):
    SIDE = KEY


class MaskFieldValue(MaskField):
    SIDE = VALUE


# ValueToKey


class ValueToKey(Transformation):
    """Replace the record key with a new key formed from a subset of fields in the value."""

    PURPOSE = "copying fields from value to key"
    CONFIG_DEF = cd.ConfigDef(
        [
            _fields_key("Field names on the record value to extract as the record key."),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.fields: list[str] = self.settings["fields"]
        self.replace_null = self.settings["replace.null.with.default"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value_schema is None:
            value = require_map(record.value, self.PURPOSE)
            key = {name: value.get(name) for name in self.fields}
            return dataclasses.replace(record, key_schema=None, key=key)
        struct = require_struct(record.value, self.PURPOSE)
        key_fields = []
        for name in self.fields:
            found = struct.schema.field(name)
            if found is None:
                raise DataException(f"Field does not exist: {name}")
            key_fields.append(found)
        key_schema = Schema.struct([(f.name, f.schema) for f in key_fields])
        key_values = {f.name: field_value(struct, f, self.replace_null) for f in key_fields}
        return dataclasses.replace(
            record, key_schema=key_schema, key=Struct(key_schema, key_values)
        )


# ExtractField

FIELD_SYNTAX_VERSION = cd.ConfigKey(
    "field.syntax.version",
    cd.STRING,
    "V1",
    cd.HIGH,
    "Defines the version of the syntax to access fields. If set to `V1`, then the field "
    "paths are limited to access the elements at the root level of the struct or map. If "
    "set to `V2`, the syntax will support accessing nested elements. To access nested "
    "elements, dotted notation is used. If dots are already included in the field name, "
    "then backtick pairs can be used to wrap field names containing dots.",
    check=cd.one_of("V1", "V2", case_sensitive=False),
)
_PATH_STEP = re.compile(r"`((?:[^`]|``)*)`(?=\.|$)|([^.]*)")


def field_path(path: str, syntax_version: str) -> list[str]:
    """The steps of a field path: the name itself in V1; V2's dotted steps, a step in
    backticks keeping its dots (Kafka's KIP-821)."""
    if syntax_version.upper() == "V1":
        return [path]
    steps: list[str] = []
    position = 0
    while position <= len(path):
        match = _PATH_STEP.match(path, position)
        assert match is not None  # the second branch matches the empty string
        quoted, plain = match.groups()
        steps.append(quoted.replace("``", "`") if quoted is not None else plain)
        position = match.end() + 1
    return steps


class ExtractField(SidedTransformation):
    """Extract the specified field from a Struct when schema present, or a Map in the case
    of schemaless data. Any null values are passed through unmodified."""

    PURPOSE = "field extraction"
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey("field", cd.STRING, cd.REQUIRED, cd.MEDIUM, "Field name to extract."),
            REPLACE_NULL_WITH_DEFAULT,
            FIELD_SYNTAX_VERSION,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.original_path: str = self.settings["field"]
        self.path = field_path(self.original_path, self.settings["field.syntax.version"])
        self.replace_null = self.settings["replace.null.with.default"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema = self.operating_schema(record)
        value = self.operating_value(record)
        if schema is None:
            current: Any = None if value is None else require_map(value, self.PURPOSE)
            for step in self.path:
                if not isinstance(current, dict):
                    current = None
                    break
                current = current.get(step)
            return self.with_operand(record, None, current)
        struct = None if value is None else require_struct(value, self.PURPOSE)
        field_schema: Schema | None = schema
        extracted: Any = struct
        for step in self.path:
            found = None if field_schema is None else field_schema.field(step)
            if found is None:
                raise ValueError(f"Unknown field: {self.original_path}")
            field_schema = found.schema
            if isinstance(extracted, Struct):
                extracted = field_value(extracted, found, self.replace_null)
            else:
                extracted = None
        return self.with_operand(record, field_schema, extracted)


class ExtractFieldKey(ExtractField):
    SIDE = KEY


class ExtractFieldValue(ExtractField):
    SIDE = VALUE


# HoistField


class HoistField(SidedTransformation):
    """Wrap data using the specified field name in a Struct when schema present, or a Map
    in the case of schemaless data."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "field",
                cd.STRING,
                cd.REQUIRED,
                cd.MEDIUM,
                "Field name for the single field that will be created in the resulting "
                "Struct or Map.",
            )
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.field_name: str = self.settings["field"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema = self.operating_schema(record)
        value = self.operating_value(record)
        if schema is None:
            return self.with_operand(record, None, {self.field_name: value})
        new_schema = Schema.struct([(self.field_name, schema)])
        return self.with_operand(record, new_schema, Struct(new_schema, {self.field_name: value}))


class HoistFieldKey(HoistField):
    SIDE = KEY


class HoistFieldValue(HoistField):
    SIDE = VALUE


# Flatten

_FLAT_TYPES = (*PRIMITIVE_TYPES, ARRAY)


class Flatten(SidedTransformation):
    """Flatten a nested data structure, naming each field by the field names at each
    level joined with a delimiter. Array fields and their contents are not modified."""

    PURPOSE = "flattening"
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "delimiter",
                cd.STRING,
                ".",
                cd.MEDIUM,
                "Delimiter to insert between field names from the input record when "
                "generating field names for the output record",
            )
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.delimiter: str = self.settings["delimiter"]

    def name(self, prefix: str, field: str) -> str:
        return field if not prefix else prefix + self.delimiter + field

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        if value is None:
            return record
        schema = self.operating_schema(record)
        if schema is None:
            flat: dict[str, Any] = {}
            self._flatten_map(require_map(value, self.PURPOSE), "", flat)
            return self.with_operand(record, None, flat)
        struct = require_struct(value, self.PURPOSE)
        fields: list[tuple[str, Schema]] = []
        self._flatten_schema(schema, "", schema.optional, schema.default, fields)
        new_schema = struct_schema_like(schema, fields)
        values: dict[str, Any] = {}
        self._flatten_struct(struct, "", values)
        return self.with_operand(record, new_schema, Struct(new_schema, values))

    def _flatten_map(self, value: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
        for key, item in value.items():
            name = self.name(prefix, key)
            if isinstance(item, dict):
                self._flatten_map(item, name, out)
            elif isinstance(item, Struct):
                raise DataException(
                    f"Flatten transformation does not support Struct for record without "
                    f"schemas (for field {name})."
                )
            else:
                out[name] = item

    def _flatten_schema(
        self,
        schema: Schema,
        prefix: str,
        optional: bool,
        default: Any,
        out: list[tuple[str, Schema]],
    ) -> None:
        for f in schema.fields:
            name = self.name(prefix, f.name)
            field_optional = optional or f.schema.optional
            field_default = f.schema.default
            if field_default is None and isinstance(default, Struct):
                field_default = default.values.get(f.name)
            if f.schema.type in _FLAT_TYPES:
                out.append(
                    (
                        name,
                        dataclasses.replace(
                            f.schema, optional=field_optional, default=field_default
                        ),
                    )
                )
            elif f.schema.type == STRUCT:
                self._flatten_schema(f.schema, name, field_optional, field_default, out)
            else:
                raise DataException(
                    f"Flatten transformation does not support {f.schema.type.upper()} for "
                    f"record with schemas (for field {name})."
                )

    def _flatten_struct(self, struct: Struct | None, prefix: str, out: dict[str, Any]) -> None:
        if struct is None:
            return
        for f in struct.schema.fields:
            name = self.name(prefix, f.name)
            if f.schema.type == STRUCT:
                self._flatten_struct(field_value(struct, f), name, out)
            else:
                out[name] = field_value(struct, f)


class FlattenKey(Flatten):
    SIDE = KEY


class FlattenValue(Flatten):
    SIDE = VALUE


# HeaderFrom


class HeaderFrom(SidedTransformation):
    """Moves or copies fields in the key/value of a record into that record's headers."""

    CONFIG_DEF = cd.ConfigDef(
        [
            _fields_key(
                "Field names in the record whose values are to be copied or moved to headers."
            ),
            cd.ConfigKey(
                "headers",
                cd.LIST,
                cd.REQUIRED,
                cd.HIGH,
                "Header names, in the same order as the field names listed in the fields "
                "configuration property.",
                check=non_empty_list,
            ),
            cd.ConfigKey(
                "operation",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "Either <code>move</code> if the fields are to be moved to the headers (removed "
                "from the key/value), or <code>copy</code> if the fields are to be copied to the "
                "headers (retained in the key/value).",
                check=cd.one_of("move", "copy"),
            ),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.fields: list[str] = self.settings["fields"]
        self.headers: list[str] = self.settings["headers"]
        if len(self.fields) != len(self.headers):
            raise ConfigError(
                "'fields' config must have the same number of elements as 'headers' config."
            )
        self.move = self.settings["operation"] == "move"
        self.replace_null = self.settings["replace.null.with.default"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        schema = self.operating_schema(record)
        purpose = "header " + ("move" if self.move else "copy")
        headers = list(record.headers)
        if schema is None:
            source = require_map(value, purpose)
            updated = dict(source)
            for field, header in zip(self.fields, self.headers, strict=True):
                if self.move:
                    updated.pop(field, None)
                headers.append((header, SchemaAndValue(None, source.get(field))))
            moved = self.with_operand(record, None, updated)
            return dataclasses.replace(moved, headers=headers)
        struct = require_struct(value, purpose)
        for field, header in zip(self.fields, self.headers, strict=True):
            found = schema.field(field)
            if found is None:
                raise DataException(f"{field} is not a valid field name")
            headers.append(
                (
                    header,
                    SchemaAndValue(found.schema, field_value(struct, found, self.replace_null)),
                )
            )
        new_schema, new_value = schema, struct
        if self.move:
            kept = [f for f in schema.fields if f.name not in self.fields]
            new_schema = struct_schema_like(schema, [(f.name, f.schema) for f in kept])
            new_value = Struct(
                new_schema, {f.name: field_value(struct, f, self.replace_null) for f in kept}
            )
        moved = self.with_operand(record, new_schema, new_value)
        return dataclasses.replace(moved, headers=headers)


class HeaderFromKey(HeaderFrom):
    SIDE = KEY


class HeaderFromValue(HeaderFrom):
    SIDE = VALUE


# SetSchemaMetadata


class SetSchemaMetadata(SidedTransformation):
    """Set the schema name, version or both on the record's key or value schema."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey("schema.name", cd.STRING, None, cd.HIGH, "Schema name to set."),
            cd.ConfigKey("schema.version", cd.INT, None, cd.HIGH, "Schema version to set."),
            REPLACE_NULL_WITH_DEFAULT,
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.schema_name: str | None = self.settings["schema.name"]
        self.schema_version: int | None = self.settings["schema.version"]
        self.replace_null = self.settings["replace.null.with.default"]
        if self.schema_name is None and self.schema_version is None:
            raise ConfigError("Neither schema name nor version configured")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self.operating_value(record)
        schema = self.operating_schema(record)
        if value is None and schema is None:
            return record
        if schema is None:
            raise DataException("Schema required for [updating schema metadata]")
        updated = dataclasses.replace(
            schema,
            name=self.schema_name if self.schema_name is not None else schema.name,
            version=self.schema_version if self.schema_version is not None else schema.version,
        )
        if isinstance(value, Struct):
            value = Struct(
                updated,
                {f.name: field_value(value, f, self.replace_null) for f in updated.fields},
            )
        return self.with_operand(record, updated, value)


class SetSchemaMetadataKey(SetSchemaMetadata):
    SIDE = KEY


class SetSchemaMetadataValue(SetSchemaMetadata):
    SIDE = VALUE
