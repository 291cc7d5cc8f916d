"""The broker's config keys: every one Strom takes with its Kafka name and default
(``BROKER_CONFIGS``), the HTTP listeners' TLS and authentication settings, the security
protocols and SASL mechanisms, and the Kafka broker configs Strom declares but does not
act on (``KAFKA_ONLY``: each accepts only values under which Strom behaves as Kafka
would; ``check_served``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from strom.config.values import (
    CLEANUP,
    COMPRESSION,
    DOUBLE_MAX,
    LONG_MAX,
    TIMESTAMP_TYPES,
    ConfigDef,
    ConfigError,
    parse_host_counts,
    render,
)

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
        ConfigDef("log.cleanup.policy", "list", ["delete"], choices=CLEANUP),
        ConfigDef("log.message.timestamp.type", "string", "CreateTime", choices=TIMESTAMP_TYPES),
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
        ConfigDef("compression.type", "string", "producer", choices=COMPRESSION),
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
LISTENER_PREFIXED = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.(.+)$")


# The authorizer.class.name values that turn on strom.security.authorizer.
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "strom.security.authorizer.StandardAuthorizer",
)


def broker_config_definition(key: str) -> ConfigDef | None:
    """The definition of a broker config name, listener-prefixed ones included
    (``listener.name.<l>.<config>``, ``listener.name.<l>.<mechanism>.<config>``)."""
    prefixed = LISTENER_PREFIXED.match(key)
    if prefixed is None:
        return BROKER_CONFIGS.get(key)
    base = prefixed.group(2)
    mechanism, dot, rest = base.partition(".")
    if dot and mechanism.upper() in SASL_MECHANISMS and rest in BROKER_CONFIGS:
        return BROKER_CONFIGS[rest]
    return BROKER_CONFIGS.get(base)
