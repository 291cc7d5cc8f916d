"""Configs of topics, brokers and groups: DescribeConfigs (32) v0-4, AlterConfigs (33)
v0-2, IncrementalAlterConfigs (44) v0-1.

Resources: TOPIC (2), BROKER (4, named by node id, or "" for the cluster-wide
default) and GROUP (32, any non-empty group id, existing or not: Kafka 4.0's group
configs, ``consumer.session.timeout.ms`` and the others of ``strom.config.GROUP_CONFIGS``,
stored in the cluster metadata and read by the group coordinator). Names, defaults and
value checks are Kafka's, from ``strom.config``. Sources reported: DYNAMIC_TOPIC_CONFIG
(1) for a topic override, DYNAMIC_BROKER_CONFIG (2) for a broker value set at run time,
STATIC_BROKER_CONFIG (4) from server.properties or --override, DEFAULT_CONFIG (5),
DYNAMIC_GROUP_CONFIG (8) for a value set on a group. With ``include_synonyms`` a topic
config lists the broker property that supplies its default. DescribeConfigs v0 has no
sources or synonyms but ``is_default``, true where the source would be DEFAULT_CONFIG
(as brokers of v0's time answered; Kafka 3.9 leaves it false). AlterConfigs replaces the
whole set of overrides of a resource, IncrementalAlterConfigs applies SET (0), DELETE
(1), APPEND (2) and SUBTRACT (3) to list configs; both honour ``validate_only``. Both
apply Kafka's table of dynamic broker configs (``strom.config.DYNAMIC_BROKER_CONFIGS``,
checked by ``check_dynamic_broker_config``), on what a request changes: a static config,
or a name no broker config has, is INVALID_CONFIG; the listener and security ones only
per broker (not on the cluster-wide default ""), keystores and truststores only with a
listener prefix. Those Strom declares and does not act on (``strom.config.KAFKA_ONLY``:
Kerberos, tiered storage, thread pools...) are described with Kafka's defaults; a value
Strom would not act on as Kafka does is INVALID_CONFIG naming the key, and one that
changes nothing here (a thread pool's size) is stored.
Describing needs DESCRIBE_CONFIGS and altering ALTER_CONFIGS, on the topic
(TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED) or, for a broker,
on the cluster (CLUSTER_AUTHORIZATION_FAILED).

The controller listener serves DescribeConfigs (32) v0-4 and IncrementalAlterConfigs
(44) v0-1 too, as Kafka's controllers do for ``kafka-configs.sh --bootstrap-controller``,
with the same checks: DescribeConfigs answered here from this node's metadata (a broker
resource names this node or ""), IncrementalAlterConfigs decided by the active
controller. (What brokers forward, the full AlterConfigs, is ``controller_handlers``'.)
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.alter_configs.v2 import request as alter

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.cluster.controller_api import ControllerError
from strom.cluster.node_state import NodeState
from strom.cluster.quorum_controller import QuorumController
from strom.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigSource,
    broker_config_definition,
    check_dynamic_broker_config,
    effective_topic_configs,
    group_config_values,
    render,
    validate_group_configs,
    validate_topic_configs,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from kio.schema.alter_configs.v2 import response as alter_response

    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

# The answer of AlterConfigs or IncrementalAlterConfigs, which _alter builds alike.
_Answer = TypeVar("_Answer")

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32

SOURCE_DYNAMIC_TOPIC = ConfigSource.DYNAMIC_TOPIC
SOURCE_DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER
SOURCE_STATIC_BROKER = ConfigSource.STATIC_BROKER
SOURCE_DEFAULT = ConfigSource.DEFAULT
SOURCE_DYNAMIC_GROUP = ConfigSource.DYNAMIC_GROUP

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}


class _ResourceError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# Any for request and answer: DescribeConfigs v0 is built at run time (legacy_versions)
@handles(32, 0, 4)
def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    return _describe_configs(ctx, request, _check_broker_name)


def _describe_configs(ctx: RequestContext, request: Any, check_broker: BrokerCheck) -> Any:
    response_type = ctx.response_type
    result_type = nested(response_type, "DescribeConfigsResult")
    entry_type = nested(response_type, "DescribeConfigsResourceResult")
    synonym_type = nested(response_type, "DescribeConfigsSynonym")
    synonyms_wanted = getattr(request, "include_synonyms", False)
    docs_wanted = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        error = ErrorCode.none
        message = None
        entries: list[Any] = []
        try:
            rows = _describe(ctx, resource.resource_type, resource.resource_name, check_broker)
            keys = resource.configuration_keys
            for name, value, source, definition, synonyms in rows:
                if keys and name not in keys:
                    continue
                entries.append(
                    build(
                        entry_type,
                        name=name,
                        value=value,
                        read_only=resource.resource_type == RESOURCE_BROKER
                        and name not in DYNAMIC_BROKER_CONFIGS,
                        config_source=source,
                        is_default=source == SOURCE_DEFAULT,
                        is_sensitive=definition.kind == "password",
                        synonyms=tuple(
                            build(synonym_type, name=n, value=v, source=s) for n, v, s in synonyms
                        )
                        if synonyms_wanted
                        else (),
                        config_type=_CONFIG_TYPES.get(definition.kind, 0),
                        documentation=definition.doc or None if docs_wanted else None,
                    )
                )
        except _ResourceError as exc:
            error, message = exc.code, str(exc)
        results.append(
            resource_result(result_type, resource, error, message, configs=tuple(entries))
        )
    return build(response_type, throttle_time=NO_THROTTLE, results=tuple(results))


def resource_result(
    result_type: type, resource: Any, error: ErrorCode, message: str | None, **fields: Any
) -> Any:
    """A response's entry for one requested resource: its type, name and outcome."""
    return build(
        result_type,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        **fields,
    )


Row = tuple[str, str | None, int, ConfigDef, list[tuple[str, str | None, int]]]
# Raises _ResourceError when a DescribeConfigs of this listener may not name that broker.
BrokerCheck = Callable[[RequestContext, str], None]


def _check_broker_name(ctx: RequestContext, name: str) -> None:
    if name != "" and not (name.isdigit() and int(name) in ctx.broker.state.image.brokers):
        raise _ResourceError(ErrorCode.invalid_request, f"Unknown broker {name!r}")


def _check_group_name(name: str) -> None:
    if not name:
        raise _ResourceError(ErrorCode.invalid_request, "Group name must not be empty")


def _authorize(ctx: RequestContext, resource_type: int, name: str, operation: int) -> None:
    """DESCRIBE_CONFIGS or ALTER_CONFIGS on the topic, or on the cluster for a broker."""
    if resource_type == RESOURCE_TOPIC:
        if not authz.allowed(ctx, operation, authz.TOPIC, name):
            raise _ResourceError(
                ErrorCode.topic_authorization_failed, "Topic authorization failed."
            )
    elif resource_type == RESOURCE_GROUP:
        if not authz.allowed(ctx, operation, authz.GROUP, name):
            raise _ResourceError(
                ErrorCode.group_authorization_failed, "Group authorization failed."
            )
    elif resource_type == RESOURCE_BROKER and not authz.cluster_allowed(ctx, operation):
        raise _ResourceError(
            ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        )


def _describe(
    ctx: RequestContext, resource_type: int, name: str, check_broker: BrokerCheck
) -> list[Row]:
    _authorize(ctx, resource_type, name, authz.Op.DESCRIBE_CONFIGS)
    broker_config = ctx.broker.config
    dynamic = ctx.broker.state.metadata.broker_overrides
    if resource_type == RESOURCE_TOPIC:
        topic = ctx.broker.state.topic(name)
        if topic is None:
            raise _ResourceError(
                ErrorCode.unknown_topic_or_partition, f"Topic {name!r} does not exist"
            )
        rows: list[Row] = []
        for key, (value, source) in sorted(
            effective_topic_configs(broker_config, topic.configs).items()
        ):
            definition = TOPIC_CONFIGS[key]
            broker_key = definition.broker_name
            broker_source = SOURCE_DYNAMIC_BROKER if broker_key in dynamic else SOURCE_STATIC_BROKER
            code = broker_source if source == SOURCE_STATIC_BROKER else source
            synonyms: list[tuple[str, str | None, int]] = []
            if source == SOURCE_DYNAMIC_TOPIC:
                synonyms.append((key, topic.configs[key], SOURCE_DYNAMIC_TOPIC))
            if broker_key is not None and broker_config.is_set(broker_key):
                synonyms.append((broker_key, render(broker_config[broker_key]), broker_source))
            synonyms.append((broker_key or key, render(definition.default), SOURCE_DEFAULT))
            rows.append((key, render(value), code, definition, synonyms))
        return rows
    if resource_type == RESOURCE_BROKER:
        check_broker(ctx, name)
        rows = []
        for key, (value, is_default) in sorted(broker_config.describe().items()):
            if is_default:
                code = SOURCE_DEFAULT
            else:
                code = SOURCE_DYNAMIC_BROKER if key in dynamic else SOURCE_STATIC_BROKER
            synonyms = [(key, value, code)]
            rows.append((key, value, code, BROKER_CONFIGS[key], synonyms))
        return rows
    if resource_type == RESOURCE_GROUP:
        _check_group_name(name)
        overrides = ctx.broker.state.metadata.image.group_configs(name)
        rows = []
        for key, (value, is_set) in sorted(group_config_values(broker_config, overrides).items()):
            code = SOURCE_DYNAMIC_GROUP if is_set else SOURCE_DEFAULT
            rows.append(
                (key, render(value), code, GROUP_CONFIGS[key], [(key, render(value), code)])
            )
        return rows
    raise _ResourceError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


@handles(33, 0, 2)
def handle_alter_configs(
    ctx: RequestContext, request: req.AlterConfigs
) -> resp.AlterConfigs | Awaitable[resp.AlterConfigs]:
    response_type: type[resp.AlterConfigs] = ctx.response_type

    def new_configs(resource: Any, current: dict[str, str]) -> dict[str, str]:
        return {c.name: c.value for c in resource.configs}

    return _alter(ctx, response_type, request, new_configs)


@handles(44, 0, 1)
def handle_incremental_alter_configs(
    ctx: RequestContext, request: req.IncrementalAlterConfigs
) -> resp.IncrementalAlterConfigs | Awaitable[resp.IncrementalAlterConfigs]:
    response_type: type[resp.IncrementalAlterConfigs] = ctx.response_type

    def new_configs(resource: Any, current: dict[str, str]) -> dict[str, str]:
        result = dict(current)
        table = _TABLES.get(resource.resource_type, BROKER_CONFIGS)
        for change in resource.configs:
            if resource.resource_type == RESOURCE_BROKER:
                definition = broker_config_definition(change.name)
                unknown = f"Unknown broker config name: {change.name}"
            else:
                definition = table.get(change.name)
                unknown = f"Unknown config {change.name}"
            if definition is None:
                raise _ResourceError(ErrorCode.invalid_config, unknown)
            op = change.config_operation
            if op == OP_SET:
                result[change.name] = change.value
            elif op == OP_DELETE:
                result.pop(change.name, None)
            elif op in (OP_APPEND, OP_SUBTRACT):
                if definition.kind != "list":
                    raise _ResourceError(
                        ErrorCode.invalid_config,
                        f"Config {change.name} is not a list; APPEND and SUBTRACT need one",
                    )
                base = result.get(change.name)
                items = (
                    [i.strip() for i in base.split(",") if i.strip()]
                    if base is not None
                    else list(_current_list(ctx, resource, change.name))
                )
                values = [v.strip() for v in (change.value or "").split(",") if v.strip()]
                if op == OP_APPEND:
                    items += [v for v in values if v not in items]
                else:
                    items = [i for i in items if i not in values]
                result[change.name] = ",".join(items)
            else:
                raise _ResourceError(ErrorCode.invalid_request, f"Unknown operation {op}")
        return result

    return _alter(ctx, response_type, request, new_configs)


_TABLES = {RESOURCE_TOPIC: TOPIC_CONFIGS, RESOURCE_GROUP: GROUP_CONFIGS}


def _current_list(ctx: RequestContext, resource: Any, key: str) -> list[str]:
    if resource.resource_type == RESOURCE_TOPIC:
        return list(ctx.broker.config.broker_default_for_topic(key))
    if key in BROKER_CONFIGS:
        return list(ctx.broker.config[key] or [])
    definition = broker_config_definition(key)  # a listener-prefixed name
    return list(definition.default or []) if definition is not None else []


def _alter(
    ctx: RequestContext,
    response_type: type[_Answer],
    request: Any,
    new_configs: Any,
) -> _Answer | Awaitable[_Answer]:
    """Check each resource's new overrides here; send the good ones, as the full sets
    they become, to the active controller in one AlterConfigs; answer in order."""
    state = ctx.broker.state
    result_type = nested(response_type, "AlterConfigsResourceResponse")
    outcomes: list[tuple[ErrorCode, str | None]] = []
    to_write: list[tuple[int, Any, dict[str, str]]] = []  # (position, resource, configs)
    for position, resource in enumerate(request.resources):
        error = ErrorCode.none
        message = None
        try:
            _authorize(ctx, resource.resource_type, resource.resource_name, authz.Op.ALTER_CONFIGS)
            if resource.resource_type == RESOURCE_TOPIC:
                topic = state.topic(resource.resource_name)
                if topic is None:
                    raise _ResourceError(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic {resource.resource_name!r} does not exist",
                    )
                configs = new_configs(resource, topic.configs)
                try:
                    validate_topic_configs(configs)
                except ConfigError as exc:
                    raise _ResourceError(ErrorCode.invalid_config, str(exc)) from None
            elif resource.resource_type == RESOURCE_GROUP:
                _check_group_name(resource.resource_name)
                configs = new_configs(resource, state.image.group_configs(resource.resource_name))
                try:
                    validate_group_configs(configs, ctx.broker.config)
                except ConfigError as exc:
                    raise _ResourceError(ErrorCode.invalid_config, str(exc)) from None
            elif resource.resource_type == RESOURCE_BROKER:
                _check_broker_name(ctx, resource.resource_name)
                current = state.image.broker_configs(
                    int(resource.resource_name) if resource.resource_name else None
                )
                configs = new_configs(resource, current)
                for key, value in configs.items():
                    if current.get(key) == value:
                        continue  # kept as it is: only what changes is checked
                    try:
                        check_dynamic_broker_config(key, value, bool(resource.resource_name))
                    except ConfigError as exc:
                        raise _ResourceError(ErrorCode.invalid_config, str(exc)) from None
            else:
                raise _ResourceError(
                    ErrorCode.invalid_request,
                    f"Unsupported resource type {resource.resource_type}",
                )
            if not request.validate_only:
                to_write.append((position, resource, configs))
        except _ResourceError as exc:
            error, message = exc.code, str(exc)
        outcomes.append((error, message))

    def answer() -> _Answer:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            responses=tuple(
                resource_result(result_type, resource, error, message)
                for (error, message), resource in zip(outcomes, request.resources, strict=True)
            ),
        )

    if not to_write:
        return answer()

    async def written() -> _Answer:
        forwarded = alter.AlterConfigsRequest(
            resources=tuple(
                alter.AlterConfigsResource(
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=tuple(
                        alter.AlterableConfig(name=k, value=v) for k, v in sorted(configs.items())
                    ),
                )
                for _, resource, configs in to_write
            ),
            validate_only=False,
        )
        try:
            response: alter_response.AlterConfigsResponse = (
                await ctx.broker.controller_channel.forward(ctx, forwarded)
            )
        except ControllerUnavailable:
            for position, _, _ in to_write:
                outcomes[position] = (
                    ErrorCode.request_timed_out,
                    "No active controller answered in time.",
                )
            return answer()
        for (position, _, _), result in zip(to_write, response.responses, strict=True):
            outcomes[position] = (result.error_code, result.error_message)
        wanted = [(r, c) for (p, r, c) in to_write if outcomes[p][0] == ErrorCode.none]
        await ctx.broker.wait_for_metadata(lambda: all(_shows(state, r, c) for r, c in wanted), 5.0)
        return answer()

    return written()


def _shows(state: NodeState, resource: Any, configs: dict[str, str]) -> bool:
    """Whether this node's metadata holds exactly these overrides for the resource."""
    if resource.resource_type == RESOURCE_TOPIC:
        return state.image.topic_configs(resource.resource_name) == configs
    if resource.resource_type == RESOURCE_GROUP:
        return state.image.group_configs(resource.resource_name) == configs
    name = resource.resource_name
    return state.image.broker_configs(int(name) if name else None) == configs


# Controller listener ---------------------------------------------------------------


# Any for request and answer: DescribeConfigs v0 is built at run time (legacy_versions)
@handles_controller(32, 0, 4)
def handle_controller_describe_configs(ctx: RequestContext, request: Any) -> Any:
    """DescribeConfigs asked of a controller itself (KIP-919), answered from this node's
    metadata image as Kafka's controllers answer it: a broker resource must name this
    node or be "" (INVALID_REQUEST otherwise)."""
    return _describe_configs(ctx, request, _check_own_node)


def _check_own_node(ctx: RequestContext, name: str) -> None:
    node_id = ctx.broker.node_id
    if name != "" and not (name.isdigit() and int(name) == node_id):
        raise _ResourceError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id} or empty string, but received {name}",
        )


@handles_controller(44, 0, 1)
async def handle_controller_incremental_alter_configs(
    ctx: RequestContext, request: req.IncrementalAlterConfigs
) -> resp.IncrementalAlterConfigs:
    """IncrementalAlterConfigs sent to a controller itself (KIP-919; brokers forward
    AlterConfigs instead), as Kafka's controller takes it: a resource named twice is
    INVALID_REQUEST ("Duplicate resource.", answered once); each other one needs
    ALTER_CONFIGS on its topic, group or (a broker) the cluster, then its changes are
    decided by the active controller (``QuorumController.incremental_alter_configs``:
    the same rules and checks as a change that came through a broker)."""
    response_type: type[resp.IncrementalAlterConfigs] = ctx.response_type
    result_type = nested(response_type, "AlterConfigsResourceResponse")
    named = Counter((r.resource_type, r.resource_name) for r in request.resources)
    answered: set[tuple[int, str]] = set()
    out = []
    for resource in request.resources:
        key = (resource.resource_type, resource.resource_name)
        if key in answered:
            continue
        answered.add(key)
        error, message = ErrorCode.none, None
        changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
        try:
            if named[key] > 1:
                raise _ResourceError(ErrorCode.invalid_request, "Duplicate resource.")
            _authorize(ctx, *key, authz.Op.ALTER_CONFIGS)
            service = ctx.broker.controller_service
            assert service is not None, "only a controller serves the controller listener"
            await service.run(
                functools.partial(
                    QuorumController.incremental_alter_configs,
                    resource_type=key[0],
                    resource_name=key[1],
                    changes=changes,
                    validate_only=request.validate_only,
                )
            )
        except (_ResourceError, ControllerError) as exc:
            error, message = exc.code, str(exc)
        out.append(resource_result(result_type, resource, error, message))
    return build(response_type, throttle_time=NO_THROTTLE, responses=tuple(out))
