"""Partition and broker administration a client sends to any broker: ElectLeaders (43)
v0-2, AlterPartitionReassignments (45) v0-1, ListPartitionReassignments (46) v0 and
UnregisterBroker (64) v0 (removing a broker for good, after its replicas were moved
off; ``strom cluster --unregister``).

Each is forwarded to the active controller (controller_channel), which decides and
answers once the change has committed (controller_handlers, the QuorumController). An
ElectLeaders of any version travels as v2, whose top-level error code lets the
forwarding side see NOT_CONTROLLER and retry; its answer is rebuilt in the client's
version. A started reassignment is answered once this broker's own metadata shows it,
so the client's next ListPartitionReassignments or Metadata here sees it. With no
controller reachable in time the answer is REQUEST_TIMED_OUT, which clients retry.
ElectLeaders, AlterPartitionReassignments and UnregisterBroker need ALTER on the
cluster, ListPartitionReassignments DESCRIBE (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.elect_leaders.v2 import request as elect_v2
from kio.static.primitive import i8

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from kio.schema.elect_leaders.v2 import response as elect_v2_response

    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

log = logging.getLogger(__name__)

FORWARD_WAIT_S = 5.0
TIMED_OUT_MESSAGE = "No active controller answered in time."
DENIED = "Cluster authorization failed."


@handles(43, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request: req.ElectLeaders) -> resp.ElectLeaders:
    response_type: type[resp.ElectLeaders] = ctx.response_type
    topic_type = nested(response_type, "ReplicaElectionResult")
    partition_type = nested(response_type, "PartitionResult")
    if not authz.cluster_allowed(ctx, authz.Op.ALTER):
        return _elect_failed(ctx, request, ErrorCode.cluster_authorization_failed, DENIED)
    forwarded = elect_v2.ElectLeadersRequest(
        election_type=i8(getattr(request, "election_type", 0)),  # v1+
        topic_partitions=None
        if request.topic_partitions is None
        else tuple(
            elect_v2.TopicPartitions(topic=t.topic, partitions=tuple(t.partitions))
            for t in request.topic_partitions
        ),
        timeout=request.timeout,
    )
    try:
        response: elect_v2_response.ElectLeadersResponse = (
            await ctx.broker.controller_channel.forward(ctx, forwarded)
        )
    except ControllerUnavailable as exc:
        log.warning("ElectLeaders from %s: %s", ctx.peer, exc)
        return _elect_failed(ctx, request, ErrorCode.request_timed_out, TIMED_OUT_MESSAGE)
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=response.error_code,
        replica_election_results=tuple(
            build(
                topic_type,
                topic=t.topic,
                partition_result=tuple(
                    build(
                        partition_type,
                        partition_id=p.partition_id,
                        error_code=p.error_code,
                        error_message=p.error_message,
                    )
                    for p in t.partition_result
                ),
            )
            for t in response.replica_election_results
        ),
    )


def _elect_failed(
    ctx: RequestContext, request: req.ElectLeaders, error: ErrorCode, message: str
) -> resp.ElectLeaders:
    response_type: type[resp.ElectLeaders] = ctx.response_type
    topic_type = nested(response_type, "ReplicaElectionResult")
    partition_type = nested(response_type, "PartitionResult")
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=error,
        replica_election_results=tuple(
            build(
                topic_type,
                topic=t.topic,
                partition_result=tuple(
                    build(partition_type, partition_id=p, error_code=error, error_message=message)
                    for p in t.partitions
                ),
            )
            for t in request.topic_partitions or ()
        ),
    )


@handles(45, 0, 1)
async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: req.AlterPartitionReassignments
) -> resp.AlterPartitionReassignments:
    response_type: type[resp.AlterPartitionReassignments] = ctx.response_type
    broker = ctx.broker
    if not authz.cluster_allowed(ctx, authz.Op.ALTER):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=DENIED,
            responses=(),
        )
    try:
        response: resp.AlterPartitionReassignments = await broker.controller_channel.forward(
            ctx, request
        )
    except ControllerUnavailable as exc:
        log.warning("AlterPartitionReassignments from %s: %s", ctx.peer, exc)
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.request_timed_out,
            error_message=TIMED_OUT_MESSAGE,
            responses=(),
        )
    started = {
        (t.name, p.partition_index): p.replicas
        for t in request.topics
        for p in t.partitions
        if p.replicas is not None
    }
    accepted = [
        (t.name, p.partition_index)
        for t in response.responses
        for p in t.partitions
        if p.error_code == ErrorCode.none and (t.name, p.partition_index) in started
    ]

    def visible() -> bool:
        for name, index in accepted:
            view = broker.state.topics.get(name)
            state = view.states.get(index) if view is not None else None
            if state is None or not set(started[(name, index)]) <= set(state.replicas):
                return False
        return True

    if accepted:
        await broker.wait_for_metadata(visible, FORWARD_WAIT_S)
    return response


@handles(46, 0, 0)
async def handle_list_partition_reassignments(
    ctx: RequestContext, request: req.ListPartitionReassignments
) -> resp.ListPartitionReassignments:
    response_type: type[resp.ListPartitionReassignments] = ctx.response_type
    if not authz.cluster_allowed(ctx, authz.Op.DESCRIBE):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=DENIED,
            topics=(),
        )
    try:
        answer: resp.ListPartitionReassignments = await ctx.broker.controller_channel.forward(
            ctx, request
        )
        return answer
    except ControllerUnavailable as exc:
        log.warning("ListPartitionReassignments from %s: %s", ctx.peer, exc)
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.request_timed_out,
            error_message=TIMED_OUT_MESSAGE,
            topics=(),
        )


@handles(64, 0, 0)
async def handle_unregister_broker(
    ctx: RequestContext, request: req.UnregisterBroker
) -> resp.UnregisterBroker:
    response_type: type[resp.UnregisterBroker] = ctx.response_type
    if not authz.cluster_allowed(ctx, authz.Op.ALTER):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=DENIED,
        )
    try:
        answer: resp.UnregisterBroker = await ctx.broker.controller_channel.forward(ctx, request)
        return answer
    except ControllerUnavailable as exc:
        log.warning("UnregisterBroker from %s: %s", ctx.peer, exc)
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.request_timed_out,
            error_message=TIMED_OUT_MESSAGE,
        )
