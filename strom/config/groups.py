"""Group configs (ConfigResource type GROUP), as Kafka 4.0's GroupConfig defines them, with
the share groups' bounds, and ISO-8601 durations
(``share.auto.offset.reset=by_duration:``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from strom.config.broker import BrokerConfig
from strom.config.values import ConfigDef, ConfigError


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
