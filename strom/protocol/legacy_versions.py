"""Message types for the old request versions that kio does not generate.

Owns ``request_schema(api_key, version)`` and ``response_schema(api_key, version)``:
kio's generated type where kio has that version, else a type built here. Kafka 3.9
serves versions down to v0 that kio 0.6.5 (generated from Kafka 4's definitions)
lacks: Produce v0-2, Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0,
CreateTopics v0-1, DeleteTopics v0, OffsetForLeaderEpoch v0-1, WriteTxnMarkers v0,
DescribeAcls, CreateAcls and DeleteAcls v0, DescribeConfigs v0, DescribeLogDirs v0 and
(between brokers and controllers) AlterPartition v0-1.

How: each missing version is derived from kio's lowest version of the same API
plus a small table of field differences read from Kafka 3.9's message definitions
(``clients/src/main/resources/common/message/*.json``): fields that later versions
added are dropped, fields that later versions removed (ListOffsets v0's
``max_num_offsets`` and ``old_style_offsets``, OffsetCommit v1's per-partition
``commit_timestamp``, DescribeConfigs v0's ``is_default``, AlterPartition v0-1's
``topic_name``) are added at their place, and the version is not flexible (but for
AlterPartition, flexible from v0). The result is a frozen dataclass of exactly kio's
shape (``kafka_type`` field metadata, ``__version__``, ``__flexible__``,
``__header_schema__``...), so kio's ``entity_reader``/``entity_writer`` and
``strom.protocol.encoder.message_writer`` read and write it unchanged, and handlers
build responses with ``framing.build`` as they do for kio's versions.

Why not an older kio: two kio releases cannot be installed side by side, and going
back would trade the newest versions (and the encoder specialised from kio 0.6's
schemas) for the oldest. Why not generated files: well over a hundred classes to
generate, review and keep, for some thirty field-level differences. The table below is
the whole of what differs, next to the code that applies it.

The types of one (API, version, request or response) live in a module of their own,
``strom.protocol.legacy_versions.<api name>.v<N>.<request|response>``, registered in
``sys.modules`` with every nested class as an attribute, as kio lays its modules out,
so ``framing.nested(ProduceRequestV1, "TopicProduceData")`` works for both.

Usage::

    from strom.protocol.legacy_versions import request_schema, response_schema
    from strom.protocol.framing import nested

    ProduceRequest = request_schema(0, 1)  # Produce v1: no transactional_id
    TopicProduceData = nested(ProduceRequest, "TopicProduceData")
    FetchResponse = response_schema(1, 2)  # Fetch v2: no last_stable_offset

``LEGACY_VERSIONS`` maps each API key to the versions built here; whether a version
is served is the router's decision, not this module's.

Does not own: wire framing (framing.py), the message-set conversion of Produce and
Fetch records (message_sets.py), or what any version means to the broker.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import sys
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from functools import cache
from typing import Any, ClassVar, TypeGuard, Union, cast, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.primitive import i8, i16, i32, i64
from kio.static.protocol import Header, Payload, RequestPayload, ResponsePayload

__all__ = ["LEGACY_VERSIONS", "request_schema", "response_schema"]


@dataclass(frozen=True, slots=True)
class Added:
    """A field an old version has and kio's lowest version no longer has."""

    name: str
    kafka_type: str  # a key of _PYTHON_TYPES
    after: str | None  # the field it follows (None: first)
    default: int | None = None  # None: a required field (an array's default is empty)
    array: bool = False


@dataclass(frozen=True, slots=True)
class Delta:
    """How one message class of an old version differs from kio's lowest version."""

    drop: tuple[str, ...] = ()
    add: tuple[Added, ...] = ()


Deltas = Mapping[str, Delta]  # class name -> its difference; classes not named are equal


@dataclass(frozen=True, slots=True)
class Shape:
    """Versions ``versions`` of ``api_key``: kio's version ``base`` with these deltas."""

    api_key: int
    versions: range
    base: int
    request: Deltas
    response: Deltas
    flexible: bool = False


_PYTHON_TYPES: dict[str, type] = {
    "int8": i8,
    "int16": i16,
    "int32": i32,
    "int64": i64,
    "bool": bool,
    "string": str,
}

_NO_THROTTLE = Delta(drop=("throttle_time",))
_PRODUCE_V0_2_REQUEST = {"ProduceRequest": Delta(drop=("transactional_id",))}
_BY_NAME = Delta(drop=("topic_id",), add=(Added("topic_name", "string", None),))
_NO_RECOVERY_STATE = Delta(drop=("leader_recovery_state",))
_FETCH_V0_3_PARTITION = Delta(drop=("last_stable_offset", "aborted_transactions"))

# The differences, from Kafka 3.9's message definitions (field names as kio names them).
SHAPES: tuple[Shape, ...] = (
    # Produce: v0-2 have no transactional id; v0 no throttle time, v0-1 no append time.
    Shape(
        0,
        range(0, 1),
        3,
        _PRODUCE_V0_2_REQUEST,
        {
            "ProduceResponse": _NO_THROTTLE,
            "PartitionProduceResponse": Delta(drop=("log_append_time",)),
        },
    ),
    Shape(
        0,
        range(1, 2),
        3,
        _PRODUCE_V0_2_REQUEST,
        {"PartitionProduceResponse": Delta(drop=("log_append_time",))},
    ),
    Shape(0, range(2, 3), 3, _PRODUCE_V0_2_REQUEST, {}),
    # Fetch: v0-2 have no response size limit, v0-3 no isolation level and no
    # transactional fields in the answer, v0 no throttle time.
    Shape(
        1,
        range(0, 1),
        4,
        {"FetchRequest": Delta(drop=("max_bytes", "isolation_level"))},
        {"FetchResponse": _NO_THROTTLE, "PartitionData": _FETCH_V0_3_PARTITION},
    ),
    Shape(
        1,
        range(1, 3),
        4,
        {"FetchRequest": Delta(drop=("max_bytes", "isolation_level"))},
        {"PartitionData": _FETCH_V0_3_PARTITION},
    ),
    Shape(
        1,
        range(3, 4),
        4,
        {"FetchRequest": Delta(drop=("isolation_level",))},
        {"PartitionData": _FETCH_V0_3_PARTITION},
    ),
    # ListOffsets v0: up to max_num_offsets offsets per partition, no timestamp.
    Shape(
        2,
        range(0, 1),
        1,
        {"ListOffsetsPartition": Delta(add=(Added("max_num_offsets", "int32", "timestamp", 1),))},
        {
            "ListOffsetsPartitionResponse": Delta(
                drop=("timestamp", "offset"),
                add=(Added("old_style_offsets", "int64", "error_code", array=True),),
            )
        },
    ),
    # OffsetCommit: v0 has no group generation or member; v1 has them and a commit
    # timestamp per partition; neither has the retention time of v2-4.
    Shape(
        8,
        range(0, 1),
        2,
        {
            "OffsetCommitRequest": Delta(
                drop=("generation_id_or_member_epoch", "member_id", "retention_time")
            )
        },
        {},
    ),
    Shape(
        8,
        range(1, 2),
        2,
        {
            "OffsetCommitRequest": Delta(drop=("retention_time",)),
            "OffsetCommitRequestPartition": Delta(
                add=(Added("commit_timestamp", "int64", "committed_offset", -1),)
            ),
        },
        {},
    ),
    # OffsetFetch v0: v1's shape (v0 read ZooKeeper-stored offsets in old brokers).
    Shape(9, range(0, 1), 1, {}, {}),
    # CreateTopics: v0 has no validate_only and no error messages; v0-1 no throttle time.
    Shape(
        19,
        range(0, 1),
        2,
        {"CreateTopicsRequest": Delta(drop=("validate_only",))},
        {
            "CreateTopicsResponse": _NO_THROTTLE,
            "CreatableTopicResult": Delta(drop=("error_message",)),
        },
    ),
    Shape(19, range(1, 2), 2, {}, {"CreateTopicsResponse": _NO_THROTTLE}),
    # DeleteTopics v0: no throttle time.
    Shape(20, range(0, 1), 1, {}, {"DeleteTopicsResponse": _NO_THROTTLE}),
    # OffsetForLeaderEpoch: v0-1 have no current leader epoch (fencing) and no
    # throttle time; v0 answers no leader epoch.
    Shape(
        23,
        range(0, 1),
        2,
        {"OffsetForLeaderPartition": Delta(drop=("current_leader_epoch",))},
        {
            "OffsetForLeaderEpochResponse": _NO_THROTTLE,
            "EpochEndOffset": Delta(drop=("leader_epoch",)),
        },
    ),
    Shape(
        23,
        range(1, 2),
        2,
        {"OffsetForLeaderPartition": Delta(drop=("current_leader_epoch",))},
        {"OffsetForLeaderEpochResponse": _NO_THROTTLE},
    ),
    # WriteTxnMarkers v0: v1's fields, not flexible.
    Shape(27, range(0, 1), 1, {}, {}),
    # ACLs v0: no resource pattern type (every pattern is LITERAL).
    Shape(
        29,
        range(0, 1),
        1,
        {"DescribeAclsRequest": Delta(drop=("pattern_type_filter",))},
        {"DescribeAclsResource": Delta(drop=("pattern_type",))},
    ),
    Shape(30, range(0, 1), 1, {"AclCreation": Delta(drop=("resource_pattern_type",))}, {}),
    Shape(
        31,
        range(0, 1),
        1,
        {"DeleteAclsFilter": Delta(drop=("pattern_type_filter",))},
        {"DeleteAclsMatchingAcl": Delta(drop=("pattern_type",))},
    ),
    # DescribeConfigs v0: no synonyms, and is_default where later versions have a source.
    Shape(
        32,
        range(0, 1),
        1,
        {"DescribeConfigsRequest": Delta(drop=("include_synonyms",))},
        {
            "DescribeConfigsResourceResult": Delta(
                drop=("config_source", "synonyms"),
                add=(Added("is_default", "bool", "read_only"),),
            )
        },
    ),
    # DescribeLogDirs v0: v1's shape.
    Shape(35, range(0, 1), 1, {}, {}),
    # AlterPartition (controller listener): v0-1 name topics instead of ids (flexible
    # from v0); v0 has no leader recovery state.
    Shape(
        56,
        range(0, 1),
        2,
        {"TopicData": _BY_NAME, "PartitionData": _NO_RECOVERY_STATE},
        {"TopicData": _BY_NAME, "PartitionData": _NO_RECOVERY_STATE},
        flexible=True,
    ),
    Shape(56, range(1, 2), 2, {"TopicData": _BY_NAME}, {"TopicData": _BY_NAME}, flexible=True),
)

_BY_VERSION: dict[tuple[int, int], Shape] = {
    (shape.api_key, version): shape for shape in SHAPES for version in shape.versions
}


def _version_ranges() -> dict[int, range]:
    by_key: dict[int, list[int]] = {}
    for key, version in _BY_VERSION:
        by_key.setdefault(key, []).append(version)
    return {key: range(min(vs), max(vs) + 1) for key, vs in sorted(by_key.items())}


LEGACY_VERSIONS: dict[int, range] = _version_ranges()


def request_schema(api_key: int, version: int) -> type[RequestPayload]:
    """The request type of ``version`` of ``api_key``: kio's, or one built here.

    Raises kio's ``KioIndexError`` (a RuntimeError) for a version neither has."""
    if (api_key, version) in _BY_VERSION:
        # built with request header v1 or v2 as its __header_schema__ (see _build)
        return cast(type[RequestPayload], _build(api_key, version, "request"))
    return load_request_schema(api_key, version)


def response_schema(api_key: int, version: int) -> type[ResponsePayload]:
    """The response type of ``version`` of ``api_key``: kio's, or one built here."""
    if (api_key, version) in _BY_VERSION:
        # built with response header v0 or v1 as its __header_schema__ (see _build)
        return cast(type[ResponsePayload], _build(api_key, version, "response"))
    return load_response_schema(api_key, version)


def _is_entity_class(value: object) -> TypeGuard[type[Payload]]:
    """Whether ``value`` is a dataclass class: in a kio module or a kio annotation, one of
    kio's generated classes, which all (requests, responses and their nested entities)
    carry Payload's class variables."""
    return dataclasses.is_dataclass(value) and isinstance(value, type)


def _is_kio_class(value: object, module_name: str) -> TypeGuard[type[Payload]]:
    """Whether ``value`` is a class kio generated in ``module_name``."""
    return _is_entity_class(value) and value.__module__ == module_name


@cache
def _build(api_key: int, version: int, kind: str) -> type[Payload]:
    shape = _BY_VERSION[(api_key, version)]
    base: type[Payload]
    header: type[Header]
    if kind == "request":
        base = load_request_schema(api_key, shape.base)
        deltas = shape.request
        header = RequestHeaderV2 if shape.flexible else RequestHeaderV1
    else:
        base = load_response_schema(api_key, shape.base)
        deltas = shape.response
        header = ResponseHeaderV1 if shape.flexible else ResponseHeaderV0
    module_name = f"{__name__}.{api_key_map[api_key]}.v{version}.{kind}"
    module = types.ModuleType(module_name, f"{base.__name__} v{version}, from v{shape.base}.")
    builder = _Builder(module, version, header, deltas, shape.flexible)
    base_module = sys.modules[base.__module__]
    for value in list(vars(base_module).values()):  # every class, used or not, as kio has
        if _is_kio_class(value, base_module.__name__):
            builder.entity(value)
    unknown = set(deltas) - set(builder.built)
    if unknown:
        raise RuntimeError(f"no class {sorted(unknown)} in {base_module.__name__}")
    sys.modules[module_name] = module
    return builder.built[base.__name__]


class _Builder:
    """Rebuilds the classes of one kio module as another version's."""

    def __init__(
        self,
        module: types.ModuleType,
        version: int,
        header: type[Header],
        deltas: Deltas,
        flexible: bool,
    ):
        self.module = module
        self.version = version
        self.header = header
        self.deltas = deltas
        self.flexible = flexible
        self.built: dict[str, type[Payload]] = {}

    def entity(self, base: type[Payload]) -> type[Payload]:
        name = base.__name__
        if name in self.built:
            return self.built[name]
        delta = self.deltas.get(name, Delta())
        spec: list[tuple[str, Any, dataclasses.Field[Any]]] = []
        for f in dataclasses.fields(base):
            if f.metadata.get("tag") is not None and not self.flexible:
                continue  # tagged fields exist in flexible versions only
            if f.name in delta.drop:
                continue
            spec.append((f.name, self.type_of(f.type), _copy_field(f)))
        missing = set(delta.drop) - {f.name for f in dataclasses.fields(base)}
        if missing:
            raise RuntimeError(f"{name} has no field {sorted(missing)} to drop")
        for added in delta.add:
            at = 0 if added.after is None else [n for n, _, _ in spec].index(added.after) + 1
            spec.insert(at, (added.name, *_added_field(added)))
        namespace = {
            "__type__": base.__type__,
            "__version__": i16(self.version),
            "__flexible__": self.flexible,
            "__api_key__": base.__api_key__,
            "__header_schema__": self.header,
        }
        annotations = {key: ClassVar for key in namespace}
        namespace["__doc__"] = f"{name} v{self.version}."
        namespace["__module__"] = self.module.__name__
        cls = dataclasses.make_dataclass(
            name,
            spec,
            namespace={**namespace, "__annotations__": annotations},
            frozen=True,
            slots=True,
            kw_only=True,
        )
        self.built[name] = cls
        setattr(self.module, name, cls)
        return cls

    def type_of(self, annotation: Any) -> Any:
        """``annotation`` with every kio entity in it replaced by its rebuilt class."""
        if _is_entity_class(annotation):
            return self.entity(annotation)
        origin = get_origin(annotation)
        if origin is tuple:
            item, ellipsis = get_args(annotation)
            return types.GenericAlias(tuple, (self.type_of(item), ellipsis))
        if origin in (types.UnionType, Union):
            # kio reads ``X | None`` (types.UnionType), so the union is rebuilt with ``|``
            return functools.reduce(operator.or_, map(self.type_of, get_args(annotation)))
        return annotation


def _field(**kwargs: Any) -> dataclasses.Field[Any]:
    """``dataclasses.field`` typed as what it returns: a Field (typeshed gives it the
    default's type, for class bodies)."""
    made: dataclasses.Field[Any] = dataclasses.field(**kwargs)
    return made


def _copy_field(f: dataclasses.Field[Any]) -> dataclasses.Field[Any]:
    kwargs: dict[str, Any] = {"metadata": f.metadata}
    if f.default is not MISSING:
        kwargs["default"] = f.default
    if f.default_factory is not MISSING:
        kwargs["default_factory"] = f.default_factory
    return _field(**kwargs)


def _added_field(added: Added) -> tuple[Any, dataclasses.Field[Any]]:
    python_type = _PYTHON_TYPES[added.kafka_type]
    metadata = {"kafka_type": added.kafka_type}
    if added.array:
        return types.GenericAlias(tuple, (python_type, ...)), _field(metadata=metadata, default=())
    if added.default is None:
        return python_type, _field(metadata=metadata)
    return python_type, _field(metadata=metadata, default=python_type(added.default))
