"""ksqlDB's connector statements on Strom's ksql server (``strom ksql-server``) against
Strom's own Kafka Connect worker (``strom connect-standalone``): CREATE SOURCE CONNECTOR
runs a FileStream source whose lines arrive in its topic, SHOW / LIST [SOURCE | SINK]
CONNECTORS, SHOW CONNECTOR PLUGINS, DESCRIBE CONNECTOR and DROP CONNECTOR answer
ksqlDB's entities, IF [NOT] EXISTS its warnings, and Connect's refusals ksqlDB's errors;
the CLI (``strom ksql``) prints them as ksqlDB's CLI does. One broker, one worker and
one ksql server serve the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from test_connect import Worker, topic_values, wait_for
from test_ksql import KsqlServer, strom_ksql

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"


@pytest.fixture(scope="module")
def worker(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A standalone worker (no group to join) writing each line as a plain string."""
    directory = tmp_path_factory.mktemp("ksql-connect")
    properties = directory / "standalone.properties"
    properties.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={directory / 'offsets'}\n"
        "offset.flush.interval.ms=200\nlisteners=http://127.0.0.1:0\n"
    )
    process = Worker("standalone", properties)
    yield process
    if process.proc.poll() is None:
        process.stop()


@pytest.fixture(scope="module")
def server(broker: BrokerProcess, worker: Worker) -> Iterator[KsqlServer]:
    process = KsqlServer(broker, f"ksql.connect.url={worker.url}")
    yield process
    if process.proc.poll() is None:
        process.stop()


def connector_state(server: KsqlServer) -> str | None:
    [listed] = server.ok("SHOW CONNECTORS;")
    states = [c.get("state") for c in listed["connectors"] if c["name"] == "LINES_IN"]
    return states[0] if states else None


def test_a_file_source_created_listed_described_and_dropped(
    server: KsqlServer, worker: Worker, broker: BrokerProcess, tmp_path: Path
) -> None:
    source_file = tmp_path / "lines.txt"
    source_file.write_text("first\nsecond\n")
    [properties, plugins] = server.ok("SHOW PROPERTIES; SHOW CONNECTOR PLUGINS;")
    listed = {p["name"]: p["value"] for p in properties["properties"]}
    assert listed["ksql.connect.url"] == worker.url.rstrip("/")
    assert plugins["@type"] == "connector_plugins_list"
    assert {"className": FILE_SOURCE, "type": "source"}.items() <= next(
        p for p in plugins["connectorsPlugins"] if p["className"] == FILE_SOURCE
    ).items()

    create = (
        "CREATE SOURCE CONNECTOR lines_in WITH ('connector.class'='FileStreamSource', "
        f"'file'='{source_file}', \"topic\"='ksql-lines');"
    )
    [created] = server.ok(create)
    masked = (
        "CREATE SOURCE CONNECTOR lines_in WITH ('connector.class'='FileStreamSource', "
        "'file'='[string]', \"topic\"='[string]');"
    )
    assert created["@type"] == "connector_info" and created["statementText"] == masked
    assert created["info"]["name"] == "LINES_IN"
    assert created["info"]["config"]["file"] == str(source_file)
    assert created["info"]["config"]["topic"] == "ksql-lines"
    # the connector runs: its file's lines arrive in its topic
    assert topic_values(broker, "ksql-lines", 2) == [b"first", b"second"]
    wait_for(lambda: connector_state(server) == "RUNNING (1/1 tasks RUNNING)", "RUNNING")

    [listed, sources, sinks] = server.ok(
        "SHOW CONNECTORS; LIST SOURCE CONNECTORS; SHOW SINK CONNECTORS;"
    )
    assert listed["@type"] == "connector_list"
    assert listed["connectors"] == [
        {
            "name": "LINES_IN",
            "type": "source",
            "className": "FileStreamSource",
            "state": "RUNNING (1/1 tasks RUNNING)",
        }
    ]
    assert sources["connectors"] == listed["connectors"] and sinks["connectors"] == []

    [described] = server.ok("DESCRIBE CONNECTOR lines_in;")
    assert described["@type"] == "connector_description"
    assert described["connectorClass"] == "FileStreamSource"
    status = described["status"]
    assert status["name"] == "LINES_IN" and status["type"] == "source"
    assert status["connector"]["state"] == "RUNNING"
    assert [(t["id"], t["state"]) for t in status["tasks"]] == [(0, "RUNNING")]
    assert described["sources"] == [] and described["topics"] == []
    # Connect lists the topic the source wrote to (KIP-558), but ksqlDB asks for a
    # connector's topics only when it knows the connector's class (the JDBC source)
    wait_for(
        lambda: (
            worker.call("GET", "/connectors/LINES_IN/topics")
            == (200, {"LINES_IN": {"topics": ["ksql-lines"]}})
        ),
        "the source's active topic",
    )

    # ksqlDB's answers for a connector that exists
    code, exists = server.ksql(create)
    assert code == 409
    assert exists == {
        "@type": "generic_error",
        "error_code": 40900,
        "message": "Connector LINES_IN already exists",
    }
    [warning] = server.ok(create.replace("CONNECTOR lines_in", "CONNECTOR IF NOT EXISTS lines_in"))
    assert warning["@type"] == "warning_entity"
    assert warning["message"] == "Connector LINES_IN already exists"

    [dropped] = server.ok("DROP CONNECTOR lines_in;")
    assert dropped == {
        "@type": "drop_connector",
        "statementText": "DROP CONNECTOR lines_in;",
        "connectorName": "LINES_IN",
        "warnings": [],
    }
    assert worker.call("GET", "/connectors")[1] == []
    [gone] = server.ok("DROP CONNECTOR IF EXISTS lines_in;")
    assert gone["@type"] == "warning_entity"
    assert gone["message"] == "Connector 'LINES_IN' does not exist."
    code, missing = server.ksql("DESCRIBE CONNECTOR lines_in;")
    assert code == 404 and missing["@type"] == "generic_error"
    assert missing["error_code"] == 40400
    assert missing["message"].startswith("Failed to query connector status: ")
    assert "LINES_IN" in missing["message"]
    code, missing = server.ksql("DROP CONNECTOR lines_in;")
    assert code == 404 and missing["message"].startswith("Failed to drop connector: ")


def test_a_config_connect_refuses(server: KsqlServer, worker: Worker) -> None:
    code, refused = server.ksql(
        "CREATE SINK CONNECTOR no_topics WITH ('connector.class'='FileStreamSink');"
    )
    assert code == 400 and refused["@type"] == "generic_error"
    assert refused["error_code"] == 40000
    assert refused["message"].startswith("Validation error: ")
    code, refused = server.ksql("CREATE SOURCE CONNECTOR no_class WITH ('file'='/tmp/x');")
    assert code == 400
    assert refused["message"] == (
        "Validation error: Connector config {file=/tmp/x, name=NO_CLASS} contains no connector type"
    )
    # the JDBC source's key made into ksqlDB's transforms, which the worker accepts (only
    # the missing connection is refused), where it refuses a transform it does not have
    code, refused = server.ksql(
        "CREATE SOURCE CONNECTOR jdbc_in WITH ("
        "'connector.class'='io.confluent.connect.jdbc.JdbcSourceConnector', 'key'='id');"
    )
    assert code == 400 and refused["message"].startswith("Validation error: ")
    assert "connection.url" in refused["message"]
    assert "transforms" not in refused["message"]
    code, refused = server.ksql(
        "CREATE SOURCE CONNECTOR jdbc_in WITH ("
        "'connector.class'='io.confluent.connect.jdbc.JdbcSourceConnector', 'key'='id', "
        "'transforms'='mine', 'transforms.mine.type'='no.such.Transform');"
    )
    assert code == 400 and "transforms.mine.type" in refused["message"]
    assert worker.call("GET", "/connectors")[1] == []


def test_the_cli_prints_them_as_ksqldbs(
    server: KsqlServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source_file = tmp_path / "cli.txt"
    source_file.write_text("one\n")
    code, out, err = strom_ksql(
        capsys,
        server.url,
        "--execute",
        "CREATE SOURCE CONNECTOR cli_in WITH ('connector.class'='FileStreamSource', "
        f"'file'='{source_file}', 'topic'='ksql-cli-lines'); SHOW CONNECTOR PLUGINS;",
    )
    assert code == 0, err
    assert "Created connector CLI_IN" in out
    assert "Class" in out and "Version" in out and FILE_SOURCE in out
    wait_for(lambda: "RUNNING" in str(server.ok("SHOW CONNECTORS;")), "CLI_IN running")
    code, out, err = strom_ksql(
        capsys, server.url, "--execute", "SHOW CONNECTORS; DESCRIBE CONNECTOR cli_in;"
    )
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if "Connector Name" in line)
    assert header.split() == ["Connector", "Name", "|", "Type", "|", "Class", "|", "Status"]
    row = next(line for line in lines if line.startswith(" CLI_IN"))
    assert [cell.strip() for cell in row.split("|")] == [
        "CLI_IN",
        "SOURCE",
        "FileStreamSource",
        "RUNNING (1/1 tasks RUNNING)",
    ]
    assert "Name                 : CLI_IN" in lines
    assert "Class                : FileStreamSource" in lines
    assert "Type                 : source" in lines
    assert "State                : RUNNING" in lines
    code, out, err = strom_ksql(capsys, server.url, "--execute", "DROP CONNECTOR cli_in;")
    assert code == 0 and 'Dropped connector "CLI_IN"' in out
