"""What a single message transform and a predicate are (Kafka's ``Transformation`` and
``Predicate``), and what the transforms share.

A transformation is configured once with its settings (the connector's
``transforms.<alias>.`` keys, prefix stripped; a bad one is a ``ConfigError`` in Kafka's
words) and then maps one record to a new record, or to None to drop it. A predicate
answers true or false for a record. Both declare their settings as a ``CONFIG_DEF``,
which ``/config/validate`` reads.

Kafka's ``X$Key`` and ``X$Value`` variants are one class each here with ``SIDE`` set to
``KEY`` or ``VALUE``; ``operating_schema``, ``operating_value`` and ``with_operand`` read
and replace that side of a record. ``require_map``, ``require_struct`` and
``require_sink_record`` raise Kafka's ``DataException`` messages (with Python's type
names where Kafka names Java classes).

Does not own the transforms themselves (``fields``, ``casts``, ``routing``,
``predicates``) or chaining them (``chain``).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from strom.connect import config_def as cd
from strom.connect.api import SinkRecord, SourceRecord
from strom.connect.data import DataException, Field, Schema, Struct

ConnectRecord = SourceRecord | SinkRecord
KEY = "key"
VALUE = "value"

REPLACE_NULL_WITH_DEFAULT = cd.ConfigKey(
    "replace.null.with.default",
    cd.BOOLEAN,
    True,
    cd.MEDIUM,
    "Whether to replace fields that have a default value and that are null to the default "
    "value. When set to true, the default value is used, otherwise null is used.",
)


def checked_by(parse: Callable[[Any], object]) -> Callable[[str, Any], None]:
    """A setting's check that is parsing it (the ConfigError ``parse`` raises)."""

    def check(name: str, value: Any) -> None:
        parse(value)

    return check


def java_list(values: list[str]) -> str:
    """A list as Java prints it in Kafka's messages: ``[a, b]``."""
    return "[" + ", ".join(values) + "]"


def type_name(value: Any) -> str:
    """The name Kafka's messages give a value's class (``null`` for None)."""
    return "null" if value is None else type(value).__name__


def require_map(value: Any, purpose: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DataException(
            f"Only Map objects supported in absence of schema for [{purpose}], "
            f"found: {type_name(value)}"
        )
    return value


def require_struct(value: Any, purpose: str) -> Struct:
    if not isinstance(value, Struct):
        raise DataException(
            f"Only Struct objects supported for [{purpose}], found: {type_name(value)}"
        )
    return value


def require_sink_record(record: ConnectRecord, purpose: str) -> SinkRecord:
    if not isinstance(record, SinkRecord):
        raise DataException(
            f"Only SinkRecord supported for [{purpose}], found: {type_name(record)}"
        )
    return record


def field_value(struct: Struct, field: Field, replace_null_with_default: bool = True) -> Any:
    """A struct's value for ``field``; its schema's default for a null when asked (Kafka's
    ``Struct.get`` against ``getWithoutDefault``)."""
    value = struct.values.get(field.name)
    if value is None and replace_null_with_default:
        return field.schema.default
    return value


def struct_schema_like(schema: Schema, fields: list[tuple[str, Schema]]) -> Schema:
    """A struct schema with ``schema``'s name, version, doc and parameters and the fields
    given (Kafka's ``SchemaUtil.copySchemaBasics`` onto a new struct: not its optionality)."""
    built = Schema.struct(fields)
    return Schema(
        built.type,
        name=schema.name,
        version=schema.version,
        doc=schema.doc,
        parameters=schema.parameters,
        fields=built.fields,
    )


class Configurable:
    """A plugin configured from its own settings, declared in ``CONFIG_DEF``."""

    CONFIG_DEF: ClassVar[cd.ConfigDef] = cd.ConfigDef()

    def configure(self, props: Mapping[str, Any]) -> None:
        """Parse the settings (ConfigError naming a bad one) and keep what they mean."""
        self.settings = self.CONFIG_DEF.parse(props)

    def close(self) -> None:
        """Release what ``configure`` took."""


class Transformation(Configurable):
    """One single message transform."""

    @abstractmethod
    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """The transformed record; None drops it."""


class Predicate(Configurable):
    """A condition on a record that decides whether a transform applies."""

    @abstractmethod
    def test(self, record: ConnectRecord) -> bool: ...


class SidedTransformation(Transformation):
    """A transform that works on the key (``X$Key``) or the value (``X$Value``)."""

    SIDE: ClassVar[str] = VALUE

    def operating_schema(self, record: ConnectRecord) -> Schema | None:
        return record.key_schema if self.SIDE == KEY else record.value_schema

    def operating_value(self, record: ConnectRecord) -> Any:
        return record.key if self.SIDE == KEY else record.value

    def with_operand(
        self, record: ConnectRecord, schema: Schema | None, value: Any
    ) -> ConnectRecord:
        """``record`` with this side's schema and value replaced."""
        if self.SIDE == KEY:
            return dataclasses.replace(record, key_schema=schema, key=value)
        return dataclasses.replace(record, value_schema=schema, value=value)
