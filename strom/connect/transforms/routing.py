"""Kafka's transforms of where a record goes and what rides along, with Kafka's settings
and messages: ``RegexRouter`` (``regex``, ``replacement``: a topic the regex matches
whole is replaced, ``$1`` and ``${name}`` naming groups as in Java), ``TimestampRouter``
(``topic.format`` with ``${topic}`` and ``${timestamp}``, ``timestamp.format`` a
SimpleDateFormat pattern in UTC), ``Filter`` (drops every record: use it with a
predicate), ``DropHeaders`` (``headers``) and ``InsertHeader`` (``header``,
``value.literal``: the literal parsed as Kafka's ``Values.parseString`` does, a typed
header the connector's header converter writes).

Regular expressions are Python's (``re``), which read Java's common syntax the same.

Does not own predicates (``predicates``) or chaining (``chain``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

from strom.connect import config_def as cd
from strom.connect.converters import parse_string
from strom.connect.data import DataException
from strom.connect.transforms.base import ConnectRecord, Transformation, checked_by
from strom.connect.transforms.fields import non_empty_list
from strom.connect.transforms.java_dates import JavaDateFormat

log = logging.getLogger(__name__)
_JAVA_GROUP = re.compile(r"\\(.)|\$(\d+)|\$\{(\w+)\}|\$")


def valid_regex(name: str, value: Any) -> None:
    """Kafka's ``RegexValidator``."""
    try:
        re.compile(value or "")
    except re.error as exc:
        raise cd.invalid(name, value, f"Invalid regex: {exc}") from None


def python_template(replacement: str) -> str:
    """A Java ``Matcher.replaceFirst`` replacement as a Python ``Match.expand`` template:
    ``$1`` and ``${name}`` are groups, ``\\x`` is ``x``."""

    def translate(match: re.Match[str]) -> str:
        escaped, number, name = match.groups()
        if escaped is not None:
            return escaped.replace("\\", "\\\\")
        if number is not None:
            return f"\\g<{number}>"
        if name is not None:
            return f"\\g<{name}>"
        raise cd.invalid("replacement", replacement, "Illegal group reference")

    parts: list[str] = []
    position = 0
    for match in _JAVA_GROUP.finditer(replacement):
        parts.append(replacement[position : match.start()].replace("\\", "\\\\"))
        parts.append(translate(match))
        position = match.end()
    parts.append(replacement[position:].replace("\\", "\\\\"))
    return "".join(parts)


class RegexRouter(Transformation):
    """Update the record topic using the configured regular expression and replacement
    string."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "regex",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "Regular expression to use for matching.",
                check=valid_regex,
            ),
            cd.ConfigKey("replacement", cd.STRING, cd.REQUIRED, cd.HIGH, "Replacement string."),
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.regex = re.compile(self.settings["regex"])
        self.template = python_template(self.settings["replacement"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        match = self.regex.fullmatch(record.topic)
        if match is None:
            log.debug("Not rerouting topic '%s' as it does not match the regex", record.topic)
            return record
        topic = match.expand(self.template)
        log.debug("Rerouting from topic '%s' to new topic '%s'", record.topic, topic)
        return dataclasses.replace(record, topic=topic)


def _date_format(name: str, pattern: str) -> JavaDateFormat:
    try:
        return JavaDateFormat(pattern)
    except ValueError as exc:
        raise cd.invalid(name, pattern, str(exc)) from None


class TimestampRouter(Transformation):
    """Update the record's topic field as a function of the original topic value and the
    record timestamp."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "topic.format",
                cd.STRING,
                "${topic}-${timestamp}",
                cd.HIGH,
                "Format string which can contain <code>${topic}</code> and "
                "<code>${timestamp}</code> as placeholders for the topic and timestamp, "
                "respectively.",
            ),
            cd.ConfigKey(
                "timestamp.format",
                cd.STRING,
                "yyyyMMdd",
                cd.HIGH,
                "Format string for the timestamp that is compatible with "
                "<code>java.text.SimpleDateFormat</code>.",
                check=checked_by(lambda pattern: _date_format("timestamp.format", pattern)),
            ),
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.topic_format: str = self.settings["topic.format"]
        self.timestamp_format = _date_format("timestamp.format", self.settings["timestamp.format"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.timestamp is None:
            raise DataException(f"Timestamp missing on record: {record}")
        formatted = self.timestamp_format.format(record.timestamp)
        topic = self.topic_format.replace("${topic}", record.topic)
        return dataclasses.replace(record, topic=topic.replace("${timestamp}", formatted))


class Filter(Transformation):
    """Drops all records, filtering them from subsequent transformations in the chain.
    This is intended to be used conditionally to filter out records matching (or not
    matching) a particular Predicate."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return None


class DropHeaders(Transformation):
    """Removes one or more headers from each record."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "headers",
                cd.LIST,
                cd.REQUIRED,
                cd.HIGH,
                "The name of the headers to be removed.",
                check=non_empty_list,
            )
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.dropped = set(self.settings["headers"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        kept = [(key, value) for key, value in record.headers if key not in self.dropped]
        return dataclasses.replace(record, headers=kept)


class InsertHeader(Transformation):
    """Add a header to each record."""

    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey(
                "header",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "The name of the header.",
            ),
            cd.ConfigKey(
                "value.literal",
                cd.STRING,
                cd.REQUIRED,
                cd.HIGH,
                "The literal value that is to be set as the header value on all records.",
            ),
        ]
    )

    def configure(self, props: Mapping[str, Any]) -> None:
        super().configure(props)
        self.header: str = self.settings["header"]
        # Kafka's: the literal parsed as Values.parseString does (42 an INT8, true a
        # BOOLEAN...), written by the connector's header converter
        self.literal = parse_string(self.settings["value.literal"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return dataclasses.replace(record, headers=[*record.headers, (self.header, self.literal)])
