"""ListOffsets (key 2), versions 0-10.

Special timestamps: -2 earliest (log start offset), -1 latest (the high watermark;
the last stable offset for isolation_level=read_committed), -3 max timestamp (KIP-734: the
offset and timestamp of the first record holding the largest timestamp), -4 earliest
local (same as earliest: no tiered storage). A timestamp >= 0 finds the first
record whose timestamp is >= it, or -1/-1 if none. Both answer per record, as Kafka
does: the indexes lead to one batch and only that batch's records are decoded.
Needs DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).

Version 0 answers up to ``max_num_offsets`` offsets per partition, newest first, as
Kafka's legacy lookup does: the candidates are each segment's base offset (at least
the log start offset) stamped with its file's modification time, plus the log end
offset stamped now when the active segment holds data; -1 (latest) starts from the
last candidate, -2 (earliest) from the first, a timestamp from the last candidate
stamped at or before it; for a consumer (replica id -1) offsets above the high
watermark are replaced by the high watermark. Other negative timestamps are
UNSUPPORTED_VERSION for that partition.
"""

from __future__ import annotations

import time
from typing import Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


CONSUMER_REPLICA_ID = -1


# Any for request and answer: ListOffsets v0 is built at run time (legacy_versions)
@handles(2, 0, 10)
def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    node_state = ctx.broker.state
    response_type = ctx.response_type
    topic_type = nested(response_type, "ListOffsetsTopicResponse")
    partition_type = nested(response_type, "ListOffsetsPartitionResponse")
    read_committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    names = {t.name for t in request.topics}
    described = names
    if authz.authorizer_of(ctx.broker) is not None:
        described = authz.filter_allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, names)
    for topic in request.topics:
        denied = topic.name not in described
        meta = None if denied else node_state.topic(topic.name)
        partitions = []
        for p in topic.partitions:
            error = ErrorCode.none
            offset = timestamp = -1
            old_style: tuple[int, ...] = ()
            partition_log = (
                node_state.partition_log(topic.name, p.partition_index) if meta else None
            )
            if denied:
                error = ErrorCode.topic_authorization_failed
            elif partition_log is None:
                error = ErrorCode.unknown_topic_or_partition
            elif not node_state.leads(topic.name, p.partition_index):
                error = ErrorCode.not_leader_or_follower
            elif ctx.api_version == 0:
                if p.timestamp < EARLIEST:
                    error = ErrorCode.unsupported_version
                else:
                    old_style = _old_style_offsets(
                        partition_log,
                        p.timestamp,
                        p.max_num_offsets,
                        request.replica_id == CONSUMER_REPLICA_ID,
                    )
            elif p.timestamp in (EARLIEST, EARLIEST_LOCAL):
                offset = partition_log.log_start_offset
            elif p.timestamp == LATEST:
                offset = (
                    partition_log.last_stable_offset
                    if read_committed
                    else partition_log.high_watermark
                )
            elif p.timestamp == MAX_TIMESTAMP:
                offset, timestamp = partition_log.max_timestamp()
            elif p.timestamp >= 0:
                found = partition_log.offset_for_timestamp(p.timestamp)
                if found is not None and found[0] < partition_log.high_watermark:
                    offset, timestamp = found
            else:
                error = ErrorCode.invalid_request
            partitions.append(
                build(
                    partition_type,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    old_style_offsets=old_style,
                    leader_epoch=meta.leader_epoch_of(p.partition_index) if meta else -1,
                )
            )
        topics.append(build(topic_type, name=topic.name, partitions=tuple(partitions)))
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _old_style_offsets(
    partition_log: Any, timestamp: int, max_num_offsets: int, from_consumer: bool
) -> tuple[int, ...]:
    """Version 0's answer: up to ``max_num_offsets`` offsets, newest first."""
    segments = [*partition_log.closed_segments(), partition_log.active_segment]
    start = partition_log.log_start_offset
    candidates = [(max(s.base_offset, start), s.last_modified_ms()) for s in segments]
    if segments[-1].size > 0:
        candidates.append((partition_log.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        first = len(candidates) - 1
    elif timestamp == EARLIEST:
        first = 0
    else:
        first = len(candidates) - 1
        while first >= 0 and candidates[first][1] > timestamp:
            first -= 1
    count = max(0, min(max_num_offsets, first + 1))
    offsets = sorted((candidates[first - j][0] for j in range(count)), reverse=True)
    if from_consumer:
        high_watermark = partition_log.high_watermark
        if any(o > high_watermark for o in offsets):
            offsets = [high_watermark, *(o for o in offsets if o <= high_watermark)]
    return tuple(offsets)
