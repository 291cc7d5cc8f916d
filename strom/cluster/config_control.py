"""Config changes as the controller makes them: AlterConfigs and IncrementalAlterConfigs.

Owns the rules of a config change on the controller, after Kafka's
ConfigurationControlManager: which resources have configs (TOPIC 2, an existing topic;
BROKER 4, a node id or "" for the cluster-wide default; GROUP 32, any non-empty group
id, whether or not the group exists yet), the incremental operations
(SET, DELETE, APPEND and SUBTRACT, the last two for list configs only, starting from the
default when nothing is set), the validation of the result (topic configs through
``strom.config.validate_topic_configs``, group configs through
``validate_group_configs``; broker configs must be ones Kafka changes at run time) and
the ConfigRecords that turn the current overrides into the wanted ones (a null value
deletes).

Does not own: applying the records (``image``) or when they are written
(``quorum_controller``).
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.cluster.controller_api import ConfigOp, ControllerError
from strom.cluster.image import ConfigResourceType, MetadataImage
from strom.cluster.records import ConfigRecord, MetadataRecord
from strom.config import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    broker_config_definition,
    check_dynamic_broker_config,
    validate_group_configs,
    validate_topic_configs,
)
from strom.protocol.errors import ErrorCode


def current_configs(image: MetadataImage, resource_type: int, name: str) -> dict[str, str]:
    """The overrides of a resource, after checking that it can have configs."""
    if resource_type == ConfigResourceType.TOPIC:
        if image.topic(name) is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
    elif resource_type == ConfigResourceType.BROKER:
        if name != "" and not name.lstrip("-").isdigit():
            raise ControllerError(ErrorCode.invalid_request, f"Invalid broker name {name!r}")
    elif resource_type == ConfigResourceType.GROUP:
        if not name:
            raise ControllerError(ErrorCode.invalid_request, "Group name must not be empty")
    else:
        raise ControllerError(
            ErrorCode.invalid_request, f"Unsupported resource type {resource_type}"
        )
    return image.configs_of(resource_type, name)


def apply_config_ops(
    image: MetadataImage,
    resource_type: int,
    current: dict[str, str],
    changes: Sequence[tuple[str, int, str | None]],
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs' (name, op, value) changes, in order."""
    table = _TABLES.get(resource_type, BROKER_CONFIGS)
    wanted = dict(current)
    for key, op, value in changes:
        if op == ConfigOp.SET:
            if value is None:
                raise ControllerError(
                    ErrorCode.invalid_request, f"Null value not supported for : {key}"
                )
            wanted[key] = value
        elif op == ConfigOp.DELETE:
            wanted.pop(key, None)
        elif op in (ConfigOp.APPEND, ConfigOp.SUBTRACT):
            definition = (
                broker_config_definition(key)
                if resource_type == ConfigResourceType.BROKER
                else table.get(key)
            )
            if definition is None or definition.kind != "list":
                raise ControllerError(
                    ErrorCode.invalid_config,
                    f"Config {key} is not a list; APPEND and SUBTRACT need one",
                )
            base = wanted.get(key)
            items = _split(base) if base is not None else _default_list(image, resource_type, key)
            values = _split(value or "")
            if op == ConfigOp.APPEND:
                items += [v for v in values if v not in items]
            else:
                items = [i for i in items if i not in values]
            wanted[key] = ",".join(items)
        else:
            raise ControllerError(ErrorCode.invalid_request, f"Unknown operation {op}")
    return wanted


def config_records(
    resource_type: int, name: str, current: dict[str, str], wanted: dict[str, str]
) -> list[MetadataRecord]:
    """Validate ``wanted``; the ConfigRecords that turn ``current`` into it."""
    if resource_type == ConfigResourceType.TOPIC:
        try:
            validate_topic_configs(wanted)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    elif resource_type == ConfigResourceType.GROUP:
        try:
            # The bounds were checked by the receiving broker, with its own settings.
            validate_group_configs(wanted, check_bounds=False)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    else:
        for key, value in wanted.items():
            if current.get(key) == value:
                continue  # kept as it is: only what changes is checked
            try:
                check_dynamic_broker_config(key, value, name != "")
            except ConfigError as exc:
                raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    return [
        ConfigRecord(
            resource_type=int(resource_type), resource_name=name, name=key, value=wanted.get(key)
        )
        for key in sorted(set(current) | set(wanted))
        if current.get(key) != wanted.get(key)
    ]


# keyed by resource type; looked up by the int a request carries
_TABLES: dict[int, dict[str, ConfigDef]] = {
    ConfigResourceType.TOPIC: TOPIC_CONFIGS,
    ConfigResourceType.GROUP: GROUP_CONFIGS,
}


def _default_list(image: MetadataImage, resource_type: int, key: str) -> list[str]:
    if resource_type == ConfigResourceType.TOPIC:
        broker_name = TOPIC_CONFIGS[key].broker_name
        cluster = image.broker_configs(None)
        if broker_name is not None and broker_name in cluster:
            return _split(cluster[broker_name])
        return list(TOPIC_CONFIGS[key].default or [])
    definition = broker_config_definition(key)
    return list(definition.default or []) if definition is not None else []


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]
