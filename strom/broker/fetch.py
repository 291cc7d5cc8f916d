"""Fetch (key 1), versions 4-17.

Serves stored batch bytes as they are: each partition's data starts with the
whole batch that holds the fetch offset and continues with whole batches up to
the partition's ``partition_max_bytes`` and the request's ``max_bytes``; the
first partition with data always gets at least one whole batch, however large,
as Kafka does, so a consumer never stalls on a big batch. Nothing at or above
the high watermark is returned. Topics are named up to v12 and identified by
topic id from v13 (UNKNOWN_TOPIC_ID for an id the broker does not know).

Long polling: when less than ``min_bytes`` is available the request waits in
the purgatory until a produce to one of its partitions, or ``max_wait_ms``.

Fetch sessions (KIP-227): every response carries session id 0, which tells the
client that the broker keeps no session, so clients send full fetch requests;
that is correct for every client, only less compact on the wire. Last stable
offset equals the high watermark until transactions arrive.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from strom.broker.common import NO_THROTTLE, resolve_topic
from strom.broker.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.storage.errors import OffsetOutOfRangeError


@dataclass(slots=True)
class _Wanted:
    """One partition a fetch asks for, resolved against the metadata."""

    name: str | None
    topic_id: uuid.UUID | None
    partition: int
    offset: int
    max_bytes: int
    known: bool


_WantedTopic = tuple[str | None, uuid.UUID | None, list[_Wanted]]


@handles(1, 4, 17)
def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    wanted: list[_WantedTopic] = []
    for topic in request.topics:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        meta = resolve_topic(controller, name, topic_id)
        if meta is not None and name is None:
            name_for_read = meta.name
        else:
            name_for_read = name
        entries = [
            _Wanted(
                name_for_read,
                topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                meta is not None,
            )
            for p in topic.partitions
        ]
        wanted.append((name, topic_id, entries))
    response, size, has_error = _read(ctx, request, wanted)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    if size >= request.min_bytes or max_wait_ms <= 0 or has_error or not wanted:
        return response
    return _long_poll(ctx, request, wanted, max_wait_ms)


async def _long_poll(
    ctx: RequestContext, request: Any, wanted: list[_WantedTopic], max_wait_ms: int
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
        response, size, has_error = _read(ctx, request, wanted)
        if size >= request.min_bytes or has_error:
            return response
        if not await purgatory.wait(keys, remaining):
            break
    return _read(ctx, request, wanted)[0]


def _read(ctx: RequestContext, request: Any, wanted: list[_WantedTopic]) -> tuple[Any, int, bool]:
    controller = ctx.broker.controller
    response_type = ctx.response_type
    topic_type = nested(response_type, "FetchableTopicResponse")
    partition_type = nested(response_type, "PartitionData")
    read_committed = getattr(request, "isolation_level", 0) == 1
    aborted = () if read_committed else None
    budget = request.max_bytes
    total = 0
    has_error = False
    topics = []
    for name, topic_id, entries in wanted:
        partitions = []
        for w in entries:
            error = ErrorCode.none
            records = b""
            high_watermark = last_stable = log_start = -1
            partition_log = controller.partition_log(w.name, w.partition) if w.known else None
            if partition_log is None:
                if w.known:
                    error = ErrorCode.unknown_topic_or_partition
                elif w.name is None and w.topic_id is not None:
                    error = ErrorCode.unknown_topic_id
                else:
                    error = ErrorCode.unknown_topic_or_partition
            elif not controller.leads(partition_log.topic, w.partition):
                error = ErrorCode.not_leader_or_follower
            else:
                high_watermark = partition_log.high_watermark
                last_stable = high_watermark
                log_start = partition_log.log_start_offset
                limit = min(w.max_bytes, budget)
                if w.offset < log_start or w.offset > partition_log.log_end_offset:
                    error = ErrorCode.offset_out_of_range
                elif w.offset < high_watermark and (limit > 0 or total == 0):
                    try:
                        records = partition_log.read(
                            w.offset, max(limit, 1), upper_bound=high_watermark
                        )
                    except OffsetOutOfRangeError:
                        error = ErrorCode.offset_out_of_range
                    if total and len(records) > limit:
                        records = b""  # only the first partition may exceed its limits
            if error != ErrorCode.none:
                has_error = True
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
                )
            )
        topics.append(
            build(topic_type, topic=name, topic_id=topic_id, partitions=tuple(partitions))
        )
    response = build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(topics),
    )
    return response, total, has_error
