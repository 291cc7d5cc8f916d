"""A Connect worker's properties, with Kafka Connect's names and defaults, for the
standalone and the distributed worker.

Both: ``bootstrap.servers``, ``key.converter`` and ``value.converter`` (required, as in
Kafka; their settings under ``key.converter.`` / ``value.converter.``, e.g.
``value.converter.schemas.enable``), ``offset.flush.interval.ms`` (60000),
``offset.flush.timeout.ms``, ``task.shutdown.graceful.timeout.ms``, ``listeners``
(``http://127.0.0.1:8083`` by default; an ``https://`` listener takes its TLS settings
from ``listeners.https.ssl.*`` as Kafka Connect's), ``rest.advertised.host.name``,
``rest.advertised.port``, ``rest.advertised.listener``, ``plugin.path`` (accepted and
ignored, with one line saying so: Strom's plugins are Python classes it ships), and the
client security settings (``security.protocol``, ``ssl.*``, ``sasl.*``, Java names
translated by ``strom.client_security``) with ``producer.*``, ``consumer.*`` and
``admin.*`` overrides, passed to the worker's Kafka clients; ``topic.tracking.enable``
and ``topic.tracking.allow.reset`` (both true) govern KIP-558's active topics.

Standalone adds ``offset.storage.file.filename`` (required). Distributed adds
``group.id``, ``config.storage.topic``, ``offset.storage.topic``, ``status.storage.topic``
(required), their ``*.replication.factor`` (3; -1 for the broker's default) and
``offset.storage.partitions`` (25) / ``status.storage.partitions`` (5).

A bad value is a ``ConfigError`` of one line in Kafka's words. A key Strom does not know
is logged once, as Kafka logs an unknown config; one it knows but does not serve
(``exactly.once.source.support`` other than disabled, ``rest.extension.classes``,
``config.providers``) is refused naming it.

Does not own reading the file (the ``strom connect-*`` commands) or the connector's
settings (``connector_config``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.client_security import librdkafka_properties
from strom.config import ConfigError, parse_http_listener
from strom.connect import config_def as cd
from strom.connect.converters import header_converter_class, header_converter_names
from strom.connect.plugins import CONVERTER, Plugins

log = logging.getLogger(__name__)

STANDALONE = "standalone"
DISTRIBUTED = "distributed"
DEFAULT_LISTENER = "http://127.0.0.1:8083"
HTTPS_PREFIX = "listeners.https."
CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")
_SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


def _replication_factor(name: str, value: Any) -> None:
    if value is not None and value != -1 and value < 1:
        raise cd.invalid(
            name, value, "Replication factor must be positive or -1 to use the broker's default"
        )


def _partitions(name: str, value: Any) -> None:
    if value is not None and value != -1 and value < 1:
        raise cd.invalid(
            name, value, "Number of partitions must be positive, or -1 to use the broker's default"
        )


def _listeners(name: str, value: Any) -> None:
    if not value:
        raise cd.invalid(name, "", "at least one listener is needed")
    for listener in value:
        try:
            parse_http_listener(listener, name, schemes=("http", "https"))
        except ConfigError as exc:
            raise cd.invalid(name, ",".join(value), str(exc).split(": ", 1)[-1]) from None


def _converter(name: str, value: Any) -> None:
    if value is not None and Plugins.builtin().find(value, (CONVERTER,)) is None:
        raise cd.invalid(name, value, f"Class {value} could not be found.")


def _header_converter(name: str, value: Any) -> None:
    if value is not None and header_converter_class(value) is None:
        raise cd.invalid(
            name,
            value,
            f"Class {value} could not be found: the header converters are "
            + ", ".join(header_converter_names()),
        )


def _refuse(served: Any, why: str) -> Any:
    def check(name: str, value: Any) -> None:
        if value not in (served, None, []):
            raise cd.invalid(name, value if not isinstance(value, list) else ",".join(value), why)

    return check


COMMON_KEYS = [
    cd.ConfigKey(
        "bootstrap.servers",
        cd.LIST,
        "localhost:9092",
        cd.HIGH,
        "A list of host/port pairs to use for establishing the initial connection to the "
        "Kafka cluster.",
    ),
    cd.ConfigKey(
        "key.converter",
        cd.CLASS,
        cd.REQUIRED,
        cd.HIGH,
        "Converter class used to convert between Kafka Connect format and the serialized "
        "form that is written to Kafka (record keys).",
        check=_converter,
    ),
    cd.ConfigKey(
        "value.converter",
        cd.CLASS,
        cd.REQUIRED,
        cd.HIGH,
        "Converter class used to convert between Kafka Connect format and the serialized "
        "form that is written to Kafka (record values).",
        check=_converter,
    ),
    cd.ConfigKey(
        "header.converter",
        cd.CLASS,
        "org.apache.kafka.connect.storage.SimpleHeaderConverter",
        cd.LOW,
        "HeaderConverter class used to convert between Kafka Connect format and the "
        "serialized form that is written to Kafka (record headers).",
        check=_header_converter,
    ),
    cd.ConfigKey(
        "offset.flush.interval.ms",
        cd.LONG,
        60000,
        cd.LOW,
        "Interval at which to try committing offsets for tasks.",
        check=cd.at_least(1),
    ),
    cd.ConfigKey(
        "offset.flush.timeout.ms",
        cd.LONG,
        5000,
        cd.LOW,
        "Maximum number of milliseconds to wait for records to flush before an offset commit "
        "fails.",
        check=cd.at_least(1),
    ),
    cd.ConfigKey(
        "task.shutdown.graceful.timeout.ms",
        cd.LONG,
        5000,
        cd.LOW,
        "Amount of time to wait for tasks to shutdown gracefully.",
        check=cd.at_least(0),
    ),
    cd.ConfigKey(
        "listeners",
        cd.LIST,
        DEFAULT_LISTENER,
        cd.LOW,
        "URIs the REST API will listen on: http://HOST:PORT or https://HOST:PORT.",
        check=_listeners,
    ),
    cd.ConfigKey(
        "rest.advertised.host.name",
        cd.STRING,
        None,
        cd.LOW,
        "The hostname given out to other workers to connect to.",
    ),
    cd.ConfigKey(
        "rest.advertised.port",
        cd.INT,
        None,
        cd.LOW,
        "The port given out to other workers to connect to.",
    ),
    cd.ConfigKey(
        "rest.advertised.listener",
        cd.STRING,
        None,
        cd.LOW,
        "The advertised listener (HTTP or HTTPS) given out to other workers.",
        check=cd.one_of("http", "https", case_sensitive=False),
    ),
    cd.ConfigKey(
        "plugin.path",
        cd.LIST,
        None,
        cd.LOW,
        "Where Java plugins are; Strom's plugins are the Python classes it ships, so it is "
        "ignored.",
    ),
    cd.ConfigKey("plugin.discovery", cd.STRING, "hybrid_warn", cd.LOW, "Ignored, as plugin.path."),
    cd.ConfigKey("client.id", cd.STRING, "", cd.LOW, "Prefix of the worker's Kafka client ids."),
    cd.ConfigKey(
        "exactly.once.source.support",
        cd.STRING,
        "disabled",
        cd.HIGH,
        "Exactly-once source support (KIP-618): enabled writes each source task's records "
        "and offsets in transactions (distributed workers); preparing is as disabled.",
        check=cd.one_of("disabled", "preparing", "enabled", case_sensitive=False),
    ),
    cd.ConfigKey(
        "topic.creation.enable",
        cd.BOOLEAN,
        True,
        cd.LOW,
        "Whether connectors may create topics (topic.creation.* of a connector).",
    ),
    cd.ConfigKey(
        "topic.tracking.enable",
        cd.BOOLEAN,
        True,
        cd.LOW,
        "Enable tracking the set of active topics per connector during runtime (KIP-558).",
    ),
    cd.ConfigKey(
        "topic.tracking.allow.reset",
        cd.BOOLEAN,
        True,
        cd.LOW,
        "If set to true, it allows user requests to reset the set of active topics per connector.",
    ),
    cd.ConfigKey(
        "rest.extension.classes",
        cd.LIST,
        "",
        cd.LOW,
        "REST extensions; none is served by Strom yet.",
        check=_refuse([], "REST extensions are Java classes, not served by Strom"),
    ),
    cd.ConfigKey(
        "config.providers",
        cd.LIST,
        "",
        cd.LOW,
        "Config providers; none is served by Strom yet.",
        check=_refuse([], "config providers are not served by Strom yet"),
    ),
]

STANDALONE_KEYS = [
    cd.ConfigKey(
        "offset.storage.file.filename",
        cd.STRING,
        cd.REQUIRED,
        cd.HIGH,
        "File to store source connector offsets in.",
        check=cd.non_empty,
    ),
]


def _topic_keys(kind: str, partitions: int | None) -> list[cd.ConfigKey]:
    keys = [
        cd.ConfigKey(
            f"{kind}.storage.topic",
            cd.STRING,
            cd.REQUIRED,
            cd.HIGH,
            f"The name of the Kafka topic where connector {kind}s are stored.",
            check=cd.non_empty,
        ),
        cd.ConfigKey(
            f"{kind}.storage.replication.factor",
            cd.SHORT,
            3,
            cd.LOW,
            f"Replication factor used when creating the {kind} storage topic.",
            check=_replication_factor,
        ),
    ]
    if partitions is not None:
        keys.append(
            cd.ConfigKey(
                f"{kind}.storage.partitions",
                cd.INT,
                partitions,
                cd.LOW,
                f"The number of partitions used when creating the {kind} storage topic.",
                check=_partitions,
            )
        )
    return keys


DISTRIBUTED_KEYS = [
    cd.ConfigKey(
        "group.id",
        cd.STRING,
        cd.REQUIRED,
        cd.HIGH,
        "A unique string that identifies the Connect cluster group this worker belongs to.",
        check=cd.non_empty,
    ),
    *_topic_keys("config", None),
    *_topic_keys("offset", 25),
    *_topic_keys("status", 5),
    cd.ConfigKey(
        "session.timeout.ms",
        cd.INT,
        10000,
        cd.HIGH,
        "The timeout used to detect worker failures: a worker that sends no heartbeat for "
        "this long is removed from the group and its tasks go to the others.",
        check=cd.at_least(1),
    ),
    cd.ConfigKey(
        "heartbeat.interval.ms",
        cd.INT,
        3000,
        cd.HIGH,
        "The expected time between heartbeats to the group coordinator.",
        check=cd.at_least(1),
    ),
    cd.ConfigKey(
        "rebalance.timeout.ms",
        cd.INT,
        60000,
        cd.HIGH,
        "The maximum time each worker is allowed to join the group once a rebalance has "
        "begun (to stop its tasks and commit their offsets).",
        check=cd.at_least(1),
    ),
]

CONFIG_DEFS = {
    STANDALONE: cd.ConfigDef(COMMON_KEYS + STANDALONE_KEYS),
    DISTRIBUTED: cd.ConfigDef(COMMON_KEYS + DISTRIBUTED_KEYS),
}


@dataclass(frozen=True)
class RestListener:
    scheme: str
    host: str
    port: int


class WorkerConfig:
    """A worker's checked properties: ``values`` typed, ``props`` as given."""

    def __init__(self, props: Mapping[str, str], mode: str) -> None:
        """ConfigError (one line) for a bad or missing value."""
        self.mode = mode
        self.props = {k: v for k, v in props.items()}
        self.values = CONFIG_DEFS[mode].parse(self.props)
        if self.values["plugin.path"]:
            log.info(
                "plugin.path is ignored: Strom's connectors and converters are the Python "
                "classes it ships (GET /connector-plugins lists them)"
            )
        unknown = sorted(k for k in self.props if not self._known(k))
        if unknown:
            log.warning("unknown worker settings, not used: %s", ", ".join(unknown))
        self.client_settings("admin")  # a Java client file Strom cannot translate: ConfigError
        if self.exactly_once_source and mode != DISTRIBUTED:
            raise ConfigError(
                "exactly.once.source.support=enabled needs a distributed worker "
                "(connect-distributed): a standalone worker has no offsets topic to write "
                "in a transaction"
            )

    @property
    def exactly_once_source(self) -> bool:
        """Whether source tasks write their records and offsets in transactions."""
        return str(self.values["exactly.once.source.support"]).lower() == "enabled"

    def _known(self, key: str) -> bool:
        return (
            key in CONFIG_DEFS[self.mode].keys
            or key.startswith(("key.converter.", "value.converter.", HTTPS_PREFIX))
            or key.startswith("spark.")  # the Spark runner's settings (spark_runner)
            or key.startswith(_SECURITY_PREFIXES + CLIENT_PREFIXES)
        )

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def listener(self) -> RestListener:
        scheme, host, port = parse_http_listener(
            self.values["listeners"][0], "listeners", schemes=("http", "https")
        )
        return RestListener(scheme, host, port)

    def https_settings(self) -> dict[str, str]:
        """The TLS settings of an https listener (``listeners.https.ssl.*``, unprefixed)."""
        return {
            k[len(HTTPS_PREFIX) :]: v for k, v in self.props.items() if k.startswith(HTTPS_PREFIX)
        }

    def advertised_url(self, bound_port: int) -> str:
        """The URL other workers and clients reach this worker's REST API at."""
        listener = self.listener
        scheme = (self.values["rest.advertised.listener"] or listener.scheme).lower()
        host = self.values["rest.advertised.host.name"] or listener.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        port = self.values["rest.advertised.port"] or bound_port
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}"

    def client_settings(self, client: str) -> dict[str, Any]:
        """The confluent-kafka settings of the worker's ``client`` ("producer",
        "consumer" or "admin"): bootstrap servers, security, and ``<client>.*``."""
        settings: dict[str, Any] = {"bootstrap.servers": ",".join(self.values["bootstrap.servers"])}
        settings.update({k: v for k, v in self.props.items() if k.startswith(_SECURITY_PREFIXES)})
        prefix = f"{client}."
        settings.update(
            {k[len(prefix) :]: v for k, v in self.props.items() if k.startswith(prefix)}
        )
        if self.values["client.id"]:
            settings["client.id"] = f"{self.values['client.id']}-{client}"
        try:
            return librdkafka_properties(settings)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
