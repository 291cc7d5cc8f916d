"""A connector's transforms, built from its config and applied in order, as Kafka's
``ConnectorConfig.transformationStages`` and ``TransformationStage`` do.

``transforms=a,b`` names the stages; ``transforms.a.type`` is a transform's class (Kafka's
name, Strom's, or a short alias) and the other ``transforms.a.*`` keys its settings,
except ``predicate`` (the alias of one of ``predicates=...``, whose class is
``predicates.<alias>.type`` and settings ``predicates.<alias>.*``) and ``negate``. A stage
with a predicate applies its transform only to records the predicate is true for (false
for, negated). A transform returning None drops the record: later stages do not see it.

``build_stages`` raises ``ConfigError`` naming the key at fault; the connector's
validation (``connector_config``) reports the same errors per key without raising.
``TransformationStage.apply`` is a pure function of a record, for any runner; error
handling wraps each stage (``record_path``).

Does not own the transforms (``fields``, ``casts``, ``routing``, ``predicates``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.config import ConfigError
from strom.connect import config_def as cd
from strom.connect.plugins import Plugin, Plugins
from strom.connect.transforms.base import ConnectRecord, Predicate, Transformation

TRANSFORMS = "transforms"
PREDICATES = "predicates"
PREDICATE_KEY = "predicate"
NEGATE_KEY = "negate"

STAGE_KEYS = cd.ConfigDef(
    [
        cd.ConfigKey(
            PREDICATE_KEY,
            cd.STRING,
            None,
            cd.MEDIUM,
            "The alias of a predicate used to determine whether to apply this transformation.",
        ),
        cd.ConfigKey(
            NEGATE_KEY,
            cd.BOOLEAN,
            False,
            cd.MEDIUM,
            "Whether the configured predicate should be negated.",
        ),
    ]
)


@dataclass
class TransformationStage:
    """One transform of the chain, with the predicate that decides where it applies."""

    alias: str
    transformation: Transformation
    class_name: str  # as errors report the class executing (Kafka's name where it has one)
    predicate: Predicate | None = None
    negate: bool = False

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if self.predicate is None or self.negate != self.predicate.test(record):
            return self.transformation.apply(record)
        return record

    def close(self) -> None:
        self.transformation.close()
        if self.predicate is not None:
            self.predicate.close()


def aliases(props: Mapping[str, str], key: str) -> list[str]:
    """The aliases listed under ``transforms`` or ``predicates``."""
    return [alias.strip() for alias in (props.get(key) or "").split(",") if alias.strip()]


def settings_under(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The keys under ``prefix``, the prefix stripped."""
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}


def plugin_of(props: Mapping[str, str], plugins: Plugins, kind: str, alias: str) -> Plugin:
    """The plugin ``<kind>s.<alias>.type`` names; ConfigError naming that key."""
    key = f"{kind}s.{alias}.type"
    name = props.get(key)
    if not name:
        raise ConfigError(cd.missing(key))
    plugin = plugins.transformation(name) if kind == "transform" else plugins.predicate(name)
    if plugin is None:
        raise cd.invalid(key, name, f"Class {name} could not be found.")
    return plugin


def configured(plugin: Plugin, settings: Mapping[str, Any], prefix: str) -> Any:
    """A new instance of ``plugin`` configured with ``settings``; a ConfigError names the
    key with its prefix (``transforms.a.field``)."""
    instance = plugin.cls()
    own = {k: v for k, v in settings.items() if k not in ("type", PREDICATE_KEY, NEGATE_KEY)}
    try:
        instance.configure(own)
    except ConfigError as exc:
        raise ConfigError(_prefixed(str(exc), prefix, own)) from None
    return instance


def _prefixed(message: str, prefix: str, settings: Mapping[str, Any]) -> str:
    """Kafka names a transform's own key in its message; the connector's key is clearer."""
    for key in sorted(settings, key=len, reverse=True):
        marker = f"for configuration {key}:"
        if marker in message:
            return message.replace(marker, f"for configuration {prefix}{key}:")
    missing = 'Missing required configuration "'
    if message.startswith(missing):
        return message.replace(missing, missing + prefix, 1)
    return message


def build_stages(props: Mapping[str, str], plugins: Plugins) -> list[TransformationStage]:
    """The connector's transforms in order, each configured; ConfigError at the first
    bad key."""
    stages: list[TransformationStage] = []
    defined_predicates = aliases(props, PREDICATES)
    for alias in aliases(props, TRANSFORMS):
        prefix = f"{TRANSFORMS}.{alias}."
        plugin = plugin_of(props, plugins, "transform", alias)
        settings = settings_under(props, prefix)
        transformation = configured(plugin, settings, prefix)
        stage_settings = STAGE_KEYS.parse(settings)
        predicate_alias = stage_settings[PREDICATE_KEY]
        negate_given = NEGATE_KEY in settings
        if negate_given and predicate_alias is None:
            raise ConfigError(
                f"Config '{prefix}{NEGATE_KEY}' was provided but there is no config "
                f"'{prefix}{PREDICATE_KEY}' defining a predicate to be negated."
            )
        predicate = None
        if predicate_alias is not None:
            if predicate_alias not in defined_predicates:
                raise cd.invalid(
                    prefix + PREDICATE_KEY,
                    predicate_alias,
                    f"the predicate is not among {PREDICATES}={','.join(defined_predicates)}",
                )
            predicate_prefix = f"{PREDICATES}.{predicate_alias}."
            predicate_plugin = plugin_of(props, plugins, "predicate", predicate_alias)
            predicate = configured(
                predicate_plugin, settings_under(props, predicate_prefix), predicate_prefix
            )
        stages.append(
            TransformationStage(
                alias,
                transformation,
                plugin.listed_name,
                predicate,
                bool(stage_settings[NEGATE_KEY]),
            )
        )
    return stages


def apply_all(stages: list[TransformationStage], record: ConnectRecord) -> ConnectRecord | None:
    """``record`` through every stage in order (no error handling); None once dropped."""
    current: ConnectRecord | None = record
    for stage in stages:
        if current is None:
            return None
        current = stage.apply(current)
    return current
