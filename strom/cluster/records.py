"""Kafka's metadata records, as they are written in ``__cluster_metadata`` record values.

Owns the record types of Kafka's ``metadata/src/main/resources/common/metadata/*.json``
(RegisterBrokerRecord, TopicRecord, PartitionRecord, PartitionChangeRecord, ConfigRecord,
BrokerRegistrationChangeRecord, FeatureLevelRecord, ProducerIdsRecord... see
``RECORD_TYPES``) as frozen dataclasses, and their framing, byte for byte as Kafka's
``MetadataRecordSerde`` writes it::

    unsigned varint  frame version (1)
    unsigned varint  api key
    unsigned varint  record version
    body             flexible-version message encoding: compact strings and arrays,
                     tagged fields (written in tag order, omitted when at default)

The bodies go through kio's ``entity_writer``/``entity_reader``: every record class is
declared the way kio declares its generated messages (``kafka_type`` and ``tag`` field
metadata, ``__flexible__``). A field that exists only from some version on carries
``"versions": (low, high)`` in its metadata; for a version whose fields differ from the
latest one a narrower class is derived once (``_layout``) and converted on the way in and
out. Tagged fields are accepted in every version (tags are self-describing), so a record
read back never loses one; an unknown tag or a version newer than this module knows is
a ``MetadataRecordError``.

The version written by default is the one Kafka writes at metadata.version 4.0-IV3
(``METADATA_VERSION_LEVEL``): PartitionRecord and PartitionChangeRecord v2,
RegisterBrokerRecord v3, BrokerRegistrationChangeRecord the lowest version holding the
fields it sets. Every older version is decoded, and can be encoded on request.

Does not own: the record batches around these values (``strom.storage.metadata_log``),
what replaying a record means (``strom.cluster.image``), or when records are written
(``strom.cluster.quorum_controller``).
"""

# No ``from __future__ import annotations``: kio reads the field types at run time.

import io
import uuid
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields, make_dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, dataclass_transform

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

FRAME_VERSION = 1

METADATA_VERSION_FEATURE = "metadata.version"
# metadata.version feature levels, as Kafka's MetadataVersion numbers them.
METADATA_VERSION_LEVELS: dict[str, int] = {
    "3.3-IV3": 7,
    "3.4-IV0": 8,
    "3.5-IV2": 11,
    "3.6-IV2": 14,
    "3.7-IV4": 19,
    "3.8-IV0": 20,
    "3.9-IV0": 21,
    "4.0-IV0": 22,
    "4.0-IV1": 23,
    "4.0-IV2": 24,
    "4.0-IV3": 25,
}
METADATA_VERSION_LEVEL = METADATA_VERSION_LEVELS["4.0-IV3"]

# Kafka's DirectoryId reserved values (a replica's log directory before assignment).
DIRECTORY_MIGRATING = uuid.UUID(int=0)
DIRECTORY_UNASSIGNED = uuid.UUID(int=1)
DIRECTORY_LOST = uuid.UUID(int=2)

ZERO_UUID = uuid.UUID(int=0)


class MetadataRecordError(ValueError):
    """Bytes that are not a metadata record this module can read."""


# Field declarations --------------------------------------------------------------


def _f(kafka_type: str, default: Any = MISSING, **extra: Any) -> Any:
    metadata = {"kafka_type": kafka_type, **extra}
    if default is MISSING:
        return field(metadata=metadata)
    return field(metadata=metadata, default=default)


def _tagged(kafka_type: str, tag: int, default: Any, **extra: Any) -> Any:
    return field(metadata={"kafka_type": kafka_type, "tag": tag, **extra}, default=default)


def _nested(default: Any = (), **extra: Any) -> Any:
    return field(metadata=dict(extra), default=default)


_T = TypeVar("_T")


@dataclass_transform(
    frozen_default=True, kw_only_default=True, field_specifiers=(_f, _tagged, _nested)
)
def _record(cls: type[_T]) -> type[_T]:
    """A record or entity class: a frozen, slotted, keyword-only dataclass (declared so
    that type checkers see the fields ``_f``, ``_tagged`` and ``_nested`` make)."""
    return dataclass(frozen=True, slots=True, kw_only=True)(cls)


class _Entity:
    """What kio's serializers look up on a class (no slots: subclasses add theirs)."""

    __slots__ = ()
    if TYPE_CHECKING:  # what the dataclass decorator sets on every record and entity
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    __type__: ClassVar = EntityType.nested
    __flexible__: ClassVar[bool] = True
    __version__: ClassVar[int] = 0


class MetadataRecord(_Entity):
    """Base of every record: its api key, the versions it has, the version written."""

    __slots__ = ()
    __type__: ClassVar = EntityType.data
    API_KEY: ClassVar[int] = -1
    MAX_VERSION: ClassVar[int] = 0
    WRITE_VERSION: ClassVar[int] = 0

    def write_version(self) -> int:
        """The version ``encode_record`` uses when none is asked for."""
        return self.WRITE_VERSION


# Nested entities -------------------------------------------------------------------


@_record
class BrokerEndpoint(_Entity):
    name: str = _f("string")
    host: str = _f("string")
    port: int = _f("uint16")
    security_protocol: int = _f("int16")


@_record
class BrokerFeature(_Entity):
    name: str = _f("string")
    min_supported_version: int = _f("int16")
    max_supported_version: int = _f("int16")


@_record
class ControllerEndpoint(_Entity):
    name: str = _f("string")
    host: str = _f("string")
    port: int = _f("uint16")
    security_protocol: int = _f("int16")


@_record
class ControllerFeature(_Entity):
    name: str = _f("string")
    min_supported_version: int = _f("int16")
    max_supported_version: int = _f("int16")


@_record
class EntityData(_Entity):
    entity_type: str = _f("string")
    entity_name: str | None = _f("string")


# Records ---------------------------------------------------------------------------


@_record
class RegisterBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 3
    WRITE_VERSION: ClassVar[int] = 3
    broker_id: int = _f("int32")
    is_migrating_zk_broker: bool = _f("bool", default=False, versions=(2, None))
    incarnation_id: uuid.UUID = _f("uuid")
    broker_epoch: int = _f("int64")
    end_points: tuple[BrokerEndpoint, ...] = _nested(default=())
    features: tuple[BrokerFeature, ...] = _nested(default=())
    rack: str | None = _f("string", default=None)
    fenced: bool = _f("bool", default=True)
    in_controlled_shutdown: bool = _f("bool", default=False, versions=(1, None))
    log_dirs: tuple[uuid.UUID, ...] = _tagged("uuid", 0, default=(), versions=(3, None))


@_record
class UnregisterBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 1
    broker_id: int = _f("int32")
    broker_epoch: int = _f("int64")


@_record
class TopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 2
    name: str = _f("string")
    topic_id: uuid.UUID = _f("uuid")


@_record
class PartitionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 3
    MAX_VERSION: ClassVar[int] = 2
    WRITE_VERSION: ClassVar[int] = 2
    partition_id: int = _f("int32", default=-1)
    topic_id: uuid.UUID = _f("uuid")
    replicas: tuple[int, ...] = _f("int32", default=())
    isr: tuple[int, ...] = _f("int32", default=())
    removing_replicas: tuple[int, ...] = _f("int32", default=())
    adding_replicas: tuple[int, ...] = _f("int32", default=())
    leader: int = _f("int32", default=-1)
    leader_recovery_state: int = _tagged("int8", 0, default=0)
    leader_epoch: int = _f("int32", default=-1)
    partition_epoch: int = _f("int32", default=-1)
    directories: tuple[uuid.UUID, ...] = _f("uuid", default=(), versions=(1, None))
    eligible_leader_replicas: tuple[int, ...] | None = _tagged(
        "int32", 1, default=None, versions=(2, None)
    )
    last_known_elr: tuple[int, ...] | None = _tagged("int32", 2, default=None, versions=(2, None))


@_record
class ConfigRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 4
    resource_type: int = _f("int8")
    resource_name: str = _f("string")
    name: str = _f("string")
    value: str | None = _f("string", default=None)


@_record
class PartitionChangeRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 5
    MAX_VERSION: ClassVar[int] = 2
    WRITE_VERSION: ClassVar[int] = 2
    partition_id: int = _f("int32", default=-1)
    topic_id: uuid.UUID = _f("uuid")
    isr: tuple[int, ...] | None = _tagged("int32", 0, default=None)
    leader: int = _tagged("int32", 1, default=-2)
    replicas: tuple[int, ...] | None = _tagged("int32", 2, default=None)
    removing_replicas: tuple[int, ...] | None = _tagged("int32", 3, default=None)
    adding_replicas: tuple[int, ...] | None = _tagged("int32", 4, default=None)
    leader_recovery_state: int = _tagged("int8", 5, default=-1)
    eligible_leader_replicas: tuple[int, ...] | None = _tagged(
        "int32", 6, default=None, versions=(2, None)
    )
    last_known_elr: tuple[int, ...] | None = _tagged("int32", 7, default=None, versions=(2, None))
    directories: tuple[uuid.UUID, ...] | None = _tagged("uuid", 8, default=None, versions=(1, None))


@_record
class FenceBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 7
    id: int = _f("int32")
    epoch: int = _f("int64")


@_record
class UnfenceBrokerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 8
    id: int = _f("int32")
    epoch: int = _f("int64")


@_record
class RemoveTopicRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 9
    topic_id: uuid.UUID = _f("uuid")


@_record
class UserScramCredentialRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 11
    name: str = _f("string")
    mechanism: int = _f("int8")
    salt: bytes = _f("bytes")
    stored_key: bytes = _f("bytes")
    server_key: bytes = _f("bytes")
    iterations: int = _f("int32")


@_record
class FeatureLevelRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 12
    name: str = _f("string")
    feature_level: int = _f("int16")


@_record
class ClientQuotaRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 14
    entity: tuple[EntityData, ...] = _nested(default=())
    key: str = _f("string")
    value: float = _f("float64")
    remove: bool = _f("bool", default=False)


@_record
class ProducerIdsRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 15
    broker_id: int = _f("int32")
    broker_epoch: int = _f("int64", default=-1)
    next_producer_id: int = _f("int64")


@_record
class BrokerRegistrationChangeRecord(MetadataRecord):
    """Fenced: -1 unfenced, 0 no change, 1 fenced. InControlledShutdown: 0 or 1."""

    API_KEY: ClassVar[int] = 17
    MAX_VERSION: ClassVar[int] = 2
    WRITE_VERSION: ClassVar[int] = 2
    broker_id: int = _f("int32")
    broker_epoch: int = _f("int64")
    fenced: int = _tagged("int8", 0, default=0)
    in_controlled_shutdown: int = _tagged("int8", 1, default=0, versions=(1, None))
    log_dirs: tuple[uuid.UUID, ...] = _tagged("uuid", 2, default=(), versions=(2, None))

    def write_version(self) -> int:
        # Kafka writes the lowest version that holds the change (v0 for fencing).
        if self.log_dirs:
            return 2
        return 1 if self.in_controlled_shutdown else 0


@_record
class AccessControlEntryRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 18
    id: uuid.UUID = _f("uuid")
    resource_type: int = _f("int8")
    resource_name: str = _f("string")
    pattern_type: int = _f("int8")
    principal: str = _f("string")
    host: str = _f("string")
    operation: int = _f("int8")
    permission_type: int = _f("int8")


@_record
class RemoveAccessControlEntryRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 19
    id: uuid.UUID = _f("uuid")


@_record
class NoOpRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 20


@_record
class RemoveUserScramCredentialRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 22
    name: str = _f("string")
    mechanism: int = _f("int8")


@_record
class BeginTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 23
    name: str | None = _tagged("string", 0, default=None)


@_record
class EndTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 24


@_record
class AbortTransactionRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 25
    reason: str | None = _tagged("string", 0, default=None)


@_record
class RegisterControllerRecord(MetadataRecord):
    API_KEY: ClassVar[int] = 27
    controller_id: int = _f("int32")
    incarnation_id: uuid.UUID = _f("uuid")
    zk_migration_ready: bool = _f("bool", default=False)
    end_points: tuple[ControllerEndpoint, ...] = _nested(default=())
    features: tuple[ControllerFeature, ...] = _nested(default=())


RECORD_TYPES: dict[int, type[MetadataRecord]] = {
    cls.API_KEY: cls
    for cls in (
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        TopicRecord,
        PartitionRecord,
        ConfigRecord,
        PartitionChangeRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        RemoveTopicRecord,
        UserScramCredentialRecord,
        FeatureLevelRecord,
        ClientQuotaRecord,
        ProducerIdsRecord,
        BrokerRegistrationChangeRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        NoOpRecord,
        RemoveUserScramCredentialRecord,
        BeginTransactionRecord,
        EndTransactionRecord,
        AbortTransactionRecord,
        RegisterControllerRecord,
    )
}


# Versions ----------------------------------------------------------------------------


def _in_version(f: Field[Any], version: int) -> bool:
    low, high = f.metadata.get("versions", (0, None))
    return version >= low and (high is None or version <= high)


def _copy_field(f: Field[Any]) -> tuple[str, Any, Any]:
    if f.default is MISSING:
        return (f.name, f.type, field(metadata=f.metadata))
    return (f.name, f.type, field(metadata=f.metadata, default=f.default))


@cache
def _layout(cls: type[MetadataRecord], version: int) -> type:
    """The class whose fields are those of ``cls`` at ``version`` (``cls`` if the same).

    Every tagged field is kept: tags are self-describing, and Kafka reads them in any
    version, so a narrower layout would only turn a known tag into an unknown one.
    """
    kept = [f for f in fields(cls) if "tag" in f.metadata or _in_version(f, version)]
    if len(kept) == len(fields(cls)):
        return cls
    return make_dataclass(
        f"{cls.__name__}V{version}",
        [_copy_field(f) for f in kept],
        namespace={"__type__": EntityType.data, "__flexible__": True, "__version__": version},
        frozen=True,
        slots=True,
        kw_only=True,
    )


@cache
def _writer(layout: type) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(layout)


@cache
def _reader(layout: type) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(layout)


# Framing -----------------------------------------------------------------------------


def _write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise MetadataRecordError("truncated unsigned varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MetadataRecordError("unsigned varint longer than 5 bytes")


def encode_record(record: MetadataRecord, version: int | None = None) -> bytes:
    """The record value Kafka writes for ``record`` (frame, api key, version, body)."""
    cls = type(record)
    if version is None:
        version = record.write_version()
    if not 0 <= version <= cls.MAX_VERSION:
        raise MetadataRecordError(f"{cls.__name__} has no version {version}")
    # mypy refuses a type[C] value where Hashable is asked (it checks C's unbound
    # __hash__), though every class hashes
    layout = _layout(cls, version)  # type: ignore[arg-type]
    body = record
    if layout is not cls:
        values = {}
        for f in fields(cls):
            if any(k.name == f.name for k in fields(layout)):
                values[f.name] = getattr(record, f.name)
            elif getattr(record, f.name) != f.default:
                raise MetadataRecordError(
                    f"{cls.__name__}.{f.name} cannot be written in version {version}"
                )
        body = layout(**values)
    for f in fields(cls):
        if "tag" in f.metadata and not _in_version(f, version):
            if getattr(record, f.name) != f.default:
                raise MetadataRecordError(
                    f"{cls.__name__}.{f.name} cannot be written in version {version}"
                )
    out = bytearray()
    _write_uvarint(out, FRAME_VERSION)
    _write_uvarint(out, cls.API_KEY)
    _write_uvarint(out, version)
    buffer = io.BytesIO()
    _writer(layout)(buffer, body)
    return bytes(out) + buffer.getvalue()


def decode_record_versioned(data: bytes) -> tuple[MetadataRecord, int]:
    """A record value read back, with the version it was written in."""
    data = bytes(data)
    frame, pos = _read_uvarint(data, 0)
    if frame != FRAME_VERSION:
        raise MetadataRecordError(f"unknown metadata record frame version {frame}")
    api_key, pos = _read_uvarint(data, pos)
    version, pos = _read_uvarint(data, pos)
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    if version > cls.MAX_VERSION:
        raise MetadataRecordError(f"{cls.__name__} version {version} is newer than known")
    # mypy refuses a type[C] value where Hashable is asked (it checks C's unbound
    # __hash__), though every class hashes
    layout = _layout(cls, version)  # type: ignore[arg-type]
    try:
        body, size = _reader(layout)(data[pos:], 0)
    except (SerialError, KeyError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise MetadataRecordError(f"malformed {cls.__name__} v{version}: {exc}") from None
    if pos + size != len(data):
        raise MetadataRecordError(
            f"{len(data) - pos - size} byte(s) after the end of a {cls.__name__}"
        )
    uuids = _uuid_fields(layout)
    if layout is not cls or uuids:
        values = {f.name: getattr(body, f.name) for f in fields(layout)}
        for name, is_array in uuids:
            values[name] = _zero_for_none(values[name], is_array)
        body = cls(**values)
    return body, version


@cache
def _uuid_fields(layout: type) -> tuple[tuple[str, bool], ...]:
    return tuple(
        (f.name, "tuple" in str(f.type))
        for f in fields(layout)
        if f.metadata.get("kafka_type") == "uuid"
    )


def _zero_for_none(value: Any, is_array: bool) -> Any:
    # kio reads the all-zero UUID as None; Kafka's records hold it as a value
    # (Uuid.ZERO_UUID, DirectoryId.MIGRATING). A null array stays null.
    if not is_array:
        return ZERO_UUID if value is None else value
    if value is None:
        return None
    return tuple(ZERO_UUID if item is None else item for item in value)


def decode_record(data: bytes) -> MetadataRecord:
    """A record value read back."""
    return decode_record_versioned(data)[0]
