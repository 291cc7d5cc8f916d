"""The fetch session cache (KIP-227) without a broker: epochs, errors, eviction, and
which partitions an incremental response keeps."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from strom.broker.handlers.data import fetch_sessions
from strom.broker.handlers.data.fetch_sessions import (
    EVICTABLE_AFTER_S,
    FetchSessionCache,
    SessionPartition,
    partition_key,
)
from strom.protocol.errors import ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Part:  # the fields of a Fetch response partition that the cache reads
    partition_index: int
    records: bytes = b""
    error_code: ErrorCode = ErrorCode.none
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0
    diverging_epoch: object = None


@dataclass
class Topic:
    topic: str
    partitions: tuple[Part, ...]
    topic_id: object = None


@dataclass
class Response:
    responses: tuple[Topic, ...]
    session_id: int = 0
    error_code: ErrorCode = ErrorCode.none
    extra: dict = field(default_factory=dict)


def wanted(partition: int, offset: int = 0) -> SessionPartition:
    return SessionPartition("t", None, partition, offset, 1 << 20)


def response(*parts: Part) -> Response:
    return Response((Topic("t", parts),))


def test_epochs_and_errors() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    assert cache.begin(0, -1).session is None  # sessionless full fetch
    opened = cache.begin(0, 0)
    assert opened.session is not None and not opened.incremental
    sid = opened.session.id
    assert sid > 0
    assert cache.begin(sid, 1).incremental
    assert cache.begin(sid, 1).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.begin(sid, 2).incremental
    assert cache.begin(sid + 1, 1).error == ErrorCode.fetch_session_id_not_found
    assert cache.begin(sid, -1).session is None  # closes it
    assert cache.begin(sid, 3).error == ErrorCode.fetch_session_id_not_found
    assert len(cache) == 0


def test_epoch_zero_with_an_id_replaces_that_session() -> None:
    cache = FetchSessionCache(10)
    first = cache.begin(0, 0).session
    second = cache.begin(first.id, 0).session
    assert first.id not in cache.sessions and second.id in cache.sessions


def test_full_cache_evicts_only_sessions_idle_long_enough() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    a = cache.begin(0, 0).session
    clock.now += 1
    b = cache.begin(0, 0).session
    assert cache.begin(0, 0).session is None  # both in recent use: no session
    clock.now += EVICTABLE_AFTER_S
    cache.begin(b.id, 1)  # b is used again; a stays idle
    c = cache.begin(0, 0).session
    assert c is not None
    assert set(cache.sessions) == {b.id, c.id}
    assert a.id not in cache.sessions
    assert FetchSessionCache(0).begin(0, 0).session is None


def test_incremental_answer_keeps_only_partitions_with_news() -> None:
    cache = FetchSessionCache(10)
    session = cache.begin(0, 0).session
    fetch_sessions.fill(session, [wanted(0), wanted(1), wanted(2)])
    full = fetch_sessions.answer(
        session, response(Part(0), Part(1), Part(2, high_watermark=5)), incremental=False
    )
    assert full.session_id == session.id
    assert [p.partition_index for p in full.responses[0].partitions] == [0, 1, 2]

    cache.begin(session.id, 1)
    same = fetch_sessions.answer(
        session, response(Part(0), Part(1), Part(2, high_watermark=5)), incremental=True
    )
    assert same.responses == ()  # nothing new: no partitions at all

    cache.begin(session.id, 2)
    news = fetch_sessions.answer(
        session,
        response(
            Part(0, records=b"x", high_watermark=0),  # records
            Part(1, high_watermark=3),  # a moved high watermark
            Part(2, high_watermark=5, log_start_offset=2),  # a moved log start
        ),
        incremental=True,
    )
    assert [p.partition_index for p in news.responses[0].partitions] == [0, 1, 2]

    cache.begin(session.id, 3)
    error = fetch_sessions.answer(
        session,
        response(Part(0), Part(1, error_code=ErrorCode.not_leader_or_follower, high_watermark=-1)),
        incremental=True,
    )
    assert [p.partition_index for p in error.responses[0].partitions] == [1]
    cache.begin(session.id, 4)
    back = fetch_sessions.answer(session, response(Part(0), Part(1, high_watermark=3)), True)
    assert [p.partition_index for p in back.responses[0].partitions] == [1]  # the error went


def test_update_adds_moves_and_forgets() -> None:
    session = FetchSessionCache(10).begin(0, 0).session
    fetch_sessions.fill(session, [wanted(0), wanted(1)])
    fetch_sessions.update(session, [wanted(1, offset=7), wanted(2)], [partition_key("t", None, 0)])
    assert [(p.partition, p.fetch_offset) for p in session.partitions.values()] == [(1, 7), (2, 0)]
