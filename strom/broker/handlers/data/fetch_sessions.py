"""Incremental fetch sessions (KIP-227): the broker's cache of what each session fetches.

A client opens a session with a full Fetch at session epoch 0; the broker remembers the
session's partitions (fetch offset, byte limit, leader epochs) and answers with a
session id. Each later Fetch of that session (epoch 1, 2, ...) names only the
partitions whose fetch position changed, plus those to forget, and its response
carries only the partitions with something new: records, an error, a moved high
watermark, last stable offset or log start offset, a diverging epoch. Epoch -1 is a
full fetch without a session (and closes the named one); a session the broker no
longer knows is FETCH_SESSION_ID_NOT_FOUND and a wrong epoch INVALID_FETCH_SESSION_EPOCH,
after which the client starts over with a full fetch.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions. When it is full
a new session takes the slot of the least recently used one idle for at least
``EVICTABLE_AFTER_S``; when none is, the client is answered without a session (id 0)
and goes on with full fetches, which every client accepts.

Sans-I/O: the Fetch handler (``fetch.py``) asks ``begin`` what a request means, gets
the partitions to read from the session, and passes its response through ``answer``.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1  # a full fetch without a session
EVICTABLE_AFTER_S = 120.0  # Kafka's minimum idle time before a session may be evicted

PartitionKey = tuple[Any, int]  # (topic id from Fetch v13, else topic name; partition)


@dataclass(slots=True)
class SessionPartition:
    """What a session fetches of one partition, and what its last response said."""

    name: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # As last answered; -1 until then (and after an error, so the partition is
    # answered again once the error is gone).
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the session's next request must carry
    partitions: OrderedDict[PartitionKey, SessionPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0


@dataclass(slots=True)
class SessionStep:
    """What one Fetch request means for its session."""

    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    incremental: bool = False


def partition_key(
    topic_name: str | None, topic_id: uuid.UUID | None, partition: int
) -> PartitionKey:
    return (topic_id if topic_id is not None else topic_name, partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class FetchSessionCache:
    """The broker's sessions, by id."""

    def __init__(
        self,
        slots: int,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.slots = slots
        self.clock = clock
        self.rng = rng or random.Random()
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self.sessions)

    def begin(self, session_id: int, epoch: int) -> SessionStep:
        """Resolve a request's (session id, epoch): the session to serve it from, a new
        one for a full fetch at epoch 0, or an error. An incremental request moves its
        session to the next epoch."""
        if epoch == FINAL_EPOCH:
            self.sessions.pop(session_id, None)
            return SessionStep()
        if epoch == INITIAL_EPOCH:
            self.sessions.pop(session_id, None)
            return SessionStep(session=self._create())
        session = self.sessions.get(session_id)
        if session is None:
            return SessionStep(error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionStep(error=ErrorCode.invalid_fetch_session_epoch)
        session.epoch = next_epoch(epoch)
        session.last_used = self.clock()
        self.sessions.move_to_end(session_id)
        return SessionStep(session=session, incremental=True)

    def _create(self) -> FetchSession | None:
        now = self.clock()
        if len(self.sessions) >= self.slots:
            if not self.sessions:
                return None  # no slots at all
            oldest_id, oldest = next(iter(self.sessions.items()))
            if now - oldest.last_used < EVICTABLE_AFTER_S:
                return None  # every session is in use: this client fetches without one
            del self.sessions[oldest_id]
        while True:
            session_id = self.rng.randint(1, 0x7FFFFFFF)
            if session_id not in self.sessions:
                break
        session = FetchSession(session_id, next_epoch(INITIAL_EPOCH), last_used=now)
        self.sessions[session_id] = session
        return session


def update(
    session: FetchSession, changed: list[SessionPartition], forgotten: list[PartitionKey]
) -> None:
    """Apply an incremental request: partitions added or moved, partitions forgotten."""
    for key in forgotten:
        session.partitions.pop(key, None)
    for wanted in changed:
        key = partition_key(wanted.name, wanted.topic_id, wanted.partition)
        cached = session.partitions.get(key)
        if cached is None:
            session.partitions[key] = wanted
        else:
            cached.fetch_offset = wanted.fetch_offset
            cached.max_bytes = wanted.max_bytes
            cached.current_leader_epoch = wanted.current_leader_epoch
            cached.last_fetched_epoch = wanted.last_fetched_epoch


def fill(session: FetchSession, wanted: list[SessionPartition]) -> None:
    """A new session fetches what its opening full request named."""
    session.partitions.clear()
    for w in wanted:
        session.partitions[partition_key(w.name, w.topic_id, w.partition)] = w


def answer(session: FetchSession, response: Any, incremental: bool) -> Any:
    """The response with the session's id; an incremental one keeps only the partitions
    with something new. Either way, remember what was answered."""
    topics = []
    for topic in response.responses:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        kept = []
        for part in topic.partitions:
            cached = session.partitions.get(partition_key(name, topic_id, part.partition_index))
            if cached is None or _remember(cached, part) or not incremental:
                kept.append(part)
        if kept:
            topics.append(dataclasses.replace(topic, partitions=tuple(kept)))
    return dataclasses.replace(response, session_id=session.id, responses=tuple(topics))


def _remember(cached: SessionPartition, part: Any) -> bool:
    """Note what this answer tells of the partition; True if the client must see it."""
    must = bool(part.records)
    if part.error_code != ErrorCode.none:
        cached.high_watermark = -1
        return True
    if getattr(part, "diverging_epoch", None) is not None and part.diverging_epoch.epoch >= 0:
        must = True
    if cached.high_watermark != part.high_watermark:
        cached.high_watermark = part.high_watermark
        must = True
    if cached.last_stable_offset != part.last_stable_offset:
        cached.last_stable_offset = part.last_stable_offset
        must = True
    if cached.log_start_offset != part.log_start_offset:
        cached.log_start_offset = part.log_start_offset
        must = True
    return must
