"""Transaction APIs: the wire side of the transaction coordinator and of the markers.

- AddPartitionsToTxn (key 24), versions 0-5: one transaction up to v3; from v4 a batch
  of transactions, each possibly ``verify_only`` (KIP-890: a partition leader asking
  whether a partition is in the producer's ongoing transaction). A partition of an
  unknown topic gets UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED.
- AddOffsetsToTxn (25) 0-4, EndTxn (26) 0-4: transaction version 1 (EndTxn v5, the
  epoch bump of every transaction of KIP-890 part 2, is not served; clients learn it
  from ApiVersions and use version 1).
- WriteTxnMarkers (27) 0-2 (v0 is v1, not flexible): the markers a coordinator sends
  to partition leaders, answered once written and replicated (txn_markers.py).
- TxnOffsetCommit (28) 0-5: offsets committed inside a transaction (KIP-447's group
  fields from v3 are checked against the group's generation), visible to OffsetFetch
  only once the transaction commits.
- DescribeTransactions (65) 0, ListTransactions (66) 0-1: what this broker coordinates.
- DescribeProducers (61) 0: the producer state of partitions this broker leads.

PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH to the versions that
predate it (InitProducerId < 4, AddPartitionsToTxn and AddOffsetsToTxn and EndTxn < 2,
TxnOffsetCommit < 3), as Kafka does.

Authorization (``authz``), as Kafka checks it: WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
and TxnOffsetCommit; WRITE on the topics added (TOPIC_AUTHORIZATION_FAILED, the others
OPERATION_NOT_ATTEMPTED); READ on the group for AddOffsetsToTxn and TxnOffsetCommit
(GROUP_AUTHORIZATION_FAILED) and on the topics committed; CLUSTER_ACTION for batched
AddPartitionsToTxn (v4+) and WriteTxnMarkers (brokers' requests); DESCRIBE on the
transactional id for DescribeTransactions (ListTransactions lists those the principal
may describe); READ on the topic for DescribeProducers.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.network.router import RequestContext, handles
from strom.broker.replica.txn_markers import write_markers_here
from strom.coordinator.coordinator import OffsetToCommit
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.transaction_log import STATE_BY_LABEL, TxnState
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

TopicPartition = tuple[str, int]


def fenced_for(error: ErrorCode, api_version: int, first_version: int) -> ErrorCode:
    """PRODUCER_FENCED for versions that know it, INVALID_PRODUCER_EPOCH before."""
    if error == ErrorCode.producer_fenced and api_version < first_version:
        return ErrorCode.invalid_producer_epoch
    return error


# AddPartitionsToTxn ------------------------------------------------------------------


def _known_partitions(
    ctx: RequestContext, topics: Any
) -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode]]:
    """The partitions asked for, and errors for those that cannot be added."""
    state = ctx.broker.state
    wanted: list[TopicPartition] = []
    unknown: dict[TopicPartition, ErrorCode] = {}
    for topic in topics:
        meta = state.topic(topic.name)
        for index in topic.partitions:
            key = (topic.name, int(index))
            wanted.append(key)
            if meta is None or int(index) not in meta.states:
                unknown[key] = ErrorCode.unknown_topic_or_partition
    return wanted, unknown


async def _add_one(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    coordinator = ctx.broker.transactions
    wanted, unknown = _known_partitions(ctx, topics)
    if authz.authorizer_of(ctx.broker) is not None and not verify_only:
        if not authz.allowed(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, transactional_id):
            return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        names = {name for name, _ in wanted}
        writable = authz.filter_allowed(ctx, authz.Op.WRITE, authz.TOPIC, names)
        if writable != names:
            return {
                key: ErrorCode.operation_not_attempted
                if key[0] in writable
                else ErrorCode.topic_authorization_failed
                for key in wanted
            }
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
    if unknown:
        return {key: unknown.get(key, ErrorCode.operation_not_attempted) for key in wanted}
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    return dict.fromkeys(wanted, error)


def _topic_results(
    response_type: type, results: dict[TopicPartition, ErrorCode], version: int
) -> tuple[Any, ...]:
    topic_type = nested(response_type, "AddPartitionsToTxnTopicResult")
    partition_type = nested(response_type, "AddPartitionsToTxnPartitionResult")
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), error in results.items():
        by_topic.setdefault(topic, []).append(
            build(
                partition_type,
                partition_index=index,
                partition_error_code=fenced_for(error, version, 2),
            )
        )
    return tuple(
        build(topic_type, name=name, results_by_partition=tuple(parts))
        for name, parts in by_topic.items()
    )


def _one_transaction(request: req.AddPartitionsToTxn) -> TypeIs[req.AddPartitionsToTxnV0ToV3]:
    return request.__version__ < 4


@handles(24, 0, 5)
async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: req.AddPartitionsToTxn
) -> resp.AddPartitionsToTxn:
    response_type: type[resp.AddPartitionsToTxn] = ctx.response_type
    if ctx.api_version >= 4 and not authz.cluster_allowed(ctx, authz.Op.CLUSTER_ACTION):
        # Batched requests (v4+) come from brokers, as in Kafka.
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    if _one_transaction(request):
        results = await _add_one(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(response_type, results, ctx.api_version),
        )
    result_type = nested(response_type, "AddPartitionsToTxnResult")
    out = []
    for txn in request.transactions:
        results = await _add_one(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=bool(txn.verify_only),
        )
        out.append(
            build(
                result_type,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(response_type, results, ctx.api_version),
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(out),
    )


# AddOffsetsToTxn and EndTxn ---------------------------------------------------------


@handles(25, 0, 4)
async def handle_add_offsets_to_txn(
    ctx: RequestContext, request: req.AddOffsetsToTxn
) -> resp.AddOffsetsToTxn:
    response_type: type[resp.AddOffsetsToTxn] = ctx.response_type
    broker = ctx.broker
    topic = broker.state.topic(OFFSETS_TOPIC)
    partitions = (
        topic.partitions
        if topic is not None
        else int(broker.config["offsets.topic.num.partitions"])
    )
    if not authz.allowed(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = await broker.transactions.add_offsets(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.group_id,
            partitions,
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=fenced_for(error, ctx.api_version, 2),
    )


@handles(26, 0, 4)
async def handle_end_txn(ctx: RequestContext, request: req.EndTxn) -> resp.EndTxn:
    response_type: type[resp.EndTxn] = ctx.response_type
    if not authz.allowed(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
        )
    error = await ctx.broker.transactions.end_transaction(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
    )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=fenced_for(error, ctx.api_version, 2),
    )


# WriteTxnMarkers --------------------------------------------------------------------


# Any for request and answer: WriteTxnMarkers v0 is built at run time (legacy_versions)
@handles(27, 0, 2)
async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "WritableTxnMarkerResult")
    topic_type = nested(response_type, "WritableTxnMarkerTopicResult")
    partition_type = nested(response_type, "WritableTxnMarkerPartitionResult")
    out = []
    may = authz.cluster_allowed(ctx, authz.Op.CLUSTER_ACTION)
    for marker in request.markers:
        keys = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        if not may:
            results = dict.fromkeys(keys, ErrorCode.cluster_authorization_failed)
        else:
            results = await write_markers_here(
                ctx.broker,
                marker.producer_id,
                marker.producer_epoch,
                bool(marker.transaction_result),
                marker.coordinator_epoch,
                keys,
            )
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), error in results.items():
            by_topic.setdefault(topic, []).append(
                build(partition_type, partition_index=index, error_code=error)
            )
        out.append(
            build(
                result_type,
                producer_id=marker.producer_id,
                topics=tuple(
                    build(topic_type, name=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )
        )
    return build(response_type, markers=tuple(out))


# TxnOffsetCommit ----------------------------------------------------------------------


@handles(28, 0, 5)
async def handle_txn_offset_commit(
    ctx: RequestContext, request: req.TxnOffsetCommit
) -> resp.TxnOffsetCommit:
    broker = ctx.broker
    coordinator = broker.coordinator
    wanted = [
        OffsetToCommit(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    refusal = None
    readable = {w.topic for w in wanted}
    if not authz.allowed(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, request.transactional_id):
        refusal = ErrorCode.transactional_id_authorization_failed
    elif not authz.allowed(ctx, authz.Op.READ, authz.GROUP, request.group_id):
        refusal = ErrorCode.group_authorization_failed
    elif authz.authorizer_of(broker) is not None:
        readable = authz.filter_allowed(ctx, authz.Op.READ, authz.TOPIC, readable)
        if len(readable) < len({w.topic for w in wanted}):
            refusal = ErrorCode.operation_not_attempted
    if refusal is not None:
        errors = [
            ErrorCode.topic_authorization_failed
            if refusal == ErrorCode.operation_not_attempted and w.topic not in readable
            else refusal
            for w in wanted
        ]
        return _txn_commit_response(ctx, wanted, errors)
    errors = await coordinator.commit_txn_offsets(
        request.group_id,
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        wanted,
        wait_replicated=broker.replicas.wait_for_high_watermark,
    )
    return _txn_commit_response(ctx, wanted, errors)


def _txn_commit_response(
    ctx: RequestContext, wanted: list[Any], errors: list[ErrorCode]
) -> resp.TxnOffsetCommit:
    response_type: type[resp.TxnOffsetCommit] = ctx.response_type
    topic_type = nested(response_type, "TxnOffsetCommitResponseTopic")
    partition_type = nested(response_type, "TxnOffsetCommitResponsePartition")
    by_topic: dict[str, list[Any]] = {}
    for entry, error in zip(wanted, errors, strict=True):
        by_topic.setdefault(entry.topic, []).append(
            build(
                partition_type,
                partition_index=entry.partition,
                error_code=fenced_for(error, ctx.api_version, 3),
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


# DescribeTransactions, ListTransactions ------------------------------------------------


@handles(65, 0, 0)
def handle_describe_transactions(
    ctx: RequestContext, request: req.DescribeTransactions
) -> resp.DescribeTransactions:
    response_type: type[resp.DescribeTransactions] = ctx.response_type
    coordinator = ctx.broker.transactions
    state_type = nested(response_type, "TransactionState")
    topic_type = nested(response_type, "TopicData")
    out = []
    for txn_id in request.transactional_ids:
        error, meta = coordinator.describe(txn_id)
        if not authz.allowed(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, txn_id):
            error, meta = ErrorCode.transactional_id_authorization_failed, None
        if meta is None:
            out.append(
                build(
                    state_type,
                    error_code=error,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_when(-1),
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        out.append(
            build(
                state_type,
                error_code=ErrorCode.none,
                transactional_id=txn_id,
                transaction_state=meta.state.label,
                transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
                transaction_start_time=_when(meta.start_ms),
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=tuple(
                    build(topic_type, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, transaction_states=tuple(out))


def _when(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


@handles(66, 0, 1)
def handle_list_transactions(
    ctx: RequestContext, request: req.ListTransactions
) -> resp.ListTransactions:
    response_type: type[resp.ListTransactions] = ctx.response_type
    coordinator = ctx.broker.transactions
    known: list[TxnState] = []
    unknown: list[str] = []
    for label in request.state_filters:
        state = STATE_BY_LABEL.get(label)
        if state is None:
            unknown.append(label)
        else:
            known.append(state)
    found = []
    if not unknown or known:
        found = coordinator.list_transactions(
            known,
            [int(p) for p in request.producer_id_filters],
            int(getattr(request, "duration_filter", -1)),
        )
        found = [
            meta
            for meta in found
            if authz.allowed(ctx, authz.Op.DESCRIBE, authz.TRANSACTIONAL_ID, meta.transactional_id)
        ]
    state_type = nested(response_type, "TransactionState")
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            build(
                state_type,
                transactional_id=meta.transactional_id,
                producer_id=meta.producer_id,
                transaction_state=meta.state.label,
            )
            for meta in found
        ),
    )


# DescribeProducers ----------------------------------------------------------------------


@handles(61, 0, 0)
def handle_describe_producers(
    ctx: RequestContext, request: req.DescribeProducers
) -> resp.DescribeProducers:
    response_type: type[resp.DescribeProducers] = ctx.response_type
    state = ctx.broker.state
    topic_type = nested(response_type, "TopicResponse")
    partition_type = nested(response_type, "PartitionResponse")
    producer_type = nested(response_type, "ProducerState")
    topics = []
    for topic in request.topics:
        meta = state.topic(topic.name)
        partitions = []
        for wire_index in topic.partition_indexes:
            index = int(wire_index)
            partition_log = state.partition_log(topic.name, index)
            if not authz.allowed(ctx, authz.Op.READ, authz.TOPIC, topic.name):
                error, producers = ErrorCode.topic_authorization_failed, ()
            elif meta is None or index not in meta.states:
                error, producers = ErrorCode.unknown_topic_or_partition, ()
            elif meta.leader_of(index) != ctx.broker.node_id or partition_log is None:
                error, producers = ErrorCode.not_leader_or_follower, ()
            else:
                error = ErrorCode.none
                producers = tuple(
                    build(
                        producer_type,
                        producer_id=p.producer_id,
                        producer_epoch=p.producer_epoch,
                        last_sequence=p.last_sequence,
                        last_timestamp=p.last_timestamp,
                        coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_start_offset,
                    )
                    for p in partition_log.producer_states()
                )
            partitions.append(
                build(
                    partition_type,
                    partition_index=index,
                    error_code=error,
                    error_message=None,
                    active_producers=producers,
                )
            )
        topics.append(build(topic_type, name=topic.name, partitions=tuple(partitions)))
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))
