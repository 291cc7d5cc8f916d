"""PostgreSQL change data capture (Debezium's PostgresConnector) in the Connect worker: a
real PostgreSQL with wal_level=logical (tests/postgres_process.py), a real broker and a
real distributed worker process with exactly-once source support, driven over its REST
API; each test's connector has its own slot, publication and topic prefix.

Covers: the snapshot of existing rows as ``r`` events, then an insert, an update and a
delete with Debezium's envelope, schemas, source block, key and the tombstone after the
delete, and a table outside ``table.include.list`` not captured; REPLICA IDENTITY FULL
giving ``before``; a key update as delete, tombstone and create; the replication
connection cut and opened again with nothing lost or repeated; heartbeats; the offsets in
the offsets topic in Debezium's shape; bad configs refused with a 400 naming the key; and
the worker killed with SIGKILL while a writer keeps committing, restarted: an independent
read_committed reader finds every committed change once (exactly once), and a standalone
worker without exactly-once support killed the same way loses none (at least once); the
worker killed in the middle of a snapshot: taken again, each row's ``r`` once when the
snapshot is one transaction (``transaction.boundary=connector``), repeated with ``poll``
boundaries but the changes made meanwhile streamed once each after it; an incremental
snapshot asked for by a signal table's row, read in chunks between streamed changes, a
change made while a chunk's window is open winning over the chunk's copy of the row, and
the worker killed in the middle of one: each row's ``r`` once after the restart.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicPartition
from postgres_process import PostgresProcess
from test_connect import Worker, distributed_properties, error_of, wait_for

pytestmark = pytest.mark.timeout(240)

CLASS = "io.debezium.connector.postgresql.PostgresConnector"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresProcess]:
    process = PostgresProcess().start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # a killed worker leaves its group after 2 s, not Kafka's minimum of 6
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "data", {"group.min.session.timeout.ms": "1000"}
    )
    process.start()
    yield process
    if process.alive():
        process.stop()


class Workers:
    """The module's distributed worker; the kill test replaces it."""

    def __init__(self, properties: Path) -> None:
        self.properties = properties
        self.current = Worker("distributed", properties)

    def restart_after_kill(self) -> None:
        self.current.proc.kill()
        self.current.proc.wait(10)
        self.current = Worker("distributed", self.properties)


@pytest.fixture(scope="module")
def workers(broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    properties = distributed_properties(tmp_path_factory.mktemp("cdc"), broker, "connect-cdc")
    with properties.open("a") as out:
        out.write("exactly.once.source.support=enabled\nsession.timeout.ms=2000\n")
    held = Workers(properties)
    yield held
    if held.current.proc.poll() is None:
        held.current.stop()


def cdc_config(postgres: PostgresProcess, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": CLASS,
        "database.hostname": "127.0.0.1",
        "database.port": str(postgres.port),
        "database.user": "postgres",
        "database.dbname": "postgres",
        "topic.prefix": prefix,
        "slot.name": f"slot_{prefix}",
        "publication.name": f"pub_{prefix}",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        **extra,
    }


def create(worker: Worker, name: str, config: dict[str, str]) -> None:
    code, body = worker.call("POST", "/connectors", {"name": name, "config": config})
    assert code == 201, body


class TopicReader:
    """A topic's records (key and value JSON-decoded) as a read_committed consumer sees
    them, read as they come."""

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cdc-check",
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False})  # fmt: skip
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.records: list[tuple[Any, Any]] = []

    def read(self) -> int:
        for message in self.consumer.consume(1000, 0.2):
            if message.error() is None:
                key = None if message.key() is None else json.loads(message.key())
                value = None if message.value() is None else json.loads(message.value())
                self.records.append((key, value))
        return len(self.records)

    def wait(self, count: int, timeout: float = 60) -> list[tuple[Any, Any]]:
        wait_for(lambda: self.read() >= count, f"{count} records", timeout=timeout)
        return self.records

    def close(self) -> None:
        self.consumer.close()


def wait_streaming(postgres: PostgresProcess, slot: str) -> None:
    """Until the connector streams from its slot (its snapshot, if any, done)."""
    query = "SELECT active FROM pg_replication_slots WHERE slot_name = %s"
    wait_for(lambda: postgres.query(query, slot) == [(True,)], f"slot {slot} streaming")


def payloads(records: list[tuple[Any, Any]]) -> list[Any]:
    return [None if value is None else value["payload"] for _, value in records]


def test_snapshot_then_inserts_updates_and_deletes(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    postgres.query("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
    postgres.query("CREATE DOMAIN positive AS INT CHECK (VALUE > 0)")
    postgres.query(
        "CREATE TABLE customers (id INT PRIMARY KEY, name TEXT NOT NULL, balance NUMERIC(10,2),"
        " active BOOLEAN, born DATE, seen TIMESTAMPTZ, added TIMESTAMP, tags JSONB, uid UUID,"
        " photo BYTEA, score DOUBLE PRECISION, visits BIGINT, amount NUMERIC, feeling mood,"
        " labels TEXT[], counts INT[], waited INTERVAL, paid MONEY, level positive)"
    )
    postgres.query("CREATE TABLE ignored (id INT PRIMARY KEY)")
    postgres.query(
        "INSERT INTO customers VALUES (1, 'ann', 12.50, true, '1990-01-02', "
        "'2026-01-02 03:04:05.25+00', '2026-01-02 03:04:05.123456', '{\"a\": 1}', "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x0102', 1.5, 9000000000, 3.14159, 'happy', "
        "'{\"a b\",NULL,c}', '{1,2}', '1 day 2 hours', 1234.5, 7), "
        "(2, 'bob', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL)"
    )
    postgres.query("INSERT INTO ignored VALUES (1)")
    config = cdc_config(postgres, "main", **{"table.include.list": "public.customers"})
    create(workers.current, "cdc-main", config)
    reader = TopicReader(broker, "main.public.customers")
    try:
        snapshot = reader.wait(2)
        (key1, first), (_, second) = snapshot[:2]
        assert key1["payload"] == {"id": 1}
        assert key1["schema"] == {
            "type": "struct", "optional": False, "name": "main.public.customers.Key",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
        }  # fmt: skip
        envelope = first["schema"]
        assert envelope["name"] == "main.public.customers.Envelope" and envelope["version"] == 2
        assert [f["field"] for f in envelope["fields"]] == [
            "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns",
        ]  # fmt: skip
        value_fields = {f["field"]: f for f in envelope["fields"][1]["fields"]}
        assert value_fields["name"] == {"type": "string", "optional": False, "field": "name"}
        assert value_fields["balance"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert value_fields["balance"]["parameters"] == {
            "scale": "2",
            "connect.decimal.precision": "10",
        }
        assert value_fields["amount"]["name"] == "io.debezium.data.VariableScaleDecimal"
        assert value_fields["seen"]["name"] == "io.debezium.time.ZonedTimestamp"
        assert value_fields["added"]["name"] == "io.debezium.time.MicroTimestamp"
        assert value_fields["born"]["name"] == "io.debezium.time.Date"
        assert value_fields["tags"]["name"] == "io.debezium.data.Json"
        assert value_fields["uid"]["name"] == "io.debezium.data.Uuid"
        assert value_fields["feeling"]["parameters"] == {"allowed": "sad,ok,happy"}
        assert value_fields["labels"]["items"] == {"type": "string", "optional": True}
        assert value_fields["waited"]["name"] == "io.debezium.time.MicroDuration"
        assert value_fields["level"]["type"] == "int32"
        source_fields = [f["field"] for f in envelope["fields"][2]["fields"]]
        for name in ("version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table",
                     "txId", "lsn"):  # fmt: skip
            assert name in source_fields
        row = first["payload"]
        assert row["op"] == "r" and row["before"] is None
        after = row["after"]
        assert base64.b64decode(after["balance"]) == (1250).to_bytes(2, "big")
        assert after["amount"] == {
            "scale": 5,
            "value": base64.b64encode((314159).to_bytes(3, "big")).decode(),
        }
        assert base64.b64decode(after["paid"]) == (123450).to_bytes(3, "big")
        assert (after["feeling"], after["labels"], after["counts"]) == ("happy", ["a b", None, "c"],
                                                                       [1, 2])  # fmt: skip
        assert (after["waited"], after["level"]) == (93_600_000_000, 7)
        for extra in ("feeling", "labels", "counts", "waited", "paid", "level"):
            del after[extra]
        assert after | {"balance": None, "amount": None} == {
            "id": 1, "name": "ann", "balance": None, "active": True, "born": 7306,
            "seen": "2026-01-02T03:04:05.25Z", "added": 1767323045123456, "tags": '{"a": 1}',
            "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "photo": base64.b64encode(b"\x01\x02").decode(), "score": 1.5,
            "visits": 9000000000, "amount": None,
        }  # fmt: skip
        source = row["source"]
        assert source["connector"] == "postgresql" and source["name"] == "main"
        assert source["db"] == "postgres" and (source["schema"], source["table"]) == (
            "public",
            "customers",
        )
        assert [source["snapshot"], second["payload"]["source"]["snapshot"]] == ["first", "last"]
        assert (
            second["payload"]["after"]["name"] == "bob"
            and second["payload"]["after"]["balance"] is None
        )

        postgres.query("INSERT INTO customers (id, name, feeling, labels, waited, paid, level) "
                       "VALUES (3, 'cid', 'ok', '{x}', 'P1M', -2, 5)")  # fmt: skip
        postgres.query("UPDATE customers SET name = 'carl' WHERE id = 3")
        postgres.query("DELETE FROM customers WHERE id = 2")
        changes = reader.wait(6)[2:]
        inserted, updated, deleted, tombstone = payloads(changes)
        assert (inserted["op"], inserted["before"], inserted["after"]["name"]) == ("c", None, "cid")
        assert inserted["source"]["snapshot"] == "false" and inserted["source"]["lsn"] > 0
        streamed = {k: inserted["after"][k] for k in ("feeling", "labels", "waited", "level")}
        assert streamed == {"feeling": "ok", "labels": ["x"], "waited": 2_629_800_000_000,
                            "level": 5}  # fmt: skip
        assert base64.b64decode(inserted["after"]["paid"]) == (-200).to_bytes(2, "big", signed=True)
        assert inserted["source"]["txId"] != updated["source"]["txId"]
        assert (updated["op"], updated["before"], updated["after"]["name"]) == ("u", None, "carl")
        assert deleted["op"] == "d" and deleted["after"] is None
        # the default replica identity carries the key; a required column gets its zero
        assert (
            deleted["before"] | {"id": 2} == deleted["before"] and deleted["before"]["name"] == ""
        )
        assert tombstone is None
        assert [key["payload"] for key, _ in changes] == [{"id": 3}, {"id": 3}, {"id": 2},
                                                          {"id": 2}]  # fmt: skip
        # a column added: the next change's schema has it
        postgres.query("ALTER TABLE customers ADD COLUMN vip BOOLEAN NOT NULL DEFAULT false")
        postgres.query("UPDATE customers SET vip = true WHERE id = 3")
        _, widened = reader.wait(7)[6]
        assert widened["payload"]["after"]["vip"] is True and widened["payload"]["op"] == "u"
        after_fields = widened["schema"]["fields"][1]["fields"]
        assert after_fields[-1] == {"type": "boolean", "optional": False, "field": "vip"}
    finally:
        reader.close()
    offsets = committed_offsets(broker, "connect-cdc-offsets")
    stored = offsets[json.dumps(["cdc-main", {"server": "main"}], separators=(",", ":"))]
    assert {"lsn", "lsn_commit", "lsn_proc", "txId", "ts_usec", "lsn_events_processed"} <= set(
        stored
    )
    assert not topic_exists(broker, "main.public.ignored")
    workers.current.call("DELETE", "/connectors/cdc-main")


def committed_offsets(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "cdc-offsets",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })  # fmt: skip
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in metadata.partitions
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    latest: dict[str, Any] = {}
    done: set[int] = {p for p, end in ends.items() if end == 0}

    def read_all() -> bool:
        for message in consumer.consume(1000, 0.2):
            if message.error() is None:
                latest[message.key().decode()] = json.loads(message.value())
                if message.offset() + 1 >= ends[message.partition()] - 1:
                    done.add(message.partition())
        positions = consumer.position([TopicPartition(topic, p) for p in metadata.partitions])
        return all(tp.offset >= ends[tp.partition] - 1 or tp.partition in done for tp in positions)

    wait_for(read_all, "the offsets topic read")
    consumer.close()
    return latest


def topic_exists(broker: BrokerProcess, topic: str) -> bool:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cdc-topics"})
    try:
        return topic in consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()


def test_replica_identity_full_and_key_changes(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    postgres.query("CREATE TABLE accounts (id INT PRIMARY KEY, owner TEXT, amount INT)")
    postgres.query("ALTER TABLE accounts REPLICA IDENTITY FULL")
    create(workers.current, "cdc-full", cdc_config(postgres, "full", **{
        "table.include.list": "public\\.acc.*", "snapshot.mode": "never",
        "publication.autocreate.mode": "filtered", "heartbeat.interval.ms": "100",
        "slot.drop.on.stop": "true"}))  # fmt: skip
    wait_streaming(postgres, "slot_full")
    postgres.query("INSERT INTO accounts VALUES (1, 'ann', 10)")
    postgres.query("UPDATE accounts SET amount = 20 WHERE id = 1")
    postgres.query("UPDATE accounts SET id = 2 WHERE id = 1")
    postgres.query("DELETE FROM accounts WHERE id = 2")
    reader = TopicReader(broker, "full.public.accounts")
    try:
        reader.wait(7)
        # the replication connection lost: the task opens it again and streams on, after
        # the changes it has (the slot sends again what it was not told is flushed)
        assert postgres.query("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                              "WHERE slot_name = 'slot_full'") == [(True,)]  # fmt: skip
        postgres.query("INSERT INTO accounts VALUES (3, 'cid', 30)")
        last = {"id": 3, "owner": "cid", "amount": 30}

        def inserted() -> bool:
            reader.read()
            return any(v is not None and v["payload"]["after"] == last for _, v in reader.records)

        wait_for(inserted, "the insert after the reconnection")
        records = reader.records
    finally:
        reader.close()
    values = payloads(records)
    assert [v and v["op"] for v in values] == ["c", "u", "d", None, "c", "d", None, "c"]
    assert values[1]["before"] == {"id": 1, "owner": "ann", "amount": 10}
    assert values[1]["after"] == {"id": 1, "owner": "ann", "amount": 20}
    # the key changed: the old key's row deleted (with a tombstone), the new one created
    assert values[2]["before"] == {"id": 1, "owner": "ann", "amount": 20}
    assert [key["payload"] for key, _ in records[2:5]] == [{"id": 1}, {"id": 1}, {"id": 2}]
    assert values[4]["after"] == {"id": 2, "owner": "ann", "amount": 20}
    assert values[5]["before"] == {"id": 2, "owner": "ann", "amount": 20}
    assert postgres.query("SELECT puballtables FROM pg_publication WHERE pubname = 'pub_full'") == [
        (False,)
    ]
    heartbeats = TopicReader(broker, "__debezium-heartbeat.full")
    try:
        key, value = heartbeats.wait(1)[0]
    finally:
        heartbeats.close()
    assert key["payload"] == {"serverName": "full"} and value["payload"]["ts_ms"] > 0
    workers.current.call("DELETE", "/connectors/cdc-full")
    slot = "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'slot_full'"
    wait_for(lambda: postgres.query(slot) == [], "the slot dropped (slot.drop.on.stop)")


def test_bad_configs_are_refused_naming_the_key(
    workers: Workers, postgres: PostgresProcess
) -> None:
    config = cdc_config(postgres, "bad", **{"plugin.name": "decoderbufs"})
    code, message = error_of(workers.current.call("POST", "/connectors",
                                                  {"name": "bad", "config": config}))  # fmt: skip
    assert code == 400 and "plugin.name" in message and "decoderbufs" in message, message
    config = cdc_config(postgres, "bad")
    del config["topic.prefix"]
    code, message = error_of(workers.current.call("POST", "/connectors",
                                                  {"name": "bad", "config": config}))  # fmt: skip
    assert code == 400 and "topic.prefix" in message, message
    config = cdc_config(postgres, "bad", **{"signal.data.collection": "signals"})
    code, message = error_of(workers.current.call("POST", "/connectors",
                                                  {"name": "bad", "config": config}))  # fmt: skip
    assert code == 400 and "signal.data.collection" in message and "schema.table" in message
    config = cdc_config(postgres, "bad", **{"signal.enabled.channels": "source,kafka"})
    code, message = error_of(workers.current.call("POST", "/connectors",
                                                  {"name": "bad", "config": config}))  # fmt: skip
    assert code == 400 and "signal.enabled.channels" in message and "kafka" in message, message
    # a database that is not there: the task fails saying so in one line
    create(workers.current, "cdc-nowhere", cdc_config(postgres, "nowhere", **{
        "database.port": "1", "database.dbname": "absent"}))  # fmt: skip
    task = workers.current.wait_task_failed("cdc-nowhere")["tasks"][0]
    assert "cannot connect to PostgreSQL 127.0.0.1:1/absent as postgres" in task["trace"]
    workers.current.call("DELETE", "/connectors/cdc-nowhere")


SIGNAL_TABLE = (
    "CREATE TABLE dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
    "data VARCHAR(2048))"
)
# The first chunk's closing watermark updates row 5 in its own transaction, after the
# chunk was read and before the window closes: the streamed update must win over the
# chunk's older copy of the row.
CHANGE_IN_WINDOW = """
CREATE FUNCTION change_in_window() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.type = 'snapshot-window-close'
     AND NOT EXISTS (SELECT 1 FROM parts WHERE name = 'changed in window') THEN
    UPDATE parts SET name = 'changed in window' WHERE id = 5;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER change_in_window BEFORE INSERT ON dbz_signal
  FOR EACH ROW EXECUTE FUNCTION change_in_window();
"""


def test_incremental_snapshot_by_signal(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    """An ``execute-snapshot`` row in the signal table makes a streaming connector read a
    table in chunks of its primary key between streamed changes: each row an ``r`` event
    (``source.snapshot`` incremental) once, except a row changed while its chunk's window
    was open, whose streamed update wins; a ``stop-snapshot`` in the same transaction as
    an ``execute-snapshot`` leaves that table unread; the watermarks and signals are not
    sent as changes; a missing signal table fails the task in one line."""
    postgres.query("CREATE TABLE parts (id INT PRIMARY KEY, name TEXT NOT NULL)")
    postgres.query("INSERT INTO parts SELECT i, 'part ' || i FROM generate_series(1, 45) i")
    postgres.query("CREATE TABLE spares (id INT PRIMARY KEY)")
    postgres.query("INSERT INTO spares SELECT generate_series(1, 5)")
    postgres.query(SIGNAL_TABLE)
    postgres.query(CHANGE_IN_WINDOW)
    create(workers.current, "cdc-inc", cdc_config(postgres, "inc", **{
        "table.include.list": "public.parts,public.spares", "snapshot.mode": "never",
        "publication.autocreate.mode": "filtered", "slot.drop.on.stop": "true",
        "signal.data.collection": "public.dbz_signal",
        "incremental.snapshot.chunk.size": "10"}))  # fmt: skip
    wait_streaming(postgres, "slot_inc")
    postgres.query(
        "INSERT INTO dbz_signal VALUES ('ad-hoc-1', 'execute-snapshot', "
        '\'{"data-collections": ["public.parts", "public.spares"], "type": "incremental"}\'), '
        "('ad-hoc-2', 'stop-snapshot', '{\"data-collections\": [\"public.spares\"]}')"
    )
    reader = TopicReader(broker, "inc.public.parts")
    try:

        def snapshotted() -> bool:
            task = (workers.current.status("cdc-inc") or {"tasks": [{}]})["tasks"][0]
            assert task.get("state") != "FAILED", task.get("trace")
            reader.read()
            ids = {v["payload"]["after"]["id"] for _, v in reader.records if v}
            return ids >= set(range(1, 46))

        wait_for(snapshotted, "every row of parts")
        postgres.query("INSERT INTO parts VALUES (46, 'after')")

        def inserted() -> bool:
            reader.read()
            return any(v and v["payload"]["op"] == "c" for _, v in reader.records)

        wait_for(inserted, "the insert after the snapshot")
        records = reader.records
    finally:
        reader.close()
    values = payloads(records)
    reads = [v for v in values if v["op"] == "r"]
    assert sorted(v["after"]["id"] for v in reads) == [i for i in range(1, 46) if i != 5]
    assert {v["source"]["snapshot"] for v in reads} == {"incremental"}
    assert reads[0]["after"] == {"id": 1, "name": "part 1"}
    updates = [v for v in values if v["op"] == "u"]
    assert [v["after"] for v in updates] == [{"id": 5, "name": "changed in window"}]
    assert values[-1]["op"] == "c" and values[-1]["after"] == {"id": 46, "name": "after"}
    assert not topic_exists(broker, "inc.public.spares")
    assert not topic_exists(broker, "inc.public.dbz_signal")
    offsets = committed_offsets(broker, "connect-cdc-offsets")
    last = offsets[json.dumps(["cdc-inc", {"server": "inc"}], separators=(",", ":"))]
    assert "incremental_snapshot_collections" not in last  # done: no progress kept
    workers.current.call("DELETE", "/connectors/cdc-inc")
    create(workers.current, "cdc-nosignal", cdc_config(postgres, "nosignal", **{
        "snapshot.mode": "never", "signal.data.collection": "public.absent"}))  # fmt: skip
    task = workers.current.wait_task_failed("cdc-nosignal")["tasks"][0]
    assert "signal.data.collection public.absent: no such table" in task["trace"]
    workers.current.call("DELETE", "/connectors/cdc-nosignal")


# The ninth chunk's closing watermark waits for an advisory lock the test holds, so the
# worker can be killed at a known point of an incremental snapshot.
HOLD_AT_NINTH_CHUNK = """
CREATE FUNCTION hold_at_ninth_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.type = 'snapshot-window-close'
     AND (SELECT count(*) FROM held_signal WHERE type = 'snapshot-window-close') = 8 THEN
    PERFORM pg_advisory_xact_lock_shared(4242);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER hold_at_ninth_chunk BEFORE INSERT ON held_signal
  FOR EACH ROW EXECUTE FUNCTION hold_at_ninth_chunk();
"""


def test_incremental_snapshot_resumes_after_a_kill(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    """The worker killed with SIGKILL in the middle of an incremental snapshot (100 rows
    in chunks of 5, held while it reads its ninth chunk), restarted: the snapshot goes on
    after the last row its stored offsets name, with a new chunk (the old chunk's
    watermarks, written after the kill, ignored); a read_committed reader sees each row's
    ``r`` once."""
    postgres.query("CREATE TABLE bolts (id INT PRIMARY KEY, size INT NOT NULL)")
    postgres.query("INSERT INTO bolts SELECT i, i % 7 FROM generate_series(1, 100) i")
    postgres.query(SIGNAL_TABLE.replace("dbz_signal", "held_signal"))
    postgres.query(HOLD_AT_NINTH_CHUNK)
    held = ("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND wait_event = 'advisory'")  # fmt: skip
    reader = TopicReader(broker, "held.public.bolts")
    try:
        with postgres.connect() as lock:
            lock.execute("SELECT pg_advisory_lock(4242)")
            create(workers.current, "cdc-held", cdc_config(postgres, "held", **{
                "table.include.list": "public.bolts", "snapshot.mode": "never",
                "signal.data.collection": "public.held_signal",
                "incremental.snapshot.chunk.size": "5"}))  # fmt: skip
            wait_streaming(postgres, "slot_held")
            postgres.query(
                "INSERT INTO held_signal VALUES ('held-1', 'execute-snapshot', "
                '\'{"data-collections": ["public.bolts"]}\')'
            )
            wait_for(lambda: postgres.query(held), "the ninth chunk held")
            before_kill = len(reader.wait(1))
            workers.restart_after_kill()
            lock.execute("SELECT pg_advisory_unlock(4242)")

        def every_row() -> bool:
            reader.read()
            return {v["payload"]["after"]["id"] for _, v in reader.records} >= set(range(1, 101))

        wait_for(every_row, "every row of bolts", timeout=90)
        reader.read()
        records = reader.records
    finally:
        reader.close()
    assert 0 < before_kill < 100  # killed mid-snapshot
    reads = [v["payload"] for _, v in records]
    assert {v["op"] for v in reads} == {"r"}
    assert sorted(v["after"]["id"] for v in reads) == list(range(1, 101))  # each once
    workers.current.call("DELETE", "/connectors/cdc-held")


SNAPSHOT_ROWS = 1000


def kill_mid_snapshot(
    workers: Workers,
    postgres: PostgresProcess,
    broker: BrokerProcess,
    prefix: str,
    **settings: str,
) -> tuple[list[tuple[str, int]], list[tuple[str, int]], Any]:
    """A connector snapshots ``<prefix>_a`` (``SNAPSHOT_ROWS`` rows) and ``<prefix>_b``
    (10); the worker is killed with SIGKILL once the snapshot has sent the first table's
    rows and waits for the second (locked); while it is down row 1 is updated, row 2
    deleted and a row inserted; restarted, one more row is inserted once its second table
    is read. The changes (op, id) a read_committed reader then finds in each topic, and
    the first table's last record of row 1."""
    rows = SNAPSHOT_ROWS
    table_a, table_b = f"{prefix}_a", f"{prefix}_b"
    postgres.query(f"CREATE TABLE {table_a} (id INT PRIMARY KEY, n INT)")
    postgres.query(f"CREATE TABLE {table_b} (id INT PRIMARY KEY, n INT)")
    postgres.query(f"INSERT INTO {table_a} SELECT i, 0 FROM generate_series(1, {rows}) i")
    postgres.query(f"INSERT INTO {table_b} SELECT i, 0 FROM generate_series(1, 10) i")
    config = cdc_config(postgres, prefix, **{
        "table.include.list": f"public.{prefix}_.*", "max.batch.size": "50",
        "snapshot.fetch.size": "50", **settings})  # fmt: skip
    topics = [f"{prefix}.public.{table_a}", f"{prefix}.public.{table_b}"]
    made = (f"SELECT 1 FROM pg_replication_slots WHERE slot_name = 'slot_{prefix}' "
            "AND confirmed_flush_lsn IS NOT NULL")  # fmt: skip
    waiting = ("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               f"AND query LIKE '%{table_b}%'")  # fmt: skip
    with postgres.connect() as lock:
        create(workers.current, f"cdc-{prefix}", config)
        # once the slot is made (its creation waits for open transactions), the second
        # table is locked: the snapshot sends the first one's rows, then waits
        wait_for(lambda: postgres.query(made), "the slot made", timeout=60)
        lock.execute("BEGIN")
        lock.execute(f"LOCK TABLE {table_b} IN ACCESS EXCLUSIVE MODE")
        wait_for(lambda: postgres.query(waiting), "the snapshot waiting", timeout=60)
        uncommitted = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "snap-peek",
                                "isolation.level": "read_uncommitted"})  # fmt: skip
        uncommitted.assign([TopicPartition(topics[0], 0, 0)])
        sent: list[Any] = []

        def peek() -> bool:
            sent.extend(uncommitted.consume(500, 0.2))
            return len(sent) >= rows - 50  # the last poll's rows wait with the snapshot

        try:
            wait_for(peek, "the first table's rows sent", timeout=60)
        finally:
            uncommitted.close()
        workers.current.proc.kill()
        workers.current.proc.wait(10)
        lock.execute("COMMIT")
    postgres.query(f"UPDATE {table_a} SET n = 1 WHERE id = 1")
    postgres.query(f"DELETE FROM {table_a} WHERE id = 2")
    postgres.query(f"INSERT INTO {table_a} VALUES ({rows + 1}, 0)")
    workers.current = Worker("distributed", workers.properties)
    readers = [TopicReader(broker, topic) for topic in topics]
    try:
        readers[1].wait(10)
        postgres.query(f"INSERT INTO {table_a} VALUES ({rows + 2}, 0)")

        def last_change_seen() -> bool:
            readers[0].read()
            seen = changes_seen(readers[0])
            return bool(seen) and seen[-1] == ("c", rows + 2)

        wait_for(last_change_seen, "the change after the snapshot", timeout=90)
        row_1 = [v for k, v in readers[0].records if k["payload"]["id"] == 1][-1]
        return changes_seen(readers[0]), changes_seen(readers[1]), row_1
    finally:
        for reader in readers:
            reader.close()
        workers.current.call("DELETE", f"/connectors/cdc-{prefix}")


def test_snapshot_killed_midway_is_taken_again_once(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    """The snapshot one transaction (``transaction.boundary=connector`` under exactly-once
    source support), the worker killed in its middle: the restarted task takes it again,
    and a read_committed reader sees each row's ``r`` once (the interrupted snapshot's
    records were aborted), the changes made while the worker was down in the new
    snapshot, then the later change streamed once."""
    seen_a, seen_b, row_1 = kill_mid_snapshot(
        workers, postgres, broker, "snap", **{"transaction.boundary": "connector"}
    )
    expected = [i for i in range(1, SNAPSHOT_ROWS + 2) if i != 2]
    assert sorted(i for op, i in seen_a if op == "r") == expected  # once each
    assert seen_a[-1] == ("c", SNAPSHOT_ROWS + 2) and len(seen_a) == len(expected) + 1
    assert sorted(seen_b) == [("r", i) for i in range(1, 11)]
    assert row_1["payload"]["after"]["n"] == 1  # as the new snapshot found it


def test_snapshot_killed_midway_repeats_and_loses_nothing(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    """Each poll its own transaction (``transaction.boundary=poll``), the worker killed in
    the middle of the snapshot: the snapshot is taken again (its ``r`` events repeat, as
    Debezium's), and streaming then starts at the LSN the first snapshot recorded, on the
    slot kept, so the changes made while the worker was down come once each after it,
    the delete of a row the first snapshot had sent among them: no gap, no change twice."""
    seen_a, seen_b, _ = kill_mid_snapshot(workers, postgres, broker, "again")
    rows = SNAPSHOT_ROWS
    first_change = next(n for n, (op, _) in enumerate(seen_a) if op != "r")
    assert all(op == "r" for op, _ in seen_a[:first_change])
    assert seen_a[first_change:] == [("u", 1), ("d", 2), ("c", rows + 1), ("c", rows + 2)]
    snapshot_ids = {i for _, i in seen_a[:first_change]}
    assert snapshot_ids == set(range(1, rows + 2))  # the first snapshot's row 2 too
    assert len(seen_a[:first_change]) > rows  # the first snapshot's records repeated
    assert sorted(seen_b) == [("r", i) for i in range(1, 11)]


class Writer(threading.Thread):
    """Commits single-row changes until told to stop: an insert of row n, then an update
    of row n - 1; ``committed`` lists each change, as (op, id), once its commit returned."""

    def __init__(self, postgres: PostgresProcess, table: str) -> None:
        super().__init__(daemon=True)
        self.postgres = postgres
        self.table = table
        self.committed: list[tuple[str, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with self.postgres.connect() as connection:
            n = 0
            while not self.halt.is_set():
                n += 1
                connection.execute(f"INSERT INTO {self.table} VALUES (%s, 0)", (n,))
                self.committed.append(("c", n))
                if n > 1:
                    connection.execute(f"UPDATE {self.table} SET n = 1 WHERE id = %s", (n - 1,))
                    self.committed.append(("u", n - 1))
                if n % 50 == 0:
                    self.halt.wait(0.02)  # paced: the worker dies while changes keep coming

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def changes_seen(reader: TopicReader) -> list[tuple[str, int]]:
    return [(value["payload"]["op"], key["payload"]["id"]) for key, value in reader.records
            if value is not None]  # fmt: skip


def run_killed_worker(
    postgres: PostgresProcess,
    broker: BrokerProcess,
    table: str,
    topic: str,
    kill_and_restart: Any,
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """A writer keeps committing while the worker streaming ``table`` into ``topic`` is
    killed and restarted; the changes committed, and those the topic holds once the last
    one has come (read_committed, by a reader of its own)."""
    reader = TopicReader(broker, topic)
    writer = Writer(postgres, table)
    try:
        writer.start()
        reader.wait(150)
        kill_and_restart()
        seen_at_restart = reader.read()
        reader.wait(seen_at_restart + 150)  # the new worker streams
        writer.stop()
        last = writer.committed[-1]

        def last_seen() -> bool:
            reader.read()
            return last in changes_seen(reader)[-3:]

        wait_for(last_seen, f"the last change {last}", timeout=90)
        return writer.committed, changes_seen(reader)
    finally:
        writer.stop()
        reader.close()


def test_killed_worker_resumes_exactly_once(
    workers: Workers, postgres: PostgresProcess, broker: BrokerProcess
) -> None:
    postgres.query("CREATE TABLE eos_rows (id INT PRIMARY KEY, n INT)")
    config = cdc_config(postgres, "eos", **{"table.include.list": "public.eos_rows",
                                            "exactly.once.support": "required"})  # fmt: skip
    create(workers.current, "cdc-eos", config)
    wait_streaming(postgres, "slot_eos")
    committed, seen = run_killed_worker(
        postgres, broker, "eos_rows", "eos.public.eos_rows", workers.restart_after_kill
    )
    assert seen == committed  # every committed change, once, in commit order


def test_killed_standalone_worker_loses_nothing(
    postgres: PostgresProcess, broker: BrokerProcess, tmp_path: Path
) -> None:
    postgres.query("CREATE TABLE alo_rows (id INT PRIMARY KEY, n INT)")
    worker_file = tmp_path / "standalone.properties"
    worker_file.write_text(
        f"bootstrap.servers={broker.bootstrap}\n"
        "key.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets'}\n"
        "offset.flush.interval.ms=300\nlisteners=http://127.0.0.1:0\n"
    )
    connector = tmp_path / "cdc.json"
    config = cdc_config(postgres, "alo", **{"table.include.list": "public.alo_rows"})
    connector.write_text(json.dumps({"name": "cdc-alo", "config": config}))
    held = {"worker": Worker("standalone", worker_file, connector)}
    wait_streaming(postgres, "slot_alo")

    def kill_and_restart() -> None:
        held["worker"].proc.kill()
        held["worker"].proc.wait(10)
        held["worker"] = Worker("standalone", worker_file, connector)

    try:
        committed, seen = run_killed_worker(
            postgres, broker, "alo_rows", "alo.public.alo_rows", kill_and_restart
        )
    finally:
        held["worker"].proc.kill()  # its offsets are not looked at again
        held["worker"].proc.wait(10)
    assert set(committed) <= set(seen)  # at least once: nothing lost
    assert len(seen) >= len(committed)
