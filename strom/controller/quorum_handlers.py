"""KRaft's quorum RPCs on the controller listener, and DescribeQuorum on both listeners.

Serves, for the metadata partition ``__cluster_metadata-0`` only:
- Vote (key 52) v0-2 (v2: pre-vote, KIP-996), BeginQuorumEpoch (53) v0-1,
  EndQuorumEpoch (54) v0-1, FetchSnapshot (59) v0-1, and Fetch (1) v12-17 of the
  metadata topic (by topic id from v13): handed to this node's Raft core through the
  quorum driver, answered with what the core answers. A request naming another
  cluster id gets INCONSISTENT_CLUSTER_ID; one naming another partition, or sent to a
  node that is not a controller, gets an error and is not retried by the sender's core
  until its request timeout passes.
- DescribeQuorum (55) v0-2: the leader answers with each voter's and observer's log
  end offset and last fetch and caught-up times; a voter that is not the leader
  forwards the question to the active controller.

With an authorizer, the quorum RPCs need CLUSTER_ACTION on the cluster and
DescribeQuorum DESCRIBE, as in Kafka (CLUSTER_AUTHORIZATION_FAILED otherwise).

Directory ids (KIP-853) and node endpoints are not sent.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from strom.broker.access import authz
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.controller import quorum_wire
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.raft.messages import Message

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

Body = TypeVar("Body")
# The answer of one of the quorum RPCs, which _serve builds alike.
Answer = TypeVar("Answer")


def _cluster_mismatch(ctx: RequestContext, request: object) -> bool:
    cluster_id = getattr(request, "cluster_id", None)
    return cluster_id is not None and cluster_id != ctx.broker.cluster_id


async def _ask_core(ctx: RequestContext, response_type: type[Answer], message: Message) -> Answer:
    answer = await ctx.broker.quorum.handle(message)
    wire: Answer = quorum_wire.response_to_wire(answer, response_type)
    return wire


def _top_level_error(response_type: type[Answer], error: ErrorCode) -> Answer:
    return build(
        response_type,
        error_code=error,
        topics=(),
        responses=(),
        throttle_time=quorum_wire.NO_THROTTLE,
    )


def _serve(
    ctx: RequestContext,
    response_type: type[Answer],
    request: Body,
    translate: Callable[[Body, int], Message],
) -> Answer | Awaitable[Answer]:
    if ctx.broker.quorum is None:
        return _top_level_error(response_type, ErrorCode.not_controller)
    if not authz.node_request_allowed(ctx):
        return _top_level_error(response_type, ErrorCode.cluster_authorization_failed)
    if _cluster_mismatch(ctx, request):
        return _top_level_error(response_type, ErrorCode.inconsistent_cluster_id)
    try:
        message = translate(request, ctx.broker.node_id)
    except quorum_wire.WireError:
        return _top_level_error(response_type, ErrorCode.invalid_request)
    return _ask_core(ctx, response_type, message)


@handles_controller(52, 0, 2)
def handle_vote(ctx: RequestContext, request: req.Vote) -> resp.Vote | Awaitable[resp.Vote]:
    response_type: type[resp.Vote] = ctx.response_type
    return _serve(ctx, response_type, request, quorum_wire.vote_from_wire)


@handles_controller(53, 0, 1)
def handle_begin_quorum_epoch(
    ctx: RequestContext, request: req.BeginQuorumEpoch
) -> resp.BeginQuorumEpoch | Awaitable[resp.BeginQuorumEpoch]:
    response_type: type[resp.BeginQuorumEpoch] = ctx.response_type
    return _serve(ctx, response_type, request, quorum_wire.begin_from_wire)


@handles_controller(54, 0, 1)
def handle_end_quorum_epoch(
    ctx: RequestContext, request: req.EndQuorumEpoch
) -> resp.EndQuorumEpoch | Awaitable[resp.EndQuorumEpoch]:
    response_type: type[resp.EndQuorumEpoch] = ctx.response_type
    return _serve(ctx, response_type, request, quorum_wire.end_from_wire)


@handles_controller(59, 0, 1)
def handle_fetch_snapshot(
    ctx: RequestContext, request: req.FetchSnapshot
) -> resp.FetchSnapshot | Awaitable[resp.FetchSnapshot]:
    response_type: type[resp.FetchSnapshot] = ctx.response_type
    return _serve(ctx, response_type, request, quorum_wire.fetch_snapshot_from_wire)


@handles_controller(1, 12, 17)
def handle_metadata_fetch(
    ctx: RequestContext, request: quorum_wire.MetadataFetchBody
) -> resp.Fetch | Awaitable[resp.Fetch]:
    response_type: type[resp.Fetch] = ctx.response_type
    if not quorum_wire.is_metadata_fetch(request):
        return _top_level_error(response_type, ErrorCode.unknown_topic_or_partition)
    return _serve(ctx, response_type, request, quorum_wire.fetch_from_wire)


@handles(55, 0, 2)
@handles_controller(55, 0, 2)
def handle_describe_quorum(
    ctx: RequestContext, request: req.DescribeQuorum
) -> resp.DescribeQuorum | Awaitable[resp.DescribeQuorum]:
    response_type: type[resp.DescribeQuorum] = ctx.response_type
    broker = ctx.broker
    if not authz.node_request_allowed(ctx, authz.Op.DESCRIBE):
        return build(
            response_type,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=f"{ctx.principal} may not DESCRIBE the cluster",
            topics=(),
            nodes=(),
        )
    quorum = broker.quorum
    if quorum is None or not quorum.leader_ready:
        return broker.controller_channel.forward(ctx, request)
    return describe_quorum(ctx, quorum.describe())


def describe_quorum(ctx: RequestContext, info: Any) -> resp.DescribeQuorum:
    response_type: type[resp.DescribeQuorum] = ctx.response_type
    replica_type = nested(response_type, "ReplicaState")

    # The quorum keeps monotonic milliseconds; the wire carries wall-clock ones.
    to_wall_ms = int(time.time() * 1000) - int(time.monotonic() * 1000)

    def wall(ms: int) -> int:
        return ms + to_wall_ms if ms >= 0 else ms

    def replica(state: Any) -> Any:
        return build(
            replica_type,
            replica_id=state.replica_id,
            replica_directory_id=quorum_wire.ZERO_UUID,
            log_end_offset=state.log_end_offset,
            last_fetch_timestamp=wall(state.last_fetch_timestamp),
            last_caught_up_timestamp=wall(state.last_caught_up_timestamp),
        )

    partition = build(
        nested(response_type, "PartitionData"),
        partition_index=quorum_wire.METADATA_PARTITION,
        error_code=ErrorCode.none,
        error_message=None,
        leader_id=info.leader_id,
        leader_epoch=info.leader_epoch,
        high_watermark=info.high_watermark,
        current_voters=tuple(replica(v) for v in info.voters),
        observers=tuple(replica(o) for o in info.observers),
    )
    topic = build(
        nested(response_type, "TopicData"),
        topic_name=quorum_wire.METADATA_TOPIC,
        partitions=(partition,),
    )
    return build(
        response_type, error_code=ErrorCode.none, error_message=None, topics=(topic,), nodes=()
    )
