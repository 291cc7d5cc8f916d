"""Typed configuration with Kafka's property names and defaults, in rooms of its own:

- ``values``: what a config value is (``ConfigDef``, parsing, rendering, ``ConfigError``);
- ``broker_keys``: the broker's keys, defaults and the Kafka configs Strom declares but
  does not act on (``KAFKA_ONLY``);
- ``topic_keys`` and ``groups``: the topic and group configs;
- ``listeners``: addresses (listeners, voters, the security protocol map);
- ``dynamic``: what may change at run time;
- ``broker``: a node's effective configuration (``BrokerConfig``) and a topic's.

This package's names are those modules' public ones, imported here so that the rest of
Strom reads ``from strom.config import BrokerConfig``; the modules import one another,
never this package. Does not own where topic overrides are stored
(``strom.cluster.metadata``).
"""

from __future__ import annotations

from strom.config.broker import (
    BrokerConfig,
    effective_topic_configs,
    log_config_for,
    parse_properties,
)
from strom.config.broker_keys import (
    AUTHORIZER_CLASSES,
    BROKER_CONFIGS,
    DEFAULT_PROTOCOL_MAP,
    HTTP_LISTENER_CONFIGS,
    HTTP_LISTENER_PREFIXES,
    KAFKA_ONLY,
    MECHANISM_SCOPED,
    PROCESS_ROLES,
    REGISTRY_CLIENT_CONFIGS,
    ROLE_BROKER,
    ROLE_CONTROLLER,
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    SECURITY_PROTOCOLS,
    SUPPORTED_SECURITY_PROTOCOLS,
    TLS_PROTOCOLS,
    KafkaOnly,
    broker_config_definition,
    check_served,
)
from strom.config.dynamic import (
    DYNAMIC_BROKER_CONFIGS,
    PER_BROKER_CONFIGS,
    check_dynamic_broker_config,
)
from strom.config.groups import (
    GROUP_CONFIGS,
    group_config_values,
    parse_iso_duration_ms,
    validate_group_configs,
)
from strom.config.listeners import (
    NON_ROUTABLE_HOSTS,
    Listener,
    QuorumVoter,
    parse_admin_listener,
    parse_host_port,
    parse_http_listener,
    parse_listener,
    parse_protocol_map,
    parse_voters,
)
from strom.config.topic_keys import TOPIC_CONFIGS, validate_topic_configs
from strom.config.values import (
    DOUBLE_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigSource,
    parse_host_counts,
    render,
    throttled,
)

__all__ = [
    "AUTHORIZER_CLASSES",
    "BROKER_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "DEFAULT_PROTOCOL_MAP",
    "DOUBLE_MAX",
    "DYNAMIC_BROKER_CONFIGS",
    "GROUP_CONFIGS",
    "HTTP_LISTENER_CONFIGS",
    "HTTP_LISTENER_PREFIXES",
    "KAFKA_ONLY",
    "KafkaOnly",
    "LONG_MAX",
    "Listener",
    "MECHANISM_SCOPED",
    "NON_ROUTABLE_HOSTS",
    "PER_BROKER_CONFIGS",
    "PROCESS_ROLES",
    "QuorumVoter",
    "REGISTRY_CLIENT_CONFIGS",
    "ROLE_BROKER",
    "ROLE_CONTROLLER",
    "SASL_MECHANISMS",
    "SASL_PROTOCOLS",
    "SECURITY_PROTOCOLS",
    "SUPPORTED_SECURITY_PROTOCOLS",
    "TLS_PROTOCOLS",
    "TOPIC_CONFIGS",
    "broker_config_definition",
    "check_dynamic_broker_config",
    "check_served",
    "effective_topic_configs",
    "group_config_values",
    "log_config_for",
    "parse_admin_listener",
    "parse_host_counts",
    "parse_host_port",
    "parse_http_listener",
    "parse_iso_duration_ms",
    "parse_listener",
    "parse_properties",
    "parse_protocol_map",
    "parse_voters",
    "render",
    "throttled",
    "validate_group_configs",
    "validate_topic_configs",
]
