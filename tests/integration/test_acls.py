"""ACLs end to end: CreateAcls/DescribeAcls/DeleteAcls with confluent-kafka's AdminClient,
and their enforcement on produce, fetch, groups and metadata, on real broker processes.

Connections are User:ANONYMOUS (PLAINTEXT), so the ACLs here name User:ANONYMOUS; the
cluster resource has no ACLs and allow.everyone.if.no.acl.found is on, so the tests may
administer ACLs while topics and groups with ACLs are enforced.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, strom, tool
from cluster_process import Cluster
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka_helpers import delete_acls

ME = "User:ANONYMOUS"
SECURED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
EVERYTHING = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def topic_acl(
    name: str,
    op: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    principal: str = ME,
) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal, "*", op, permission
    )


def create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(10)


def deny_group_read(admin: AdminClient, group: str) -> None:
    """READ on ``group`` denied to every principal."""
    create(
        admin,
        AclBinding(
            ResourceType.GROUP,
            group,
            ResourcePatternType.LITERAL,
            "User:*",
            "*",
            AclOperation.READ,
            AclPermissionType.DENY,
        ),
    )


def new_topic(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)


def produce_error(producer: Producer, topic: str) -> KafkaError | None:
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", SECURED)
    process.start()
    yield process
    if process.alive():
        process.stop()


@pytest.fixture
def admin(secured: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": secured.bootstrap})


def test_without_an_authorizer_acl_apis_answer_security_disabled(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as info:
        create(admin, topic_acl("t", AclOperation.READ))
    assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_create_describe_delete(admin: AdminClient) -> None:
    bindings = [
        topic_acl("orders", AclOperation.READ, principal="User:alice"),
        AclBinding(
            ResourceType.GROUP,
            "team-",
            ResourcePatternType.PREFIXED,
            "User:bob",
            "10.0.0.1",
            AclOperation.ALL,
            AclPermissionType.DENY,
        ),
    ]
    create(admin, *bindings)
    create(admin, bindings[0])  # again: a success that stores nothing new
    found = admin.describe_acls(EVERYTHING).result(10)
    assert set(found) >= set(bindings)
    assert sum(1 for b in found if b == bindings[0]) == 1
    match = AclBindingFilter(
        ResourceType.GROUP,
        "team-blue",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(match).result(10) == [bindings[1]]
    delete_acls(admin, *bindings)
    assert not set(admin.describe_acls(EVERYTHING).result(10)) & set(bindings)
    with pytest.raises(KafkaException):
        bad = AclBinding(
            ResourceType.BROKER,
            "not-kafka-cluster",
            ResourcePatternType.LITERAL,
            ME,
            "*",
            AclOperation.ALTER,
            AclPermissionType.ALLOW,
        )
        create(admin, bad)


def test_write_only_principal_produces_and_cannot_read(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    topic = f"wo-{uuid.uuid4().hex[:8]}"
    new_topic(admin, topic)
    create(admin, topic_acl(topic, AclOperation.WRITE))
    producer = Producer({"bootstrap.servers": secured.bootstrap})
    assert produce_error(producer, topic) is None
    consumer = Consumer(
        {
            "bootstrap.servers": secured.bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        error = None
        deadline = time.monotonic() + 15
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, "a write-only principal read a record"
                error = msg.error()
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_acl_changes_take_effect_on_open_connections_and_deny_wins(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    topic = f"live-{uuid.uuid4().hex[:8]}"
    new_topic(admin, topic)
    producer = Producer({"bootstrap.servers": secured.bootstrap, "retries": 0})
    assert produce_error(producer, topic) is None  # no ACL on the topic: allowed
    allow_all = topic_acl(topic, AclOperation.ALL)
    deny_write = topic_acl(topic, AclOperation.WRITE, AclPermissionType.DENY, "User:*")
    create(admin, allow_all, deny_write)
    error = produce_error(producer, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    delete_acls(admin, deny_write)
    # librdkafka remembers a topic it was refused until its next metadata refresh: a new
    # producer shows the ACL gone.
    assert produce_error(Producer({"bootstrap.servers": secured.bootstrap}), topic) is None


def test_consumer_without_group_read_cannot_join(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    topic = f"grp-{uuid.uuid4().hex[:8]}"
    group = f"denied-{topic}"
    new_topic(admin, topic)
    deny_group_read(admin, group)
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        error = None
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_metadata_hides_topics_the_principal_may_not_describe(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    shown, hidden = f"shown-{uuid.uuid4().hex[:8]}", f"hidden-{uuid.uuid4().hex[:8]}"
    new_topic(admin, shown)
    new_topic(admin, hidden)
    create(admin, topic_acl(hidden, AclOperation.READ, principal="User:bob"))
    topics = admin.list_topics(timeout=10).topics
    assert shown in topics and hidden not in topics
    one = admin.list_topics(hidden, timeout=10).topics[hidden]
    assert one.error is not None and one.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acls_survive_a_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.overrides.update(SECURED)
    fresh_broker.start()
    binding = topic_acl("kept", AclOperation.DESCRIBE, principal="User:carol")
    create(AdminClient({"bootstrap.servers": fresh_broker.bootstrap}), binding)
    fresh_broker.restart()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert admin.describe_acls(EVERYTHING).result(10) == [binding]


def test_acls_replicate_to_every_node(tmp_path: Path) -> None:
    cluster = Cluster.combined(tmp_path / "cluster", overrides=SECURED)
    try:
        cluster.start_all()
        nodes = cluster.brokers
        binding = topic_acl("everywhere", AclOperation.READ, principal="User:dave")
        create(AdminClient({"bootstrap.servers": nodes[-1].bootstrap}), binding)
        for node in nodes:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            wait_until(
                lambda a=admin: a.describe_acls(EVERYTHING).result(10) == [binding],
                15,
                f"the ACL on node {node.bootstrap}",
            )
    finally:
        cluster.kill_all()


def test_cli_round_trip(secured: BrokerProcess) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    # Once the cluster has an ACL, administering ACLs needs ALTER and DESCRIBE on it.
    admin_acl = ("--allow-principal", ME, "--cluster", "--operation", "All")
    ok(tool(secured, "acls", "--add", *admin_acl))
    added = ok(
        tool(
            secured,
            "acls",
            "--add",
            "--allow-principal",
            "User:erin",
            "--producer",
            "--topic",
            topic,
            "--transactional-id",
            "tx-",
            "--resource-pattern-type",
            "prefixed",
        )
    )
    assert "operation=WRITE" in added.stdout
    listed = ok(tool(secured, "acls", "--list", "--topic", topic))
    assert f"name={topic}, patternType=PREFIXED" in listed.stdout
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"principal=User:erin, host=*, operation={op}, permissionType=ALLOW" in listed.stdout
    ok(
        tool(
            secured,
            "acls",
            "--add",
            "--deny-principal",
            "User:erin",
            "--cluster",
            "--operation",
            "Alter",
        )
    )
    listed = ok(tool(secured, "acls", "--list", "--principal", "User:erin"))
    assert "resourceType=CLUSTER, name=kafka-cluster" in listed.stdout
    assert "resourceType=TRANSACTIONAL_ID, name=tx-, patternType=PREFIXED" in listed.stdout
    ok(
        tool(
            secured,
            "acls",
            "--remove",
            "--force",
            "--topic",
            topic,
            "--resource-pattern-type",
            "prefixed",
        )
    )
    ok(
        tool(
            secured,
            "acls",
            "--remove",
            "--force",
            "--deny-principal",
            "User:erin",
            "--cluster",
            "--operation",
            "Alter",
        )
    )
    ok(
        tool(
            secured,
            "acls",
            "--remove",
            "--force",
            "--transactional-id",
            "tx-",
            "--resource-pattern-type",
            "prefixed",
        )
    )
    listed = ok(tool(secured, "acls", "--list", "--principal", "User:erin"))
    assert listed.stdout.strip() == ""
    ok(tool(secured, "acls", "--remove", "--force", *admin_acl))
    assert "kafka-cluster" not in ok(tool(secured, "acls", "--list", "--cluster")).stdout
    # Mistakes are one line with exit code 2; an unreachable broker exit code 1.
    one_line_error(tool(secured, "acls", "--add", "--topic", topic), 2)
    one_line_error(tool(secured, "acls", "--add", "--allow-principal", "erin", "--topic", "t"), 2)
    one_line_error(strom("acls", "--list", "--bootstrap-server", "127.0.0.1:1"), 1)


def test_authorized_operations_come_from_the_acls(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    from confluent_kafka import TopicCollection

    topic = f"ops-{uuid.uuid4().hex[:8]}"
    new_topic(admin, topic)
    create(admin, topic_acl(topic, AclOperation.WRITE))
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[
        topic
    ].result(10)
    assert set(described.authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    # No ACL on the cluster and allow.everyone.if.no.acl.found: every cluster operation.
    assert AclOperation.ALTER in cluster.authorized_operations


def test_denied_admin_requests(secured: BrokerProcess, admin: AdminClient) -> None:
    from confluent_kafka.admin import ConfigResource

    topic = f"adm-{uuid.uuid4().hex[:8]}"
    new_topic(admin, topic)
    create(
        admin,
        topic_acl(topic, AclOperation.DESCRIBE),
        topic_acl(f"{topic}-new", AclOperation.CREATE, AclPermissionType.DENY),
        topic_acl(f"{topic}-new2", AclOperation.CREATE, AclPermissionType.DENY),
    )
    with pytest.raises(KafkaException) as info:
        admin.describe_configs([ConfigResource("topic", topic)])[
            ConfigResource("topic", topic)
        ].result(10)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic])[topic].result(10)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # CREATE on the cluster (open: it has no ACL) is enough, whatever the topic's ACLs.
    new_topic(admin, f"{topic}-new")
    cluster_acls = [
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            ME,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.ALTER, AclOperation.DESCRIBE)
    ]
    create(admin, *cluster_acls)
    try:
        # Now the cluster has ACLs and none grants CREATE: the topic's own ACLs decide.
        with pytest.raises(KafkaException) as info:
            new_topic(admin, f"{topic}-new2")
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        create(admin, topic_acl(f"{topic}-new3", AclOperation.CREATE))
        new_topic(admin, f"{topic}-new3")
    finally:
        delete_acls(admin, *cluster_acls)


def test_transactional_producer_without_write_on_its_id_is_refused(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    create(
        admin,
        AclBinding(
            ResourceType.TRANSACTIONAL_ID,
            txn_id,
            ResourcePatternType.LITERAL,
            ME,
            "*",
            AclOperation.WRITE,
            AclPermissionType.DENY,
        ),
    )
    producer = Producer({"bootstrap.servers": secured.bootstrap, "transactional.id": txn_id})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(15)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_cli_list_reports_the_brokers_error(broker: BrokerProcess) -> None:
    line = one_line_error(tool(broker, "acls", "--list"), 1)
    assert "SECURITY_DISABLED" in line


def test_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(
    fresh_broker: BrokerProcess,
) -> None:
    fresh_broker.overrides.update(SECURED)
    fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    new_topic(admin, "idem")
    # The cluster gets ACLs (so ACL administration stays possible) without
    # IDEMPOTENT_WRITE, and every topic a DENY WRITE.
    cluster_acls = [
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            ME,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CREATE)
    ]
    create(
        admin,
        *cluster_acls,
        topic_acl("idem", AclOperation.DESCRIBE),
        topic_acl("*", AclOperation.WRITE, AclPermissionType.DENY),
    )
    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": fresh_broker.bootstrap,
            "enable.idempotence": True,
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
        }
    )
    reports: list[KafkaError | None] = []
    producer.produce("idem", b"v", on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + 15
    while not errors and not reports and time.monotonic() < deadline:
        try:
            producer.poll(0.2)
        except (KafkaException, SystemError) as exc:  # the fatal error surfaces here
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            if isinstance(cause, KafkaException):
                errors.append(cause.args[0])
            break
    codes = {e.code() for e in errors} | {e.code() for e in reports if e is not None}
    assert KafkaError.CLUSTER_AUTHORIZATION_FAILED in codes, codes
    create(
        admin,
        AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            ME,
            "*",
            AclOperation.IDEMPOTENT_WRITE,
            AclPermissionType.ALLOW,
        ),
    )
    delete_acls(admin, topic_acl("*", AclOperation.WRITE, AclPermissionType.DENY))
    create(admin, topic_acl("idem", AclOperation.WRITE))
    producer = Producer({"bootstrap.servers": fresh_broker.bootstrap, "enable.idempotence": True})
    assert produce_error(producer, "idem") is None


def test_tools_report_authorization_failures_as_such(
    secured: BrokerProcess, admin: AdminClient
) -> None:
    """`strom consume` in a group it may not READ ends with the broker's error and exit
    code 1 (it polled on until killed); a topic the principal may not describe is named
    as not authorized by `strom consume` and `strom topics --describe`, not as missing,
    and a missing one still as missing."""
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    group = f"denied-{topic}"
    new_topic(admin, topic)
    deny_group_read(admin, group)
    denied = tool(secured, "consume", "--topic", topic, "--group", group, timeout=60)
    assert denied.returncode == 1, denied.stderr
    assert "Traceback" not in denied.stderr
    assert "GROUP_AUTHORIZATION_FAILED" in denied.stderr.splitlines()[0], denied.stderr
    hidden = f"hidden-{uuid.uuid4().hex[:8]}"
    new_topic(admin, hidden)
    create(admin, topic_acl(hidden, AclOperation.READ, principal="User:bob"))
    line = one_line_error(tool(secured, "consume", "--topic", hidden, "--timeout-ms", "100"), 1)
    assert line == (
        f"strom consume: not authorized to read topic '{hidden}' (TOPIC_AUTHORIZATION_FAILED)"
    )
    line = one_line_error(tool(secured, "topics", "--describe", "--topic", hidden), 1)
    assert line == (
        f"strom topics: not authorized to describe topic '{hidden}' (TOPIC_AUTHORIZATION_FAILED)"
    )
    missing = one_line_error(tool(secured, "topics", "--describe", "--topic", f"no-{hidden}"), 1)
    assert missing == f"strom topics: topic 'no-{hidden}' does not exist"
    assert f"no-{hidden}" not in admin.list_topics(timeout=10).topics  # not created by asking
