"""The REST proxy's Protobuf records (``application/vnd.kafka.protobuf.v2+json``): a
record's JSON value encoded as the message its schema names, in Confluent's Protobuf
wire format (a 0 byte, the schema id, the message indexes, the message), and such
records decoded back to JSON for consumer instances of format ``protobuf``.

Decoded messages keep their field names and show fields at their default values
(proto3 leaves those off the wire). A schema sent as ``.proto`` text is registered
under the topic's subject (as a serialiser registers it) and compiled; the first
message of the file is the one encoded, as Confluent's proxy does. A schema named by id
is fetched from the registry (``.proto`` text or a base64 descriptor, with its
references). Message classes are built once per schema and cached.

Does not own compiling schemas (``protobuf_schemas``) or the HTTP routes (``app``).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format

from strom.services.protobuf_schemas import (
    ProtoSchemaError,
    compile_proto,
    decode_indexes,
    encode_indexes,
    file_descriptor,
    message_class,
)

_HEADER = struct.Struct(">bI")


class ProtobufRecords:
    def __init__(self, client: Any) -> None:
        """``client``: a confluent-kafka SchemaRegistryClient."""
        self.client = client
        self._files: dict[int, descriptor_pb2.FileDescriptorSet] = {}
        self._lock = threading.Lock()

    def files(self, schema_id: int) -> descriptor_pb2.FileDescriptorSet:
        """The FileDescriptorSet of a registered schema, its own file last."""
        with self._lock:
            found = self._files.get(schema_id)
        if found is None:
            registered = self.client.get_schema(schema_id)
            found = self._compile(registered.schema_str, registered.references or [])
            with self._lock:
                self._files[schema_id] = found
        return found

    def _compile(self, text: str, references: list[Any]) -> descriptor_pb2.FileDescriptorSet:
        imports = {
            ref.name: self.client.get_version(ref.subject, ref.version).schema.schema_str
            for ref in references
        }
        proto = file_descriptor(text)
        if proto is None:
            return compile_proto(text, imports)
        files = descriptor_pb2.FileDescriptorSet()
        for name, dependency in imports.items():
            compiled = file_descriptor(dependency) or compile_proto(dependency).file[-1]
            compiled.name = name
            files.file.append(compiled)
        present = {f.name for f in files.file}
        for dependency in proto.dependency:  # well-known types, from protobuf's own pool
            if dependency not in present:
                _add_well_known(files, dependency)
        files.file.append(proto)
        return files

    def encoder(
        self, subject: str, schema: str | None, schema_id: int | None
    ) -> tuple[int, Callable[[Any], bytes]]:
        """(schema id, a function from a record's JSON value to its bytes)."""
        from confluent_kafka.schema_registry import Schema

        if schema is not None:
            schema_id = self.client.register_schema(subject, Schema(schema, "PROTOBUF"))
        assert schema_id is not None
        cls = message_class(self.files(schema_id), [0])
        header = _HEADER.pack(0, schema_id) + encode_indexes([0])

        def encode(value: Any) -> bytes:
            try:
                message = json_format.ParseDict(value, cls())
            except json_format.ParseError as exc:
                raise ValueError(str(exc)) from None
            return header + message.SerializeToString()

        return schema_id, encode

    def decode(self, data: bytes) -> Any:
        """A record in the wire format as the JSON of its message."""
        if len(data) < _HEADER.size or data[0] != 0:
            raise ProtoSchemaError("not in Confluent's wire format")
        _, schema_id = _HEADER.unpack_from(data)
        indexes, position = decode_indexes(data, _HEADER.size)
        cls = message_class(self.files(schema_id), indexes)
        message = cls.FromString(data[position:])
        return json_format.MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )


def _add_well_known(files: descriptor_pb2.FileDescriptorSet, name: str) -> None:
    """Add ``name`` (and what it imports) from protobuf's default pool, if it is there."""
    import google.protobuf.any_pb2  # noqa: F401  (register the well-known files)
    import google.protobuf.duration_pb2  # noqa: F401
    import google.protobuf.struct_pb2  # noqa: F401
    import google.protobuf.timestamp_pb2  # noqa: F401
    import google.protobuf.wrappers_pb2  # noqa: F401

    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise ProtoSchemaError(f"import {name!r} is neither a reference nor well known") from None
    for dependency in found.dependencies:
        if dependency.name not in {f.name for f in files.file}:
            _add_well_known(files, dependency.name)
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    files.file.append(proto)
