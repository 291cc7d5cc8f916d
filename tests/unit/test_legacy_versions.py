"""The old request versions built by strom.protocol.legacy_versions.

Every built request and response round-trips through kio's reader and Strom's writer
(and kio's writer writes the same bytes); a few are checked byte for byte against
layouts written out here from Kafka 3.9's message definitions; the framing layer
decodes them with the right header versions.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
from dataclasses import fields

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from test_encoder import NULLS, PLAIN, sample

from strom.protocol.encoder import message_writer
from strom.protocol.framing import codec_for, decode_request, encode_request, nested
from strom.protocol.legacy_versions import LEGACY_VERSIONS, request_schema, response_schema

# Every version Kafka 3.9 serves below kio's lowest, per API key.
EXPECTED = {
    0: range(0, 3),
    1: range(0, 4),
    2: range(0, 1),
    8: range(0, 2),
    9: range(0, 1),
    19: range(0, 2),
    20: range(0, 1),
    23: range(0, 2),
    27: range(0, 1),
    29: range(0, 1),
    30: range(0, 1),
    31: range(0, 1),
    32: range(0, 1),
    35: range(0, 1),
    56: range(0, 2),
}

LEGACY = [
    (key, version, schema)
    for key, versions in sorted(LEGACY_VERSIONS.items())
    for version in versions
    for schema in (request_schema, response_schema)
]


def test_the_versions_kio_lacks_are_built() -> None:
    assert LEGACY_VERSIONS == EXPECTED


@pytest.mark.parametrize(
    ("key", "version", "schema"),
    LEGACY,
    ids=[f"{k}-v{v}-{s.__name__.split('_')[0]}" for k, v, s in LEGACY],
)
@pytest.mark.parametrize("variant", [PLAIN, NULLS])
def test_round_trip(key: int, version: int, schema: object, variant: str) -> None:
    message_type = schema(key, version)  # type: ignore[operator]
    assert message_type.__version__ == version
    assert message_type.__api_key__ == key
    assert message_type.__flexible__ == (key == 56)  # AlterPartition: flexible from v0
    kind = EntityType.request if schema is request_schema else EntityType.response
    assert message_type.__type__ == kind
    value = sample(message_type, variant)
    out = io.BytesIO()
    message_writer(message_type)(out, value)
    by_kio = io.BytesIO()
    entity_writer(message_type)(by_kio, value)
    assert out.getvalue() == by_kio.getvalue()
    decoded, size = entity_reader(message_type)(out.getvalue(), 0)
    assert size == len(out.getvalue())
    assert decoded == value


def test_nested_classes_are_found_as_in_kio() -> None:
    produce_v1 = request_schema(0, 1)
    topic_type = nested(produce_v1, "TopicProduceData")
    assert topic_type.__version__ == 1
    assert nested(topic_type, "PartitionProduceData").__version__ == 1
    assert sys.modules[produce_v1.__module__].ProduceRequest is produce_v1
    assert request_schema(0, 1) is produce_v1  # built once
    assert nested(response_schema(1, 0), "AbortedTransaction") is not None


def test_field_differences_from_kio_lowest_version() -> None:
    def names(message_type: type, nested_name: str | None = None) -> list[str]:
        if nested_name:
            message_type = nested(message_type, nested_name)
        return [f.name for f in fields(message_type)]

    assert names(request_schema(0, 2)) == ["acks", "timeout", "topic_data"]
    assert names(response_schema(0, 0)) == ["responses"]
    assert names(response_schema(0, 1), "PartitionProduceResponse") == [
        "index",
        "error_code",
        "base_offset",
    ]
    assert names(request_schema(1, 2)) == ["replica_id", "max_wait", "min_bytes", "topics"]
    assert "max_bytes" in names(request_schema(1, 3))
    assert names(response_schema(1, 3), "PartitionData") == [
        "partition_index",
        "error_code",
        "high_watermark",
        "records",
    ]
    assert names(request_schema(2, 0), "ListOffsetsPartition") == [
        "partition_index",
        "timestamp",
        "max_num_offsets",
    ]
    assert names(response_schema(2, 0), "ListOffsetsPartitionResponse") == [
        "partition_index",
        "error_code",
        "old_style_offsets",
    ]
    assert names(request_schema(8, 0)) == ["group_id", "topics"]
    assert names(request_schema(8, 1), "OffsetCommitRequestPartition") == [
        "partition_index",
        "committed_offset",
        "commit_timestamp",
        "committed_metadata",
    ]
    assert names(response_schema(32, 0), "DescribeConfigsResourceResult") == [
        "name",
        "value",
        "read_only",
        "is_default",
        "is_sensitive",
    ]
    assert "pattern_type_filter" not in names(request_schema(29, 0))
    assert names(request_schema(56, 1), "TopicData") == ["topic_name", "partitions"]
    assert names(request_schema(56, 0), "PartitionData") == [
        "partition_index",
        "leader_epoch",
        "new_isr",
        "partition_epoch",
    ]
    assert request_schema(56, 0).__header_schema__.__version__ == 2
    assert codec_for(56, 1).flexible_response_header
    assert names(response_schema(23, 0), "EpochEndOffset") == [
        "error_code",
        "partition",
        "end_offset",
    ]


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def test_list_offsets_v0_bytes() -> None:
    """Request header v1 and ListOffsets v0: partitions carry max_num_offsets."""
    request_type = request_schema(2, 0)
    topic_type = nested(request_type, "ListOffsetsTopic")
    partition_type = nested(request_type, "ListOffsetsPartition")
    request = request_type(
        replica_id=-1,
        topics=(
            topic_type(
                name="t",
                partitions=(partition_type(partition_index=3, timestamp=-1, max_num_offsets=5),),
            ),
        ),
    )
    body = (
        struct.pack(">i", -1)  # replica_id
        + struct.pack(">i", 1)  # topics
        + _string("t")
        + struct.pack(">i", 1)  # partitions
        + struct.pack(">iqi", 3, -1, 5)  # partition, timestamp, max_num_offsets
    )
    header = struct.pack(">hhi", 2, 0, 7) + _string("c")
    frame = encode_request(7, "c", request)
    assert frame == struct.pack(">i", len(header) + len(body)) + header + body
    decoded = decode_request(frame[4:], codec_for(2, 0))
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (2, 0, 7)
    assert decoded.body == request

    response_type = response_schema(2, 0)
    response = response_type(
        topics=(
            nested(response_type, "ListOffsetsTopicResponse")(
                name="t",
                partitions=(
                    nested(response_type, "ListOffsetsPartitionResponse")(
                        partition_index=3, error_code=ErrorCode.none, old_style_offsets=(42, 0)
                    ),
                ),
            ),
        )
    )
    out = io.BytesIO()
    message_writer(response_type)(out, response)
    assert out.getvalue() == (
        struct.pack(">i", 1)
        + _string("t")
        + struct.pack(">iih", 1, 3, 0)  # partitions, partition, error_code
        + struct.pack(">iqq", 2, 42, 0)  # old_style_offsets
    )
    assert not codec_for(2, 0).flexible_response_header


def test_offset_commit_v1_bytes() -> None:
    """OffsetCommit v1: generation and member, a commit timestamp per partition."""
    request_type = request_schema(8, 1)
    request = request_type(
        group_id="g",
        generation_id_or_member_epoch=4,
        member_id="m",
        topics=(
            nested(request_type, "OffsetCommitRequestTopic")(
                name="t",
                partitions=(
                    nested(request_type, "OffsetCommitRequestPartition")(
                        partition_index=0,
                        committed_offset=10,
                        commit_timestamp=1234,
                        committed_metadata=None,
                    ),
                ),
            ),
        ),
    )
    out = io.BytesIO()
    message_writer(request_type)(out, request)
    expected = (
        _string("g")
        + struct.pack(">i", 4)
        + _string("m")
        + struct.pack(">i", 1)
        + _string("t")
        + struct.pack(">i", 1)
        + struct.pack(">iqq", 0, 10, 1234)
        + struct.pack(">h", -1)  # null metadata
    )
    assert out.getvalue() == expected
    assert entity_reader(request_type)(expected, 0)[0] == request


def test_describe_configs_v0_response_bytes() -> None:
    """DescribeConfigs v0: is_default between read_only and is_sensitive, no synonyms."""
    response_type = response_schema(32, 0)
    response = response_type(
        throttle_time=datetime.timedelta(0),
        results=(
            nested(response_type, "DescribeConfigsResult")(
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=2,
                resource_name="t",
                configs=(
                    nested(response_type, "DescribeConfigsResourceResult")(
                        name="k", value="v", read_only=False, is_default=True, is_sensitive=False
                    ),
                ),
            ),
        ),
    )
    out = io.BytesIO()
    message_writer(response_type)(out, response)
    assert out.getvalue() == (
        struct.pack(">ii", 0, 1)  # throttle, results
        + struct.pack(">hh", 0, -1)  # error code, null message
        + struct.pack(">b", 2)
        + _string("t")
        + struct.pack(">i", 1)
        + _string("k")
        + _string("v")
        + bytes([0, 1, 0])  # read_only, is_default, is_sensitive
    )


def test_write_txn_markers_v0_is_not_flexible() -> None:
    codec = codec_for(27, 0)
    assert not codec.flexible_response_header
    assert codec.request_type.__header_schema__.__version__ == 1


def _every_known_version() -> list[tuple[int, int]]:
    known = []
    for name, versions in schema_name_map.items():
        key = next((k for k, n in api_key_map.items() if n == name), None)
        if key is None:
            continue
        for version, kinds in versions.items():
            if EntityType.request in kinds and EntityType.response in kinds:
                known.append((key, version))
    known += [(k, v) for k, vs in LEGACY_VERSIONS.items() for v in vs]
    return known


def test_an_unsupported_version_answer_can_be_built_for_every_known_version() -> None:
    """The broker's UNSUPPORTED_VERSION answer (a mirror of the request) encodes for
    every request and response type known, legacy ones included."""
    from strom.broker.handlers.cluster.api_versions import unsupported_version_answer

    checked = 0
    for key, version in _every_known_version():
        request = sample(request_schema(key, version), PLAIN)
        for source in (request, None):
            answer = unsupported_version_answer(key, version, source)
            out = io.BytesIO()
            message_writer(type(answer))(out, answer)
            assert entity_reader(type(answer))(out.getvalue(), 0)[0] == answer
        checked += 1
    assert checked > 300


def test_an_unsupported_version_answer_echoes_topics_and_partitions() -> None:
    from strom.broker.handlers.cluster.api_versions import unsupported_version_answer

    request_type = request_schema(2, 0)
    request = sample(request_type, PLAIN)
    answer = unsupported_version_answer(2, 0, request)
    assert [t.name for t in answer.topics] == [t.name for t in request.topics]
    for asked, answered in zip(request.topics, answer.topics, strict=True):
        assert [p.partition_index for p in answered.partitions] == [
            p.partition_index for p in asked.partitions
        ]
        assert {p.error_code for p in answered.partitions} == {ErrorCode.unsupported_version}
    produce = sample(request_schema(0, 13), PLAIN)
    answer = unsupported_version_answer(0, 13, produce)
    assert len(answer.responses) == len(produce.topic_data)
    assert [len(t.partition_responses) for t in answer.responses] == [
        len(t.partition_data) for t in produce.topic_data
    ]
    deleted = unsupported_version_answer(
        20, 0, request_schema(20, 0)(topic_names=("a", "b"), timeout=datetime.timedelta(0))
    )
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        ("a", ErrorCode.unsupported_version),
        ("b", ErrorCode.unsupported_version),
    ]
