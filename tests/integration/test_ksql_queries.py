"""ksql queries run by the server (``strom ksql-server``) against a real broker, driven
over HTTP as ksqlDB's clients drive ksqlDB: push queries on ``/query-stream`` and
``/query`` (run in the server), persistent queries (CREATE STREAM / TABLE AS SELECT) on
the server's Spark, their output read back with confluent-kafka, the processing log,
DESCRIBE ... EXTENDED's runtime statistics and offsets, PAUSE (kept across a restart)
and RESUME of a query, which goes on from its checkpoint without losing or writing
anything twice (exactly_once_v2, read_committed),
pull queries, TERMINATE and DROP; EMIT FINAL, session
windows, a stream-stream LEFT join and EXPLODE with ksqlDB's records; two servers of one
service id sharing a query, one killed (-9) and the other taking it over exactly once,
and CREATE OR REPLACE of the query.

One broker and one server (one Spark driver) for the module, and a second server for
the last test; the tests build on each other in order.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from ksql_websocket import ws_query
from service_process import ServiceProcess

from strom.ksql.rest_client import KsqlRestClient, KsqlServerError
from strom.zero_time import ZeroTimeRecord, ZeroTimeWriter

SERVICE_ID = "q_"
LOG_TOPIC = f"{SERVICE_ID}ksql_processing_log"
MINUTE = 60_000
BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a minute boundary
SLOW_S = 300  # the bound on a stateful query's first output on a loaded machine


class Server:
    def __init__(self, broker: BrokerProcess, state_dir: Path, registry: str) -> None:
        self.registry = registry
        overrides = {
            "ksql.schema.registry.url": registry,
            "bootstrap.servers": broker.bootstrap,
            "listeners": "http://127.0.0.1:0",
            "ksql.service.id": SERVICE_ID,
            "ksql.streams.state.dir": str(state_dir),
            "ksql.streams.processing.guarantee": "exactly_once_v2",
            "ksql.spark.master": "local[2]",
            "ksql.spark.trigger.interval.ms": "200",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
            "spark.sql.shuffle.partitions": "1",
            "ksql.streams.session.timeout.ms": "6000",  # a dead server's queries move on
            # a query whose Python workers did not connect back in time on a loaded
            # machine (Spark waits 10 s) is started again soon
            "ksql.query.retry.backoff.initial.ms": "1000",
            "ksql.query.retry.backoff.max.ms": "5000",
            "ksql.heartbeat.enable": "true",  # /clusterStatus answers
        }
        args = [arg for k, v in overrides.items() for arg in ("--override", f"{k}={v}")]
        self.process = ServiceProcess(["ksql-server", *args, "--log-level", "WARNING"])
        self.url = self.process.url

    def ksql(self, text: str, **properties: Any) -> tuple[int, Any]:
        body = {"ksql": text, "streamsProperties": properties}
        try:
            return 200, KsqlRestClient(self.url).call("POST", "/ksql", body)
        except KsqlServerError as exc:
            return exc.status, exc.body

    def ok(self, text: str, **properties: Any) -> list[dict[str, Any]]:
        status, body = self.ksql(text, **properties)
        assert status == 200, body
        return body

    def stream(self, path: str, body: dict[str, Any], accept: str = "") -> list[bytes]:
        """The lines of a streamed answer, to its end."""
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **({"Accept": accept} if accept else {})},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return [line for line in response.read().split(b"\n") if line]

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[str]:
    """A schema registry (``strom schema-registry``) for the AVRO rows."""
    process = ServiceProcess(
        ["schema-registry", "--bootstrap-server", broker.bootstrap, "--listener",
         "http://127.0.0.1:0"]
    )  # fmt: skip
    yield process.url
    process.stop()


@pytest.fixture(scope="module")
def server(
    broker: BrokerProcess, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    state_dir = tmp_path_factory.mktemp("ksql-state")
    running = Server(broker, state_dir, registry)
    running.state_dir = state_dir  # type: ignore[attr-defined]
    yield running
    running.stop()


def produce(broker: BrokerProcess, topic: str, records: list[tuple[Any, Any, int]]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for key, value, timestamp in records:
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        producer.produce(topic, key=key, value=data, timestamp=timestamp)
    assert producer.flush(30) == 0


def registry_client(server: Server) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": server.registry})


def read_topic(broker: BrokerProcess, topic: str, count: int, deadline_s: float = 120) -> list[Any]:
    """``count`` committed records of ``topic`` from its start (waiting for them), then
    whatever else is there: (key, value, timestamp)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    metadata = consumer.list_topics(topic, timeout=30).topics[topic]
    partitions = sorted(metadata.partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records: list[Any] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                at_end.add(message.partition())
                if len(records) >= count and at_end >= set(partitions):
                    break
                continue
            at_end.discard(message.partition())
            records.append((message.key(), message.value(), message.timestamp()[1]))
    finally:
        consumer.close()
    return records


def describe(server: Server, name: str) -> dict[str, Any]:
    [described] = server.ok(f"DESCRIBE {name} EXTENDED;")
    return described["sourceDescription"]


def caught_up(server: Server, sink: str) -> dict[str, Any]:
    """``DESCRIBE sink EXTENDED`` once the query writing ``sink`` has read (processed,
    its output written) every record of its sources, by its ``queryOffsetSummaries``."""
    deadline = time.monotonic() + SLOW_S
    while True:
        described = describe(server, sink)
        offsets = [
            p
            for s in described["queryOffsetSummaries"]
            for t in s["topicSummaries"]
            for p in t["offsets"]
        ]
        if offsets and all(p["consumerOffset"] >= p["logEndOffset"] for p in offsets):
            return described
        assert time.monotonic() < deadline, described
        time.sleep(0.2)


def test_push_query_rows_limit_and_shapes(server: Server, broker: BrokerProcess) -> None:
    server.ok(
        "CREATE STREAM clicks (user_id STRING KEY, page STRING, ms BIGINT) "
        "WITH (kafka_topic='clicks', value_format='JSON', partitions=1);"
    )
    produce(
        broker,
        "clicks",
        [
            (b"u1", {"PAGE": "/home", "MS": 1}, BASE),
            (b"u1", {"page": "/cart", "ms": 2}, BASE + 10_000),
            (b"u2", {"PAGE": "/home", "MS": 3}, BASE + 20_000),
        ],
    )
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT user_id, UCASE(page) AS page, ms * 10 FROM clicks "
            "WHERE ms > 1 EMIT CHANGES LIMIT 2;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    header = json.loads(lines[0])
    assert header["queryId"].startswith("transient_CLICKS_")
    assert header["columnNames"] == ["USER_ID", "PAGE", "KSQL_COL_0"]
    assert header["columnTypes"] == ["STRING", "STRING", "BIGINT"]
    assert sorted(json.loads(line) for line in lines[1:]) == [
        ["u1", "/CART", 20],
        ["u2", "/HOME", 30],
    ]
    # ksqlDB's older /query shape; an aggregation gives every update
    lines = server.stream(
        "/query",
        {
            "ksql": "SELECT user_id, COUNT(*) AS n FROM clicks GROUP BY user_id EMIT CHANGES "
            "LIMIT 3;",
            "streamsProperties": {"ksql.streams.auto.offset.reset": "earliest"},
        },
    )
    body = json.loads(b"".join(lines))
    assert body[0]["header"]["schema"] == "`USER_ID` STRING, `N` BIGINT"
    assert sorted(tuple(item["row"]["columns"]) for item in body[1:4]) == [
        ("u1", 1), ("u1", 2), ("u2", 1)
    ]  # fmt: skip
    assert body[4] == {"finalMessage": "Limit Reached"}
    status, refused = server.ksql("SELECT * FROM nope EMIT CHANGES;")
    assert status == 400 and refused["error_code"] == 40002
    # AVRO rows through the registry, read back by a push query
    server.ok(
        "CREATE STREAM payments (id STRING KEY, amount DECIMAL(6, 2), at TIMESTAMP) "
        "WITH (kafka_topic='payments', key_format='KAFKA', value_format='AVRO', partitions=1);"
        "INSERT INTO payments (id, amount, at) VALUES ('p1', 12.5, '2026-01-01T00:00:01');"
    )
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT id, amount * 2 AS twice, at FROM payments EMIT CHANGES LIMIT 1;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    assert json.loads(lines[1]) == ["p1", 25.0, "2026-01-01T00:00:01.000"]  # ksqlDB's API


def test_close_query_ends_a_push_query_and_plain_tables_are_not_pulled(
    server: Server,
) -> None:
    lines: list[bytes] = []
    body = {"sql": "SELECT * FROM clicks EMIT CHANGES;", "properties": {}}
    reader = threading.Thread(target=lambda: lines.extend(server.stream("/query-stream", body)))
    reader.start()
    deadline = time.monotonic() + 60
    pushed: list[dict[str, Any]] = []
    while not pushed and time.monotonic() < deadline:
        [queries] = server.ok("SHOW QUERIES;")
        pushed = [q for q in queries["queries"] if q["queryType"] == "PUSH"]
    [push] = pushed
    assert push["queryString"] == "SELECT * FROM clicks EMIT CHANGES;"
    closed = KsqlRestClient(server.url).call("POST", "/close-query", {"queryId": push["id"]})
    assert closed == {}
    reader.join(60)
    assert not reader.is_alive()
    assert json.loads(lines[0])["queryId"] == push["id"]
    server.ok(
        "CREATE TABLE users (id STRING PRIMARY KEY, name STRING) "
        "WITH (kafka_topic='users', format='JSON', partitions=1);"
        "INSERT INTO users (id, name) VALUES ('u1', 'Ada');"
    )
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT c.user_id, c.page, u.name FROM clicks c LEFT JOIN users u "
            "ON c.user_id = u.id EMIT CHANGES LIMIT 3;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    assert json.loads(lines[0])["columnNames"] == ["USER_ID", "PAGE", "NAME"]
    assert sorted(json.loads(line) for line in lines[1:]) == [
        ["u1", "/cart", "Ada"], ["u1", "/home", "Ada"], ["u2", "/home", None]
    ]  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.stream("/query-stream", {"sql": "SELECT * FROM users;"})
    assert json.loads(refused.value.read())["message"].startswith(
        "The `USERS` table isn't queryable."
    )
    server.ok("DROP TABLE users;")


def test_csas_with_filter_projection_and_processing_log(
    server: Server, broker: BrokerProcess
) -> None:
    produce(
        broker,
        "clicks",
        [
            (b"u3", b"not json", BASE + 30_000),
            (b"u3", {"PAGE": "/cart", "MS": 5}, BASE + 31_000),
        ],
    )
    [created] = server.ok(
        "CREATE STREAM carts WITH (value_format='JSON') AS "
        "SELECT user_id, ms, CONCAT('page:', page) AS page FROM clicks WHERE page = '/cart' "
        "EMIT CHANGES;",
        **{"auto.offset.reset": "earliest"},
    )
    query_id = created["commandStatus"]["queryId"]
    assert query_id.startswith("CSAS_CARTS_")
    assert created["commandStatus"]["message"] == f"Created query with ID {query_id}"
    # The next test's query, started now so that Spark starts both at once.
    [counting] = server.ok(
        "CREATE TABLE per_minute AS SELECT user_id, COUNT(*) AS clicks, SUM(ms) AS total "
        "FROM clicks "
        "WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY user_id EMIT CHANGES;",
        **{"auto.offset.reset": "earliest"},
    )
    counting_id = counting["commandStatus"]["queryId"]
    assert counting_id.startswith("CTAS_PER_MINUTE_")
    # A sink in a registry format has its schema registered at CREATE, before its first
    # row (as ksqlDB does); its rows are written with it.
    [as_proto] = server.ok(
        "CREATE STREAM carts_pb WITH (value_format='PROTOBUF') AS "
        "SELECT user_id, ms FROM clicks WHERE page = '/cart';",
        **{"auto.offset.reset": "earliest"},
    )
    registered = registry_client(server).get_latest_version("CARTS_PB-value")
    assert registered.schema.schema_type == "PROTOBUF"
    status, refused = server.ksql("ALTER STREAM carts_pb ADD COLUMN c INT;")
    assert status == 400
    assert refused["message"] == "ALTER command is not supported for CREATE ... AS statements."
    status = KsqlRestClient(server.url).call("GET", "/status/stream/`CARTS`/create")
    assert status == {"status": "SUCCESS", "message": f"Created query with ID {query_id}",
                      "queryId": query_id}  # fmt: skip
    records = read_topic(broker, "CARTS", 2)
    assert sorted((k, json.loads(v), t) for k, v, t in records) == [
        (b"u1", {"MS": 2, "PAGE": "page:/cart"}, BASE + 10_000),
        (b"u3", {"MS": 5, "PAGE": "page:/cart"}, BASE + 31_000),
    ]
    proto_id = as_proto["commandStatus"]["queryId"]
    # DESCRIBE ... EXTENDED's local runtime statistics, from the queries' progress on Spark
    carts = caught_up(server, "carts")
    assert carts["clusterStatistics"][1]["value"] == 2.0  # CARTS' two records written
    assert re.fullmatch(
        r"messages-per-sec: +\d+(\.\d\d)?   total-messages: +2 +last-message: "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z",
        carts["statistics"],
    ), carts["statistics"]
    [summary] = carts["queryOffsetSummaries"]
    assert summary["groupId"] == f"_confluent-ksql-{SERVICE_ID}query_{query_id}"
    [read] = summary["topicSummaries"]
    assert read["kafkaTopic"] == "clicks"
    in_clicks = sum(p["logEndOffset"] - p["logStartOffset"] for p in read["offsets"])
    for other in ("carts_pb", "per_minute"):
        caught_up(server, other)
    clicks = describe(server, "clicks")  # read by the three queries, written by none
    assert [(s["name"], s["value"]) for s in clicks["clusterStatistics"]][1] == (
        "consumer-total-messages",
        3.0 * in_clicks,
    )
    assert clicks["statistics"].startswith("consumer-messages-per-sec:")
    assert f"consumer-total-messages:{3 * in_clicks:>10} " in clicks["statistics"]
    entries = [json.loads(v) for _, v, _ in read_topic(broker, LOG_TOPIC, 3)]  # one a query
    errors = [e["message"]["deserializationError"] for e in entries if e["message"]["type"] == 0]
    assert errors and errors[0]["target"] == "value" and errors[0]["topic"] == "clicks"
    assert sorted(e["logger"] for e in entries) == sorted(
        f"processing.{query}.KsqlTopic.Source.deserializer"
        for query in (query_id, counting_id, proto_id)
    )
    [streams] = server.ok("SHOW STREAMS;")
    assert "KSQL_PROCESSING_LOG" in [s["name"] for s in streams["streams"]]

    [queries] = server.ok("SHOW QUERIES;")
    [listed] = [q for q in queries["queries"] if q["id"] == query_id]
    assert listed["sinks"] == ["CARTS"] and listed["sinkKafkaTopics"] == ["CARTS"]
    assert listed["queryType"] == "PERSISTENT" and listed["state"] == "RUNNING"
    [described] = server.ok("DESCRIBE clicks;")
    readers = [q["id"] for q in described["sourceDescription"]["readQueries"]]
    assert sorted(readers) == sorted([query_id, counting_id, proto_id])
    [explained] = server.ok(f"EXPLAIN {query_id};")
    assert explained["queryDescription"]["sources"] == ["CLICKS"]
    fields = [f["name"] for f in explained["queryDescription"]["fields"]]
    assert fields == ["USER_ID", "MS", "PAGE"]
    status, refused = server.ksql("DROP STREAM clicks;")  # ksqlDB's drop constraints
    assert status == 400
    assert refused["message"] == (
        "Cannot drop CLICKS.\nThe following streams and/or tables read from this source: "
        "[CARTS, CARTS_PB, PER_MINUTE].\nYou need to drop them before dropping CLICKS."
    )
    status, refused = server.ksql("CREATE STREAM nokey AS SELECT page FROM clicks;")
    assert status == 400 and refused["message"].startswith("Key missing from projection")
    status, unknown = server.ksql("TERMINATE CSAS_NOPE_1;")
    assert status == 400 and unknown["message"] == "Unknown queryId: CSAS_NOPE_1"
    ids = {int.from_bytes(v[1:5], "big") for _, v, _ in read_topic(broker, "CARTS_PB", 2)}
    assert ids == {registered.schema_id}
    [terminated] = server.ok(f"TERMINATE {proto_id};")
    assert terminated["commandStatus"]["message"] == "Query terminated."
    # DROP of a CREATE ... AS SELECT's sink ends its query, as ksqlDB's does
    dropped, _ = server.ok("DROP STREAM carts DELETE TOPIC; DROP STREAM carts_pb;")
    assert dropped["commandStatus"]["message"] == "Source `CARTS` (topic: CARTS) was dropped."
    [queries] = server.ok("SHOW QUERIES;")
    assert {q["id"] for q in queries["queries"]} == {counting_id}


def test_ctas_counts_every_update_per_tumbling_window(
    server: Server, broker: BrokerProcess
) -> None:
    # per_minute was created by the test before, beside carts
    produce(broker, "clicks", [(b"u1", {"PAGE": "/home", "MS": 4}, BASE + MINUTE + 5_000)])
    records = read_topic(broker, "PER_MINUTE", 5)
    updates = [
        (k[:-8], struct.unpack(">q", k[-8:])[0] - BASE, *json.loads(v).values())
        for k, v, _ in records
    ]
    assert updates == [  # key, window start, CLICKS, TOTAL: in the order of the records
        (b"u1", 0, 1, 1), (b"u1", 0, 2, 3), (b"u2", 0, 1, 3), (b"u3", 0, 1, 5),
        (b"u1", MINUTE, 1, 4),
    ]  # fmt: skip
    lines = server.stream(
        "/query-stream", {"sql": "SELECT * FROM per_minute WHERE user_id = 'u1';"}
    )
    header = json.loads(lines[0])
    assert header["columnNames"] == ["USER_ID", "WINDOWSTART", "WINDOWEND", "CLICKS", "TOTAL"]
    rows = sorted(json.loads(line) for line in lines[1:])
    assert rows == [
        ["u1", BASE, BASE + MINUTE, 2, 3],
        ["u1", BASE + MINUTE, BASE + 2 * MINUTE, 1, 4],
    ]
    # on /ws/query: the key columns, window bounds too, marked KEY in the schema
    messages, code, _ = ws_query(
        server.url, "SELECT clicks, windowstart, user_id FROM per_minute WHERE user_id = 'u1';"
    )
    assert [(f["name"], f.get("type")) for f in json.loads(messages[0])] == [
        ("CLICKS", None), ("WINDOWSTART", "KEY"), ("USER_ID", "KEY")
    ]  # fmt: skip
    assert sorted(json.loads(m)["row"]["columns"] for m in messages[1:-1]) == [
        [1, BASE + MINUTE, "u1"], [2, BASE, "u1"]
    ]  # fmt: skip
    assert (messages[-1], code) == ('{"error":"done"}', 1000)
    # /clusterStatus: the server runs the query, reading its source's partition
    [queries] = server.ok("SHOW QUERIES;")
    [counting] = [q["id"] for q in queries["queries"] if q["sinks"] == ["PER_MINUTE"]]
    cluster = KsqlRestClient(server.url).call("GET", "/clusterStatus")["clusterStatus"]
    [host] = cluster
    assert host == server.url.removeprefix("http://") and cluster[host]["hostAlive"] is True
    assert cluster[host]["activeStandbyPerQuery"][counting] == {
        "activeStores": [],
        "activePartitions": [{"topic": "clicks", "partition": 0}],
        "standByStores": [],
        "standByPartitions": [],
    }


def statuses(server: Server) -> dict[str, dict[str, int]]:
    """Each query's ``statusCount`` in SHOW QUERIES."""
    [queries] = server.ok("SHOW QUERIES;")
    return {q["id"]: q["statusCount"] for q in queries["queries"]}


def test_a_persistent_query_from_latest_reads_what_is_written_once_it_is_created(
    server: Server, broker: BrokerProcess
) -> None:
    """CREATE ... AS SELECT with auto.offset.reset latest starts at the ends its sources'
    partitions have when the statement is answered (Spark's own latest is taken only
    once its stream has started, later): records written right after are read, those
    before are not."""
    server.ok(
        "CREATE STREAM late_in (id STRING KEY, n INT) "
        "WITH (kafka_topic='late_in', value_format='JSON', partitions=2);"
    )
    produce(broker, "late_in", [(b"old", {"N": 0}, BASE)])
    server.ok(
        "CREATE STREAM late_out AS SELECT id, n * 10 AS n FROM late_in EMIT CHANGES;",
        **{"auto.offset.reset": "latest"},
    )
    produce(broker, "late_in", [(b"a", {"N": 1}, BASE + 1), (b"b", {"N": 2}, BASE + 2)])
    records = read_topic(broker, "LATE_OUT", 2, deadline_s=SLOW_S)
    assert sorted((k, json.loads(v)["N"]) for k, v, _ in records) == [(b"a", 10), (b"b", 20)]
    # the module's later tests count its queries: this one's is ended with its sink
    server.ok("DROP STREAM late_out DELETE TOPIC;")


def test_pause_survives_a_restart_and_resume_goes_on_without_repeating_output(
    server: Server, broker: BrokerProcess
) -> None:
    [counting_id] = statuses(server)
    [paused] = server.ok(f"PAUSE {counting_id.lower()};")
    assert paused["commandId"] == f"pause/{counting_id}/execute"
    assert paused["commandStatus"] == {"status": "SUCCESS", "message": "Query paused.",
                                       "queryId": None}  # fmt: skip
    assert statuses(server) == {counting_id: {"PAUSED": 1}}
    [explained] = server.ok(f"EXPLAIN {counting_id};")
    assert list(explained["queryDescription"]["ksqlHostQueryStatus"].values()) == ["PAUSED"]
    status, unknown = server.ksql("PAUSE CSAS_NOPE_1;")
    assert status == 400 and unknown["message"] == "Unknown queryId: CSAS_NOPE_1"
    produce(broker, "clicks", [(b"u1", {"PAGE": "/cart", "MS": 6}, BASE + MINUTE + 6_000)])
    # a query running beside it reads the record; the paused one writes nothing for it
    [probe] = server.ok(
        "CREATE STREAM pages AS SELECT user_id, page FROM clicks;",
        **{"auto.offset.reset": "earliest"},
    )
    probe_id = probe["commandStatus"]["queryId"]
    caught_up(server, "pages")
    assert len(read_topic(broker, "PER_MINUTE", 5)) == 5
    server.stop()
    produce(broker, "clicks", [(b"u2", {"PAGE": "/home", "MS": 7}, BASE + MINUTE + 7_000)])
    restarted = Server(broker, server.state_dir, server.registry)  # type: ignore[attr-defined]
    server.process, server.url = restarted.process, restarted.url
    # replayed from the command topic: still paused after the restart
    assert statuses(server) == {counting_id: {"PAUSED": 1}, probe_id: {"RUNNING": 1}}
    caught_up(server, "pages")  # both records read by the query running
    assert len(read_topic(broker, "PER_MINUTE", 5)) == 5
    [resumed] = server.ok("RESUME ALL;")
    assert resumed["commandId"] == "resume/ALL/execute"
    assert resumed["commandStatus"]["message"] == "Query resumed."
    assert statuses(server)[counting_id] == {"RUNNING": 1}
    records = read_topic(broker, "PER_MINUTE", 7)
    updates = sorted(
        (k[:-8], struct.unpack(">q", k[-8:])[0] - BASE, *json.loads(v).values())
        for k, v, _ in records
    )
    assert updates == [  # the SUM carries on from the state kept, each record once
        (b"u1", 0, 1, 1), (b"u1", 0, 2, 3), (b"u1", MINUTE, 1, 4), (b"u1", MINUTE, 2, 10),
        (b"u2", 0, 1, 3), (b"u2", MINUTE, 1, 7), (b"u3", 0, 1, 5),
    ]  # fmt: skip
    server.ok("TERMINATE ALL; DROP STREAM pages;")
    [queries] = server.ok("SHOW QUERIES;")
    assert queries["queries"] == []
    server.ok("DROP TABLE per_minute; DROP STREAM clicks;")


def test_n_way_foreign_key_and_grouped_joins_on_spark(
    server: Server, broker: BrokerProcess
) -> None:
    server.ok(
        "CREATE STREAM orders_j (id STRING KEY, customer STRING, item STRING, qty INTEGER) "
        "WITH (kafka_topic='orders_j', value_format='JSON', partitions=1);"
        "CREATE TABLE customers_j (id STRING PRIMARY KEY, name STRING, region STRING) "
        "WITH (kafka_topic='customers_j', value_format='JSON', partitions=1);"
        "CREATE TABLE items_j (id STRING PRIMARY KEY, price INTEGER) "
        "WITH (kafka_topic='items_j', value_format='JSON', partitions=1);"
        "CREATE TABLE accounts_j (id STRING PRIMARY KEY, customer STRING, balance INTEGER) "
        "WITH (kafka_topic='accounts_j', value_format='JSON', partitions=1);"
        "CREATE TABLE limits_j (id STRING PRIMARY KEY, cap INTEGER) "
        "WITH (kafka_topic='limits_j', value_format='JSON', partitions=1);"
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for topic, key, value, at in [
        ("customers_j", "c1", {"NAME": "Ada", "REGION": "eu"}, 1),
        ("customers_j", "c2", {"NAME": "Bob", "REGION": "us"}, 2),
        ("items_j", "i1", {"PRICE": 10}, 3),
        ("items_j", "i2", {"PRICE": 5}, 4),
        ("accounts_j", "a1", {"CUSTOMER": "c1", "BALANCE": 100}, 5),
        ("accounts_j", "a2", {"CUSTOMER": "c9", "BALANCE": 50}, 6),
        ("accounts_j", "a3", {"CUSTOMER": "c2", "BALANCE": 1}, 8),
        ("accounts_j", "a3", {"CUSTOMER": "c1", "BALANCE": 2}, 9),
        ("limits_j", "a1", {"CAP": 500}, 7),
        ("orders_j", "o1", {"CUSTOMER": "c1", "ITEM": "i1", "QTY": 2}, 10),
        ("orders_j", "o2", {"CUSTOMER": "c2", "ITEM": "i2", "QTY": 3}, 11),
        ("orders_j", "o3", {"CUSTOMER": "c1", "ITEM": "i2", "QTY": 1}, 12),
        ("orders_j", "o4", {"CUSTOMER": "c3", "ITEM": "i1", "QTY": 1}, 13),  # no customer
        ("customers_j", "c1", {"NAME": "Ada L", "REGION": "eu"}, 20),
        ("accounts_j", "a2", None, 21),
    ]:
        data = None if value is None else json.dumps(value).encode()
        producer.produce(topic, key=key.encode(), value=data, timestamp=BASE + at)
    assert producer.flush(30) == 0
    created = server.ok(
        "CREATE TABLE region_totals_j AS SELECT c.region, SUM(i.price * o.qty) AS total "
        "FROM orders_j o JOIN customers_j c ON o.customer = c.id "
        "JOIN items_j i ON o.item = i.id GROUP BY c.region;"
        "CREATE TABLE account_owners_j AS SELECT a.id, c.name, a.balance FROM accounts_j a "
        "LEFT JOIN customers_j c ON a.customer = c.id;",
        **{"auto.offset.reset": "earliest"},
    )  # two queries started at once

    def outputs(topic: str, count: int) -> list[tuple[Any, ...]]:
        records = read_topic(broker, topic, count, deadline_s=300)
        return [(k, v if v is None else json.loads(v), t - BASE) for k, v, t in records]

    # two joins on different keys (by customer, then by item), then GROUP BY: every
    # update of each region's total
    assert sorted(outputs("REGION_TOTALS_J", 3), key=repr) == [
        (b"eu", {"TOTAL": 20}, 10),
        (b"eu", {"TOTAL": 25}, 12),
        (b"us", {"TOTAL": 15}, 11),
    ]
    # a foreign-key LEFT join: keyed by the account, updated as the customer changes,
    # deleted with the account
    owners = outputs("ACCOUNT_OWNERS_J", 7)
    assert [o for o in owners if o[0] == b"a1"] == [
        (b"a1", {"NAME": "Ada", "BALANCE": 100}, 5),
        (b"a1", {"NAME": "Ada L", "BALANCE": 100}, 20),
    ]
    assert [o for o in owners if o[0] == b"a2"] == [
        (b"a2", {"NAME": None, "BALANCE": 50}, 6),
        (b"a2", None, 21),
    ]
    # a3's foreign key changed within the micro-batch: its results come from the joins
    # of c2 and of c1, in the order of the records that made them
    assert [o for o in owners if o[0] == b"a3"] == [
        (b"a3", {"NAME": "Bob", "BALANCE": 1}, 8),
        (b"a3", {"NAME": "Ada", "BALANCE": 2}, 9),
        (b"a3", {"NAME": "Ada L", "BALANCE": 2}, 20),
    ]
    # a push query runs the same flow in the server (the tables read to their end first)
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT o.id, c.name, i.price FROM orders_j o JOIN customers_j c "
            "ON o.customer = c.id JOIN items_j i ON o.item = i.id EMIT CHANGES LIMIT 3;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    assert [json.loads(line) for line in lines[1:]] == [
        ["o1", "Ada L", 10], ["o2", "Bob", 5], ["o3", "Ada L", 5]
    ]  # fmt: skip
    # a foreign-key join, then a join on the left table's key (a1 alone has both)
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT a.id, a.balance, l.cap FROM accounts_j a JOIN customers_j c "
            "ON a.customer = c.id JOIN limits_j l ON a.id = l.id EMIT CHANGES LIMIT 1;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    assert [json.loads(line) for line in lines[1:]] == [["a1", 100, 500]]
    # FULL OUTER: ksqlDB's synthetic key column ROWKEY, the key of the side present
    lines = server.stream(
        "/query-stream",
        {
            "sql": "SELECT * FROM customers_j c FULL OUTER JOIN limits_j l ON c.id = l.id "
            "EMIT CHANGES LIMIT 3;",
            "properties": {"auto.offset.reset": "earliest"},
        },
    )
    header = json.loads(lines[0])
    assert header["columnNames"] == ["ROWKEY", "C_ID", "C_NAME", "C_REGION", "L_ID", "L_CAP"]
    rows = [json.loads(line) for line in lines[1:]]
    assert len(rows) == 3
    assert all(row[0] == (row[1] if row[1] is not None else row[4]) for row in rows)
    assert {row[0] for row in rows} <= {"c1", "c2", "a1"}
    ids = " ".join(f"TERMINATE {c['commandStatus']['queryId']};" for c in created)
    server.ok(ids + "DROP TABLE region_totals_j; DROP TABLE account_owners_j;"
              "DROP STREAM orders_j; DROP TABLE customers_j; DROP TABLE items_j;"
              "DROP TABLE accounts_j; DROP TABLE limits_j;")  # fmt: skip


def windowed(records: list[Any], session: bool = False) -> list[tuple[Any, ...]]:
    """(key, window start, [end,] value, timestamp) of windowed records, sorted."""
    found = []
    for key, value, timestamp in records:
        if session:
            end, start = struct.unpack(">qq", key[-16:])
            bounds: tuple[int, ...] = (start - BASE, end - BASE)
            key = key[:-16]
        else:
            bounds, key = (struct.unpack(">q", key[-8:])[0] - BASE,), key[:-8]
        found.append((key, *bounds, json.loads(value) if value else None, timestamp - BASE))
    return sorted(found, key=repr)


def test_emit_final_session_windows_and_stream_stream_joins_on_spark(
    server: Server, broker: BrokerProcess
) -> None:
    server.ok(
        "CREATE STREAM events (id STRING KEY, v INTEGER) "
        "WITH (kafka_topic='events', value_format='JSON', partitions=1);"
        "CREATE STREAM pays (id STRING KEY, amount INTEGER) "
        "WITH (kafka_topic='pays', value_format='JSON', partitions=1);"
        "CREATE TABLE labels (id STRING PRIMARY KEY, tag STRING) "
        "WITH (kafka_topic='labels', value_format='JSON', partitions=1);"
    )
    second = 1000
    produce(broker, "labels", [(b"a", {"TAG": "first"}, BASE)])
    # first a record of time 0 (librdkafka would stamp 0 with the time of sending)
    zero_time = ZeroTimeWriter({"bootstrap.servers": broker.bootstrap})
    zero_time.send([ZeroTimeRecord("events", b"t0", b'{"V": 9}')])
    zero_time.close()
    produce(
        broker,
        "events",
        [(b"a", {"V": 1}, BASE + 1 * second), (b"a", {"V": 2}, BASE + 2 * second),
         (b"b", {"V": 3}, BASE + 30 * second), (b"a", {"V": 4}, BASE + 65 * second),
         (b"z", {"V": 0}, BASE + 600 * second)],
    )  # fmt: skip
    produce(broker, "pays", [(b"a", {"AMOUNT": 10}, BASE + 5 * second),
                             (b"b", {"AMOUNT": 20}, BASE + 50 * second)])  # fmt: skip
    join = (
        "SELECT e.id AS id, e.v AS v, p.amount AS amount FROM events e LEFT JOIN pays p "
        "WITHIN 10 SECONDS GRACE PERIOD 0 SECONDS ON e.id = p.id;"
    )
    created = server.ok(
        "CREATE TABLE final_counts AS SELECT id, COUNT(*) AS n FROM events "
        "WINDOW TUMBLING (SIZE 1 MINUTE, GRACE PERIOD 30 SECONDS) GROUP BY id EMIT FINAL;"
        "CREATE TABLE sessions AS SELECT id, COUNT(*) AS n FROM events "
        "WINDOW SESSION (30 SECONDS, GRACE PERIOD 10 SECONDS) GROUP BY id EMIT CHANGES;"
        f"CREATE STREAM maybe_paid AS {join}"
        "CREATE STREAM exploded AS SELECT id, EXPLODE(ARRAY[v, v * 10]) AS x FROM events;"
        "CREATE STREAM labelled AS SELECT e.id AS id, e.v AS v, l.tag AS tag FROM events e "
        "JOIN pays p WITHIN 10 SECONDS GRACE PERIOD 0 SECONDS ON e.id = p.id "
        "JOIN labels l ON e.id = l.id;",
        **{"auto.offset.reset": "earliest"},
    )  # five queries started at once, on the module's Spark
    # EXPLODE: a record a element, the key and timestamp copied
    exploded = read_topic(broker, "EXPLODED", 12, SLOW_S)
    assert sorted((t - BASE, k, json.loads(v)["X"]) for k, v, t in exploded if k != b"t0") == [
        (1 * second, b"a", 1), (1 * second, b"a", 10), (2 * second, b"a", 2),
        (2 * second, b"a", 20), (30 * second, b"b", 3), (30 * second, b"b", 30),
        (65 * second, b"a", 4), (65 * second, b"a", 40), (600 * second, b"z", 0),
        (600 * second, b"z", 0),
    ]  # fmt: skip
    # EMIT FINAL: one row per window once the stream time passes its end and grace,
    # stamped with the window's last record's time
    finals = read_topic(broker, "FINAL_COUNTS", 4, SLOW_S)
    assert windowed([f for f in finals if not f[0].startswith(b"t0")]) == [
        (b"a", 0, {"N": 2}, 2 * second),
        (b"a", MINUTE, {"N": 1}, 65 * second),
        (b"b", 0, {"N": 1}, 30 * second),
    ]
    # sessions: a record within the gap merges (the old session's tombstone, then the
    # merged one); the key ends with the session's end and start; stamped with its end
    sessions = read_topic(broker, "SESSIONS", 7, SLOW_S)
    assert windowed([s for s in sessions if not s[0].startswith(b"t0")], True) == sorted(
        [
            (b"a", 1 * second, 1 * second, {"N": 1}, 1 * second),
            (b"a", 1 * second, 1 * second, None, 1 * second),
            (b"a", 1 * second, 2 * second, {"N": 2}, 2 * second),
            (b"a", 65 * second, 65 * second, {"N": 1}, 65 * second),
            (b"b", 30 * second, 30 * second, {"N": 1}, 30 * second),
            (b"z", 600 * second, 600 * second, {"N": 1}, 600 * second),
        ],
        key=repr,
    )
    # a stream-stream join: the pairs within the window (the inner join's rows, stamped
    # with the later record's time) as they meet; a record left without a match is
    # emitted with the right side null once its window and grace have passed (z's has not)
    # (5 records: t0's, alone at time 0, is emitted with the right side null too, in any
    # order among the others)
    maybe = read_topic(broker, "MAYBE_PAID", 5, SLOW_S)
    assert [json.loads(v) for k, v, _ in maybe if k == b"t0"] == [{"V": 9, "AMOUNT": None}]
    maybe = [m for m in maybe if m[0] != b"t0"]
    # the first micro-batch's results in the order of the records that made them, across
    # keys: a's pairs (made by a's pay at 5 s) before b's unmatched record (closed by b's
    # pay at 50 s), whichever key Spark ran first
    assert [json.loads(v)["V"] for _, v, _ in maybe[:3]] == [1, 2, 3]
    assert sorted(((t - BASE, k, json.loads(v)) for k, v, t in maybe), key=repr) == sorted(
        [
            (5 * second, b"a", {"V": 1, "AMOUNT": 10}),
            (5 * second, b"a", {"V": 2, "AMOUNT": 10}),
            (30 * second, b"b", {"V": 3, "AMOUNT": None}),
            (65 * second, b"a", {"V": 4, "AMOUNT": None}),
        ],
        key=repr,
    )
    # a chain: the stream-stream join's pairs joined to a table. Once the stream time is
    # 600 s, a table row of time 1 s still updates the table (a stream-stream join's
    # watermark does not drop the rows of the joins after it), and z's pair meets it
    labelled = read_topic(broker, "LABELLED", 2, SLOW_S)
    assert sorted(((t - BASE, k, json.loads(v)) for k, v, t in labelled), key=repr) == [
        (5 * second, b"a", {"V": 1, "TAG": "first"}),
        (5 * second, b"a", {"V": 2, "TAG": "first"}),
    ]
    produce(broker, "labels", [(b"z", {"TAG": "late"}, BASE + 1 * second)])
    produce(broker, "pays", [(b"z", {"AMOUNT": 30}, BASE + 605 * second)])
    labelled = read_topic(broker, "LABELLED", 3, SLOW_S)
    assert [(t - BASE, k, json.loads(v)) for k, v, t in labelled[2:]] == [
        (605 * second, b"z", {"V": 0, "TAG": "late"})
    ]
    # the record of time 0 counts, in its window (0 to 1 minute) and its session
    assert [(k, json.loads(v)) for k, v, _ in finals if k.startswith(b"t0")] == [
        (b"t0" + struct.pack(">q", 0), {"N": 1})
    ]
    assert [(k, json.loads(v)) for k, v, _ in sessions if k.startswith(b"t0")] == [
        (b"t0" + struct.pack(">qq", 0, 0), {"N": 1})
    ]
    # records of a later micro-batch, behind the stream time (600 s) by more than the
    # grace, count while their window is open: z at 585 s merges into z's session of
    # 600 s (open until 640 s: its end, gap and grace), z at 545 s is in the window of
    # 540 to 600 s (open until 630 s), closed by z at 640 s; a at 3 s and z at 545 s
    # make no open session
    produce(
        broker,
        "events",
        [(b"z", {"V": 1}, BASE + 585 * second), (b"a", {"V": 2}, BASE + 3 * second),
         (b"z", {"V": 3}, BASE + 545 * second), (b"z", {"V": 4}, BASE + 640 * second)],
    )  # fmt: skip
    finals = read_topic(broker, "FINAL_COUNTS", 5, SLOW_S)
    assert windowed(finals[4:]) == [(b"z", 9 * MINUTE, {"N": 2}, 585 * second)]
    sessions = read_topic(broker, "SESSIONS", 10, SLOW_S)
    assert windowed(sessions[7:], session=True) == sorted(
        [
            (b"z", 600 * second, 600 * second, None, 600 * second),
            (b"z", 585 * second, 600 * second, {"N": 2}, 600 * second),
            (b"z", 640 * second, 640 * second, {"N": 1}, 640 * second),
        ],
        key=repr,
    )
    # CREATE OR REPLACE of a stream: a column added at the end is taken; one removed is not
    server.ok(
        "CREATE OR REPLACE STREAM pays (id STRING KEY, amount INTEGER, note STRING) "
        "WITH (kafka_topic='pays', value_format='JSON');"
    )
    [described] = server.ok("DESCRIBE pays;")
    fields = [f["name"] for f in described["sourceDescription"]["fields"]]
    assert fields == ["ID", "AMOUNT", "NOTE"]
    status, refused = server.ksql(
        "CREATE OR REPLACE STREAM pays (id STRING KEY, note STRING) "
        "WITH (kafka_topic='pays', value_format='JSON');"
    )
    assert status == 400 and refused["message"] == (
        "Cannot upgrade data source: DataSource '`PAYS`' has schema = `ID` STRING KEY, "
        "`AMOUNT` INTEGER, `NOTE` STRING which is not upgradeable to `ID` STRING KEY, "
        "`NOTE` STRING. (The following columns are changed, missing or reordered: "
        "[`AMOUNT` INTEGER, `NOTE` STRING])"
    )
    ids = " ".join(f"TERMINATE {c['commandStatus']['queryId']};" for c in created)
    server.ok(ids + "DROP TABLE final_counts; DROP TABLE sessions; DROP STREAM maybe_paid;"
              "DROP STREAM exploded; DROP STREAM labelled; DROP STREAM events;"
              "DROP STREAM pays; DROP TABLE labels;")  # fmt: skip


def ksql_migrations(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``strom ksql-migrations ARGS`` run in this process: (exit code, stdout, stderr)."""
    from strom.cli.main import _parser

    argv = ["ksql-migrations", *args]
    parsed = _parser(argv).parse_args(argv)
    code = parsed.run(parsed)
    out, err = capsys.readouterr()
    return code, out, err


def migration_rows(info_output: str) -> dict[str, list[str]]:
    """``info``'s table: each version's cells (name, state, previous version, started
    on, completed on, error reason)."""
    rows = [line.strip().split(" | ") for line in info_output.splitlines() if " | " in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def migrations_info(
    capsys: pytest.CaptureFixture[str], config: str, current: str, state: str
) -> str:
    """``info`` once the table (a query on Spark) shows version ``current`` in ``state``."""
    deadline = time.monotonic() + SLOW_S
    while True:
        out = ksql_migrations(capsys, "-c", config, "info")[1]
        shown = migration_rows(out).get(current, ["", ""])[1]
        if f"Current migration version: {current}\n" in out and shown == state:
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.5)


def test_ksql_migrations_apply_info_validate_and_a_failed_migration(
    server: Server, broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``strom ksql-migrations`` as ksqlDB's tool: a project, its metadata stream and
    table (the table a persistent query on Spark), two migrations applied one and then
    all, their states and checksums in the table, a file edited after it was applied
    refused by validate, and a refused statement leaving its migration in ERROR with
    the server's message."""
    project = tmp_path / "project"
    code, out, _ = ksql_migrations(capsys, "new-project", str(project), server.url)
    assert code == 0 and "Migrations project directory created successfully" in out
    config = str(project / "ksql-migrations.properties")
    assert f"ksql.server.url={server.url}\n" in Path(config).read_text()
    code, _, err = ksql_migrations(capsys, "-c", config, "info")
    assert code == 1
    assert err.startswith(
        "Failed to verify existence of migrations metadata stream 'MIGRATION_EVENTS'. Did you "
        "run `strom ksql-migrations initialize-metadata`? Error message: Received 400 response "
        "from server: "
    )
    try:
        code, out, err = ksql_migrations(capsys, "--config-file", config, "initialize-metadata")
        assert code == 0, err
        assert "Migrations metadata initialized successfully" in out
        [described] = server.ok("DESCRIBE MIGRATION_EVENTS;")
        topic = described["sourceDescription"]["topic"]
        assert topic == f"{SERVICE_ID}ksql_MIGRATION_EVENTS"
        for description in ("add users", "add orders"):
            assert ksql_migrations(capsys, "create", description, "-c", config)[0] == 0
        migrations = project / "migrations"
        first = migrations / "V000001__add_users.sql"
        second = migrations / "V000002__add_orders.sql"
        assert sorted(p.name for p in migrations.iterdir()) == [first.name, second.name]
        first.write_text(
            "-- the users; with a variable\n"
            "DEFINE topic = 'mig_users';\n"
            "CREATE STREAM mig_users (id INT KEY, name STRING) "
            "WITH (kafka_topic='${topic}', partitions=1, value_format='JSON');\n"
            "INSERT INTO mig_users (id, name) VALUES (1, 'a;b');\n"
        )
        second.write_text(
            "SET 'auto.offset.reset' = 'earliest';\n"
            "/* from --define */ CREATE STREAM mig_names AS SELECT id, name FROM ${source};\n"
        )

        code, out, err = ksql_migrations(capsys, "-c", config, "apply", "--next")
        assert code == 0, err
        assert "Applying migration version 1: add users" in out
        assert "Successfully migrated" in out
        out = migrations_info(capsys, config, "1", "MIGRATED")
        rows = migration_rows(out)
        assert [rows["1"][:3], rows["2"][:3]] == [
            ["add users", "MIGRATED", "<none>"],
            ["add orders", "PENDING", "N/A"],
        ]

        code, out, err = ksql_migrations(
            capsys, "-c", config, "apply", "--all", "--define", "source=mig_users"
        )
        assert code == 0, err
        assert "1 migration file(s) loaded." in out
        out = migrations_info(capsys, config, "2", "MIGRATED")
        rows = migration_rows(out)
        assert [rows[v][:3] + rows[v][5:] for v in ("1", "2")] == [
            ["add users", "MIGRATED", "<none>", "N/A"],
            ["add orders", "MIGRATED", "1", "N/A"],
        ]
        [names] = server.ok("DESCRIBE mig_names;")
        assert [f["name"] for f in names["sourceDescription"]["fields"]] == ["ID", "NAME"]

        code, out, _ = ksql_migrations(capsys, "-c", config, "validate")
        assert code == 0
        assert "Successfully validated checksums" in out
        original = first.read_text()
        first.write_text(original + "-- edited after it was applied\n")
        code, _, err = ksql_migrations(capsys, "-c", config, "validate")
        assert code == 1
        assert "Migrations file found for version 1 does not match the checksum" in err
        first.write_text(original)

        assert ksql_migrations(capsys, "-c", config, "create", "bad")[0] == 0
        (migrations / "V000003__bad.sql").write_text(
            "CREATE STREAM mig_bad AS SELECT * FROM no_such_stream;\n"
        )
        code, _, err = ksql_migrations(capsys, "-c", config, "apply", "--all")
        expected = (
            "Failed to execute sql: CREATE STREAM mig_bad AS SELECT * FROM no_such_stream;. "
            "Error: Received 400 response from server: Exception while preparing statement: "
            "NO_SUCH_STREAM does not exist.. Error code: 40001"
        )
        assert code == 1 and expected in err

        out = migrations_info(capsys, config, "3", "ERROR")
        assert migration_rows(out)["3"][2:3] + migration_rows(out)["3"][5:] == ["2", expected]
    finally:
        code, out, _ = ksql_migrations(capsys, "-c", config, "destroy-metadata")
        server.ksql("DROP STREAM IF EXISTS mig_names DELETE TOPIC;")
        server.ksql("DROP STREAM IF EXISTS mig_users DELETE TOPIC;")
    assert code == 0 and "Migrations metadata cleaned successfully" in out
    listed = json.dumps(server.ok("SHOW STREAMS; SHOW TABLES;"))
    assert "MIGRATION_EVENTS" not in listed and "MIGRATION_SCHEMA_VERSIONS" not in listed


def test_query_slots_move_incrementally_between_servers(broker: BrokerProcess) -> None:
    """The query group on the broker: a server joining takes half of the slots from the
    one there, which keeps the others all along (no round leaves it none); a server
    leaving gives its slots back; the two never hold a slot at once."""
    from confluent_kafka.admin import AdminClient

    from strom.ksql.config import server_config
    from strom.ksql.ownership import QUERY_SLOTS, QueryOwnership

    config = server_config({"bootstrap.servers": broker.bootstrap, "ksql.service.id": "slots_"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    held: dict[str, list[frozenset[int]]] = {"first": [], "second": []}
    first = QueryOwnership(config, admin, "http://first", held["first"].append)
    second = QueryOwnership(config, admin, "http://second", held["second"].append)
    everything = frozenset(range(QUERY_SLOTS))
    try:
        first.start()
        assert held["first"] == [everything]
        second.start()
        deadline = time.monotonic() + 60
        while first.owned | second.owned != everything or first.owned & second.owned:
            assert time.monotonic() < deadline, (first.owned, second.owned)
            time.sleep(0.05)
        kept = first.owned
        assert 0 < len(kept) < QUERY_SLOTS
        assert held["first"] == [everything, kept]  # only the moved slots were given up
        assert held["second"] == [second.owned]
        second.close()
        while first.owned != everything:
            assert time.monotonic() < deadline, first.owned
            time.sleep(0.05)
        assert held["first"] == [everything, kept, everything]
    finally:
        second.close()
        first.close()


def owner_of(
    servers: list[Server], query_id: str, expected: str | None = None, deadline_s: float = SLOW_S
) -> str:
    """The REST URL of the server that runs ``query_id``, as each server reports it (once
    it is ``expected``: a dead server is reported until the group's session timeout)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        hosts = []
        for each in servers:
            [described] = each.ok("SHOW QUERIES EXTENDED;")
            [query] = [q for q in described["queryDescriptions"] if q["id"] == query_id]
            hosts.append(query["ksqlHostQueryStatus"])
        if all(h == hosts[0] and len(h) == 1 for h in hosts):
            [(host, state)] = hosts[0].items()
            assert state == "RUNNING"
            if expected in (None, host):
                return host
        time.sleep(0.2)  # each answer describes the group: the servers are not hammered
    raise AssertionError(f"no single owner {expected or ''} of {query_id} reported: {hosts}")


@pytest.mark.timeout(900)  # each wait is bounded (SLOW_S); the second server's Spark starts cold
def test_two_servers_of_one_service_id_share_the_queries_and_take_over(
    server: Server, broker: BrokerProcess
) -> None:
    # The second server announces itself once the group has given it its slots: the
    # query below starts on its owner, and only there (it started on the first server
    # and moved at once, which took minutes on a loaded machine: the group waited for
    # the first server's Spark to start the query before it could stop it)
    second = Server(broker, server.state_dir, server.registry)  # type: ignore[attr-defined]
    servers = {server.url: server, second.url: second}
    try:
        server.ok(
            "CREATE STREAM orders (id STRING KEY, n INTEGER) "
            "WITH (kafka_topic='orders', value_format='JSON', partitions=2);"
        )
        produce(broker, "orders", [(f"o{i}".encode(), {"N": i}, BASE + i) for i in range(6)])
        [created] = second.ok(
            "CREATE STREAM big_orders AS SELECT id, n FROM orders WHERE n >= 0;",
            **{"auto.offset.reset": "earliest"},
        )  # accepted by one server, run by whichever owns it: once
        query_id = created["commandStatus"]["queryId"]
        records = read_topic(broker, "BIG_ORDERS", 6, SLOW_S)
        assert sorted(k for k, _, _ in records) == [f"o{i}".encode() for i in range(6)]
        owner = owner_of(list(servers.values()), query_id)
        survivor = next(s for url, s in servers.items() if url != owner)
        lines = survivor.stream("/query-stream", {"sql": "SELECT * FROM big_orders;"})
        assert len(lines) == 7  # any server answers a pull query: header and six rows
        servers[owner].process.proc.kill()  # kill -9 of the server running the query
        servers[owner].process.proc.wait(30)
        produce(broker, "orders", [(f"o{i}".encode(), {"N": i}, BASE + i) for i in range(6, 9)])
        records = read_topic(broker, "BIG_ORDERS", 9, SLOW_S)
        assert sorted(k for k, _, _ in records) == [f"o{i}".encode() for i in range(9)]
        # the group gives the dead server's query to the survivor (the output above may
        # be the dying server's last micro-batch: its Spark exits once its driver is gone)
        assert owner_of([survivor], query_id, survivor.url) == survivor.url
        # CREATE OR REPLACE: a new column and filter; the query keeps its id and progress,
        # and the records after it are written by the survivor, once
        [replaced] = survivor.ok(
            "CREATE OR REPLACE STREAM big_orders AS "
            "SELECT id, n, n * 10 AS tenfold FROM orders WHERE n >= 1;"
        )
        assert replaced["commandStatus"]["queryId"] == query_id
        status, refused = survivor.ksql(
            "CREATE OR REPLACE STREAM big_orders AS SELECT id, n FROM orders;"
        )
        assert status == 400
        assert refused["message"].startswith(
            "Cannot upgrade data source: DataSource '`BIG_ORDERS`' has schema = `ID` STRING KEY, "
            "`N` INTEGER, `TENFOLD` INTEGER which is not upgradeable to `ID` STRING KEY, "
            "`N` INTEGER."
        )
        produce(broker, "orders", [(b"o9", {"N": 9}, BASE + 9), (b"o10", {"N": 0}, BASE + 10)])
        records = read_topic(broker, "BIG_ORDERS", 10, SLOW_S)
        assert sorted((k, json.loads(v)) for k, v, _ in records if k == b"o9") == [
            (b"o9", {"N": 9, "TENFOLD": 90})
        ]
        assert sorted(k for k, _, _ in records) == sorted(f"o{i}".encode() for i in range(10))
        survivor.ok(f"TERMINATE {query_id}; DROP STREAM big_orders; DROP STREAM orders;")
    finally:
        alive = [s for s in servers.values() if s.process.proc.poll() is None]
        for extra in alive[1:]:
            extra.stop()
        if alive:  # the module's fixture stops the one left
            server.process, server.url = alive[0].process, alive[0].url
