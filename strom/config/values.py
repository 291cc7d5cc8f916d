"""What a config value is: its definition (``ConfigDef``: type, default, bounds, choices,
the broker property behind a topic config), parsing and rendering, where a value came
from (``ConfigSource``), and ``ConfigError``, the one readable line a bad value gets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

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


def parse_list(value: str) -> list[str]:
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
                value = parse_list(raw)
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


COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


CLEANUP = ("delete", "compact")


def _parse_throttled_replicas(raw: str) -> list[str]:
    """``*`` or ``partition:broker`` pairs, comma-separated (Kafka's throttled replicas)."""
    items = parse_list(raw)
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
