"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete.

- OffsetCommit (key 8), versions 0-10 (topic ids from v10): the group-level
  checks of Kafka's coordinator (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while a classic group completes a
  rebalance, STALE_MEMBER_EPOCH for KIP-848 members); a commit with generation
  (member epoch) -1 is accepted while the group is empty, whatever member id it
  carries (simple consumers, admin tools, a new-protocol consumer's own id), and
  creates a simple classic group when there is none; a commit with a generation to
  a group that does not exist is GROUP_ID_NOT_FOUND from v9 on, ILLEGAL_GENERATION
  before. Per partition: UNKNOWN_TOPIC_OR_PARTITION,
  OFFSET_METADATA_TOO_LARGE above offset.metadata.max.bytes. Metadata and the
  committed leader epoch round-trip. A retention time of v2-4 (other than -1) is the
  offsets' expiry, stored as Kafka stores it (offset value version 1); without one
  offsets.retention.minutes applies. A commit timestamp of v1 (other than -1) is
  stored as the offset's commit time, as Kafka's coordinator does (the default
  retention counts from it). Version 0 has no generation or member: it commits as
  generation -1 does (where Kafka kept v0 offsets in ZooKeeper, apart from the
  coordinator's, and KRaft Kafka answered UNSUPPORTED_VERSION); OffsetFetch v0 reads
  the same offsets as v1. When the group's offsets partition has followers, the
  answer waits until the commit is replicated to the ISR (the partition's high
  watermark passes it), as Kafka's acks=all write of offsets does; after
  offsets.commit.timeout.ms it is COORDINATOR_NOT_AVAILABLE (clients retry).
- OffsetFetch (9), versions 0-10 (several groups per request from v8, topic
  ids from v10): a partition without a committed offset answers offset -1.
  With require_stable (v7+), a partition whose offset an open transaction has
  committed answers UNSTABLE_OFFSET_COMMIT (the client retries until the transaction
  ends). The member id and epoch of v9+ are not checked.
- OffsetDelete (47), version 0: GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC
  for topics the group's members subscribe to, NON_EMPTY_GROUP for an active
  group whose subscriptions cannot be read.

Authorization (``authz``), as Kafka checks it: OffsetCommit needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED for its
partitions); OffsetFetch DESCRIBE on the group and the topics (unauthorized topics are
left out of an all-topics answer); OffsetDelete DELETE on the group and READ on the topics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE, resolve_topic
from strom.broker.network.router import RequestContext, handles
from strom.coordinator.coordinator import OffsetToCommit
from strom.coordinator.offsets_topic import OFFSETS_TOPIC, CommittedOffset
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

NO_GENERATION = -1


# Any for request and answer: OffsetCommit v0-1 are built at run time (legacy_versions)
@handles(8, 0, 10)
def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.coordinator
    node_state = ctx.broker.state
    group_error = ErrorCode.none
    if not request.group_id:
        group_error = ErrorCode.invalid_group_id
    elif not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        group_error = ErrorCode.group_authorization_failed
    elif not coordinator.is_coordinator_for(request.group_id):
        group_error = ErrorCode.not_coordinator
    else:
        group_error = coordinator.validate_commit(
            request.group_id,
            getattr(request, "generation_id_or_member_epoch", NO_GENERATION),  # v1+
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            ctx.api_version,
        )
    resolved = []
    wanted: list[OffsetToCommit] = []
    retention = getattr(request, "retention_time", None)  # v2-4
    retention_ms = -1 if retention is None else int(retention.total_seconds() * 1000)
    for topic in request.topics:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        meta = resolve_topic(node_state, name, topic_id)
        real_name = meta.name if meta is not None else (name or "")
        for p in topic.partitions:
            wanted.append(
                OffsetToCommit(
                    real_name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                    retention_ms if retention_ms >= 0 else -1,
                    getattr(p, "commit_timestamp", -1),  # v1
                )
            )
        resolved.append((name, topic_id, meta, topic.partitions))
    waiting = None
    errors: list[ErrorCode]
    if group_error != ErrorCode.none:
        errors = [group_error] * len(wanted)
    else:
        readable = {w.topic for w in wanted}
        if authz.authorizer_of(ctx.broker) is not None:
            readable = authz.filter_allowed(ctx, authz.Op.READ, authz.TOPIC, readable)
        coordinator.appended_at = None
        committed = iter(
            coordinator.commit_offsets(request.group_id, [w for w in wanted if w.topic in readable])
        )
        errors = [
            next(committed) if w.topic in readable else ErrorCode.topic_authorization_failed
            for w in wanted
        ]
        waiting = coordinator.appended_at
    if waiting is not None and ctx.broker.replicas.is_replicated(OFFSETS_TOPIC, waiting[0]):
        return _after_replication(ctx, request, resolved, errors, waiting)
    return _commit_response(ctx, resolved, errors)


async def _after_replication(
    ctx: RequestContext,
    request: Any,
    resolved: list[Any],
    errors: list[ErrorCode],
    waiting: tuple[int, int, int],
) -> Any:
    timeout_s = int(ctx.broker.config["offsets.commit.timeout.ms"]) / 1000
    replicated = await ctx.broker.replicas.wait_for_high_watermark(
        (OFFSETS_TOPIC, waiting[0]), waiting[1], waiting[2], timeout_s
    )
    if not replicated:
        errors = [ErrorCode.coordinator_not_available if e == ErrorCode.none else e for e in errors]
    return _commit_response(ctx, resolved, errors)


def _commit_response(ctx: RequestContext, resolved: list[Any], errors: list[ErrorCode]) -> Any:
    response_type = ctx.response_type
    topic_type = nested(response_type, "OffsetCommitResponseTopic")
    partition_type = nested(response_type, "OffsetCommitResponsePartition")
    if ctx.api_version >= 10:
        errors = [
            ErrorCode.unknown_topic_id
            if e == ErrorCode.unknown_topic_or_partition and meta is None
            else e
            for e, meta in zip(
                errors, [m for _, _, m, parts in resolved for _ in parts], strict=True
            )
        ]
    out = []
    position = 0
    for name, topic_id, _, partitions in resolved:
        entries = []
        for p in partitions:
            entries.append(
                build(
                    partition_type, partition_index=p.partition_index, error_code=errors[position]
                )
            )
            position += 1
        out.append(build(topic_type, name=name, topic_id=topic_id, partitions=tuple(entries)))
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(out))


# Any for request and answer: OffsetFetch v0 is built at run time (legacy_versions)
@handles(9, 0, 10)
def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    if ctx.api_version < 8:
        topics, error = _fetch_group(
            ctx,
            request.group_id,
            request.topics,
            legacy=True,
            require_stable=bool(getattr(request, "require_stable", False)),
        )
        return build(response_type, throttle_time=NO_THROTTLE, topics=topics, error_code=error)
    group_type = nested(response_type, "OffsetFetchResponseGroup")
    groups = []
    for group in request.groups:
        topics, error = _fetch_group(
            ctx, group.group_id, group.topics, legacy=False, require_stable=request.require_stable
        )
        groups.append(build(group_type, group_id=group.group_id, topics=topics, error_code=error))
    return build(response_type, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _fetch_group(
    ctx: RequestContext, group_id: str, topics: Any, *, legacy: bool, require_stable: bool
) -> tuple[tuple[Any, ...], ErrorCode]:
    response_type = ctx.response_type
    suffix = "" if legacy else "s"
    topic_type = nested(response_type, f"OffsetFetchResponseTopic{suffix}")
    partition_type = nested(response_type, f"OffsetFetchResponsePartition{suffix}")
    node_state = ctx.broker.state
    coordinator = ctx.broker.coordinator
    committed = coordinator.committed(group_id)
    if not group_id:
        return (), ErrorCode.invalid_group_id
    if not authz.allowed(ctx, authz.Op.DESCRIBE, authz.GROUP, group_id):
        return (), ErrorCode.group_authorization_failed
    if not ctx.broker.coordinator.is_coordinator_for(group_id):
        return (), ErrorCode.not_coordinator
    by_topic: list[tuple[str | None, Any, list[tuple[int, CommittedOffset | None, ErrorCode]]]]
    by_topic = []
    if topics is None:
        grouped: dict[str, list[tuple[int, CommittedOffset | None, ErrorCode]]] = {}
        for (topic, partition), value in sorted(committed.items()):
            grouped.setdefault(topic, []).append((partition, value, ErrorCode.none))
        for topic, entries in grouped.items():
            meta = node_state.topic(topic)
            by_topic.append((topic, meta.topic_id if meta else None, entries))
    else:
        for topic in topics:
            name = getattr(topic, "name", None)
            topic_id = getattr(topic, "topic_id", None)
            meta = resolve_topic(node_state, name, topic_id)
            real = meta.name if meta is not None else name
            if meta is None and name is None:
                entries = [(p, None, ErrorCode.unknown_topic_id) for p in topic.partition_indexes]
            else:
                entries = [
                    (p, None, ErrorCode.unstable_offset_commit)
                    if require_stable
                    and coordinator.has_pending_txn_offset(group_id, (real or "", p))
                    else (p, committed.get((real or "", p)), ErrorCode.none)
                    for p in topic.partition_indexes
                ]
            by_topic.append((name, topic_id, entries))
    if authz.authorizer_of(ctx.broker) is not None:
        # Kafka leaves out the topics a principal may not DESCRIBE when all are asked
        # for, and answers TOPIC_AUTHORIZATION_FAILED for those named.
        names = {name for name, _, _ in by_topic if name}
        seen = authz.filter_allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, names)
        if topics is None:
            by_topic = [entry for entry in by_topic if entry[0] in seen]
        else:
            by_topic = [
                (name, topic_id, entries)
                if name is None or name in seen
                else (
                    name,
                    topic_id,
                    [(p, None, ErrorCode.topic_authorization_failed) for p, _, _ in entries],
                )
                for name, topic_id, entries in by_topic
            ]
    out = []
    for name, topic_id, entries in by_topic:
        partitions = tuple(
            build(
                partition_type,
                partition_index=p,
                committed_offset=value.offset if value else -1,
                committed_leader_epoch=value.leader_epoch if value else -1,
                metadata=value.metadata if value else "",
                error_code=error,
            )
            for p, value, error in entries
        )
        out.append(build(topic_type, name=name, topic_id=topic_id, partitions=partitions))
    return tuple(out), ErrorCode.none


@handles(47, 0, 0)
def handle_offset_delete(ctx: RequestContext, request: req.OffsetDelete) -> resp.OffsetDelete:
    response_type: type[resp.OffsetDelete] = ctx.response_type
    coordinator = ctx.broker.coordinator
    topic_type = nested(response_type, "OffsetDeleteResponseTopic")
    partition_type = nested(response_type, "OffsetDeleteResponsePartition")
    group = coordinator.groups.get(request.group_id)
    if not authz.allowed(ctx, authz.Op.DELETE, authz.GROUP, request.group_id):
        return build(
            response_type,
            error_code=ErrorCode.group_authorization_failed,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    if group is None:
        return build(
            response_type,
            error_code=ErrorCode.group_id_not_found,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    subscribed = set() if group.is_empty() else group.subscribed_topics()
    if subscribed is None:
        return build(
            response_type,
            error_code=ErrorCode.non_empty_group,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    doomed: list[tuple[str, int]] = []
    topics = []
    for topic in request.topics:
        if not authz.allowed(ctx, authz.Op.READ, authz.TOPIC, topic.name):
            error = ErrorCode.topic_authorization_failed
        elif topic.name in subscribed:
            error = ErrorCode.group_subscribed_to_topic
        elif ctx.broker.state.topic(topic.name) is None:
            error = ErrorCode.unknown_topic_or_partition
        else:
            error = ErrorCode.none
            doomed += [(topic.name, p.partition_index) for p in topic.partitions]
        topics.append(
            build(
                topic_type,
                name=topic.name,
                partitions=tuple(
                    build(partition_type, partition_index=p.partition_index, error_code=error)
                    for p in topic.partitions
                ),
            )
        )
    try:
        coordinator.delete_offsets(request.group_id, doomed)
    except OSError:
        return build(
            response_type,
            error_code=ErrorCode.coordinator_not_available,
            throttle_time=NO_THROTTLE,
            topics=(),
        )
    return build(
        response_type, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=tuple(topics)
    )
