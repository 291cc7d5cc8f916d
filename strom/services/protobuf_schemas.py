"""Protobuf schemas as the schema registry and the REST proxy meet them: ``.proto`` text
compiled to descriptors, base64 ``FileDescriptorProto`` texts (what confluent-kafka's
serialiser registers), message classes built from descriptors, and the message indexes
of Confluent's Protobuf wire format.

Owns compiling ``.proto`` text with ``protoc`` (grpcio-tools' build, run as a child
process so that its messages can be read and nothing of it stays in the server
process), with the well-known types and the schema's references as imports (``.proto``
text or base64 descriptors); a file that does not compile is a ``ProtoSchemaError``
with protoc's message. The imports Confluent's registry knows without a reference
(``confluent/meta.proto``, ``confluent/type/decimal.proto``, Google's ``google/type/``
files beside protoc's own ``google/protobuf/``) are known here too, from the descriptors
confluent-kafka and googleapis-common-protos ship.

Does not own compatibility (``schema_registry.schemas``) or the registry's client.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import importlib.resources
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

PROTOC_TIMEOUT_S = 60.0
MAIN_PROTO = "schema.proto"


class ProtoSchemaError(ValueError):
    """A Protobuf schema that does not compile or names nothing to encode."""


def file_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto a base64 text holds, or None when it is not one."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped):
        return None
    try:
        data = base64.b64decode(stripped, validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(data)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return proto if proto.message_type or proto.enum_type else None


# Imports Confluent's registry resolves by name alone: file name -> the Python module
# holding its descriptor. protoc itself has google/protobuf/.
_KNOWN_DEPENDENCIES = {
    "confluent/meta.proto": "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent/type/decimal.proto": "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
    **{
        f"google/type/{name}.proto": f"google.type.{name}_pb2"
        for name in (
            "calendar_period", "color", "date", "datetime", "dayofweek", "expr",
            "fraction", "latlng", "money", "month", "postal_address", "quaternion",
            "timeofday",
        )
    },
}  # fmt: skip


def known_dependency(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor of an import Confluent's registry knows by name, or None."""
    module_name = _KNOWN_DEPENDENCIES.get(name)
    if module_name is None:
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)


_SYNTAX_RE = re.compile(r"""^\s*(?:syntax|edition)\s*=\s*["'][^"']*["']\s*;""")


def _with_meta_import(text: str) -> str:
    """The text importing ``confluent/meta.proto`` when it uses its option
    ``(confluent.field_meta)`` without the import (a decimal's precision and scale,
    beside ``confluent/type/decimal.proto``): Confluent's registry takes such a schema."""
    if "(confluent.field_meta)" not in text or "confluent/meta.proto" in text:
        return text
    found = _SYNTAX_RE.match(text)
    at = found.end() if found else 0
    return f'{text[:at]} import "confluent/meta.proto";{text[at:]}'


def compile_proto(
    text: str, imports: dict[str, str] | None = None
) -> descriptor_pb2.FileDescriptorSet:
    """The FileDescriptorSet of ``.proto`` text and everything it imports, the text's own
    file last. ``imports``: import name to its schema (``.proto`` text or a base64
    descriptor); Confluent's known imports need none."""
    text = _with_meta_import(text)
    with tempfile.TemporaryDirectory(prefix="strom-proto-") as folder:
        root = Path(folder)
        source = root / "src"
        source.mkdir()
        known = descriptor_pb2.FileDescriptorSet()
        for name, dependency in (imports or {}).items():
            found = file_descriptor(dependency)
            if found is not None:
                found.name = name
                known.file.append(found)
                continue
            path = (source / name).resolve()
            if source not in path.parents:
                raise ProtoSchemaError(f"reference name {name!r} is not a relative path")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dependency)
        named = [text, *(imports or {}).values()]
        for name in _KNOWN_DEPENDENCIES:
            quoted = (f'"{name}"', f"'{name}'")
            if name not in (imports or {}) and any(q in t for t in named for q in quoted):
                found = known_dependency(name)
                if found is not None:
                    known.file.append(found)
        (source / MAIN_PROTO).write_text(text)
        well_known = importlib.resources.files("grpc_tools") / "_proto"
        command = [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{source}", f"-I{well_known}",
            "--include_imports", f"--descriptor_set_out={root / 'out.pb'}", MAIN_PROTO,
        ]  # fmt: skip
        if known.file:
            (root / "known.pb").write_bytes(known.SerializeToString())
            command.insert(3, f"--descriptor_set_in={root / 'known.pb'}")
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise ProtoSchemaError("protoc took too long") from None
        if done.returncode != 0:
            problems = [
                line.replace(f"{source}/", "")
                for line in done.stderr.splitlines()
                if ":" in line and "absl::InitializeLog" not in line and " W0000 " not in line
            ]
            raise ProtoSchemaError("; ".join(problems[-3:]) or f"protoc exit {done.returncode}")
        files = descriptor_pb2.FileDescriptorSet.FromString((root / "out.pb").read_bytes())
    main = files.file[-1]
    if not (main.message_type or main.enum_type):
        raise ProtoSchemaError("no message or enum definition")
    return files


def message_class(files: descriptor_pb2.FileDescriptorSet, indexes: list[int]) -> type[Message]:
    """The message class at ``indexes`` (Confluent's path: a top-level message's index in
    the last file, then nested indexes) of a FileDescriptorSet."""
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    main = files.file[-1]
    try:
        message = main.message_type[indexes[0]]
        path = [message.name]
        for index in indexes[1:]:
            message = message.nested_type[index]
            path.append(message.name)
    except IndexError:
        raise ProtoSchemaError(f"no message at indexes {indexes}") from None
    full_name = ".".join(([main.package] if main.package else []) + path)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _zigzag(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_indexes(indexes: list[int]) -> bytes:
    """Confluent's message indexes: [0] (the first message) is one 0 byte, otherwise a
    zigzag varint count and the indexes as zigzag varints."""
    if indexes == [0]:
        return b"\x00"
    return _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)


def decode_indexes(data: bytes, position: int) -> tuple[list[int], int]:
    """(message indexes, position after them) read at ``position`` of ``data``."""

    def varint() -> int:
        nonlocal position
        shift = result = 0
        while True:
            if position >= len(data):
                raise ProtoSchemaError("truncated message indexes")
            byte = data[position]
            position += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7

    count = varint()
    if count == 0:
        return [0], position
    return [varint() for _ in range(count)], position
