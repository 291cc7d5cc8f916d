"""Classic group membership APIs and group administration.

- FindCoordinator (key 10), versions 0-6 (batched keys from v4): a group's
  coordinator is the leader of its ``__consumer_offsets`` partition, answered with
  that broker's endpoint; the topic is created through the active controller on
  first use (replication factor ``offsets.topic.replication.factor``, at most the
  live brokers). A transactional id's coordinator (key type 1) is the leader of its
  ``__transaction_state`` partition, created the same way on first use
  (``transaction.state.log.*``). A share coordinator key (type 2,
  "group:topicId:partition", asked by brokers; CLUSTER_ACTION needed) is answered with
  the leader of its ``__share_group_state`` partition, created the same way
  (``share.coordinator.state.topic.*``).
- JoinGroup (11) 0-9, SyncGroup (14) 0-5, Heartbeat (12) 0-4, LeaveGroup (13)
  0-5 (batched members from v3): the classic protocol, see
  strom/coordinator/classic.py. A JoinGroup is held (the connection answers it
  later) until the rebalance completes; so is a SyncGroup until the leader's
  assignment arrives. INVALID_GROUP_ID for an empty group id,
  INVALID_SESSION_TIMEOUT outside group.min/max.session.timeout.ms.
- DescribeGroups (15) 0-6, ListGroups (16) 0-5 (state filter from v4, type
  filter from v5), DeleteGroups (42) 0-2.

Authorization (``authz``), as Kafka checks it: FindCoordinator needs DESCRIBE on the
group or transactional id; the membership APIs READ on the group
(GROUP_AUTHORIZATION_FAILED); DescribeGroups DESCRIBE (and reports the authorized
operations from the ACLs); ListGroups lists all groups with DESCRIBE on the cluster,
else those the principal may describe; DeleteGroups needs DELETE.

Share groups (strom/broker/handlers/groups/share_groups.py) are listed with type and protocol type
"share" and deleted with their share-partition state.

Differences from Kafka: a classic member cannot join a KIP-848 group
(INCONSISTENT_GROUP_PROTOCOL) and DescribeGroups shows KIP-848 and share groups without
member metadata or assignments (ConsumerGroupDescribe and ShareGroupDescribe have them).
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from strom.broker.access import authz
from strom.broker.common import (
    GROUP_OPERATIONS,
    NO_THROTTLE,
    OPERATIONS_NOT_REQUESTED,
)
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.handlers.groups.member_fields import client_host, millis
from strom.broker.network.cluster_view import broker_endpoint, live_brokers
from strom.broker.network.router import RequestContext, handles
from strom.coordinator.classic import ClassicGroup, JoinRequest, JoinResult, SyncResult
from strom.coordinator.offsets_topic import OFFSETS_TOPIC, partition_for
from strom.coordinator.share_state import SHARE_STATE_TOPIC
from strom.coordinator.transaction_log import TRANSACTION_TOPIC
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
_COORDINATOR_TOPICS = {
    GROUP_KEY_TYPE: OFFSETS_TOPIC,
    TRANSACTION_KEY_TYPE: TRANSACTION_TOPIC,
    SHARE_KEY_TYPE: SHARE_STATE_TOPIC,
}
OFFSETS_TOPIC_WAIT_S = 5.0


# FindCoordinator ---------------------------------------------------------------


@handles(10, 0, 6)
def handle_find_coordinator(
    ctx: RequestContext, request: req.FindCoordinator
) -> resp.FindCoordinator | Awaitable[resp.FindCoordinator]:
    broker = ctx.broker
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    topic = _COORDINATOR_TOPICS.get(key_type)
    if topic is not None and broker.state.topic(topic) is None:
        return _create_internal_topic_then_find(ctx, request, topic)
    return _find_coordinator(ctx, request)


def _internal_topic_request(ctx: RequestContext, topic: str) -> tuple[int, int, dict[str, str]]:
    broker = ctx.broker
    live = len(live_brokers(broker))
    if topic == TRANSACTION_TOPIC:
        return broker.transactions.topic_request(live)
    if topic == SHARE_STATE_TOPIC:
        return broker.share_service.store.topic_request(live)
    wanted = broker.coordinator.offsets_topic_request(live)
    return wanted.partitions, wanted.replication_factor, wanted.configs


async def _create_internal_topic_then_find(
    ctx: RequestContext, request: req.FindCoordinator, topic: str
) -> resp.FindCoordinator:
    """Kafka creates the offsets and transaction state topics on the first
    FindCoordinator that needs them, and so do we."""
    broker = ctx.broker
    partitions, replication_factor, configs = _internal_topic_request(ctx, topic)
    create = create_topics.CreateTopicsRequest(
        topics=(
            create_topics.CreatableTopic(
                name=TopicName(topic),
                num_partitions=i32(partitions),
                replication_factor=i16(replication_factor),
                assignments=(),
                configs=tuple(
                    create_topics.CreatableTopicConfig(name=k, value=v)
                    for k, v in sorted(configs.items())
                ),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=OFFSETS_TOPIC_WAIT_S)),
        validate_only=False,
    )
    try:
        await broker.controller_channel.forward(ctx, create)
    except ControllerUnavailable:
        pass  # answered COORDINATOR_NOT_AVAILABLE below; the client asks again
    await broker.wait_for_metadata(
        lambda: broker.state.topic(topic) is not None, OFFSETS_TOPIC_WAIT_S
    )
    return _find_coordinator(ctx, request)


def _coordinator_of(
    ctx: RequestContext, key: str, topic_name: str
) -> tuple[ErrorCode, str | None, Any]:
    broker = ctx.broker
    topic = broker.state.topic(topic_name)
    if topic is None or topic.partitions == 0:
        return ErrorCode.coordinator_not_available, "The coordinator is not available.", None
    leader = topic.leader_of(partition_for(key, topic.partitions))
    endpoint = broker_endpoint(broker, leader, ctx.listener)
    if endpoint is None:
        return ErrorCode.coordinator_not_available, "The coordinator is not available.", None
    return ErrorCode.none, None, endpoint


def _asks_for_one_key(request: req.FindCoordinator) -> TypeIs[req.FindCoordinatorV0ToV3]:
    return request.__version__ < 4


def _find_coordinator(ctx: RequestContext, request: req.FindCoordinator) -> resp.FindCoordinator:
    response_type: type[resp.FindCoordinator] = ctx.response_type
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)

    def answer(key: str) -> tuple[ErrorCode, str | None, int, str, int]:
        topic = _COORDINATOR_TOPICS.get(key_type)
        if topic is None:
            return ErrorCode.invalid_request, f"Key type {key_type} is not served", -1, "", -1
        if key_type == TRANSACTION_KEY_TYPE and not key:
            return ErrorCode.invalid_request, "An empty transactional id", -1, "", -1
        if key_type == SHARE_KEY_TYPE:
            if not authz.cluster_allowed(ctx, authz.Op.CLUSTER_ACTION):
                error = ErrorCode.cluster_authorization_failed
                return error, "Cluster authorization failed.", -1, "", -1
        elif key_type == TRANSACTION_KEY_TYPE:
            if not authz.allowed(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, key):
                error = ErrorCode.transactional_id_authorization_failed
                return error, "Transactional Id authorization failed.", -1, "", -1
        elif not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, key):
            return ErrorCode.group_authorization_failed, "Group authorization failed.", -1, "", -1
        error, message, endpoint = _coordinator_of(ctx, key, topic)
        if endpoint is None:
            return error, message, -1, "", -1
        return error, message, endpoint.node_id, endpoint.host, endpoint.port

    if _asks_for_one_key(request):
        error, message, node, host, port = answer(request.key)
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )
    coordinator_type = nested(response_type, "Coordinator")
    coordinators = []
    for key in request.coordinator_keys:
        error, message, node, host, port = answer(key)
        coordinators.append(
            build(
                coordinator_type,
                key=key,
                node_id=node,
                host=host,
                port=port,
                error_code=error,
                error_message=message,
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))


# JoinGroup ---------------------------------------------------------------------


@handles(11, 0, 9)
def handle_join_group(
    ctx: RequestContext, request: req.JoinGroup
) -> resp.JoinGroup | Awaitable[resp.JoinGroup]:
    coordinator = ctx.broker.coordinator
    session_ms = millis(request.session_timeout)
    rebalance_ms = millis(getattr(request, "rebalance_timeout", None))
    if rebalance_ms < 0:
        rebalance_ms = session_ms
    if not request.group_id:
        return _join_response(ctx, JoinResult(ErrorCode.invalid_group_id, request.member_id))
    if not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        denied = JoinResult(ErrorCode.group_authorization_failed, request.member_id)
        return _join_response(ctx, denied)
    if not coordinator.is_coordinator_for(request.group_id):
        return _join_response(ctx, JoinResult(ErrorCode.not_coordinator, request.member_id))
    if not coordinator.session_timeout_allowed(session_ms):
        return _join_response(ctx, JoinResult(ErrorCode.invalid_session_timeout, request.member_id))
    group = coordinator.classic_group(request.group_id, create=not request.member_id)
    if group is None:
        error = (
            ErrorCode.inconsistent_group_protocol
            if coordinator.group_exists(request.group_id)
            else ErrorCode.unknown_member_id
        )
        return _join_response(ctx, JoinResult(error, request.member_id))
    result = group.join(
        JoinRequest(
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            api_version=ctx.api_version,
            reason=getattr(request, "reason", None),
        )
    )
    if isinstance(result, JoinResult):
        return _join_response(ctx, result)
    return _await_join(ctx, result)


async def _await_join(ctx: RequestContext, pending: Any) -> resp.JoinGroup:
    return _join_response(ctx, await pending)


def _join_response(ctx: RequestContext, result: JoinResult) -> resp.JoinGroup:
    response_type: type[resp.JoinGroup] = ctx.response_type
    member_type = nested(response_type, "JoinGroupResponseMember")
    legacy = ctx.api_version < 7
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name
        if result.protocol_name is not None or not legacy
        else "",
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            build(member_type, member_id=mid, group_instance_id=instance, metadata=metadata)
            for mid, instance, metadata in result.members
        ),
    )


# SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------


@handles(14, 0, 5)
def handle_sync_group(
    ctx: RequestContext, request: req.SyncGroup
) -> resp.SyncGroup | Awaitable[resp.SyncGroup]:
    if not request.group_id:
        return _sync_response(ctx, SyncResult(ErrorCode.invalid_group_id))
    if not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        return _sync_response(ctx, SyncResult(ErrorCode.group_authorization_failed))
    if not ctx.broker.coordinator.is_coordinator_for(request.group_id):
        return _sync_response(ctx, SyncResult(ErrorCode.not_coordinator))
    group = ctx.broker.coordinator.classic_group(request.group_id, create=False)
    if group is None:
        return _sync_response(ctx, SyncResult(ErrorCode.unknown_member_id))
    result = group.sync(
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    if isinstance(result, SyncResult):
        return _sync_response(ctx, result)
    return _await_sync(ctx, result)


async def _await_sync(ctx: RequestContext, pending: Any) -> resp.SyncGroup:
    return _sync_response(ctx, await pending)


def _sync_response(ctx: RequestContext, result: SyncResult) -> resp.SyncGroup:
    response_type: type[resp.SyncGroup] = ctx.response_type
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@handles(12, 0, 4)
def handle_heartbeat(ctx: RequestContext, request: req.Heartbeat) -> resp.Heartbeat:
    response_type: type[resp.Heartbeat] = ctx.response_type
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    elif not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif not ctx.broker.coordinator.is_coordinator_for(request.group_id):
        error = ErrorCode.not_coordinator
    else:
        group = ctx.broker.coordinator.classic_group(request.group_id, create=False)
        if group is None:
            error = ErrorCode.unknown_member_id
        else:
            error = group.heartbeat(
                request.member_id,
                getattr(request, "group_instance_id", None),
                request.generation_id,
            )
    return build(response_type, throttle_time=NO_THROTTLE, error_code=error)


def _names_one_member(request: req.LeaveGroup) -> TypeIs[req.LeaveGroupV0ToV2]:
    return request.__version__ < 3


@handles(13, 0, 5)
def handle_leave_group(ctx: RequestContext, request: req.LeaveGroup) -> resp.LeaveGroup:
    response_type: type[resp.LeaveGroup] = ctx.response_type
    leaving: list[tuple[str, str | None]]
    errors: list[ErrorCode]
    if _names_one_member(request):
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    group = ctx.broker.coordinator.classic_group(request.group_id, create=False)
    if not request.group_id:
        top, errors = ErrorCode.invalid_group_id, []
    elif not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        top, errors = ErrorCode.group_authorization_failed, []
    elif group is None:
        top, errors = ErrorCode.unknown_member_id, []
    else:
        errors = group.leave(leaving)
        top = ErrorCode.none
        if ctx.api_version < 3:
            top, errors = errors[0], []
    if ctx.api_version < 3:
        return build(response_type, throttle_time=NO_THROTTLE, error_code=top)
    member_type = nested(response_type, "MemberResponse")
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=top,
        members=tuple(
            build(member_type, member_id=mid, group_instance_id=instance, error_code=error)
            for (mid, instance), error in zip(leaving, errors, strict=False)
        ),
    )


# DescribeGroups, ListGroups, DeleteGroups --------------------------------------------


@handles(15, 0, 6)
def handle_describe_groups(ctx: RequestContext, request: req.DescribeGroups) -> resp.DescribeGroups:
    response_type: type[resp.DescribeGroups] = ctx.response_type
    coordinator = ctx.broker.coordinator
    group_type = nested(response_type, "DescribedGroup")
    member_type = nested(response_type, "DescribedGroupMember")
    described = []
    for group_id in request.groups:
        group = coordinator.groups.get(group_id)
        denied = not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group_id)
        if group is None or denied:
            error = ErrorCode.group_id_not_found if ctx.api_version >= 6 else ErrorCode.none
            if denied:
                error = ErrorCode.group_authorization_failed
            described.append(
                build(
                    group_type,
                    error_code=error,
                    error_message=None,
                    group_id=group_id,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=OPERATIONS_NOT_REQUESTED,
                )
            )
            continue
        if isinstance(group, ClassicGroup):
            stable = group.state_name == "Stable"
            members = tuple(
                build(
                    member_type,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata_for(group.protocol_name),
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            protocol_type, protocol_data = group.protocol_type or "", group.protocol_name or ""
        else:
            members = tuple(
                build(
                    member_type,
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "instance_id", None),
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=b"",
                    member_assignment=b"",
                )
                for m in group.members.values()
            )
            protocol_type, protocol_data = group.protocol_type, group.assignor_name
        described.append(
            build(
                group_type,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=group_id,
                group_state=group.state_name,
                protocol_type=protocol_type,
                protocol_data=protocol_data,
                members=members,
                authorized_operations=authz.operations(
                    ctx,
                    authz.GROUP,
                    group_id,
                    GROUP_OPERATIONS,
                    getattr(request, "include_authorized_operations", False),
                ),
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, groups=tuple(described))


@handles(16, 0, 5)
def handle_list_groups(ctx: RequestContext, request: req.ListGroups) -> resp.ListGroups:
    response_type: type[resp.ListGroups] = ctx.response_type
    listed_type = nested(response_type, "ListedGroup")
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    listed = []
    # Every group with DESCRIBE on the cluster, else those the principal may describe.
    check_each = not authz.cluster_allowed(ctx, authz.Op.DESCRIBE)
    for group in ctx.broker.coordinator.list_groups():
        if states and group.state_name.lower() not in states:
            continue
        if check_each and not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group.group_id):
            continue
        if types and group.kind not in types:
            continue
        protocol_type = group.protocol_type or ""
        listed.append(
            build(
                listed_type,
                group_id=group.group_id,
                protocol_type=protocol_type,
                group_state=group.state_name,
                group_type=group.kind,
            )
        )
    return build(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(listed)
    )


@handles(42, 0, 2)
def handle_delete_groups(ctx: RequestContext, request: req.DeleteGroups) -> resp.DeleteGroups:
    response_type: type[resp.DeleteGroups] = ctx.response_type
    result_type = nested(response_type, "DeletableGroupResult")
    coordinator = ctx.broker.coordinator
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(
                result_type,
                group_id=group_id,
                error_code=ErrorCode.invalid_group_id
                if not group_id
                else ErrorCode.group_authorization_failed
                if not authz.allowed(ctx, authz.Op.DELETE, authz.GROUP, group_id)
                else coordinator.delete_group(group_id),
            )
            for group_id in request.groups_names
        ),
    )
