"""The servers of one service id divide the persistent queries incrementally: this
server's slots change only by the slots the group moves (``QueryOwnership``'s
bookkeeping of the cooperative assignor's answers: added slots, taken slots, a joining
server serving once it has its share), and the registry stops only the queries of the
slots given up and starts only those of the slots received, the others left running
(a server that runs none of a query starts its Spark ahead of a takeover).
No broker: the group's answers are given to the callbacks as librdkafka gives them (the
real group is exercised by tests/integration/test_ksql_queries.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from strom.ksql import statements as st
from strom.ksql.config import server_config
from strom.ksql.metastore import Metastore
from strom.ksql.ownership import QUERY_SLOTS, QueryOwnership, slot_of
from strom.ksql.parser import parse_statement
from strom.ksql.planner import SinkRequest, plan_query
from strom.ksql.queries import QueryRegistry, RunningQuery

UNREACHABLE = "127.0.0.1:9"  # nothing is asked of it: the callbacks are called directly


def ownership(changes: list[frozenset[int]]) -> QueryOwnership:
    config = server_config({"bootstrap.servers": UNREACHABLE, "ksql.service.id": "own_"})
    admin = AdminClient({"bootstrap.servers": UNREACHABLE})
    return QueryOwnership(config, admin, "http://here", changes.append)


def slots(topic: str, numbers: range | list[int]) -> list[TopicPartition]:
    return [TopicPartition(topic, n) for n in numbers]


def test_slots_are_added_and_taken_incrementally() -> None:
    changes: list[frozenset[int]] = []
    owner = ownership(changes)
    owner._assigned(None, slots(owner.topic, range(QUERY_SLOTS)))  # alone in the group
    assert owner._first_assignment.is_set()
    owner._revoked(None, slots(owner.topic, range(6)))  # a second server joined
    owner._assigned(None, [])  # the second round gives this server nothing new
    assert owner.owned == frozenset(range(6, QUERY_SLOTS))
    owner._assigned(None, slots(owner.topic, [0, 1]))  # a third left: its slots come here
    owner._revoked(None, slots(owner.topic, [5]))  # a slot not held: nothing changes
    assert changes == [
        frozenset(range(QUERY_SLOTS)),
        frozenset(range(6, QUERY_SLOTS)),
        frozenset({0, 1, *range(6, QUERY_SLOTS)}),
    ]  # an empty answer, or a slot not held, calls nobody: no query stops or starts
    assert owner.owns(next(f"Q_{i}" for i in range(100) if slot_of(f"Q_{i}") == 7))


def test_a_joining_server_serves_once_it_has_its_share() -> None:
    owner = ownership([])
    owner._assigned(None, [])  # the round that takes its share from the others
    assert not owner._first_assignment.is_set()
    owner._assigned(None, slots(owner.topic, [3, 9]))
    assert owner._first_assignment.is_set()
    crowded = ownership([])  # more servers than slots: two answers, none for it
    crowded._assigned(None, [])
    crowded._assigned(None, [])
    assert crowded._first_assignment.is_set() and crowded.owned == frozenset()


class _Streaming:
    isActive = False  # settled at once


class _RecordingRuntime:
    """What the registry asks of Spark, recorded."""

    def __init__(self) -> None:
        self.queries: dict[str, _Streaming] = {}
        self.calls: list[tuple[str, str]] = []

    def warm(self) -> None:
        self.calls.append(("warm", ""))

    def start(self, spec: str) -> None:
        self.queries[spec] = _Streaming()
        self.calls.append(("start", spec))

    def stop(self, query_id: str, delete_state: bool = False) -> None:
        self.queries.pop(query_id, None)
        self.calls.append(("stop", query_id))

    def state(self, query_id: str) -> tuple[str, str | None]:
        return ("RUNNING", None) if query_id in self.queries else ("NOT_RUNNING", None)

    def close(self) -> None:
        return None


def _wait(condition: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture(scope="module")
def plan() -> Any:
    store = Metastore()
    text = "CREATE STREAM s (id STRING KEY, n INT) WITH (KAFKA_TOPIC='s', VALUE_FORMAT='JSON');"
    statement = parse_statement(text)
    assert isinstance(statement, st.CreateSource)
    store.put_source(store.source_from_statement(statement, text))
    text = "CREATE STREAM t AS SELECT id, n FROM s;"
    query = parse_statement(text)
    assert isinstance(query, st.CreateAsSelect)
    request = SinkRequest(query.name, query.kind, query.properties, None, 1)
    return plan_query(query.query, store, request, text)


def test_a_rebalance_moves_only_the_queries_of_the_slots_that_move(plan: Any) -> None:
    runtime = _RecordingRuntime()
    registry = QueryRegistry(lambda: runtime)
    owned = set(range(QUERY_SLOTS))
    registry.owns = lambda query_id: slot_of(query_id) in owned
    ids = [f"CSAS_T_{n}" for n in range(24)]
    try:
        for query_id in ids:
            query = RunningQuery(query_id, "CREATE STREAM t AS ...", plan)
            registry.add(query)
            registry.start(query, query_id)  # the spec: the id is all the runtime records
        _wait(lambda: all(registry.queries[q].started for q in ids))
        runtime.calls.clear()
        owned -= {0, 1, 2, 3, 4, 5}  # another server joined and took half
        registry.rebalance()
        moved = sorted(q for q in ids if slot_of(q) < 6)
        assert moved and len(moved) < len(ids)
        assert runtime.calls == [("stop", q) for q in ids if slot_of(q) < 6]
        owned |= {0, 1}  # that server left again: its queries of two slots come back
        registry.rebalance()
        back = [q for q in ids if slot_of(q) in (0, 1)]
        _wait(lambda: len(runtime.calls) == len(moved) + len(back))
        assert runtime.calls[len(moved) :] == [("start", q) for q in back]
        assert all(registry.queries[q].started == (slot_of(q) in owned) for q in ids)
        runtime.calls.clear()
        elsewhere = [q for q in (f"CSAS_U_{n}" for n in range(50)) if slot_of(q) == 4][:2]
        for query_id in elsewhere:  # run by another server: this one's Spark starts once
            query = RunningQuery(query_id, "CREATE STREAM u AS ...", plan)
            registry.add(query)
            registry.start(query, query_id)
        _wait(lambda: runtime.calls == [("warm", "")])
    finally:
        registry.close()
