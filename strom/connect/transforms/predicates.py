"""Kafka's predicates, by which a transform applies to some records only (a transform's
``predicate`` names one, ``negate`` inverts it): ``TopicNameMatches`` (``pattern``, a
regular expression the topic matches whole), ``HasHeaderKey`` (``name``: a header of
that name is there) and ``RecordIsTombstone`` (the value is null).

Does not own applying them (``chain``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from strom.connect import config_def as cd
from strom.connect.transforms.base import ConnectRecord, Predicate


def _pattern(name: str, value: Any) -> None:
    cd.non_empty(name, value)
    try:
        re.compile(value or "")
    except re.error as exc:
        raise cd.invalid(name, value, f"Invalid regex: {exc}") from None


class TopicNameMatches(Predicate):
    """A predicate which is true for records with a topic name that matches the
    configured regular expression."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "pattern",
                cd.STRING,
                cd.REQUIRED,
                cd.MEDIUM,
                "A Java regular expression for matching against the name of a record's topic.",
                check=_pattern,
            )
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.pattern = re.compile(self.settings["pattern"])

    def test(self, record: ConnectRecord) -> bool:
        return record.topic is not None and self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    """A predicate which is true for records with at least one header with the configured
    name."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "name", cd.STRING, cd.REQUIRED, cd.MEDIUM, "The header name.", check=cd.non_empty
            )
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.name: str = self.settings["name"]

    def test(self, record: ConnectRecord) -> bool:
        return any(key == self.name for key, _ in record.headers)


class RecordIsTombstone(Predicate):
    """A predicate which is true for records which are tombstones (i.e. have null
    value)."""

    def test(self, record: ConnectRecord) -> bool:
        return record.value is None
