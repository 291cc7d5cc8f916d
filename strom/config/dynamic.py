"""Broker configs changed at run time (AlterConfigs, IncrementalAlterConfigs): which may
be, per broker or cluster-wide, and the checks Kafka makes of them.
"""

from __future__ import annotations

from typing import Any

from strom.config.broker_keys import LISTENER_PREFIXED, broker_config_definition, check_served
from strom.config.topic_keys import TOPIC_CONFIGS
from strom.config.values import ConfigError

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


def check_dynamic_broker_config(key: str, raw: str | None, per_broker: bool) -> Any:
    """The parsed value of a broker config set at run time, on one broker
    (``per_broker``) or as the cluster-wide default; ConfigError, as Kafka refuses it,
    for a name no broker config has, a static config, a keystore or truststore setting
    without a listener prefix, or a per-broker config at the cluster level; and for a
    value Strom would not act on (``check_served``)."""
    definition = broker_config_definition(key)
    if definition is None:
        raise ConfigError(f"Unknown broker config name: {key}")
    prefixed = LISTENER_PREFIXED.match(key)
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
