"""Kafka's rules for topic names, and the internal topics' names.

Owns what makes a topic name legal (1-249 characters of [a-zA-Z0-9._-], not '.' or
'..') and Kafka's refusal of names that differ from another only by '.' versus '_'.
The metadata itself lives in the replicated metadata log (``strom.cluster.records``,
``image``, ``node_state``).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

METADATA_FILE = "strom-metadata.json"
META_PROPERTIES = "meta.properties"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse."""


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def collides(name: str, other: str) -> bool:
    """Kafka refuses topics whose names differ only by '.' versus '_'."""
    return name != other and name.replace(".", "_") == other.replace(".", "_")
