"""KRaft's requests in the older versions the controller listener serves, as a receiving
node reads them: each is encoded as a whole request frame by the version's own kio
class, decoded as the server would, and translated into the Raft core's message
(Vote v0 has no pre-vote, EndQuorumEpoch v0 names its successors by id, Fetch v12
names the metadata topic by name and v12-14 carry the replica id at the top)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.begin_quorum_epoch.v0 import request as begin_v0
from kio.schema.end_quorum_epoch.v0 import request as end_v0
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v14 import request as fetch_v14
from kio.schema.fetch_snapshot.v0 import request as snapshot_v0
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v0 import request as vote_v0
from kio.static.primitive import i32, i32Timedelta, i64

from strom.controller import quorum_wire as wire
from strom.protocol.framing import codec_for, decode_request, encode_request
from strom.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    SnapshotId,
    VoteRequest,
)

METADATA = TopicName(wire.METADATA_TOPIC)
RECEIVER = 1


def _received(body: Any) -> Any:
    """``body`` after a trip through a request frame, decoded by its version's codec."""
    body_type = type(body)
    frame = encode_request(5, "peer", body)[4:]
    codec = codec_for(body_type.__api_key__, body_type.__version__)
    return decode_request(frame, codec).body


def test_vote_v0_asks_for_a_vote_without_pre_vote() -> None:
    partition = vote_v0.PartitionData(
        partition_index=i32(0),
        replica_epoch=i32(7),
        replica_id=BrokerId(3),
        last_offset_epoch=i32(6),
        last_offset=i64(41),
    )
    body = vote_v0.VoteRequest(
        cluster_id="c", topics=(vote_v0.TopicData(topic_name=METADATA, partitions=(partition,)),)
    )
    translated = wire.vote_from_wire(_received(body), RECEIVER)
    assert translated == VoteRequest(3, RECEIVER, 7, 6, 41, False)


def test_begin_and_end_quorum_epoch_v0() -> None:
    begin = begin_v0.BeginQuorumEpochRequest(
        cluster_id="c",
        topics=(
            begin_v0.TopicData(
                topic_name=METADATA,
                partitions=(
                    begin_v0.PartitionData(
                        partition_index=i32(0), leader_id=BrokerId(2), leader_epoch=i32(9)
                    ),
                ),
            ),
        ),
    )
    assert wire.begin_from_wire(_received(begin), RECEIVER) == BeginQuorumEpochRequest(
        2, RECEIVER, 9
    )
    end = end_v0.EndQuorumEpochRequest(
        cluster_id="c",
        topics=(
            end_v0.TopicData(
                topic_name=METADATA,
                partitions=(
                    end_v0.PartitionData(
                        partition_index=i32(0),
                        leader_id=BrokerId(2),
                        leader_epoch=i32(9),
                        preferred_successors=(i32(3), i32(1)),
                    ),
                ),
            ),
        ),
    )
    assert wire.end_from_wire(_received(end), RECEIVER) == EndQuorumEpochRequest(
        2, RECEIVER, 9, (3, 1)
    )


def _partition(module: Any) -> Any:
    return module.FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(4),
        fetch_offset=i64(18),
        last_fetched_epoch=i32(3),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(4096),
    )


def test_fetch_v12_names_the_metadata_topic_by_name() -> None:
    body = fetch_v12.FetchRequest(
        replica_id=BrokerId(4),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        max_bytes=i32(65536),
        topics=(fetch_v12.FetchTopic(topic=METADATA, partitions=(_partition(fetch_v12),)),),
        forgotten_topics_data=(),
    )
    received = _received(body)
    assert wire.is_metadata_fetch(received)
    other = fetch_v12.FetchRequest(
        replica_id=BrokerId(4),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        topics=(fetch_v12.FetchTopic(topic=TopicName("orders"), partitions=()),),
        forgotten_topics_data=(),
    )
    assert not wire.is_metadata_fetch(_received(other))
    assert wire.fetch_from_wire(received, RECEIVER) == FetchRequest(
        4, RECEIVER, 4, 18, 3, 500, 4096
    )


def test_fetch_v14_carries_the_replica_id_at_the_top_and_names_the_topic_by_id() -> None:
    body = fetch_v14.FetchRequest(
        replica_id=BrokerId(5),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=200)),
        min_bytes=i32(1),
        max_bytes=i32(1024),
        topics=(
            fetch_v14.FetchTopic(
                topic_id=wire.METADATA_TOPIC_ID, partitions=(_partition(fetch_v14),)
            ),
        ),
        forgotten_topics_data=(),
    )
    received = _received(body)
    assert wire.is_metadata_fetch(received)
    assert not wire.is_metadata_fetch(
        _received(
            fetch_v14.FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(0)),
                min_bytes=i32(1),
                topics=(fetch_v14.FetchTopic(topic_id=uuid.uuid4(), partitions=()),),
                forgotten_topics_data=(),
            )
        )
    )
    assert wire.fetch_from_wire(received, RECEIVER) == FetchRequest(
        5, RECEIVER, 4, 18, 3, 200, 1024
    )


def test_fetch_snapshot_v0() -> None:
    body = snapshot_v0.FetchSnapshotRequest(
        cluster_id="c",
        replica_id=BrokerId(2),
        max_bytes=i32(2048),
        topics=(
            snapshot_v0.TopicSnapshot(
                name=METADATA,
                partitions=(
                    snapshot_v0.PartitionSnapshot(
                        partition=i32(0),
                        current_leader_epoch=i32(6),
                        snapshot_id=snapshot_v0.SnapshotId(end_offset=i64(100), epoch=i32(5)),
                        position=i64(512),
                    ),
                ),
            ),
        ),
    )
    assert wire.fetch_snapshot_from_wire(_received(body), RECEIVER) == FetchSnapshotRequest(
        2, RECEIVER, 6, SnapshotId(100, 5), 512, 2048
    )
