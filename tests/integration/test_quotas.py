"""Client quotas end to end: AlterClientQuotas/DescribeClientQuotas on the wire and through
`strom configs`, kept across a restart and replicated to every node, and enforced on
producers, consumers and request time with real confluent-kafka clients.

confluent-kafka (2.x) has no client quota admin API, so quotas are set with the CLI and
with raw requests. Connections are User:ANONYMOUS (PLAINTEXT); the tests tell clients
apart by client id. Rates are compared loosely (a throttled client against its quota
and against an unthrottled one), never timed to the millisecond.
"""

from __future__ import annotations

import datetime
import importlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, tool
from cluster_process import Cluster
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_client_quotas.v0 import request as alter_v0
from kio.schema.alter_client_quotas.v1 import request as alter
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.describe_client_quotas.v1 import request as describe
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from raw_client import RawClient

from strom.broker.common import ZERO_UUID
from strom.protocol.errors import ErrorCode

MB = 1024 * 1024
EXACT, DEFAULT, ANY = 0, 1, 2


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def set_quotas(
    port: int,
    entity: dict[str, str | None],
    values: dict[str, float | None],
    validate_only: bool = False,
) -> Any:
    """AlterClientQuotas for one entity (a value None removes the key); the response."""
    entry = alter.EntryData(
        entity=tuple(alter.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()),
        ops=tuple(alter.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in values.items()),
    )
    with RawClient(port) as client:
        return client.request(
            alter.AlterClientQuotasRequest(entries=(entry,), validate_only=validate_only)
        )


def described(
    port: int, components: list[tuple[str, int, str | None]], strict: bool = False
) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    request = describe.DescribeClientQuotasRequest(
        components=tuple(
            describe.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
        ),
        strict=strict,
    )
    with RawClient(port) as client:
        response = client.request(request)
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def new_topic(bootstrap: str, partitions: int = 1, replicas: int = 1) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(15)
    return name


@pytest.fixture
def quotas_cleared(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker, with every quota a test set removed afterwards."""
    yield broker
    for entity, values in described(broker.port, []).items():
        set_quotas(broker.port, dict(entity), {key: None for key in values})


def test_alter_and_describe_on_the_wire(quotas_cleared: BrokerProcess) -> None:
    port = quotas_cleared.port
    settings = [
        ({"user": "alice"}, {"producer_byte_rate": 1024.0, "request_percentage": 50.0}),
        ({"user": "alice", "client-id": "c1"}, {"consumer_byte_rate": 2048.0}),
        ({"user": None}, {"producer_byte_rate": 4096.0}),
        ({"client-id": None}, {"controller_mutation_rate": 0.5}),
    ]
    for entity, values in settings:
        response = set_quotas(port, entity, values)
        assert [e.error_code for e in response.entries] == [ErrorCode.none]
    alice = (("user", "alice"),)
    alice_c1 = (("client-id", "c1"), ("user", "alice"))
    assert described(port, [("user", EXACT, "alice")]) == {
        alice: {"producer_byte_rate": 1024.0, "request_percentage": 50.0},
        alice_c1: {"consumer_byte_rate": 2048.0},
    }
    assert described(port, [("user", EXACT, "alice")], strict=True).keys() == {alice}
    assert described(port, [("user", DEFAULT, None)]).keys() == {(("user", None),)}
    assert described(port, [("user", ANY, None)]).keys() == {alice, alice_c1}
    assert described(port, [("client-id", ANY, None)]).keys() == {alice_c1}
    assert len(described(port, [])) == 4
    # Remove one key, then the other: the entity goes once it has no quota left.
    set_quotas(port, {"user": "alice"}, {"request_percentage": None})
    assert described(port, [("user", EXACT, "alice")], strict=True) == {
        alice: {"producer_byte_rate": 1024.0}
    }
    set_quotas(port, {"user": "alice"}, {"producer_byte_rate": None})
    assert described(port, [("user", EXACT, "alice")], strict=True) == {}
    # validate_only checks and stores nothing; v0 of the request works as v1.
    response = set_quotas(port, {"client-id": "v"}, {"producer_byte_rate": 10.0}, True)
    assert response.entries[0].error_code == ErrorCode.none
    assert described(port, [("client-id", EXACT, "v")]) == {}
    with RawClient(port) as client:
        response = client.request(
            alter_v0.AlterClientQuotasRequest(
                entries=(
                    alter_v0.EntryData(
                        entity=(alter_v0.EntityData(entity_type="client-id", entity_name="v0"),),
                        ops=(alter_v0.OpData(key="producer_byte_rate", value=5.0, remove=False),),
                    ),
                ),
                validate_only=False,
            )
        )
    assert response.entries[0].error_code == ErrorCode.none
    assert described(port, [("client-id", EXACT, "v0")]) == {
        (("client-id", "v0"),): {"producer_byte_rate": 5.0}
    }


@pytest.mark.parametrize(
    ("entity", "values", "message"),
    [
        ({"user": "a"}, {"producer_bytes_rate": 10.0}, "Invalid configuration key"),
        ({"user": "a"}, {"producer_byte_rate": 10.5}, "must be a Long value"),
        ({"client-id": "a"}, {"consumer_byte_rate": -1.0}, "must be a positive number"),
        ({"group": "a"}, {"producer_byte_rate": 10.0}, "Unhandled client quota entity type"),
        ({"user": ""}, {"producer_byte_rate": 10.0}, "Empty user not supported"),
        ({}, {"producer_byte_rate": 10.0}, "Invalid empty client quota entity"),
    ],
)
def test_invalid_alterations_are_invalid_request(
    quotas_cleared: BrokerProcess, entity: dict, values: dict, message: str
) -> None:
    response = set_quotas(quotas_cleared.port, entity, values)
    (entry,) = response.entries
    assert entry.error_code == ErrorCode.invalid_request
    assert message in entry.error_message
    assert described(quotas_cleared.port, []) == {}


def test_describe_with_a_bad_filter_is_invalid_request(broker: BrokerProcess) -> None:
    request = describe.DescribeClientQuotasRequest(
        components=(describe.ComponentData(entity_type="user", match_type=EXACT, match=None),),
        strict=False,
    )
    with RawClient(broker.port) as client:
        response = client.request(request)
    assert response.error_code == ErrorCode.invalid_request
    assert response.error_message


def test_cli_alter_and_describe(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    result = ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "producer_byte_rate=1048576,consumer_byte_rate=2097152",
        )
    )
    assert "Completed updating config for user-principal 'bob'." in result.stdout
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "clients",
            "--entity-default",
            "--add-config",
            "request_percentage=200",
        )
    )
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--user",
            "bob",
            "--client",
            "app",
            "--add-config",
            "consumer_byte_rate=1000",
        )
    )
    shown = ok(
        tool(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "bob")
    ).stdout
    assert (
        "Quota configs for user-principal 'bob' are "
        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0" in shown
    )
    assert described(broker.port, [("client-id", DEFAULT, None)], strict=True) == {
        (("client-id", None),): {"request_percentage": 200.0}
    }
    shown = ok(tool(broker, "configs", "--describe", "--user", "bob", "--client", "app")).stdout
    assert (
        "Quota configs for user-principal 'bob', client-id 'app' are consumer_byte_rate=1000.0"
        in shown
    )
    ok(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--delete-config",
            "producer_byte_rate",
        )
    )
    assert described(broker.port, [("user", EXACT, "bob")], strict=True) == {
        (("user", "bob"),): {"consumer_byte_rate": 2097152.0}
    }
    error = one_line_error(
        tool(
            broker,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "producer_byte_rate=1.5",
        )
    )
    assert "Configuration producer_byte_rate must be a Long value" in error


class FlatOutProducer:
    """A producer sending 10 KB records as fast as the broker takes them, counting the
    bytes acknowledged and the throttle times it is told."""

    def __init__(self, bootstrap: str, topic: str, client_id: str) -> None:
        self.topic = topic
        self.closing = False
        self.acked = 0
        self.errors: list[KafkaError] = []
        self.throttles: list[float] = []
        self.stats_throttle_ms = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "batch.size": 100_000,
                "queue.buffering.max.kbytes": 2048,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
                "statistics.interval.ms": 500,
                "stats_cb": self._stats,
            }
        )
        self.payload = b"x" * 10_000

    def _stats(self, text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            self.stats_throttle_ms = max(self.stats_throttle_ms, broker["throttle"]["max"])

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked += len(msg.value())
        elif not self.closing:  # purged records are not errors
            self.errors.append(err)

    def pump(self, until: Callable[[], bool]) -> None:
        while not until():
            try:
                self.producer.produce(self.topic, self.payload, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.005)
            self.producer.poll(0)

    def rate_over(self, seconds: float) -> float:
        """Bytes acknowledged per second over the next ``seconds``."""
        before, started = self.acked, time.monotonic()
        self.pump(lambda: time.monotonic() - started >= seconds)
        return (self.acked - before) / (time.monotonic() - started)

    def close(self) -> None:
        self.closing = True
        self.producer.purge()
        self.producer.flush(10)


def test_producer_is_held_near_its_quota(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    topic = new_topic(broker.bootstrap)
    set_quotas(broker.port, {"client-id": "slow-producer"}, {"producer_byte_rate": float(MB)})
    fast = FlatOutProducer(broker.bootstrap, topic, "fast-producer")
    try:
        fast_rate = fast.rate_over(1.5)
    finally:
        fast.close()
    slow = FlatOutProducer(broker.bootstrap, topic, "slow-producer")
    try:
        # A quota allows a burst of ten windows' worth before it throttles; past it the
        # rate is held at the quota.
        deadline = time.monotonic() + 30
        slow.pump(lambda: bool(slow.throttles) or time.monotonic() > deadline)
        assert slow.throttles, "the quota never throttled the producer"
        slow_rate = slow.rate_over(3.0)
    finally:
        slow.close()
    assert slow.errors == [] and fast.errors == []
    # Right after the burst the producer pays it back (the rate spans 10 windows), so it
    # goes on below its quota, never stalled and never failing.
    assert slow_rate < 2 * MB, f"{slow_rate / MB:.2f} MB/s against a 1 MB/s quota"
    assert slow_rate > 0, "the throttled producer stalled"
    assert fast_rate > 4 * MB, f"the unthrottled producer managed {fast_rate / MB:.2f} MB/s"
    assert fast.throttles == [] and fast.stats_throttle_ms == 0
    assert max(slow.throttles) > 0
    assert slow.stats_throttle_ms > 0


def consumed_bytes(
    bootstrap: str, topic: str, client_id: str, seconds: float, enough: int
) -> tuple[int, int]:
    """Record bytes a consumer reads from the start of ``topic`` in ``seconds`` from its
    first record (or until it has ``enough``), and how many throttle times it was told."""
    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "client.id": client_id,
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 256 * 1024,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    deadline = time.monotonic() + 30  # for the first record
    try:
        while time.monotonic() < deadline and got < enough:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                if got == 0:
                    deadline = time.monotonic() + seconds
                got += len(message.value())
    finally:
        consumer.close()
    return got, len([t for t in throttles if t > 0])


def test_consumer_is_held_near_its_quota(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    topic = new_topic(broker.bootstrap)
    # Batches of at most 100 KB: a fetch is answered whole or throttled and answered
    # empty, so one batch over what the quota allows in ten windows is never delivered.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 100_000}
    )
    total = 4 * MB
    for _ in range(total // 10_000):
        producer.produce(topic, b"y" * 10_000)
        producer.poll(0)
    producer.flush(30)
    total = (total // 10_000) * 10_000
    # 50 KB/s: a burst of about 500 KB, then 50 KB a second.
    set_quotas(broker.port, {"client-id": "slow-reader"}, {"consumer_byte_rate": 50_000.0})
    fast, fast_throttled = consumed_bytes(broker.bootstrap, topic, "fast-reader", 30.0, total)
    slow, slow_throttled = consumed_bytes(broker.bootstrap, topic, "slow-reader", 3.0, total)
    assert fast == total and fast_throttled == 0
    assert slow < total / 2, f"the throttled consumer read {slow} of {total} bytes"
    assert slow > 0 and slow_throttled > 0


def test_a_consumer_fetch_is_cut_to_its_quota(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    topic = new_topic(broker.bootstrap)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 12_000}
    )
    for _ in range(100):  # 1 MB in batches of about 10 KB
        producer.produce(topic, b"v" * 10_000)
    producer.flush(30)
    # 20 KB/s allows 200 KB in ten windows: a fetch asking for 10 MB gets about that much
    # (whole batches), unthrottled; uncut, its 1 MB would be over the quota and empty.
    set_quotas(broker.port, {"client-id": "raw-test"}, {"consumer_byte_rate": 20_000.0})
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=10 * MB,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10 * MB),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with RawClient(broker.port) as client:
        response = client.request(request)
    assert response.responses, "the fetch was over the quota: answered empty"
    assert response.throttle_time.total_seconds() == 0
    (partition,) = response.responses[0].partitions
    assert 100_000 < len(partition.records) <= 200_000


def test_request_percentage_throttles_and_mutes(quotas_cleared: BrokerProcess) -> None:
    broker = quotas_cleared
    # RawClient's client id is raw-test: 1% of a thread is 10 ms of handler time a second.
    set_quotas(broker.port, {"client-id": "raw-test"}, {"request_percentage": 1.0})
    request = MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with RawClient(broker.port, timeout=30) as client:
        deadline = time.monotonic() + 30
        throttle_ms = 0.0
        # Past the first few ms of throttle: the mute is timed from the server's answer, this
        # clock from after the answer arrived, so a throttle of 3 ms is within that gap.
        while throttle_ms < 50 and time.monotonic() < deadline:
            sent = time.monotonic()
            throttle_ms = client.request(request).throttle_time.total_seconds() * 1000
        assert throttle_ms >= 50, "Metadata requests were never throttled for 50 ms"
        # Muted: the next request is read only once the throttle time is up. The mute
        # starts when the server answers, after ``sent``, so the next answer comes at
        # least the throttle time after ``sent``, however late this process saw the first
        # answer (on a loaded machine it may see it most of the throttle time late).
        client.request(request)
        assert time.monotonic() - sent >= throttle_ms / 1000
    set_quotas(broker.port, {"client-id": "raw-test"}, {"request_percentage": None})


def test_quotas_survive_a_restart(broker: BrokerProcess) -> None:
    set_quotas(broker.port, {"user": "kept", "client-id": None}, {"producer_byte_rate": 77.0})
    broker.restart()
    assert described(broker.port, [("user", EXACT, "kept")]) == {
        (("client-id", None), ("user", "kept")): {"producer_byte_rate": 77.0}
    }
    set_quotas(broker.port, {"user": "kept", "client-id": None}, {"producer_byte_rate": None})


def test_quotas_reach_every_node_and_spare_followers(tmp_path: Path) -> None:
    cluster = Cluster.combined(tmp_path / "cluster")
    try:
        cluster.start_all()
        nodes = cluster.brokers
        # Every connection of every client is held to 20 KB/s of fetches: followers'
        # fetches are not, so replication (and acks=all) goes on at full speed.
        response = set_quotas(nodes[-1].port, {"user": None}, {"consumer_byte_rate": 20_000.0})
        assert response.entries[0].error_code == ErrorCode.none
        for node in nodes:
            wait_until(
                lambda n=node: (
                    described(n.port, [("user", DEFAULT, None)])
                    == {(("user", None),): {"consumer_byte_rate": 20_000.0}}
                ),
                15,
                f"the quota on node {node.bootstrap}",
            )
        topic = new_topic(cluster.bootstrap(), replicas=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        failed: list[KafkaError] = []
        for _ in range(200):  # 2 MB: 100 s of fetching at the quota
            producer.produce(topic, b"z" * 10_000, on_delivery=lambda e, m: e and failed.append(e))
            producer.poll(0)
        assert producer.flush(20) == 0, "acks=all stalled: followers were throttled"
        assert failed == []
    finally:
        cluster.kill_all()


PLAIN_USERS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


def test_user_quotas_follow_the_sasl_principal(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{fresh_broker.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{fresh_broker.extra_port('SASL_PLAINTEXT')}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
        }
    )
    fresh_broker.start()
    sasl_port = fresh_broker.ports["SASL_PLAINTEXT"]
    topic = new_topic(fresh_broker.bootstrap)
    # 10 KB/s for User:alice, whatever her client id: a burst of about 100 KB, then held.
    set_quotas(fresh_broker.port, {"user": "alice"}, {"producer_byte_rate": 10_000.0})

    def throttles_of(user: str) -> list[float]:
        throttles: list[float] = []
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{sasl_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": f"{user}-secret",
                "linger.ms": 5,
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )
        for _ in range(40):  # 400 KB
            producer.produce(topic, b"w" * 10_000)
            producer.poll(0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(t > 0 for t in throttles):
            if producer.flush(0.1) == 0:
                break  # all acknowledged
        producer.purge()
        producer.flush(10)
        return [t for t in throttles if t > 0]

    assert throttles_of("alice"), "User:alice was not held to her quota"
    assert throttles_of("bob") == []


def create_topics_request(version: int, partitions: dict[str, int]) -> Any:
    module = importlib.import_module(f"kio.schema.create_topics.v{version}.request")
    return module.CreateTopicsRequest(
        topics=tuple(
            module.CreatableTopic(
                name=name, num_partitions=count, replication_factor=1, assignments=(), configs=()
            )
            for name, count in partitions.items()
        ),
        timeout=datetime.timedelta(seconds=15),
        validate_only=False,
    )


def test_controller_mutation_rate_strict_and_permissive(quotas_cleared: BrokerProcess) -> None:
    """1 partition a second gives a burst of 11 (Kafka's 11 one-second windows). With
    CreateTopics v7 (strict) the topic that finds the bucket empty is refused with
    THROTTLING_QUOTA_EXCEEDED and the throttle time, the ones before it are created;
    DeleteTopics v6 is refused the same way. CreateTopics v5 (permissive) always creates,
    and the response is throttled."""
    broker = quotas_cleared
    set_quotas(broker.port, {"client-id": "raw-test"}, {"controller_mutation_rate": 1.0})
    prefix = f"m-{uuid.uuid4().hex[:6]}"
    first, second, third = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    with RawClient(broker.port, timeout=30) as client:
        created = client.request(create_topics_request(7, {first: 10, second: 5, third: 1}))
        codes = {t.name: t.error_code for t in created.topics}
        assert codes == {
            first: ErrorCode.none,
            second: ErrorCode.none,  # taken: the bucket still had tokens (1 left)
            third: ErrorCode.throttling_quota_exceeded,  # the bucket is at -4
        }
        assert created.throttle_time.total_seconds() > 3
    with RawClient(broker.port, timeout=30) as client:
        deleted = client.request(
            delete_v6.DeleteTopicsRequest(
                topics=(delete_v6.DeleteTopicState(name=first, topic_id=ZERO_UUID),),
                timeout=datetime.timedelta(seconds=15),
            )
        )
        assert [r.error_code for r in deleted.responses] == [ErrorCode.throttling_quota_exceeded]
    set_quotas(broker.port, {"client-id": "raw-test"}, {"controller_mutation_rate": None})
    set_quotas(broker.port, {"client-id": "old-admin"}, {"controller_mutation_rate": 1.0})
    with RawClient(broker.port, timeout=30) as client:
        client.client_id = "old-admin"
        names = {f"{prefix}-old-{i}": 6 for i in range(3)}
        created = client.request(create_topics_request(5, names))
        assert {t.name: t.error_code for t in created.topics} == dict.fromkeys(
            names, ErrorCode.none
        )
        assert created.throttle_time.total_seconds() > 5  # 18 taken from a burst of 11
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert {first, second, *names} <= set(metadata.topics) and third not in metadata.topics
