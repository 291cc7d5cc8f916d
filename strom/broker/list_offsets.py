"""ListOffsets (key 2), versions 1-10.

Special timestamps: -2 earliest (log start offset), -1 latest (the high watermark;
the last stable offset for isolation_level=read_committed), -3 max timestamp (KIP-734: the
offset and timestamp of the first record holding the largest timestamp), -4 earliest
local (same as earliest: no tiered storage). A timestamp >= 0 finds the first
record whose timestamp is >= it, or -1/-1 if none. Both answer per record, as Kafka
does: the indexes lead to one batch and only that batch's records are decoded.
Needs DESCRIBE on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


@handles(2, 1, 10)
def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
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
        meta = None if denied else controller.topic(topic.name)
        partitions = []
        for p in topic.partitions:
            error = ErrorCode.none
            offset = timestamp = -1
            partition_log = (
                controller.partition_log(topic.name, p.partition_index) if meta else None
            )
            if denied:
                error = ErrorCode.topic_authorization_failed
            elif partition_log is None:
                error = ErrorCode.unknown_topic_or_partition
            elif not controller.leads(topic.name, p.partition_index):
                error = ErrorCode.not_leader_or_follower
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
                    leader_epoch=meta.leader_epoch_of(p.partition_index) if meta else -1,
                )
            )
        topics.append(build(topic_type, name=topic.name, partitions=tuple(partitions)))
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))
