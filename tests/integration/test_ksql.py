"""The ksql server (``strom ksql-server``) against a real broker, spoken to as ksqlDB's
clients speak to ksqlDB (HTTP and JSON), and its CLI (``strom ksql``).

Each statement's answer has ksqlDB's shape; refusals have ksqlDB's error body (code,
message, the statement, the entities of the statements before it); INSERT VALUES
records are read back with confluent-kafka; a restarted server has its streams, tables
and types back from the command topic.
"""

from __future__ import annotations

import asyncio
import decimal
import gc
import json
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, served_url
from confluent_kafka import Consumer, TopicPartition
from ksql_websocket import ws_query

from strom.cli.main import _parser as strom_parser
from strom.ksql.rest_client import KsqlRestClient, KsqlServerError

SERVICE_ID = "it_"
COMMAND_TOPIC = f"_confluent-ksql-{SERVICE_ID}_command_topic"


class KsqlServer:
    def __init__(self, broker: BrokerProcess, *overrides: str) -> None:
        self.overrides = overrides
        extra = [arg for item in overrides for arg in ("--override", item)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strom.cli.main", "ksql-server",
             "--override", f"bootstrap.servers={broker.bootstrap}",
             "--override", "listeners=http://127.0.0.1:0",
             "--override", f"ksql.service.id={SERVICE_ID}",
             *extra, "--log-level", "WARNING"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.banner = self.proc.stdout.readline().decode()
        assert self.banner.startswith("Strom ksql server on"), self.banner
        self.url = served_url(self.banner)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            return 200, KsqlRestClient(self.url).call(method, path, body)
        except KsqlServerError as exc:
            return exc.status, exc.body

    def ksql(self, text: str, **extra: Any) -> tuple[int, Any]:
        return self.call("POST", "/ksql", {"ksql": text, **extra})

    def ok(self, text: str, **extra: Any) -> list[dict[str, Any]]:
        status, body = self.ksql(text, **extra)
        assert status == 200, body
        return body

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[str]:
    """A schema registry (``strom schema-registry``) for the AVRO and JSON_SR rows."""
    process = subprocess.Popen(
        [sys.executable, "-m", "strom.cli.main", "schema-registry",
         "--bootstrap-server", broker.bootstrap, "--listener", "http://127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    banner = process.stdout.readline().decode()
    assert banner.startswith("Strom schema registry on"), banner
    yield served_url(banner)
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def server(broker: BrokerProcess, registry: str) -> Iterator[KsqlServer]:
    process = KsqlServer(
        broker,
        f"ksql.schema.registry.url={registry}",
        # sent, and unused: this registry asks for no credentials
        "ksql.schema.registry.basic.auth.user.info=ksql:secret",
        "ksql.heartbeat.enable=true",  # /clusterStatus and /heartbeat answer
    )
    yield process
    if process.proc.poll() is None:
        process.stop()


def test_info_healthcheck_and_status(server: KsqlServer) -> None:
    status, info = server.call("GET", "/info")
    assert status == 200
    assert info["KsqlServerInfo"]["version"] == "0.29.0"
    assert info["KsqlServerInfo"]["ksqlServiceId"] == SERVICE_ID
    assert info["KsqlServerInfo"]["serverStatus"] == "RUNNING"
    assert info["KsqlServerInfo"]["kafkaClusterId"]
    status, health = server.call("GET", "/healthcheck")
    assert status == 200 and health["isHealthy"] is True
    assert set(health["details"]) == {"metastore", "kafka", "commandRunner"}
    status, missing = server.call("GET", "/status/stream/`NOPE`/create")
    assert status == 404 and missing["error_code"] == 40400


def test_create_show_describe_drop(server: KsqlServer) -> None:
    text = (
        "CREATE STREAM pageviews (id BIGINT KEY, url STRING, tags ARRAY<STRING>) "
        "WITH (kafka_topic='pageviews', value_format='JSON', partitions=3);"
    )
    [created] = server.ok(text)
    formatted = (
        "CREATE STREAM PAGEVIEWS (ID BIGINT KEY, URL STRING, TAGS ARRAY<STRING>) WITH "
        "(CLEANUP_POLICY='delete', KAFKA_TOPIC='pageviews', KEY_FORMAT='KAFKA', PARTITIONS=3, "
        "VALUE_FORMAT='JSON');"
    )
    assert created == {
        "@type": "currentStatus",
        "statementText": formatted,
        "commandId": "stream/`PAGEVIEWS`/create",
        "commandStatus": {"status": "SUCCESS", "message": "Stream created", "queryId": None},
        "commandSequenceNumber": created["commandSequenceNumber"],
        "warnings": [],
    }
    status, one = server.call("GET", "/status/stream/`PAGEVIEWS`/create")
    assert status == 200 and one["status"] == "SUCCESS"
    entities = server.ok(
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING) "
        "WITH (kafka_topic='users', format='JSON', partitions=1);"
        "SHOW STREAMS; LIST TABLES; SHOW TOPICS; DESCRIBE pageviews EXTENDED;"
        "CREATE STREAM IF NOT EXISTS pageviews (x INT) WITH (kafka_topic='pageviews', "
        "value_format='JSON');"
    )
    kinds = [e["@type"] for e in entities]
    assert kinds == [
        "currentStatus", "streams", "tables", "kafka_topics", "sourceDescription",
        "warning_entity",
    ]  # fmt: skip
    assert {
        "type": "STREAM", "name": "PAGEVIEWS", "topic": "pageviews", "keyFormat": "KAFKA",
        "valueFormat": "JSON", "isWindowed": False,
    } in entities[1]["streams"]  # fmt: skip
    assert entities[2]["tables"][0]["keyFormat"] == "JSON"
    assert {"name": "pageviews", "replicaInfo": [1, 1, 1]} in entities[3]["topics"]
    assert all(not t["name"].startswith("_confluent") for t in entities[3]["topics"])
    description = entities[4]["sourceDescription"]
    assert description["fields"] == [
        {"name": "ID", "schema": {"type": "BIGINT", "fields": None, "memberSchema": None},
         "type": "KEY"},
        {"name": "URL", "schema": {"type": "STRING", "fields": None, "memberSchema": None}},
        {"name": "TAGS", "schema": {"type": "ARRAY", "fields": None, "memberSchema":
         {"type": "STRING", "fields": None, "memberSchema": None}}},
    ]  # fmt: skip
    assert (description["partitions"], description["replication"]) == (3, 1)
    assert description["type"] == "STREAM" and description["extended"] is True
    assert description["statement"] == formatted
    assert entities[5]["message"] == (
        "Cannot add stream `PAGEVIEWS`: A stream with the same name already exists."
    )
    [dropped] = server.ok("DROP TABLE users DELETE TOPIC;")
    assert dropped["commandId"] == "table/USERS/drop"
    assert dropped["commandStatus"]["message"] == "Source `USERS` (topic: users) was dropped."
    [listed] = server.ok("SHOW ALL TOPICS;")
    names = {t["name"] for t in listed["topics"]}
    assert "users" not in names and COMMAND_TOPIC in names


def test_metadata_statements(server: KsqlServer) -> None:
    entities = server.ok(
        "SHOW FUNCTIONS; DESCRIBE FUNCTION latest_by_offset; SHOW QUERIES; LIST TOPICS EXTENDED;"
        "DESCRIBE STREAMS; CREATE TYPE IF NOT EXISTS point AS STRUCT<x INT, y INT>;"
        "DROP TYPE point; DROP TYPE IF EXISTS point;"
    )
    kinds = [e["@type"] for e in entities]
    assert kinds == [
        "function_names", "describe_function", "queries", "kafka_topics_extended",
        "source_descriptions", "currentStatus", "currentStatus", "currentStatus",
    ]  # fmt: skip
    assert {"name": "COUNT", "type": "AGGREGATE", "category": "AGGREGATE"} in entities[0][
        "functions"
    ]
    assert entities[1]["name"] == "LATEST_BY_OFFSET" and entities[1]["type"] == "AGGREGATE"
    assert entities[2]["queries"] == []
    extended = {t["name"]: t for t in entities[3]["topics"]}
    assert extended["pageviews"]["consumerGroupCount"] == 0
    described = [d["name"] for d in entities[4]["sourceDescriptions"]]
    assert "PAGEVIEWS" in described and described == sorted(described)
    assert entities[5]["commandId"] == "type/POINT/create"
    assert entities[5]["commandStatus"]["message"] == (
        "Registered custom type with name 'POINT' and SQL type STRUCT<`X` INTEGER, `Y` INTEGER>"
    )
    assert entities[6]["commandStatus"]["message"] == "Dropped type 'POINT'"
    assert entities[7]["commandStatus"]["message"] == "Type 'POINT' does not exist"
    refused = ("TERMINATE CSAS_X_1;", "EXPLAIN CSAS_X_1;", "DROP TYPE point;")
    for text in (*refused, "DESCRIBE FUNCTION x;"):
        status, body = server.ksql(text)
        assert (status, body["@type"], body["error_code"]) == (400, "statement_error", 40001)
    status, body = server.call("GET", "/nothing")
    assert (status, body["error_code"]) == (404, 40400)


def test_errors_have_ksqldb_shape(server: KsqlServer) -> None:
    status, body = server.ksql(
        "CREATE STREAM lonely (a INT) WITH (kafka_topic='lonely', value_format='JSON');"
    )
    assert status == 400 and body["@type"] == "statement_error" and body["error_code"] == 40001
    assert body["message"].startswith(
        "Topic 'lonely' does not exist. If you want to create a new topic for the "
        "stream/table please re-run the statement providing the required 'PARTITIONS' "
        "configuration in the WITH clause (and optionally 'REPLICAS'). For example: "
        "CREATE STREAM LONELY (A INTEGER) WITH (KAFKA_TOPIC='lonely', KEY_FORMAT='KAFKA', "
        "PARTITIONS=2, VALUE_FORMAT='JSON');"
    )
    status, body = server.ksql(
        "CREATE STREAM c (a INT) WITH (kafka_topic='pageviews', value_format='JSON', "
        "cleanup_policy='compact');"
    )
    assert body["message"].startswith("Invalid config variable in the WITH clause: CLEANUP_POLICY.")
    assert body["entities"] == []
    status, body = server.ksql("SHOW TYPES;\nSHOW STREAMS\n  EXTRA;")
    assert status == 400 and body["message"].startswith("line 2:3: Syntax Error")
    assert body["statementText"] == "SHOW STREAMS\n  EXTRA;"
    assert [e["@type"] for e in body["entities"]] == ["type_list"]
    status, body = server.ksql("DESCRIBE nothing;")
    assert (status, body["message"]) == (
        400,
        "Could not find STREAM/TABLE 'NOTHING' in the Metastore",
    )
    status, body = server.ksql("SELECT * FROM pageviews EMIT CHANGES;")
    assert (status, body["error_code"]) == (400, 40002)
    status, body = server.ksql("CREATE TABLE copy AS SELECT * FROM pageviews EMIT CHANGES;")
    assert (status, body["error_code"]) == (400, 40001)
    assert body["message"].startswith("Invalid result type. Your SELECT query produces a STREAM.")
    status, body = server.ksql("CREATE STREAM copy AS SELECT nope FROM pageviews EMIT CHANGES;")
    assert body["message"] == "Line: 1, Col: 30: SELECT column 'NOPE' cannot be resolved."
    status, body = server.call("POST", "/query", {"ksql": "SELECT * FROM ghosts;"})
    assert (status, body["message"]) == (
        400, "Exception while preparing statement: GHOSTS does not exist.",
    )  # fmt: skip
    status, body = server.call("POST", "/ksql", {"nothing": 1})
    assert (status, body["@type"], body["error_code"]) == (400, "generic_error", 40000)
    # INSERT INTO ... SELECT names a missing target as ksqlDB does (not as INSERT VALUES)
    status, body = server.ksql("INSERT INTO ghosts SELECT * FROM pageviews;")
    assert (status, body["message"]) == (400, "Source `GHOSTS` does not exist.")
    status, body = server.ksql("RUN SCRIPT '/nowhere.sql';")  # the CLI's, not the server's
    assert status == 400
    assert body["message"].startswith("line 1:1: Syntax Error\nUnknown statement 'RUN'\n")


def test_set_define_and_session_variables(server: KsqlServer) -> None:
    entities = server.ok(
        "DEFINE fmt = 'JSON'; SET 'auto.offset.reset' = 'earliest';"
        "CREATE STREAM IF NOT EXISTS vars_s (v INT) WITH (kafka_topic='${topic}', "
        "value_format='${fmt}', partitions=1);"
        "SHOW VARIABLES; SHOW PROPERTIES;",
        sessionVariables={"topic": "vars_topic"},
    )
    assert [e["@type"] for e in entities] == ["currentStatus", "variables", "properties"]
    assert "KAFKA_TOPIC='vars_topic'" in entities[0]["statementText"]
    assert {"name": "fmt", "value": "JSON"} in entities[1]["variables"]
    properties = {p["name"]: p["value"] for p in entities[2]["properties"]}
    assert properties["ksql.streams.auto.offset.reset"] == "earliest"
    assert "ksql.streams.auto.offset.reset" in entities[2]["overwrittenProperties"]
    assert properties["ksql.schema.registry.basic.auth.user.info"] == "[hidden]"
    # ksql.output.topic.name.prefix: before a new sink's name when it names no topic
    explained = server.ok(
        "SET 'ksql.output.topic.name.prefix' = 'thing-';"
        "EXPLAIN CREATE STREAM vars_copy AS SELECT * FROM vars_s;"
        "EXPLAIN CREATE STREAM vars_copy WITH (kafka_topic='foo') AS SELECT * FROM vars_s;"
    )
    plans = [e["queryDescription"]["executionPlan"] for e in explained]
    assert "[ SINK ] | Schema: VARS_COPY | topic: thing-VARS_COPY" in plans[0]
    assert "[ SINK ] | Schema: VARS_COPY | topic: foo" in plans[1]


def test_alter_adds_columns(server: KsqlServer, broker: BrokerProcess) -> None:
    """ALTER ... ADD COLUMN on a stream a CREATE made, as ksqlDB: DESCRIBE and INSERT
    VALUES see the column; a duplicate is refused (a CREATE ... AS SELECT's sink in
    test_ksql_queries, where Spark runs)."""
    [altered] = server.ok(
        "CREATE STREAM altered_s (id INT KEY, col1 INT) "
        "WITH (kafka_topic='altered_s', value_format='JSON', partitions=1);"
        "ALTER STREAM altered_s ADD COLUMN col2 INT, ADD tags ARRAY<STRING>;"
    )[1:]
    assert altered["commandId"] == "stream/ALTERED_S/alter"
    assert altered["commandStatus"]["message"] == "Stream ALTERED_S altered."
    [described] = server.ok("DESCRIBE altered_s;")
    names = [f["name"] for f in described["sourceDescription"]["fields"]]
    assert names == ["ID", "COL1", "COL2", "TAGS"]
    server.ok("INSERT INTO altered_s (id, col1, col2, tags) VALUES (1, 2, 3, ARRAY['t']);")
    [record] = read_all(broker, "altered_s", 1)
    assert json.loads(record.value()) == {"COL1": 2, "COL2": 3, "TAGS": ["t"]}
    status, refused = server.ksql("ALTER STREAM altered_s ADD COLUMN col1 STRING;")
    assert status == 400 and refused["message"] == (
        "Cannot add column `COL1` to schema. A column with the same name already exists."
    )
    status, refused = server.ksql("ALTER TABLE altered_s ADD COLUMN c INT;")
    assert status == 400 and refused["message"] == (
        "Incompatible data source type is STREAM, but statement was ALTER TABLE"
    )


def read_all(broker: BrokerProcess, topic: str, count: int) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "ksql-test",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    try:
        while len(messages) < count:
            message = consumer.poll(10)
            assert message is not None, f"{len(messages)} of {count} records from {topic}"
            assert message.error() is None, message.error()
            messages.append(message)
    finally:
        consumer.close()
    return messages


def test_insert_values_read_back(server: KsqlServer, broker: BrokerProcess) -> None:
    server.ok(
        "CREATE STREAM orders (id INT KEY, item STRING, amount DECIMAL(6, 2), ts BIGINT) "
        "WITH (kafka_topic='orders', value_format='JSON', partitions=1, timestamp='ts');"
        "CREATE STREAM csv (k STRING KEY, a STRING, b INT) "
        "WITH (kafka_topic='csv', key_format='KAFKA', value_format='DELIMITED', partitions=1);"
    )
    entities = server.ok(
        "INSERT INTO orders (id, item, amount, ts) VALUES (1, 'book', 12.5, 1700000000000);"
        "INSERT INTO orders VALUES (2, 'pen', 3, 1700000000001);"
        "INSERT INTO orders (ROWTIME, id, item) VALUES (1600000000000, 3, NULL);"
        "INSERT INTO csv (k, a, b) VALUES ('x', 'hello, world', 5);"
    )
    assert entities == []
    first, second, third = read_all(broker, "orders", 3)
    assert struct.unpack(">i", first.key()) == (1,)
    assert json.loads(first.value()) == {"ITEM": "book", "AMOUNT": 12.5, "TS": 1700000000000}
    assert b'"AMOUNT":12.50' in first.value()
    assert first.timestamp()[1] == 1700000000000
    assert json.loads(second.value())["ITEM"] == "pen"
    assert third.timestamp()[1] == 1600000000000
    assert json.loads(third.value()) == {"ITEM": None, "AMOUNT": None, "TS": None}
    [row] = read_all(broker, "csv", 1)
    assert (row.key(), row.value()) == (b"x", b'"hello, world",5')
    # ksql.persistence.wrap.single.values=false: a created stream's one value column is
    # read and written alone
    server.ok(
        "CREATE STREAM alone (k STRING KEY, foo STRING) "
        "WITH (kafka_topic='alone', value_format='JSON', partitions=1);",
        streamsProperties={"ksql.persistence.wrap.single.values": "false"},
    )
    server.ok("INSERT INTO alone (k, foo) VALUES ('a', 'bar');")
    assert [m.value() for m in read_all(broker, "alone", 1)] == [b'"bar"']
    # ROWTIME 0 is written as 0 (librdkafka would write the time of sending), each key
    # in the partition Kafka's Java producer (murmur2) gives it, as the other records
    server.ok(
        "CREATE STREAM spread (k STRING KEY, n INT) "
        "WITH (kafka_topic='spread', value_format='JSON', partitions=4);"
        + "".join(
            f"INSERT INTO spread (ROWTIME, k, n) VALUES ({ts}, '{k}', 1);"
            for ts in (0, 5)
            for k in "acdf"
        )
    )
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ksql-spread"})
    consumer.assign([TopicPartition("spread", p, 0) for p in range(4)])
    spread: dict[tuple[bytes, int], int] = {}
    deadline = time.monotonic() + 30
    while len(spread) < 8 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            spread[(message.key(), message.timestamp()[1])] = message.partition()
    consumer.close()
    assert sorted(spread) == [(k.encode(), ts) for k in "acdf" for ts in (0, 5)]
    assert all(spread[(k.encode(), 0)] == spread[(k.encode(), 5)] for k in "acdf")
    assert len(set(spread.values())) == 4
    status, body = server.ksql("INSERT INTO orders (id, item) VALUES ('one', 'x');")
    assert status == 400
    assert body["message"].startswith("Failed to insert values into 'ORDERS'. Expected type")
    status, body = server.ksql("INSERT INTO ghosts (a) VALUES (1);")
    assert body["message"] == "Cannot insert values into an unknown stream/table: `GHOSTS`"


def test_inserts_stream(server: KsqlServer, broker: BrokerProcess) -> None:
    server.ok(
        "CREATE STREAM streamed (id INT KEY, who STRUCT<name STRING>, score DOUBLE) "
        "WITH (kafka_topic='streamed', value_format='JSON', partitions=1);"
    )
    rows = [
        {"target": "streamed"},
        {"id": 1, "who": {"name": "ada"}, "score": 1.5},
        {"ID": 2, "nope": 1},
        {"id": 3, "SCORE": 2, "ROWTIME": 1600000000000},
    ]
    body = "\n".join(json.dumps(row) for row in rows).encode()
    request = urllib.request.Request(server.url + "/inserts-stream", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"] == "application/vnd.ksqlapi.delimited.v1"
        acks = [json.loads(line) for line in response.read().splitlines()]
    assert acks[0] == {"status": "ok", "seq": 0} and acks[2] == {"status": "ok", "seq": 2}
    assert acks[1]["status"] == "error" and acks[1]["seq"] == 1
    assert acks[1]["message"].endswith("Column name `NOPE` does not exist.")
    first, second = read_all(broker, "streamed", 2)
    assert json.loads(first.value()) == {"WHO": {"NAME": "ada"}, "SCORE": 1.5}
    assert struct.unpack(">i", second.key()) == (3,)
    assert second.timestamp()[1] == 1600000000000
    unknown = {"target": "ghost"}
    status, answer = 0, None
    try:
        urllib.request.urlopen(
            urllib.request.Request(server.url + "/inserts-stream",
                                   data=json.dumps(unknown).encode(), method="POST"),
            timeout=60,
        )  # fmt: skip
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, json.loads(exc.read())
    assert status == 400 and answer is not None
    assert answer["message"] == "Cannot insert values into an unknown stream/table: `GHOST`"


def _proto_class(client: Any) -> Any:
    """The message class of the registry's latest ``proto_s-value`` schema (a base64
    FileDescriptorProto, as confluent-kafka registers it)."""
    import base64

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    text = client.get_latest_version("proto_s-value").schema.schema_str
    described = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(described)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ConnectDefault1"))


def test_insert_values_in_registry_formats(
    server: KsqlServer, registry: str, broker: BrokerProcess
) -> None:
    """AVRO and JSON_SR rows in Confluent's wire format, read back with confluent-kafka's
    deserializers through the registry the server registered their schemas in."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    server.ok(
        "CREATE STREAM avro_s (id STRING KEY, n INT, price DECIMAL(5, 2), tags ARRAY<STRING>, "
        "at STRUCT<city STRING>) WITH (kafka_topic='avro_s', key_format='AVRO', "
        "value_format='AVRO', partitions=1);"
        "CREATE STREAM json_sr_s (id INT KEY, n BIGINT, ok BOOLEAN) "
        "WITH (kafka_topic='json_sr_s', value_format='JSON_SR', partitions=1);"
    )
    # Registered at CREATE, as ksqlDB does for a source whose columns the statement names.
    client = SchemaRegistryClient({"url": registry})
    assert set(client.get_subjects()) >= {"avro_s-key", "avro_s-value", "json_sr_s-value"}
    registered = client.get_latest_version("avro_s-value")
    fields = json.loads(registered.schema.schema_str)["fields"]
    assert [f["name"] for f in fields] == ["N", "PRICE", "TAGS", "AT"]
    assert "json_sr_s-key" not in client.get_subjects()  # a KAFKA key has no schema
    # over subjects that have schemas: they stay, as ksqlDB's schema register injector
    # leaves them (the source reads the topic's records with its columns)
    server.ok(
        "CREATE STREAM avro_clash (id STRING KEY, n STRING) "
        "WITH (kafka_topic='avro_s', key_format='AVRO', value_format='AVRO');"
    )
    assert client.get_latest_version("avro_s-value").schema_id == registered.schema_id
    server.ok(
        "INSERT INTO avro_s (id, n, price, tags, at) "
        "VALUES ('a', 1, 2.5, ARRAY['x'], STRUCT(city := 'Oslo'));"
        "INSERT INTO json_sr_s (id, n, ok) VALUES (7, 9000000000, true);"
    )
    [avro_record] = read_all(broker, "avro_s", 1)
    # the row is written with the schema registered at CREATE
    assert int.from_bytes(avro_record.value()[1:5], "big") == registered.schema_id
    value = AvroDeserializer(client)(
        avro_record.value(), SerializationContext("avro_s", MessageField.VALUE)
    )
    assert value == {
        "N": 1, "PRICE": decimal.Decimal("2.50"), "TAGS": ["x"], "AT": {"CITY": "Oslo"},
    }  # fmt: skip
    key = AvroDeserializer(client)(
        avro_record.key(), SerializationContext("avro_s", MessageField.KEY)
    )
    assert key == "a"
    [json_record] = read_all(broker, "json_sr_s", 1)
    decoded = JSONDeserializer(None, schema_registry_client=client)(
        json_record.value(), SerializationContext("json_sr_s", MessageField.VALUE)
    )
    assert decoded == {"N": 9000000000, "OK": True}
    assert struct.unpack(">i", json_record.key()) == (7,)
    server.ok(
        "CREATE STREAM proto_s (id STRING KEY, n BIGINT, tags ARRAY<STRING>, "
        "m MAP<STRING, INT>, at STRUCT<city STRING>) WITH (kafka_topic='proto_s', "
        "key_format='KAFKA', value_format='PROTOBUF', partitions=1);"
        "INSERT INTO proto_s (id, n, tags, m, at) "
        "VALUES ('p', 5, ARRAY['a', 'b'], MAP('k' := 1), STRUCT(city := 'Rome'));"
    )
    [proto_record] = read_all(broker, "proto_s", 1)
    proto_value = ProtobufDeserializer(_proto_class(client), {"use.deprecated.format": False})(
        proto_record.value(), SerializationContext("proto_s", MessageField.VALUE)
    )
    assert (proto_value.N, list(proto_value.TAGS), dict(proto_value.M)) == (5, ["a", "b"], {"k": 1})
    assert proto_value.AT.CITY == "Rome"
    # Columns a CREATE statement leaves out are read from the registry, as ksqlDB does.
    [created] = server.ok("CREATE STREAM avro_copy WITH (kafka_topic='avro_s', format='AVRO');")
    assert created["statementText"].startswith(
        "CREATE STREAM AVRO_COPY (ROWKEY STRING KEY, N INTEGER, PRICE DECIMAL(5, 2), "
        "TAGS ARRAY<STRING>, AT STRUCT<CITY STRING>) WITH ("
    )
    [created] = server.ok(
        "CREATE TABLE json_sr_t (id INT PRIMARY KEY) "
        "WITH (kafka_topic='json_sr_s', value_format='JSON_SR');"
    )
    assert "(ID INTEGER PRIMARY KEY, N BIGINT, OK BOOLEAN)" in created["statementText"]
    status, body = server.ksql(
        "CREATE STREAM unregistered WITH (kafka_topic='pageviews', value_format='AVRO');"
    )
    assert status == 400 and body["message"].startswith(
        "Schema for message values on topic 'pageviews' does not exist in the Schema "
        "Registry.\nSubject: pageviews-value\n"
    )


def test_protobuf_schemas_at_create_inferred_and_read_by_the_writers_message(
    server: KsqlServer, registry: str, broker: BrokerProcess
) -> None:
    """PROTOBUF as ksqlDB: the schema registered at CREATE (DECIMAL, DATE, TIME and
    TIMESTAMP as Confluent's well-known messages, read back by confluent-kafka's
    deserializer); a CREATE naming no columns takes the registered message's; a record
    another client wrote with its own .proto (other names and field numbers) is read
    with that message by a pull query."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import message_factory

    from strom.ksql.registry_formats import protobuf_files, protobuf_message

    server.ok(
        "CREATE STREAM proto_t (id STRING KEY, price DECIMAL(5, 2), day DATE, at TIME, "
        "ts TIMESTAMP, prices ARRAY<DECIMAL(4, 1)>) "
        "WITH (kafka_topic='proto_t', value_format='PROTOBUF', partitions=1);"
    )
    client = SchemaRegistryClient({"url": registry})
    registered = client.get_latest_version("proto_t-value")  # at CREATE, before any row
    assert registered.schema.schema_type == "PROTOBUF"
    server.ok(
        "INSERT INTO proto_t (id, price, day, at, ts, prices) VALUES ('p', 12.5, "
        "'2024-02-29', '01:02:03.004', '2024-02-29T10:00:00.250', ARRAY[1.5, -2]);"
    )
    [record] = read_all(broker, "proto_t", 1)
    assert int.from_bytes(record.value()[1:5], "big") == registered.schema_id
    files = protobuf_files(registered.schema.schema_str)
    message_class = message_factory.GetMessageClass(protobuf_message(files, [0]))
    value = ProtobufDeserializer(message_class, {"use.deprecated.format": False})(
        record.value(), SerializationContext("proto_t", MessageField.VALUE)
    )
    assert (value.PRICE.value, value.PRICE.scale) == ((1250).to_bytes(2, "big"), 2)
    assert (value.DAY.year, value.DAY.month, value.DAY.day) == (2024, 2, 29)
    assert (value.AT.hours, value.AT.minutes, value.AT.seconds, value.AT.nanos) == (
        1, 2, 3, 4_000_000,
    )  # fmt: skip
    assert (value.TS.seconds, value.TS.nanos) == (1709200800, 250_000_000)
    [created] = server.ok(
        "CREATE STREAM proto_copy WITH (kafka_topic='proto_t', value_format='PROTOBUF');"
    )
    assert created["statementText"].startswith(
        "CREATE STREAM PROTO_COPY (PRICE DECIMAL(5, 2), DAY DATE, AT TIME, TS TIMESTAMP, "
        "PRICES ARRAY<DECIMAL(4, 1)>) WITH ("
    )
    # Another client's record: its .proto registered as text, its own field numbers, an
    # enum from another subject it references.
    units_text = 'syntax = "proto3"; package units; enum Unit { C = 0; F = 1; }'
    client.register_schema("units", Schema(units_text, "PROTOBUF"))
    proto_text = (
        'syntax = "proto3"; import "google/protobuf/timestamp.proto"; import "units.proto"; '
        "message Reading { google.protobuf.Timestamp taken = 3; float degrees = 1; "
        "units.Unit unit = 2; }"
    )
    schema_id = client.register_schema(
        "sensor-value",
        Schema(proto_text, "PROTOBUF", [SchemaReference("units.proto", "units", 1)]),
    )
    reading_class = message_factory.GetMessageClass(
        protobuf_message(protobuf_files(proto_text, {"units.proto": units_text}), [0])
    )
    reading = reading_class(degrees=21.5, unit=1)
    reading.taken.seconds = 1700000000
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(
        "sensor", b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + reading.SerializeToString()
    )
    producer.flush(10)
    del producer
    [created] = server.ok(
        "CREATE STREAM sensor WITH (kafka_topic='sensor', value_format='PROTOBUF');"
    )
    assert "(TAKEN TIMESTAMP, DEGREES DOUBLE, UNIT STRING)" in created["statementText"]
    status, refused = server.ksql(
        "CREATE STREAM sensor_b WITH (kafka_topic='sensor', value_format='PROTOBUF', "
        "value_schema_full_name='Nope');"
    )
    assert status == 400 and refused["message"].startswith(
        "Schema for message values on topic 'sensor' does not exist in the Schema Registry."
    )
    lines = list(
        KsqlRestClient(server.url).lines("/query-stream", {"sql": "SELECT * FROM sensor;"})
    )
    assert json.loads(lines[1]) == ["2023-11-14T22:13:20.000", 21.5, "F"]
    # PROTOBUF_NOSR: the message alone, nothing in the registry.
    server.ok(
        "CREATE STREAM bare (id STRING KEY, n BIGINT, price DECIMAL(4, 2)) "
        "WITH (kafka_topic='bare', value_format='PROTOBUF_NOSR', partitions=1);"
        "INSERT INTO bare (id, n, price) VALUES ('b', 7, 1.25);"
    )
    assert "bare-value" not in client.get_subjects()
    lines = list(KsqlRestClient(server.url).lines("/query-stream", {"sql": "SELECT * FROM bare;"}))
    assert json.loads(lines[1]) == ["b", 7, 1.25]


def test_sources_created_with_a_schema_id(
    server: KsqlServer, registry: str, broker: BrokerProcess
) -> None:
    """VALUE_SCHEMA_ID, as ksqlDB: the columns are that schema's (under its own field
    names), its rows written with it (its id, its own field names), for AVRO and
    PROTOBUF; columns beside it refused."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry})
    avro = {
        "type": "record", "name": "Reading", "fields": [
            {"name": "sensor", "type": "string"}, {"name": "level", "type": "double"}],
    }  # fmt: skip
    avro_id = client.register_schema("levels-other", Schema(json.dumps(avro), "AVRO"))
    [created] = server.ok(
        f"CREATE STREAM levels WITH (kafka_topic='levels', value_format='AVRO', "
        f"value_schema_id={avro_id}, partitions=1);"
        "INSERT INTO levels (`sensor`, `level`) VALUES ('s1', 2.5);"
    )
    assert "(`sensor` STRING, `level` DOUBLE)" in created["statementText"]
    assert client.get_latest_version("levels-value").schema_id == avro_id  # at CREATE
    [record] = read_all(broker, "levels", 1)
    assert int.from_bytes(record.value()[1:5], "big") == avro_id
    decoded = AvroDeserializer(client)(
        record.value(), SerializationContext("levels", MessageField.VALUE)
    )
    assert decoded == {"sensor": "s1", "level": 2.5}
    server.ok(
        "CREATE STREAM named_avro (n INT) WITH (kafka_topic='named_avro', "
        "value_format='AVRO', value_schema_full_name='com.acme.Order', partitions=1);"
    )
    named = json.loads(client.get_latest_version("named_avro-value").schema.schema_str)
    assert (named["namespace"], named["name"]) == ("com.acme", "Order")
    proto_text = 'syntax = "proto3"; message Tick { string sym = 1; int64 qty = 2; }'
    proto_id = client.register_schema("ticks-other", Schema(proto_text, "PROTOBUF"))
    [created] = server.ok(
        f"CREATE STREAM ticks WITH (kafka_topic='ticks', value_format='PROTOBUF', "
        f"value_schema_id={proto_id}, partitions=1);"
        "INSERT INTO ticks (`sym`, `qty`) VALUES ('X', 3);"
    )
    assert "(`sym` STRING, `qty` BIGINT)" in created["statementText"]
    [record] = read_all(broker, "ticks", 1)
    assert record.value()[:6] == b"\x00" + proto_id.to_bytes(4, "big") + b"\x00"
    lines = list(KsqlRestClient(server.url).lines("/query-stream", {"sql": "SELECT * FROM ticks;"}))
    assert json.loads(lines[1]) == ["X", 3]
    # a key's one column, a STRUCT, is written as the schema's object itself (unwrapped)
    key_text = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}})
    key_id = client.register_schema("struct_keys-other", Schema(key_text, "JSON"))
    server.ok(
        f"CREATE STREAM struct_keys (v INT) WITH (kafka_topic='struct_keys', "
        f"key_format='JSON_SR', value_format='JSON', key_schema_id={key_id}, partitions=1);"
        "INSERT INTO struct_keys (ROWKEY, v) VALUES (STRUCT(`id` := 42), 1);"
    )
    [record] = read_all(broker, "struct_keys", 1)
    assert record.key() == b"\x00" + key_id.to_bytes(4, "big") + b'{"id":42}'
    for text, message in (
        (f"CREATE STREAM bad (x INT) WITH (kafka_topic='levels', value_format='AVRO', "
         f"value_schema_id={avro_id});",
         "Table elements and VALUE_SCHEMA_ID cannot both exist for create statement."),
        (f"CREATE STREAM bad WITH (kafka_topic='levels', value_format='PROTOBUF', "
         f"value_schema_id={avro_id});",
         f"Format and fetched schema type using VALUE_SCHEMA_ID {avro_id} are different. "
         "Format: [PROTOBUF], Fetched schema type: [AVRO]."),
        (f"CREATE STREAM levels_copy WITH (value_format='AVRO', value_schema_id={avro_id}) "
         "AS SELECT `level` FROM levels;",
         "The following value columns are changed, missing or reordered: [`level` DOUBLE]. "
         "Schema from schema registry is [`sensor` STRING, `level` DOUBLE]"),
    ):  # fmt: skip
        status, refused = server.ksql(text)
        assert (status, refused["message"]) == (400, message)


def test_create_with_columns_keeps_a_subjects_schema(server: KsqlServer, registry: str) -> None:
    """A CREATE naming its columns registers their schema only under a subject that has
    none, as ksqlDB's schema register injector does: a topic's writers' schema (an int)
    stays, the column (a STRING) reads it."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry})
    given = client.register_schema("coerced-value", Schema('"int"', "AVRO"))
    server.ok(
        "CREATE STREAM coerced (k STRING KEY, foo STRING) WITH (kafka_topic='coerced', "
        "value_format='AVRO', wrap_single_value=false, partitions=1);"
    )
    assert client.get_latest_version("coerced-value").schema_id == given
    server.ok(
        "CREATE STREAM fresh (k STRING KEY, foo STRING) WITH (kafka_topic='fresh', "
        "value_format='AVRO', partitions=1);"
    )
    fresh = json.loads(client.get_latest_version("fresh-value").schema.schema_str)
    assert [f["name"] for f in fresh["fields"]] == ["FOO"]
    # the key read from the registry, the value columns named: the value's registered
    key_id = client.register_schema("keyed-key", Schema('"boolean"', "AVRO"))
    server.ok(
        "CREATE STREAM keyed (foo INT) WITH (kafka_topic='keyed', format='AVRO', partitions=1);"
    )
    assert client.get_latest_version("keyed-key").schema_id == key_id
    keyed = json.loads(client.get_latest_version("keyed-value").schema.schema_str)
    assert [f["name"] for f in keyed["fields"]] == ["FOO"]
    # a record key's schema is one key column, as ksqlDB infers keys (unwrapped)
    record = {"type": "record", "name": "K", "fields": [{"name": "F1", "type": "string"}]}
    client.register_schema("struct_key-key", Schema(json.dumps(record), "AVRO"))
    server.ok(
        "CREATE STREAM struct_key (foo INT) WITH (kafka_topic='struct_key', format='AVRO', "
        "partitions=1);"
    )
    [described] = server.ok("DESCRIBE struct_key;")
    key = [f for f in described["sourceDescription"]["fields"] if f.get("type") == "KEY"]
    assert [(f["name"], f["schema"]["type"]) for f in key] == [("ROWKEY", "STRUCT")]


def strom_ksql(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """``strom ksql URL ARGS`` run in this process: (exit code, stdout, stderr)."""
    argv = ["ksql", url, *args]
    parsed = strom_parser(argv).parse_args(argv)
    code = parsed.run(parsed)
    out, err = capsys.readouterr()
    return code, out, err


def test_print_over_query(server: KsqlServer, capsys: pytest.CaptureFixture[str]) -> None:
    """PRINT streams the topic's records as ksqlDB's /query writes them (after the
    INSERT VALUES test's records)."""
    client = KsqlRestClient(server.url)
    body = {"ksql": "PRINT 'orders' FROM BEGINNING LIMIT 2;"}
    lines = [line for line in client.lines("/query", body) if line]
    assert lines == [
        "Key format: KAFKA_INT or KAFKA_STRING",
        "Value format: JSON or KAFKA_STRING",
        "rowtime: 2023/11/14 22:13:20.000 Z, key: 1, "
        'value: {"ITEM":"book","AMOUNT":12.50,"TS":1700000000000}, partition: 0',
        "rowtime: 2023/11/14 22:13:20.001 Z, key: 2, "
        'value: {"ITEM":"pen","AMOUNT":3.00,"TS":1700000000001}, partition: 0',
    ]
    with pytest.raises(KsqlServerError) as info:
        list(client.lines("/query", {"ksql": "PRINT ORDERS;"}))
    assert info.value.status == 400 and info.value.body["error_code"] == 40000
    assert info.value.body["message"].endswith(
        "Topic names are case-sensitive.\nDid you mean:\n\tprint orders;"
    )
    # The registry formats guessed, as ksqlDB guesses them (the registry tests' records).
    lines = [
        line
        for line in client.lines("/query", {"ksql": "PRINT 'json_sr_s' FROM BEGINNING LIMIT 1;"})
        if line
    ]
    assert lines[:2] == [
        "Key format: KAFKA_INT or KAFKA_STRING",
        "Value format: JSON_SR or KAFKA_STRING",
    ]
    assert lines[2].endswith(', key: 7, value: {"N":9000000000,"OK":true}, partition: 0')
    lines = [
        line
        for line in client.lines("/query", {"ksql": "PRINT 'proto_t' FROM BEGINNING LIMIT 1;"})
        if line
    ]
    assert lines[1].startswith("Value format: PROTOBUF")
    assert " DAY { year: 2024 month: 2 day: 29 } " in lines[2]
    lines = [
        line
        for line in client.lines("/query", {"ksql": "PRINT 'avro_s' FROM BEGINNING LIMIT 1;"})
        if line
    ]
    assert lines[0].startswith("Key format: AVRO") and lines[1].startswith("Value format: AVRO")
    assert (
        ', key: a, value: {"N": 1, "PRICE": "2.50", "TAGS": ["x"], "AT": {"CITY": "Oslo"}}'
        in lines[2]
    )
    code, out, err = strom_ksql(
        capsys, server.url, "-e", "PRINT csv FROM BEGINNING INTERVAL 1 LIMIT 1;"
    )
    assert code == 0, err
    assert 'key: x, value: "hello, world",5, partition: 0' in out


def test_print_avro_dates_times_and_timestamps_as_numbers(
    server: KsqlServer, broker: BrokerProcess, registry: str
) -> None:
    """PRINT shows an AVRO record's DATE, TIME and TIMESTAMP as the numbers they hold
    (epoch days, ms of the day, epoch ms), as ksqlDB's PRINT does: a DATE before the
    year 1 too, which a Python date cannot hold."""
    import io

    import fastavro
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    server.ok(
        "CREATE STREAM dated (d DATE, t TIME, ts TIMESTAMP) WITH (kafka_topic='dated', "
        "value_format='AVRO', partitions=1);"
    )
    registered = SchemaRegistryClient({"url": registry}).get_latest_version("dated-value")
    schema = fastavro.parse_schema(json.loads(registered.schema.schema_str))
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, {"D": -2147483647, "T": 1000, "TS": 0})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("dated", b"\x00" + registered.schema_id.to_bytes(4, "big") + body.getvalue())
    producer.flush(10)
    del producer
    client = KsqlRestClient(server.url)
    body_sent = {"ksql": "PRINT 'dated' FROM BEGINNING LIMIT 1;"}
    lines = [line for line in client.lines("/query", body_sent) if line]
    assert lines[1].startswith("Value format: AVRO"), lines
    assert lines[2].endswith(
        ', key: <null>, value: {"D": -2147483647, "T": 1000, "TS": 0}, partition: 0'
    ), lines


def test_cli_execute_file_and_run_script(
    server: KsqlServer, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    code, out, err = strom_ksql(
        capsys, server.url, "--execute", "SHOW STREAMS; DEFINE t = 'PAGEVIEWS'; DESCRIBE ${t};"
    )
    assert code == 0, err
    assert "Stream Name" in out and "PAGEVIEWS" in out
    assert "Field" in out and "ARRAY<VARCHAR(STRING)>" in out
    code, out, err = strom_ksql(capsys, server.url, "-e", "DESCRIBE nothing; SHOW STREAMS;")
    assert code == 1 and "Stream Name" not in out
    assert "Could not find STREAM/TABLE 'NOTHING' in the Metastore" in err
    code, out, err = strom_ksql(capsys, server.url, "--output", "json", "-e", "SHOW TABLES;")
    assert json.loads(out)["@type"] == "tables"
    inner = tmp_path / "inner.sql"
    inner.write_text("-- run from the outer script\nDESCRIBE ${source};\n")
    outer = tmp_path / "outer.sql"
    outer.write_text(f"DEFINE source = 'pageviews';\nSHOW TOPICS;\nRUN SCRIPT '{inner}';\n")
    code, out, err = strom_ksql(capsys, server.url, "--file", str(outer))
    assert code == 0, err
    assert "Kafka Topic" in out and "Name                 : PAGEVIEWS" in out


def test_cli_select_streams_a_push_querys_rows(
    server: KsqlServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """SELECT ... EMIT CHANGES from the CLI goes to /query-stream and prints the header
    and each row as it comes, until the LIMIT (the INSERT VALUES test's orders)."""
    statements = (
        "SET 'auto.offset.reset'='earliest';SELECT ID, ITEM FROM ORDERS EMIT CHANGES LIMIT 2;"
    )
    code, out, err = strom_ksql(capsys, server.url, "--execute", statements)
    assert code == 0, err
    rows = [[cell.strip() for cell in line.split("|")[1:-1]]
            for line in out.splitlines() if line.startswith("|")]  # fmt: skip
    assert rows == [["ID", "ITEM"], ["1", "book"], ["2", "pen"]]
    assert out.endswith("Limit Reached\nQuery terminated\n")
    code, out, err = strom_ksql(capsys, server.url, "-e", "SELECT nope FROM ORDERS EMIT CHANGES;")
    assert code == 1 and "cannot be resolved" in err


def test_cli_interactive(
    server: KsqlServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt: a statement over several lines, one refused, help, then exit."""
    typed = iter(["SHOW", "  STREAMS;", "DESCRIBE nothing;", "SET 'a'='b';", "help", "exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    code, out, err = strom_ksql(capsys, server.url)
    assert code == 0
    assert "version 0.29.0" in out and "Stream Name" in out and "PAGEVIEWS" in out
    assert "Could not find STREAM/TABLE 'NOTHING' in the Metastore" in err
    assert "Successfully changed local property 'a' to 'b'." in out
    assert "RUN SCRIPT 'file.sql';" in out and "Syntax Error" not in err  # help is the CLI's


def test_a_ksqldb_client_from_pypi(server: KsqlServer, broker: BrokerProcess) -> None:
    """ksql-python-ng (the ksql-python line for ksqlDB 0.29) drives the server."""
    from ksql import KSQLAPI
    from ksql.errors import KSQLError

    client = KSQLAPI(server.url)
    assert client.get_ksql_version() == "0.29.0"
    client.ksql(
        "CREATE STREAM py_events (id INT KEY, kind STRING) "
        "WITH (kafka_topic='py_events', value_format='JSON', partitions=1)"
    )
    assert client.create_stream("py_copy", ["id INT KEY", "kind STRING"], "py_events") is True
    [streams] = client.ksql("SHOW STREAMS")
    assert {"PY_EVENTS", "PY_COPY"} <= {s["name"] for s in streams["streams"]}
    assert any(p["name"] == "ksql.service.id" for p in client.get_properties())
    client.ksql("INSERT INTO py_events (id, kind) VALUES (9, 'click')")
    [record] = read_all(broker, "py_events", 1)
    assert json.loads(record.value()) == {"KIND": "click"}
    with pytest.raises(KSQLError) as info:
        client.ksql("DESCRIBE py_nothing")
    assert info.value.error_code == 40001


def test_assert_topic_and_schema(
    server: KsqlServer, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """ASSERT TOPIC / SCHEMA answer ksqlDB's entities when the assertion holds, and its
    417 error when it does not within the timeout; a topic made while one waits is seen."""
    import threading

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    server.ok(
        "CREATE STREAM asserted (a INT) WITH (kafka_topic='Asserted_Topic', "
        "value_format='JSON', partitions=2);"
    )
    [entity] = server.ok("ASSERT TOPIC Asserted_Topic WITH (PARTITIONS=2, REPLICAS=1);")
    assert entity["@type"] == "assert_topic"
    assert (entity["topicName"], entity["exists"]) == ("Asserted_Topic", True)
    status, body = server.ksql("ASSERT TOPIC Asserted_Topic WITH (partitions=3, fish=1);")
    assert status == 417 and body["error_code"] == 41700, body
    assert body["message"] == (
        "Mismatched configuration for topic Asserted_Topic: For config partitions, "
        "expected 3 got 2\nCannot assert unknown topic property: FISH"
    )
    status, body = server.ksql("ASSERT TOPIC 'never_made' TIMEOUT 300 MILLISECONDS;")
    assert (status, body["message"]) == (417, "Topic never_made does not exist")
    [entity] = server.ok("ASSERT NOT EXISTS TOPIC never_made;")
    assert (entity["topicName"], entity["exists"]) == ("never_made", False)
    status, body = server.ksql("ASSERT NOT EXISTS TOPIC Asserted_Topic;")
    assert (status, body["message"]) == (417, "Topic Asserted_Topic exists")

    # an ASSERT waits for a topic made meanwhile by another request (the server is not
    # held while it waits)
    answers: list[tuple[int, Any]] = []
    waiter = threading.Thread(
        target=lambda: answers.append(server.ksql("ASSERT TOPIC later_made TIMEOUT 60 SECONDS;"))
    )
    waiter.start()
    server.ok(
        "CREATE STREAM later (a INT) WITH (kafka_topic='later_made', value_format='JSON', "
        "partitions=1);"
    )
    waiter.join(90)
    assert answers and answers[0][0] == 200, answers
    assert answers[0][1][0]["topicName"] == "later_made"

    client = SchemaRegistryClient({"url": registry})
    schema_id = client.register_schema(
        "asserted-value", Schema('{"type": "record", "name": "R", "fields": []}', "AVRO")
    )
    [entity] = server.ok(f"ASSERT SCHEMA SUBJECT 'asserted-value' ID {schema_id};")
    assert entity["@type"] == "assert_schema"
    assert (entity["subject"], entity["id"], entity["exists"]) == (
        "asserted-value",
        schema_id,
        True,
    )
    status, body = server.ksql("ASSERT SCHEMA SUBJECT 'missing-value' TIMEOUT 200 MILLISECONDS;")
    assert (status, body["message"]) == (
        417,
        "Schema with subject name missing-value does not exist",
    )
    status, body = server.ksql(f"ASSERT NOT EXISTS SCHEMA ID {schema_id};")
    assert (status, body["message"]) == (417, f"Schema with id {schema_id} exists")
    status, body = server.ksql("ASSERT SCHEMA;")
    assert (status, body["message"]) == (
        400,
        "ASSERT SCHEMA statements much include a subject name or an id",
    )
    status, body = server.ksql("ASSERT VALUES foo (id INT) VALUES (123);")
    assert status == 400 and "Syntax error at or near 'VALUES' at line 1:8" in body["message"]

    # the CLI prints them as ksqlDB's does
    code, out, _ = strom_ksql(
        capsys,
        server.url,
        "--execute",
        f"ASSERT TOPIC Asserted_Topic; ASSERT SCHEMA ID {schema_id};",
    )
    assert code == 0
    assert "Topic Asserted_Topic exists." in out
    assert f"Schema with id {schema_id} exists." in out


def push_queries(server: KsqlServer) -> list[dict[str, Any]]:
    [queries] = server.ok("SHOW QUERIES;")
    return [q for q in queries["queries"] if q["queryType"] == "PUSH"]


def test_websocket_queries_and_print(server: KsqlServer) -> None:
    """``/ws/query``, as Control Center and ksqlDB's older clients query: the schema,
    the rows, ``{"error": "done"}`` and a normal close at the end of a pull query or a
    push query's LIMIT; PRINT's records as JSON strings; a client closing ends its
    query."""
    server.ok(
        "CREATE STREAM ws_clicks (user_id STRING KEY, page STRING, ms BIGINT) "
        "WITH (kafka_topic='ws_clicks', value_format='JSON', partitions=1);"
        "INSERT INTO ws_clicks (user_id, page, ms) VALUES ('u1', '/home', 1);"
        "INSERT INTO ws_clicks (user_id, page, ms) VALUES ('u2', '/cart', 2);"
        "INSERT INTO ws_clicks (user_id, page, ms) VALUES ('u1', '/é', 3);"
    )
    schema = (
        '[{"name":"USER_ID","schema":{"type":"STRING","fields":null,"memberSchema":null}},'
        '{"name":"PAGE","schema":{"type":"STRING","fields":null,"memberSchema":null}},'
        '{"name":"MS","schema":{"type":"BIGINT","fields":null,"memberSchema":null}}]'
    )
    messages, code, reason = ws_query(
        server.url,
        "SELECT user_id, page, ms FROM ws_clicks EMIT CHANGES LIMIT 2;",
        {"auto.offset.reset": "earliest"},
    )
    assert messages == [
        schema,
        '{"row":{"columns":["u1","/home",1]}}',
        '{"row":{"columns":["u2","/cart",2]}}',
        '{"error":"done"}',
    ]
    assert (code, reason) == (1000, "done")
    # a pull query: every row, then the end
    messages, code, reason = ws_query(server.url, "SELECT * FROM ws_clicks;")
    assert messages == [
        schema,
        '{"row":{"columns":["u1","/home",1]}}',
        '{"row":{"columns":["u2","/cart",2]}}',
        '{"row":{"columns":["u1","/é",3]}}',
        '{"error":"done"}',
    ]
    assert (code, reason) == (1000, "done")
    # the client closing ends its push query
    messages, code, _ = ws_query(
        server.url,
        "SELECT page FROM ws_clicks EMIT CHANGES;",
        {"ksql.streams.auto.offset.reset": "earliest"},
        close_after=2,
    )
    assert json.loads(messages[0])[0]["name"] == "PAGE"
    assert json.loads(messages[1]) == {"row": {"columns": ["/home"]}}
    assert code is None
    deadline = time.monotonic() + 60
    while push_queries(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert push_queries(server) == []
    # PRINT: each record's line as a JSON string
    messages, code, reason = ws_query(server.url, "PRINT 'ws_clicks' FROM BEGINNING LIMIT 2;")
    assert len(messages) == 3 and messages[2] == '{"error":"done"}'
    lines = [json.loads(m) for m in messages[:2]]
    assert lines[0].startswith("rowtime: ") and lines[0].endswith(
        ', key: u1, value: {"PAGE":"/home","MS":1}, partition: 0'
    )
    assert lines[1].endswith(', key: u2, value: {"PAGE":"/cart","MS":2}, partition: 0')
    assert (code, reason) == (1000, "done")


def test_a_latest_push_query_reads_what_is_written_once_its_header_came(
    server: KsqlServer, broker: BrokerProcess
) -> None:
    """A push query from ``latest`` has its position (every partition's end) before its
    header is written: records a client writes as soon as it has the header, to any of
    the source's partitions, are its rows."""
    from confluent_kafka import Producer

    server.ok(
        "CREATE STREAM late_clicks (user_id STRING KEY, page STRING) "
        "WITH (kafka_topic='late_clicks', value_format='JSON', partitions=3);"
        "INSERT INTO late_clicks (user_id, page) VALUES ('u0', '/before');"
    )
    request = urllib.request.Request(
        server.url + "/query-stream",
        data=json.dumps(
            {
                "sql": "SELECT page FROM late_clicks EMIT CHANGES LIMIT 3;",
                "properties": {"auto.offset.reset": "latest"},
            }
        ).encode(),
        headers={"Content-Type": "application/vnd.ksql.v1+json"},
        method="POST",
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    with urllib.request.urlopen(request, timeout=30) as response:
        header = json.loads(response.readline())
        assert header["columnNames"] == ["PAGE"]
        for partition in range(3):
            page = json.dumps({"PAGE": f"/p{partition}"}).encode()
            producer.produce("late_clicks", value=page, key=b"u", partition=partition)
        producer.flush(10)
        rows = sorted(json.loads(line)[0] for line in response.read().splitlines()[:3])
    assert rows == ["/p0", "/p1", "/p2"]


def test_websocket_refusals_close_with_ksqldbs_codes(server: KsqlServer) -> None:
    """A refused request or statement: ``{"error": message}``, then close 1003 with the
    message as its reason (cut to 123 bytes)."""
    messages, code, reason = ws_query(server.url, "", params={})
    assert messages == ['{"error":"Error parsing request: missing request parameter"}']
    assert (code, reason) == (1003, "Error parsing request: missing request parameter")
    request = json.dumps({"ksql": "SELECT * FROM ws_nope;"})
    messages, code, reason = ws_query(server.url, "", params={"request": request, "version": "2"})
    assert (code, reason) == (1003, "Received invalid api version: 2")
    messages, code, reason = ws_query(server.url, "SELECT * FROM ws_nope EMIT CHANGES;")
    message = json.loads(messages[0])["error"]
    assert message.startswith("Exception while preparing statement: WS_NOPE does not exist.")
    assert (code, reason) == (1003, message)
    messages, code, reason = ws_query(server.url, "SHOW STREAMS; SHOW TABLES;")
    assert (code, reason) == (
        1003,
        "Error parsing query: Expected exactly one KSQL statement; found 2 instead",
    )
    messages, code, reason = ws_query(server.url, "PRINT 'ws_nope';")
    assert (code, reason) == (
        1003,
        "Topic does not exist, or KSQL does not have permission to list the topic: ws_nope",
    )
    messages, code, reason = ws_query(
        server.url, "SELECT * FROM ws_clicks EMIT CHANGES;", {"ksql.service.id": "other"}
    )
    message = (
        "Error parsing request: One or more properties overrides set locally are prohibited "
        "by the KSQL server (use UNSET to reset their default value): [ksql.service.id]"
    )
    assert messages == [json.dumps({"error": message}, separators=(",", ":"))]
    assert code == 1003 and reason == message[:120] + "..."
    assert len(reason.encode()) == 123


def test_server_metadata_and_valid_properties(server: KsqlServer) -> None:
    status, info = server.call("GET", "/info")
    kafka_cluster = info["KsqlServerInfo"]["kafkaClusterId"]
    cluster_id = {
        "id": "",
        "scope": {
            "path": [],
            "clusters": {"kafka-cluster": kafka_cluster, "ksql-cluster": SERVICE_ID},
        },
    }
    assert server.call("GET", "/v1/metadata") == (
        200,
        {"version": "0.29.0", "clusterId": cluster_id},
    )
    assert server.call("GET", "/v1/metadata/id") == (200, cluster_id)
    # / redirects to /info; the container health checks answer {}
    with urllib.request.urlopen(server.url + "/", timeout=30) as redirected:
        assert redirected.url == server.url + "/info"
        assert json.load(redirected)["KsqlServerInfo"]["ksqlServiceId"] == SERVICE_ID
    assert server.call("GET", "/chc/ready") == server.call("GET", "/chc/live") == (200, {})
    assert server.call("GET", "/is_valid_property/ksql.streams.auto.offset.reset") == (200, True)
    status, refused = server.call("GET", "/is_valid_property/ksql.service.id")
    assert status == 400 and refused == {
        "@type": "generic_error",
        "error_code": 40000,
        "message": "One or more properties overrides set locally are prohibited by the KSQL "
        "server (use UNSET to reset their default value): [ksql.service.id]",
    }
    # /ksql and /query refuse them too (/query-stream does not look)
    denied = {"ksql.service.id": "other"}
    assert server.ksql("SHOW STREAMS;", streamsProperties=denied) == (400, refused)
    status, answer = server.call(
        "POST", "/query", {"ksql": "PRINT 'ws_clicks' LIMIT 1;", "streamsProperties": denied}
    )
    assert (status, answer) == (400, refused)
    # with heartbeats on, the servers of the service id are its query group's members
    status, cluster = server.call("GET", "/clusterStatus")
    host = server.url.removeprefix("http://")
    assert status == 200 and list(cluster["clusterStatus"]) == [host]
    assert cluster["clusterStatus"][host] == {
        "hostAlive": True,
        "lastStatusUpdateMs": cluster["clusterStatus"][host]["lastStatusUpdateMs"],
        "activeStandbyPerQuery": {},  # no persistent query here
        "hostStoreLags": {"stateStoreLags": {}, "updateTimeMs": 0},
    }
    beat = {"hostInfo": "127.0.0.1:8088", "timestamp": 1}
    assert server.call("POST", "/heartbeat", beat) == (200, {"isOk": True})
    # lag reporting is off (ksqlDB's default): 404 without a body
    request = urllib.request.Request(server.url + "/lag", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(request, timeout=30)
    assert missing.value.code == 404 and missing.value.read() == b""


def test_basic_auth_guards_the_new_routes(broker: BrokerProcess, tmp_path: Path) -> None:
    """The listener's basic authentication covers /ws/query, /v1/metadata,
    /is_valid_property, /clusterStatus, /heartbeat and /lag as every other route: the
    ksql server's application on the real HTTP server, a real engine (not started)."""
    import aiohttp

    from strom.cli.http_service import http_server
    from strom.ksql.config import server_config
    from strom.ksql.engine import KsqlEngine
    from strom.ksql.server import KsqlServerApp
    from strom.services.http_security import http_security

    users = tmp_path / "users.properties"
    users.write_text("ada: secret,admin\n")
    props = {
        "bootstrap.servers": broker.bootstrap,
        "listeners": "http://127.0.0.1:0",
        "ksql.service.id": "auth_",
        "authentication.method": "BASIC",
        "authentication.users.file": str(users),
    }
    config = server_config(props)

    async def run() -> None:
        engine = KsqlEngine(config)
        server = http_server(
            KsqlServerApp(engine).app,
            http_security(config.listener, config.listener_security),
        )
        port = await server.start()
        url = f"http://127.0.0.1:{port}"
        guarded = [
            ("GET", "/ws/query"),
            ("GET", "/v1/metadata"),
            ("GET", "/v1/metadata/id"),
            ("GET", "/is_valid_property/ksql.service.id"),
            ("GET", "/clusterStatus"),
            ("POST", "/heartbeat"),
            ("POST", "/lag"),
        ]
        try:
            async with aiohttp.ClientSession() as session:
                for method, path in guarded:
                    async with session.request(method, url + path) as response:
                        assert response.status == 401, path
                        assert response.headers["WWW-Authenticate"].startswith("Basic")
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(url + "/ws/query")
                assert refused.value.status == 401
                ada = {"Authorization": aiohttp.encode_basic_auth("ada", "secret")}
                async with session.get(url + "/v1/metadata", headers=ada) as response:
                    assert response.status == 200
                    assert (await response.json())["clusterId"]["scope"]["clusters"][
                        "ksql-cluster"
                    ] == "auth_"
                # heartbeats off (ksqlDB's default): 404 without a body
                for method, path in (("GET", "/clusterStatus"), ("POST", "/heartbeat")):
                    async with session.request(method, url + path, headers=ada) as response:
                        assert response.status == 404 and await response.read() == b""
                async with session.ws_connect(
                    url + "/ws/query", params={"version": "9"}, headers=ada
                ) as ws:
                    message = await ws.receive(timeout=30)
                    assert json.loads(message.data) == {"error": "Received invalid api version: 9"}
        finally:
            await server.stop()
            engine.close()

    asyncio.run(run())
    gc.collect()  # the engine's clients go now, not after the broker (logging its absence)


def test_restart_replays_and_a_second_server_follows(
    server: KsqlServer, broker: BrokerProcess
) -> None:
    """A second server with the same service id replays the command topic at start (a
    restarted server has its streams, tables and types), then follows it: what the first
    accepts takes effect in the second too."""
    second = KsqlServer(broker, *server.overrides)
    try:
        assert " commands replayed from " + COMMAND_TOPIC in second.banner
        # both are members of the service id's query group: /clusterStatus lists both
        hosts = {url.removeprefix("http://") for url in (server.url, second.url)}
        deadline = time.monotonic() + 60
        while set(server.call("GET", "/clusterStatus")[1]["clusterStatus"]) != hosts:
            assert time.monotonic() < deadline, "the second server is not in the group"
            time.sleep(0.2)
        status, cluster = second.call("GET", "/clusterStatus")
        assert {h: s["hostAlive"] for h, s in cluster["clusterStatus"].items()} == dict.fromkeys(
            hosts, True
        )
        assert second.ok("SHOW STREAMS;") == server.ok("SHOW STREAMS;")
        server.ok(
            "CREATE TYPE money AS STRUCT<amount DECIMAL(10, 2), currency STRING>;"
            "CREATE TABLE accounts (id STRING PRIMARY KEY, balance money) "
            "WITH (kafka_topic='accounts', format='JSON', partitions=1);"
            "ALTER TABLE accounts ADD COLUMN note STRING;"
        )
        before = server.ok("SHOW STREAMS; SHOW TABLES; SHOW TYPES;")
        deadline = time.monotonic() + 10
        while second.ok("SHOW STREAMS; SHOW TABLES; SHOW TYPES;") != before:
            assert time.monotonic() < deadline, "the second server did not follow"
            time.sleep(0.1)
        server.stop()
        [described] = second.ok("DESCRIBE accounts;")
        balance, note = described["sourceDescription"]["fields"][1:]
        assert balance["schema"]["type"] == "STRUCT"
        assert note["name"] == "NOTE"  # the ALTER followed from the command topic
        assert described["sourceDescription"]["statement"].startswith("ALTER TABLE")
        status, statuses = second.call("GET", "/status")
        assert statuses["commandStatuses"]["table/`ACCOUNTS`/create"] == "SUCCESS"
        second.ok("DROP TABLE accounts;")
    finally:
        second.stop()
    records = read_all(broker, COMMAND_TOPIC, 2)
    assert records[0].key().startswith(b"stream/`PAGEVIEWS`/create")
    command = json.loads(records[0].value())
    assert command["statement"].startswith("CREATE STREAM PAGEVIEWS (ID BIGINT KEY")
    assert {"streamsProperties", "originalProperties", "version"} <= set(command)


def test_bad_config_is_one_line(tmp_path: Any) -> None:
    properties = tmp_path / "ksql-server.properties"
    properties.write_text("listeners=localhost:8088\n")
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "ksql-server", str(properties)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "listeners" in done.stderr, done.stderr
