"""Small pieces every handler module shares: throttle value, clock, topic lookup."""

from __future__ import annotations

import datetime
import time
import uuid

from strom.cluster.controller import Controller
from strom.cluster.metadata import TopicMetadata

NO_THROTTLE = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def resolve_topic(
    controller: Controller, name: str | None, topic_id: uuid.UUID | None
) -> TopicMetadata | None:
    """A topic by name, or by id when the request version carries ids instead."""
    if name:
        return controller.topic(name)
    if topic_id is not None and topic_id != ZERO_UUID:
        return controller.metadata.by_id.get(topic_id)
    return None
