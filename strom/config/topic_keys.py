"""Topic configs: Kafka's table with the broker property that supplies each default, and
their validation. A topic's effective configs, which need the broker's, are
``broker.effective_topic_configs`` and ``broker.log_config_for``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom.config.values import (
    CLEANUP,
    COMPRESSION,
    LONG_MAX,
    TIMESTAMP_TYPES,
    ConfigDef,
    ConfigError,
)

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            "cleanup.policy", "list", ["delete"], choices=CLEANUP, broker_name="log.cleanup.policy"
        ),
        ConfigDef(
            "compression.type",
            "string",
            "producer",
            choices=COMPRESSION,
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
            choices=TIMESTAMP_TYPES,
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
