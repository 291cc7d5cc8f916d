"""Kafka Connect's declaration of a plugin's settings (its ``ConfigDef``), for the worker,
the connectors, the converters and ``/connector-plugins/{plugin}/config/validate``.

Owns one setting's declaration (``ConfigKey``: name, type, default, importance,
documentation, group, order in the group, width, display name, a check of the parsed
value), a plugin's set of them (``ConfigDef``), parsing a ``{key: text}`` map into typed
values with Kafka's messages (``Invalid value X for configuration Y: Not a number of type
INT``, ``Missing required configuration "Y" which has no default value.``), validating
every key at once for ``/config/validate`` (``ConfigValue``: the value and each error),
and the JSON of a key's definition as Kafka's REST API shows it (``ConfigKeyInfo``).

One ConfigDef serves the worker too, as in Kafka: a bad worker property reads as Kafka
Connect would word it. The error type is ``strom.config.ConfigError`` (one line).

Does not own what the settings mean: each plugin (``connectors``, ``converters``), the
worker (``worker_config``) and the connector's common settings (``connector_config``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.config import ConfigError

BOOLEAN = "BOOLEAN"
STRING = "STRING"
INT = "INT"
SHORT = "SHORT"
LONG = "LONG"
DOUBLE = "DOUBLE"
LIST = "LIST"
CLASS = "CLASS"
PASSWORD = "PASSWORD"

HIGH = "HIGH"
MEDIUM = "MEDIUM"
LOW = "LOW"

# A key without a default must be given (Kafka's ConfigDef.NO_DEFAULT_VALUE).
REQUIRED = object()
_INTEGER_RANGES = {
    INT: (-(2**31), 2**31 - 1),
    SHORT: (-(2**15), 2**15 - 1),
    LONG: (-(2**63), 2**63 - 1),
}
HIDDEN = "[hidden]"


def invalid(name: str, value: Any, reason: str) -> ConfigError:
    """Kafka's ConfigException wording: ``Invalid value V for configuration K: reason``."""
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def missing(name: str) -> str:
    return f'Missing required configuration "{name}" which has no default value.'


def parse_value(name: str, kind: str, raw: Any) -> Any:
    """``raw`` (text, or an already typed default) as a value of ``kind``."""
    if raw is None:
        return None
    if kind == BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise invalid(name, raw, "Expected value to be either true or false")
        return text == "true"
    if kind in _INTEGER_RANGES:
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        else:
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise invalid(name, raw, f"Not a number of type {kind}") from None
        low, high = _INTEGER_RANGES[kind]
        if not low <= value <= high:
            raise invalid(name, raw, f"Not a number of type {kind}")
        return value
    if kind == DOUBLE:
        try:
            return float(str(raw).strip())
        except ValueError:
            raise invalid(name, raw, f"Not a number of type {kind}") from None
    if kind == LIST:
        if isinstance(raw, list):
            return raw
        text = str(raw).strip()
        return [item.strip() for item in text.split(",")] if text else []
    return str(raw).strip()


def render_value(kind: str, value: Any) -> str | None:
    """A typed value back in Kafka's text form (a password hidden)."""
    if value is None or value is REQUIRED:
        return None
    if kind == PASSWORD:
        return HIDDEN
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def at_least(minimum: float) -> Callable[[str, Any], None]:
    """A check as Kafka's ``ConfigDef.Range.atLeast``."""

    def check(name: str, value: Any) -> None:
        if value is not None and value < minimum:
            raise invalid(name, value, f"Value must be at least {minimum:g}")

    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Callable[[str, Any], None]:
    """A check as Kafka's ``ConfigDef.ValidString.in`` (or ``CaseInsensitiveValidString``)."""
    allowed = set(choices) if case_sensitive else {c.lower() for c in choices}

    def check(name: str, value: Any) -> None:
        if value is None:
            return
        candidate = value if case_sensitive else str(value).lower()
        if candidate not in allowed:
            qualifier = "" if case_sensitive else " (case insensitive)"
            raise invalid(name, value, f"String must be one of{qualifier}: {', '.join(choices)}")

    return check


def non_empty(name: str, value: Any) -> None:
    """A check as Kafka's ``ConfigDef.NonEmptyString``."""
    if value is not None and not str(value):
        raise invalid(name, value, "String must be non-empty")


@dataclass(frozen=True)
class ConfigKey:
    """One setting, declared as Kafka's ``ConfigDef.define`` takes it."""

    name: str
    type: str
    default: Any = REQUIRED
    importance: str = MEDIUM
    documentation: str = ""
    group: str | None = None
    order_in_group: int = -1
    width: str = "NONE"
    display_name: str | None = None
    check: Callable[[str, Any], None] | None = None
    dependents: tuple[str, ...] = ()
    recommended_values: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def parse(self, raw: Any) -> Any:
        """The typed value of ``raw`` (the default when None); ConfigError, one line."""
        if raw is None:
            if self.required:
                raise ConfigError(missing(self.name))
            value = parse_value(self.name, self.type, self.default)
        else:
            value = parse_value(self.name, self.type, raw)
        if self.check is not None:
            self.check(self.name, value)
        return value

    def info(self) -> dict[str, Any]:
        """The definition as Kafka's REST API shows it (``ConfigKeyInfo``)."""
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default_value": render_value(self.type, self.default),
            "importance": self.importance,
            "documentation": self.documentation,
            "group": self.group,
            "order": self.order_in_group,
            "width": self.width,
            "display_name": self.display_name or self.name,
            "dependents": list(self.dependents),
        }


@dataclass
class ConfigValue:
    """One key's validation result, as ``/config/validate`` reports it."""

    name: str
    value: Any = None
    errors: list[str] = field(default_factory=list)
    recommended_values: list[str] = field(default_factory=list)
    visible: bool = True

    def info(self, kind: str = STRING) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": render_value(kind, self.value),
            "recommended_values": list(self.recommended_values),
            "errors": list(self.errors),
            "visible": self.visible,
        }


class ConfigDef:
    """The settings of one plugin (or of the worker), in declaration order."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for key in keys:
            self.define(key)

    def define(self, key: ConfigKey) -> ConfigDef:
        self.keys[key.name] = key
        return self

    def merged(self, other: ConfigDef) -> ConfigDef:
        """This ConfigDef with ``other``'s keys added (``other`` wins a shared name)."""
        return ConfigDef([*self.keys.values(), *other.keys.values()])

    @property
    def groups(self) -> list[str]:
        seen: list[str] = []
        for key in self.keys.values():
            if key.group is not None and key.group not in seen:
                seen.append(key.group)
        return seen

    def parse(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """Every declared key's typed value; the first bad one is a ConfigError."""
        return {name: key.parse(props.get(name)) for name, key in self.keys.items()}

    def validate_all(self, props: Mapping[str, Any]) -> dict[str, ConfigValue]:
        """Every declared key's value and errors, none raised (``/config/validate``)."""
        results: dict[str, ConfigValue] = {}
        for name, key in self.keys.items():
            result = ConfigValue(name, props.get(name, key.default if not key.required else None))
            result.recommended_values = list(key.recommended_values)
            try:
                result.value = key.parse(props.get(name))
            except ConfigError as exc:
                result.errors.append(str(exc))
            results[name] = result
        return results
