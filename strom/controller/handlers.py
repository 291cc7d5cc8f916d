"""The active controller's requests on the controller listener.

Serves, on a controller node, what brokers and forwarding brokers send the active
controller: BrokerRegistration (62) v0-4, BrokerHeartbeat (63) v0-1, UnregisterBroker
(64) v0, AllocateProducerIds (67) v0, and the admin changes a client sent to any
broker, forwarded as they came: CreateTopics (19) v0-7, DeleteTopics (20) v0-6,
CreatePartitions (37) v0-3, AlterConfigs (33) v0-2 (a broker turns
IncrementalAlterConfigs into the full set of overrides it leads to), ElectLeaders (43)
v0-2, AlterPartitionReassignments (45) v0-1 and ListPartitionReassignments (46) v0; and
from partition leaders AlterPartition (56) v0-3. Each is decided by
the ``QuorumController`` and answered once its records have committed
(``ControllerService.run``). A node that is not the active controller answers
NOT_CONTROLLER, which the forwarding side retries.

With an authorizer, the sender needs CLUSTER_ACTION on the cluster (ALTER for
UnregisterBroker), as Kafka's controller asks of brokers, checked before anything else
is looked at; refused requests answer CLUSTER_AUTHORIZATION_FAILED. ElectLeaders and
AlterPartitionReassignments are served to ALTER on the cluster too, and
ListPartitionReassignments to DESCRIBE, Kafka's checks of a client that talks to the
controller itself (``--bootstrap-controller``, KIP-919). (The ACL, SCRAM and
client-quota changes served on this listener are authorized in acls.py,
scram_credentials.py and quota_admin.py.) Forwarded admin requests come without Kafka's envelope,
so the broker that forwards them has already checked the client's own operations, and
the controller checks the broker's CLUSTER_ACTION.

Does not own the decisions (``strom.cluster.quorum_controller``) or forwarding
(``controller_channel``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE, ZERO_UUID
from strom.broker.handlers.admin.configs import resource_result
from strom.broker.network.router import RequestContext, handles_controller
from strom.cluster.controller_api import (
    AlterPartitionEntry,
    ControllerError,
    ElectionResult,
    ElectionType,
    IsrMember,
    NewTopic,
)
from strom.cluster.image import Endpoint
from strom.cluster.metadata import INTERNAL_TOPICS
from strom.config import ConfigError, effective_topic_configs, render, validate_topic_configs
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested, nested_if_any

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32


def _service(
    ctx: RequestContext,
    operation: int = authz.Op.CLUSTER_ACTION,
    client_operation: int | None = None,
) -> Any:
    """The controller service, once the sender may ask it: ``operation`` on the cluster,
    or with ``client_operation`` a forwarding broker's CLUSTER_ACTION or that operation
    of a client talking to the controller itself."""
    if client_operation is None:
        allowed = authz.node_request_allowed(ctx, operation)
        needed = authz.Op(operation).name
    else:
        allowed = authz.controller_admin_allowed(ctx, client_operation)
        needed = f"CLUSTER_ACTION or {authz.Op(client_operation).name}"
    if not allowed:
        raise ControllerError(
            ErrorCode.cluster_authorization_failed,
            f"{ctx.principal} may not send API key {ctx.api_key} to the controller "
            f"({needed} on the cluster is needed)",
        )
    service = ctx.broker.controller_service
    if service is None or service.controller is None:
        raise ControllerError(ErrorCode.not_controller, "This node is not the active controller.")
    return service


def _now_ms() -> int:
    from strom.controller.service import _now_ms as now

    return now()


# Brokers -------------------------------------------------------------------------


@handles_controller(62, 0, 4)
async def handle_broker_registration(
    ctx: RequestContext, request: req.BrokerRegistration
) -> resp.BrokerRegistration:
    response_type: type[resp.BrokerRegistration] = ctx.response_type
    try:
        epoch = await _service(ctx).run(
            lambda c: c.register_broker(
                request.broker_id,
                request.incarnation_id,
                listeners=[
                    Endpoint(lst.name, lst.host, lst.port, lst.security_protocol)
                    for lst in request.listeners
                ],
                now_ms=_now_ms(),
                cluster_id=request.cluster_id,
                rack=request.rack,
                features={
                    f.name: (f.min_supported_version, f.max_supported_version)
                    for f in request.features
                },
                log_dirs=[d for d in getattr(request, "log_dirs", ()) if d is not None],
            )
        )
    except ControllerError as exc:
        return build(response_type, throttle_time=NO_THROTTLE, error_code=exc.code)
    return build(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, broker_epoch=epoch
    )


@handles_controller(63, 0, 1)
async def handle_broker_heartbeat(
    ctx: RequestContext, request: req.BrokerHeartbeat
) -> resp.BrokerHeartbeat:
    response_type: type[resp.BrokerHeartbeat] = ctx.response_type
    try:
        reply = await _service(ctx).run(
            lambda c: c.broker_heartbeat(
                request.broker_id,
                request.broker_epoch,
                request.current_metadata_offset,
                now_ms=_now_ms(),
                want_fence=request.want_fence,
                want_shutdown=request.want_shut_down,
            )
        )
    except ControllerError as exc:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=exc.code,
            is_caught_up=False,
            is_fenced=True,
            should_shut_down=False,
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        is_caught_up=reply.is_caught_up,
        is_fenced=reply.is_fenced,
        should_shut_down=reply.should_shut_down,
    )


@handles_controller(64, 0, 0)
async def handle_unregister_broker(
    ctx: RequestContext, request: req.UnregisterBroker
) -> resp.UnregisterBroker:
    response_type: type[resp.UnregisterBroker] = ctx.response_type
    try:
        await _service(ctx, authz.Op.ALTER).run(lambda c: c.unregister_broker(request.broker_id))
    except ControllerError as exc:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=exc.code,
            error_message=str(exc),
        )
    return build(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None
    )


@handles_controller(67, 0, 0)
async def handle_allocate_producer_ids(
    ctx: RequestContext, request: req.AllocateProducerIds
) -> resp.AllocateProducerIds:
    response_type: type[resp.AllocateProducerIds] = ctx.response_type
    try:
        start, size = await _service(ctx).run(
            lambda c: c.allocate_producer_ids(request.broker_id, request.broker_epoch)
        )
    except ControllerError as exc:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=exc.code,
            producer_id_start=-1,
            producer_id_len=0,
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id_start=start,
        producer_id_len=size,
    )


# Topics ----------------------------------------------------------------------------


# Any for request and answer: CreateTopics v0-1 are built at run time (legacy_versions)
@handles_controller(19, 0, 7)
async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "CreatableTopicResult")
    config_type = nested_if_any(response_type, "CreatableTopicConfigs")
    wanted = [
        NewTopic(
            topic.name,
            topic.num_partitions,
            topic.replication_factor,
            {a.partition_index: tuple(a.broker_ids) for a in topic.assignments} or None,
            {c.name: c.value for c in topic.configs},
        )
        for topic in request.topics
    ]
    try:
        results = await _service(ctx).run(
            lambda c: c.create_topics(
                wanted,
                validate_only=getattr(request, "validate_only", False),  # v1+
            )
        )
    except ControllerError as exc:
        results = None
        error = exc
    out = []
    for index, topic in enumerate(request.topics):
        if results is None:
            out.append(
                build(
                    result_type,
                    name=topic.name,
                    topic_id=ZERO_UUID,
                    error_code=error.code,
                    error_message=str(error),
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None if config_type is None else (),
                )
            )
            continue
        result = results[index]
        ok = result.error_code == ErrorCode.none
        configs = None
        if config_type is not None and ok:
            configs = tuple(
                build(
                    config_type,
                    name=key,
                    value=render(value),
                    read_only=False,
                    config_source=source,
                    is_sensitive=False,
                )
                for key, (value, source) in sorted(
                    effective_topic_configs(ctx.broker.config, result.configs).items()
                )
            )
        out.append(
            build(
                result_type,
                name=topic.name,
                topic_id=result.topic_id or ZERO_UUID,
                error_code=result.error_code,
                error_message=result.error_message,
                num_partitions=result.num_partitions if ok else -1,
                replication_factor=result.replication_factor if ok else -1,
                configs=configs,
            )
        )
    return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(out))


# Any for request and answer: DeleteTopics v0 is built at run time (legacy_versions)
@handles_controller(20, 0, 6)
async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id if t.topic_id != ZERO_UUID else None) for t in request.topics]
    # (name, topic id, error code, message) per entry, in request order
    out: list[tuple[Any, Any, ErrorCode, str | None] | None] = [None] * len(wanted)
    names, ids, where = [], [], []
    for index, (name, topic_id) in enumerate(wanted):
        if name in INTERNAL_TOPICS:
            message = f"Internal topic {name} cannot be deleted"
            out[index] = (name, topic_id, ErrorCode.invalid_topic_exception, message)
        elif name:
            names.append(name)
            where.append(index)
        else:
            ids.append(topic_id or ZERO_UUID)
    where += [i for i, (name, _) in enumerate(wanted) if not name]
    try:
        results = await _service(ctx).run(lambda c: c.delete_topics(names, ids))
        for index, result in zip(where, results, strict=True):
            name, topic_id = wanted[index]
            code = result.error_code
            if code == ErrorCode.topic_deletion_disabled and ctx.api_version < 3:
                code = ErrorCode.invalid_request  # v0-2 predate the code, as in Kafka
            out[index] = (
                result.name if result.name is not None else name,
                result.topic_id or topic_id,
                code,
                result.error_message,
            )
    except ControllerError as exc:
        for index in where:
            out[index] = (*wanted[index], exc.code, str(exc))
    result_type = nested(ctx.response_type, "DeletableTopicResult")
    return build(
        ctx.response_type,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            build(
                result_type,
                name=name,
                topic_id=topic_id or ZERO_UUID,
                error_code=code,
                error_message=message,
            )
            for name, topic_id, code, message in (entry for entry in out if entry is not None)
        ),
    )


@handles_controller(37, 0, 3)
async def handle_create_partitions(
    ctx: RequestContext, request: req.CreatePartitions
) -> resp.CreatePartitions:
    response_type: type[resp.CreatePartitions] = ctx.response_type
    result_type = nested(response_type, "CreatePartitionsTopicResult")
    out = []
    for topic in request.topics:
        assignments = (
            [tuple(a.broker_ids) for a in topic.assignments] if topic.assignments else None
        )
        error, message = ErrorCode.none, None
        try:
            await _service(ctx).run(
                lambda c, t=topic, a=assignments: c.create_partitions(
                    t.name, t.count, a, validate_only=request.validate_only
                )
            )
        except ControllerError as exc:
            error, message = exc.code, str(exc)
        out.append(build(result_type, name=topic.name, error_code=error, error_message=message))
    return build(response_type, throttle_time=NO_THROTTLE, results=tuple(out))


# Configs ---------------------------------------------------------------------------


@handles_controller(33, 0, 2)
async def handle_alter_configs(ctx: RequestContext, request: req.AlterConfigs) -> resp.AlterConfigs:
    """The overrides of each resource become exactly the ones sent (validated here too)."""
    response_type: type[resp.AlterConfigs] = ctx.response_type
    result_type = nested(response_type, "AlterConfigsResourceResponse")
    out = []
    for resource in request.resources:
        configs = {c.name: c.value for c in resource.configs}
        error, message = ErrorCode.none, None
        try:
            service = _service(ctx)  # authorized before anything is looked at
            if resource.resource_type == RESOURCE_TOPIC:
                try:
                    validate_topic_configs(configs)
                except ConfigError as exc:
                    raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
                if resource.resource_name not in service.controller.image.topics:
                    raise ControllerError(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic {resource.resource_name!r} does not exist",
                    )
            elif resource.resource_type not in (RESOURCE_BROKER, RESOURCE_GROUP):
                raise ControllerError(
                    ErrorCode.invalid_request,
                    f"Unsupported resource type {resource.resource_type}",
                )
            await service.run(
                lambda c, r=resource, v=configs: c.alter_configs(
                    r.resource_type, r.resource_name, v, validate_only=request.validate_only
                )
            )
        except ControllerError as exc:
            error, message = exc.code, str(exc)
        out.append(resource_result(result_type, resource, error, message))
    return build(response_type, throttle_time=NO_THROTTLE, responses=tuple(out))


# ISR changes -----------------------------------------------------------------------


# Any for request and answer: AlterPartition v0-1 are built at run time (legacy_versions)
@handles_controller(56, 0, 3)
async def handle_alter_partition(ctx: RequestContext, request: Any) -> Any:
    """AlterPartition (KIP-497) v0-3 from a partition leader, decided as Kafka does.

    Versions 0-1 name topics (Kafka 4 and kio dropped them; legacy_versions builds
    them), v1 adds the leader recovery state, v2 names topics by id, v3 sends each ISR
    member with its broker epoch (KIP-903). A stale broker epoch,
    or a node that is not the active controller, is the top-level error with no topics;
    everything else is per partition. A refused partition carries leader -1 and epochs
    -1 where Kafka leaves them 0.
    """
    entries: list[AlterPartitionEntry] = []
    for topic in request.topics:
        # v0-1 name the topic, v2+ give its id
        key = (topic.topic_id or ZERO_UUID) if hasattr(topic, "topic_id") else topic.topic_name
        for p in topic.partitions:
            if hasattr(p, "new_isr_with_epochs"):
                isr = tuple(IsrMember(m.broker_id, m.broker_epoch) for m in p.new_isr_with_epochs)
            else:
                isr = tuple(IsrMember(b) for b in p.new_isr)
            entries.append(
                AlterPartitionEntry(
                    topic=key,
                    partition=p.partition_index,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    new_isr=isr,
                    leader_recovery_state=getattr(p, "leader_recovery_state", 0),
                )
            )
    try:
        results = await _service(ctx).run(
            lambda c: c.alter_partition(
                request.broker_id, request.broker_epoch, entries, version=ctx.api_version
            )
        )
    except ControllerError as exc:
        return build(ctx.response_type, throttle_time=NO_THROTTLE, error_code=exc.code, topics=())
    topic_type = nested(ctx.response_type, "TopicData")
    partition_type = nested(ctx.response_type, "PartitionData")
    answers = iter(results)
    topics = []
    for topic in request.topics:
        partitions = []
        for _ in topic.partitions:
            result = next(answers)
            partitions.append(
                build(
                    partition_type,
                    partition_index=result.partition,
                    error_code=result.error_code,
                    leader_id=result.leader_id,
                    leader_epoch=result.leader_epoch,
                    isr=tuple(result.isr),
                    leader_recovery_state=result.leader_recovery_state,
                    partition_epoch=result.partition_epoch,
                )
            )
        topics.append(
            build(
                topic_type,
                topic_id=getattr(topic, "topic_id", None),
                topic_name=getattr(topic, "topic_name", None),
                partitions=tuple(partitions),
            )
        )
    return build(
        ctx.response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        topics=tuple(topics),
    )


# Elections and reassignments -------------------------------------------------------


@handles_controller(43, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request: req.ElectLeaders) -> resp.ElectLeaders:
    response_type: type[resp.ElectLeaders] = ctx.response_type
    topic_type = nested(response_type, "ReplicaElectionResult")
    partition_type = nested(response_type, "PartitionResult")
    election = getattr(request, "election_type", ElectionType.PREFERRED)
    wanted = (
        None
        if request.topic_partitions is None
        else [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    )
    top_error = ErrorCode.none
    results: list[Any] = []
    try:
        results = await _service(ctx, client_operation=authz.Op.ALTER).run(
            lambda c: c.elect_leaders(wanted, election)
        )
    except ControllerError as exc:
        top_error = exc.code
        results = [
            ElectionResult(name, index, exc.code, str(exc)) for name, index in (wanted or [])
        ]
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            build(
                partition_type,
                partition_id=result.partition,
                error_code=result.error_code,
                error_message=result.error_message,
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=top_error,
        replica_election_results=tuple(
            build(topic_type, topic=name, partition_result=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


@handles_controller(45, 0, 1)
async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: req.AlterPartitionReassignments
) -> resp.AlterPartitionReassignments:
    response_type: type[resp.AlterPartitionReassignments] = ctx.response_type
    topic_type = nested(response_type, "ReassignableTopicResponse")
    partition_type = nested(response_type, "ReassignablePartitionResponse")
    wanted = [(t.name, p.partition_index, p.replicas) for t in request.topics for p in t.partitions]
    allow = getattr(request, "allow_replication_factor_change", True)
    top_error, top_message = ErrorCode.none, None
    results: list[Any] = []
    try:
        results = await _service(ctx, client_operation=authz.Op.ALTER).run(
            lambda c: c.alter_partition_reassignments(wanted, allow_replication_factor_change=allow)
        )
    except ControllerError as exc:
        top_error, top_message = exc.code, str(exc)
    by_topic: dict[str, list[Any]] = {t.name: [] for t in request.topics}
    for result in results:
        by_topic[result.topic].append(
            build(
                partition_type,
                partition_index=result.partition,
                error_code=result.error_code,
                error_message=result.error_message,
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=allow,
        error_code=top_error,
        error_message=top_message,
        responses=tuple(
            build(topic_type, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


@handles_controller(46, 0, 0)
async def handle_list_partition_reassignments(
    ctx: RequestContext, request: req.ListPartitionReassignments
) -> resp.ListPartitionReassignments:
    response_type: type[resp.ListPartitionReassignments] = ctx.response_type
    topic_type = nested(response_type, "OngoingTopicReassignment")
    partition_type = nested(response_type, "OngoingPartitionReassignment")
    wanted = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    try:
        ongoing = _service(
            ctx, client_operation=authz.Op.DESCRIBE
        ).controller.list_partition_reassignments(wanted)
    except ControllerError as exc:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=exc.code,
            error_message=str(exc),
            topics=(),
        )
    by_topic: dict[str, list[Any]] = {}
    for entry in ongoing:
        by_topic.setdefault(entry.topic, []).append(
            build(
                partition_type,
                partition_index=entry.partition,
                replicas=entry.replicas,
                adding_replicas=entry.adding,
                removing_replicas=entry.removing,
            )
        )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )
