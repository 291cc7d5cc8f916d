"""The next-generation consumer group protocol (KIP-848).

- ConsumerGroupHeartbeat (key 68), versions 0-1: joins, heartbeats,
  reconciliation and leaving, with the assignment computed by the broker (see
  strom/coordinator/consumer_group.py). INVALID_REQUEST for a missing group id,
  a join without a subscription, or a v1 join without a member id (v1 members
  choose their own id); UNSUPPORTED_ASSIGNOR for an assignor not listed in
  ``group.consumer.assignors``; INVALID_REGULAR_EXPRESSION for a subscription
  regex Python's ``re`` cannot compile (Kafka uses RE2/J); GROUP_ID_NOT_FOUND
  for a group that is an active classic group.
- ConsumerGroupDescribe (69), versions 0-1: members with their current and
  target assignments; GROUP_ID_NOT_FOUND for unknown and classic groups.

Authorization: READ on the group for ConsumerGroupHeartbeat and DESCRIBE for
ConsumerGroupDescribe (GROUP_AUTHORIZATION_FAILED), whose authorized operations come
from the ACLs. Rack ids are kept but not used. A heartbeat that changed the group is
answered once its records in ``__consumer_offsets`` reached the followers (or after
``offsets.commit.timeout.ms``).
"""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import (
    GROUP_OPERATIONS,
    NO_THROTTLE,
    OPERATIONS_NOT_REQUESTED,
    ZERO_UUID,
)
from strom.broker.handlers.groups.member_fields import client_host, millis
from strom.broker.network.router import RequestContext, handles
from strom.coordinator.assignors import assignor_name
from strom.coordinator.consumer_group import (
    ConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
    TopicAssignment,
)
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.safe_regex import InvalidRegex, compile_pattern
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

MEMBER_TYPE_CONSUMER = 1


def _fail(
    ctx: RequestContext, error: ErrorCode, message: str | None, request: req.ConsumerGroupHeartbeat
) -> resp.ConsumerGroupHeartbeat:
    return _response(
        ctx,
        HeartbeatResult(error, request.member_id or None, request.member_epoch, 0, None, message),
    )


def _response(ctx: RequestContext, result: HeartbeatResult) -> resp.ConsumerGroupHeartbeat:
    response_type: type[resp.ConsumerGroupHeartbeat] = ctx.response_type
    assignment = None
    if result.assignment is not None:
        assignment_type = nested(response_type, "Assignment")
        partitions_type = nested(response_type, "TopicPartitions")
        assignment = build(
            assignment_type,
            topic_partitions=tuple(
                build(partitions_type, topic_id=topic_id, partitions=tuple(sorted(ps)))
                for topic_id, ps in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))
            ),
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )


@handles(68, 0, 1)
def handle_consumer_group_heartbeat(
    ctx: RequestContext, request: req.ConsumerGroupHeartbeat
) -> resp.ConsumerGroupHeartbeat:
    coordinator = ctx.broker.coordinator
    if not request.group_id:
        return _fail(ctx, ErrorCode.invalid_request, "GroupId can't be empty.", request)
    if not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        return _fail(
            ctx, ErrorCode.group_authorization_failed, "Group authorization failed.", request
        )
    if not coordinator.is_coordinator_for(request.group_id):
        return _fail(
            ctx, ErrorCode.not_coordinator, "This node is not the group's coordinator.", request
        )
    regex = getattr(request, "subscribed_topic_regex", None)
    joining = request.member_epoch == 0
    if joining and request.subscribed_topic_names is None and regex is None:
        return _fail(
            ctx,
            ErrorCode.invalid_request,
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            request,
        )
    if joining and ctx.api_version >= 1 and not request.member_id:
        return _fail(ctx, ErrorCode.invalid_request, "MemberId can't be empty.", request)
    if request.server_assignor is not None:
        known = {assignor_name(a) for a in coordinator.config["group.consumer.assignors"]}
        if request.server_assignor not in known:
            return _fail(
                ctx,
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported.",
                request,
            )
    if regex:
        try:
            compile_pattern(regex)
        except InvalidRegex as exc:
            return _fail(ctx, ErrorCode.invalid_regular_expression, str(exc), request)
    group = coordinator.consumer_group(request.group_id, create=joining)
    if group is None:
        error = (
            ErrorCode.group_id_not_found
            if coordinator.group_exists(request.group_id)
            else ErrorCode.unknown_member_id
        )
        return _fail(ctx, error, None, request)
    owned: TopicAssignment | None = None
    if request.topic_partitions is not None:
        # kio reads the zero topic id as None: kept as the zero id, which names no topic.
        owned = {tp.topic_id or ZERO_UUID: set(tp.partitions) for tp in request.topic_partitions}
    coordinator.appended_at = None
    result = group.heartbeat(
        HeartbeatRequest(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=(
                None
                if request.subscribed_topic_names is None
                else list(request.subscribed_topic_names)
            ),
            subscribed_topic_regex=regex,
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
        )
    )
    waiting = coordinator.appended_at
    if waiting is not None and ctx.broker.replicas.is_replicated(OFFSETS_TOPIC, waiting[0]):
        return _after_replication(ctx, result, waiting)
    return _response(ctx, result)


async def _after_replication(
    ctx: RequestContext, result: HeartbeatResult, waiting: tuple[int, int, int]
) -> Any:
    """Answer once the group's new records are on the followers too (as Kafka answers
    after its write is committed), so a coordinator that takes over knows what the
    member was told; past ``offsets.commit.timeout.ms`` the answer goes anyway."""
    timeout_s = int(ctx.broker.config["offsets.commit.timeout.ms"]) / 1000
    await ctx.broker.replicas.wait_for_high_watermark(
        (OFFSETS_TOPIC, waiting[0]), waiting[1], waiting[2], timeout_s
    )
    return _response(ctx, result)


@handles(69, 0, 1)
def handle_consumer_group_describe(
    ctx: RequestContext, request: req.ConsumerGroupDescribe
) -> resp.ConsumerGroupDescribe:
    response_type: type[resp.ConsumerGroupDescribe] = ctx.response_type
    coordinator = ctx.broker.coordinator
    group_type = nested(response_type, "DescribedGroup")
    member_type = nested(response_type, "Member")
    assignment_type = nested(response_type, "Assignment")
    partitions_type = nested(response_type, "TopicPartitions")
    described = []

    def assignment(group: ConsumerGroup, topics: dict[uuid.UUID, set[int]]) -> Any:
        entries = []
        for topic_id, ps in topics.items():
            name = group.topic_name(topic_id)
            if name is not None and ps:
                entries.append(
                    build(
                        partitions_type,
                        topic_id=topic_id,
                        topic_name=name,
                        partitions=tuple(sorted(ps)),
                    )
                )
        return build(assignment_type, topic_partitions=tuple(entries))

    for group_id in request.group_ids:
        group = coordinator.groups.get(group_id)
        denied = not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group_id)
        if denied or not isinstance(group, ConsumerGroup):
            message = (
                "Group authorization failed."
                if denied
                else f"Group {group_id} is not a consumer group."
                if group is not None
                else f"Group {group_id} not found."
            )
            described.append(
                build(
                    group_type,
                    error_code=ErrorCode.group_authorization_failed
                    if denied
                    else ErrorCode.group_id_not_found,
                    error_message=message,
                    group_id=group_id,
                    group_state="Dead",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=(),
                    authorized_operations=OPERATIONS_NOT_REQUESTED,
                )
            )
            continue
        members = tuple(
            build(
                member_type,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(group, m.assigned),
                target_assignment=assignment(group, group.target.get(m.member_id, {})),
                member_type=MEMBER_TYPE_CONSUMER,
            )
            for m in group.members.values()
        )
        described.append(
            build(
                group_type,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state_name,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor_name,
                members=members,
                authorized_operations=authz.operations(
                    ctx,
                    authz.GROUP,
                    group_id,
                    GROUP_OPERATIONS,
                    request.include_authorized_operations,
                ),
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, groups=tuple(described))
