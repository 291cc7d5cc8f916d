"""Typed broker and topic configuration with Kafka's property names and defaults.

Owns: parsing ``server.properties`` and ``--override key=value`` pairs, validating
every value (a bad one is a ConfigError with one readable line), the table of
topic-level configs with the broker property that supplies each default, and the
translation of a topic's effective configs into a storage ``LogConfig``; and the Kafka
broker configs Strom declares but does not act on (``KAFKA_ONLY``): each accepts only
values under which Strom behaves as Kafka would, any other is refused naming the key.

Also owns the node's cluster settings as KRaft has them: ``process.roles``, the quorum
(``controller.quorum.voters``, ``controller.quorum.bootstrap.servers``), which listeners
serve controllers (``controller.listener.names``) and which serve clients, the listener
security protocol map, and the checks Kafka's KafkaConfig makes of them; the ``ssl.*``
and ``sasl.*`` settings, each also per listener as ``listener.name.<listener>.<key>``
(``listener_value``, ``jaas_config``). The default node is broker and controller at
once with no voters configured: a quorum of itself alone, which needs no controller
listener (``strom broker`` with no arguments). And the names of the HTTP listeners'
TLS and basic authentication settings (``HTTP_LISTENER_CONFIGS``, taken by the broker
prefixed per listener: ``admin.``, ``schema.registry.``, ``rest.proxy.``), whose meaning
is ``strom.services.http_security``'s.

Does not own: where topic overrides are stored (``strom.cluster.metadata``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any

from strom.storage.log_config import LogConfig

log = logging.getLogger(__name__)

DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE: no limit
LONG_MAX = 9223372036854775807


class ConfigSource(IntEnum):
    """Where a config value comes from, numbered as Kafka's DescribeConfigs reports it."""

    DYNAMIC_TOPIC = 1
    DYNAMIC_BROKER = 2
    DYNAMIC_DEFAULT_BROKER = 3
    STATIC_BROKER = 4
    DEFAULT = 5
    DYNAMIC_GROUP = 8


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is one line for users."""


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _parse_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@dataclass(frozen=True)
class ConfigDef:
    """One config key: its type, default, and allowed values."""

    name: str
    kind: str  # int, long, bool, string, list, double, password, replicas
    default: Any
    doc: str = ""
    minimum: float | None = None
    choices: tuple[str, ...] | None = None
    # The broker property that supplies a topic config's default, if any.
    broker_name: str | None = None
    # A check of the parsed value beyond its kind (ValueError says what is wrong).
    check: Callable[[Any], object] | None = None

    def parse(self, raw: str | None) -> Any:
        if raw is None:
            return None
        try:
            if self.kind in ("int", "long"):
                value: Any = int(raw.strip())
                limit = 2**31 - 1 if self.kind == "int" else LONG_MAX
                if not -limit - 1 <= value <= limit:
                    raise ValueError(f"out of range for {self.kind}")
            elif self.kind == "double":
                value = float(raw.strip())
            elif self.kind == "bool":
                value = _parse_bool(raw)
            elif self.kind == "list":
                value = _parse_list(raw)
            elif self.kind == "replicas":
                value = _parse_throttled_replicas(raw)
            else:
                value = raw.strip()
            if self.check is not None:
                self.check(value)
        except ValueError as exc:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: {exc}"
            ) from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: "
                f"value must be at least {self.minimum:g}"
            )
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(
                        f"Invalid value {raw!r} for configuration {self.name}: "
                        f"must be one of {', '.join(self.choices)}"
                    )
        return value


def parse_host_counts(value: str) -> list[tuple[str, int]]:
    """``host:count,host:count`` (max.connections.per.ip.overrides) as (host, count)
    pairs, an IPv6 host without its brackets; ValueError for a bad entry."""
    pairs = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        pairs.append((host.strip().strip("[]"), int(count)))
    return pairs


def render(value: Any) -> str | None:
    """A parsed value back in Kafka's string form."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


ROLE_BROKER = "broker"
ROLE_CONTROLLER = "controller"
PROCESS_ROLES = (ROLE_BROKER, ROLE_CONTROLLER)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = SECURITY_PROTOCOLS
# Kafka's default map, plus CONTROLLER:PLAINTEXT so a controller listener needs no map entry.
DEFAULT_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT",
    "SSL:SSL",
    "SASL_PLAINTEXT:SASL_PLAINTEXT",
    "SASL_SSL:SASL_SSL",
    "CONTROLLER:PLAINTEXT",
)

_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CLEANUP = ("delete", "compact")
_GROUP_ASSIGNORS = (
    "uniform",
    "range",
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
)

# The TLS and HTTP basic authentication settings of an HTTP listener, in the names the
# standalone services take in their --config (Confluent's; ``strom.services.http_security``
# reads them). The broker takes them prefixed with the listener they secure
# (``HTTP_LISTENER_PREFIXES``: ``admin.ssl.keystore.location``,
# ``schema.registry.authentication.method``, ``rest.proxy.authentication.users.file``...).
HTTP_LISTENER_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("ssl.keystore.type", "string", "PEM"),
    ConfigDef("ssl.keystore.location", "string", None),
    ConfigDef("ssl.keystore.password", "password", None),
    ConfigDef("ssl.key.password", "password", None),
    ConfigDef("ssl.truststore.type", "string", "PEM"),
    ConfigDef("ssl.truststore.location", "string", None),
    ConfigDef(
        "ssl.client.authentication",
        "string",
        "NONE",
        choices=("NONE", "REQUESTED", "REQUIRED"),
    ),
    ConfigDef("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
    ConfigDef("ssl.cipher.suites", "list", []),
    ConfigDef("authentication.method", "string", "NONE", choices=("NONE", "BASIC")),
    ConfigDef("authentication.users.file", "string", None),
    ConfigDef("authentication.realm", "string", "Strom"),
    ConfigDef("authentication.roles", "list", ["*"]),
)
# The settings with which a service reaches a schema registry (confluent-kafka's
# SchemaRegistryClient names), prefixed ``schema.registry.`` in a service's --config.
REGISTRY_CLIENT_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("basic.auth.user.info", "password", None),
    ConfigDef("basic.auth.credentials.source", "string", None),
    ConfigDef("ssl.ca.location", "string", None),
    ConfigDef("ssl.certificate.location", "string", None),
    ConfigDef("ssl.key.location", "string", None),
)
# Broker property prefix -> the HTTP listener it secures: /metrics and /health, and the
# schema registry and REST proxy served inside the broker.
HTTP_LISTENER_PREFIXES = {
    "admin.": "admin.listeners",
    "schema.registry.": "schema.registry.listener",
    "rest.proxy.": "rest.proxy.listener",
}


def _http_listener_configs(prefix: str) -> list[ConfigDef]:
    """The broker's form of one HTTP listener's settings: the listener's own, and for the
    REST proxy those it reaches the (embedded) registry with."""
    configs = [replace(d, name=prefix + d.name) for d in HTTP_LISTENER_CONFIGS]
    if prefix == "rest.proxy.":
        registry = [
            replace(d, name=f"{prefix}schema.registry.{d.name}") for d in REGISTRY_CLIENT_CONFIGS
        ]
        configs.extend(registry)
    return configs


BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef("node.id", "int", 1, minimum=0),
        ConfigDef("broker.id", "int", None, minimum=-1),
        ConfigDef("cluster.id", "string", None),
        ConfigDef("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"]),
        ConfigDef("advertised.listeners", "list", None),
        # The HTTP admin listener (metrics, health): http://HOST:PORT or https://HOST:PORT;
        # off when empty. admin.ssl.* and admin.authentication.* as the services take them
        # (basic authentication guards /metrics; /health/* stays open for probes).
        ConfigDef("admin.listeners", "list", []),
        *_http_listener_configs("admin."),
        # The schema registry and REST proxy served inside the broker process (as clients of
        # its first PLAINTEXT client listener): http(s)://HOST:PORT; off when unset; each
        # with the standalone service's settings prefixed schema.registry. or rest.proxy.
        ConfigDef("schema.registry.listener", "string", None),
        *_http_listener_configs("schema.registry."),
        ConfigDef("rest.proxy.listener", "string", None),
        *_http_listener_configs("rest.proxy."),
        ConfigDef("log.dirs", "list", None),
        ConfigDef("log.dir", "string", "./strom-data"),
        ConfigDef("num.partitions", "int", 1, minimum=1),
        ConfigDef("default.replication.factor", "int", 1, minimum=1),
        ConfigDef("auto.create.topics.enable", "bool", True),
        ConfigDef("delete.topic.enable", "bool", True),
        ConfigDef("message.max.bytes", "int", 1048588, minimum=0),
        ConfigDef("socket.request.max.bytes", "int", 104857600, minimum=1),
        # What large request frames being received may hold in all (-1: no bound).
        ConfigDef("queued.max.request.bytes", "long", -1, minimum=-1),
        ConfigDef("log.segment.bytes", "int", 1073741824, minimum=14),
        ConfigDef("log.roll.hours", "int", 168, minimum=1),
        ConfigDef("log.roll.ms", "long", None, minimum=1),
        ConfigDef("log.index.interval.bytes", "int", 4096, minimum=0),
        ConfigDef("log.index.size.max.bytes", "int", 10485760, minimum=4),
        ConfigDef("log.flush.interval.messages", "long", LONG_MAX, minimum=1),
        ConfigDef("log.flush.interval.ms", "long", None, minimum=0),
        ConfigDef("log.flush.scheduler.interval.ms", "long", 1000, minimum=1),
        ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, minimum=0),
        ConfigDef("log.retention.hours", "int", 168),
        ConfigDef("log.retention.minutes", "int", None),
        ConfigDef("log.retention.ms", "long", None),
        ConfigDef("log.retention.bytes", "long", -1),
        ConfigDef("log.retention.check.interval.ms", "long", 300000, minimum=1),
        ConfigDef("log.cleanup.policy", "list", ["delete"], choices=_CLEANUP),
        ConfigDef("log.message.timestamp.type", "string", "CreateTime", choices=_TIMESTAMP_TYPES),
        ConfigDef("log.message.timestamp.before.max.ms", "long", LONG_MAX, minimum=0),
        ConfigDef("log.message.timestamp.after.max.ms", "long", 3600000, minimum=0),
        ConfigDef("log.cleaner.enable", "bool", True),
        ConfigDef("log.cleaner.backoff.ms", "long", 15000, minimum=1),
        ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134217728, minimum=1024),
        # How full the cleaner's offset map (24 bytes a key) may get in one pass.
        ConfigDef("log.cleaner.io.buffer.load.factor", "double", 0.9),
        ConfigDef("log.cleaner.io.max.bytes.per.second", "double", DOUBLE_MAX, minimum=1),
        ConfigDef("log.cleaner.delete.retention.ms", "long", 86400000, minimum=0),
        ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, minimum=0),
        ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, minimum=0),
        ConfigDef("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, minimum=1),
        ConfigDef("log.segment.delete.delay.ms", "long", 60000, minimum=0),
        ConfigDef("compression.type", "string", "producer", choices=_COMPRESSION),
        ConfigDef("min.insync.replicas", "int", 1, minimum=1),
        ConfigDef("unclean.leader.election.enable", "bool", False),
        ConfigDef("auto.leader.rebalance.enable", "bool", True),
        # Bytes/s of throttled replicas' replication (dynamic; reassign-partitions sets them).
        ConfigDef("leader.replication.throttled.rate", "long", LONG_MAX, minimum=0),
        ConfigDef("follower.replication.throttled.rate", "long", LONG_MAX, minimum=0),
        ConfigDef("leader.imbalance.per.broker.percentage", "int", 10, minimum=0),
        ConfigDef("leader.imbalance.check.interval.seconds", "long", 300, minimum=1),
        ConfigDef("num.replica.fetchers", "int", 1, minimum=1),
        ConfigDef("replica.fetch.max.bytes", "int", 1048576, minimum=0),
        ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, minimum=0),
        ConfigDef("replica.fetch.wait.max.ms", "int", 500, minimum=0),
        ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, minimum=0),
        # The broker's own log lines (strom/cli/broker_logging.py): text or JSON on stderr,
        # and a rotated file beside it when log.file names one.
        ConfigDef("log.format", "string", "text", choices=("text", "json")),
        ConfigDef("log.file", "string", ""),
        ConfigDef("log.file.max.bytes", "long", 104857600, minimum=1),
        ConfigDef("log.file.backup.count", "int", 10, minimum=0),
        ConfigDef("replica.fetch.min.bytes", "int", 1, minimum=1),
        ConfigDef("replica.fetch.backoff.ms", "int", 1000, minimum=0),
        ConfigDef("replica.lag.time.max.ms", "long", 30000, minimum=1),
        ConfigDef("offsets.topic.num.partitions", "int", 50, minimum=1),
        ConfigDef("offsets.topic.replication.factor", "int", 3, minimum=1),
        ConfigDef("offsets.commit.timeout.ms", "int", 5000, minimum=1),
        ConfigDef("offsets.topic.segment.bytes", "int", 104857600, minimum=14),
        ConfigDef("offsets.retention.minutes", "int", 10080, minimum=1),
        ConfigDef("offsets.retention.check.interval.ms", "long", 600000, minimum=1),
        ConfigDef("offset.metadata.max.bytes", "int", 4096, minimum=0),
        ConfigDef("transaction.state.log.num.partitions", "int", 50, minimum=1),
        ConfigDef("transaction.state.log.replication.factor", "int", 3, minimum=1),
        ConfigDef("transaction.state.log.min.isr", "int", 2, minimum=1),
        ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, minimum=14),
        ConfigDef("transaction.max.timeout.ms", "int", 900000, minimum=1),
        # A leader asks the coordinator before a transaction's first batch (KIP-890).
        ConfigDef("transaction.partition.verification.enable", "bool", True),
        ConfigDef("transactional.id.expiration.ms", "int", 604800000, minimum=1),
        # A partition forgets a producer id idle this long (no open transaction, last batch
        # or marker timestamp that old), checked every ...check.interval.ms (an internal
        # config in Kafka, not a dynamic one).
        ConfigDef("producer.id.expiration.ms", "int", 86400000, minimum=1),
        ConfigDef("producer.id.expiration.check.interval.ms", "int", 600000, minimum=1),
        ConfigDef(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, minimum=1
        ),
        ConfigDef(
            "transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, minimum=1
        ),
        ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, minimum=0),
        ConfigDef("group.min.session.timeout.ms", "int", 6000, minimum=0),
        ConfigDef("group.max.session.timeout.ms", "int", 1800000, minimum=0),
        ConfigDef("group.max.size", "int", 2147483647, minimum=1),
        ConfigDef("group.consumer.session.timeout.ms", "int", 45000, minimum=1),
        ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000, minimum=1),
        # The bounds of a group's own consumer.session.timeout.ms and
        # consumer.heartbeat.interval.ms (GROUP_CONFIGS).
        ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000, minimum=1),
        ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000, minimum=1),
        ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000, minimum=1),
        ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000, minimum=1),
        # Connection limits, enforced by strom.security.connection_limits (dynamic),
        # idle connections closed and failed logins answered late by the server.
        ConfigDef("connections.max.idle.ms", "long", 600000, minimum=-1),
        ConfigDef("connection.failed.authentication.delay.ms", "int", 100, minimum=0),
        ConfigDef("max.connections", "int", 2147483647, minimum=0),
        ConfigDef("max.connections.per.ip", "int", 2147483647, minimum=0),
        ConfigDef("max.connections.per.ip.overrides", "string", "", check=parse_host_counts),
        # Kafka broker configs Strom has no machinery for (thread pools, Java classes and
        # providers, Kerberos, tiered storage...): declared with Kafka's types and defaults,
        # so they are described as Kafka describes them; KAFKA_ONLY says which values each
        # accepts, and a value Strom would not act on as Kafka does is refused (at start and
        # by AlterConfigs) with the key's name.
        ConfigDef("log.cleaner.threads", "int", 1, minimum=0),
        ConfigDef("log.cleaner.io.buffer.size", "int", 524288, minimum=0),
        ConfigDef("num.io.threads", "int", 8, minimum=1),
        ConfigDef("num.recovery.threads.per.data.dir", "int", 2, minimum=1),
        ConfigDef("background.threads", "int", 10, minimum=1),
        ConfigDef("metric.reporters", "list", []),
        ConfigDef(
            "principal.builder.class",
            "string",
            "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        ),
        ConfigDef("ssl.protocol", "string", "TLSv1.3"),
        ConfigDef("ssl.provider", "string", None),
        ConfigDef("ssl.keymanager.algorithm", "string", "SunX509"),
        ConfigDef("ssl.trustmanager.algorithm", "string", "PKIX"),
        ConfigDef("ssl.secure.random.implementation", "string", None),
        ConfigDef("ssl.engine.factory.class", "string", None),
        ConfigDef("sasl.kerberos.service.name", "string", None),
        ConfigDef("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit"),
        ConfigDef("sasl.kerberos.ticket.renew.window.factor", "double", 0.8),
        ConfigDef("sasl.kerberos.ticket.renew.jitter", "double", 0.05),
        ConfigDef("sasl.kerberos.min.time.before.relogin", "long", 60000),
        ConfigDef("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"]),
        ConfigDef("sasl.login.refresh.window.factor", "double", 0.8, minimum=0.5),
        ConfigDef("sasl.login.refresh.window.jitter", "double", 0.05, minimum=0),
        ConfigDef("sasl.login.refresh.min.period.seconds", "int", 60, minimum=0),
        ConfigDef("sasl.login.refresh.buffer.seconds", "int", 300, minimum=0),
        ConfigDef("max.connection.creation.rate", "int", 2147483647, minimum=0),
        ConfigDef("num.network.threads", "int", 3, minimum=1),
        ConfigDef("remote.log.index.file.cache.total.size.bytes", "long", 1073741824, minimum=1),
        ConfigDef("remote.fetch.max.wait.ms", "int", 500, minimum=1),
        ConfigDef("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, minimum=1),
        ConfigDef("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, minimum=1),
        ConfigDef("remote.list.offsets.request.timeout.ms", "long", 30000, minimum=1),
        ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, minimum=1),
        ConfigDef(
            "group.consumer.assignors", "list", ["uniform", "range"], choices=_GROUP_ASSIGNORS
        ),
        # Members of one KIP-848 group; a newcomer past it gets GROUP_MAX_SIZE_REACHED.
        ConfigDef("group.consumer.max.size", "int", 2147483647, minimum=1),
        # Share groups (KIP-932; strom/coordinator/share_*.py): served when the cluster's
        # share.version feature is 1 (a new cluster's level, strom/cluster/features.py) or
        # this is true, as Kafka gates them. The group's own share.* configs
        # (GROUP_CONFIGS) override the middle values within the min/max bounds.
        ConfigDef("group.share.enable", "bool", False),
        ConfigDef("group.share.session.timeout.ms", "int", 45000, minimum=1),
        ConfigDef("group.share.min.session.timeout.ms", "int", 45000, minimum=1),
        ConfigDef("group.share.max.session.timeout.ms", "int", 60000, minimum=1),
        ConfigDef("group.share.heartbeat.interval.ms", "int", 5000, minimum=1),
        ConfigDef("group.share.min.heartbeat.interval.ms", "int", 5000, minimum=1),
        ConfigDef("group.share.max.heartbeat.interval.ms", "int", 15000, minimum=1),
        ConfigDef("group.share.record.lock.duration.ms", "int", 30000, minimum=1000),
        ConfigDef("group.share.min.record.lock.duration.ms", "int", 15000, minimum=1000),
        ConfigDef("group.share.max.record.lock.duration.ms", "int", 60000, minimum=1000),
        ConfigDef("group.share.delivery.count.limit", "int", 5, minimum=2),
        ConfigDef("group.share.partition.max.record.locks", "int", 2000, minimum=100),
        ConfigDef("group.share.max.size", "int", 200, minimum=1),
        ConfigDef("group.share.max.share.sessions", "int", 2000, minimum=1),
        # __share_group_state, the share-partitions' durable state (share_state.py).
        ConfigDef("share.coordinator.state.topic.num.partitions", "int", 50, minimum=1),
        ConfigDef("share.coordinator.state.topic.replication.factor", "int", 3, minimum=1),
        ConfigDef("share.coordinator.state.topic.segment.bytes", "int", 104857600, minimum=14),
        ConfigDef("share.coordinator.write.timeout.ms", "int", 5000, minimum=1),
        ConfigDef("max.open.segment.files", "int", 512, minimum=16),
        # KRaft: roles, the metadata quorum and the listeners that reach it.
        ConfigDef("process.roles", "list", ["broker", "controller"]),
        ConfigDef("controller.quorum.voters", "list", []),
        ConfigDef("controller.quorum.bootstrap.servers", "list", []),
        ConfigDef("controller.listener.names", "list", ["CONTROLLER"]),
        ConfigDef("inter.broker.listener.name", "string", None),
        ConfigDef("listener.security.protocol.map", "string", ",".join(DEFAULT_PROTOCOL_MAP)),
        ConfigDef("broker.rack", "string", None),
        ConfigDef("broker.session.timeout.ms", "int", 9000, minimum=1),
        ConfigDef("broker.heartbeat.interval.ms", "int", 2000, minimum=1),
        ConfigDef("metadata.log.dir", "string", None),
        ConfigDef("metadata.log.segment.bytes", "int", 1073741824, minimum=14),
        ConfigDef("metadata.max.retention.bytes", "long", 104857600),
        ConfigDef("metadata.max.retention.ms", "long", 604800000),
        ConfigDef("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, minimum=1),
        ConfigDef("metadata.log.max.snapshot.interval.ms", "long", 3600000, minimum=0),
        ConfigDef("controller.quorum.election.timeout.ms", "int", 1000, minimum=1),
        ConfigDef("controller.quorum.fetch.timeout.ms", "int", 2000, minimum=1),
        ConfigDef("controller.quorum.election.backoff.max.ms", "int", 1000, minimum=1),
        ConfigDef("controller.quorum.request.timeout.ms", "int", 2000, minimum=1),
        # Authorization (strom.security.authorizer): "" leaves it off, as in Kafka.
        ConfigDef("authorizer.class.name", "string", ""),
        ConfigDef("super.users", "string", ""),
        ConfigDef("allow.everyone.if.no.acl.found", "bool", False),
        # TLS (strom.security.tls): PEM keys and certificates only. Each may be given for
        # one listener as listener.name.<listener>.ssl.* (listener_value).
        ConfigDef("ssl.keystore.type", "string", "PEM"),
        ConfigDef("ssl.keystore.location", "string", None),
        ConfigDef("ssl.keystore.certificate.chain", "password", None),
        ConfigDef("ssl.keystore.key", "password", None),
        ConfigDef("ssl.key.password", "password", None),
        ConfigDef("ssl.truststore.type", "string", "PEM"),
        ConfigDef("ssl.truststore.location", "string", None),
        ConfigDef("ssl.truststore.certificates", "password", None),
        ConfigDef("ssl.client.auth", "string", "none", choices=("none", "requested", "required")),
        ConfigDef("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
        ConfigDef("ssl.cipher.suites", "list", []),
        ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT"),
        ConfigDef("ssl.endpoint.identification.algorithm", "string", "https"),
        # SASL (strom.security.sasl); GSSAPI is Kafka's default and is not served.
        ConfigDef("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
        ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
        ConfigDef("sasl.mechanism.controller.protocol", "string", "GSSAPI"),
        ConfigDef("sasl.jaas.config", "password", None),
        # The largest request read from a SASL connection before it has authenticated.
        ConfigDef("sasl.server.max.receive.size", "int", 524288, minimum=1),
        # OAUTHBEARER (strom.security.oauthbearer): JWTs checked against a JWKS when its
        # URL is set, Kafka's unsecured (alg none) tokens otherwise.
        ConfigDef("sasl.server.callback.handler.class", "string", None),
        ConfigDef("sasl.oauthbearer.jwks.endpoint.url", "string", None),
        ConfigDef("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, minimum=0),
        ConfigDef("sasl.oauthbearer.expected.audience", "list", []),
        ConfigDef("sasl.oauthbearer.expected.issuer", "string", None),
        ConfigDef("sasl.oauthbearer.sub.claim.name", "string", "sub"),
        ConfigDef("sasl.oauthbearer.scope.claim.name", "string", "scope"),
        ConfigDef("sasl.oauthbearer.clock.skew.seconds", "int", 30, minimum=0),
        # Re-authentication (KIP-368): 0 leaves SASL sessions without an end (except an
        # OAUTHBEARER token's expiry).
        ConfigDef("connections.max.reauth.ms", "long", 0, minimum=0),
    ]
}


@dataclass(frozen=True)
class KafkaOnly:
    """A declared Kafka broker config that Strom has no machinery for, and why."""

    why: str
    # The values accepted although they change nothing in Strom (a warning at start says
    # so): those where Kafka's behaviour is Strom's whatever the value. None: only Kafka's
    # default; any other value is refused.
    accepts: Callable[[Any], bool] | None = None


def _any(value: Any) -> bool:
    return True


def _not_negative(value: Any) -> bool:
    return bool(value >= 0)


_THREADS = (
    "it sizes a thread pool of Kafka's JVM; Strom serves on one event loop, with worker "
    "threads of its own for disk and compression"
)
_JAVA = "it names a Java class; Strom "
_JCA = (
    "it selects a Java security provider or algorithm; Strom's TLS is OpenSSL's, configured "
    "with PEM files"
)
_KERBEROS = (
    "Kerberos (GSSAPI) is not served; Strom's SASL mechanisms are PLAIN, SCRAM-SHA-256, "
    "SCRAM-SHA-512 and OAUTHBEARER"
)
_LOGIN_REFRESH = (
    "it refreshes a broker's own OAUTHBEARER or Kerberos login; Strom's nodes log in to each "
    "other with PLAIN or SCRAM, which nothing refreshes"
)
_TIERED = "tiered storage (KIP-405) is not served"
_METADATA_RETENTION = (
    "it bounds the metadata log and snapshots kept; Strom keeps only the latest snapshot and "
    "the log after it, within any bound, and never keeps everything (-1)"
)

# The one table of what Strom does with the Kafka broker configs it declares and does not
# act on; docs/operations.md lists them with the same reasons.
KAFKA_ONLY: dict[str, KafkaOnly] = {
    "num.network.threads": KafkaOnly(_THREADS, _any),
    "num.io.threads": KafkaOnly(_THREADS, _any),
    "background.threads": KafkaOnly(_THREADS, _any),
    "num.recovery.threads.per.data.dir": KafkaOnly(
        "it sizes Kafka's log recovery thread pool; Strom checks each log's unflushed tail at "
        "start without one",
        _any,
    ),
    "log.cleaner.threads": KafkaOnly(
        "it sizes Kafka's cleaner thread pool; Strom's cleaner is one worker, which only "
        "log.cleaner.enable=false stops (not 0 threads)",
        lambda value: bool(value >= 1),
    ),
    "log.cleaner.io.buffer.size": KafkaOnly(
        "it sizes the cleaner's read and write buffers; Strom's cleaner reads and writes whole "
        "batches",
        _any,
    ),
    "ssl.protocol": KafkaOnly(
        "it names the protocol a JVM SSLContext is made for; ssl.enabled.protocols decides the "
        "TLS versions spoken, in Kafka as in Strom",
        _any,
    ),
    "replica.alter.log.dirs.io.max.bytes.per.second": KafkaOnly(
        "it throttles moves of replicas between one broker's log directories; Strom has one "
        "log directory, so nothing moves",
        _any,
    ),
    "metadata.max.retention.bytes": KafkaOnly(_METADATA_RETENTION, _not_negative),
    "metadata.max.retention.ms": KafkaOnly(_METADATA_RETENTION, _not_negative),
    "metric.reporters": KafkaOnly(_JAVA + "serves its metrics on admin.listeners (/metrics)"),
    "principal.builder.class": KafkaOnly(
        _JAVA + "builds principals as Kafka's default builder does (ssl.principal.mapping.rules, "
        "the SASL user name)"
    ),
    "ssl.engine.factory.class": KafkaOnly(
        "it names a Java class; Strom's TLS is OpenSSL's, configured with PEM files"
    ),
    "ssl.provider": KafkaOnly(_JCA),
    "ssl.keymanager.algorithm": KafkaOnly(_JCA),
    "ssl.trustmanager.algorithm": KafkaOnly(_JCA),
    "ssl.secure.random.implementation": KafkaOnly(_JCA),
    "sasl.kerberos.service.name": KafkaOnly(_KERBEROS),
    "sasl.kerberos.kinit.cmd": KafkaOnly(_KERBEROS),
    "sasl.kerberos.ticket.renew.window.factor": KafkaOnly(_KERBEROS),
    "sasl.kerberos.ticket.renew.jitter": KafkaOnly(_KERBEROS),
    "sasl.kerberos.min.time.before.relogin": KafkaOnly(_KERBEROS),
    "sasl.kerberos.principal.to.local.rules": KafkaOnly(_KERBEROS),
    "sasl.login.refresh.window.factor": KafkaOnly(_LOGIN_REFRESH),
    "sasl.login.refresh.window.jitter": KafkaOnly(_LOGIN_REFRESH),
    "sasl.login.refresh.min.period.seconds": KafkaOnly(_LOGIN_REFRESH),
    "sasl.login.refresh.buffer.seconds": KafkaOnly(_LOGIN_REFRESH),
    "remote.log.index.file.cache.total.size.bytes": KafkaOnly(_TIERED),
    "remote.fetch.max.wait.ms": KafkaOnly(_TIERED),
    "remote.log.manager.copy.max.bytes.per.second": KafkaOnly(_TIERED),
    "remote.log.manager.fetch.max.bytes.per.second": KafkaOnly(_TIERED),
    "remote.list.offsets.request.timeout.ms": KafkaOnly(_TIERED),
    "max.connection.creation.rate": KafkaOnly("a connection creation rate is not enforced"),
}


def check_served(key: str, value: Any) -> bool:
    """Whether ``key`` (a broker config, perhaps listener-prefixed) set to ``value`` is
    one Strom accepts and does not act on (KAFKA_ONLY); ConfigError, one line naming the
    key, when Strom would not act on the value as Kafka does. Kafka's default is always
    accepted, and changes nothing."""
    definition = broker_config_definition(key)
    entry = KAFKA_ONLY.get(definition.name) if definition is not None else None
    if entry is None or definition is None or value == definition.default:
        return False
    if entry.accepts is not None and entry.accepts(value):
        return True
    default = render(definition.default)
    fix = "remove it" if default in (None, "") else f"remove it or set Kafka's default, {default}"
    raise ConfigError(f"{key}={render(value)} is refused: {entry.why}; {fix}")


# Security protocols whose listeners speak TLS, and those that authenticate with SASL.
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Settings a listener may give per mechanism: listener.name.<l>.<mechanism>.<key> (and
# the sasl.oauthbearer.* ones).
MECHANISM_SCOPED = frozenset(
    {"sasl.jaas.config", "sasl.server.callback.handler.class", "connections.max.reauth.ms"}
)
# listener.name.<listener>.<key>, and listener.name.<listener>.<mechanism>.sasl.jaas.config
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.(.+)$")

# The authorizer.class.name values that turn on strom.security.authorizer.
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "strom.security.authorizer.StandardAuthorizer",
)

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            "cleanup.policy", "list", ["delete"], choices=_CLEANUP, broker_name="log.cleanup.policy"
        ),
        ConfigDef(
            "compression.type",
            "string",
            "producer",
            choices=_COMPRESSION,
            broker_name="compression.type",
        ),
        ConfigDef(
            "delete.retention.ms",
            "long",
            86400000,
            minimum=0,
            broker_name="log.cleaner.delete.retention.ms",
        ),
        ConfigDef(
            "file.delete.delay.ms",
            "long",
            60000,
            minimum=0,
            broker_name="log.segment.delete.delay.ms",
        ),
        ConfigDef(
            "flush.messages", "long", LONG_MAX, minimum=1, broker_name="log.flush.interval.messages"
        ),
        ConfigDef("flush.ms", "long", LONG_MAX, minimum=0, broker_name="log.flush.interval.ms"),
        ConfigDef(
            "index.interval.bytes", "int", 4096, minimum=0, broker_name="log.index.interval.bytes"
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            "long",
            LONG_MAX,
            minimum=1,
            broker_name="log.cleaner.max.compaction.lag.ms",
        ),
        ConfigDef("max.message.bytes", "int", 1048588, minimum=0, broker_name="message.max.bytes"),
        ConfigDef(
            "message.timestamp.type",
            "string",
            "CreateTime",
            choices=_TIMESTAMP_TYPES,
            broker_name="log.message.timestamp.type",
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            minimum=0,
            broker_name="log.message.timestamp.before.max.ms",
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            "long",
            3600000,
            minimum=0,
            broker_name="log.message.timestamp.after.max.ms",
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            "double",
            0.5,
            minimum=0,
            broker_name="log.cleaner.min.cleanable.ratio",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            "long",
            0,
            minimum=0,
            broker_name="log.cleaner.min.compaction.lag.ms",
        ),
        ConfigDef("min.insync.replicas", "int", 1, minimum=1, broker_name="min.insync.replicas"),
        ConfigDef("retention.bytes", "long", -1, broker_name="log.retention.bytes"),
        ConfigDef("retention.ms", "long", 604800000, minimum=-1, broker_name="log.retention.ms"),
        ConfigDef("segment.bytes", "int", 1073741824, minimum=14, broker_name="log.segment.bytes"),
        ConfigDef(
            "segment.index.bytes",
            "int",
            10485760,
            minimum=4,
            broker_name="log.index.size.max.bytes",
        ),
        ConfigDef("segment.ms", "long", 604800000, minimum=1, broker_name="log.roll.ms"),
        ConfigDef(
            "unclean.leader.election.enable",
            "bool",
            False,
            broker_name="unclean.leader.election.enable",
        ),
        # Replicas whose replication is throttled ("partition:broker,..." or "*"), on the
        # leader's side and on the follower's (reassign-partitions --throttle sets them).
        ConfigDef("leader.replication.throttled.replicas", "replicas", []),
        ConfigDef("follower.replication.throttled.replicas", "replicas", []),
    ]
}

# Broker properties that AlterConfigs and IncrementalAlterConfigs may change at run time:
# Kafka's table (DynamicBrokerConfig.AllDynamicConfigs and the broker quota configs). The
# topic defaults are the first broker synonym of each topic config Strom has (so
# log.retention.ms, not log.retention.hours or .minutes, as Kafka has it).
_DYNAMIC_SECURITY_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.certificates",
    }
)  # only per listener: listener.name.<listener>.<config>
_DYNAMIC_LISTENER_CONFIGS = frozenset(
    {
        "advertised.listeners",
        "listeners",
        "listener.security.protocol.map",
        "principal.builder.class",
        "ssl.protocol",
        "ssl.provider",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.endpoint.identification.algorithm",
        "ssl.secure.random.implementation",
        "ssl.client.auth",
        "ssl.engine.factory.class",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.jaas.config",
        "sasl.enabled.mechanisms",
        "sasl.kerberos.service.name",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "max.connections",
        "max.connection.creation.rate",
        "num.network.threads",
    }
)
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
# Dynamic configs that only a broker of its own may take (not the cluster-wide default).
PER_BROKER_CONFIGS = (
    _DYNAMIC_SECURITY_CONFIGS | _DYNAMIC_LISTENER_CONFIGS
) - _CLUSTER_LEVEL_LISTENER_CONFIGS
DYNAMIC_BROKER_CONFIGS = (
    frozenset(name for d in TOPIC_CONFIGS.values() if (name := d.broker_name))
    | _DYNAMIC_SECURITY_CONFIGS
    | _DYNAMIC_LISTENER_CONFIGS
    | {
        # the log cleaner
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        # thread pools, metrics, connections
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "metric.reporters",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        # producer state, tiered storage
        "producer.id.expiration.ms",
        "transaction.partition.verification.enable",
        "remote.log.index.file.cache.total.size.bytes",
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.list.offsets.request.timeout.ms",
        # broker quotas
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)


def broker_config_definition(key: str) -> ConfigDef | None:
    """The definition of a broker config name, listener-prefixed ones included
    (``listener.name.<l>.<config>``, ``listener.name.<l>.<mechanism>.<config>``)."""
    prefixed = _LISTENER_PREFIXED.match(key)
    if prefixed is None:
        return BROKER_CONFIGS.get(key)
    base = prefixed.group(2)
    mechanism, dot, rest = base.partition(".")
    if dot and mechanism.upper() in SASL_MECHANISMS and rest in BROKER_CONFIGS:
        return BROKER_CONFIGS[rest]
    return BROKER_CONFIGS.get(base)


def check_dynamic_broker_config(key: str, raw: str | None, per_broker: bool) -> Any:
    """The parsed value of a broker config set at run time, on one broker
    (``per_broker``) or as the cluster-wide default; ConfigError, as Kafka refuses it,
    for a name no broker config has, a static config, a keystore or truststore setting
    without a listener prefix, or a per-broker config at the cluster level; and for a
    value Strom would not act on (``check_served``)."""
    definition = broker_config_definition(key)
    if definition is None:
        raise ConfigError(f"Unknown broker config name: {key}")
    prefixed = _LISTENER_PREFIXED.match(key)
    base = definition.name
    if prefixed is None:
        if key in _DYNAMIC_SECURITY_CONFIGS:
            raise ConfigError(
                "These security configs can be dynamically updated only per-listener "
                f"using the listener prefix: {key}"
            )
        if key not in DYNAMIC_BROKER_CONFIGS:
            raise ConfigError(f"Cannot update these configs dynamically: {key}")
    cluster_level = base in _CLUSTER_LEVEL_LISTENER_CONFIGS if prefixed else False
    if not per_broker and (key in PER_BROKER_CONFIGS or (prefixed and not cluster_level)):
        raise ConfigError(
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: {key}"
        )
    value = definition.parse(raw)
    if value is not None:
        check_served(key, value)
    return value


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: ``key=value`` or ``key: value``, # and ! comments."""
    props: dict[str, str] = {}
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                props[key.strip()] = value.strip()
                break
        else:
            raise ConfigError(f"line {lineno}: expected key=value, got {line!r}")
    return props


class BrokerConfig:
    """A broker's effective configuration: defaults, then the file, then overrides."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._raw: dict[str, str] = {}
        self._values: dict[str, Any] = {d.name: d.default for d in BROKER_CONFIGS.values()}
        # listener.name.<listener>.<key> overrides: (LISTENER, key) -> raw value
        self._listener_raw: dict[tuple[str, str], str] = {}
        for key, raw in (props or {}).items():
            self.set(key, raw)
        self._check()

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(parse_properties(Path(path).read_text()))
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--override expects key=value, got {item!r}")
            props[key.strip()] = value
        return cls(props)

    def set(self, key: str, raw: str | None) -> None:
        prefixed = _LISTENER_PREFIXED.match(key)
        if prefixed is not None:
            self._set_for_listener(prefixed.group(1).upper(), prefixed.group(2), raw)
            return
        definition = BROKER_CONFIGS.get(key)
        if definition is None:
            log.warning("ignoring unknown broker config %s", key)
            return
        if raw is None:
            self._raw.pop(key, None)
            self._values[key] = definition.default
        else:
            self._values[key] = definition.parse(raw)
            self._raw[key] = raw

    def _set_for_listener(self, listener: str, key: str, raw: str | None) -> None:
        """``listener.name.<listener>.<key>``: a security setting for one listener."""
        mechanism, dot, rest = key.partition(".")
        scoped = rest in MECHANISM_SCOPED or rest.startswith("sasl.oauthbearer.")
        if dot and scoped and rest in BROKER_CONFIGS and mechanism.upper() in SASL_MECHANISMS:
            BROKER_CONFIGS[rest].parse(raw)
            key = f"{mechanism.lower()}.{rest}"
        elif (
            not key.startswith(("ssl.", "sasl.")) and key not in MECHANISM_SCOPED
        ) or key not in BROKER_CONFIGS:
            log.warning("ignoring unknown broker config listener.name.%s.%s", listener, key)
            return
        else:
            BROKER_CONFIGS[key].parse(raw)  # a bad value is refused here, in one line
        if raw is None:
            self._listener_raw.pop((listener, key), None)
        else:
            self._listener_raw[(listener, key)] = raw

    def http_listener_settings(self, prefix: str) -> dict[str, str]:
        """The settings given for one HTTP listener (a key of ``HTTP_LISTENER_PREFIXES``),
        named as the services' --config names them (the prefix taken off): only those
        set, so that the services' own defaults and checks apply
        (``strom.services.http_security``)."""
        listener = HTTP_LISTENER_PREFIXES[prefix]
        return {
            key[len(prefix) :]: raw
            for key, raw in self._raw.items()
            if key.startswith(prefix) and key != listener
        }

    def listener_value(self, listener: str, key: str) -> Any:
        """A security setting as one listener sees it: its ``listener.name.<listener>.``
        override, else the broker-wide value."""
        raw = self._listener_raw.get((listener.upper(), key))
        if raw is not None:
            return BROKER_CONFIGS[key].parse(raw)
        return self._values[key]

    def listener_key(self, listener: str, key: str) -> str:
        """The property a listener's setting was read from (for messages)."""
        if (listener.upper(), key) in self._listener_raw:
            return f"listener.name.{listener.lower()}.{key}"
        return key

    def jaas_config(self, listener: str, mechanism: str) -> tuple[str, str] | None:
        """(property, value) of the JAAS configuration a listener's mechanism uses:
        ``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
        ``listener.name.<l>.sasl.jaas.config``, else ``sasl.jaas.config``."""
        name = listener.upper()
        for key in (f"{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
            raw = self._listener_raw.get((name, key))
            if raw is not None:
                return f"listener.name.{listener.lower()}.{key}", raw.strip()
        value = self._values["sasl.jaas.config"]
        return ("sasl.jaas.config", value) if value else None

    def mechanism_value(self, listener: str, mechanism: str, key: str) -> Any:
        """A setting for one mechanism on one listener:
        ``listener.name.<l>.<mechanism>.<key>``, else the listener's, else the broker's."""
        raw = self._listener_raw.get((listener.upper(), f"{mechanism.lower()}.{key}"))
        if raw is not None:
            return BROKER_CONFIGS[key].parse(raw)
        return self.listener_value(listener, key)

    def sasl_mechanisms(self, listener: str) -> list[str]:
        """``sasl.enabled.mechanisms`` of a listener, upper-cased."""
        return [m.upper() for m in self.listener_value(listener, "sasl.enabled.mechanisms")]

    def _check_security(self, listeners: list[Listener], protocols: dict[str, str]) -> None:
        """What a TLS or SASL listener cannot start without, one line each (the TLS
        files themselves are read when the broker builds its contexts)."""
        for listener in listeners:
            protocol = protocols.get(listener.name)
            if protocol in TLS_PROTOCOLS and not (
                self.listener_value(listener.name, "ssl.keystore.location")
                or self.listener_value(listener.name, "ssl.keystore.certificate.chain")
            ):
                raise ConfigError(
                    f"Listener {listener.name} ({protocol}) needs its key and certificate: set "
                    f"ssl.keystore.location (or listener.name.{listener.name.lower()}."
                    "ssl.keystore.location) to a PEM file holding both"
                )
            if protocol in SASL_PROTOCOLS:
                mechanisms = self.sasl_mechanisms(listener.name)
                key = self.listener_key(listener.name, "sasl.enabled.mechanisms")
                if not mechanisms:
                    raise ConfigError(f"{key} is empty for SASL listener {listener.name}")
                for mechanism in mechanisms:
                    if mechanism not in SASL_MECHANISMS:
                        raise ConfigError(
                            f"{key}: {mechanism} is not served (listener {listener.name}); "
                            f"Strom serves {', '.join(SASL_MECHANISMS)}"
                        )

    def _check(self) -> None:
        """Kafka's KafkaConfig checks of roles, quorum and listeners, one line each."""
        listeners = [parse_listener(spec, "listeners") for spec in self.listeners]
        advertised = [
            parse_listener(spec, "advertised.listeners")
            for spec in self._values["advertised.listeners"] or []
        ]
        roles = self.process_roles
        protocols = self.security_protocol_map
        _check_distinct(listeners, "listeners")
        for spec in self._values["admin.listeners"]:
            parse_admin_listener(spec)
        for key in ("schema.registry.listener", "rest.proxy.listener"):
            if self._values[key] is not None:
                parse_admin_listener(self._values[key], key)
                if self.embedded_services_bootstrap is None:
                    raise ConfigError(
                        f"{key} needs a PLAINTEXT client listener for the service to reach "
                        "the broker on (or run `strom schema-registry`/`strom rest-proxy` "
                        "with the client settings a secured listener needs)"
                    )
        _check_distinct(advertised, "advertised.listeners", ports=False)
        authorizer = self._values["authorizer.class.name"]
        if authorizer and authorizer not in AUTHORIZER_CLASSES:
            raise ConfigError(
                f"Unknown authorizer.class.name {authorizer!r}: Strom serves "
                f"{', '.join(AUTHORIZER_CLASSES)}"
            )
        for listener in [*listeners, *advertised]:
            protocol = protocols.get(listener.name)
            if protocol is None:
                raise ConfigError(
                    f"Listener {listener.name} is not in listener.security.protocol.map "
                    f"({render(self._values['listener.security.protocol.map'])})"
                )
            if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(
                    f"Listener {listener.name} uses security protocol {protocol}: "
                    f"Strom supports only {', '.join(SUPPORTED_SECURITY_PROTOCOLS)} listeners"
                )
        self._check_security(listeners, protocols)
        for listener in advertised or listeners:
            if listener.host in NON_ROUTABLE_HOSTS and not self.is_controller_listener(
                listener.name
            ):
                source = "advertised.listeners" if advertised else "listeners"
                raise ConfigError(
                    f"{listener.name} listener would be advertised as {listener.host} (from "
                    f"{source}), where clients cannot connect: set advertised.listeners to a "
                    "routable address, e.g. advertised.listeners="
                    f"{listener.name}://<host name or IP>:{listener.port}"
                )
        voters = self.quorum_voters
        voters_text = render(self._values["controller.quorum.voters"])
        bootstrap = self.quorum_bootstrap_servers
        controller_names = self.controller_listener_names
        voter_ids = [voter.node_id for voter in voters]
        node_id = self.node_id
        controllers = [lst for lst in listeners if lst.name in controller_names]
        clients = [lst for lst in listeners if lst.name not in controller_names]
        if ROLE_CONTROLLER in roles:
            if voters and node_id not in voter_ids:
                raise ConfigError(
                    f"node.id {node_id} must be one of the voters in controller.quorum.voters "
                    f"({voters_text}) on a controller"
                )
            if (voters or ROLE_BROKER not in roles) and not controllers:
                raise ConfigError(
                    "A controller needs a listener named in controller.listener.names "
                    f"({','.join(controller_names) or 'empty'}) among listeners "
                    f"({','.join(self.listeners)})"
                )
            if ROLE_BROKER not in roles and clients:
                raise ConfigError(
                    "listeners of a controller-only node must all be named in "
                    f"controller.listener.names ({','.join(controller_names)}); "
                    f"{clients[0].name} is not"
                )
        if ROLE_BROKER in roles:
            if ROLE_CONTROLLER not in roles:
                if not voters and not bootstrap:
                    raise ConfigError(
                        "A broker-only node needs controller.quorum.voters or "
                        "controller.quorum.bootstrap.servers to find the controllers"
                    )
                if not voters:
                    raise ConfigError(
                        "Dynamic quorums (controller.quorum.bootstrap.servers without "
                        "controller.quorum.voters) are not served: list the controllers in "
                        "controller.quorum.voters"
                    )
                if node_id in voter_ids:
                    raise ConfigError(
                        f"node.id {node_id} of a broker-only node must not be among the voters "
                        f"in controller.quorum.voters ({voters_text})"
                    )
                if controllers:
                    raise ConfigError(
                        f"Controller listener {controllers[0].name} must not appear in listeners "
                        "of a broker-only node"
                    )
                if not controller_names:
                    raise ConfigError(
                        "controller.listener.names must name the controllers' listener on a "
                        "broker-only node"
                    )
            if not clients:
                raise ConfigError(
                    "A broker needs a listener not named in controller.listener.names "
                    f"({','.join(controller_names)}) among listeners ({','.join(self.listeners)})"
                )
            name = self._values["inter.broker.listener.name"]
            if name is not None:
                name = name.upper()
                if name in controller_names:
                    raise ConfigError(
                        f"inter.broker.listener.name {name} must not be a controller listener "
                        f"(controller.listener.names={','.join(controller_names)})"
                    )
                if name not in {lst.name for lst in clients}:
                    raise ConfigError(
                        f"inter.broker.listener.name {name} must be one of the listeners' names "
                        f"({','.join(lst.name for lst in clients)})"
                    )
        self._check_served()
        self._check_share_bounds()

    def _check_share_bounds(self) -> None:
        """Each group.share.* setting within its group.share.min/max.* bounds."""
        for middle in ("session.timeout.ms", "heartbeat.interval.ms", "record.lock.duration.ms"):
            value = self._values[f"group.share.{middle}"]
            low = self._values[f"group.share.min.{middle}"]
            high = self._values[f"group.share.max.{middle}"]
            if not low <= value <= high:
                raise ConfigError(
                    f"group.share.{middle}={value} must be between group.share.min.{middle}"
                    f"={low} and group.share.max.{middle}={high}"
                )

    def _check_served(self) -> None:
        """Refuse a Kafka-only config set to a value Strom would not act on (one line
        naming it); warn of one set to a value it accepts and ignores."""
        given = [(key, self._values[key], raw) for key, raw in self._raw.items()]
        for (listener, key), raw in self._listener_raw.items():
            if key in BROKER_CONFIGS:
                given.append(
                    (f"listener.name.{listener.lower()}.{key}", BROKER_CONFIGS[key].parse(raw), raw)
                )
        for key, value, raw in given:
            if check_served(key, value):
                definition = broker_config_definition(key)
                assert definition is not None  # check_served knows the key
                why = KAFKA_ONLY[definition.name].why
                log.warning("%s=%s is accepted and changes nothing: %s", key, raw.strip(), why)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def is_set(self, key: str) -> bool:
        return key in self._raw

    # Derived values -------------------------------------------------------

    @property
    def process_roles(self) -> frozenset[str]:
        """``process.roles`` checked: broker and/or controller, each once."""
        raw: list[str] = self._values["process.roles"]
        roles = [role.strip().lower() for role in raw]
        for role in roles:
            if role not in PROCESS_ROLES:
                raise ConfigError(
                    f"Unknown process role {role!r} in process.roles "
                    "(only 'broker' and 'controller' are allowed roles)"
                )
        if len(set(roles)) != len(roles):
            raise ConfigError(f"Duplicate role names found in process.roles: {','.join(raw)}")
        if not roles:
            raise ConfigError("process.roles must name broker, controller or both")
        return frozenset(roles)

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.process_roles

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.process_roles

    @property
    def quorum_voters(self) -> list[QuorumVoter]:
        """``controller.quorum.voters`` as configured; empty means this node alone."""
        return parse_voters(self._values["controller.quorum.voters"])

    @property
    def voter_ids(self) -> frozenset[int]:
        """The ids of the quorum's voters: the configured ones, or this node alone."""
        voters = self.quorum_voters
        if voters:
            return frozenset(voter.node_id for voter in voters)
        return frozenset({self.node_id})

    @property
    def voter_addresses(self) -> dict[int, tuple[str, int]]:
        """Voter id -> (host, port) of its controller listener; {} when this node is alone."""
        return {voter.node_id: (voter.host, voter.port) for voter in self.quorum_voters}

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """``controller.quorum.bootstrap.servers`` as (host, port) pairs."""
        return [
            parse_host_port(entry, "controller.quorum.bootstrap.servers")
            for entry in self._values["controller.quorum.bootstrap.servers"]
        ]

    @property
    def controller_listener_names(self) -> list[str]:
        return [name.upper() for name in self._values["controller.listener.names"]]

    def is_controller_listener(self, name: str) -> bool:
        return name.upper() in self.controller_listener_names

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map``: listener name -> security protocol."""
        return parse_protocol_map(self._values["listener.security.protocol.map"])

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (ConfigError if the map lacks it)."""
        protocol = self.security_protocol_map.get(listener_name.upper())
        if protocol is None:
            raise ConfigError(f"Listener {listener_name} is not in listener.security.protocol.map")
        return protocol

    @property
    def parsed_listeners(self) -> list[Listener]:
        return [parse_listener(spec) for spec in self.listeners]

    @property
    def controller_listeners(self) -> list[Listener]:
        """The listeners named in ``controller.listener.names`` (served by controllers)."""
        names = self.controller_listener_names
        return [lst for lst in self.parsed_listeners if lst.name in names]

    @property
    def client_listeners(self) -> list[Listener]:
        """The other listeners: clients and other brokers connect to these."""
        names = self.controller_listener_names
        return [lst for lst in self.parsed_listeners if lst.name not in names]

    @property
    def embedded_services_bootstrap(self) -> str | None:
        """``host:port`` of the first PLAINTEXT client listener, where the services served
        inside the broker (``schema.registry.listener``, ``rest.proxy.listener``) connect;
        an unspecified host is reached on 127.0.0.1."""
        for listener in self.client_listeners:
            if self.security_protocol_map.get(listener.name) == "PLAINTEXT":
                host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                host = f"[{host}]" if ":" in host else host
                return f"{host}:{listener.port}"
        return None

    @property
    def inter_broker_listener_name(self) -> str | None:
        """``inter.broker.listener.name``, by default PLAINTEXT if a client listener has that
        name, else the first client listener's name (None on a controller-only node)."""
        name = self._values["inter.broker.listener.name"]
        if name is not None:
            return str(name).upper()
        clients = self.client_listeners
        if not clients:
            return None
        names = [lst.name for lst in clients]
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    @property
    def inter_broker_listener(self) -> Listener | None:
        """The listener other brokers reach this one on (its advertised form if any)."""
        name = self.inter_broker_listener_name
        if name is None:
            return None
        for spec in self.advertised_listeners:
            listener = parse_listener(spec)
            if listener.name == name:
                return listener
        return next((lst for lst in self.client_listeners if lst.name == name), None)

    @property
    def node_id(self) -> int:
        broker_id = self._values["broker.id"]
        if broker_id is not None and broker_id >= 0 and not self.is_set("node.id"):
            return int(broker_id)
        return int(self._values["node.id"])

    @property
    def listeners(self) -> list[str]:
        return list(self._values["listeners"])

    @property
    def advertised_listeners(self) -> list[str]:
        return list(self._values["advertised.listeners"] or self._values["listeners"])

    @property
    def log_dirs(self) -> list[Path]:
        """Every log directory: ``log.dirs``, else ``log.dir``."""
        dirs = self._values["log.dirs"]
        return [Path(d) for d in dirs] if dirs else [Path(self._values["log.dir"])]

    @property
    def log_dir(self) -> Path:
        dirs = self._values["log.dirs"]
        if dirs:
            if len(dirs) > 1:
                raise ConfigError("log.dirs: only one log directory is supported")
            return Path(dirs[0])
        return Path(self._values["log.dir"])

    @property
    def metadata_log_dir(self) -> Path:
        """``metadata.log.dir``, by default the first log directory. The metadata log
        itself lives in its ``__cluster_metadata-0`` subdirectory."""
        value = self._values["metadata.log.dir"]
        return Path(value) if value else self.log_dirs[0]

    @property
    def retention_ms(self) -> int:
        if self._values["log.retention.ms"] is not None:
            return int(self._values["log.retention.ms"])
        if self._values["log.retention.minutes"] is not None:
            return int(self._values["log.retention.minutes"]) * 60_000
        return int(self._values["log.retention.hours"]) * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self._values["log.roll.ms"] is not None:
            return int(self._values["log.roll.ms"])
        return int(self._values["log.roll.hours"]) * 3_600_000

    def broker_default_for_topic(self, topic_key: str) -> Any:
        """The value a topic config takes when the topic does not override it."""
        definition = TOPIC_CONFIGS[topic_key]
        if topic_key == "retention.ms":
            return self.retention_ms
        if topic_key == "segment.ms":
            return self.roll_ms
        if topic_key == "flush.ms":
            value = self._values["log.flush.interval.ms"]
            return LONG_MAX if value is None else value
        if definition.broker_name is not None:
            return self._values[definition.broker_name]
        return definition.default

    def describe(self) -> dict[str, tuple[str | None, bool]]:
        """Every broker config as (value, is_default)."""
        return {
            name: (
                None if definition.kind == "password" else render(self._values[name]),
                name not in self._raw,
            )
            for name, definition in BROKER_CONFIGS.items()
        }


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class QuorumVoter:
    """One entry of ``controller.quorum.voters``: ``node_id@host:port``."""

    node_id: int
    host: str
    port: int


_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _parse_port(text: str, problem: str, lowest: int = 0) -> int:
    try:
        port = int(text)
        if not lowest <= port <= 65535:
            raise ValueError
    except ValueError:
        raise ConfigError(f"{problem}: port must be {lowest}-65535") from None
    return port


def _parse_throttled_replicas(raw: str) -> list[str]:
    """``*`` or ``partition:broker`` pairs, comma-separated (Kafka's throttled replicas)."""
    items = _parse_list(raw)
    if items == ["*"]:
        return items
    for item in items:
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError(f"expected partition:broker pairs or *, got {item!r}")
    return [item.replace(" ", "") for item in items]


def throttled(replicas: list[str] | None, partition: int, broker_id: int) -> bool:
    """Whether ``partition`` on ``broker_id`` is in a throttled replicas list."""
    if not replicas:
        return False
    return replicas == ["*"] or f"{partition}:{broker_id}" in replicas


# Addresses a server binds to meaning "every interface": never one a client can reach.
NON_ROUTABLE_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})


def parse_listener(spec: str, key: str = "listeners") -> Listener:
    """``NAME://host:port`` (host may be empty for all interfaces); the name is
    upper-cased, as Kafka normalises listener names. Whether its security protocol is
    known is BrokerConfig's check (listener.security.protocol.map)."""
    problem = f"Invalid value {spec!r} for configuration {key}"
    name, sep, rest = spec.strip().partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not _LISTENER_NAME.match(name):
        raise ConfigError(f"{problem}: expected NAME://host:port")
    port = _parse_port(port_text, problem)
    return Listener(name.upper(), host.strip("[]"), port)


_HTTP_LISTENER = re.compile(r"^(https?)://(\[[^\]]*\]|[^:/\[\]]*):([^/]*)/?$")


def parse_http_listener(
    spec: str, key: str = "", schemes: tuple[str, ...] = ("http",)
) -> tuple[str, str, int]:
    """(scheme, host, port) of an HTTP listener, ``SCHEME://HOST:PORT`` with one of
    ``schemes`` (an empty host: every interface); ``key`` names the setting in errors."""
    prefix = f"{key}: " if key else ""
    match = _HTTP_LISTENER.match(spec.strip())
    if match is None or match.group(1) not in schemes:
        shapes = " or ".join(f"{scheme}://HOST:PORT" for scheme in schemes)
        raise ConfigError(f"{prefix}{spec!r} is not {shapes} (e.g. http://127.0.0.1:9644)")
    port = _parse_port(match.group(3), f"{prefix}{spec!r} has no valid port")
    return match.group(1), match.group(2).strip("[]") or "0.0.0.0", port


def parse_admin_listener(spec: str, key: str = "admin.listeners") -> tuple[str, str, int]:
    """(scheme, host, port) of an HTTP listener setting (``admin.listeners`` and the
    embedded services'), ``http://HOST:PORT`` or ``https://HOST:PORT``."""
    return parse_http_listener(spec, key, schemes=("http", "https"))


def parse_host_port(entry: str, key: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) with a port of 1-65535."""
    problem = f"Invalid value {entry!r} for configuration {key}"
    host, colon, port_text = entry.strip().rpartition(":")
    host = host.strip("[]")
    if not colon or not host:
        raise ConfigError(f"{problem}: expected host:port")
    return host, _parse_port(port_text, problem, lowest=1)


def parse_voters(entries: str | Iterable[str]) -> list[QuorumVoter]:
    """``controller.quorum.voters`` (``1@host:9093,2@host:9095``) as typed entries."""
    key = "controller.quorum.voters"
    items = _parse_list(entries) if isinstance(entries, str) else list(entries)
    voters: list[QuorumVoter] = []
    seen: set[int] = set()
    for entry in items:
        id_text, at, address = entry.strip().partition("@")
        problem = f"Invalid value {entry!r} for configuration {key}"
        if not at:
            raise ConfigError(f"{problem}: expected id@host:port")
        try:
            node_id = int(id_text)
            if node_id < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{problem}: the voter id must be a node id (0 or more)") from None
        if node_id in seen:
            raise ConfigError(f"{problem}: voter {node_id} is listed twice")
        seen.add(node_id)
        host, port = parse_host_port(address, key)
        voters.append(QuorumVoter(node_id, host, port))
    return voters


def parse_protocol_map(entries: str | Iterable[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) as a dict."""
    key = "listener.security.protocol.map"
    items = _parse_list(entries) if isinstance(entries, str) else list(entries)
    mapping: dict[str, str] = {}
    for entry in items:
        name, colon, protocol = entry.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        problem = f"Invalid value {entry!r} for configuration {key}"
        if not colon or not name or not protocol:
            raise ConfigError(f"{problem}: expected LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{problem}: unknown security protocol {protocol} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in mapping:
            raise ConfigError(f"{problem}: listener {name} is mapped twice")
        mapping[name] = protocol
    return mapping


def _check_distinct(listeners: list[Listener], key: str, *, ports: bool = True) -> None:
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"Each listener in {key} must have a different name; {dup} is repeated")
    if ports:
        bound = [lst.port for lst in listeners if lst.port != 0]
        if len(set(bound)) != len(bound):
            dup_port = next(p for p in bound if bound.count(p) > 1)
            raise ConfigError(
                f"Each listener in {key} must have a different port; {dup_port} is repeated"
            )


def _check_share_reset(value: str) -> None:
    """share.auto.offset.reset: latest, earliest or by_duration:<ISO-8601 duration>."""
    if value in ("latest", "earliest"):
        return
    if value.startswith("by_duration:"):
        parse_iso_duration_ms(value.removeprefix("by_duration:"))
        return
    raise ValueError("must be latest, earliest or by_duration:PnDTnHnMn.nS")


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def parse_iso_duration_ms(text: str) -> int:
    """An ISO-8601 duration as java.time.Duration reads it (PnDTnHnMn.nS, not negative)
    in milliseconds; ValueError otherwise."""
    found = _ISO_DURATION.fullmatch(text.strip().upper())
    if found is None or text.strip().upper() in ("P", "PT") or text.strip().endswith("T"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    days, hours, minutes = (int(found[k] or 0) for k in ("d", "h", "m"))
    seconds = float(found["s"] or 0)
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


# Configs of one group (ConfigResource type GROUP), as Kafka 4.0's GroupConfig defines
# them: a group's own values of the broker's group.consumer.* settings (its default), and
# the share group ones (a group's own values of the broker's group.share.* settings).
GROUP_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            "consumer.session.timeout.ms",
            "int",
            45000,
            minimum=1,
            broker_name="group.consumer.session.timeout.ms",
        ),
        ConfigDef(
            "consumer.heartbeat.interval.ms",
            "int",
            5000,
            minimum=1,
            broker_name="group.consumer.heartbeat.interval.ms",
        ),
        ConfigDef(
            "share.session.timeout.ms",
            "int",
            45000,
            minimum=1,
            broker_name="group.share.session.timeout.ms",
        ),
        ConfigDef(
            "share.heartbeat.interval.ms",
            "int",
            5000,
            minimum=1,
            broker_name="group.share.heartbeat.interval.ms",
        ),
        ConfigDef(
            "share.record.lock.duration.ms",
            "int",
            30000,
            minimum=1000,
            broker_name="group.share.record.lock.duration.ms",
        ),
        ConfigDef(
            "share.delivery.count.limit",
            "int",
            5,
            minimum=2,
            broker_name="group.share.delivery.count.limit",
        ),
        ConfigDef(
            "share.partition.max.record.locks",
            "int",
            2000,
            minimum=100,
            broker_name="group.share.partition.max.record.locks",
        ),
        ConfigDef("share.auto.offset.reset", "string", "latest", check=_check_share_reset),
        ConfigDef(
            "share.isolation.level",
            "string",
            "read_uncommitted",
            choices=("read_uncommitted", "read_committed"),
        ),
    ]
}

# Kafka's default bounds of the share group configs (group.share.min/max.*).
_SHARE_BOUNDS = {
    "share.session.timeout.ms": (45000, 60000),
    "share.heartbeat.interval.ms": (5000, 15000),
    "share.record.lock.duration.ms": (15000, 60000),
}


def group_config_values(
    broker: BrokerConfig | None, overrides: Mapping[str, str]
) -> dict[str, tuple[Any, bool]]:
    """Each group config as (value, set on the group): the group's override, else the
    broker's value of the setting it stands for, else Kafka's default."""
    out: dict[str, tuple[Any, bool]] = {}
    for key, definition in GROUP_CONFIGS.items():
        if key in overrides:
            out[key] = (definition.parse(overrides[key]), True)
        elif broker is not None and definition.broker_name is not None:
            out[key] = (broker[definition.broker_name], False)
        else:
            out[key] = (definition.default, False)
    return out


def validate_group_configs(
    configs: Mapping[str, str | None],
    broker: BrokerConfig | None = None,
    *,
    check_bounds: bool = True,
) -> dict[str, Any]:
    """Check a group's overrides as Kafka does: known names, values of their type, within
    the broker's bounds (when ``broker`` is given; Kafka's default bounds of the share
    configs otherwise, unless ``check_bounds`` is off: the controller, after the
    receiving broker checked its own), a session timeout above the heartbeat interval.
    Raises ConfigError."""
    overrides: dict[str, str] = {}
    for key, raw in configs.items():
        if key not in GROUP_CONFIGS:
            raise ConfigError(f"Unknown group config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for group configs: {key}")
        overrides[key] = raw
    values = {k: v for k, (v, _) in group_config_values(broker, overrides).items()}
    bounds = dict(_SHARE_BOUNDS) if check_bounds else {}
    if broker is not None and check_bounds:
        for key, (low_name, high_name) in _BOUND_NAMES.items():
            if key.startswith("share."):
                bounds[key] = (broker[low_name], broker[high_name])
        bounds["consumer.session.timeout.ms"] = (
            broker["group.consumer.min.session.timeout.ms"],
            broker["group.consumer.max.session.timeout.ms"],
        )
        bounds["consumer.heartbeat.interval.ms"] = (
            broker["group.consumer.min.heartbeat.interval.ms"],
            broker["group.consumer.max.heartbeat.interval.ms"],
        )
    for key, (low, high) in bounds.items():
        if key not in configs:
            continue
        if values[key] < low:
            raise ConfigError(f"{key} must be greater than or equal to {_BOUND_NAMES[key][0]}")
        if values[key] > high:
            raise ConfigError(f"{key} must be less than or equal to {_BOUND_NAMES[key][1]}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise ConfigError(
                f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms"
            )
    return {key: values[key] for key in configs}


_BOUND_NAMES = {
    "consumer.session.timeout.ms": (
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    "consumer.heartbeat.interval.ms": (
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    "share.session.timeout.ms": (
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    ),
    "share.heartbeat.interval.ms": (
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    "share.record.lock.duration.ms": (
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic overrides; unknown keys and bad values raise ConfigError."""
    parsed: dict[str, Any] = {}
    for key, raw in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {key}")
        parsed[key] = definition.parse(raw)
    return parsed


def effective_topic_configs(
    broker: BrokerConfig, overrides: Mapping[str, str]
) -> dict[str, tuple[Any, ConfigSource]]:
    """Each topic config as (value, source); a broker-supplied value counts as static."""
    out: dict[str, tuple[Any, ConfigSource]] = {}
    for key, definition in TOPIC_CONFIGS.items():
        if key in overrides:
            out[key] = (definition.parse(overrides[key]), ConfigSource.DYNAMIC_TOPIC)
        else:
            source = ConfigSource.DEFAULT
            name = definition.broker_name
            if name is not None and (
                broker.is_set(name)
                or (key == "retention.ms" and any(broker.is_set(k) for k in _RETENTION_KEYS))
                or (key == "segment.ms" and broker.is_set("log.roll.hours"))
            ):
                source = ConfigSource.STATIC_BROKER
            out[key] = (broker.broker_default_for_topic(key), source)
    return out


_RETENTION_KEYS = ("log.retention.hours", "log.retention.minutes", "log.retention.ms")


def log_config_for(broker: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The storage view of a topic's effective configs."""
    values = {key: value for key, (value, _) in effective_topic_configs(broker, overrides).items()}
    flush_messages = values["flush.messages"]
    flush_ms = values["flush.ms"]
    return LogConfig(
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        index_interval_bytes=values["index.interval.bytes"],
        segment_index_bytes=values["segment.index.bytes"],
        flush_messages=None if flush_messages >= LONG_MAX else flush_messages,
        flush_ms=None if flush_ms >= LONG_MAX else flush_ms,
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        max_message_bytes=values["max.message.bytes"],
        message_timestamp_type=values["message.timestamp.type"],
        message_timestamp_before_max_ms=values["message.timestamp.before.max.ms"],
        message_timestamp_after_max_ms=values["message.timestamp.after.max.ms"],
        cleanup_policy=",".join(values["cleanup.policy"]),
        compression_type=values["compression.type"],
        file_delete_delay_ms=values["file.delete.delay.ms"],
        delete_retention_ms=values["delete.retention.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
    )
