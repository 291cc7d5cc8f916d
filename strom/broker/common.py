"""Small pieces every handler module shares: throttle value, clock, topic lookup,
authorized operations, and stopping a background task boundedly (``stop_task``)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from typing import Any

from strom.cluster.node_state import NodeState, TopicView

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)

# Kafka's AclOperation codes. A response's "authorized operations" is a 32-bit field
# with bit N set when operation N is allowed, or INT32_MIN when it was not asked for.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
OPERATIONS_NOT_REQUESTED = -(2**31)


def _bit_field(*operations: int) -> int:
    return sum(1 << op for op in set(operations))


# What each resource type supports: all allowed without an authorizer, as Kafka answers
# when it runs without one; otherwise authz.operations asks the ACLs.
TOPIC_OPERATIONS = _bit_field(
    READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS
)
GROUP_OPERATIONS = _bit_field(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bit_field(
    CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
)


def authorized_operations(supported: int, requested: bool) -> int:
    """The field a response carries: the allowed operations, if the request asked."""
    return supported if requested else OPERATIONS_NOT_REQUESTED


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def resolve_topic(
    controller: NodeState, name: str | None, topic_id: uuid.UUID | None
) -> TopicView | None:
    """A topic by name, or by id when the request version carries ids instead."""
    if name:
        return controller.topic(name)
    if topic_id is not None and topic_id != ZERO_UUID:
        return controller.metadata.by_id.get(topic_id)
    return None


async def stop_task(task: asyncio.Task[Any], what: str, timeout_s: float = 5.0) -> None:
    """Cancel ``task`` and wait for it to end, boundedly: Python 3.11's ``wait_for`` can
    lose a cancellation that arrives as the future it waits on completes, and the task
    then runs on, so a bare ``await task`` could hold a stop forever."""
    for _ in range(2):
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=timeout_s)
        if done:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
            return
    log.warning("%s did not stop within %.0fs of being cancelled; going on", what, 2 * timeout_s)
