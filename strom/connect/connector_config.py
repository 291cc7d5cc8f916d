"""The settings every connector has (Kafka's ConnectorConfig, SourceConnectorConfig and
SinkConnectorConfig), the validation of a connector's whole config as
``/connector-plugins/{plugin}/config/validate`` reports it (Kafka's ConfigInfos JSON:
``name``, ``error_count``, ``groups``, and per key its ``definition`` and ``value`` with
every error), and the converters a connector's tasks use.

Common keys: ``name``, ``connector.class``, ``tasks.max`` (1), ``tasks.max.enforce``,
``key.converter``, ``value.converter``, ``header.converter``, ``config.action.reload``,
``transforms``, ``predicates``, ``errors.*``; sinks add ``topics`` / ``topics.regex``
(exactly one of them) and ``errors.deadletterqueue.*``; sources ``exactly.once.support``,
``transaction.boundary``, ``offsets.storage.topic``. A connector's converter is its own
``key.converter`` with its ``key.converter.*`` settings when it names one, else the
worker's, as in Kafka. ``producer.override.*``, ``consumer.override.*`` and
``admin.override.*`` go to the task's clients.

Transforms and predicates are validated as Kafka's ``ConnectorConfig.enrich`` does:
each alias of ``transforms`` / ``predicates`` (no duplicates) adds its ``<kind>.<alias>.type``
(a class Strom has) and that class's own keys under the prefix, each in the group
``Transforms: <alias>`` / ``Predicates: <alias>``, a transform's ``predicate`` and
``negate`` too (``negate`` without ``predicate`` is Kafka's error). Beyond Kafka, a
transform's checks at configure time (``No field insertion configured``) and a predicate
alias missing from ``predicates`` are reported here, on the key at fault, rather than
failing the task when it starts. A sink's dead letter queue may not be among its topics.

A source connector's ``topic.creation.*`` keys are validated as Kafka enriches its config
with them (``topic_creation``); a sink's are refused. What Strom does not serve yet is
refused by validation, naming the key, never accepted and ignored.
``exactly.once.support=required``
gets Kafka's preflight checks: the worker must have exactly-once source support and the
connector must support it; so does ``transaction.boundary=connector`` on such a worker
(the connector must say it can define transactions). ``transaction.boundary=interval``
takes ``transaction.boundary.interval.ms``.

Does not own the plugins' own keys (each connector's ``CONFIG_DEF``) or the worker's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from strom.config import ConfigError
from strom.connect import config_def as cd
from strom.connect import topic_creation
from strom.connect.api import Connector, SourceConnector
from strom.connect.converters import (
    Converter,
    HeaderConverter,
    header_converter_class,
    header_converter_names,
)
from strom.connect.plugins import SINK, SOURCE, Plugin, PluginNotFound, Plugins
from strom.connect.transforms import chain
from strom.connect.transforms.base import java_list

COMMON = "Common"
TRANSFORMS = "Transforms"
PREDICATES = "Predicates"
ERRORS = "Error Handling"
EXACTLY_ONCE = "Exactly Once Support"
CONVERTER_SIDES = ("key", "value")
CLIENT_OVERRIDE_PREFIXES = {
    "producer": "producer.override.",
    "consumer": "consumer.override.",
    "admin": "admin.override.",
}
NOT_SERVED = "not served by Strom yet"
DEFAULT_HEADER_CONVERTER = "org.apache.kafka.connect.storage.SimpleHeaderConverter"


def _control_free_name(name: str, value: Any) -> None:
    """Kafka's NonEmptyStringWithoutControlChars."""
    if value is None or not str(value):
        raise cd.invalid(name, value, "String may not be empty")
    controls = [c for c in str(value) if ord(c) < 32 or ord(c) == 127]
    if controls:
        codes = ", ".join(str(ord(c)) for c in controls)
        raise cd.invalid(
            name,
            value,
            f"String may not contain control sequences but had the following ASCII chars: {codes}",
        )


def _header_converter(name: str, value: Any) -> None:
    if value is not None and header_converter_class(value) is None:
        raise cd.invalid(
            name,
            value,
            f"Class {value} could not be found: the header converters are "
            + ", ".join(header_converter_names()),
        )


def _only(served: Any, why: str) -> Any:
    """A check refusing every value but ``served`` (what Strom does)."""

    def check(name: str, value: Any) -> None:
        if value not in (served, None):
            raise cd.invalid(name, value if not isinstance(value, list) else ",".join(value), why)

    return check


def _common_keys() -> list[cd.ConfigKey]:
    def common(order: int, key: cd.ConfigKey) -> cd.ConfigKey:
        return replace(key, group=COMMON, order_in_group=order)

    return [
        common(
            1,
            cd.ConfigKey(
                "name",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "Globally unique name to use for this connector.",
                width="MEDIUM",
                display_name="Connector name",
                check=_control_free_name,
            ),
        ),
        common(
            2,
            cd.ConfigKey(
                "connector.class",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "Name or alias of the class for this connector.",
                width="LONG",
                display_name="Connector class",
            ),
        ),
        common(
            3,
            cd.ConfigKey(
                "tasks.max",
                cd.INT,
                1,
                cd.HIGH,
                "Maximum number of tasks to use for this connector.",
                width="SHORT",
                display_name="Tasks max",
                check=cd.at_least(1),
            ),
        ),
        common(
            4,
            cd.ConfigKey(
                "tasks.max.enforce",
                cd.BOOLEAN,
                True,
                cd.LOW,
                "Whether a connector generating more task configs than tasks.max fails.",
                display_name="Enforce tasks max",
            ),
        ),
        common(
            5,
            cd.ConfigKey(
                "key.converter",
                cd.CLASS,
                None,
                cd.LOW,
                "Converter class for the keys of this connector's records; the worker's "
                "key.converter when unset.",
                width="SHORT",
                display_name="Key converter class",
            ),
        ),
        common(
            6,
            cd.ConfigKey(
                "value.converter",
                cd.CLASS,
                None,
                cd.LOW,
                "Converter class for the values of this connector's records; the worker's "
                "value.converter when unset.",
                width="SHORT",
                display_name="Value converter class",
            ),
        ),
        common(
            7,
            cd.ConfigKey(
                "header.converter",
                cd.CLASS,
                None,
                cd.LOW,
                "HeaderConverter class for the headers of this connector's records; the "
                "worker's header.converter when unset.",
                width="SHORT",
                display_name="Header converter class",
                check=_header_converter,
            ),
        ),
        common(
            8,
            cd.ConfigKey(
                "config.action.reload",
                cd.STRING,
                "restart",
                cd.LOW,
                "What to do when configuration providers change a value: none or restart.",
                width="MEDIUM",
                display_name="Reload Action",
                check=cd.one_of("none", "restart", case_sensitive=False),
            ),
        ),
        cd.ConfigKey(
            "transforms",
            cd.LIST,
            "",
            cd.LOW,
            "Aliases for the transformations to be applied to records.",
            group=TRANSFORMS,
            order_in_group=1,
            width="LONG",
            display_name="Transforms",
            check=_unique_aliases,
        ),
        cd.ConfigKey(
            "predicates",
            cd.LIST,
            "",
            cd.LOW,
            "Aliases for the predicates used by transformations.",
            group=PREDICATES,
            order_in_group=1,
            width="LONG",
            display_name="Predicates",
            check=_unique_aliases,
        ),
        cd.ConfigKey(
            "errors.retry.timeout",
            cd.LONG,
            0,
            cd.MEDIUM,
            "The maximum duration in milliseconds that a failed operation will be reattempted. "
            "The default is 0, which means no retries will be attempted. Use -1 for infinite "
            "retries.",
            group=ERRORS,
            order_in_group=1,
            width="MEDIUM",
            display_name="Retry Timeout for Errors",
        ),
        cd.ConfigKey(
            "errors.retry.delay.max.ms",
            cd.LONG,
            60000,
            cd.MEDIUM,
            "The maximum duration in milliseconds between consecutive retry attempts. Jitter "
            "will be added to the delay once this limit is reached to prevent thundering herd "
            "issues.",
            group=ERRORS,
            order_in_group=2,
            width="MEDIUM",
            display_name="Maximum Delay Between Retries for Errors",
        ),
        cd.ConfigKey(
            "errors.tolerance",
            cd.STRING,
            "none",
            cd.MEDIUM,
            "Behavior for tolerating errors during connector operation. 'none' is the default "
            "value and signals that any error will result in an immediate connector task "
            "failure; 'all' changes the behavior to skip over problematic records.",
            group=ERRORS,
            order_in_group=3,
            width="SHORT",
            display_name="Error Tolerance",
            check=cd.one_of("none", "all"),
        ),
        cd.ConfigKey(
            "errors.log.enable",
            cd.BOOLEAN,
            False,
            cd.MEDIUM,
            "If true, write each error and the details of the failed operation and problematic "
            "record to the Connect application log. This is 'false' by default, so that only "
            "errors that are not tolerated are reported.",
            group=ERRORS,
            order_in_group=4,
            width="SHORT",
            display_name="Log Errors",
        ),
        cd.ConfigKey(
            "errors.log.include.messages",
            cd.BOOLEAN,
            False,
            cd.MEDIUM,
            "Whether to include in the log the Connect record that resulted in a failure. For "
            "sink records, the topic, partition, offset, and timestamp will be logged. For source "
            "records, the record itself will be logged.",
            group=ERRORS,
            order_in_group=5,
            width="SHORT",
            display_name="Log Error Details",
        ),
    ]


def _sink_keys() -> list[cd.ConfigKey]:
    return [
        cd.ConfigKey(
            "topics",
            cd.LIST,
            "",
            cd.HIGH,
            "List of topics to consume, separated by commas",
            group=COMMON,
            order_in_group=4,
            width="LONG",
            display_name="Topics",
        ),
        cd.ConfigKey(
            "topics.regex",
            cd.STRING,
            "",
            cd.HIGH,
            "Regular expression giving topics to consume. Only one of topics or topics.regex "
            "should be specified.",
            group=COMMON,
            order_in_group=4,
            width="LONG",
            display_name="Topics regex",
            check=_regex,
        ),
        cd.ConfigKey(
            "errors.deadletterqueue.topic.name",
            cd.STRING,
            "",
            cd.MEDIUM,
            "The name of the topic to be used as the dead letter queue (DLQ) for messages that "
            "result in an error when processed by this sink connector, or its transformations "
            "or converters. The topic name is blank by default, which means that no messages "
            "are to be recorded in the DLQ.",
            group=ERRORS,
            order_in_group=6,
            width="MEDIUM",
            display_name="Dead Letter Queue Topic Name",
        ),
        cd.ConfigKey(
            "errors.deadletterqueue.topic.replication.factor",
            cd.SHORT,
            3,
            cd.MEDIUM,
            "Replication factor used to create the dead letter queue topic when it doesn't "
            "already exist.",
            group=ERRORS,
            order_in_group=7,
            width="MEDIUM",
            display_name="Dead Letter Queue Topic Replication Factor",
        ),
        cd.ConfigKey(
            "errors.deadletterqueue.context.headers.enable",
            cd.BOOLEAN,
            False,
            cd.MEDIUM,
            "If true, add headers containing error context to the messages written to the "
            "dead letter queue.",
            group=ERRORS,
            order_in_group=8,
            width="MEDIUM",
            display_name="Enable Error Context Headers",
        ),
    ]


def _source_keys() -> list[cd.ConfigKey]:
    return [
        cd.ConfigKey(
            "exactly.once.support",
            cd.STRING,
            "requested",
            cd.MEDIUM,
            "Whether exactly-once support is required of the connector: requested or required.",
            group=EXACTLY_ONCE,
            order_in_group=1,
            width="SHORT",
            display_name="Exactly once support",
            check=_exactly_once,
        ),
        cd.ConfigKey(
            "transaction.boundary",
            cd.STRING,
            "poll",
            cd.MEDIUM,
            "How transactions are defined for exactly-once source support: poll, interval "
            "or connector.",
            group=EXACTLY_ONCE,
            order_in_group=2,
            width="SHORT",
            display_name="Transaction Boundary",
            check=cd.one_of("poll", "interval", "connector", case_sensitive=False),
        ),
        cd.ConfigKey(
            "transaction.boundary.interval.ms",
            cd.LONG,
            None,
            cd.LOW,
            "If 'transaction.boundary' is set to 'interval', determines the interval for "
            "producer transaction commits by connector tasks. If unset, defaults to the value "
            "of the worker-level 'offset.flush.interval.ms' property. It has no effect if a "
            "different transaction.boundary is specified.",
            group=EXACTLY_ONCE,
            order_in_group=3,
            width="SHORT",
            display_name="Transaction boundary interval",
            check=cd.at_least(0),
        ),
        cd.ConfigKey(
            "offsets.storage.topic",
            cd.STRING,
            None,
            cd.LOW,
            "A separate offsets topic for this connector; Strom keeps every connector's "
            "offsets in the worker's offset store.",
            group=EXACTLY_ONCE,
            order_in_group=4,
            width="LONG",
            display_name="Offsets topic",
            check=_only(None, f"a connector's own offsets topic is {NOT_SERVED}"),
        ),
    ]


def _unique_aliases(name: str, value: Any) -> None:
    if value and len(value) != len(set(value)):
        raise cd.invalid(name, java_list(value), "Duplicate alias provided.")


def _regex(name: str, value: Any) -> None:
    if value:
        try:
            re.compile(value)
        except re.error as exc:
            raise cd.invalid(name, value, f"not a valid regular expression: {exc}") from None


def _exactly_once(name: str, value: Any) -> None:
    cd.one_of("requested", "required", case_sensitive=False)(name, value)


def _check_exactly_once(
    props: Mapping[str, str],
    values: dict[str, cd.ConfigValue],
    connector: SourceConnector,
    worker_support: bool,
) -> None:
    """Kafka's preflight checks of exactly-once source support (KIP-618)."""
    if (props.get("exactly.once.support") or "requested").lower() == "required":
        if not worker_support:
            message = "This worker does not have exactly-once source support enabled."
        elif not connector.exactly_once_support(props):
            message = (
                "The connector does not support exactly-once semantics with the provided "
                "configuration."
            )
        else:
            message = ""
        if message:
            values["exactly.once.support"].errors.append(message)
    boundary = (props.get("transaction.boundary") or "poll").lower()
    if (
        worker_support
        and boundary == "connector"
        and not values["transaction.boundary"].errors
        and not connector.can_define_transaction_boundaries(props)
    ):
        values["transaction.boundary"].errors.append(
            "The connector does not support connector-defined transaction boundaries with "
            "the given configuration."
        )


COMMON_DEF = cd.ConfigDef(_common_keys())
SOURCE_DEF = COMMON_DEF.merged(cd.ConfigDef(_source_keys()))
SINK_DEF = COMMON_DEF.merged(cd.ConfigDef(_sink_keys()))


class InvalidConnectorConfig(ValueError):
    """A connector config that cannot run; the message is Kafka's (a 400 answer)."""


def connector_plugin(props: Mapping[str, str], plugins: Plugins) -> Plugin:
    """The connector plugin a config names; InvalidConnectorConfig when none or unknown."""
    name = props.get("connector.class")
    if name is None:
        raise InvalidConnectorConfig(f"Connector config {dict(props)} contains no connector type")
    try:
        return plugins.connector(name)
    except PluginNotFound as exc:
        raise InvalidConnectorConfig(str(exc)) from None


def connector_def(plugin: Plugin) -> cd.ConfigDef:
    return SOURCE_DEF if plugin.kind == SOURCE else SINK_DEF


def validate(
    props: Mapping[str, str], plugins: Plugins, exactly_once_source: bool = False
) -> dict[str, Any]:
    """Kafka's ConfigInfos of ``props``: every key's definition and value, every error
    (``exactly_once_source``: whether the worker writes source records in transactions)."""
    plugin = connector_plugin(props, plugins)
    framework = connector_def(plugin)
    values = framework.validate_all(props)
    if plugin.kind == SINK:
        _check_sink_topics(props, values)
        _check_dead_letter_queue(props, values)
    for side in CONVERTER_SIDES:
        _check_converter_class(props, f"{side}.converter", plugins, values)
    connector: Connector = plugin.cls()
    if isinstance(connector, SourceConnector):
        _check_exactly_once(props, values, connector, exactly_once_source)
    own = connector.config()
    values.update(connector.validate(props))
    keys = {**framework.keys, **own.keys}
    groups = [*framework.groups, *(g for g in own.groups if g not in framework.groups)]
    configs = [
        {"definition": key.info(), "value": values[name].info(key.type)}
        for name, key in keys.items()
        if name in values
    ]
    configs += _converter_settings(props, plugins)
    stage_groups, stage_configs = _transform_settings(props, plugins)
    groups += stage_groups
    configs += stage_configs
    if plugin.kind == SOURCE:
        groups += _topic_creation_settings(props, configs)
    else:
        _refuse_topic_creation(props, configs)
    error_count = sum(len(c["value"]["errors"]) for c in configs)
    return {
        "name": props["connector.class"],
        "error_count": error_count,
        "groups": groups,
        "configs": configs,
    }


def _check_sink_topics(props: Mapping[str, str], values: dict[str, cd.ConfigValue]) -> None:
    topics = [t.strip() for t in (props.get("topics") or "").split(",") if t.strip()]
    regex = (props.get("topics.regex") or "").strip()
    if topics and regex:
        message = "topics and topics.regex are mutually exclusive options, but both are set."
    elif not topics and not regex:
        message = "Must configure one of topics or topics.regex"
    else:
        return
    for key in ("topics", "topics.regex"):
        values[key].errors.append(message)


def _check_dead_letter_queue(props: Mapping[str, str], values: dict[str, cd.ConfigValue]) -> None:
    """Kafka's: a sink's dead letter queue may not be a topic it consumes."""
    queue = (props.get("errors.deadletterqueue.topic.name") or "").strip()
    if not queue:
        return
    topics = [t.strip() for t in (props.get("topics") or "").split(",") if t.strip()]
    regex = (props.get("topics.regex") or "").strip()
    if queue in topics:
        values["topics"].errors.append(
            f"The DLQ topic '{queue}' may not be included in the list of topics "
            f"('topics=[{', '.join(topics)}]') consumed by the connector"
        )
    if regex and not values["topics.regex"].errors and re.fullmatch(regex, queue):
        values["topics.regex"].errors.append(
            f"The DLQ topic '{queue}' may not be matched by the regex for the topics "
            f"('topics.regex={regex}') consumed by the connector"
        )


def _transform_settings(
    props: Mapping[str, str], plugins: Plugins
) -> tuple[list[str], list[dict[str, Any]]]:
    """The groups and ConfigInfos each transform and predicate alias adds (Kafka's
    ``ConnectorConfig.enrich``)."""
    groups: list[str] = []
    configs: list[dict[str, Any]] = []
    defined_predicates = chain.aliases(props, chain.PREDICATES)
    for kind, list_key, group_name in (
        ("transform", chain.TRANSFORMS, TRANSFORMS),
        ("predicate", chain.PREDICATES, PREDICATES),
    ):
        base = "Transformation" if kind == "transform" else "Predicate"
        for alias in dict.fromkeys(chain.aliases(props, list_key)):
            prefix = f"{list_key}.{alias}."
            group = f"{group_name}: {alias}"
            groups.append(group)
            type_key = cd.ConfigKey(
                prefix + "type",
                cd.CLASS,
                cd.REQUIRED,
                cd.HIGH,
                f"Class for the '{alias}' {base.lower()}.",
                group=group,
                order_in_group=0,
                width="LONG",
                display_name=f"{base} type for {alias}",
            )
            type_value = cd.ConfigValue(type_key.name, props.get(type_key.name))
            try:
                plugin: Plugin | None = chain.plugin_of(props, plugins, kind, alias)
            except ConfigError as exc:
                plugin = None
                type_value.errors.append(str(exc))
            own = cd.ConfigDef(chain.STAGE_KEYS.keys.values() if kind == "transform" else ())
            if plugin is not None:
                own = plugin.config_def().merged(own)
            keyed = cd.ConfigDef(
                replace(key, name=prefix + key.name, group=group, order_in_group=order)
                for order, key in enumerate(own.keys.values(), start=1)
            )
            results = keyed.validate_all(props)
            settings = chain.settings_under(props, prefix)
            if kind == "transform":
                _check_stage_keys(prefix, settings, defined_predicates, type_value, results)
            if plugin is not None and not any(r.errors for r in results.values()):
                try:
                    chain.configured(plugin, settings, prefix)
                except ConfigError as exc:
                    type_value.errors.append(str(exc))
            configs.append({"definition": type_key.info(), "value": type_value.info(cd.CLASS)})
            configs += [
                {"definition": key.info(), "value": results[name].info(key.type)}
                for name, key in keyed.keys.items()
            ]
    return groups, configs


def _check_stage_keys(
    prefix: str,
    settings: Mapping[str, str],
    defined_predicates: list[str],
    type_value: cd.ConfigValue,
    results: dict[str, cd.ConfigValue],
) -> None:
    """A transform's ``predicate`` and ``negate``, as Kafka checks them (and the alias
    defined, which Kafka finds only when the task starts)."""
    predicate = settings.get(chain.PREDICATE_KEY)
    if chain.NEGATE_KEY in settings and predicate is None:
        type_value.errors.append(
            f"Config '{prefix}{chain.NEGATE_KEY}' was provided but there is no config "
            f"'{prefix}{chain.PREDICATE_KEY}' defining a predicate to be negated."
        )
    if predicate is not None and predicate not in defined_predicates:
        results[prefix + chain.PREDICATE_KEY].errors.append(
            str(
                cd.invalid(
                    prefix + chain.PREDICATE_KEY,
                    predicate,
                    f"the predicate is not among {chain.PREDICATES}="
                    + ",".join(defined_predicates),
                )
            )
        )


def _check_converter_class(
    props: Mapping[str, str], key: str, plugins: Plugins, values: dict[str, cd.ConfigValue]
) -> None:
    name = props.get(key)
    if name and plugins.find(name, ("converter",)) is None:
        values[key].errors.append(str(cd.invalid(key, name, f"Class {name} could not be found.")))


def _converter_settings(props: Mapping[str, str], plugins: Plugins) -> list[dict[str, Any]]:
    """The ConfigInfos of the converters the connector names, their keys prefixed."""
    configs: list[dict[str, Any]] = []
    for side in CONVERTER_SIDES:
        prefix = f"{side}.converter."
        plugin = plugins.find(props.get(f"{side}.converter") or "", ("converter",))
        if plugin is None:
            continue
        own = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
        converter_def = plugin.config_def()
        for name, result in converter_def.validate_all(own).items():
            key = converter_def.keys[name]
            if name == "converter.type":
                continue  # the worker sets it
            definition = key.info() | {"name": prefix + name}
            value = result.info(key.type) | {"name": prefix + name}
            configs.append({"definition": definition, "value": value})
    return configs


def _topic_creation_settings(props: Mapping[str, str], configs: list[dict[str, Any]]) -> list[str]:
    """A source connector's ``topic.creation.*`` keys as Kafka enriches its config with
    them (when it sets any); the groups they add."""
    if not topic_creation.uses_topic_creation(props):
        return []
    keys = topic_creation.config_def(props)
    results = keys.validate_all(props)
    for name, problem in topic_creation.errors_beyond_keys(props).items():
        results[name] = cd.ConfigValue(name, props[name], [problem])
    for name, result in results.items():
        key = keys.keys.get(name) or cd.ConfigKey(name, cd.STRING, None, cd.LOW)
        configs.append({"definition": key.info(), "value": result.info(key.type)})
    return list(keys.groups)


def _refuse_topic_creation(props: Mapping[str, str], configs: list[dict[str, Any]]) -> None:
    """A sink's ``topic.creation.*`` keys: refused in each's value."""
    why = "topic creation settings belong to source connectors; a sink creates no topic"
    for key in sorted(k for k in props if k.startswith(topic_creation.PREFIX)):
        error = str(cd.invalid(key, props[key], why))
        definition = cd.ConfigKey(key, cd.STRING, None, cd.LOW).info()
        value = cd.ConfigValue(key, props[key], [error]).info()
        configs.append({"definition": definition, "value": value})


def errors_of(infos: Mapping[str, Any]) -> list[str]:
    return [error for config in infos["configs"] for error in config["value"]["errors"]]


def invalid_config_message(infos: Mapping[str, Any]) -> str:
    """Kafka's answer to a create or update with errors."""
    errors = errors_of(infos)
    return (
        f"Connector configuration is invalid and contains the following {len(errors)} "
        "error(s):\n"
        + "\n".join(errors)
        + "\nYou can also find the above list of errors at the endpoint "
        "`/connector-plugins/{connectorType}/config/validate`"
    )


def make_converter(
    side: str,
    connector_props: Mapping[str, str],
    worker_props: Mapping[str, str],
    plugins: Plugins,
) -> Converter:
    """The ``side`` ("key" or "value") converter of a connector's tasks: the connector's own
    class and settings when it names one, else the worker's."""
    key = f"{side}.converter"
    props = connector_props if connector_props.get(key) else worker_props
    prefix = key + "."
    plugin = plugins.converter(props[key])
    settings = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    settings["converter.type"] = side
    converter: Converter = plugin.cls()
    converter.configure(settings, is_key=side == "key")
    return converter


def make_header_converter(
    connector_props: Mapping[str, str], worker_props: Mapping[str, str]
) -> HeaderConverter:
    """The header converter of a connector's tasks: the connector's ``header.converter``
    with its ``header.converter.*`` settings when it names one, else the worker's
    (``SimpleHeaderConverter`` by default), as in Kafka."""
    key = "header.converter"
    props = connector_props if connector_props.get(key) else worker_props
    name = props.get(key) or DEFAULT_HEADER_CONVERTER
    cls = header_converter_class(name)
    if cls is None:
        raise InvalidConnectorConfig(f"Class {name} could not be found.")
    prefix = key + "."
    converter = cls()
    converter.configure_header(
        {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    )
    return converter


def client_overrides(props: Mapping[str, str], client: str) -> dict[str, str]:
    """The connector's ``<client>.override.*`` settings for that client, unprefixed."""
    prefix = CLIENT_OVERRIDE_PREFIXES[client]
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}


def parse(props: Mapping[str, str], plugin: Plugin) -> dict[str, Any]:
    """The framework settings of a valid connector config, typed."""
    try:
        return connector_def(plugin).parse(props)
    except ConfigError as exc:
        raise InvalidConnectorConfig(str(exc)) from None
