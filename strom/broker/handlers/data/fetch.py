"""Fetch (key 1), versions 0-17.

Serves stored batch bytes as they are: each partition's data starts with the
whole batch that holds the fetch offset and continues with whole batches up to
the partition's ``partition_max_bytes`` and the request's ``max_bytes``; the
first partition with data always gets at least one whole batch, however large,
as Kafka does, so a consumer never stalls on a big batch. Nothing at or above
the high watermark is returned. Topics are named up to v12 and identified by
topic id from v13 (UNKNOWN_TOPIC_ID for an id the broker does not know).

Versions 0-3 (clients from before KIP-98) read message sets: the stored batches are
read exactly as for v4+ and then converted down, v0-1 to magic 0 and v2-3 to magic 1
(protocol/message_sets.py, Kafka's RecordsUtil.downConvert: transaction markers
dropped, aborted records sent, as to any read-uncommitted fetcher; headers dropped; a
compressed batch becomes one wrapper in its codec). Limits apply to the v2 bytes read
(v0-2 have no request ``max_bytes``); the converted answer holds whole messages up to
that many bytes, or the first batch's messages whole if they are more; ``min_bytes``
counts the v2 bytes read, as Kafka's lazy down-conversion does. A read that converts to
nothing (transaction markers only) goes on past them. Conversion runs on a worker
thread (a stored batch may decompress to 64 MiB of small records: seconds of work),
never on the event loop; the reads stay on the loop. A zstd batch first in line is
UNSUPPORTED_COMPRESSION_TYPE.
No v4+ fetch converts anything: the version is checked once per response.

Long polling: when less than ``min_bytes`` is available the request waits in
the purgatory until a produce to one of its partitions, or ``max_wait_ms``.

Replication: a follower's fetch (a replica id, or the ReplicaState of v15+) reads up
to the log end, reports its progress to the replica manager, and is told where its
log diverges from this leader's (KIP-320, from its last fetched epoch). Only the
leader serves a partition: elsewhere NOT_LEADER_OR_FOLLOWER, naming the current leader
and its endpoint from v16 on (KIP-951); a client's current leader epoch older or newer
than the leader's is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.

Fetch sessions (KIP-227, v7+): a full fetch at session epoch 0 opens a session and
later fetches of it name only what changed; ``fetch_sessions.py`` keeps them and
trims incremental responses to the partitions with something new.

Transactions: every answer carries the partition's last stable offset; a consumer
reading with isolation_level=read_committed gets nothing at or past it, and the
aborted transactions (producer id, first offset) that overlap what it is sent, so it
can skip their records (KIP-98).

Authorization (``authz``): a consumer needs READ on each topic and a follower
CLUSTER_ACTION on the cluster; the partitions refused get TOPIC_AUTHORIZATION_FAILED.
Without an authorizer the cost is one None check.

The disk: the log is read only from the page cache on the event loop. Bytes that are
not there (a consumer catching up from old segments) are read into it on a thread
(``ColdRead.warm``) while the loop serves others, and the read goes again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
import uuid
from dataclasses import dataclass
from typing import Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE, resolve_topic
from strom.broker.handlers.data import fetch_sessions
from strom.broker.handlers.data.fetch_sessions import SessionPartition, SessionStep, partition_key
from strom.broker.network.cluster_view import leader_hints
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested, nested_if_any
from strom.protocol.message_sets import MAGIC_V0, MAGIC_V1, MessageSetError, down_convert
from strom.protocol.records import iter_headers
from strom.replication.leader import diverging_epoch
from strom.storage.errors import OffsetOutOfRangeError
from strom.storage.segment import ColdRead


def _aborted(aborted_type: type, found: list[tuple[int, int]]) -> tuple[Any, ...]:
    return tuple(
        build(aborted_type, producer_id=producer_id, first_offset=first_offset)
        for producer_id, first_offset in found
    )


@dataclass(slots=True)
class _Wanted:
    """One partition a fetch asks for, resolved against the metadata."""

    name: str | None
    topic_id: uuid.UUID | None
    partition: int
    offset: int
    max_bytes: int
    known: bool
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


_WantedTopic = tuple[str | None, uuid.UUID | None, list[_Wanted]]


# Any for request and answer: Fetch v0-3 are built at run time (legacy_versions)
@handles(1, 0, 17)
def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    step = SessionStep()
    if ctx.api_version >= 7:
        step = ctx.broker.fetch_sessions.begin(request.session_id, request.session_epoch)
        if step.error != ErrorCode.none:
            return build(
                ctx.response_type,
                throttle_time=NO_THROTTLE,
                error_code=step.error,
                session_id=0,
                responses=(),
            )
    requested = [
        SessionPartition(
            getattr(topic, "topic", None),
            getattr(topic, "topic_id", None),
            p.partition,
            p.fetch_offset,
            p.partition_max_bytes,
            getattr(p, "current_leader_epoch", -1),
            getattr(p, "last_fetched_epoch", -1),
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    if step.incremental and step.session is not None:
        forgotten = [
            partition_key(getattr(topic, "topic", None), getattr(topic, "topic_id", None), p)
            for topic in request.forgotten_topics_data
            for p in topic.partitions
        ]
        fetch_sessions.update(step.session, requested, forgotten)
        requested = list(step.session.partitions.values())
    elif step.session is not None:
        fetch_sessions.fill(step.session, requested)
    wanted = _resolve(ctx.broker.state, requested)
    denied: frozenset[str | None] = frozenset()
    if authz.authorizer_of(ctx.broker) is not None:
        denied = _unauthorized(ctx, request, wanted)
    try:
        read = _read(ctx, request, wanted, denied)
    except ColdRead as cold:  # bytes on the disk only: read them on a thread, then answer
        return _answer_after_warming(ctx, request, wanted, denied, step, cold)
    return _answer(ctx, request, wanted, denied, step, read)


def _answer(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    denied: frozenset[str | None],
    step: SessionStep,
    read: tuple[Any, int, bool, list[_Conversion]],
) -> Any:
    """The response to what was read, or a long poll when it is less than min_bytes."""
    response, size, has_error, conversions = read
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    if size >= request.min_bytes or max_wait_ms <= 0 or has_error or not wanted:
        if conversions:  # v0-3 only: no fetch session
            return _converted(response, conversions)
        if step.session is None:
            return response
        return fetch_sessions.answer(step.session, response, step.incremental)
    return _long_poll(ctx, request, wanted, max_wait_ms, denied, step)


async def _answer_after_warming(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    denied: frozenset[str | None],
    step: SessionStep,
    cold: ColdRead,
) -> Any:
    await _warm(ctx, cold)
    read = await _read_warmed(ctx, request, wanted, denied)
    answer = _answer(ctx, request, wanted, denied, step, read)
    return await answer if inspect.isawaitable(answer) else answer


async def _read_warmed(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    denied: frozenset[str | None],
) -> tuple[Any, int, bool, list[_Conversion]]:
    """``_read``, each cold read's bytes brought into the page cache on a thread first;
    after WARMINGS of them (pages evicted as fast as they come in) the read waits."""
    for _ in range(WARMINGS):
        try:
            return _read(ctx, request, wanted, denied)
        except ColdRead as cold:
            await _warm(ctx, cold)
    return _read(ctx, request, wanted, denied, wait_for_disk=True)


async def _warm(ctx: RequestContext, cold: ColdRead) -> None:
    metrics = ctx.broker.metrics
    if metrics is not None:
        metrics.cold_reads += 1
        metrics.cold_read_bytes += cold.length
    await asyncio.to_thread(cold.warm)


def _resolve(controller: Any, requested: list[SessionPartition]) -> list[_WantedTopic]:
    """The partitions to read, grouped by topic in the order first named, against the
    metadata as it is now."""
    by_topic: dict[tuple[str | None, uuid.UUID | None], list[_Wanted]] = {}
    resolved: dict[tuple[str | None, uuid.UUID | None], Any] = {}
    for r in requested:
        key = (r.name, r.topic_id)
        if key not in resolved:
            resolved[key] = resolve_topic(controller, r.name, r.topic_id)
            by_topic[key] = []
        meta = resolved[key]
        name_for_read = meta.name if meta is not None and r.name is None else r.name
        by_topic[key].append(
            _Wanted(
                name_for_read,
                r.topic_id,
                r.partition,
                r.fetch_offset,
                r.max_bytes,
                meta is not None,
                r.current_leader_epoch,
                r.last_fetched_epoch,
            )
        )
    return [(name, topic_id, entries) for (name, topic_id), entries in by_topic.items()]


def _unauthorized(
    ctx: RequestContext, request: Any, wanted: list[_WantedTopic]
) -> frozenset[str | None]:
    """Topics refused by the ACLs: all of them for a follower without CLUSTER_ACTION on
    the cluster, else those a consumer may not READ (TOPIC_AUTHORIZATION_FAILED)."""
    names = {w.name for _, _, entries in wanted for w in entries if w.name is not None}
    if replica_id_of(request) >= 0:
        return (
            frozenset() if authz.cluster_allowed(ctx, authz.Op.CLUSTER_ACTION) else frozenset(names)
        )
    return frozenset(names - authz.filter_allowed(ctx, authz.Op.READ, authz.TOPIC, names))


async def _long_poll(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    max_wait_ms: int,
    denied: frozenset[str | None],
    step: SessionStep,
) -> Any:
    response = await _wait_for_data(ctx, request, wanted, max_wait_ms, denied)
    if step.session is None:
        return response
    return fetch_sessions.answer(step.session, response, step.incremental)


async def _wait_for_data(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    max_wait_ms: int,
    denied: frozenset[str | None],
) -> Any:
    deadline = time.monotonic() + max_wait_ms / 1000
    keys = [
        (w.name, w.partition) for _, _, entries in wanted for w in entries if w.known and w.name
    ]
    purgatory = ctx.broker.purgatory
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        # Look again and start waiting in the same step: a produce handled since the
        # last look (even one pipelined behind this fetch) cannot be missed.
        response, size, has_error, conversions = await _read_warmed(ctx, request, wanted, denied)
        if size >= request.min_bytes or has_error:
            return await _converted(response, conversions) if conversions else response
        if not await purgatory.wait(keys, remaining):
            break
    response, _, _, conversions = await _read_warmed(ctx, request, wanted, denied)
    return await _converted(response, conversions) if conversions else response


def replica_id_of(request: Any) -> int:
    """The fetching replica's broker id (-1 for a consumer)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def replica_epoch_of(request: Any) -> int:
    """The fetching replica's broker epoch (v15+, KIP-903); -1 when not sent."""
    state = getattr(request, "replica_state", None)
    return state.replica_epoch if state is not None else -1


def _read(
    ctx: RequestContext,
    request: Any,
    wanted: list[_WantedTopic],
    denied: frozenset[str | None] = frozenset(),
    wait_for_disk: bool = False,
) -> tuple[Any, int, bool, list[_Conversion]]:
    """The response, the bytes of records it holds, whether a partition has an error,
    and for v0-3 the down-conversions still to be made (``_converted``): until then
    their partitions hold the v2 batches read, and the bytes count those.

    Raises ColdRead where records to read are not in the page cache, unless told to
    ``wait_for_disk``: nothing it did before that needs undoing (a follower's fetch
    position told again is the same)."""
    node_state = ctx.broker.state
    replica_id = replica_id_of(request)
    replicas = ctx.broker.replicas
    response_type = ctx.response_type
    topic_type = nested(response_type, "FetchableTopicResponse")
    partition_type = nested(response_type, "PartitionData")
    read_committed = getattr(request, "isolation_level", 0) == 1
    aborted_type = nested_if_any(response_type, "AbortedTransaction")  # v4+
    budget = getattr(request, "max_bytes", _NO_RESPONSE_LIMIT)  # v3+
    down_magic = _down_conversion_magic(ctx.api_version)
    total = 0
    has_error = False
    moved: list[tuple[str, int]] = []  # NOT_LEADER_OR_FOLLOWER: told the leader (KIP-951)
    conversions: list[_Conversion] = []
    topics: list[Any] = []
    for name, topic_id, entries in wanted:
        partitions: list[Any] = []
        for w in entries:
            error = ErrorCode.none
            records: bytes | memoryview = b""
            aborted = () if read_committed else None
            high_watermark = last_stable = log_start = -1
            diverging = None
            refused = bool(denied) and w.name in denied
            partition_log = (
                node_state.partition_log(w.name, w.partition)
                if w.known and w.name is not None and not refused
                else None
            )
            if refused:
                error = ErrorCode.topic_authorization_failed
            elif partition_log is None:
                if w.known:
                    topic = node_state.topic(w.name) if w.name is not None else None
                    # A partition whose replicas are elsewhere: go to its leader.
                    error = (
                        ErrorCode.not_leader_or_follower
                        if topic is not None and w.partition in topic.states
                        else ErrorCode.unknown_topic_or_partition
                    )
                elif w.name is None and w.topic_id is not None:
                    error = ErrorCode.unknown_topic_id
                else:
                    error = ErrorCode.unknown_topic_or_partition
            elif not node_state.leads(partition_log.topic, w.partition):
                error = ErrorCode.not_leader_or_follower
            elif (epoch_error := _check_leader_epoch(node_state, partition_log, w)) is not None:
                error = epoch_error
            else:
                high_watermark = partition_log.high_watermark
                last_stable = partition_log.last_stable_offset
                log_start = partition_log.log_start_offset
                limit = min(w.max_bytes, budget)
                diverging = diverging_epoch(
                    w.last_fetched_epoch, w.offset, partition_log.end_offset_for_epoch
                )
                # A follower reads up to the log end; consumers up to the high watermark,
                # or to the last stable offset when they read committed data only.
                if replica_id >= 0:
                    upper = partition_log.log_end_offset
                else:
                    upper = last_stable if read_committed else high_watermark
                if diverging is not None:
                    if diverging[0] < 0:  # no epoch here at or below the fetcher's last
                        error = ErrorCode.offset_out_of_range
                        diverging = None
                elif w.offset < log_start or w.offset > partition_log.log_end_offset:
                    error = ErrorCode.offset_out_of_range
                else:
                    if replica_id >= 0:
                        replicas.follower_fetched(
                            partition_log.topic,
                            w.partition,
                            replica_id,
                            w.offset,
                            replica_epoch_of(request),
                        )
                        high_watermark = partition_log.high_watermark
                        last_stable = partition_log.last_stable_offset
                        upper = partition_log.log_end_offset
                if error != ErrorCode.none or diverging is not None:
                    pass
                elif replica_id >= 0 and replicas.leader_throttled(
                    partition_log.topic, w.partition
                ):
                    pass  # throttled replication over its rate: no data this time
                elif w.offset < upper and (limit > 0 or total == 0):
                    try:
                        records = partition_log.read(
                            w.offset, max(limit, 1), upper_bound=upper, wait_for_disk=wait_for_disk
                        )
                    except OffsetOutOfRangeError:
                        error = ErrorCode.offset_out_of_range
                    if total and len(records) > limit:
                        records = b""  # only the first partition may exceed its limits
                    if records and down_magic is not None:
                        conversions.append(
                            _Conversion(
                                len(topics),
                                len(partitions),
                                partition_log,
                                records,
                                down_magic,
                                w.offset,
                                limit,
                                upper,
                            )
                        )
                    if records and replica_id >= 0:
                        replicas.leader_sent(partition_log.topic, w.partition, len(records))
                    if records and read_committed and replica_id < 0 and aborted_type is not None:
                        aborted = _aborted(
                            aborted_type, partition_log.aborted_transactions(w.offset, upper)
                        )
            if error != ErrorCode.none:
                has_error = True
                if error == ErrorCode.not_leader_or_follower and w.name is not None:
                    moved.append((w.name, w.partition))
            elif diverging is not None:
                has_error = True  # answered at once: the follower must truncate first
            total += len(records)
            budget -= len(records)
            partitions.append(
                build(
                    partition_type,
                    partition_index=w.partition,
                    error_code=error,
                    high_watermark=high_watermark,
                    last_stable_offset=last_stable,
                    log_start_offset=log_start,
                    aborted_transactions=aborted,
                    preferred_read_replica=-1,
                    records=records,
                    **_diverging_field(partition_type, diverging),
                )
            )
        topics.append(
            build(topic_type, topic=name, topic_id=topic_id, partitions=tuple(partitions))
        )
    extra: dict[str, Any] = {}
    leader_type = nested_if_any(response_type, "LeaderIdAndEpoch")
    if moved and leader_type is not None:
        topics, extra = _with_leader_hints(ctx, response_type, leader_type, topics, moved)
    response = build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
        **extra,
    )
    return response, total, has_error, conversions


_NO_RESPONSE_LIMIT = 2**31 - 1
WARMINGS = 4  # cold reads warmed for one fetch before it may wait on the disk


@dataclass(slots=True)
class _Conversion:
    """A v0-3 partition's batches read, to be converted down: where its answer sits in
    the response, and what ``_down_converted`` needs."""

    topic_slot: int
    partition_slot: int
    partition_log: Any
    records: Any
    magic: int
    offset: int
    limit: int
    upper: int


async def _converted(response: Any, conversions: list[_Conversion]) -> Any:
    """The response with each v0-3 partition's batches converted down. Conversion is
    pure work on the bytes read (a compressed batch may decompress to 64 MiB and hold a
    million records): it runs on a worker thread, never on the event loop; reads of
    the log stay on the loop."""
    topics = list(response.responses)
    for c in conversions:
        records, error = await _down_converted(
            c.partition_log, c.records, c.magic, c.offset, c.limit, c.upper
        )
        topic = topics[c.topic_slot]
        partitions = list(topic.partitions)
        partitions[c.partition_slot] = dataclasses.replace(
            partitions[c.partition_slot], records=records, error_code=error
        )
        topics[c.topic_slot] = dataclasses.replace(topic, partitions=tuple(partitions))
    return dataclasses.replace(response, responses=tuple(topics))


def _down_conversion_magic(api_version: int) -> int | None:
    """The message format an old fetch version reads (None: v2 batches as stored)."""
    if api_version >= 4:
        return None
    return MAGIC_V0 if api_version <= 1 else MAGIC_V1


async def _down_converted(
    partition_log: Any, records: Any, magic: int, offset: int, limit: int, upper: int
) -> tuple[bytes, ErrorCode]:
    """The batches read from ``offset`` as a message set of ``magic``, and the error.

    When they convert to nothing (transaction markers only, the read cut short by a
    small limit), the read goes on after them, below ``upper``: an old fetcher, which
    cannot know of a marker, would otherwise ask for the same offset again and again."""
    while records:
        try:
            converted = await asyncio.to_thread(down_convert, records, magic, offset)
        except MessageSetError as exc:
            return b"", exc.error_code
        if converted:
            return converted, ErrorCode.none
        offset = max(h.next_offset for h in iter_headers(records))
        if offset >= upper:
            return b"", ErrorCode.none
        records = partition_log.read(offset, max(limit, 1), upper_bound=upper)
    return b"", ErrorCode.none


def _with_leader_hints(
    ctx: RequestContext,
    response_type: type,
    leader_type: type,
    topics: list[Any],
    moved: list[tuple[str, int]],
) -> tuple[list[Any], dict[str, Any]]:
    """KIP-951: NOT_LEADER_OR_FOLLOWER partitions name their current leader, and the
    response lists those leaders' endpoints."""
    leaders, endpoints = leader_hints(ctx.broker, moved, ctx.listener)
    state = ctx.broker.state
    hinted = []
    for topic in topics:
        name = getattr(topic, "topic", None)
        if name is None:
            topic_id = getattr(topic, "topic_id", None)
            view = state.by_id.get(topic_id) if topic_id is not None else None
            name = view.name if view is not None else None
        partitions = []
        for part in topic.partitions:
            hint = leaders.get((name, part.partition_index)) if name is not None else None
            if hint is not None and part.error_code == ErrorCode.not_leader_or_follower:
                part = dataclasses.replace(
                    part, current_leader=build(leader_type, leader_id=hint[0], leader_epoch=hint[1])
                )
            partitions.append(part)
        hinted.append(dataclasses.replace(topic, partitions=tuple(partitions)))
    endpoint_type = nested(response_type, "NodeEndpoint")
    extra = {
        "node_endpoints": tuple(
            build(endpoint_type, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in endpoints
        )
    }
    return hinted, extra


def _check_leader_epoch(controller: Any, partition_log: Any, w: _Wanted) -> ErrorCode | None:
    """KIP-320: a fetcher that names a leader epoch must name the current one."""
    if w.current_leader_epoch < 0:
        return None
    topic = controller.topic(partition_log.topic)
    ours = topic.leader_epoch_of(w.partition) if topic is not None else -1
    if w.current_leader_epoch < ours:
        return ErrorCode.fenced_leader_epoch
    if w.current_leader_epoch > ours:
        return ErrorCode.unknown_leader_epoch
    return None


def _diverging_field(partition_type: type, diverging: tuple[int, int] | None) -> dict[str, Any]:
    if diverging is None:
        return {}
    epoch_type = nested_if_any(partition_type, "EpochEndOffset")
    if epoch_type is None:  # before v12 a follower truncates by OffsetForLeaderEpoch
        return {}
    return {"diverging_epoch": build(epoch_type, epoch=diverging[0], end_offset=diverging[1])}
