"""OffsetForLeaderEpoch (key 23), versions 0-4 (KIP-101, KIP-279, KIP-320).

For each partition: the largest leader epoch this leader's log knows that is at most
the requested one, and where it ends (the start of the next epoch, or the log end for
the latest), from the log's leader epoch cache. Clients use it to check, after a
leader change, that their position is still on the log (KIP-320); a follower may use
it to find where to truncate. Only the leader answers (NOT_LEADER_OR_FOLLOWER); a
``current_leader_epoch`` other than the leader's gets FENCED_LEADER_EPOCH (older) or
UNKNOWN_LEADER_EPOCH (newer). As Kafka does, an epoch below every one the log knows
answers itself and the first epoch's start offset; one above every known epoch
answers epoch -1 and offset -1 (UNDEFINED). Needs CLUSTER_ACTION on the cluster or
DESCRIBE on the topic (TOPIC_AUTHORIZATION_FAILED), whoever asks, as Kafka checks it.
Versions 0-1 carry no current leader epoch (nothing is fenced) and v0's answer has no
leader epoch, only the end offset.
"""

from __future__ import annotations

from typing import Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.network.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested


# Any for request and answer: OffsetForLeaderEpoch v0-1 are built at run time (legacy_versions)
@handles(23, 0, 4)
def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    state = ctx.broker.state
    response_type = ctx.response_type
    topic_type = nested(response_type, "OffsetForLeaderTopicResult")
    partition_type = nested(response_type, "EpochEndOffset")
    topics = []
    names = {t.topic for t in request.topics}
    allowed = names
    # As Kafka: CLUSTER_ACTION (what brokers hold, and all v0-2 asked for) allows every
    # topic, else DESCRIBE per topic (KIP-320's consumers); v0-2 carry no replica id.
    if authz.authorizer_of(ctx.broker) is not None and not authz.cluster_allowed(
        ctx, authz.Op.CLUSTER_ACTION
    ):
        allowed = authz.filter_allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, names)
    for topic in request.topics:
        view = state.topic(topic.topic)
        partitions = []
        for p in topic.partitions:
            current = getattr(p, "current_leader_epoch", -1)  # v2+
            error, epoch, end = ErrorCode.none, -1, -1
            partition_log = state.partition_log(topic.topic, p.partition)
            if topic.topic not in allowed:
                error = ErrorCode.topic_authorization_failed
            elif view is None or p.partition not in view.states or partition_log is None:
                error = ErrorCode.unknown_topic_or_partition
            elif view.leader_of(p.partition) != ctx.broker.node_id:
                error = ErrorCode.not_leader_or_follower
            elif 0 <= current < view.leader_epoch_of(p.partition):
                error = ErrorCode.fenced_leader_epoch
            elif current > view.leader_epoch_of(p.partition):
                error = ErrorCode.unknown_leader_epoch
            else:
                epoch, end = partition_log.end_offset_for_epoch(p.leader_epoch)
            partitions.append(
                build(
                    partition_type,
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(build(topic_type, topic=topic.topic, partitions=tuple(partitions)))
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))
