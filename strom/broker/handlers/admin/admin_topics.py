"""Topic administration: CreateTopics (19) v0-7, DeleteTopics (20) v0-6,
CreatePartitions (37) v0-3, DeleteRecords (21) v0-2.

CreateTopics, DeleteTopics and CreatePartitions are forwarded as they came to the
active controller (controller_channel; the rules are the controller's, see
controller_handlers and strom.cluster.quorum_controller), and answered with its reply
once this broker's own metadata shows the change (bounded by FORWARD_WAIT_S). With no
controller reachable in time every entry gets REQUEST_TIMED_OUT. DeleteRecords moves
the log start offset and drops whole segments below it; an offset above the high
watermark is OFFSET_OUT_OF_RANGE, and -1 means the high watermark.

Authorization (``authz``): CreateTopics needs CREATE on the cluster or the topic,
DeleteTopics DELETE, CreatePartitions ALTER and DeleteRecords DELETE on the topic; the
topics refused are answered TOPIC_AUTHORIZATION_FAILED and the rest forwarded.

Controller mutation quota (KIP-599, ``controller_mutation_rate``): each topic allowed
takes its partitions (created, deleted, or added) from the client's bucket, in request
order. CreateTopics v6+, DeleteTopics v5+ and CreatePartitions v3+ are strict: once the
bucket is empty the remaining topics get THROTTLING_QUOTA_EXCEEDED, which clients retry
after the throttle time; older versions are always taken and the response throttled.
A validate-only request takes nothing. CreateTopics v0 has no validate_only (it
creates) and no error messages; v0-1 of both have no throttle time in the answer
(the connection is still muted for it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from kio.static.protocol import ResponsePayload

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE, ZERO_UUID
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

log = logging.getLogger(__name__)


# The answer of CreateTopics, DeleteTopics or CreatePartitions, which _admitted builds
# alike (kio's class, or for the versions kio lacks one built at run time).
_Answer = TypeVar("_Answer", bound=ResponsePayload)

FORWARD_WAIT_S = 5.0  # how long a broker waits to see a committed change itself


def _unavailable(ctx: RequestContext, request: Any, exc: ControllerUnavailable) -> None:
    log.warning("%s from %s: %s", type(request).__name__, ctx.peer, exc)


async def _forward(ctx: RequestContext, request: Any, visible: Any) -> Any:
    """The active controller's answer; then wait (bounded) until this broker's own
    metadata shows the change, so the client's next request here sees it."""
    broker = ctx.broker
    response = await broker.controller_channel.forward(ctx, request)
    await broker.wait_for_metadata(lambda: visible(response), FORWARD_WAIT_S)
    return response


# Any for request and answer: CreateTopics v0-1 are built at run time (legacy_versions)
@handles(19, 0, 7)
def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    state = ctx.broker.state
    validate_only = getattr(request, "validate_only", False)  # v1+

    def visible(response: Any) -> bool:
        return all(
            t.error_code != ErrorCode.none or validate_only or t.name in state.topics
            for t in response.topics
        )

    def denied(name: str) -> bool:
        return not may_create and not authz.allowed(ctx, authz.Op.CREATE, authz.TOPIC, name)

    def partitions(topic: Any) -> int:
        if validate_only:
            return 0
        if topic.num_partitions > 0:
            return int(topic.num_partitions)
        return len(topic.assignments) or int(ctx.broker.config["num.partitions"])

    may_create = authz.cluster_allowed(ctx, authz.Op.CREATE)
    return _admitted(
        ctx,
        ctx.response_type,
        request,
        visible,
        "topics",
        "CreatableTopicResult",
        denied,
        partitions,
        strict_from=6,
    )


# Any for request and answer: DeleteTopics v0 is built at run time (legacy_versions)
@handles(20, 0, 6)
def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    state = ctx.broker.state

    def visible(response: Any) -> bool:
        return all(
            t.error_code != ErrorCode.none or t.name not in state.topics for t in response.responses
        )

    def denied(name: str) -> bool:
        return not authz.allowed(ctx, authz.Op.DELETE, authz.TOPIC, name)

    def partitions(topic: Any) -> int:
        known = state.topics.get(_item_name(topic))
        return known.partitions if known is not None else 0

    return _admitted(
        ctx,
        ctx.response_type,
        request,
        visible,
        "responses",
        "DeletableTopicResult",
        denied,
        partitions,
        strict_from=5,
    )


@handles(37, 0, 3)
def handle_create_partitions(
    ctx: RequestContext, request: req.CreatePartitions
) -> resp.CreatePartitions | Awaitable[resp.CreatePartitions]:
    response_type: type[resp.CreatePartitions] = ctx.response_type
    state = ctx.broker.state
    wanted = {t.name: t.count for t in request.topics}

    def visible(response: Any) -> bool:
        return request.validate_only or all(
            r.error_code != ErrorCode.none
            or (r.name in state.topics and state.topics[r.name].partitions >= wanted[r.name])
            for r in response.results
        )

    def denied(name: str) -> bool:
        return not authz.allowed(ctx, authz.Op.ALTER, authz.TOPIC, name)

    def partitions(topic: Any) -> int:
        known = state.topics.get(topic.name)
        if request.validate_only or known is None:
            return 0
        return max(0, int(topic.count) - known.partitions)

    return _admitted(
        ctx,
        response_type,
        request,
        visible,
        "results",
        "CreatePartitionsTopicResult",
        denied,
        partitions,
        strict_from=3,
    )


def _item_name(item: Any) -> str:
    return item if isinstance(item, str) else (item.name or "")


AUTHORIZATION_FAILED = (ErrorCode.topic_authorization_failed, "Topic authorization failed.")
QUOTA_EXCEEDED = (ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")


async def _admitted(
    ctx: RequestContext,
    response_type: type[_Answer],
    request: Any,
    visible: Any,
    field: str,
    entry: str,
    denied: Callable[[str], bool],
    partitions: Callable[[Any], int],
    strict_from: int,
) -> _Answer:
    """Forward the topics the ACLs allow and the mutation quota admits; the others are
    TOPIC_AUTHORIZATION_FAILED or THROTTLING_QUOTA_EXCEEDED."""
    authorizing = authz.authorizer_of(ctx.broker) is not None
    if not authorizing and not ctx.broker.state.image.client_quotas:
        return await _answered(ctx, response_type, request, visible, field, entry)
    items_field = "topic_names" if getattr(request, "topic_names", None) else "topics"
    items = getattr(request, items_field)
    refused: dict[str, tuple[ErrorCode, str]] = {}
    quotas = ctx.broker.client_quotas
    strict = ctx.api_version >= strict_from
    for item in items:
        name = _item_name(item)
        if authorizing and denied(name):
            refused[name] = AUTHORIZATION_FAILED
        elif not quotas.admit_mutation(ctx, partitions(item), strict):
            refused[name] = QUOTA_EXCEEDED
    kept = tuple(i for i in items if _item_name(i) not in refused)
    results: dict[str, Any] = {}
    if kept:
        response = await _answered(
            ctx,
            response_type,
            dataclasses.replace(request, **{items_field: kept}),
            visible,
            field,
            entry,
        )
        results = {r.name: r for r in getattr(response, field)}
    else:
        response = build(response_type, throttle_time=NO_THROTTLE, **{field: ()})
    entry_type = nested(response_type, entry)
    out = []
    for item in items:
        name = _item_name(item)
        if name in refused:
            code, message = refused[name]
            topic_id = getattr(item, "topic_id", None) or ZERO_UUID
            refusal = build(
                entry_type,
                name=name,
                topic_id=topic_id,
                error_code=code,
                error_message=message,
                num_partitions=-1,
                replication_factor=-1,
                configs=(),
            )
            out.append(refusal)
        elif name in results:
            out.append(results[name])
    return dataclasses.replace(response, **{field: tuple(out)})


async def _answered(
    ctx: RequestContext,
    response_type: type[_Answer],
    request: Any,
    visible: Any,
    field: str,
    entry: str,
) -> _Answer:
    try:
        answer: _Answer = await _forward(ctx, request, visible)
        return answer
    except ControllerUnavailable as exc:
        _unavailable(ctx, request, exc)
    # Every entry gets REQUEST_TIMED_OUT, which clients may retry.
    entry_type = nested(response_type, entry)
    entries = []
    # DeleteTopics before v6 names its topics in topic_names.
    items: Iterable[Any] = (
        getattr(request, "topics", None) or getattr(request, "topic_names", None) or ()
    )
    for item in items:
        name = item if isinstance(item, str) else item.name
        values = {"name": name, "error_code": ErrorCode.request_timed_out}
        values["error_message"] = "No active controller answered in time."
        entries.append(build(entry_type, **values))
    return build(response_type, throttle_time=NO_THROTTLE, **{field: tuple(entries)})


@handles(21, 0, 2)
def handle_delete_records(ctx: RequestContext, request: req.DeleteRecords) -> resp.DeleteRecords:
    response_type: type[resp.DeleteRecords] = ctx.response_type
    node_state = ctx.broker.state
    topic_type = nested(response_type, "DeleteRecordsTopicResult")
    partition_type = nested(response_type, "DeleteRecordsPartitionResult")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error = ErrorCode.none
            low = -1
            partition_log = node_state.partition_log(topic.name, p.partition_index)
            if not authz.allowed(ctx, authz.Op.DELETE, authz.TOPIC, topic.name):
                error = ErrorCode.topic_authorization_failed
            elif partition_log is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                target = partition_log.high_watermark if p.offset == -1 else p.offset
                try:
                    if target < 0:
                        raise OffsetOutOfRangeError(f"offset {p.offset}")
                    low = partition_log.delete_records_before(target)
                except OffsetOutOfRangeError:
                    error = ErrorCode.offset_out_of_range
            partitions.append(
                build(
                    partition_type,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=error,
                )
            )
        topics.append(build(topic_type, name=topic.name, partitions=tuple(partitions)))
    node_state.logs.checkpoint()  # a moved log start offset must survive a crash
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))
