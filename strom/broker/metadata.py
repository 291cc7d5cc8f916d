"""Metadata (key 3), versions 0-13.

Answers with this node as the only broker (advertised listener), the cluster
id, this node as controller, and each topic with its UUID topic id and its
partitions (leader, leader epoch, replicas and ISR all this node).

A request for a missing topic creates it with ``num.partitions`` when
``auto.create.topics.enable`` is true and the request allows it (v4+), as
Kafka does; the topic is created before the response is built, so it comes
back ready rather than LEADER_NOT_AVAILABLE. An illegal name gets
INVALID_TOPIC_EXCEPTION, a missing one UNKNOWN_TOPIC_OR_PARTITION, an
unknown topic id (v10+) UNKNOWN_TOPIC_ID. Topic and cluster authorized operations
(v8+) are filled in when asked for.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker.common import (
    CLUSTER_OPERATIONS,
    NO_THROTTLE,
    TOPIC_OPERATIONS,
    ZERO_UUID,
    authorized_operations,
)
from strom.broker.router import RequestContext, handles
from strom.cluster.metadata import InvalidTopicError, TopicMetadata, validate_topic_name
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

log = logging.getLogger(__name__)


@handles(3, 0, 13)
def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    controller = broker.controller
    response_type = ctx.response_type
    topic_type = nested(response_type, "MetadataResponseTopic")
    partition_type = nested(response_type, "MetadataResponsePartition")
    broker_type = nested(response_type, "MetadataResponseBroker")
    node = broker.node_id
    topic_operations = authorized_operations(
        TOPIC_OPERATIONS, getattr(request, "include_topic_authorized_operations", False)
    )

    def describe(topic: TopicMetadata) -> Any:
        return build(
            topic_type,
            error_code=ErrorCode.none,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.is_internal,
            partitions=tuple(
                build(
                    partition_type,
                    error_code=ErrorCode.none,
                    partition_index=p,
                    leader_id=node,
                    leader_epoch=topic.leader_epoch,
                    replica_nodes=(node,),
                    isr_nodes=(node,),
                    offline_replicas=(),
                )
                for p in range(topic.partitions)
            ),
            topic_authorized_operations=topic_operations,
        )

    def failed(error: ErrorCode, name: str | None, topic_id: Any = None) -> Any:
        return build(
            topic_type,
            error_code=error,
            name=name,
            topic_id=topic_id or ZERO_UUID,
            is_internal=False,
            partitions=(),
        )

    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [describe(t) for t in controller.metadata.topics.values()]
    else:
        allow_create = (
            getattr(request, "allow_auto_topic_creation", True)
            and broker.config["auto.create.topics.enable"]
        )
        topics = []
        for entry in requested:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                meta = controller.metadata.by_id.get(topic_id)
                topics.append(
                    describe(meta) if meta else failed(ErrorCode.unknown_topic_id, None, topic_id)
                )
                continue
            meta = controller.topic(name)
            if meta is not None:
                topics.append(describe(meta))
                continue
            try:
                validate_topic_name(name or "")
            except InvalidTopicError:
                topics.append(failed(ErrorCode.invalid_topic_exception, name))
                continue
            if not allow_create:
                topics.append(failed(ErrorCode.unknown_topic_or_partition, name))
                continue
            try:
                meta = controller.create_topic(name, -1)
            except InvalidTopicError:
                topics.append(failed(ErrorCode.invalid_topic_exception, name))
                continue
            log.info("auto-created topic %s for %s", name, ctx.peer)
            topics.append(describe(meta))
    host, port = broker.advertised_endpoint()
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        brokers=(build(broker_type, node_id=node, host=host, port=port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=tuple(topics),
        cluster_authorized_operations=authorized_operations(
            CLUSTER_OPERATIONS, getattr(request, "include_cluster_authorized_operations", False)
        ),
        error_code=ErrorCode.none,
    )
