"""Metadata (key 3), versions 0-13.

Answers from this node's copy of the cluster metadata: the live brokers (registered
and unfenced, with their racks), the cluster id, the controller (cluster_view), and
each topic with its UUID topic id and its partitions (leader, leader epoch, replicas,
ISR, and the replicas on brokers that are not live as offline). A partition whose
leader is not live has no leader (LEADER_NOT_AVAILABLE).

A request for a missing topic creates it through the active controller when
``auto.create.topics.enable`` is true and the request allows it (v4+), as Kafka
does; the answer waits (bounded) until the topic shows here, so it comes back ready
rather than LEADER_NOT_AVAILABLE. An illegal name gets
INVALID_TOPIC_EXCEPTION, a missing one UNKNOWN_TOPIC_OR_PARTITION, an
unknown topic id (v10+) UNKNOWN_TOPIC_ID. Topic and cluster authorized operations
(v8+) are filled in when asked for (from the ACLs when an authorizer is configured).

Authorization (``authz``): the topics of an all-topics request are those the principal
may DESCRIBE; a named topic it may not describe is TOPIC_AUTHORIZATION_FAILED; auto-
creation needs CREATE on the cluster or the topic.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.create_topics.v7 import response as create_topics_response
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from strom.broker.access import authz
from strom.broker.common import (
    CLUSTER_OPERATIONS,
    NO_THROTTLE,
    TOPIC_OPERATIONS,
    ZERO_UUID,
)
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.cluster_view import controller_id, live_brokers
from strom.broker.network.router import RequestContext, handles
from strom.cluster.metadata import InvalidTopicError, validate_topic_name
from strom.cluster.node_state import TopicView
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

log = logging.getLogger(__name__)

AUTO_CREATE_TIMEOUT_S = 5.0


@handles(3, 0, 13)
def handle_metadata(
    ctx: RequestContext, request: req.Metadata
) -> resp.Metadata | Awaitable[resp.Metadata]:
    broker = ctx.broker
    state = broker.state
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        return _answer(ctx, request, [])
    allow_create = (
        getattr(request, "allow_auto_topic_creation", True)
        and broker.config["auto.create.topics.enable"]
    )
    missing: list[str] = []
    for entry in requested:
        name = entry.name
        if not name or name in state.topics:
            continue
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            continue
        if allow_create and _may_create(ctx, name):
            missing.append(name)
    if not missing:
        return _answer(ctx, request, [])
    return _create_then_answer(ctx, request, missing)


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic."""
    return authz.cluster_allowed(ctx, authz.Op.CREATE) or authz.allowed(
        ctx, authz.Op.CREATE, authz.TOPIC, name
    )


async def _create_then_answer(
    ctx: RequestContext, request: req.Metadata, names: list[str]
) -> resp.Metadata:
    """Auto-create through the active controller, then answer (LEADER_NOT_AVAILABLE for
    a topic not yet seen here, which clients retry)."""
    broker = ctx.broker
    create = create_topics.CreateTopicsRequest(
        topics=tuple(
            create_topics.CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                assignments=(),
                configs=(),
            )
            for name in dict.fromkeys(names)
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=AUTO_CREATE_TIMEOUT_S)),
        validate_only=False,
    )
    try:
        response: create_topics_response.CreateTopicsResponse = (
            await broker.controller_channel.forward(ctx, create)
        )
    except ControllerUnavailable:
        return _answer(ctx, request, names)
    created = [t.name for t in response.topics if t.error_code == ErrorCode.none]
    for name in created:
        log.info("auto-created topic %s for %s", name, ctx.peer)
    state = broker.state
    await broker.wait_for_metadata(
        lambda: all(n in state.topics for n in created), AUTO_CREATE_TIMEOUT_S
    )
    return _answer(ctx, request, names)


def _answer(ctx: RequestContext, request: Any, creating: list[str]) -> resp.Metadata:
    response_type: type[resp.Metadata] = ctx.response_type
    broker = ctx.broker
    state = broker.state
    topic_type = nested(response_type, "MetadataResponseTopic")
    partition_type = nested(response_type, "MetadataResponsePartition")
    broker_type = nested(response_type, "MetadataResponseBroker")
    want_operations = getattr(request, "include_topic_authorized_operations", False)
    authorizer = authz.authorizer_of(broker)
    if authorizer is None:

        def may_describe(name: str) -> bool:
            return True
    else:

        def may_describe(name: str) -> bool:
            return authz.allowed(ctx, authz.Op.DESCRIBE, authz.TOPIC, name)

    brokers = live_brokers(broker, listener=ctx.listener)
    live = {b.node_id for b in brokers}

    def describe(topic: TopicView) -> Any:
        partitions = []
        for index in sorted(topic.states):
            partition = topic.states[index]
            leader = partition.leader
            partitions.append(
                build(
                    partition_type,
                    error_code=ErrorCode.none if leader in live else ErrorCode.leader_not_available,
                    partition_index=index,
                    leader_id=leader if leader in live else -1,
                    leader_epoch=partition.leader_epoch,
                    replica_nodes=partition.replicas,
                    isr_nodes=partition.isr,
                    offline_replicas=tuple(r for r in partition.replicas if r not in live),
                )
            )
        return build(
            topic_type,
            error_code=ErrorCode.none,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.is_internal,
            partitions=tuple(partitions),
            topic_authorized_operations=authz.operations(
                ctx, authz.TOPIC, topic.name, TOPIC_OPERATIONS, want_operations
            ),
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
        topics = [describe(t) for t in state.topics.values() if may_describe(t.name)]
    else:
        topics = []
        for entry in requested:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            if not name and topic_id is not None and topic_id != ZERO_UUID:
                meta = state.by_id.get(topic_id)
                if meta is not None and not may_describe(meta.name):
                    topics.append(failed(ErrorCode.topic_authorization_failed, None, topic_id))
                    continue
                topics.append(
                    describe(meta) if meta else failed(ErrorCode.unknown_topic_id, None, topic_id)
                )
                continue
            if not may_describe(name) and not (name in creating and _may_create(ctx, name)):
                topics.append(failed(ErrorCode.topic_authorization_failed, name))
                continue
            meta = state.topic(name)
            if meta is not None:
                topics.append(describe(meta))
                continue
            try:
                validate_topic_name(name or "")
            except InvalidTopicError:
                topics.append(failed(ErrorCode.invalid_topic_exception, name))
                continue
            if name in creating:
                topics.append(failed(ErrorCode.leader_not_available, name))
            else:
                topics.append(failed(ErrorCode.unknown_topic_or_partition, name))
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        brokers=tuple(
            build(broker_type, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in brokers
        ),
        cluster_id=broker.cluster_id,
        controller_id=controller_id(broker),
        topics=tuple(topics),
        cluster_authorized_operations=authz.operations(
            ctx,
            authz.CLUSTER,
            CLUSTER_NAME,
            CLUSTER_OPERATIONS,
            getattr(request, "include_cluster_authorized_operations", False),
        ),
        error_code=ErrorCode.none,
    )
