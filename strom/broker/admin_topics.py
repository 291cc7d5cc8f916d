"""Topic administration: CreateTopics (19) v2-7, DeleteTopics (20) v1-6,
CreatePartitions (37) v0-3, DeleteRecords (21) v0-2.

CreateTopics follows Kafka's rules for names (INVALID_TOPIC_EXCEPTION, and
names that collide on '.' versus '_'), TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR (above 1 on this single node), INVALID_CONFIG for an
unknown key or bad value, and ``validate_only``. Explicit replica assignments
are accepted when they name this node only. DeleteTopics takes names or (v6)
topic ids. DeleteRecords moves the log start offset and drops whole segments
below it; an offset above the high watermark is OFFSET_OUT_OF_RANGE, and -1
means the high watermark.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker.common import NO_THROTTLE, ZERO_UUID, resolve_topic
from strom.broker.router import RequestContext, handles
from strom.cluster.controller import InvalidPartitionsError, InvalidReplicationFactorError
from strom.cluster.metadata import InvalidTopicError, TopicExistsError
from strom.config import ConfigError, effective_topic_configs, render
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested, nested_if_any
from strom.storage.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)


def _create_error(exc: Exception) -> ErrorCode:
    if isinstance(exc, TopicExistsError):
        return ErrorCode.topic_already_exists
    if isinstance(exc, InvalidTopicError):
        return ErrorCode.invalid_topic_exception
    if isinstance(exc, InvalidPartitionsError):
        return ErrorCode.invalid_partitions
    if isinstance(exc, InvalidReplicationFactorError):
        return ErrorCode.invalid_replication_factor
    if isinstance(exc, ConfigError):
        return ErrorCode.invalid_config
    return ErrorCode.invalid_request


@handles(19, 2, 7)
def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    node = ctx.broker.node_id
    response_type = ctx.response_type
    result_type = nested(response_type, "CreatableTopicResult")
    config_type = nested_if_any(response_type, "CreatableTopicConfigs")
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        error = ErrorCode.none
        message = None
        partitions = topic.num_partitions
        replication = topic.replication_factor
        topic_id = ZERO_UUID
        configs_out: tuple[Any, ...] | None = None
        overrides = {c.name: c.value for c in topic.configs}
        try:
            if topic.name in seen:
                raise InvalidTopicError(f"Duplicate topic {topic.name} in the request")
            seen.add(topic.name)
            if topic.assignments:
                if partitions != -1 or replication != -1:
                    raise InvalidPartitionsError(
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time."
                    )
                for assignment in topic.assignments:
                    if tuple(assignment.broker_ids) != (node,):
                        raise InvalidReplicationFactorError(
                            f"Replica assignment {list(assignment.broker_ids)} names brokers "
                            f"other than {node}"
                        )
                partitions, replication = len(topic.assignments), 1
            partitions, overrides = controller.validate_new_topic(
                topic.name, partitions, replication, overrides
            )
            replication = 1
            if not request.validate_only:
                topic_id = controller.create_topic(topic.name, partitions, overrides).topic_id
            configs_out = (
                None
                if config_type is None
                else tuple(
                    build(
                        config_type,
                        name=key,
                        value=render(value),
                        read_only=False,
                        config_source=source,
                        is_sensitive=False,
                    )
                    for key, (value, source) in sorted(
                        effective_topic_configs(ctx.broker.config, overrides).items()
                    )
                )
            )
        except (
            TopicExistsError,
            InvalidTopicError,
            InvalidPartitionsError,
            InvalidReplicationFactorError,
            ConfigError,
        ) as exc:
            error = _create_error(exc)
            message = str(exc)
            partitions = replication = -1
        results.append(
            build(
                result_type,
                name=topic.name,
                topic_id=topic_id,
                error_code=error,
                error_message=message,
                num_partitions=partitions,
                replication_factor=replication,
                configs=configs_out,
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(results))


@handles(20, 1, 6)
def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    response_type = ctx.response_type
    result_type = nested(response_type, "DeletableTopicResult")
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    results = []
    for name, topic_id in wanted:
        topic = resolve_topic(controller, name, topic_id)
        error = ErrorCode.none
        message = None
        if topic is None:
            error = ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
        elif not ctx.broker.config["delete.topic.enable"]:
            error = ErrorCode.topic_deletion_disabled
        elif topic.is_internal:
            error = ErrorCode.invalid_topic_exception
            message = f"Internal topic {topic.name} cannot be deleted"
        else:
            controller.delete_topic(topic.name)
            ctx.broker.coordinator.forget_topic(topic.name)
        results.append(
            build(
                result_type,
                name=topic.name if topic else name,
                topic_id=topic.topic_id if topic else (topic_id or ZERO_UUID),
                error_code=error,
                error_message=message,
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, responses=tuple(results))


@handles(37, 0, 3)
def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    response_type = ctx.response_type
    result_type = nested(response_type, "CreatePartitionsTopicResult")
    results = []
    for topic in request.topics:
        error = ErrorCode.none
        message = None
        if controller.topic(topic.name) is None:
            error = ErrorCode.unknown_topic_or_partition
        else:
            try:
                controller.create_partitions(
                    topic.name, topic.count, validate_only=request.validate_only
                )
            except InvalidPartitionsError as exc:
                error = ErrorCode.invalid_partitions
                message = str(exc)
        results.append(build(result_type, name=topic.name, error_code=error, error_message=message))
    return build(response_type, throttle_time=NO_THROTTLE, results=tuple(results))


@handles(21, 0, 2)
def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    response_type = ctx.response_type
    topic_type = nested(response_type, "DeleteRecordsTopicResult")
    partition_type = nested(response_type, "DeleteRecordsPartitionResult")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            error = ErrorCode.none
            low = -1
            partition_log = controller.partition_log(topic.name, p.partition_index)
            if partition_log is None:
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
    controller.logs.checkpoint()  # a moved log start offset must survive a crash
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))
