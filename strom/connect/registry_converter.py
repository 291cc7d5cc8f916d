"""What the schema registry's Protobuf and JSON Schema converters share: their settings
(the AvroConverter's: ``schema.registry.url``, ``auto.register.schemas``,
``use.latest.version``, basic auth, a PEM truststore), the subject of a topic's key or
value (TopicNameStrategy: ``<topic>-key`` / ``<topic>-value``), Confluent's wire header (a
zero byte and the schema id in four bytes), and the registry calls they make: register a
schema of a type, the subject's latest, a schema by id with its references (each fetched
once, cached).

Does not own a format's mapping of Connect schemas (``protobuf_converter``,
``json_schema_converter``) or the Avro converter (``avro_converter``), whose client this
one extends.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaReference

from strom.connect.avro_converter import AvroConverter, RegistryClient, _credentials_in
from strom.connect.converters import Converter
from strom.connect.data import DataException

MAGIC = 0
HEADER = struct.Struct(">bI")
WRITER_CACHE_SIZE = 1000


class TypedRegistryClient(RegistryClient):
    """The registry calls of a converter whose schemas are not Avro."""

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        self.texts: dict[int, RegistrySchema] = {}

    def register_typed(
        self, subject: str, text: str, schema_type: str, references: list[SchemaReference]
    ) -> int:
        schema = RegistrySchema(text, schema_type, references)
        return self._call(
            f"register under {subject}", lambda: self.client.register_schema(subject, schema)
        )

    def schema(self, schema_id: int) -> RegistrySchema:
        """The schema the id names (text, type, references), fetched once."""
        with self.lock:
            known = self.texts.get(schema_id)
        if known is not None:
            return known
        found = self._call(f"schema {schema_id}", lambda: self.client.get_schema(schema_id))
        with self.lock:
            self.texts[schema_id] = found
        return found

    def reference(self, reference: SchemaReference) -> RegistrySchema:
        """The schema a reference names (its subject and version)."""
        found = self._call(
            f"reference {reference.subject} version {reference.version}",
            lambda: self.client.get_version(
                str(reference.subject),
                reference.version if reference.version is not None else "latest",
            ),
        )
        return found.schema


class RegistryConverter(Converter):
    """A converter writing Confluent's wire format with schemas from a registry."""

    CONFIG_DEF = AvroConverter.CONFIG_DEF
    FORMAT = ""  # the name in messages: Protobuf, JSON Schema

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        super().configure(configs, is_key)
        url, in_url = _credentials_in(str(self.settings["schema.registry.url"]))
        user_info = (
            self.settings["basic.auth.user.info"]
            or self.settings["schema.registry.basic.auth.user.info"]
        )
        if self.settings["basic.auth.credentials.source"].upper() == "URL":
            user_info = in_url or user_info
        settings: dict[str, Any] = {"url": url}
        if user_info:
            settings["basic.auth.user.info"] = str(user_info)
        truststore = self.settings["schema.registry.ssl.truststore.location"]
        if truststore:
            settings["ssl.ca.location"] = truststore
        self.registry = TypedRegistryClient(settings)
        self.auto_register = bool(self.settings["auto.register.schemas"])
        self.use_latest = bool(self.settings["use.latest.version"])
        self.cache_lock = threading.Lock()

    def subject(self, topic: str) -> str:
        return f"{topic}-{'key' if self.is_key else 'value'}"

    def schema_id(self, topic: str) -> int | None:
        """The latest id of the topic's subject when the converter writes with it
        (``use.latest.version``, or ``auto.register.schemas=false``), else None."""
        if self.use_latest or not self.auto_register:
            schema_id, _ = self.registry.latest(self.subject(topic))
            return schema_id
        return None

    def header(self, topic: str, data: bytes) -> int:
        """The schema id of framed bytes; Confluent's message when they are not framed."""
        if len(data) < HEADER.size or data[0] != MAGIC:
            raise DataException(
                f"Failed to deserialize data for topic {topic} to {self.FORMAT}: "
                "Unknown magic byte!"
            )
        return int(HEADER.unpack_from(data)[1])
