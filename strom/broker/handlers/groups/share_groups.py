"""Share groups (KIP-932, "queues"): the wire side.

- ShareGroupHeartbeat (key 76), version 1: joins (epoch 0, the member id chosen by the
  client), heartbeats and leaving (epoch -1); the assignment computed by the share
  group assignor (strom/coordinator/share_group.py) is sent when it changed. INVALID_
  REQUEST for an empty group or member id or a join without topics; GROUP_ID_NOT_FOUND
  for the id of a classic or consumer group.
- ShareGroupDescribe (77), version 1: members with their assignments.
- ShareFetch (78), versions 1-2: share sessions (member id + session epoch: 0 opens,
  -1 closes, else the next epoch; SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH;
  as in Kafka, a session also ends when the connection it was opened on closes),
  acknowledgements piggy-backed and applied first, then records acquired from each
  session partition's log: whole batches, with the AcquiredRecords ranges this member
  holds (share_partition.py), at most ``max_records`` (a batch is finished), ``max_bytes``
  as Fetch reads. When nothing could be acquired the request waits, up to ``max_wait``,
  for a produce to its partitions or records to come back (released, lock expired).
  ``share.isolation.level`` read_committed reads up to the last stable offset and
  archives aborted batches and markers as gaps; read_uncommitted (the default) up to
  the high watermark. A session closing (-1) releases what the member holds.
- ShareAcknowledge (79), versions 1-2: acknowledgements standalone, in the session.
- DescribeShareGroupOffsets (90) 0-1, AlterShareGroupOffsets (91) 0,
  DeleteShareGroupOffsets (92) 0: a group's share-partition start offsets (and lag
  from v1); altering and deleting need an empty group (NON_EMPTY_GROUP). A start
  offset comes from the share-partition held here, the state this node keeps, else
  the share coordinator that keeps it (ReadShareGroupStateSummary, as Kafka's group
  coordinator asks; this node's replica of ``__share_group_state`` if it does not
  answer); the lag is the high watermark (this node's copy, else the partition
  leader's latest offset by ListOffsets) less the start offset and the offsets after
  it already accepted or archived. Without topics named, the group's share-partitions
  are those known here and the partitions of the topics its members subscribe to.

The share-partitions themselves, their state in ``__share_group_state`` and their
sessions are the node's ``ShareService`` (``share_service.py``); the handlers reach it
as ``ctx.broker.share_service``.

Gated as Kafka 4.2 gates them: served when the cluster's ``share.version`` feature is
finalized at 1 (a new cluster's level; UpdateFeatures changes it) or the broker's
``group.share.enable`` is true; otherwise every share API answers UNSUPPORTED_VERSION
with a message saying so (the APIs stay in ApiVersions, as Kafka keeps them).
Authorization as Kafka checks it: READ on the group for heartbeats, fetches and
acknowledgements (GROUP_AUTHORIZATION_FAILED), READ on each topic fetched or
acknowledged (TOPIC_AUTHORIZATION_FAILED), DESCRIBE on the group to describe it or its offsets,
DELETE / ALTER for the offsets' admin calls.

Differences from Kafka: DescribeShareGroupOffsets
with no topics named does not know the share-partitions of an empty group whose state
is kept in __share_group_state partitions this node has no replica of (Kafka keeps
the initialized partitions in the group's records); ``batch_size`` and
``share_acquire_mode`` are not used (acquisition is batch-optimized).
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from kio.schema.create_topics.v7 import request as create_topics

from strom.broker.access import authz
from strom.broker.common import GROUP_OPERATIONS, NO_THROTTLE, OPERATIONS_NOT_REQUESTED
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.handlers.groups.member_fields import client_host
from strom.broker.handlers.groups.share_service import (
    FINAL_EPOCH,
    READ_LIMIT,
    STATE_TOPIC_WAIT_S,
    Durable,
    HeldSharePartition,
    ShareService,
)
from strom.broker.network.cluster_view import live_brokers
from strom.broker.network.router import RequestContext, handles
from strom.cluster.features import share_groups_enabled
from strom.coordinator.share_group import ShareGroup, ShareHeartbeat, ShareHeartbeatResult
from strom.coordinator.share_sessions import ShareSession
from strom.coordinator.share_state import (
    SHARE_STATE_TOPIC,
    ShareKey,
    ShareState,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.protocol.records import iter_headers
from strom.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

log = logging.getLogger(__name__)


def _disabled(ctx: RequestContext) -> str | None:
    broker = ctx.broker
    if share_groups_enabled(broker.state.image.features, bool(broker.config["group.share.enable"])):
        return None
    return (
        "Share groups are not enabled: the cluster's share.version is 0 (strom features "
        "upgrade --feature share.version=1) and group.share.enable is false"
    )


async def _ensure_state_topic(ctx: RequestContext) -> None:
    """Create ``__share_group_state`` through the active controller if it is missing."""
    broker = ctx.broker
    store = broker.share_service.store
    if store.topic_exists():
        return
    partitions, replication_factor, configs = store.topic_request(len(live_brokers(broker)))
    create = build(
        create_topics.CreateTopicsRequest,
        topics=(
            build(
                create_topics.CreatableTopic,
                name=SHARE_STATE_TOPIC,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=tuple(
                    build(create_topics.CreatableTopicConfig, name=k, value=v)
                    for k, v in sorted(configs.items())
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=STATE_TOPIC_WAIT_S),
        validate_only=False,
    )
    try:
        await broker.controller_channel.forward(ctx, create)
    except ControllerUnavailable:
        return
    await broker.wait_for_metadata(store.topic_exists, STATE_TOPIC_WAIT_S)

    def led() -> bool:
        topic = broker.state.topic(SHARE_STATE_TOPIC)
        return topic is not None and all(topic.leader_of(p) >= 0 for p in range(topic.partitions))

    await broker.wait_for_metadata(led, STATE_TOPIC_WAIT_S)


# ShareGroupHeartbeat -----------------------------------------------------------------


def _heartbeat_response(
    ctx: RequestContext, result: ShareHeartbeatResult
) -> resp.ShareGroupHeartbeat:
    response_type: type[resp.ShareGroupHeartbeat] = ctx.response_type
    assignment = None
    if result.assignment is not None:
        assignment = build(
            nested(response_type, "Assignment"),
            topic_partitions=tuple(
                build(
                    nested(response_type, "TopicPartitions"),
                    topic_id=topic_id,
                    partitions=tuple(sorted(ps)),
                )
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


@handles(76, 1, 1)
def handle_share_group_heartbeat(
    ctx: RequestContext, request: req.ShareGroupHeartbeat
) -> resp.ShareGroupHeartbeat | Awaitable[resp.ShareGroupHeartbeat]:
    def fail(error: ErrorCode, message: str | None) -> resp.ShareGroupHeartbeat:
        return _heartbeat_response(
            ctx,
            ShareHeartbeatResult(
                error, request.member_id or None, request.member_epoch, 0, None, message
            ),
        )

    disabled = _disabled(ctx)
    if disabled is not None:
        return fail(ErrorCode.unsupported_version, disabled)
    if not request.group_id:
        return fail(ErrorCode.invalid_request, "GroupId can't be empty.")
    if not request.member_id:
        return fail(ErrorCode.invalid_request, "MemberId can't be empty.")
    joining = request.member_epoch == 0
    if joining and not request.subscribed_topic_names:
        return fail(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
    if not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        return fail(ErrorCode.group_authorization_failed, "Group authorization failed.")
    names = list(request.subscribed_topic_names or ())
    if names:
        allowed = authz.filter_allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, set(names))
        if set(names) - allowed:
            return fail(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
    coordinator = ctx.broker.coordinator
    if not coordinator.is_coordinator_for(request.group_id):
        return fail(ErrorCode.not_coordinator, "This node is not the group's coordinator.")
    if joining and not ctx.broker.share_service.store.topic_exists():
        return _after_state_topic(ctx, request)
    return _heartbeat(ctx, request)


async def _after_state_topic(
    ctx: RequestContext, request: req.ShareGroupHeartbeat
) -> resp.ShareGroupHeartbeat:
    await _ensure_state_topic(ctx)
    return _heartbeat(ctx, request)


def _heartbeat(ctx: RequestContext, request: req.ShareGroupHeartbeat) -> resp.ShareGroupHeartbeat:
    coordinator = ctx.broker.coordinator
    group = coordinator.share_group(request.group_id, create=request.member_epoch == 0)
    if group is None:
        exists = coordinator.group_exists(request.group_id)
        return _heartbeat_response(
            ctx,
            ShareHeartbeatResult(
                ErrorCode.group_id_not_found if exists else ErrorCode.unknown_member_id,
                request.member_id,
                request.member_epoch,
                0,
                None,
                f"Group {request.group_id} is not a share group." if exists else None,
            ),
        )
    result = group.heartbeat(
        ShareHeartbeat(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            subscribed_topic_names=None
            if request.subscribed_topic_names is None
            else list(request.subscribed_topic_names),
            client_id=ctx.client_id or "",
            client_host=client_host(ctx),
        )
    )
    return _heartbeat_response(ctx, result)


# ShareGroupDescribe --------------------------------------------------------------------


@handles(77, 1, 1)
def handle_share_group_describe(
    ctx: RequestContext, request: req.ShareGroupDescribe
) -> resp.ShareGroupDescribe:
    response_type: type[resp.ShareGroupDescribe] = ctx.response_type
    coordinator = ctx.broker.coordinator
    group_type = nested(response_type, "DescribedGroup")
    member_type = nested(response_type, "Member")
    assignment_type = nested(response_type, "Assignment")
    partitions_type = nested(response_type, "TopicPartitions")
    disabled = _disabled(ctx)
    described = []
    for group_id in request.group_ids:
        group = coordinator.groups.get(group_id)
        denied = not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group_id)
        if disabled or denied or not isinstance(group, ShareGroup):
            error, message = (
                (ErrorCode.unsupported_version, disabled)
                if disabled
                else (ErrorCode.group_authorization_failed, "Group authorization failed.")
                if denied
                else (ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
                if group is not None
                else (ErrorCode.group_id_not_found, f"Group {group_id} not found.")
            )
            described.append(
                build(
                    group_type,
                    error_code=error,
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

        def assignment(assigned: dict[uuid.UUID, set[int]], group: ShareGroup = group) -> Any:
            return build(
                assignment_type,
                topic_partitions=tuple(
                    build(
                        partitions_type, topic_id=t, topic_name=name, partitions=tuple(sorted(ps))
                    )
                    for t, ps in assigned.items()
                    if ps and (name := group.topic_name(t)) is not None
                ),
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
                members=tuple(
                    build(
                        member_type,
                        member_id=m.member_id,
                        rack_id=m.rack_id,
                        member_epoch=m.epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=tuple(m.subscribed_topic_names),
                        assignment=assignment(m.assigned),
                    )
                    for m in group.members.values()
                ),
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


# Sessions and acknowledgements ---------------------------------------------------------


@dataclass(slots=True)
class _Step:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    session: ShareSession | None = None


def _session_step(
    service: ShareService, group_id: str, member_id: str, epoch: int, *, fetch: bool
) -> _Step:
    key = (group_id, member_id)
    if epoch == 0:
        if not fetch:
            return _Step(
                ErrorCode.invalid_share_session_epoch,
                "ShareAcknowledge cannot open a share session (epoch 0).",
            )
        opened = service.sessions.open(group_id, member_id, service.now_ms())
        if opened is None:
            return _Step(
                ErrorCode.share_session_limit_reached,
                "The share session cache is full (group.share.max.share.sessions).",
            )
        return _Step(session=opened)
    session = service.sessions.get(key)
    if session is None:
        return _Step(ErrorCode.share_session_not_found, "The share session was not found.")
    session.last_used_ms = service.now_ms()
    if epoch == FINAL_EPOCH:
        return _Step(session=session)
    if epoch != session.next_epoch:
        return _Step(
            ErrorCode.invalid_share_session_epoch,
            f"The share session epoch {epoch} is not the expected {session.next_epoch}.",
        )
    session.next_epoch += 1
    return _Step(session=session)


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    if topic_id is None:
        return None
    meta = ctx.broker.state.metadata.by_id.get(topic_id)
    return meta.name if meta is not None else None


def _partition_error(ctx: RequestContext, name: str | None, partition: int) -> ErrorCode | None:
    if name is None:
        return ErrorCode.unknown_topic_id
    state = ctx.broker.state
    if state.partition_log(name, partition) is None:
        topic = state.topic(name)
        if topic is not None and partition in topic.states:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition
    if not state.leads(name, partition):
        return ErrorCode.not_leader_or_follower
    return None


def _held_for(
    ctx: RequestContext, group_id: str, topic_id: uuid.UUID, name: str, partition: int
) -> HeldSharePartition | None:
    service = ctx.broker.share_service
    partition_log = ctx.broker.state.partition_log(name, partition)
    if partition_log is None:
        return None
    held = service.share_partition(ShareKey(group_id, topic_id, partition), name, partition_log)
    if held is not None:
        held.partition.move_start(partition_log.log_start_offset)
    return held


def _acknowledge(
    ctx: RequestContext,
    group_id: str,
    member_id: str,
    topics: Iterable[Any],
    denied: set[str],
) -> tuple[dict[tuple[uuid.UUID, int], ErrorCode], dict[tuple[uuid.UUID, int], Durable]]:
    """Apply acknowledgement batches: the error per partition, and for the partitions
    whose state changed, its write (answered for only once durable: ``_durable``)."""
    service = ctx.broker.share_service
    now = service.now_ms()
    results: dict[tuple[uuid.UUID, int], ErrorCode] = {}
    touched: dict[ShareKey, HeldSharePartition] = {}
    for topic in topics:
        name = _topic_name(ctx, topic.topic_id)
        for part in topic.partitions:
            batches = part.acknowledgement_batches
            if not batches:
                continue
            tp = (topic.topic_id, part.partition_index)
            error = (
                ErrorCode.topic_authorization_failed
                if name in denied
                else _partition_error(ctx, name, part.partition_index)
            )
            held = None
            if error is None and name is not None:
                held = _held_for(ctx, group_id, topic.topic_id, name, part.partition_index)
                if held is None:
                    error = ErrorCode.invalid_record_state  # nothing acquired here yet
            if error is None and held is not None:
                touched[held.key] = held
                error = ErrorCode.none
                for batch in batches:
                    types = list(batch.acknowledge_types)
                    found = held.partition.acknowledge(
                        member_id, batch.first_offset, batch.last_offset, types, now
                    )
                    if found != ErrorCode.none:
                        error = found
                    else:
                        service.count_acknowledged(batch.first_offset, batch.last_offset, types)
            results[tp] = error if error is not None else ErrorCode.unknown_server_error
    writes: dict[tuple[uuid.UUID, int], Durable] = {}
    for held in touched.values():
        writes[(held.key.topic_id, held.key.partition)] = service.released(held, durable=True)
    return results, writes


def _pending(writes: dict[tuple[uuid.UUID, int], Durable]) -> bool:
    return any(not isinstance(w, int) for w in writes.values())


def _settled(
    acks: dict[tuple[uuid.UUID, int], ErrorCode], outcomes: dict[tuple[uuid.UUID, int], int]
) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """The acknowledgements' errors given their writes' outcomes: a partition whose
    state write failed answers the write's error."""
    out = dict(acks)
    for tp, error in outcomes.items():
        if error != ErrorCode.none and out.get(tp) == ErrorCode.none:
            out[tp] = ErrorCode(error)
    return out


def _settled_now(
    acks: dict[tuple[uuid.UUID, int], ErrorCode], writes: dict[tuple[uuid.UUID, int], Durable]
) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    return _settled(acks, {tp: w for tp, w in writes.items() if isinstance(w, int)})


async def _durable(
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    writes: dict[tuple[uuid.UUID, int], Durable],
) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """``_settled`` once every state write is durable (or failed)."""
    outcomes = {tp: w if isinstance(w, int) else await w for tp, w in writes.items()}
    return _settled(acks, outcomes)


def _denied_topics(ctx: RequestContext, topic_ids: Iterable[uuid.UUID | None]) -> set[str]:
    names = {n for t in topic_ids if (n := _topic_name(ctx, t)) is not None}
    if not names or authz.authorizer_of(ctx.broker) is None:
        return set()
    return names - authz.filter_allowed(ctx, authz.Op.READ, authz.TOPIC, names)


@dataclass(frozen=True, slots=True)
class _Refused:
    """Why a ShareFetch or ShareAcknowledge is refused as a whole."""

    error: ErrorCode
    message: str | None


def _check_request(
    ctx: RequestContext, request: req.ShareFetch | req.ShareAcknowledge
) -> tuple[str, str] | _Refused:
    """The request's group id and member id, or why it is refused."""
    disabled = _disabled(ctx)
    if disabled is not None:
        return _Refused(ErrorCode.unsupported_version, disabled)
    group_id, member_id = request.group_id, request.member_id
    if not group_id:
        return _Refused(ErrorCode.invalid_request, "GroupId can't be empty.")
    if not member_id:
        return _Refused(ErrorCode.invalid_request, "MemberId can't be empty.")
    if not authz.allowed(ctx, authz.Op.READ, authz.GROUP, group_id):
        return _Refused(ErrorCode.group_authorization_failed, "Group authorization failed.")
    return group_id, member_id


def _as_topic_id(topic_id: uuid.UUID | None) -> uuid.UUID:
    """A topic id of a request as the session keeps it. kio reads the zero id as None,
    which is kept as it came: no topic has it, so it is answered as an unknown topic."""
    return cast("uuid.UUID", topic_id)


def _lock_timeout(ctx: RequestContext, group_id: str | None) -> datetime.timedelta:
    if not group_id:
        return datetime.timedelta(0)
    ms = int(ctx.broker.share_service.group_setting(group_id, "share.record.lock.duration.ms"))
    return datetime.timedelta(milliseconds=ms)


# ShareFetch --------------------------------------------------------------------------


@dataclass(slots=True)
class _Part:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode | None = None
    records: Any = b""
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


# A ShareFetch or a ShareAcknowledge response, which _refusal builds alike.
_WholeRefusal = TypeVar("_WholeRefusal")


def _refusal(
    response_type: type[_WholeRefusal], error: ErrorCode, message: str | None
) -> _WholeRefusal:
    """A ShareFetch or ShareAcknowledge response refused as a whole."""
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        acquisition_lock_timeout=datetime.timedelta(0),
        responses=(),
        node_endpoints=(),
    )


@handles(78, 1, 2)
def handle_share_fetch(
    ctx: RequestContext, request: req.ShareFetch
) -> resp.ShareFetch | Awaitable[resp.ShareFetch]:
    response_type: type[resp.ShareFetch] = ctx.response_type
    checked = _check_request(ctx, request)
    if isinstance(checked, _Refused):
        return _refusal(response_type, checked.error, checked.message)
    group_id, member_id = checked
    service = ctx.broker.share_service
    epoch = request.share_session_epoch
    step = _session_step(service, group_id, member_id, epoch, fetch=True)
    if step.error != ErrorCode.none or step.session is None:
        return _refusal(response_type, step.error, step.message)
    session = step.session
    if epoch == 0 and ctx.session is not None:  # it ends when this connection closes
        ctx.session.on_close[(ShareSession, group_id, member_id)] = lambda: (
            service.connection_closed(session)
        )
    for topic in request.topics:
        for part in topic.partitions:
            session.partitions.add((_as_topic_id(topic.topic_id), part.partition_index))
    for forgotten in request.forgotten_topics_data:
        for p in forgotten.partitions:
            session.partitions.discard((_as_topic_id(forgotten.topic_id), p))
    wanted = [ShareKey(group_id, t, p) for t, p in session.partitions]
    remote = service.remote_keys(
        k
        for k in wanted
        if (name := _topic_name(ctx, k.topic_id)) is not None
        and ctx.broker.state.leads(name, k.partition)
    )
    if remote and epoch != FINAL_EPOCH:
        return _after_remote_reads(ctx, request, session, remote)
    return _share_fetch(ctx, request, session)


async def _after_remote_reads(
    ctx: RequestContext, request: req.ShareFetch, session: ShareSession, keys: list[ShareKey]
) -> resp.ShareFetch:
    await ctx.broker.share_service.load_remote(keys)
    result = _share_fetch(ctx, request, session)
    return await result if isinstance(result, Awaitable) else result


def _share_fetch(
    ctx: RequestContext, request: req.ShareFetch, session: ShareSession
) -> resp.ShareFetch | Awaitable[resp.ShareFetch]:
    denied = _denied_topics(
        ctx, [t for t, _ in session.partitions] + [t.topic_id for t in request.topics]
    )
    acks, writes = _acknowledge(ctx, session.group_id, session.member_id, request.topics, denied)
    if _pending(writes):
        return _fetch_after_durable(ctx, request, session, denied, acks, writes)
    return _fetch_after_acks(ctx, request, session, denied, _settled_now(acks, writes))


async def _fetch_after_durable(
    ctx: RequestContext,
    request: req.ShareFetch,
    session: ShareSession,
    denied: set[str],
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    writes: dict[tuple[uuid.UUID, int], Durable],
) -> resp.ShareFetch:
    settled = await _durable(acks, writes)
    result = _fetch_after_acks(ctx, request, session, denied, settled)
    return await result if isinstance(result, Awaitable) else result


def _fetch_after_acks(
    ctx: RequestContext,
    request: req.ShareFetch,
    session: ShareSession,
    denied: set[str],
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
) -> resp.ShareFetch | Awaitable[resp.ShareFetch]:
    """The fetch of a ShareFetch whose acknowledgements are durable (or failed)."""
    service = ctx.broker.share_service
    epoch = request.share_session_epoch
    if epoch == FINAL_EPOCH:
        service.member_gone(session.group_id, session.member_id)
        return _fetch_response(ctx, request, [], acks, full=False)
    parts = _fetch(ctx, request, session, denied)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    if any(p.acquired or p.error != ErrorCode.none for p in parts) or max_wait_ms <= 0:
        return _fetch_response(ctx, request, parts, acks, full=epoch == 0)
    return _long_poll(ctx, request, session, denied, acks, max_wait_ms, epoch == 0)


async def _long_poll(
    ctx: RequestContext,
    request: req.ShareFetch,
    session: ShareSession,
    denied: set[str],
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    max_wait_ms: int,
    full: bool,
) -> resp.ShareFetch:
    deadline = time.monotonic() + max_wait_ms / 1000
    purgatory = ctx.broker.purgatory
    sessions = ctx.broker.share_service.sessions
    parts: list[_Part] = []
    while True:
        keys = [
            (name, p) for t, p in session.partitions if (name := _topic_name(ctx, t)) is not None
        ]
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not await purgatory.wait(keys, remaining):
            break
        if sessions.get((session.group_id, session.member_id)) is not session:
            break  # ended meanwhile (its connection closed): nothing more is acquired
        parts = _fetch(ctx, request, session, denied)
        if any(p.acquired or p.error != ErrorCode.none for p in parts):
            return _fetch_response(ctx, request, parts, acks, full)
    return _fetch_response(ctx, request, parts, acks, full)


def _fetch(
    ctx: RequestContext, request: req.ShareFetch, session: ShareSession, denied: set[str]
) -> list[_Part]:
    """Acquire records for the member from each session partition."""
    group_id = session.group_id  # the session's ids are the request's
    member_id = session.member_id
    isolation = ctx.broker.share_service.group_setting(group_id, "share.isolation.level")
    read_committed = isolation == "read_committed"
    budget_records = max(int(request.max_records), 1) if request.max_records > 0 else 500
    budget_bytes = int(request.max_bytes) if request.max_bytes > 0 else 2**31 - 1
    service = ctx.broker.share_service
    now = service.now_ms()
    parts: list[_Part] = []
    for topic_id, partition in sorted(session.partitions, key=lambda tp: (str(tp[0]), tp[1])):
        part = _Part(topic_id, partition)
        parts.append(part)
        name = _topic_name(ctx, topic_id)
        if name is not None and name in denied:
            part.error = ErrorCode.topic_authorization_failed
            continue
        error = _partition_error(ctx, name, partition)
        if error is not None or name is None:
            part.error = error or ErrorCode.unknown_topic_id
            continue
        if budget_records <= 0 or budget_bytes <= 0:
            continue
        held = _held_for(ctx, group_id, topic_id, name, partition)
        if held is None:
            continue  # its state is being read from the node that keeps it
        sp = held.partition
        partition_log = ctx.broker.state.partition_log(name, partition)
        if partition_log is None:
            continue
        upper = partition_log.last_stable_offset if read_committed else partition_log.high_watermark
        offset = sp.next_fetch_offset()
        if offset >= upper or (offset >= sp.end_offset and not sp.can_acquire_new()):
            continue
        try:
            data = partition_log.read(
                offset, max(min(budget_bytes, READ_LIMIT), 1), upper_bound=upper
            )
        except OffsetOutOfRangeError:
            continue
        if not data:
            continue
        batches, read_end = _deliverable(data, partition_log, offset, upper, read_committed)
        ranges = sp.acquire(member_id, batches, now, budget_records)
        if not batches or (sp.end_offset > batches[-1][1]):
            sp.skip_to(read_end)  # markers and aborted batches after the last taken
        if ranges:
            part.records = _trimmed(data, ranges[0].first_offset, ranges[-1].last_offset)
            part.acquired = [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges]
            budget_records -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
            budget_bytes -= len(data)
        service.persist(held)
        service.arm(held)
    return parts


def _trimmed(data: Any, first: int, last: int) -> Any:
    """The batches read that hold offsets first..last: no bytes the member cannot use."""
    start = end = None
    for h in iter_headers(data):
        if h.next_offset <= first:
            continue
        if h.base_offset > last:
            break
        if start is None:
            start = h.position
        end = h.position + h.size
    if start is None or end is None:
        return data
    return data if (start, end) == (0, len(data)) else data[start:end]


def _deliverable(
    data: Any, partition_log: Any, offset: int, upper: int, read_committed: bool
) -> tuple[list[tuple[int, int]], int]:
    """The (first, last) offsets of the data batches read that may be delivered
    (control batches never; aborted ones not to read_committed groups), and the offset
    after the last batch read."""
    headers = list(iter_headers(data))
    read_end = headers[-1].next_offset if headers else offset
    aborted: list[tuple[int, int]] = []
    if read_committed:
        aborted = sorted(
            (first, pid) for pid, first in partition_log.aborted_transactions(offset, upper)
        )
    active: set[int] = set()
    pending = list(aborted)
    out: list[tuple[int, int]] = []
    for h in headers:
        while pending and pending[0][0] <= h.base_offset:
            active.add(pending.pop(0)[1])
        if h.is_control:
            active.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in active:
            continue
        out.append((h.base_offset, h.next_offset - 1))
    return out, read_end


def _fetch_response(
    ctx: RequestContext,
    request: req.ShareFetch,
    parts: list[_Part],
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    full: bool,
) -> resp.ShareFetch:
    response_type: type[resp.ShareFetch] = ctx.response_type
    topic_type = nested(response_type, "ShareFetchableTopicResponse")
    partition_type = nested(response_type, "PartitionData")
    leader_type = nested(response_type, "LeaderIdAndEpoch")
    acquired_type = nested(response_type, "AcquiredRecords")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    seen: set[tuple[uuid.UUID, int]] = set()
    state = ctx.broker.state

    def leader(topic_id: uuid.UUID, partition: int) -> Any:
        meta = state.metadata.by_id.get(topic_id)
        view = state.topic(meta.name) if meta is not None else None
        if view is None or partition not in view.states:
            return build(leader_type, leader_id=-1, leader_epoch=-1)
        return build(
            leader_type,
            leader_id=view.leader_of(partition),
            leader_epoch=view.leader_epoch_of(partition),
        )

    def add(topic_id: uuid.UUID, partition: int, part: _Part | None) -> None:
        ack_error = acks.get((topic_id, partition))
        by_topic.setdefault(topic_id, []).append(
            build(
                partition_type,
                partition_index=partition,
                error_code=part.error if part else ErrorCode.none,
                error_message=None,
                acknowledge_error_code=ack_error if ack_error is not None else ErrorCode.none,
                acknowledge_error_message=None,
                current_leader=leader(topic_id, partition),
                records=part.records if part and part.acquired else b"",
                acquired_records=tuple(
                    build(acquired_type, first_offset=f, last_offset=last, delivery_count=c)
                    for f, last, c in (part.acquired if part else [])
                ),
            )
        )
        seen.add((topic_id, partition))

    for part in parts:
        if (
            full
            or part.acquired
            or part.error != ErrorCode.none
            or ((part.topic_id, part.partition) in acks)
        ):
            add(part.topic_id, part.partition, part)
    for topic_id, partition in acks:
        if (topic_id, partition) not in seen:
            add(topic_id, partition, None)
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=_lock_timeout(ctx, request.group_id),
        responses=tuple(
            build(topic_type, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
        node_endpoints=(),
    )


# ShareAcknowledge ---------------------------------------------------------------------


@handles(79, 1, 2)
def handle_share_acknowledge(
    ctx: RequestContext, request: req.ShareAcknowledge
) -> resp.ShareAcknowledge | Awaitable[resp.ShareAcknowledge]:
    response_type: type[resp.ShareAcknowledge] = ctx.response_type
    checked = _check_request(ctx, request)
    if isinstance(checked, _Refused):
        return _refusal(response_type, checked.error, checked.message)
    group_id, member_id = checked
    service = ctx.broker.share_service
    epoch = request.share_session_epoch
    step = _session_step(service, group_id, member_id, epoch, fetch=False)
    if step.error != ErrorCode.none:
        return _refusal(response_type, step.error, step.message)
    denied = _denied_topics(ctx, [t.topic_id for t in request.topics])
    acks, writes = _acknowledge(ctx, group_id, member_id, request.topics, denied)
    if epoch == FINAL_EPOCH:
        service.member_gone(group_id, member_id)
    if _pending(writes):
        return _acknowledge_after_durable(ctx, request, acks, writes)
    return _acknowledge_response(ctx, request, _settled_now(acks, writes))


async def _acknowledge_after_durable(
    ctx: RequestContext,
    request: req.ShareAcknowledge,
    acks: dict[tuple[uuid.UUID, int], ErrorCode],
    writes: dict[tuple[uuid.UUID, int], Durable],
) -> resp.ShareAcknowledge:
    return _acknowledge_response(ctx, request, await _durable(acks, writes))


def _acknowledge_response(
    ctx: RequestContext, request: req.ShareAcknowledge, acks: dict[tuple[uuid.UUID, int], ErrorCode]
) -> resp.ShareAcknowledge:
    response_type: type[resp.ShareAcknowledge] = ctx.response_type
    topic_type = nested(response_type, "ShareAcknowledgeTopicResponse")
    partition_type = nested(response_type, "PartitionData")
    leader_type = nested(response_type, "LeaderIdAndEpoch")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, partition), error in acks.items():
        by_topic.setdefault(topic_id, []).append(
            build(
                partition_type,
                partition_index=partition,
                error_code=error,
                error_message=None,
                current_leader=build(leader_type, leader_id=-1, leader_epoch=-1),
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=_lock_timeout(ctx, request.group_id),
        responses=tuple(
            build(topic_type, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
        node_endpoints=(),
    )


# Share group offsets -----------------------------------------------------------------


def _topic_id_of(ctx: RequestContext, name: str) -> uuid.UUID | None:
    view = ctx.broker.state.topic(name)
    return view.topic_id if view is not None else None


@dataclass(slots=True)
class _OffsetsRow:
    """One share-partition's answer to DescribeShareGroupOffsets, filled in steps."""

    partition: int
    named: bool  # asked for by the request (answered even with no state stored)
    key: ShareKey | None = None
    start: int = -1
    complete: int = 0  # offsets past the start accepted or archived
    lag: int = -1
    error: ErrorCode = ErrorCode.none


_OffsetsPlan = list[tuple[str, ErrorCode, str | None, dict[str, list[_OffsetsRow]]]]
"""Per group: its id, error and message, and its rows by topic name."""


def _completed(state: ShareState) -> int:
    return sum(b.last_offset - b.first_offset + 1 for b in state.batches if b.state in (2, 4))


def _describe_here(ctx: RequestContext, name: str, row: _OffsetsRow) -> bool:
    """Fill ``row`` from what this node knows first-hand: the share-partition held here
    (this node leads its topic partition), or the state this node keeps (it leads the
    key's ``__share_group_state`` partition); False when another node keeps it."""
    service = ctx.broker.share_service
    key = row.key
    assert key is not None
    held = service.held.get(key)
    if held is not None and ctx.broker.state.leads(name, key.partition):
        row.start = held.partition.start_offset
        row.complete = held.partition.finished_in_window()
        return True
    if service.store.topic_exists() and not service.store.leads(key):
        return False
    stored = service.store.read(key)
    if stored is not None:
        row.start, row.complete = stored.start_offset, _completed(stored)
    return True


@handles(90, 0, 1)
def handle_describe_share_group_offsets(
    ctx: RequestContext, request: req.DescribeShareGroupOffsets
) -> resp.DescribeShareGroupOffsets | Awaitable[resp.DescribeShareGroupOffsets]:
    disabled = _disabled(ctx)
    service = ctx.broker.share_service
    state = ctx.broker.state
    plan: _OffsetsPlan = []
    remote: list[tuple[str, _OffsetsRow]] = []
    for group in request.groups:
        if disabled:
            plan.append((group.group_id, ErrorCode.unsupported_version, disabled, {}))
            continue
        if not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group.group_id):
            plan.append(
                (
                    group.group_id,
                    ErrorCode.group_authorization_failed,
                    "Group authorization failed.",
                    {},
                )
            )
            continue
        wanted: dict[str, set[int]] = {}
        named = group.topics is not None
        if group.topics is None:
            # Every share-partition the group has: those known here, and the partitions
            # of the topics its members subscribe to (their state may be kept elsewhere).
            keys = {k for k in service.held if k.group_id == group.group_id}
            keys |= set(service.store.keys_of_group(group.group_id))
            for key in keys:
                name = _topic_name(ctx, key.topic_id)
                if name is not None:
                    wanted.setdefault(name, set()).add(key.partition)
            share_group = ctx.broker.coordinator.groups.get(group.group_id)
            if isinstance(share_group, ShareGroup):
                for name in share_group.subscribed_topics():
                    view = state.topic(name)
                    if view is not None:
                        wanted.setdefault(name, set()).update(range(view.partitions))
        else:
            for topic in group.topics:
                wanted.setdefault(topic.topic_name, set()).update(topic.partitions)
        rows: dict[str, list[_OffsetsRow]] = {}
        for name, partitions in sorted(wanted.items()):
            topic_id = _topic_id_of(ctx, name)
            denied = not authz.allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, name)
            for partition in sorted(partitions):
                row = _OffsetsRow(partition, named)
                rows.setdefault(name, []).append(row)
                if denied:
                    row.error = ErrorCode.topic_authorization_failed
                elif topic_id is None:
                    row.error = ErrorCode.unknown_topic_or_partition
                else:
                    row.key = ShareKey(group.group_id, topic_id, partition)
                    if not _describe_here(ctx, name, row):
                        remote.append((name, row))
        plan.append((group.group_id, ErrorCode.none, None, rows))
    lags = [
        (name, row)
        for _, _, _, rows in plan
        for name, topic_rows in rows.items()
        for row in topic_rows
        if row.start >= 0
    ]
    if remote or any(state.partition_log(name, row.partition) is None for name, row in lags):
        return _describe_offsets_from_others(ctx, plan, remote)
    _fill_lags(
        plan, {(name, row.partition): _local_hw(ctx, name, row.partition) for name, row in lags}
    )
    return _describe_offsets_response(ctx, plan)


def _local_hw(ctx: RequestContext, name: str, partition: int) -> int:
    partition_log = ctx.broker.state.partition_log(name, partition)
    return -1 if partition_log is None else int(partition_log.high_watermark)


async def _describe_offsets_from_others(
    ctx: RequestContext, plan: _OffsetsPlan, remote: list[tuple[str, _OffsetsRow]]
) -> resp.DescribeShareGroupOffsets:
    """The rows whose state another node keeps, from its summary (the node's own
    replica of ``__share_group_state`` when it does not answer); the lags with the
    high watermarks of topic partitions led elsewhere."""
    service = ctx.broker.share_service
    keys = [row.key for _, row in remote if row.key is not None]
    summaries = await service.read_summaries(keys) if keys else {}
    for _, row in remote:
        assert row.key is not None
        summary = summaries.get(row.key)
        if summary is not None and summary.error == ErrorCode.none:
            row.start = summary.start_offset
            row.complete = max(summary.delivery_complete_count, 0)
            continue
        stored = service.store.read(row.key)  # this node's copy, if it has one
        if stored is not None:
            row.start, row.complete = stored.start_offset, _completed(stored)
        elif summary is None or summary.error != ErrorCode.none:
            row.error = (
                summary.error if summary is not None else ErrorCode.coordinator_not_available
            )
    wanted = {
        (name, row.partition)
        for _, _, _, rows in plan
        for name, topic_rows in rows.items()
        for row in topic_rows
        if row.start >= 0
    }
    _fill_lags(plan, await service.high_watermarks(wanted))
    return _describe_offsets_response(ctx, plan)


def _fill_lags(plan: _OffsetsPlan, high_watermarks: dict[tuple[str, int], int]) -> None:
    """Records from the start offset to the high watermark not yet finished with (-1
    when the high watermark is not known)."""
    for _, _, _, rows in plan:
        for name, topic_rows in rows.items():
            for row in topic_rows:
                hw = high_watermarks.get((name, row.partition), -1)
                if row.start >= 0 and hw >= 0:
                    row.lag = max(hw - row.start - row.complete, 0)


def _describe_offsets_response(
    ctx: RequestContext, plan: _OffsetsPlan
) -> resp.DescribeShareGroupOffsets:
    response_type: type[resp.DescribeShareGroupOffsets] = ctx.response_type
    group_type = nested(response_type, "DescribeShareGroupOffsetsResponseGroup")
    topic_type = nested(response_type, "DescribeShareGroupOffsetsResponseTopic")
    partition_type = nested(response_type, "DescribeShareGroupOffsetsResponsePartition")
    groups = []
    for group_id, error, message, rows in plan:
        topics = []
        for name, topic_rows in rows.items():
            shown = [r for r in topic_rows if r.named or r.start >= 0 or r.error != ErrorCode.none]
            if not shown:
                continue
            topic_id = _topic_id_of(ctx, name)
            topics.append(
                build(
                    topic_type,
                    topic_name=name,
                    topic_id=topic_id or uuid.UUID(int=0),
                    partitions=tuple(
                        build(
                            partition_type,
                            partition_index=r.partition,
                            start_offset=r.start,
                            leader_epoch=-1,
                            lag=r.lag,
                            error_code=r.error,
                            error_message=None,
                        )
                        for r in shown
                    ),
                )
            )
        groups.append(
            build(
                group_type,
                group_id=group_id,
                topics=tuple(topics),
                error_code=error,
                error_message=message,
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _offsets_admin_refusal(
    ctx: RequestContext, group_id: str, operation: int
) -> tuple[ErrorCode, str] | None:
    disabled = _disabled(ctx)
    if disabled is not None:
        return ErrorCode.unsupported_version, disabled
    if not group_id:
        return ErrorCode.invalid_group_id, "GroupId can't be empty."
    if not authz.allowed(ctx, operation, authz.GROUP, group_id):
        return ErrorCode.group_authorization_failed, "Group authorization failed."
    group = ctx.broker.coordinator.groups.get(group_id)
    if group is not None and not isinstance(group, ShareGroup):
        return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
    if group is not None and not group.is_empty():
        return ErrorCode.non_empty_group, f"Share group {group_id} has members: it must be empty."
    return None


@handles(91, 0, 0)
def handle_alter_share_group_offsets(
    ctx: RequestContext, request: req.AlterShareGroupOffsets
) -> resp.AlterShareGroupOffsets | Awaitable[resp.AlterShareGroupOffsets]:
    response_type: type[resp.AlterShareGroupOffsets] = ctx.response_type
    topic_type = nested(response_type, "AlterShareGroupOffsetsResponseTopic")
    partition_type = nested(response_type, "AlterShareGroupOffsetsResponsePartition")
    refused = _offsets_admin_refusal(ctx, request.group_id, authz.Op.READ)
    if refused is not None:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=refused[0],
            error_message=refused[1],
            responses=(),
        )
    service = ctx.broker.share_service
    now = service.now_ms()
    topics = []
    # Partitions whose state another node keeps: (entry fields, key, start offset).
    remote: list[tuple[dict[str, Any], ShareKey, int]] = []
    for topic in request.topics:
        topic_id = _topic_id_of(ctx, topic.topic_name)
        denied = not authz.allowed(ctx, authz.Op.READ, authz.TOPIC, topic.topic_name)
        entries = []
        for part in topic.partitions:
            error: ErrorCode = ErrorCode.none
            message = None
            elsewhere: tuple[ShareKey, int] | None = None
            if denied:
                error = ErrorCode.topic_authorization_failed
            elif topic_id is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                partition_log = ctx.broker.state.partition_log(
                    topic.topic_name, part.partition_index
                )
                view = ctx.broker.state.topic(topic.topic_name)
                if view is None or not 0 <= part.partition_index < view.partitions:
                    error = ErrorCode.unknown_topic_or_partition
                elif partition_log is None and part.start_offset < 0:
                    error = ErrorCode.invalid_request
                    message = "No replica here: the start offset must be an offset."
                else:
                    start: int = part.start_offset
                    if partition_log is not None:  # else the partition's leader bounds it
                        if start < 0:  # -1: the latest offset, -2: the earliest
                            start = (
                                partition_log.log_start_offset
                                if start == -2
                                else partition_log.high_watermark
                            )
                        start = max(
                            min(start, partition_log.high_watermark),
                            partition_log.log_start_offset,
                        )
                    key = ShareKey(request.group_id, topic_id, part.partition_index)
                    held = service.held.get(key)
                    stored = service.store.read(key)
                    # A new state epoch: a copy held by another node is fenced and read again.
                    epoch = (stored.state_epoch if stored is not None else 0) + 1
                    if held is not None:
                        held.partition.reset(start)
                        held.state_epoch = max(held.state_epoch + 1, epoch)
                        service.persist(held)
                    elif service.store.topic_exists() and not service.store.leads(key):
                        elsewhere = (key, start)
                    elif not service.store.write(key, ShareState(start, state_epoch=epoch), now):
                        error = ErrorCode.coordinator_not_available
                        message = "The share-partition state could not be written."
            fields: dict[str, Any] = {
                "partition_index": part.partition_index,
                "error_code": error,
                "error_message": message,
            }
            if elsewhere is not None:
                remote.append((fields, *elsewhere))
            entries.append(fields)
        topics.append((topic.topic_name, topic_id, entries))

    def response() -> resp.AlterShareGroupOffsets:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(
                build(
                    topic_type,
                    topic_name=name,
                    topic_id=topic_id or uuid.UUID(int=0),
                    partitions=tuple(build(partition_type, **f) for f in entries),
                )
                for name, topic_id, entries in topics
            ),
        )

    if not remote:
        return response()
    return _alter_remote(service, remote, response)


async def _alter_remote(
    service: ShareService,
    remote: list[tuple[dict[str, Any], ShareKey, int]],
    response: Callable[[], resp.AlterShareGroupOffsets],
) -> resp.AlterShareGroupOffsets:
    """AlterShareGroupOffsets' partitions whose state another node keeps, written there."""
    errors = await service.initialize_remote({key: start for _, key, start in remote})
    for fields, key, _ in remote:
        error = errors.get(key, ErrorCode.coordinator_not_available)
        if error != ErrorCode.none:
            fields["error_code"] = error
            fields["error_message"] = "The share coordinator did not write the state."
    return response()


@handles(92, 0, 0)
def handle_delete_share_group_offsets(
    ctx: RequestContext, request: req.DeleteShareGroupOffsets
) -> resp.DeleteShareGroupOffsets | Awaitable[resp.DeleteShareGroupOffsets]:
    response_type: type[resp.DeleteShareGroupOffsets] = ctx.response_type
    topic_type = nested(response_type, "DeleteShareGroupOffsetsResponseTopic")
    refused = _offsets_admin_refusal(ctx, request.group_id, authz.Op.DELETE)
    if refused is not None:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=refused[0],
            error_message=refused[1],
            responses=(),
        )
    service = ctx.broker.share_service
    topics: list[dict[str, Any]] = []
    # Topics with states another node keeps: (topic fields, keys).
    remote: list[tuple[dict[str, Any], list[ShareKey]]] = []
    for topic in request.topics:
        topic_id = _topic_id_of(ctx, topic.topic_name)
        view = ctx.broker.state.topic(topic.topic_name)
        error: ErrorCode = ErrorCode.none
        if not authz.allowed(ctx, authz.Op.READ, authz.TOPIC, topic.topic_name):
            error = ErrorCode.topic_authorization_failed
        elif topic_id is None or view is None:
            error = ErrorCode.unknown_topic_or_partition
        else:
            keys = {
                k for k in service.held if k.group_id == request.group_id and k.topic_id == topic_id
            }
            keys |= {
                k for k in service.store.keys_of_group(request.group_id) if k.topic_id == topic_id
            }
            keys |= {ShareKey(request.group_id, topic_id, p) for p in range(view.partitions)}
            for key in keys:
                service.drop(key)
            elsewhere = [
                k for k in keys if service.store.topic_exists() and not service.store.leads(k)
            ]
            service.store.delete(keys - set(elsewhere), service.now_ms())
            fields = {
                "topic_name": topic.topic_name,
                "topic_id": topic_id,
                "error_code": error,
                "error_message": None,
            }
            topics.append(fields)
            if elsewhere:
                remote.append((fields, sorted(elsewhere, key=lambda k: k.partition)))
            continue
        topics.append(
            {
                "topic_name": topic.topic_name,
                "topic_id": topic_id or uuid.UUID(int=0),
                "error_code": error,
                "error_message": None,
            }
        )

    def response() -> resp.DeleteShareGroupOffsets:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            responses=tuple(build(topic_type, **f) for f in topics),
        )

    if not remote:
        return response()
    return _delete_offsets_remote(service, remote, response)


async def _delete_offsets_remote(
    service: ShareService,
    remote: list[tuple[dict[str, Any], list[ShareKey]]],
    response: Callable[[], resp.DeleteShareGroupOffsets],
) -> resp.DeleteShareGroupOffsets:
    """DeleteShareGroupOffsets' states kept by other nodes, deleted there."""
    errors = await service.delete_remote([k for _, keys in remote for k in keys])
    for fields, keys in remote:
        failed = [errors.get(k, ErrorCode.coordinator_not_available) for k in keys]
        error = next((e for e in failed if e != ErrorCode.none), ErrorCode.none)
        if error != ErrorCode.none:
            fields["error_code"] = error
            fields["error_message"] = "The share coordinator did not delete the state."
    return response()
