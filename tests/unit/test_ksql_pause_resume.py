"""PAUSE and RESUME of persistent queries, as ksqlDB 0.29 has them: parsed (a query id
or ALL), a paused query PAUSED in SHOW QUERIES' statusCount and EXPLAIN's
ksqlHostQueryStatus (its ``state`` ksqlDB's aggregate, RUNNING), printed by the CLI as
ksqlDB's CLI prints the statusCount; the registry stops a paused query's Spark query
with its checkpoint kept, starts it neither at its start nor at a rebalance, starts it
again on RESUME, and deletes its checkpoint on TERMINATE. The Spark side is recorded
(what the registry asks of it); tests/integration/test_ksql_queries.py runs it on
Spark."""

from __future__ import annotations

import time
from typing import Any

import pytest

from strom.cli.ksql import KsqlShell
from strom.ksql import statements as st
from strom.ksql.metastore import Metastore
from strom.ksql.parser import KsqlSyntaxError, parse_statement
from strom.ksql.planner import SinkRequest, plan_query
from strom.ksql.queries import QueryRegistry, RunningQuery


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("PAUSE csas_t_1;", st.PauseQuery("CSAS_T_1")),
        ("pause ALL", st.PauseQuery(None)),
        ("RESUME INSERTQUERY_7", st.ResumeQuery("INSERTQUERY_7")),
        ("resume all;", st.ResumeQuery(None)),
    ],
)
def test_pause_and_resume_parse(text: str, statement: st.Statement) -> None:
    assert parse_statement(text) == statement


def test_pause_needs_a_query_id_or_all() -> None:
    with pytest.raises(KsqlSyntaxError, match="expecting {'ALL', IDENTIFIER}"):
        parse_statement("PAUSE")


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


def test_a_paused_query_is_paused_in_its_status_counts(plan: Any) -> None:
    query = RunningQuery("CSAS_T_1", "CREATE STREAM t AS SELECT id, n FROM s;", plan)
    query.paused = True
    running = query.running_json()
    assert running["statusCount"] == {"PAUSED": 1}
    assert running["state"] == "RUNNING"  # ksqlDB's aggregate knows ERROR and RUNNING only
    description = query.description_json("http://here:8088")
    assert description["ksqlHostQueryStatus"] == {"http://here:8088": "PAUSED"}
    assert description["state"] == "RUNNING"
    query.paused = False
    assert query.running_json()["statusCount"] == {"RUNNING": 1}


def test_the_cli_shows_the_status_count(capsys: pytest.CaptureFixture[str]) -> None:
    listed = [
        {"id": "CSAS_T_1", "queryType": "PERSISTENT", "statusCount": {"PAUSED": 1},
         "state": "RUNNING", "sinks": ["T"], "sinkKafkaTopics": ["t"],
         "queryString": "CREATE STREAM t AS SELECT id, n FROM s;"},
        {"id": "CSAS_U_2", "queryType": "PERSISTENT", "statusCount": {"RUNNING": 1},
         "state": "RUNNING", "sinks": ["U"], "sinkKafkaTopics": ["u"],
         "queryString": "CREATE STREAM u AS SELECT id, n FROM s;"},
    ]  # fmt: skip
    shell = KsqlShell("http://127.0.0.1:1", {}, json_output=False)  # no call is made
    shell.show({"@type": "queries", "queries": listed})
    out = capsys.readouterr().out
    paused = next(line for line in out.splitlines() if "CSAS_T_1" in line)
    running = next(line for line in out.splitlines() if "CSAS_U_2" in line)
    assert " PAUSED:1 " in paused and " RUNNING:1 " in running


class _Streaming:
    isActive = False  # settled at once


class _RecordingRuntime:
    """What the registry asks of Spark, recorded."""

    def __init__(self) -> None:
        self.queries: dict[str, _Streaming] = {}
        self.calls: list[tuple[str, str, bool]] = []

    def warm(self) -> None:
        self.calls.append(("warm", "", False))

    def start(self, spec: str) -> None:
        self.queries[spec] = _Streaming()
        self.calls.append(("start", spec, False))

    def stop(self, query_id: str, delete_state: bool = False) -> None:
        self.queries.pop(query_id, None)
        self.calls.append(("stop", query_id, delete_state))

    def state(self, query_id: str) -> tuple[str, str | None]:
        return ("RUNNING", None) if query_id in self.queries else ("NOT_RUNNING", None)

    def close(self) -> None:
        return None


def _wait(condition: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_pause_stops_the_query_until_resume(plan: Any) -> None:
    runtime = _RecordingRuntime()
    registry = QueryRegistry(lambda: runtime)
    owned = {"CSAS_T_1"}
    registry.owns = lambda query_id: query_id in owned
    query = RunningQuery("CSAS_T_1", "CREATE STREAM t AS ...", plan)
    try:
        registry.add(query)
        registry.start(query, "CSAS_T_1")  # the spec: the id is all the runtime records
        _wait(lambda: query.started)
        registry.pause("CSAS_T_1")  # answers once Spark's query stopped
        assert query.paused and not query.started
        assert runtime.calls[-1] == ("stop", "CSAS_T_1", False)  # the checkpoint kept
        registry.pause("CSAS_T_1")  # paused already: nothing more
        owned.clear()
        registry.rebalance()  # given away: not running here, nothing to stop
        owned.add("CSAS_T_1")
        registry.rebalance()  # given back: a paused query is not started
        registry.start(query, "CSAS_T_1")  # a restart's start: not while paused
        assert runtime.calls == [("start", "CSAS_T_1", False), ("stop", "CSAS_T_1", False)]
        registry.resume("CSAS_T_1")
        _wait(lambda: query.started)
        assert not query.paused and runtime.calls[-1] == ("start", "CSAS_T_1", False)
        registry.pause("CSAS_T_1")
        registry.terminate("CSAS_T_1")  # a paused query's checkpoint goes with it
        assert runtime.calls[-1] == ("stop", "CSAS_T_1", True)
        assert "CSAS_T_1" not in registry.queries
    finally:
        registry.close()


def test_a_query_paused_before_it_starts_waits_for_resume(plan: Any) -> None:
    runtime = _RecordingRuntime()
    registry = QueryRegistry(lambda: runtime)
    registry.owns = lambda query_id: True
    query = RunningQuery("CSAS_T_3", "CREATE STREAM t AS ...", plan)
    other = RunningQuery("CSAS_T_4", "CREATE STREAM t AS ...", plan)
    try:
        registry.add(query)
        registry.add(other)
        registry.pause("CSAS_T_3")  # replayed: PAUSE before the server starts its queries
        registry.start(query, "CSAS_T_3")
        registry.start(other, "CSAS_T_4")
        _wait(lambda: other.started)
        assert not query.started and query.paused
        registry.resume("CSAS_T_3")
        _wait(lambda: query.started)
        assert runtime.calls == [("start", "CSAS_T_4", False), ("start", "CSAS_T_3", False)]
    finally:
        registry.close()
