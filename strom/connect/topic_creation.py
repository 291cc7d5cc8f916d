"""Topics a source connector creates (Kafka's KIP-158): the ``topic.creation.*`` settings of
a connector, their validation as Kafka enriches a source connector's config with them, and
creating a missing topic before a task first writes to it.

A connector uses topic creation when the worker's ``topic.creation.enable`` (true) and the
connector sets any ``topic.creation.`` key; it must then give
``topic.creation.default.replication.factor`` and ``topic.creation.default.partitions``
(each at least 1, or -1 for the broker's default). ``topic.creation.groups`` names further
groups; each has ``topic.creation.<group>.include`` and ``.exclude`` (lists of regular
expressions matched against the whole topic name), its own ``replication.factor`` and
``partitions`` (the default group's when unset), and any other
``topic.creation.<group>.<topic config>`` (``cleanup.policy``, ``retention.ms``...) as the
new topic's configs (the default group's configs under a group's own). A topic goes to the
first group, in the order listed, that includes and does not exclude it, else to the
default group (which includes every topic). A topic that exists already is left as it is.

Does not own sending records (``runtime``) or the broker's automatic topic creation.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from strom.connect import config_def as cd
from strom.connect.api import ConnectException

log = logging.getLogger(__name__)

PREFIX = "topic.creation."
GROUPS = PREFIX + "groups"
DEFAULT_GROUP = "default"
GROUP_KEYS = ("include", "exclude", "replication.factor", "partitions")
CREATE_TIMEOUT_S = 30.0


def uses_topic_creation(props: Mapping[str, str]) -> bool:
    return any(key.startswith(PREFIX) for key in props)


def _size(minimum_what: str) -> Any:
    def check(name: str, value: Any) -> None:
        if value is not None and value != -1 and value < 1:
            raise cd.invalid(
                name, value, f"Value must be -1 (the broker's default) or at least 1 {minimum_what}"
            )

    return check


def _regexes(name: str, value: Any) -> None:
    for pattern in value or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise cd.invalid(
                name, ",".join(value), f"not a valid regular expression: {exc}"
            ) from None


def group_names(props: Mapping[str, str]) -> list[str]:
    text = props.get(GROUPS) or ""
    return list(dict.fromkeys(g.strip() for g in text.split(",") if g.strip()))


def config_def(props: Mapping[str, str]) -> cd.ConfigDef:
    """The ``topic.creation.*`` keys of a source connector's config (Kafka's enrichment):
    the groups list, the default group's required sizes, each group's keys."""
    group = "Topic Creation"
    keys = [
        cd.ConfigKey(
            GROUPS,
            cd.LIST,
            "",
            cd.LOW,
            "Groups of configurations for topics created by source connectors",
            group=group,
            order_in_group=1,
            display_name="Topic Creation Groups",
        )
    ]
    for order, name in enumerate([DEFAULT_GROUP, *group_names(props)], start=1):
        prefix = f"{PREFIX}{name}."
        required = name == DEFAULT_GROUP
        keys += [
            cd.ConfigKey(
                prefix + "replication.factor",
                cd.SHORT,
                cd.REQUIRED if required else None,
                cd.LOW,
                "Replication factor for new topics of this group (-1: the broker's default).",
                group=group,
                order_in_group=order * 10 + 1,
                check=_size("replica"),
            ),
            cd.ConfigKey(
                prefix + "partitions",
                cd.INT,
                cd.REQUIRED if required else None,
                cd.LOW,
                "Number of partitions for new topics of this group (-1: the broker's default).",
                group=group,
                order_in_group=order * 10 + 2,
                check=_size("partition"),
            ),
        ]
        if not required:
            keys += [
                cd.ConfigKey(
                    prefix + "include",
                    cd.LIST,
                    "",
                    cd.LOW,
                    "Regular expressions of the topics this group creates.",
                    group=group,
                    order_in_group=order * 10 + 3,
                    check=_regexes,
                ),
                cd.ConfigKey(
                    prefix + "exclude",
                    cd.LIST,
                    "",
                    cd.LOW,
                    "Regular expressions of the topics this group does not create.",
                    group=group,
                    order_in_group=order * 10 + 4,
                    check=_regexes,
                ),
            ]
    return cd.ConfigDef(keys)


def errors_beyond_keys(props: Mapping[str, str]) -> dict[str, str]:
    """Errors of ``topic.creation.*`` keys no group defines (a group not in the list)."""
    names = {DEFAULT_GROUP, *group_names(props)}
    found: dict[str, str] = {}
    for key in props:
        if not key.startswith(PREFIX) or key == GROUPS:
            continue
        group = key[len(PREFIX) :].split(".", 1)[0]
        if group not in names:
            found[key] = str(
                cd.invalid(
                    key,
                    props[key],
                    f"the group {group} is not among {GROUPS}={props.get(GROUPS, '')}",
                )
            )
        elif group == DEFAULT_GROUP and key[len(PREFIX + DEFAULT_GROUP) + 1 :] in (
            "include",
            "exclude",
        ):
            found[key] = str(cd.invalid(key, props[key], "the default group includes every topic"))
    return found


@dataclass
class TopicGroup:
    name: str
    include: list[re.Pattern[str]]
    exclude: list[re.Pattern[str]]
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)

    def matches(self, topic: str) -> bool:
        included = self.name == DEFAULT_GROUP or any(p.fullmatch(topic) for p in self.include)
        return included and not any(p.fullmatch(topic) for p in self.exclude)


def groups_of(props: Mapping[str, str]) -> list[TopicGroup]:
    """The connector's groups in the order they are matched, the default one last."""
    settings = config_def(props).parse(props)
    default_prefix = f"{PREFIX}{DEFAULT_GROUP}."

    def own_configs(prefix: str) -> dict[str, str]:
        return {
            key[len(prefix) :]: value
            for key, value in props.items()
            if key.startswith(prefix) and key[len(prefix) :] not in GROUP_KEYS
        }

    default = TopicGroup(
        DEFAULT_GROUP,
        [],
        [],
        settings[default_prefix + "partitions"],
        settings[default_prefix + "replication.factor"],
        own_configs(default_prefix),
    )
    groups = []
    for name in group_names(props):
        prefix = f"{PREFIX}{name}."
        partitions = settings[prefix + "partitions"]
        replication = settings[prefix + "replication.factor"]
        groups.append(
            TopicGroup(
                name,
                [re.compile(p) for p in settings[prefix + "include"]],
                [re.compile(p) for p in settings[prefix + "exclude"]],
                default.partitions if partitions is None else partitions,
                default.replication_factor if replication is None else replication,
                {**default.configs, **own_configs(prefix)},
            )
        )
    return [*groups, default]


class TopicCreator:
    """Creates each topic a task writes to, once, before its first record is sent."""

    def __init__(self, props: Mapping[str, str], admin_settings: dict[str, Any]) -> None:
        self.groups = groups_of(props)
        self.admin_settings = admin_settings
        self.admin: AdminClient | None = None
        self.known: set[str] = set()
        self.lock = threading.Lock()

    @classmethod
    def for_connector(
        cls, worker_enabled: bool, props: Mapping[str, str], admin_settings: dict[str, Any]
    ) -> TopicCreator | None:
        if not worker_enabled or not uses_topic_creation(props):
            return None
        return cls(props, admin_settings)

    def group_for(self, topic: str) -> TopicGroup:
        return next(g for g in self.groups if g.matches(topic))

    def ensure(self, topic: str) -> None:
        if topic in self.known:
            return
        with self.lock:
            if topic in self.known:
                return
            group = self.group_for(topic)
            if self.admin is None:
                self.admin = AdminClient(self.admin_settings)
            new = NewTopic(
                topic, group.partitions, group.replication_factor, config=dict(group.configs)
            )
            future = self.admin.create_topics([new])[topic]
            try:
                future.result(timeout=CREATE_TIMEOUT_S)
                log.info(
                    "created topic %s (topic.creation group %s: %d partitions, replication "
                    "factor %d, configs %s)",
                    topic,
                    group.name,
                    group.partitions,
                    group.replication_factor,
                    group.configs,
                )
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ConnectException(
                        f"Failed to create topic {topic} (topic.creation group {group.name}): "
                        f"{error.str()}"
                    ) from None
            self.known.add(topic)
