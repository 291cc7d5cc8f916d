"""``strom ksql``'s printing of the server's answers, as ksqlDB's CLI prints them: a
push query's rows, EXPLAIN and SHOW QUERIES EXTENDED, DESCRIBE EXTENDED's queries, SHOW
TOPICS' replicas; and why a persistent query did not start when PySpark is missing."""

from __future__ import annotations

from typing import Any

import pytest

from strom.cli.ksql import KsqlShell, ascii_table, java_text, tabular_row
from strom.ksql.queries import start_error

STRING = {"type": "STRING", "fields": None, "memberSchema": None}
BIGINT = {"type": "BIGINT", "fields": None, "memberSchema": None}


def test_rows_share_the_width_and_wrap_long_values() -> None:
    assert tabular_row(["A", "B"], 20, header=True).splitlines() == [
        "+--------+--------+",
        "|A       |B       |",
        "+--------+--------+",
    ]
    # a value longer than its cell goes on in the next line, the columns kept aligned
    assert tabular_row(["u1", "1767225600000"], 20).splitlines() == [
        "|u1      |17672256|",
        "|        |00000   |",
    ]
    assert tabular_row(["x"] * 10, 20) == "|" + "x    |" * 10  # cells of 5 at least


def test_tables_as_ksqldb_lays_them_out() -> None:
    assert ascii_table(["Message"], [["Stream created"]], 200).splitlines() == [
        " Message        ",
        "----------------",
        " Stream created ",
        "----------------",
    ]
    # a cell of several lines is as wide as its longest; None is empty; the dashes are cut
    lines = ascii_table(["A", "B"], [["x\nlonger", None]], 8).splitlines()
    assert lines[:4] == [" A      | B ", "-" * 8, " x", "longer |   "]


def test_row_values_as_ksqldb_prints_them() -> None:
    """ksqlDB's CLI prints the Java toString of each value its JSON reads as."""
    values = [None, True, "a b", 3, 10.0, 0.001, 1e7, 1.5e-4, ["4ab5cbad", "8b6eae59"],
              {"F1": 1, "S": {"X": None}}]  # fmt: skip
    assert [java_text(v) for v in values] == [
        "null", "true", "a b", "3", "10.0", "0.001", "1.0E7", "1.5E-4",
        "[4ab5cbad, 8b6eae59]", "{F1=1, S={X=null}}",
    ]  # fmt: skip


def shell_output(capsys: pytest.CaptureFixture[str], entity: dict[str, Any]) -> str:
    shell = KsqlShell("http://127.0.0.1:1", {}, json_output=False)  # no call is made
    shell.show(entity)
    out, err = capsys.readouterr()
    assert err == ""
    return out


def test_explain_prints_the_query_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    description = {
        "id": "CTAS_T_2",
        "statementText": "CREATE TABLE t AS SELECT k, COUNT(*) AS n FROM s GROUP BY k;",
        "windowType": None,
        "fields": [{"name": "K", "schema": STRING, "type": "KEY"},
                   {"name": "N", "schema": BIGINT}],
        "sources": ["S"],
        "sinks": ["T"],
        "topology": " > [ SOURCE ] | Schema: S",
        "executionPlan": " > [ SOURCE ] | Schema: S",
        "overriddenProperties": {"auto.offset.reset": "earliest"},
        "ksqlHostQueryStatus": {"http://127.0.0.1:8088": "ERROR"},
        "queryType": "PERSISTENT",
        "queryErrors": [{"errorMessage": "the reason"}],
        "state": "ERROR",
    }  # fmt: skip
    out = shell_output(capsys, {"@type": "queryDescription", "queryDescription": description})
    assert "{" not in out.replace("{http://127.0.0.1:8088=ERROR}", "")  # no JSON
    lines = [line.rstrip() for line in out.splitlines()]
    assert lines[:5] == [
        "",
        "ID                   : CTAS_T_2",
        "Query Type           : PERSISTENT",
        "SQL                  : CREATE TABLE t AS SELECT k, COUNT(*) AS n FROM s GROUP BY k;",
        "Host Query Status    : {http://127.0.0.1:8088=ERROR}",
    ]
    for heading, first in (
        ("Sources that this query reads from:", "S"),
        ("Sinks that this query writes to:", "T"),
        ("Execution plan", " > [ SOURCE ] | Schema: S"),
        ("Processing topology", " > [ SOURCE ] | Schema: S"),
    ):
        at = lines.index(heading)
        assert set(lines[at + 1]) == {"-"} and lines[at + 2] == first
    assert " K     | VARCHAR(STRING)  (key)" in lines  # ksqlDB's %-16s before (key)
    assert any("auto.offset.reset" in line and "earliest" in line for line in lines)
    assert "Error Details        : the reason" in lines
    # SHOW QUERIES EXTENDED: each query so
    both = {"@type": "query_descriptions", "queryDescriptions": [description, description]}
    assert shell_output(capsys, both).count("ID                   : CTAS_T_2") == 2


def test_describe_extended_lists_the_queries(capsys: pytest.CaptureFixture[str]) -> None:
    source = {
        "name": "S", "type": "STREAM", "timestamp": "", "keyFormat": "KAFKA",
        "valueFormat": "JSON", "topic": "s", "partitions": 1, "replication": 1,
        "statement": "CREATE STREAM S (K STRING KEY, V BIGINT) WITH (...);", "extended": True,
        "fields": [{"name": "K", "schema": STRING, "type": "KEY"},
                   {"name": "V", "schema": BIGINT}],
        "readQueries": [{"id": "CSAS_C_3", "state": "RUNNING",
                         "queryString": "CREATE STREAM c AS\n  SELECT * FROM s;"}],
        "writeQueries": [],
    }  # fmt: skip
    out = shell_output(capsys, {"@type": "sourceDescription", "sourceDescription": source})
    lines = out.splitlines()
    assert (
        " K     | VARCHAR(STRING)  (key) " in lines and " V     | BIGINT                 " in lines
    )
    at = lines.index("Queries that read from this STREAM")
    assert lines[at + 2] == "CSAS_C_3 (RUNNING) : CREATE STREAM c AS SELECT * FROM s;"
    assert "Queries that write from this STREAM" not in lines
    assert "For query topology and execution plan please run: EXPLAIN <QueryId>" in lines


def test_windowed_keys_and_headers_as_ksqldb(capsys: pytest.CaptureFixture[str]) -> None:
    source = {
        "name": "T", "type": "TABLE", "windowType": "SESSION", "timestamp": "",
        "fields": [{"name": "K", "schema": STRING, "type": "KEY"},
                   {"name": "H", "schema": {"type": "BYTES"}, "type": "HEADER", "headerKey": "k"},
                   {"name": "HS", "schema": {"type": "ARRAY"} | {"memberSchema": BIGINT},
                    "type": "HEADER"}],
    }  # fmt: skip
    out = shell_output(capsys, {"@type": "sourceDescription", "sourceDescription": source})
    cells = [line.split(" | ")[1].rstrip() for line in out.splitlines() if " | " in line]
    assert cells == [
        "Type",
        "VARCHAR(STRING)  (primary key) (Window type: SESSION)",
        "BYTES            (header('k'))",
        "ARRAY<BIGINT>    (headers)",
    ]


def test_topics_show_replicas_as_ksqldb(capsys: pytest.CaptureFixture[str]) -> None:
    topics = [{"name": "even", "replicaInfo": [3, 3]}, {"name": "uneven", "replicaInfo": [3, 1]}]
    warned = {"@type": "kafka_topics", "topics": [], "warnings": [{"message": "careful"}]}
    assert shell_output(capsys, warned).splitlines()[-1] == "WARNING: careful"
    out = shell_output(capsys, {"@type": "kafka_topics", "topics": topics})
    assert out.splitlines() == [
        "",
        " Kafka Topic | Partitions | Partition Replicas ",
        "-----------------------------------------------",
        " even        | 2          | 3                  ",
        " uneven      | 2          | 3, 1               ",
        "-----------------------------------------------",
    ]  # ksqlDB's CLI's layout: columns as wide as their widest cell, dashed lines


def test_a_query_without_pyspark_says_what_to_install() -> None:
    try:
        import strom_module_that_is_not_there  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        message = start_error(exc)
    assert message.startswith("No module named 'strom_module_that_is_not_there': ")
    assert "pip install 'strom[spark]'" in message and "\n" not in message
    assert start_error(RuntimeError("first line\nsecond")) == "first line"
    assert start_error(RuntimeError()) == "RuntimeError"
    # what PySpark raises when its JVM cannot start (JAVA_HOME=/nonexistent, say)
    gateway = RuntimeError(
        "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."
    )
    assert start_error(gateway).endswith("(Spark needs Java 17+: java on the PATH, or JAVA_HOME)")


def test_describe_extended_prints_runtime_statistics_and_consumer_groups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DESCRIBE ... EXTENDED ends as ksqlDB's CLI ends it: the figures by host, the topic
    they are of, then each query's offsets and lag on its topic's partitions."""
    description = {
        "name": "CARTS", "type": "STREAM", "extended": True, "timestamp": "",
        "keyFormat": "KAFKA", "valueFormat": "JSON", "topic": "carts", "partitions": 2,
        "replication": 1, "statement": "CREATE STREAM CARTS ...;", "windowType": None,
        "fields": [{"name": "ID", "schema": {"type": "INTEGER"}, "type": "KEY"}],
        "readQueries": [], "writeQueries": [],
        "statistics": "messages-per-sec: 1.5 total-messages: 7", "errorStats": "",
        "clusterStatistics": [
            {"host": "127.0.0.1:8088", "name": "total-messages", "value": 7.0, "timestamp": 1},
            {"host": "127.0.0.1:8088", "name": "messages-per-sec", "value": 1.5, "timestamp": 1},
        ],
        "clusterErrorStats": [],
        "queryOffsetSummaries": [{
            "groupId": "_confluent-ksql-default_query_CSAS_CARTS_1",
            "topicSummaries": [{"kafkaTopic": "clicks", "offsets": [
                {"partition": 0, "logStartOffset": 0, "logEndOffset": 5, "consumerOffset": 5},
                {"partition": 1, "logStartOffset": 1, "logEndOffset": 9, "consumerOffset": 6},
            ]}],
        }],
    }  # fmt: skip
    KsqlShell("http://127.0.0.1:1", {}, json_output=False).show(
        {"@type": "sourceDescription", "sourceDescription": description}
    )
    out = capsys.readouterr().out
    assert "Runtime statistics by host\n-------------------------" in out
    lines = out.splitlines()
    assert any("messages-per-sec" in line and "         2" in line for line in lines)
    assert any("total-messages" in line and "         7" in line for line in lines)
    assert "(Statistics of the local KSQL server interaction with the Kafka topic carts)" in out
    assert "Consumer Group       : _confluent-ksql-default_query_CSAS_CARTS_1" in out
    assert "Max lag              : 3" in out
    lag_row = next(line for line in lines if line.strip().startswith("1 ") and "|" in line)
    assert [c.strip() for c in lag_row.split("|")] == ["1", "1", "9", "6", "3"]
