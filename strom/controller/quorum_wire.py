"""The Raft core's messages on Kafka's wire: translation both ways, nothing else.

Owns the mapping between ``strom.raft.messages`` and the kio messages KRaft sends
for the metadata partition ``__cluster_metadata-0``: Vote (key 52, v2 sent, with
pre-vote), BeginQuorumEpoch (53, v1), EndQuorumEpoch (54, v1), Fetch (1, v17, the
partition named by the metadata topic id) and FetchSnapshot (59, v1); and the
encoding of the core's ``Batch``es as magic-2 record batches (partition leader epoch
= the batch's epoch, control attribute for the leader's epoch-start batch, null keys).

Requests are turned into core messages on the receiving node and responses back into
kio bodies of the version the request came in; the sender's side turns what it sends
into kio and what comes back into core messages. Directory ids (KIP-853) are not used:
they are sent as the zero uuid.

Does not own sockets (peer_client, server) or consensus (strom.raft).
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from kio.schema.begin_quorum_epoch.v0 import request as begin_v0
from kio.schema.begin_quorum_epoch.v1 import request as begin_req
from kio.schema.end_quorum_epoch.v0 import request as end_v0
from kio.schema.end_quorum_epoch.v1 import request as end_req
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v13 import request as fetch_v13
from kio.schema.fetch.v14 import request as fetch_v14
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.fetch.v16 import request as fetch_v16
from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch_snapshot.v0 import request as snap_v0
from kio.schema.fetch_snapshot.v1 import request as snap_req
from kio.schema.types import BrokerId, TopicName
from kio.schema.vote.v0 import request as vote_v0
from kio.schema.vote.v1 import request as vote_v1
from kio.schema.vote.v2 import request as vote_req
from kio.static.primitive import i32, i32Timedelta, i64

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.protocol.records import HEADER_SIZE, build_batch, decode_records, parse_header
from strom.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    RaftError,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed id for the metadata topic
METADATA_PARTITION = 0
ZERO_UUID = uuid.UUID(int=0)
CONTROL_ATTRIBUTE = 0x20
NO_THROTTLE = datetime.timedelta(0)


# The versions served on the controller listener (quorum_handlers), as kio decodes them.
VoteBody = vote_v0.VoteRequest | vote_v1.VoteRequest | vote_req.VoteRequest
BeginQuorumEpochBody = begin_v0.BeginQuorumEpochRequest | begin_req.BeginQuorumEpochRequest
EndQuorumEpochBody = end_v0.EndQuorumEpochRequest | end_req.EndQuorumEpochRequest
FetchSnapshotBody = snap_v0.FetchSnapshotRequest | snap_req.FetchSnapshotRequest
MetadataFetchBody = (
    fetch_v12.FetchRequest
    | fetch_v13.FetchRequest
    | fetch_v14.FetchRequest
    | fetch_v15.FetchRequest
    | fetch_v16.FetchRequest
    | fetch_req.FetchRequest
)
# What this node sends to the other voters.
RaftWireRequest = (
    vote_req.VoteRequest
    | begin_req.BeginQuorumEpochRequest
    | end_req.EndQuorumEpochRequest
    | fetch_req.FetchRequest
    | snap_req.FetchSnapshotRequest
)


class WireError(ValueError):
    """A request that does not address the metadata partition (answered with an error)."""


# Batches <-> record bytes --------------------------------------------------------


def encode_batches(batches: tuple[Batch, ...] | list[Batch]) -> bytes:
    now = int(time.time() * 1000)
    return b"".join(
        build_batch(
            [(None, record) for record in batch.records],
            base_offset=batch.base_offset,
            base_timestamp=now,
            attributes=CONTROL_ATTRIBUTE if batch.control else 0,
            partition_leader_epoch=batch.epoch,
        )
        for batch in batches
    )


def decode_batches(data: bytes | memoryview | None) -> tuple[Batch, ...]:
    """The whole batches in ``data``; a partial last batch (cut by max bytes) is left out."""
    if not data:
        return ()
    view = memoryview(bytes(data))
    out = []
    position = 0
    while len(view) - position >= HEADER_SIZE:
        header = parse_header(view, position)
        if position + header.size > len(view):
            break
        values = tuple(r.value or b"" for r in decode_records(view, header))
        out.append(
            Batch(header.base_offset, header.partition_leader_epoch, values, header.is_control)
        )
        position += header.size
    return tuple(out)


# Sender side: core request -> kio request -----------------------------------------


def request_to_wire(message: Message, cluster_id: str) -> RaftWireRequest:
    if isinstance(message, VoteRequest):
        return vote_req.VoteRequest(
            cluster_id=cluster_id,
            voter_id=BrokerId(message.dst),
            topics=(
                vote_req.TopicData(
                    topic_name=TopicName(METADATA_TOPIC),
                    partitions=(
                        vote_req.PartitionData(
                            partition_index=i32(METADATA_PARTITION),
                            replica_epoch=i32(message.epoch),
                            replica_id=BrokerId(message.src),
                            replica_directory_id=ZERO_UUID,
                            voter_directory_id=ZERO_UUID,
                            last_offset_epoch=i32(message.last_offset_epoch),
                            last_offset=i64(message.last_offset),
                            pre_vote=message.pre_vote,
                        ),
                    ),
                ),
            ),
        )
    if isinstance(message, BeginQuorumEpochRequest):
        return begin_req.BeginQuorumEpochRequest(
            cluster_id=cluster_id,
            voter_id=BrokerId(message.dst),
            topics=(
                begin_req.TopicData(
                    topic_name=TopicName(METADATA_TOPIC),
                    partitions=(
                        begin_req.PartitionData(
                            partition_index=i32(METADATA_PARTITION),
                            voter_directory_id=ZERO_UUID,
                            leader_id=BrokerId(message.src),
                            leader_epoch=i32(message.epoch),
                        ),
                    ),
                ),
            ),
            leader_endpoints=(),
        )
    if isinstance(message, EndQuorumEpochRequest):
        return end_req.EndQuorumEpochRequest(
            cluster_id=cluster_id,
            topics=(
                end_req.TopicData(
                    topic_name=TopicName(METADATA_TOPIC),
                    partitions=(
                        end_req.PartitionData(
                            partition_index=i32(METADATA_PARTITION),
                            leader_id=BrokerId(message.src),
                            leader_epoch=i32(message.epoch),
                            preferred_candidates=tuple(
                                end_req.ReplicaInfo(
                                    candidate_id=BrokerId(c), candidate_directory_id=ZERO_UUID
                                )
                                for c in message.preferred_successors
                            ),
                        ),
                    ),
                ),
            ),
            leader_endpoints=(),
        )
    if isinstance(message, FetchRequest):
        return fetch_req.FetchRequest(
            cluster_id=cluster_id,
            replica_state=fetch_req.ReplicaState(
                replica_id=BrokerId(message.src), replica_epoch=i64(-1)
            ),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=message.max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(message.max_bytes),
            topics=(
                fetch_req.FetchTopic(
                    topic_id=METADATA_TOPIC_ID,
                    partitions=(
                        fetch_req.FetchPartition(
                            partition=i32(METADATA_PARTITION),
                            current_leader_epoch=i32(message.epoch),
                            fetch_offset=i64(message.fetch_offset),
                            last_fetched_epoch=i32(message.last_fetched_epoch),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(message.max_bytes),
                            replica_directory_id=ZERO_UUID,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
    if isinstance(message, FetchSnapshotRequest):
        return snap_req.FetchSnapshotRequest(
            cluster_id=cluster_id,
            replica_id=BrokerId(message.src),
            max_bytes=i32(message.max_bytes),
            topics=(
                snap_req.TopicSnapshot(
                    name=TopicName(METADATA_TOPIC),
                    partitions=(
                        snap_req.PartitionSnapshot(
                            partition=i32(METADATA_PARTITION),
                            current_leader_epoch=i32(message.epoch),
                            snapshot_id=snap_req.SnapshotId(
                                end_offset=i64(message.snapshot_id.end_offset),
                                epoch=i32(message.snapshot_id.epoch),
                            ),
                            position=i64(message.position),
                            replica_directory_id=ZERO_UUID,
                        ),
                    ),
                ),
            ),
        )
    raise TypeError(f"not a request: {type(message).__name__}")


def _error(code: Any) -> RaftError:
    try:
        return RaftError(int(code))
    except ValueError:
        return RaftError.NOT_LEADER_OR_FOLLOWER  # anything else: look for the leader again


def _only_partition(topics: tuple[Any, ...]) -> Any:
    """The metadata partition's entry in a peer's response (decoded by its version)."""
    for topic in topics:
        if getattr(topic, "topic_name", METADATA_TOPIC) == METADATA_TOPIC:
            for partition in topic.partitions:
                return partition
    return None


def response_from_wire(request: Message, response: Any) -> Message | None:
    """The core's response to ``request`` from the kio response the peer sent.

    None when the response carries no answer for the metadata partition (the core
    retries the request when its timeout passes)."""
    src, dst = request.dst, request.src
    top_error = getattr(response, "error_code", ErrorCode.none)
    if isinstance(request, VoteRequest):
        part = _only_partition(response.topics)
        if part is None:
            return None
        error = part.error_code if top_error == ErrorCode.none else top_error
        return VoteResponse(
            src,
            dst,
            _error(error),
            part.leader_epoch,
            part.leader_id,
            part.vote_granted,
            pre_vote=request.pre_vote,  # not on the wire: from the request it answers
        )
    if isinstance(request, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        part = _only_partition(response.topics)
        if part is None:
            return None
        error = part.error_code if top_error == ErrorCode.none else top_error
        cls = (
            BeginQuorumEpochResponse
            if isinstance(request, BeginQuorumEpochRequest)
            else EndQuorumEpochResponse
        )
        return cls(src, dst, _error(error), part.leader_epoch, part.leader_id)
    if isinstance(request, FetchRequest):
        part = None
        for topic in response.responses:
            for candidate in topic.partitions:
                part = candidate
        if part is None:
            return None
        error = part.error_code if top_error == ErrorCode.none else top_error
        snapshot = None
        if part.snapshot_id.end_offset >= 0:
            snapshot = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        return FetchResponse(
            src,
            dst,
            _error(error),
            part.current_leader.leader_epoch,
            part.current_leader.leader_id,
            part.high_watermark,
            part.log_start_offset,
            decode_batches(part.records),
            part.diverging_epoch.epoch,
            part.diverging_epoch.end_offset,
            snapshot,
            fetch_offset=request.fetch_offset,  # not on the wire: from the request
            last_fetched_epoch=request.last_fetched_epoch,
        )
    if isinstance(request, FetchSnapshotRequest):
        part = None
        for topic in response.topics:
            for candidate in topic.partitions:
                part = candidate
        if part is None:
            return None
        error = part.error_code if top_error == ErrorCode.none else top_error
        return FetchSnapshotResponse(
            src,
            dst,
            _error(error),
            part.current_leader.leader_epoch,
            part.current_leader.leader_id,
            SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch),
            part.size,
            part.position,
            bytes(part.unaligned_records or b""),
        )
    raise TypeError(f"not a request: {type(request).__name__}")


# Receiver side: kio request -> core request, core response -> kio response ----------


def vote_from_wire(body: VoteBody, node_id: int) -> VoteRequest:
    part = next(
        (p for t in body.topics if t.topic_name == METADATA_TOPIC for p in t.partitions), None
    )
    if part is None:
        raise WireError("Vote does not name __cluster_metadata-0")
    return VoteRequest(
        part.replica_id,
        node_id,
        part.replica_epoch,
        part.last_offset_epoch,
        part.last_offset,
        part.pre_vote if isinstance(part, vote_req.PartitionData) else False,
    )


def begin_from_wire(body: BeginQuorumEpochBody, node_id: int) -> BeginQuorumEpochRequest:
    part = next(
        (p for t in body.topics if t.topic_name == METADATA_TOPIC for p in t.partitions), None
    )
    if part is None:
        raise WireError("BeginQuorumEpoch does not name __cluster_metadata-0")
    return BeginQuorumEpochRequest(part.leader_id, node_id, part.leader_epoch)


def end_from_wire(body: EndQuorumEpochBody, node_id: int) -> EndQuorumEpochRequest:
    part = next(
        (p for t in body.topics if t.topic_name == METADATA_TOPIC for p in t.partitions), None
    )
    if part is None:
        raise WireError("EndQuorumEpoch does not name __cluster_metadata-0")
    successors: tuple[int, ...]
    if isinstance(part, end_req.PartitionData):
        successors = tuple(c.candidate_id for c in part.preferred_candidates)
    else:
        successors = tuple(part.preferred_successors)
    return EndQuorumEpochRequest(part.leader_id, node_id, part.leader_epoch, successors)


def is_metadata_fetch(body: MetadataFetchBody) -> bool:
    """A Fetch addressed to the metadata partition (by topic id, or by name before v13)."""
    for topic in body.topics:
        if isinstance(topic, fetch_v12.FetchTopic):
            if topic.topic == METADATA_TOPIC:
                return True
        elif topic.topic_id == METADATA_TOPIC_ID:
            return True
    return False


def fetch_from_wire(body: MetadataFetchBody, node_id: int) -> FetchRequest:
    if isinstance(body, fetch_v12.FetchRequest | fetch_v13.FetchRequest | fetch_v14.FetchRequest):
        replica_id = body.replica_id
    else:
        replica_id = body.replica_state.replica_id
    for topic in body.topics:
        for part in topic.partitions:
            return FetchRequest(
                replica_id,
                node_id,
                part.current_leader_epoch,
                part.fetch_offset,
                part.last_fetched_epoch,
                int(body.max_wait.total_seconds() * 1000),
                min(body.max_bytes, part.partition_max_bytes),
            )
    raise WireError("Fetch names no partition")


def fetch_snapshot_from_wire(body: FetchSnapshotBody, node_id: int) -> FetchSnapshotRequest:
    part = next(
        (p for topic in body.topics if topic.name == METADATA_TOPIC for p in topic.partitions),
        None,
    )
    if part is None:
        raise WireError("FetchSnapshot does not name __cluster_metadata-0")
    return FetchSnapshotRequest(
        body.replica_id,
        node_id,
        part.current_leader_epoch,
        SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch),
        part.position,
        body.max_bytes,
    )


def response_to_wire(message: Message, response_type: type) -> Any:
    """The kio body (of ``response_type``'s version) answering with core ``message``."""
    if isinstance(message, VoteResponse):
        part = build(
            nested(response_type, "PartitionData"),
            partition_index=METADATA_PARTITION,
            error_code=ErrorCode(message.error.value),
            leader_id=message.leader_id,
            leader_epoch=message.epoch,
            vote_granted=message.granted,
        )
        topic = build(
            nested(response_type, "TopicData"), topic_name=METADATA_TOPIC, partitions=(part,)
        )
        return build(response_type, error_code=ErrorCode.none, topics=(topic,))
    if isinstance(message, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        part = build(
            nested(response_type, "PartitionData"),
            partition_index=METADATA_PARTITION,
            error_code=ErrorCode(message.error.value),
            leader_id=message.leader_id,
            leader_epoch=message.epoch,
        )
        topic = build(
            nested(response_type, "TopicData"), topic_name=METADATA_TOPIC, partitions=(part,)
        )
        return build(response_type, error_code=ErrorCode.none, topics=(topic,))
    if isinstance(message, FetchResponse):
        snapshot = message.snapshot_id
        part = build(
            nested(response_type, "PartitionData"),
            partition_index=METADATA_PARTITION,
            error_code=ErrorCode(message.error.value),
            high_watermark=message.high_watermark,
            last_stable_offset=message.high_watermark,
            log_start_offset=message.log_start_offset,
            diverging_epoch=build(
                nested(response_type, "EpochEndOffset"),
                epoch=message.diverging_epoch,
                end_offset=message.diverging_end_offset,
            ),
            current_leader=build(
                nested(response_type, "LeaderIdAndEpoch"),
                leader_id=message.leader_id,
                leader_epoch=message.epoch,
            ),
            snapshot_id=build(
                nested(response_type, "SnapshotId"),
                end_offset=snapshot.end_offset if snapshot else -1,
                epoch=snapshot.epoch if snapshot else -1,
            ),
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=encode_batches(message.batches) if message.batches else None,
        )
        topic = build(
            nested(response_type, "FetchableTopicResponse"),
            topic_id=METADATA_TOPIC_ID,
            topic=METADATA_TOPIC,
            partitions=(part,),
        )
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            session_id=0,
            responses=(topic,),
        )
    if isinstance(message, FetchSnapshotResponse):
        snapshot = message.snapshot_id or SnapshotId(-1, -1)
        part = build(
            nested(response_type, "PartitionSnapshot"),
            index=METADATA_PARTITION,
            error_code=ErrorCode(message.error.value),
            snapshot_id=build(
                nested(response_type, "SnapshotId"),
                end_offset=snapshot.end_offset,
                epoch=snapshot.epoch,
            ),
            current_leader=build(
                nested(response_type, "LeaderIdAndEpoch"),
                leader_id=message.leader_id,
                leader_epoch=message.epoch,
            ),
            size=message.size,
            position=message.position,
            unaligned_records=message.data,
        )
        topic = build(
            nested(response_type, "TopicSnapshot"), name=METADATA_TOPIC, partitions=(part,)
        )
        return build(
            response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=(topic,)
        )
    raise TypeError(f"not a response: {type(message).__name__}")
