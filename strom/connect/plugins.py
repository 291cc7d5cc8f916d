"""Which plugin a class name means: Strom's own names, with the Kafka (or vendor) class
names users have as aliases, and Kafka's short aliases of either (the simple class name,
and that name without its ``Connector`` or ``Converter`` suffix: ``FileStreamSource``,
``JsonConverter``, ``Json``), as Kafka's plugin scanner makes them.

Owns the built-in plugins (the FileStream connectors; the Json, String and ByteArray
converters), looking one up (an unknown connector class is Kafka's message naming the
class and listing the ones there are), and the ``/connector-plugins`` listing, which
shows a plugin by the Kafka class name where it has one (the name users' scripts and
tools look for) and by Strom's name otherwise.

Does not own what a plugin does (``connectors``, ``converters``) or running it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from strom.connect.api import Connector, SinkConnector, SourceConnector, strom_version
from strom.connect.avro_converter import AvroConverter
from strom.connect.config_def import ConfigDef
from strom.connect.connectors.file_stream import (
    FileStreamSinkConnector,
    FileStreamSourceConnector,
)
from strom.connect.connectors.jdbc_sink import JdbcSinkConnector
from strom.connect.connectors.jdbc_source import JdbcSourceConnector
from strom.connect.connectors.lake_sink import (
    Hdfs3SinkConnector,
    HdfsSinkConnector,
    LakeSinkConnector,
)
from strom.connect.connectors.postgres_cdc import PostgresConnector
from strom.connect.converters import (
    ByteArrayConverter,
    JsonConverter,
    StringConverter,
)
from strom.connect.json_schema_converter import JsonSchemaConverter
from strom.connect.protobuf_converter import ProtobufConverter
from strom.connect.transforms import casts, fields, predicates, routing

SOURCE = "source"
SINK = "sink"
CONVERTER = "converter"
TRANSFORMATION = "transformation"
PREDICATE = "predicate"
_SUFFIXES = {
    SOURCE: "Connector",
    SINK: "Connector",
    CONVERTER: "Converter",
    TRANSFORMATION: "Transformation",
    PREDICATE: "Predicate",
}
# Kafka's class name of each transform and predicate Strom serves, by its Python class.
_KAFKA_TRANSFORMS = "org.apache.kafka.connect.transforms."
_SIDED_TRANSFORMS = (
    "Cast",
    "ExtractField",
    "Flatten",
    "HeaderFrom",
    "HoistField",
    "InsertField",
    "MaskField",
    "ReplaceField",
    "SetSchemaMetadata",
    "TimestampConverter",
)


def _transforms() -> list[tuple[type, str]]:
    """Each transform class with Kafka's name (``X$Key`` / ``X$Value`` for the sided)."""
    found: list[tuple[type, str]] = []
    for module in (fields, casts):
        for name in _SIDED_TRANSFORMS:
            for side in ("Key", "Value"):
                if hasattr(module, name + side):
                    cls = getattr(module, name + side)
                    found.append((cls, f"{_KAFKA_TRANSFORMS}{name}${side}"))
    found.append((fields.ValueToKey, _KAFKA_TRANSFORMS + "ValueToKey"))
    unsided = (
        routing.RegexRouter,
        routing.TimestampRouter,
        routing.Filter,
        routing.DropHeaders,
        routing.InsertHeader,
    )
    found += [(cls, _KAFKA_TRANSFORMS + cls.__name__) for cls in unsided]
    return found


def _predicates() -> list[tuple[type, str]]:
    classes = (predicates.TopicNameMatches, predicates.HasHeaderKey, predicates.RecordIsTombstone)
    return [(cls, f"{_KAFKA_TRANSFORMS}predicates.{cls.__name__}") for cls in classes]


class PluginNotFound(LookupError):
    """No plugin of the kind asked has that name; the message is Kafka's."""


@dataclass(frozen=True)
class Plugin:
    """One plugin: Strom's class name, its kind, its Python class, and Kafka's name."""

    name: str
    kind: str
    cls: type
    kafka_name: str | None = None

    @property
    def listed_name(self) -> str:
        return self.kafka_name or self.name

    def names(self) -> list[str]:
        """Every name this plugin answers to: full names, simple names, pruned names."""
        names: list[str] = []
        suffix = _SUFFIXES[self.kind]
        for full in filter(None, (self.name, self.kafka_name)):
            simple = full.rsplit(".", 1)[-1]
            names += [full, simple]
            if simple.endswith(suffix) and len(simple) > len(suffix):
                names.append(simple[: -len(suffix)])
        return names

    def config_def(self) -> ConfigDef:
        """The settings the plugin declares (a connector's own, without the common ones)."""
        if self.kind in (CONVERTER, TRANSFORMATION, PREDICATE):
            return cast(ConfigDef, getattr(self.cls, "CONFIG_DEF"))  # noqa: B009
        return cast(Connector, self.cls()).config()

    def info(self) -> dict[str, Any]:
        """As ``GET /connector-plugins`` lists it."""
        return {"class": self.listed_name, "type": self.kind, "version": strom_version()}


def _connector_kind(cls: type) -> str:
    if issubclass(cls, SourceConnector):
        return SOURCE
    if issubclass(cls, SinkConnector):
        return SINK
    raise TypeError(f"{cls.__name__} is neither a source nor a sink connector")


class Plugins:
    """The plugins a worker knows, by every name they answer to."""

    def __init__(self, plugins: Iterable[Plugin]) -> None:
        self.plugins = list(plugins)
        self._by_name: dict[str, Plugin] = {}
        for plugin in self.plugins:
            for name in plugin.names():
                self._by_name.setdefault(name, plugin)

    @classmethod
    def builtin(cls) -> Plugins:
        def own(python_class: type) -> str:
            return f"{python_class.__module__}.{python_class.__qualname__}"

        connectors = [
            (FileStreamSourceConnector, "org.apache.kafka.connect.file.FileStreamSourceConnector"),
            (FileStreamSinkConnector, "org.apache.kafka.connect.file.FileStreamSinkConnector"),
            (JdbcSourceConnector, "io.confluent.connect.jdbc.JdbcSourceConnector"),
            (JdbcSinkConnector, "io.confluent.connect.jdbc.JdbcSinkConnector"),
            (PostgresConnector, "io.debezium.connector.postgresql.PostgresConnector"),
            (LakeSinkConnector, None),
            (Hdfs3SinkConnector, "io.confluent.connect.hdfs3.Hdfs3SinkConnector"),
            (HdfsSinkConnector, "io.confluent.connect.hdfs.HdfsSinkConnector"),
        ]
        converters = [
            (JsonConverter, "org.apache.kafka.connect.json.JsonConverter"),
            (StringConverter, "org.apache.kafka.connect.storage.StringConverter"),
            (ByteArrayConverter, "org.apache.kafka.connect.converters.ByteArrayConverter"),
            (AvroConverter, "io.confluent.connect.avro.AvroConverter"),
            (ProtobufConverter, "io.confluent.connect.protobuf.ProtobufConverter"),
            (JsonSchemaConverter, "io.confluent.connect.json.JsonSchemaConverter"),
        ]
        return cls(
            [Plugin(own(c), _connector_kind(c), c, kafka) for c, kafka in connectors]
            + [Plugin(own(c), CONVERTER, c, kafka) for c, kafka in converters]
            + [Plugin(own(c), TRANSFORMATION, c, kafka) for c, kafka in _transforms()]
            + [Plugin(own(c), PREDICATE, c, kafka) for c, kafka in _predicates()]
        )

    def find(self, name: str, kinds: tuple[str, ...]) -> Plugin | None:
        plugin = self._by_name.get(name.strip())
        return plugin if plugin is not None and plugin.kind in kinds else None

    def of_kinds(self, kinds: tuple[str, ...]) -> list[Plugin]:
        return [plugin for plugin in self.plugins if plugin.kind in kinds]

    def connector(self, name: str) -> Plugin:
        plugin = self.find(name, (SOURCE, SINK))
        if plugin is None:
            available = ", ".join(p.listed_name for p in self.of_kinds((SOURCE, SINK)))
            raise PluginNotFound(
                "Failed to find any class that implements Connector and which name matches "
                f"{name}, available connectors are: {available}"
            )
        return plugin

    def converter(self, name: str) -> Plugin:
        plugin = self.find(name, (CONVERTER,))
        if plugin is None:
            raise PluginNotFound(f"Class {name} could not be found.")
        return plugin

    def transformation(self, name: str) -> Plugin | None:
        return self.find(name, (TRANSFORMATION,))

    def predicate(self, name: str) -> Plugin | None:
        return self.find(name, (PREDICATE,))

    def listing(self, connectors_only: bool = True) -> list[dict[str, Any]]:
        everything = (SINK, SOURCE, CONVERTER, TRANSFORMATION, PREDICATE)
        kinds = (SINK, SOURCE) if connectors_only else everything
        ordered = sorted(self.of_kinds(kinds), key=lambda p: (kinds.index(p.kind), p.listed_name))
        return [plugin.info() for plugin in ordered]
