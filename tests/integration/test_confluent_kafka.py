"""confluent-kafka (librdkafka) against a real broker: produce, consume, admin."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka_helpers import consume_all, create_topic


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_records_round_trip_per_codec(broker, codec: str) -> None:
    topic = f"keyed-{codec}"
    create_topic(broker.bootstrap, topic, 6)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    sent: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    errors = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            sent[msg.partition()].append((msg.key(), msg.value(), msg.offset()))

    for i in range(3000):
        key = f"key-{i % 50}".encode()
        producer.produce(topic, key=key, value=f"value-{i}".encode() * 3, on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    assert sum(len(v) for v in sent.values()) == 3000
    assert len(sent) > 1, "keys must spread over partitions"

    received = consume_all(broker.bootstrap, topic, 3000)
    assert len(received) == 3000
    by_partition: dict[int, list] = defaultdict(list)
    for msg in received:
        by_partition[msg.partition()].append((msg.key(), msg.value(), msg.offset()))
    for partition, records in sent.items():
        assert by_partition[partition] == records  # same records, same order, same offsets
        offsets = [r[2] for r in records]
        assert offsets == list(range(len(records)))
    # the same key always lands on the same partition
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for msg in received:
        partitions_of_key[msg.key()].add(msg.partition())
    assert all(len(p) == 1 for p in partitions_of_key.values())


def test_headers_and_timestamps_survive(broker) -> None:
    topic = "headers"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(
        topic,
        value=b"v",
        key=b"k",
        headers=[("h1", b"a"), ("h2", None)],
        timestamp=1_700_000_000_123,
    )
    producer.flush(10)
    [msg] = consume_all(broker.bootstrap, topic, 1)
    assert msg.headers() == [("h1", b"a"), ("h2", None)]
    assert msg.timestamp() == (1, 1_700_000_000_123)  # CreateTime


def test_admin_topics_and_configs(broker) -> None:
    admin = _admin(broker)
    name = "admin-topic"
    admin.create_topics([NewTopic(name, 3, 1, config={"retention.ms": "3600000"})])[name].result(10)

    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic(name, 3, 1)])[name].result(10)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    with pytest.raises(KafkaException) as bad_name:
        admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(10)
    assert bad_name.value.args[0].code() == KafkaError.TOPIC_EXCEPTION

    with pytest.raises(KafkaException) as bad_config:
        admin.create_topics([NewTopic("bad-config", 1, 1, config={"retention.ms": "x"})])[
            "bad-config"
        ].result(10)
    assert bad_config.value.args[0].code() == KafkaError.INVALID_CONFIG

    # validate_only creates nothing
    admin.create_topics([NewTopic("only-validated", 2, 1)], validate_only=True)[
        "only-validated"
    ].result(10)
    assert "only-validated" not in admin.list_topics(timeout=10).topics

    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[name].partitions) == 3
    assert metadata.topics[name].partitions[0].leader == 1

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].is_default and not configs["retention.ms"].is_default

    # incremental alter: set one, delete another
    incremental = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([incremental])[incremental].result(10)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["segment.bytes"].value == "1048576"
    assert configs["retention.ms"].value == "604800000"

    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = admin.describe_configs([broker_resource])[broker_resource].result(10)
    assert broker_configs["num.partitions"].value == "1"
    assert broker_configs["log.dirs"].value.endswith("data")

    admin.create_partitions([NewPartitions(name, 5)])[name].result(10)
    assert len(admin.list_topics(timeout=10).topics[name].partitions) == 5

    admin.delete_topics([name])[name].result(10)
    deadline = time.monotonic() + 30
    while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in admin.list_topics(timeout=10).topics


def _raw_broker_config(broker, key: str, value: str | None, *, incremental: bool) -> None:
    """Set one config on the cluster-wide default (broker resource ""; a None value
    deletes it), raising KafkaException with the error code the broker answers."""
    from kio.schema.alter_configs.v2 import request as whole
    from kio.schema.incremental_alter_configs.v1 import request as inc
    from raw_client import RawClient

    if incremental:
        body = inc.IncrementalAlterConfigsRequest(
            resources=(
                inc.AlterConfigsResource(
                    resource_type=4,
                    resource_name="",
                    configs=(
                        inc.AlterableConfig(
                            name=key, config_operation=0 if value else 1, value=value
                        ),
                    ),
                ),
            ),
            validate_only=False,
        )
    else:
        body = whole.AlterConfigsRequest(
            resources=(
                whole.AlterConfigsResource(
                    resource_type=4,
                    resource_name="",
                    configs=(whole.AlterableConfig(name=key, value=value),),
                ),
            ),
            validate_only=False,
        )
    with RawClient(broker.port) as client:
        [answer] = client.request(body).responses
    if answer.error_code != 0:
        raise KafkaException(KafkaError(int(answer.error_code), answer.error_message))


def test_dynamic_broker_configs_follow_kafkas_table(broker) -> None:
    """AlterConfigs and IncrementalAlterConfigs agree on which broker configs change at
    run time (Kafka's table): a dynamic one is accepted on a broker and described as
    DYNAMIC_BROKER_CONFIG; a per-broker one is refused at the cluster-wide default, a
    static one and an unknown name everywhere, and a Kafka-only one at a value Strom
    would not act on (a Kerberos setting), all with INVALID_CONFIG."""
    admin = _admin(broker)
    node = "1"
    protocol = "ssl.protocol"  # per broker; any value changes nothing, as in Kafka

    def incremental(name: str, key: str, value: str) -> None:
        if not name:  # librdkafka names no cluster-wide default: a raw request does
            _raw_broker_config(broker, key, value, incremental=True)
            return
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(10)

    def whole(name: str, key: str, value: str) -> None:
        if not name:
            _raw_broker_config(broker, key, value, incremental=False)
            return
        resource = ConfigResource(ConfigResource.Type.BROKER, name, set_config={key: value})
        admin.alter_configs([resource])[resource].result(10)

    def described(name: str) -> dict:
        resource = ConfigResource(ConfigResource.Type.BROKER, name)
        return admin.describe_configs([resource])[resource].result(10)

    for alter in (incremental, whole):
        alter(node, protocol, "TLSv1.2")
        entry = described(node)[protocol]
        assert (entry.value, entry.source) == ("TLSv1.2", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert not entry.is_read_only
        for name, key, value in [
            ("", protocol, "TLSv1.2"),  # per broker: not at the cluster level
            (node, "num.partitions", "3"),  # static
            (node, "log.retention.hours", "1"),  # static: log.retention.ms is the dynamic one
            (node, "no.such.broker.config", "1"),  # unknown
            (node, "sasl.kerberos.min.time.before.relogin", "120000"),  # not served
        ]:
            with pytest.raises(KafkaException) as refused:
                alter(name, key, value)
            assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, (alter, key)
            assert key in refused.value.args[0].str(), (alter, key)
    assert described(node)["num.partitions"].is_read_only
    incremental("", "log.retention.ms", "86400000")  # a cluster-wide default
    assert described(node)["log.retention.ms"].value == "86400000"
    _raw_broker_config(broker, "log.retention.ms", None, incremental=True)
    assert described(node)["log.retention.ms"].value is None  # log.retention.hours rules


def test_describe_cluster(broker) -> None:
    admin = _admin(broker)
    cluster = admin.describe_cluster().result(10)
    assert cluster.controller.id == 1
    assert [node.port for node in cluster.nodes] == [broker.port]
    assert cluster.cluster_id


def test_authorized_operations_are_reported_when_asked(broker) -> None:
    admin = _admin(broker)
    topic = "ops-topic"
    create_topic(broker.bootstrap, topic, 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ops-group"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()

    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    }
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[
        topic
    ].result(10)
    assert set(described.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)[
        "ops-group"
    ].result(10)
    assert {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE} <= set(
        group.authorized_operations
    )
    # Not asked for: no operations at all.
    assert admin.describe_cluster().result(10).authorized_operations is None
    unasked = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    assert unasked.authorized_operations is None


def test_message_too_large_is_refused(broker) -> None:
    topic = "small-max"
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": "2000"})
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "message.max.bytes": 100000,
            "compression.type": "none",
        }
    )
    results = []
    producer.produce(topic, value=b"x" * 5000, on_delivery=lambda err, msg: results.append(err))
    producer.flush(10)
    assert results and results[0] is not None
    assert results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    producer.produce(topic, value=b"ok", on_delivery=lambda err, msg: results.append(err))
    producer.flush(10)
    assert results[1] is None
    [msg] = consume_all(broker.bootstrap, topic, 1)
    assert msg.value() == b"ok" and msg.offset() == 0


def test_long_poll_returns_when_data_arrives(broker) -> None:
    topic = "long-poll"
    create_topic(broker.bootstrap, topic, 1)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "lp", "fetch.wait.max.ms": 30000}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.poll(0.5)  # let the first (empty) fetch go out and wait
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    started = time.monotonic()
    producer.produce(topic, value=b"wake")
    producer.flush(10)
    msg = None
    while msg is None and time.monotonic() - started < 40:
        msg = consumer.poll(0.2)
    waited = time.monotonic() - started
    consumer.close()
    assert msg is not None and msg.value() == b"wake"
    assert waited < 15.0  # woken by the produce, long before fetch.wait.max.ms
