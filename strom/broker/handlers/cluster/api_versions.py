"""ApiVersions (key 18), versions 0-4, and the answer to a version no one serves.

The ranges come from the router's table of the listener the request came in on. A
request for a version the broker does not know is answered (by the server, before
decoding) with UNSUPPORTED_VERSION and the ranges in a v0 body, as KIP-511 asks, so
the client can retry with a version both sides speak.

Any other API asked at a version outside its served range is answered too, where
that version's layout is known (kio's types, or legacy_versions'): the request is
decoded with it and ``unsupported_version_answer`` mirrors it into a response of the
same version whose every error code is UNSUPPORTED_VERSION (topics and partitions
echoed, as Kafka's per-request error responses do; other values zero, empty or
null). Kafka closes such a connection; an answer tells the client why. A version
with no known layout, or a Produce with acks=0 (owed no answer), is still a close.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from strom.broker.common import NO_THROTTLE
from strom.broker.network.router import ROUTES, RequestContext, Route, handles, handles_controller
from strom.cluster.features import SUPPORTED as SUPPORTED_FEATURES
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.protocol.legacy_versions import response_schema

if TYPE_CHECKING:
    from strom.protocol import response_types as resp


def advertised(api_version_type: type, routes: dict[int, Route]) -> tuple[Any, ...]:
    return tuple(
        build(
            api_version_type,
            api_key=r.api_key,
            min_version=r.min_version,
            max_version=r.max_version,
        )
        for r in sorted(routes.values(), key=lambda r: r.api_key)
    )


@handles_controller(18, 0, 4)
@handles(18, 0, 4)
def handle_api_versions(ctx: RequestContext, request: object) -> resp.ApiVersions:
    response_type: type[resp.ApiVersions] = ctx.response_type
    features: dict[str, object] = {}
    if ctx.api_version >= 3:
        features = _features(ctx, response_type)
    return build(
        response_type,
        error_code=ErrorCode.none,
        api_keys=advertised(nested(response_type, "ApiVersion"), ctx.routes),
        throttle_time=NO_THROTTLE,
        **features,
    )


def _features(ctx: RequestContext, response_type: type) -> dict[str, object]:
    """v3+: the features this node supports and those the cluster finalized (KIP-584),
    share.version among them, with the metadata offset they were read at."""
    from strom.broker.controller_client.lifecycle import METADATA_VERSION_FEATURE

    supported_type = nested(response_type, "SupportedFeatureKey")
    finalized_type = nested(response_type, "FinalizedFeatureKey")
    name, low, high = METADATA_VERSION_FEATURE
    supported = {name: (low, high), **SUPPORTED_FEATURES}
    image = ctx.broker.state.image
    finalized = {n: level for n, level in image.features.items() if level > 0}
    return {
        "supported_features": tuple(
            build(supported_type, name=n, min_version=lo, max_version=hi)
            for n, (lo, hi) in sorted(supported.items())
        ),
        "finalized_features_epoch": image.last_offset if finalized else -1,
        "finalized_features": tuple(
            build(finalized_type, name=n, max_version_level=level, min_version_level=level)
            for n, level in sorted(finalized.items())
        ),
    }


def unsupported_version_response(
    routes: dict[int, Route] = ROUTES,
) -> ApiVersionsResponseV0:
    """The body sent for an ApiVersions request of an unknown version."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version, api_keys=advertised(ApiVersionV0, routes)
    )


# Response fields named differently from the request fields they answer.
_MIRRORED_FROM = {
    "responses": ("topic_data", "topics", "topic_names"),
    "partition_responses": ("partition_data",),
    "results": ("resources", "topics", "filters", "creations"),
    "filter_results": ("filters",),
    "groups": ("groups", "group_ids"),
}
_EMPTY = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "float64": 0.0,
    "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


def unsupported_version_answer(api_key: int, api_version: int, request: Any) -> Any:
    """A response of ``api_version`` that answers ``request`` (or None, when it could
    not be decoded) with UNSUPPORTED_VERSION everywhere an error code goes."""
    return _mirror(response_schema(api_key, api_version), request)


def _mirror(entity_type: type, source: Any) -> Any:
    values: dict[str, Any] = {}
    for field in fields(entity_type):
        kafka_type = field.metadata.get("kafka_type")
        if "tag" in field.metadata:  # tagged fields at their defaults: not written
            if field.default is MISSING and field.default_factory is MISSING:
                values[field.name] = get_tagged_field_default(field)
            continue
        if kafka_type == "error_code":
            values[field.name] = ErrorCode.unsupported_version
            continue
        given = _source_value(source, field.name)
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):  # one entry per mirrored item
            items = given if isinstance(given, tuple) else ()
            values[field.name] = tuple(
                _mirror(kind.type_, item if is_dataclass(item) else _Named(item)) for item in items
            )
        elif isinstance(kind, EntityField):
            if is_optional(field):
                values[field.name] = None
            else:
                values[field.name] = _mirror(kind.type_, given if is_dataclass(given) else None)
        elif given is not MISSING and _same_kind(field, kind, given):
            values[field.name] = given
        elif field.default is not MISSING or field.default_factory is not MISSING:
            continue
        elif is_optional(field):
            values[field.name] = None
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = ()
        else:
            values[field.name] = _EMPTY.get(kafka_type or "", 0)
    return entity_type(**values)


class _Named:
    """A request item that is a bare name (DeleteTopics' topic_names) seen as an entity."""

    def __init__(self, name: Any) -> None:
        self.name = name


def _source_value(source: Any, name: str) -> Any:
    if source is None:
        return MISSING
    for candidate in (name, *_MIRRORED_FROM.get(name, ())):
        value = getattr(source, candidate, MISSING)
        if value is not MISSING:
            return value
    return MISSING


def _same_kind(field: Any, kind: Any, value: Any) -> bool:
    """Whether a request value fits the response field (a name where a name goes)."""
    if value is None:
        return is_optional(field)
    if isinstance(kind, PrimitiveTupleField):
        return isinstance(value, tuple) and not any(is_dataclass(v) for v in value)
    if isinstance(value, tuple) or is_dataclass(value):
        return False
    kafka_type: str = field.metadata.get("kafka_type", "")
    if isinstance(value, bool):
        return kafka_type == "bool"
    if isinstance(value, int):
        return kafka_type.startswith(("int", "uint"))
    if isinstance(value, str):
        return kafka_type == "string"
    return isinstance(value, type(_EMPTY.get(kafka_type, value)))
