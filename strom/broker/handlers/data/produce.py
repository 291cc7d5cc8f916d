"""Produce (key 0), versions 0-12.

Each partition's ``records`` are validated as bytes (magic 2, sizes, CRC32C, and
that each batch holds exactly the records its header counts: their length prefixes
are walked, a compressed batch's after decompressing it, else CORRUPT_MESSAGE as Kafka
answers) and appended as they came: compressed batches stay compressed. A batch that
decompresses to more than INLINE_DECOMPRESSED (1 MiB) is checked on a worker thread,
the connection's later requests held back meanwhile so that appends keep the
connection's order; past codecs.MAX_DECOMPRESSED (64 MiB) it is MESSAGE_TOO_LARGE.
Versions 0-2 may carry a message set of magic 0 or 1 instead (v3+ carry v2 batches
only: magic 0/1 there is INVALID_RECORD, as Kafka 3.9 answers): it is converted up to
one v2 batch before anything else (protocol/message_sets.py, Kafka's LogValidator
rules: the log assigns the offsets, each record keeps its timestamp, -1 in magic 0,
and a wrapper's codec is kept), so the log holds only v2 batches and everything below
treats the converted batch like any other. A bad CRC or framing is CORRUPT_MESSAGE,
a malformed set (mixed magics, nested or misplaced compression, bad wrapper offsets)
INVALID_RECORD, a message marked LogAppendTime INVALID_TIMESTAMP, a message or the
converted batch above max.message.bytes MESSAGE_TOO_LARGE. Only those
requests pay for it; a v2 batch in a v0-2 request takes the usual path.
The broker rewrites base offset and partition leader epoch, and for topics
with ``message.timestamp.type=LogAppendTime`` the batch timestamp (then the CRC
is recomputed). Beyond the lengths there is no per-record work, except on topics that need it: a
compacted topic (cleanup.policy with ``compact``) refuses a batch holding a
record without a key with INVALID_RECORD, and a topic whose compression.type is
not ``producer`` gets every batch in that codec (records decompressed and
recompressed as they are: offsets deltas, timestamps, producer id/epoch/sequence
kept).

Per-record validation (KIP-467), as Kafka's LogValidator does it: a keyless record on
a compacted topic is INVALID_RECORD; on a CreateTime topic a record whose timestamp
lies more than ``message.timestamp.before.max.ms`` before or
``message.timestamp.after.max.ms`` after the broker's clock is INVALID_TIMESTAMP (the
partition's error when any record has it). The response names each offending record
by its index in its batch (``record_errors``, v8+) with Kafka's messages and an
``error_message``; nothing of the partition's records is appended. The first batch
holding a bad record is the one reported. A batch's records are decoded for this only
when a check needs them: keys on a compacted topic; timestamps when the batch's max
timestamp lies beyond the upper bound, or when ``before.max.ms`` is set below its
default (a batch header cannot tell the smallest timestamp).

Only the partition's leader appends, through the leader's one append path
(``ReplicaManager.append_as_leader``; else NOT_LEADER_OR_FOLLOWER, naming the current
leader and its endpoint from v10 on, KIP-951). On a partition
without followers acks 0, 1 and -1 behave alike: the response is sent once the batch
is in the log. With followers, acks=-1 is refused with NOT_ENOUGH_REPLICAS while the
ISR is smaller than ``min.insync.replicas`` (topic, else broker), and answered once
the high watermark has passed the batch (every member of the maximal ISR has it;
strom/replication/leader.py) while the ISR still has ``min.insync.replicas`` members,
NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below that meanwhile, or
REQUEST_TIMED_OUT after the request's timeout. In every case, when the topic's
flush policy asks for a flush, the answer also waits for the fsync: the fsync runs
off the event loop and one fsync covers every append made before it
(group_commit.py); a failed fsync answers KAFKA_STORAGE_ERROR. acks=0 gets no
response. Errors: UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE (bad CRC or
framing), MESSAGE_TOO_LARGE (a batch above the topic's max.message.bytes),
INVALID_RECORD (magic 0/1 in v3+), INVALID_REQUIRED_ACKS,
INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, NOT_ENOUGH_REPLICAS,
NOT_ENOUGH_REPLICAS_AFTER_APPEND.
Errors are per partition; a failed partition gets base_offset -1.

Idempotence (KIP-98), per partition, for batches with producerId >= 0 and
baseSequence >= 0 (storage/producer_state.py): an epoch below the producer's
known one is INVALID_PRODUCER_EPOCH; a batch with the same epoch and the same
first and last sequence as one of that producer's last five batches is a
retry: nothing is appended and the response is success with the base offset
the first copy got, for acks=-1 once the high watermark has passed that copy
(log_append_time is then this request's time, not the first copy's); a new
epoch must start at sequence 0 and otherwise the first sequence must follow the
last one (wrapping at 2**31-1), else
OUT_OF_ORDER_SEQUENCE_NUMBER. A producer id the partition does not know is
accepted at any sequence and epoch (its state may be older than the segments
it is rebuilt from). Idle producer ids do not expire.

Transactions (KIP-98): a transactional batch opens or continues its producer's
transaction in the partition; the first one of a transaction is verified with the
transaction coordinator first (KIP-890 part 1, txn_verification.py): a partition
not in the producer's ongoing transaction gets INVALID_TXN_STATE, a fenced producer
INVALID_PRODUCER_EPOCH, and a coordinator that is moving NOT_ENOUGH_REPLICAS, which
the producer retries. A plain batch with a sequence from a producer whose
transaction is open is INVALID_TXN_STATE. Control batches (markers) are the
coordinator's to write: a client's gets INVALID_RECORD.

Authorization (``authz``): WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for its
partitions) and, for a transactional produce, WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition). Without an authorizer the
cost is one None check.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE, now_ms, resolve_topic
from strom.broker.network.cluster_view import leader_hints
from strom.broker.network.router import RequestContext, handles
from strom.broker.replica.manager import LeaderAppend
from strom.broker.replica.txn_verification import transactional_producer
from strom.cluster.node_state import TopicView
from strom.coordinator.internal_log import AppendRefused
from strom.protocol.codecs import CODEC_NAMES, MAX_DECOMPRESSED, DecompressedTooLarge
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested, nested_if_any
from strom.protocol.message_sets import (
    DecompressedTooLargeError,
    MessageSetError,
    up_convert,
)
from strom.protocol.records import (
    BatchHeader,
    BatchTooLargeError,
    CorruptBatchError,
    UnsupportedMagicError,
    check_record_counts,
    recompress_batches,
    record_stamps,
    validate_batches,
)
from strom.storage.partition_log import PartitionLog
from strom.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)

log = logging.getLogger(__name__)
UTC = datetime.UTC
TopicPartition = tuple[str, int]

# What one batch may decompress to while the event loop checks it (a librdkafka batch of
# its default batch.size fits): a request holding a batch that makes more is checked
# on a worker thread instead, up to codecs.MAX_DECOMPRESSED.
INLINE_DECOMPRESSED = 1 << 20


# Any for request and answer: Produce v0-2 are built at run time (legacy_versions)
@handles(0, 0, 12)
def handle_produce(ctx: RequestContext, request: Any) -> Any:
    refused: dict[TopicPartition, ErrorCode] = {}
    if authz.authorizer_of(ctx.broker) is not None:
        refused = _unauthorized(ctx, request)
    if getattr(request, "transactional_id", None) is not None:  # v3+
        unverified = _unverified(ctx, request, refused)
        if unverified:
            return _verify_then_produce(ctx, request, unverified, refused)
    return _produce(ctx, request, refused)


def _unauthorized(ctx: RequestContext, request: Any) -> dict[TopicPartition, ErrorCode]:
    """Partitions refused by the ACLs: every one without WRITE on the transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), else those of topics without WRITE."""
    txn_id = getattr(request, "transactional_id", None)
    every: ErrorCode | None = None
    if txn_id is not None and not authz.allowed(
        ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, txn_id
    ):
        every = ErrorCode.transactional_id_authorization_failed
    names = {t.name for t in request.topic_data}
    writable = names if every else authz.filter_allowed(ctx, authz.Op.WRITE, authz.TOPIC, names)
    return {
        (t.name, data.index): every or ErrorCode.topic_authorization_failed
        for t in request.topic_data
        if every or t.name not in writable
        for data in t.partition_data
    }


def _unverified(
    ctx: RequestContext, request: Any, refused: dict[TopicPartition, ErrorCode]
) -> dict[tuple[int, int], list[TopicPartition]]:
    """Partitions led here whose first transactional batch of a transaction this is:
    per (producer id, epoch), to be verified with the coordinator (KIP-890)."""
    node_state = ctx.broker.state
    out: dict[tuple[int, int], list[TopicPartition]] = {}
    for topic_data in request.topic_data:
        topic = resolve_topic(
            node_state, getattr(topic_data, "name", None), getattr(topic_data, "topic_id", None)
        )
        if topic is None:
            continue
        for data in topic_data.partition_data:
            if (topic.name, data.index) in refused:
                continue
            producer = transactional_producer(data.records)
            if producer is None:
                continue
            partition_log = node_state.partition_log(topic.name, data.index)
            if partition_log is None or partition_log.has_open_transaction(*producer):
                continue
            out.setdefault(producer, []).append((topic.name, data.index))
    return out


async def _verify_then_produce(
    ctx: RequestContext,
    request: Any,
    unverified: dict[tuple[int, int], list[TopicPartition]],
    refused: dict[TopicPartition, ErrorCode],
) -> Any:
    refused = dict(refused)
    for (producer_id, epoch), partitions in unverified.items():
        results = await ctx.broker.txn_verifier.verify(
            request.transactional_id, producer_id, epoch, partitions
        )
        for key, error in results.items():
            if error != ErrorCode.none:
                refused[key] = _VERIFICATION_ERRORS.get(error, ErrorCode.invalid_txn_state)
                log.info(
                    "refusing a transactional produce to %s-%d from %s: %s",
                    *key,
                    ctx.peer,
                    error.name,
                )
    response = _produce(ctx, request, refused)
    if inspect.isawaitable(response):
        return await response
    return response


# What a producer is told when its partition could not be verified: retriable errors
# for a coordinator that is moving or busy, as Kafka answers them.
_VERIFICATION_ERRORS = {
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas: ErrorCode.not_enough_replicas,
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.invalid_producer_id_mapping: ErrorCode.invalid_producer_epoch,
}


def _produce(ctx: RequestContext, request: Any, refused: dict[TopicPartition, ErrorCode]) -> Any:
    """Check every partition's records, then append them: on the event loop while each
    batch decompresses to at most INLINE_DECOMPRESSED, else on a worker thread."""
    targets = _targets(ctx, request, refused)
    try:
        checked = [
            (name, topic_id, [_checked(ctx, item, INLINE_DECOMPRESSED) for item in items])
            for name, topic_id, items in targets
        ]
    except _TooLargeForTheLoop:
        # Held from now, before the coroutine runs: the connection's next request may
        # already be read and waiting.
        release = ctx.hold_reading() if ctx.hold_reading is not None else None
        return _check_off_the_loop_then_append(ctx, request, targets, release)
    return _append_checked(ctx, request, checked)


async def _check_off_the_loop_then_append(
    ctx: RequestContext,
    request: Any,
    targets: list[tuple[Any, Any, list[Any]]],
    release: Callable[[], None] | None,
) -> Any:
    """A request with a batch too big to decompress on the event loop: its records are
    checked on a worker thread (decompression releases the GIL) while the connection's
    later requests wait (``release`` ends that), so that its appends keep their place
    in the connection's order; every other connection is served meanwhile."""
    try:
        checked = await asyncio.to_thread(_checked_off_the_loop, ctx, targets)
        response = _append_checked(ctx, request, checked, recheck=True)
    finally:
        if release is not None:
            release()
    if inspect.isawaitable(response):
        return await response
    return response


def _checked_off_the_loop(
    ctx: RequestContext, targets: list[tuple[Any, Any, list[Any]]]
) -> list[tuple[Any, Any, list[Any]]]:
    return [
        (name, topic_id, [_checked(ctx, item, MAX_DECOMPRESSED) for item in items])
        for name, topic_id, items in targets
    ]


@dataclass(slots=True)
class _Target:
    """A partition's records to check: where they go, not yet read."""

    topic: TopicView
    partition_log: PartitionLog
    records: bytes | memoryview


@dataclass(slots=True)
class _Checked:
    """A partition's records, checked and ready to append."""

    topic: TopicView
    partition_log: PartitionLog
    buf: bytearray | memoryview
    headers: list[BatchHeader]


class _TooLargeForTheLoop(Exception):
    """A batch decompresses past INLINE_DECOMPRESSED: the request is checked again on a
    worker thread."""


def _targets(
    ctx: RequestContext, request: Any, refused: dict[TopicPartition, ErrorCode]
) -> list[tuple[Any, Any, list[Any]]]:
    """Per topic of the request: (name, topic id, per partition either its result, a
    [partition, error, ...] list when it is refused before its records are read, or
    a _Target). Reads the node's state: on the event loop only."""
    node_state = ctx.broker.state
    acks = request.acks
    out: list[tuple[Any, Any, list[Any]]] = []
    for topic_data in request.topic_data:
        name: str = topic_data.name  # every version served (0-12) names its topics
        topic_id = getattr(topic_data, "topic_id", None)
        topic = resolve_topic(node_state, name, topic_id)
        items: list[Any] = []
        for data in topic_data.partition_data:
            if acks not in (0, 1, -1):
                items.append([data.index, ErrorCode.invalid_required_acks, -1, None, -1])
            elif refused and (name, data.index) in refused:
                items.append([data.index, refused[(name, data.index)], -1, None, -1])
            else:
                partition_log = (
                    node_state.partition_log(topic.name, data.index) if topic is not None else None
                )
                refusal = _not_here(ctx, topic, data.index, partition_log)
                if refusal is not None:
                    items.append([data.index, *refusal])
                elif not data.records:
                    start = partition_log.log_start_offset  # type: ignore[union-attr]
                    items.append([data.index, ErrorCode.corrupt_message, -1, None, start])
                else:
                    items.append(_Target(topic, partition_log, data.records))  # type: ignore[arg-type]
        out.append((name, topic_id, items))
    return out


def _not_here(
    ctx: RequestContext, topic: TopicView | None, index: int, partition_log: PartitionLog | None
) -> tuple[Any, ...] | None:
    """The partition's error when this broker cannot take its records, else None."""
    if topic is None or partition_log is None:
        if topic is not None and index in topic.states:
            return ErrorCode.not_leader_or_follower, -1, None, -1  # a replica elsewhere
        return ErrorCode.unknown_topic_or_partition, -1, None, -1
    state = topic.states.get(partition_log.partition)
    if state is None or state.leader != ctx.broker.node_id:
        return ErrorCode.not_leader_or_follower, -1, None, -1
    return None


def _append_checked(
    ctx: RequestContext,
    request: Any,
    checked: list[tuple[Any, Any, list[Any]]],
    recheck: bool = False,
) -> Any:
    """Append every checked partition's records; the response, or an awaitable of it
    when it waits for an fsync or the followers. ``recheck``: the records were checked
    off the event loop, so whether this broker still leads each partition is asked
    again."""
    broker = ctx.broker
    acks = request.acks
    # Per topic: (name, topic id, [(partition, error, base, append time, log start)]).
    results: list[tuple[Any, Any, list[list[Any]]]] = []
    durable: list[tuple[list[Any], asyncio.Future[None]]] = []
    # acks=all on partitions with followers: (result, the append to wait for)
    replicated: list[tuple[list[Any], LeaderAppend]] = []
    for name, topic_id, items in checked:
        partitions = []
        for item in items:
            if not isinstance(item, _Checked):
                partitions.append(item)
                continue
            partition_log = item.partition_log
            result = [partition_log.partition, *_append(ctx, item, acks, recheck)]
            if result[1] == ErrorCode.none:
                appended = result[2]
                result[2] = appended.base_offset
                if partition_log.flush_wanted():
                    durable.append((result, broker.group_commit.durable(partition_log)))
                if acks == -1 and appended.replicated:
                    replicated.append((result, appended))
            partitions.append(result)
        results.append((name, topic_id, partitions))
    if acks == 0:
        for _, done in durable:
            done.add_done_callback(_ignore_outcome)
        return None
    if durable or replicated:
        return _after_fsync_and_replication(ctx, request, results, durable, replicated)
    return _response(ctx, results)


async def _after_fsync_and_replication(
    ctx: RequestContext,
    request: Any,
    results: list[tuple[Any, Any, list[list[Any]]]],
    durable: list[tuple[list[Any], asyncio.Future[None]]],
    replicated: list[tuple[list[Any], LeaderAppend]],
) -> Any:
    outcomes = await asyncio.gather(*(done for _, done in durable), return_exceptions=True)
    for (result, _), outcome in zip(durable, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            result[1:] = [ErrorCode.kafka_storage_error, -1, None, -1]
    if replicated:
        await _wait_for_high_watermarks(ctx, request, replicated)
    return _response(ctx, results)


async def _wait_for_high_watermarks(
    ctx: RequestContext, request: Any, waits: list[tuple[list[Any], LeaderAppend]]
) -> None:
    """acks=all: answer once each append is acknowledged (``append_acknowledged``: the
    high watermark passed it while this broker still leads in the epoch it was appended
    in, with the ISR at ``min.insync.replicas`` or more); NOT_LEADER_OR_FOLLOWER if the
    leadership moved meanwhile (the batch may have been truncated away, whatever the
    high watermark says now), NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
    it; REQUEST_TIMED_OUT after the request's timeout."""
    timeout = request.timeout  # ms in the fast decoder's view, a timedelta in kio's
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout / 1000
    deadline = time.monotonic() + max(seconds, 0.0)
    replicas = ctx.broker.replicas
    pending = [w for w in waits if w[0][1] == ErrorCode.none]
    while True:
        waiting = []
        for result, appended in pending:
            outcome = replicas.append_acknowledged(appended)
            if outcome is None:
                waiting.append((result, appended))
            elif outcome != ErrorCode.none:
                result[1:] = [outcome, -1, None, -1]
        pending = waiting
        remaining = deadline - time.monotonic()
        if not pending or remaining <= 0:
            break
        await ctx.broker.purgatory.wait(
            [(appended.topic, appended.partition) for _, appended in pending], remaining
        )
    for result, _ in pending:
        result[1] = ErrorCode.request_timed_out


def _ignore_outcome(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()  # logged by group_commit; acks=0 has no one to tell


def _response(ctx: RequestContext, results: list[tuple[Any, Any, list[list[Any]]]]) -> Any:
    response_type = ctx.response_type
    topic_type = nested(response_type, "TopicProduceResponse")
    partition_type = nested(response_type, "PartitionProduceResponse")
    leader_type = nested_if_any(response_type, "LeaderIdAndEpoch")
    names: dict[tuple[Any, Any], str | None] = {}
    for name, topic_id, _ in results:
        topic = resolve_topic(ctx.broker.state, name, topic_id)
        names[(name, topic_id)] = topic.name if topic is not None else None
    moved = [
        (known, index)
        for name, topic_id, partitions in results
        if (known := names[(name, topic_id)]) is not None
        for index, error, *_ in partitions
        if error == ErrorCode.not_leader_or_follower
    ]
    leaders, endpoints = (
        leader_hints(ctx.broker, moved, ctx.listener) if moved and leader_type else ({}, [])
    )
    topics = []
    for name, topic_id, partitions in results:
        built = []
        for index, error, base, append_time, start, *rejected in partitions:
            known = names[(name, topic_id)]
            hint = leaders.get((known, index)) if leaders and known is not None else None
            extra: dict[str, Any] = {}
            if rejected:
                record_errors, message = rejected[0]
                errors_type = nested_if_any(response_type, "BatchIndexAndErrorMessage")  # v8+
                if errors_type is not None:
                    extra["record_errors"] = tuple(
                        build(errors_type, batch_index=i, batch_index_error_message=text)
                        for i, text in record_errors
                    )
                extra["error_message"] = message
            if (
                hint is not None
                and leader_type is not None
                and error == ErrorCode.not_leader_or_follower
            ):
                extra["current_leader"] = build(
                    leader_type, leader_id=hint[0], leader_epoch=hint[1]
                )
            built.append(
                build(
                    partition_type,
                    index=index,
                    error_code=error,
                    base_offset=base,
                    log_append_time=append_time,
                    log_start_offset=start,
                    **{"record_errors": (), "error_message": None, **extra},
                )
            )
        topics.append(
            build(topic_type, name=name, topic_id=topic_id, partition_responses=tuple(built))
        )
    extra_top = {}
    if endpoints:
        endpoint_type = nested(response_type, "NodeEndpoint")
        extra_top["node_endpoints"] = tuple(
            build(endpoint_type, node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in endpoints
        )
    return build(response_type, responses=tuple(topics), throttle_time=NO_THROTTLE, **extra_top)


def _checked(ctx: RequestContext, item: Any, decompress_limit: int) -> Any:
    """A _Target's records checked as Kafka checks them (framing, CRC, sizes, record
    counts, control batches, the topic's per-record rules) and, where the topic wants
    it, recompressed: a _Checked, or the partition's result when they are refused.
    Raises _TooLargeForTheLoop when a batch decompresses past ``decompress_limit`` and
    that is below the limit of all (codecs.MAX_DECOMPRESSED). Pure work on the request's
    bytes: may run on a worker thread."""
    if not isinstance(item, _Target):
        return item
    topic, partition_log = item.topic, item.partition_log
    partition = partition_log.partition
    start = partition_log.log_start_offset
    config = partition_log.config
    records = item.records
    # A writable view into the request frame is patched and written where it lies.
    buf: bytearray | memoryview
    if isinstance(records, memoryview) and not records.readonly:
        buf = records  # a writable view into the request frame
    else:
        buf = bytearray(records)
    try:
        headers = validate_batches(buf, config.max_message_bytes)
    except BatchTooLargeError:
        return [partition, ErrorCode.message_too_large, -1, None, start]
    except UnsupportedMagicError:
        converted = _up_converted(ctx, f"{topic.name}-{partition}", buf, config, decompress_limit)
        if isinstance(converted, ErrorCode):
            return [partition, converted, -1, None, start]
        buf, headers = converted
    except CorruptBatchError as exc:
        log.info("rejecting batch for %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return [partition, ErrorCode.corrupt_message, -1, None, start]
    if any(header.is_control for header in headers):
        # Markers are the coordinator's to write (WriteTxnMarkers), never a client's.
        log.info("refusing control batches for %s-%d from %s", topic.name, partition, ctx.peer)
        return [partition, ErrorCode.invalid_record, -1, None, start]
    try:
        bodies = check_record_counts(buf, headers, decompress_limit)
        if config.compact or config.compression_type != "producer":
            codec = CODEC_NAMES.get(config.compression_type)
            if codec is not None and any(h.codec != codec and not h.is_control for h in headers):
                buf, headers = recompress_batches(buf, headers, codec, bodies)
                bodies = {}
        refused = _invalid_records(f"{topic.name}-{partition}", config, buf, headers, bodies)
    except DecompressedTooLarge as exc:
        if decompress_limit < MAX_DECOMPRESSED:
            raise _TooLargeForTheLoop from None
        log.info("rejecting batch for %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return [partition, ErrorCode.message_too_large, -1, None, start]
    except CorruptBatchError as exc:
        log.info("rejecting batch for %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return [partition, ErrorCode.corrupt_message, -1, None, start]
    if refused is not None:
        error, record_errors, message = refused
        log.info(
            "refusing %d record(s) for %s-%d from %s: %s",
            len(record_errors),
            topic.name,
            partition,
            ctx.peer,
            record_errors[0][1],
        )
        return [partition, error, -1, None, start, (record_errors, message)]
    return _Checked(topic, partition_log, buf, headers)


def _append(ctx: RequestContext, item: _Checked, acks: int, recheck: bool) -> tuple[Any, ...]:
    """(error, the append (a LeaderAppend) or -1, log append time, log start offset)."""
    topic, partition_log = item.topic, item.partition_log
    partition = partition_log.partition
    if recheck:  # checked off the loop: the partition may have moved meanwhile
        node_state = ctx.broker.state
        now_there = node_state.partition_log(topic.name, partition)
        current = resolve_topic(node_state, topic.name, None)
        refusal = _not_here(ctx, current, partition, now_there)
        if refusal is None and now_there is not partition_log:
            refusal = (ErrorCode.not_leader_or_follower, -1, None, -1)
        if refusal is not None:
            return refusal
    append_time = None
    log_append_ms = None
    if partition_log.config.message_timestamp_type == "LogAppendTime":
        log_append_ms = now_ms()
        append_time = datetime.datetime.fromtimestamp(log_append_ms / 1000, tz=UTC)
    try:
        appended = ctx.broker.replicas.append_as_leader(
            topic.name,
            partition,
            item.buf,
            item.headers,
            required_acks=acks,
            log_append_time_ms=log_append_ms,
            defer_flush=True,
        )
    except AppendRefused as exc:
        return exc.error_code, -1, None, partition_log.log_start_offset
    except InvalidProducerEpochError as exc:
        log.info("fencing a produce to %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return ErrorCode.invalid_producer_epoch, -1, None, partition_log.log_start_offset
    except OutOfOrderSequenceError as exc:
        log.info("rejecting a produce to %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return ErrorCode.out_of_order_sequence_number, -1, None, partition_log.log_start_offset
    except InvalidTxnStateError as exc:
        log.info("rejecting a produce to %s-%d from %s: %s", topic.name, partition, ctx.peer, exc)
        return ErrorCode.invalid_txn_state, -1, None, partition_log.log_start_offset
    return ErrorCode.none, appended, append_time, partition_log.log_start_offset


def _up_converted(
    ctx: RequestContext,
    topic_partition: str,
    records: bytes | bytearray | memoryview,
    config: Any,
    decompress_limit: int,
) -> tuple[bytearray, list[BatchHeader]] | ErrorCode:
    """Produce v0-2: the message set of magic 0/1 as one v2 batch and its header, or
    the partition's error. Raises _TooLargeForTheLoop as _checked does."""
    if ctx.api_version > 2:
        log.info("refusing magic 0/1 in a Produce v%d from %s", ctx.api_version, ctx.peer)
        return ErrorCode.invalid_record
    log_append_time = config.message_timestamp_type == "LogAppendTime"
    try:
        buf = bytearray(
            up_convert(
                records,
                log_append_time=log_append_time,
                max_message_bytes=config.max_message_bytes,
                decompress_limit=decompress_limit,
            )
        )
    except DecompressedTooLargeError:
        if decompress_limit < MAX_DECOMPRESSED:
            raise _TooLargeForTheLoop from None
        log.info("rejecting a message set for %s from %s: too large", topic_partition, ctx.peer)
        return ErrorCode.message_too_large
    except MessageSetError as exc:
        log.info("rejecting a message set for %s from %s: %s", topic_partition, ctx.peer, exc)
        return exc.error_code
    try:
        return buf, validate_batches(buf, config.max_message_bytes)
    except BatchTooLargeError:
        return ErrorCode.message_too_large


def _invalid_records(
    topic_partition: str,
    config: Any,
    buf: bytes | bytearray | memoryview,
    headers: list[BatchHeader],
    bodies: dict[int, bytes],
) -> tuple[ErrorCode, list[tuple[int, str]], str] | None:
    """The records the topic refuses, Kafka's way (KIP-467): the partition's error, each
    bad record of the first batch holding one as (index in its batch, message), and the
    error message; None when every record passes."""
    compact = config.compact
    create_time = config.message_timestamp_type == "CreateTime"
    if not compact and not create_time:
        return None
    now = now_ms()
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    lowest, highest = now - before, now + after
    lower_bound_set = before < _LONG_MAX
    for header in headers:
        if header.is_control:
            continue
        check_times = create_time and (header.max_timestamp > highest or lower_bound_set)
        if not compact and not check_times:
            continue
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        for i, (delta, timestamp, has_key) in enumerate(
            record_stamps(buf, header, bodies.get(header.position))
        ):
            if compact and not has_key:
                errors.append(
                    (
                        i,
                        "Compacted topic cannot accept message without key in topic partition "
                        + topic_partition,
                    )
                )
            elif (
                check_times
                and timestamp != -1
                and (now - timestamp > before or timestamp - now > after)
            ):
                bad_timestamp = True
                errors.append(
                    (
                        i,
                        f"Timestamp {timestamp} of message with offset "
                        f"{header.base_offset + delta} is out of range. The timestamp should "
                        f"be within [{lowest}, {highest}]",
                    )
                )
        if not errors:
            continue
        if bad_timestamp:
            return (
                ErrorCode.invalid_timestamp,
                errors,
                "One or more records have been rejected due to invalid timestamp",
            )
        shown = ", ".join(
            f"RecordError(batchIndex={i}, message='{text}')" for i, text in errors[:3]
        )
        return (
            ErrorCode.invalid_record,
            errors,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
        )
    return None


_LONG_MAX = 2**63 - 1
