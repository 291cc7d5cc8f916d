"""The connector statements without a Connect cluster: their parsing (names, keys, the
statement echoed with its values masked), the config ksqlDB resolves for the JDBC source,
the ``ksql.connect.*`` settings, the basic auth header (a file's, or the request's own),
an unreachable Connect as one readable error, and the CLI's printing of ksqlDB's
connector entities."""

from __future__ import annotations

import base64
import os
import socket
from pathlib import Path

import pytest

from strom.cli.ksql import KsqlShell
from strom.config import ConfigError
from strom.ksql import statements as st
from strom.ksql.config import server_config
from strom.ksql.connectors import (
    FORWARDED_AUTHORIZATION,
    ConnectClient,
    ConnectorError,
    ConnectorStatements,
    resolve_config,
)
from strom.ksql.metastore import Metastore
from strom.ksql.parser import KsqlSyntaxError, parse_statement

JDBC = "io.confluent.connect.jdbc.JdbcSourceConnector"


def test_create_connector_keys_values_and_masked_text() -> None:
    statement = parse_statement(
        "CREATE SOURCE CONNECTOR IF NOT EXISTS `my-src` WITH ('connector.class'='x.Y', "
        "\"file\"='/tmp/in', tasks_max=2, 'flag'=true, 'it''s'='a''b')"
    )
    assert statement == st.CreateConnector(
        "my-src",
        "SOURCE",
        {"connector.class": "x.Y", "file": "/tmp/in", "TASKS_MAX": "2", "flag": "true",
         "it's": "a'b"},
        if_not_exists=True,
        masked_text="CREATE SOURCE CONNECTOR IF NOT EXISTS `my-src` WITH "
        "('connector.class'='x.Y', \"file\"='[string]', tasks_max='[string]', "
        "'flag'='[string]', 'it''s'='[string]')",
    )  # fmt: skip
    sink = parse_statement("create sink connector out WITH ('connector.class'='S')")
    assert isinstance(sink, st.CreateConnector)
    assert (sink.name, sink.kind, sink.if_not_exists) == ("OUT", "SINK", False)


def test_the_other_connector_statements() -> None:
    assert parse_statement("DROP CONNECTOR c") == st.DropConnector("C")
    assert parse_statement("DROP CONNECTOR IF EXISTS `c`") == st.DropConnector("c", True)
    assert parse_statement("DESCRIBE CONNECTOR c") == st.DescribeConnector("C")
    assert parse_statement("SHOW CONNECTORS") == st.ListConnectors("ALL")
    assert parse_statement("LIST SOURCE CONNECTORS") == st.ListConnectors("SOURCE")
    assert parse_statement("show sink connectors") == st.ListConnectors("SINK")
    assert parse_statement("LIST CONNECTOR PLUGINS") == st.ListConnectorPlugins()
    # the words still start the statements they started
    assert isinstance(parse_statement("DESCRIBE connectorish"), st.DescribeSource)
    source_table = "CREATE SOURCE TABLE t (k INT PRIMARY KEY) WITH (kafka_topic='t')"
    assert isinstance(parse_statement(source_table), st.CreateSource)


def test_create_connector_needs_its_properties() -> None:
    with pytest.raises(KsqlSyntaxError):
        parse_statement("CREATE SOURCE CONNECTOR c")


def test_jdbc_source_config_resolved_as_ksqldb_does() -> None:
    resolved = resolve_config({"connector.class": JDBC, "key": "id", "transforms": "mine"})
    assert resolved == {
        "connector.class": JDBC,
        "transforms": "mine,ksqlCreateKey,ksqlExtractString",
        "transforms.ksqlCreateKey.type": "org.apache.kafka.connect.transforms.ValueToKey",
        "transforms.ksqlCreateKey.fields": "id",
        "transforms.ksqlExtractString.type":
            "org.apache.kafka.connect.transforms.ExtractField$Key",
        "transforms.ksqlExtractString.field": "id",
        "tasks.max": "1",
    }  # fmt: skip
    given = {"connector.class": JDBC, "tasks.max": "3"}
    assert resolve_config(given) == given
    other = {"connector.class": "FileStreamSource", "key": "id"}
    assert resolve_config(other) == other


def test_connect_settings_and_their_one_line_refusals() -> None:
    config = server_config(
        {"ksql.connect.url": "http://connect:8083/", "ksql.connect.request.timeout.ms": "200"}
    )
    assert (config.connect_url, config.connect_timeout_ms) == ("http://connect:8083", 200)
    assert server_config({}).connect_url == "http://localhost:8083"
    for bad, named in (
        ({"ksql.connect.url": "connect:8083"}, "ksql.connect.url"),
        ({"ksql.connect.url": "http://connect:port"}, "ksql.connect.url"),
        ({"ksql.connect.request.timeout.ms": "soon"}, "ksql.connect.request.timeout.ms"),
        ({"ksql.connect.basic.auth.credentials.source": "LDAP"}, "credentials.source"),
        ({"ksql.connect.basic.auth.credentials.source": "FILE"}, "credentials.file"),
    ):
        with pytest.raises(ConfigError) as refused:
            server_config(bad)
        assert "\n" not in str(refused.value) and named in str(refused.value)


def test_basic_auth_from_the_credentials_file(tmp_path: Path) -> None:
    path = tmp_path / "connect.credentials"
    path.write_text("# who ksql is to Connect\nusername=ksql\npassword: s3cret\n")
    once = ConnectClient("http://c:8083", credentials_file=str(path))
    reloading = ConnectClient("http://c:8083", credentials_file=str(path), reload_credentials=True)
    expected = "Basic " + base64.b64encode(b"ksql:s3cret").decode()
    assert once.authorization() == expected and reloading.authorization() == expected
    path.write_text("username=other\npassword=new\n")
    os.utime(path, (1, 1))  # a new modification time, whatever the clock's resolution
    assert once.authorization() == expected  # read once without reload
    assert reloading.authorization() == "Basic " + base64.b64encode(b"other:new").decode()
    path.write_text("username=only\n")
    os.utime(path, (2, 2))
    assert reloading.authorization() is None  # no password: no header, as ksqlDB
    assert ConnectClient("http://c:8083").authorization() is None


def test_the_requests_own_authorization_forwarded_without_a_credentials_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "connect.credentials"
    path.write_text("username=ksql\npassword=s3cret\n")
    forwarded = FORWARDED_AUTHORIZATION.set("Basic dXNlcjpwYXNz")
    try:
        assert ConnectClient("http://c:8083").authorization() == "Basic dXNlcjpwYXNz"
        own = ConnectClient("http://c:8083", credentials_file=str(path)).authorization()
        assert own == "Basic " + base64.b64encode(b"ksql:s3cret").decode()
    finally:
        FORWARDED_AUTHORIZATION.reset(forwarded)


def test_an_unreachable_connect_is_one_readable_error() -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = server_config({"ksql.connect.url": f"http://127.0.0.1:{port}"})
    connectors = ConnectorStatements(config, Metastore(), lambda source: {})
    with pytest.raises(ConnectorError) as refused:
        connectors.execute(st.ListConnectors(), "SHOW CONNECTORS;")
    assert refused.value.status == 400
    body = refused.value.body
    assert body["@type"] == "generic_error" and body["error_code"] == 40000
    assert body["message"] == f"Connect to http://127.0.0.1:{port} failed: Connection refused"


def test_the_cli_prints_connector_entities(capsys: pytest.CaptureFixture[str]) -> None:
    shell = KsqlShell("http://127.0.0.1:1", {}, json_output=False)  # no call is made
    shell.show(
        {
            "@type": "connector_list",
            "connectors": [
                {"name": "A", "type": "source", "className": "FileStreamSource",
                 "state": "WARNING (0/1 tasks RUNNING)"},
                {"name": "B", "type": "unknown"},
            ],
            "warnings": [{"message": "Could not describe connector B: gone"}],
        }
    )  # fmt: skip
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")] for line in out.splitlines() if "|" in line]
    assert rows == [
        ["Connector Name", "Type", "Class", "Status"],
        ["A", "SOURCE", "FileStreamSource", "WARNING (0/1 tasks RUNNING)"],
        ["B", "UNKNOWN", "", ""],
    ]
    assert "WARNING: Could not describe connector B: gone" in out
    shell.show(
        {
            "@type": "connector_description",
            "connectorClass": "FileStreamSource",
            "status": {
                "name": "A",
                "connector": {"state": "RUNNING", "worker_id": "127.0.0.1:8083"},
                "tasks": [{"id": 0, "state": "FAILED", "worker_id": "127.0.0.1:8083"}],
                "type": "source",
            },
            "sources": [],
            "topics": ["lines"],
            "warnings": [],
        }
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1:6] == [
        "Name                 : A",
        "Class                : FileStreamSource",
        "Type                 : source",
        "State                : RUNNING",
        "WorkerId             : 127.0.0.1:8083",
    ]
    rows = [[c.strip() for c in line.split("|")] for line in lines if "|" in line]
    assert rows == [["Task ID", "State", "Error Trace"], ["0", "FAILED", ""]]
    assert " Related Topics " in lines and " lines          " in lines
    shell.show({"@type": "drop_connector", "connectorName": "A", "warnings": []})
    assert 'Dropped connector "A"' in capsys.readouterr().out
