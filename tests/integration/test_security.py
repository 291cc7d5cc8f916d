"""TLS listeners and SASL authentication end to end: one broker with PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL listeners at once, a certificate authority made for the
module, and confluent-kafka, kafka-python and aiokafka producing and consuming over SSL,
mutual TLS and SASL_SSL with SCRAM-SHA-512 and PLAIN. Then what must cost only the
connection that does it: a wrong password, a request before authentication, a plaintext
client or garbage on the TLS port, random SASL tokens; authenticated clients are served
after each.

The PLAINTEXT listener's User:ANONYMOUS is a super user, so the tests administer ACLs
and SCRAM credentials through it; the SSL listener asks for client certificates
(``listener.name.ssl.ssl.client.auth=requested``) and maps a subject ``CN=<name>,OU=eng,
...`` to the name alone.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import json
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import TopicPartition as AioTopicPartition
from broker_process import BrokerProcess, with_controller_listener
from cli_helpers import ok, one_line_error, strom, tool
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka_helpers import delete_acls
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.describe_quorum.v1.request import DescribeQuorumRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16
from raw_client import RawClient
from tls_certs import Authority, Issued, make_ca

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import encode_request
from strom.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramClient

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_carol="carol-secret";'
)
SCRAM_USER, SCRAM_PASSWORD = "scrammy", "scram-secret"
METADATA = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@dataclass
class SecureBroker:
    process: BrokerProcess
    ports: dict[str, int]
    ca: Authority
    alice: Issued  # a client certificate: CN=alice,OU=eng,O=Strom,C=US -> User:alice
    server: Issued

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    root = tmp_path_factory.mktemp("security")
    ca = make_ca(root / "ca")
    server = ca.issue("server", "/CN=localhost")
    alice = ca.issue("alice", "/C=US/O=Strom/OU=eng/CN=alice")
    process = BrokerProcess(root / "data")
    ports = process.ports  # read once started: a port another process took is replaced
    for name in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        process.extra_port(name)
    process.overrides.update(
        {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.location": str(server.bundle),
            "ssl.truststore.location": str(ca.cert),
            "listener.name.ssl.ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=eng,.*$/$1/L,DEFAULT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:ANONYMOUS",
        }
    )
    process.start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    upsert = UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), SCRAM_PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(15)
    yield SecureBroker(process, ports, ca, alice, server)
    if process.alive():
        process.stop()


def new_topic(secure: SecureBroker, name: str | None = None) -> str:
    name = name or f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


# Client settings per mode -----------------------------------------------------------

MODES = ["ssl", "mtls", "sasl_ssl_scram", "sasl_ssl_plain"]


def librdkafka_settings(secure: SecureBroker, mode: str) -> dict[str, Any]:
    ca = str(secure.ca.cert)
    if mode == "ssl":
        return {
            "bootstrap.servers": secure.address("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
        }
    if mode == "mtls":
        return {
            **librdkafka_settings(secure, "ssl"),
            "ssl.certificate.location": str(secure.alice.cert),
            "ssl.key.location": str(secure.alice.key),
        }
    user, password, mechanism = (
        (SCRAM_USER, SCRAM_PASSWORD, "SCRAM-SHA-512")
        if mode == "sasl_ssl_scram"
        else ("carol", "carol-secret", "PLAIN")
    )
    return {
        "bootstrap.servers": secure.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def python_settings(secure: SecureBroker, mode: str) -> dict[str, Any]:
    """kafka-python's and aiokafka's shared names for the same settings."""
    if mode in ("ssl", "mtls"):
        out: dict[str, Any] = {
            "bootstrap_servers": secure.address("SSL"),
            "security_protocol": "SSL",
        }
    else:
        user, password, mechanism = (
            (SCRAM_USER, SCRAM_PASSWORD, "SCRAM-SHA-512")
            if mode == "sasl_ssl_scram"
            else ("carol", "carol-secret", "PLAIN")
        )
        out = {
            "bootstrap_servers": secure.address("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
    return out


def client_tls(secure: SecureBroker, mode: str) -> dict[str, Any]:
    cert = {"certfile": str(secure.alice.cert), "keyfile": str(secure.alice.key)}
    return {"cafile": str(secure.ca.cert), **(cert if mode == "mtls" else {})}


# Producing and consuming -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_confluent_kafka_produce_consume(secure: SecureBroker, mode: str) -> None:
    topic = new_topic(secure)
    conf = librdkafka_settings(secure, mode)
    producer = Producer(conf)
    errors: list[Any] = []
    for i in range(5):
        producer.produce(topic, f"{mode}-{i}".encode(), on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(15) == 0
    assert errors == [None] * 5
    consumer = Consumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 15
    while len(values) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    assert values == [f"{mode}-{i}" for i in range(5)]


@pytest.mark.parametrize("mode", MODES)
def test_kafka_python_produce_consume(secure: SecureBroker, mode: str) -> None:
    topic = new_topic(secure)
    tls = {f"ssl_{k}": v for k, v in client_tls(secure, mode).items()}
    common = {**python_settings(secure, mode), **tls}
    producer = KafkaProducer(**common, acks="all")
    for i in range(5):
        producer.send(topic, f"{mode}-{i}".encode()).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(**common, consumer_timeout_ms=10000)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek(KTopicPartition(topic, 0), 0)
    values = []
    for message in consumer:
        values.append(message.value.decode())
        if len(values) == 5:
            break
    consumer.close()
    assert values == [f"{mode}-{i}" for i in range(5)]


@pytest.mark.parametrize("mode", MODES)
def test_aiokafka_produce_consume(secure: SecureBroker, mode: str) -> None:
    topic = new_topic(secure)

    async def run() -> list[str]:
        common = {
            **python_settings(secure, mode),
            "ssl_context": create_ssl_context(**client_tls(secure, mode)),
        }
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"{mode}-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = AioTopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            values: list[str] = []
            while len(values) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 15)
                values += [m.value.decode() for ms in batch.values() for m in ms]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"{mode}-{i}" for i in range(5)]


def test_principal_from_the_client_certificate_is_checked_by_acls(
    secure: SecureBroker,
) -> None:
    """User:alice (mapped from her certificate's subject) may write the topic but not
    read it; the same client without a certificate is User:ANONYMOUS (a super user)."""
    topic = new_topic(secure)
    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    acl = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([acl]).values():
        future.result(15)
    conf = librdkafka_settings(secure, "mtls")
    outcome: list[Any] = []
    producer = Producer(conf)
    producer.produce(topic, b"from alice", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(15)
    assert outcome == [None]
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    error = None
    deadline = time.monotonic() + 15
    while error is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is not None, "alice read a topic she may only write"
            error = message.error()
    consumer.close()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    anonymous = Consumer({**librdkafka_settings(secure, "ssl"), "group.id": "g-anon"})
    anonymous.assign([TopicPartition(topic, 0, 0)])
    message = None
    deadline = time.monotonic() + 15
    while message is None and time.monotonic() < deadline:
        message = anonymous.poll(0.5)
    anonymous.close()
    assert message is not None and message.error() is None and message.value() == b"from alice"


# Failures cost only their connection --------------------------------------------------


def tls_client(secure: SecureBroker, listener: str, identity: Issued | None = None) -> RawClient:
    raw = RawClient(secure.ports[listener])
    context = ssl.create_default_context(cafile=str(secure.ca.cert))
    if identity is not None:
        context.load_cert_chain(str(identity.cert), str(identity.key))
    raw.sock = context.wrap_socket(raw.sock, server_hostname="127.0.0.1")
    return raw


def handshake(raw: RawClient, mechanism: str) -> Any:
    return raw.request(SaslHandshakeRequest(mechanism=mechanism))


def authenticate(raw: RawClient, token: bytes) -> Any:
    return raw.request(SaslAuthenticateRequest(auth_bytes=token))


def assert_served(secure: SecureBroker) -> None:
    """A SCRAM client on the SASL_SSL listener is still served."""
    with tls_client(secure, "SASL_SSL") as raw:
        assert handshake(raw, "SCRAM-SHA-512").error_code == ErrorCode.none
        client = ScramClient(SCRAM_SHA_512, SCRAM_USER, SCRAM_PASSWORD)
        first = authenticate(raw, client.first())
        assert first.error_code == ErrorCode.none
        final = authenticate(raw, client.final(bytes(first.auth_bytes)))
        assert final.error_code == ErrorCode.none, final.error_message
        client.verify(bytes(final.auth_bytes))
        response = raw.request(METADATA)
        assert [b.port for b in response.brokers] == [secure.ports["SASL_SSL"]]


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("SCRAM-SHA-512", SCRAM_USER, "wrong"), ("PLAIN", "carol", "wrong"), ("PLAIN", "x", "y")],
)
def test_wrong_password_is_refused_and_the_connection_closed(
    secure: SecureBroker, mechanism: str, user: str, password: str
) -> None:
    with tls_client(secure, "SASL_SSL") as raw:
        assert handshake(raw, mechanism).error_code == ErrorCode.none
        if mechanism == "PLAIN":
            response = authenticate(raw, f"\0{user}\0{password}".encode())
        else:
            client = ScramClient(SCRAM_SHA_512, user, password)
            first = authenticate(raw, client.first())
            assert first.error_code == ErrorCode.none
            response = authenticate(raw, client.final(bytes(first.auth_bytes)))
        assert response.error_code == ErrorCode.sasl_authentication_failed
        assert "Authentication failed" in response.error_message
        raw.send_bytes(b"\0\0\0\0")  # anything more is not read
        assert raw.is_closed_by_peer()
    assert_served(secure)


def test_librdkafka_reports_a_wrong_password(secure: SecureBroker) -> None:
    errors: list[KafkaError] = []
    conf = {**librdkafka_settings(secure, "sasl_ssl_scram"), "sasl.password": "wrong"}
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials" in errors[0].str()


def test_requests_before_authentication_close_the_connection(secure: SecureBroker) -> None:
    with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
        versions = raw.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert {k.api_key for k in versions.api_keys} >= {17, 36, 50, 51}
        raw.correlation += 1
        raw.send_bytes(encode_request(raw.correlation, "t", METADATA))
        assert raw.is_closed_by_peer()
    with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
        response = handshake(raw, "GSSAPI")
        assert response.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(response.mechanisms) == {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"}
        assert raw.is_closed_by_peer()
    assert_served(secure)


def test_plaintext_client_on_the_tls_port_costs_only_its_connection(
    secure: SecureBroker,
) -> None:
    with RawClient(secure.ports["SSL"]) as raw:
        raw.send_bytes(
            encode_request(
                1, "t", ApiVersionsRequest(client_software_name="t", client_software_version="1")
            )
        )
        assert raw.is_closed_by_peer()
    assert_served(secure)


def test_a_stalled_tls_handshake_does_not_hold_up_others(secure: SecureBroker) -> None:
    stalled = [socket.create_connection(("127.0.0.1", secure.ports["SSL"])) for _ in range(3)]
    try:
        stalled[1].sendall(b"\x16\x03\x01\x02\x00\x01")  # a client hello cut short
        assert_served(secure)
    finally:
        for sock in stalled:
            sock.close()


def _client_hello() -> bytes:
    """The first bytes a TLS client sends: a real client hello."""
    context = ssl.create_default_context()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="x")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


CLIENT_HELLO = _client_hello()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    garbage=st.binary(max_size=300),
    listener=st.sampled_from(["SSL", "SASL_SSL", "SASL_PLAINTEXT", "SASL_TOKEN"]),
    hello_bytes=st.integers(min_value=0, max_value=len(CLIENT_HELLO)),
)
def test_garbage_costs_only_its_connection(
    secure: SecureBroker, garbage: bytes, listener: str, hello_bytes: int
) -> None:
    """Random bytes before or during the TLS handshake (after some of a real client
    hello), and random SASL tokens (after a valid SaslHandshake) are answered by a closed
    connection or a refusal; never served."""
    if listener == "SASL_TOKEN":
        with RawClient(secure.ports["SASL_PLAINTEXT"], timeout=5) as raw:
            assert handshake(raw, "SCRAM-SHA-512").error_code == ErrorCode.none
            response = authenticate(raw, garbage)
            assert response.error_code == ErrorCode.sasl_authentication_failed
            assert raw.is_closed_by_peer()
        return
    sock = socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=5)
    try:
        if listener == "SASL_PLAINTEXT":
            sock.sendall(struct.pack(">i", len(garbage)) + garbage)
        else:
            sock.sendall(CLIENT_HELLO[:hello_bytes])
            sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):  # a TLS alert, say; then the broker must close
            pass
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed by the broker while we sent or read: what is asked of it
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise
    finally:
        sock.close()


def test_served_after_the_garbage(secure: SecureBroker) -> None:
    assert_served(secure)
    assert secure.process.alive()


def test_certificates_are_reloaded_when_their_file_changes(secure: SecureBroker) -> None:
    """A new certificate written over ssl.keystore.location is what new connections get."""
    renewed = secure.ca.issue("server-renewed", "/CN=renewed")
    bundle = Path(secure.server.bundle)
    old = bundle.read_text()
    context = ssl.create_default_context(cafile=str(secure.ca.cert))
    context.check_hostname = False

    def served_subject() -> str:
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=5) as sock:
            with context.wrap_socket(sock) as tls:
                cert = tls.getpeercert()
                return dict(x[0] for x in cert["subject"])["commonName"]

    assert served_subject() == "localhost"
    try:
        bundle.write_text(renewed.bundle.read_text())
        deadline = time.monotonic() + 15
        subject = served_subject()
        while subject != "renewed" and time.monotonic() < deadline:
            time.sleep(0.3)
            subject = served_subject()
        assert subject == "renewed"
    finally:
        bundle.write_text(old)
    deadline = time.monotonic() + 15
    while served_subject() != "localhost" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert_served(secure)


# SCRAM credentials from the command line ----------------------------------------------


def scram_login(port: int, mechanism: Any, user: str, password: str) -> Any:
    """The final SaslAuthenticate response of a SCRAM exchange on a SASL_PLAINTEXT port."""
    with RawClient(port) as raw:
        assert handshake(raw, mechanism.name).error_code == ErrorCode.none
        client = ScramClient(mechanism, user, password)
        first = authenticate(raw, client.first())
        if first.error_code != ErrorCode.none:
            return first
        final = authenticate(raw, client.final(bytes(first.auth_bytes)))
        if final.error_code == ErrorCode.none:
            client.verify(bytes(final.auth_bytes))
        return final


def test_strom_configs_adds_and_deletes_scram_credentials(secure: SecureBroker) -> None:
    port = secure.ports["SASL_PLAINTEXT"]
    ok(
        tool(
            secure.process,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=dave-secret]",
        )
    )
    assert scram_login(port, SCRAM_SHA_256, "dave", "dave-secret").error_code == ErrorCode.none
    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(15)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    ok(
        tool(
            secure.process,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--delete-config",
            "SCRAM-SHA-256",
        )
    )
    refused = scram_login(port, SCRAM_SHA_256, "dave", "dave-secret")
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    error = one_line_error(
        tool(
            secure.process,
            "configs",
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
            "--add-config",
            "SCRAM-SHA-256=[iterations=10,password=x]",
        )
    )
    assert "iterations" in error.lower()


def test_storage_format_add_scram(tmp_path: Path) -> None:
    """A credential given to ``strom storage format --add-scram`` is there at first start."""
    process = BrokerProcess(tmp_path / "data")
    process.overrides.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{process.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{process.extra_port('SASL_PLAINTEXT')}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        }
    )
    properties = tmp_path / "server.properties"
    properties.write_text(
        "".join(
            f"{k}={v}\n" for k, v in {**process.overrides, "log.dirs": process.data_dir}.items()
        )
    )
    cluster_id = ok(strom("storage", "random-uuid")).stdout.strip()
    ok(
        strom(
            "storage",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(properties),
            "--add-scram",
            "SCRAM-SHA-256=[name=erin,password=erin-secret]",
        )
    )
    bad = strom(
        "storage", "format", "-t", cluster_id, "-c", str(properties), "--add-scram", "SCRAM-MD5=[]"
    )
    assert "SCRAM-MD5" in one_line_error(bad, 2)
    process.start()
    sasl_port = process.ports["SASL_PLAINTEXT"]
    try:
        deadline = time.monotonic() + 15
        result = scram_login(sasl_port, SCRAM_SHA_256, "erin", "erin-secret")
        while result.error_code != ErrorCode.none and time.monotonic() < deadline:
            time.sleep(0.2)  # the first active controller writes it into the metadata log
            result = scram_login(sasl_port, SCRAM_SHA_256, "erin", "erin-secret")
        assert result.error_code == ErrorCode.none, result.error_message
        wrong = scram_login(sasl_port, SCRAM_SHA_256, "erin", "wrong")
        assert wrong.error_code == ErrorCode.sasl_authentication_failed
    finally:
        process.stop()


# This node's own connections ---------------------------------------------------------


def test_a_cluster_talks_to_itself_over_sasl_ssl(tmp_path: Path) -> None:
    """Two nodes whose client (inter-broker) and controller listeners are both SASL_SSL:
    Raft, broker registration and forwarding log in with PLAIN, replication with
    SCRAM-SHA-512 (the nodes' credential added once the cluster is up), so a topic
    replicated on both nodes takes acks=all writes. With the authorizer on, the nodes'
    principal (a super user) passes the controller's CLUSTER_ACTION checks; a client on
    the controller listener without it is refused."""
    from cluster_process import Cluster

    ca = make_ca(tmp_path / "ca")
    server = ca.issue("node", "/CN=localhost")
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="node" password="node-secret" user_node="node-secret" '
        'user_client="client-secret";'
    )
    cluster = Cluster.combined(
        tmp_path / "cluster",
        count=2,
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:SASL_SSL",
            "ssl.keystore.location": str(server.bundle),
            "ssl.truststore.location": str(ca.cert),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.jaas.config": jaas,
            "listener.name.plaintext.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="node" password="node-scram-secret";'
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:node",
        },
    )
    cluster.start_all()
    try:
        conf = {
            "bootstrap.servers": cluster.bootstrap(),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca.cert),
            "sasl.mechanism": "PLAIN",
            "sasl.username": "client",
            "sasl.password": "client-secret",
        }
        admin = AdminClient(conf)
        deadline = time.monotonic() + 30
        while len(admin.list_topics(timeout=10).brokers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        upsert = UserScramCredentialUpsertion(
            "node", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"node-scram-secret"
        )
        admin.alter_user_scram_credentials([upsert])["node"].result(15)
        admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(15)
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
        outcome: list[Any] = []
        producer.produce("replicated", b"v", on_delivery=lambda e, m: outcome.append(e))
        producer.flush(25)
        assert outcome == [None]
        deadline = time.monotonic() + 20
        isr: list[int] = []
        while len(isr) < 2 and time.monotonic() < deadline:
            partition = admin.list_topics("replicated", timeout=10).topics["replicated"]
            isr = list(partition.partitions[0].isrs)
            time.sleep(0.2)
        assert sorted(isr) == [1, 2]
        # Once the cluster resource has an ACL, only what it allows is served there.
        node_admin = AdminClient({**conf, "sasl.username": "node", "sasl.password": "node-secret"})
        binding = AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:node",
            "*",
            AclOperation.CLUSTER_ACTION,
            AclPermissionType.ALLOW,
        )
        node_admin.create_acls([binding])[binding].result(15)
        controller_port = next(iter(cluster.nodes.values())).controller_port
        assert controller_port is not None
        deadline = time.monotonic() + 20
        while True:  # every node applies the ACL once its metadata has it
            with RawClient(controller_port) as raw:
                context = ssl.create_default_context(cafile=str(ca.cert))
                raw.sock = context.wrap_socket(raw.sock, server_hostname="127.0.0.1")
                assert handshake(raw, "PLAIN").error_code == ErrorCode.none
                login = authenticate(raw, b"\0client\0client-secret")
                assert login.error_code == ErrorCode.none
                heartbeat = raw.request(
                    BrokerHeartbeatRequest(
                        broker_id=1,
                        broker_epoch=0,
                        current_metadata_offset=0,
                        want_fence=False,
                        want_shut_down=False,
                    )
                )
                quorum = raw.request(DescribeQuorumRequest(topics=()))
            refused = ErrorCode.cluster_authorization_failed
            if heartbeat.error_code == refused or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (heartbeat.error_code, quorum.error_code) == (refused, refused)
        producer.produce("replicated", b"w", on_delivery=lambda e, m: outcome.append(e))
        producer.flush(25)
        assert outcome == [None, None]
    finally:
        cluster.kill_all()
    assert "authentication with PLAIN failed" not in "".join(
        n.output() for n in cluster.nodes.values()
    )


def test_sasl_handshake_v0_takes_bare_tokens(secure: SecureBroker) -> None:
    """After SaslHandshake v0 the tokens travel framed but without a request header
    (KIP-43), as older clients send them; then the connection is served."""
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0

    with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
        assert raw.request(HandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        token = b"\0carol\0carol-secret"
        raw.send_bytes(struct.pack(">i", len(token)) + token)
        assert raw.read_frame() == b""  # PLAIN's empty answer
        response = raw.request(METADATA)
        assert [b.port for b in response.brokers] == [secure.ports["SASL_PLAINTEXT"]]
    with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
        assert raw.request(HandshakeV0(mechanism="PLAIN")).error_code == ErrorCode.none
        token = b"\0carol\0wrong"
        raw.send_bytes(struct.pack(">i", len(token)) + token)
        assert raw.is_closed_by_peer()  # v0 has no way to say why


def test_scram_administration_is_authorized_and_checked(secure: SecureBroker) -> None:
    """alice (a certificate, denied everything on the cluster) may neither list nor
    change SCRAM credentials; the super user is told which users have none."""
    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    deny = AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    for future in admin.create_acls([deny]).values():
        future.result(15)
    alice = AdminClient(librdkafka_settings(secure, "mtls"))
    upsert = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"frank-secret"
    )
    try:
        with pytest.raises(KafkaException) as info:
            alice.alter_user_scram_credentials([upsert])["frank"].result(15)
        assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # (librdkafka aborts the process on a refused describe: asked without it.)
        with tls_client(secure, "SSL", secure.alice) as raw:
            refused = raw.request(
                DescribeUserScramCredentialsRequest(users=(UserName(name=SCRAM_USER),))
            )
        assert refused.error_code == ErrorCode.cluster_authorization_failed
        assert [(r.user, r.error_code) for r in refused.results] == [
            (SCRAM_USER, ErrorCode.cluster_authorization_failed)
        ]
    finally:
        delete_acls(admin, deny, timeout=15)
    with RawClient(secure.process.port) as raw:
        response = raw.request(
            DescribeUserScramCredentialsRequest(
                users=(UserName(name="nobody"), UserName(name=SCRAM_USER))
            )
        )
    assert [(r.user, r.error_code) for r in response.results] == [
        ("nobody", ErrorCode.resource_not_found),
        (SCRAM_USER, ErrorCode.none),
    ]
    described = admin.describe_user_scram_credentials([SCRAM_USER])[SCRAM_USER].result(15)
    assert [i.mechanism for i in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_512]


def test_a_large_frame_before_authentication_closes_the_connection(secure: SecureBroker) -> None:
    """Before a SASL connection has authenticated, a frame over
    sasl.server.max.receive.size (512 KiB) is not read: the connection is closed."""
    with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
        raw.send_bytes(struct.pack(">i", 524289))
        assert raw.is_closed_by_peer()
    with RawClient(secure.ports["PLAINTEXT"]) as raw:  # the usual limit without SASL
        raw.send_bytes(struct.pack(">i", 524289) + b"\0" * 1024)
        raw.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            raw.sock.recv(1)  # still open: waiting for the rest of the frame


def test_kcat_over_sasl_ssl_with_scram(secure: SecureBroker) -> None:
    topic = new_topic(secure)
    settings = [
        "-Xsecurity.protocol=SASL_SSL",
        f"-Xssl.ca.location={secure.ca.cert}",
        "-Xsasl.mechanism=SCRAM-SHA-512",
        f"-Xsasl.username={SCRAM_USER}",
        f"-Xsasl.password={SCRAM_PASSWORD}",
    ]
    kcat = ["kcat", "-b", secure.address("SASL_SSL"), *settings]
    subprocess.run([*kcat, "-P", "-t", topic], input=b"one\ntwo\n", check=True, timeout=30)
    out = subprocess.run(
        [*kcat, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.splitlines() == [b"one", b"two"]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SSL"])
def test_a_tool_without_security_settings_says_what_the_broker_wants(
    secure: SecureBroker, listener: str
) -> None:
    """`strom topics --list` against a SASL or TLS listener without security settings
    is one line that says the broker wants SASL or TLS (it said only "Broker transport
    failure")."""
    from cli_helpers import one_line_error, strom

    line = one_line_error(
        strom("topics", "--list", "--bootstrap-server", secure.address(listener)), 1
    )
    assert line.startswith(f"strom topics: cannot reach a broker at {secure.address(listener)}")
    if listener == "SSL":
        assert "TLS" in line and "security.protocol" in line, line
    else:
        assert "may want SASL or TLS" in line, line


# The tools on a secured cluster ------------------------------------------------------

JAVA_LOGIN_MODULES = {"PLAIN": "plain.PlainLoginModule", "SCRAM": "scram.ScramLoginModule"}


def java_client_file(
    path: Path, mechanism: str, user: str, password: str, ca: Path | None = None
) -> str:
    """A client file as Kafka's tools take it: the Java client's names, the JAAS text over
    two lines; SASL_SSL with a PEM truststore given ``ca``, else SASL_PLAINTEXT."""
    module = JAVA_LOGIN_MODULES[mechanism.split("-")[0]]
    tls = f"ssl.truststore.location={ca}\nssl.truststore.type=PEM\n" if ca else ""
    path.write_text(
        f"security.protocol={'SASL_SSL' if ca else 'SASL_PLAINTEXT'}\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="{user}" password="{password}";\n{tls}'
    )
    return str(path)


def librdkafka_client_file(path: Path, ca: Path, mechanism: str, user: str, password: str) -> str:
    """The same settings for SASL_SSL in librdkafka's names."""
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.username={user}\n"
        f"sasl.password={password}\n"
        f"ssl.ca.location={ca}\n"
    )
    return str(path)


@pytest.mark.parametrize("login", ["PLAIN", "SCRAM-SHA-512"])
def test_admin_tools_on_sasl_ssl_with_a_java_client_file(
    secure: SecureBroker, login: str, tmp_path: Path
) -> None:
    """A client file written for Kafka's tools (the Java client's names: sasl.jaas.config
    with the PLAIN or SCRAM login module, a PEM truststore) works as it is with `strom
    acls --list`, `strom cluster` and `strom metadata-quorum` (raw protocol over TLS and
    SASL) and `strom topics --list` (confluent-kafka) against the SASL_SSL listener; a
    wrong password is one line."""
    from cli_helpers import ok, one_line_error, strom

    user, password = ("admin", "admin-secret") if login == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)

    def client_file(secret: str) -> str:
        path = tmp_path / f"client-{secret}.properties"
        return java_client_file(path, login, user, secret, secure.ca.cert)

    bootstrap = secure.address("SASL_SSL")
    good = client_file(password)
    listed = ok(strom("acls", "--list", "--bootstrap-server", bootstrap, "--command-config", good))
    assert "Traceback" not in listed.stderr
    topic = new_topic(secure)
    topics = strom("topics", "--list", "--bootstrap-server", bootstrap, "--command-config", good)
    assert topic in ok(topics).stdout.split()
    cluster = ok(strom("cluster", "--bootstrap-server", bootstrap, "--command-config", good))
    assert "ClusterId:" in cluster.stdout
    quorum = strom(
        "metadata-quorum", "--bootstrap-server", bootstrap, "--command-config", good,
        "describe", "--status",
    )  # fmt: skip
    assert "LeaderId:" in ok(quorum).stdout
    bad = client_file("wrong")
    line = one_line_error(
        strom("acls", "--list", "--bootstrap-server", bootstrap, "--command-config", bad), 1
    )
    assert line.startswith(f"strom acls: cannot log in to {bootstrap}: "), line
    assert "Authentication failed" in line or "authentication" in line.lower(), line


def test_tools_sending_their_own_requests_on_sasl_ssl(secure: SecureBroker, tmp_path: Path) -> None:
    """`strom reassign-partitions`, `strom transactions` and the client quota and SCRAM
    forms of `strom configs` take --command-config and work against the SASL_SSL listener
    with a Java-style file (PLAIN) and a librdkafka-style one (SCRAM-SHA-512): their own
    requests and their confluent-kafka clients over TLS and SASL. A file that cannot be
    used is one line and exit code 2."""
    java = java_client_file(
        tmp_path / "java.properties", "PLAIN", "admin", "admin-secret", secure.ca.cert
    )
    librdkafka = librdkafka_client_file(
        tmp_path / "librdkafka.properties",
        secure.ca.cert,
        "SCRAM-SHA-512",
        SCRAM_USER,
        SCRAM_PASSWORD,
    )
    unusable = tmp_path / "jks.properties"
    unusable.write_text("security.protocol=SSL\nssl.truststore.location=/etc/ca.jks\n")
    topic = new_topic(secure)
    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    (node,) = admin.list_topics(timeout=10).brokers
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [node]}]}
        )
    )
    transactional_id = f"tx-{topic}"
    producer = Producer(
        {"bootstrap.servers": secure.process.bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    assert producer.flush(10) == 0

    def run(config: str, *args: str) -> subprocess.CompletedProcess:
        return strom(
            *args, "--bootstrap-server", secure.address("SASL_SSL"), "--command-config", config
        )

    reassign = ("reassign-partitions", "--reassignment-json-file", str(plan))
    quota_user = ("configs", "--entity-type", "users", "--entity-name", "quota-user")
    # Chains of runs, each in order, side by side with the others.
    chains: list[list[tuple[str, ...]]] = [
        [(java, *reassign, "--execute", "--throttle", "1000000"),
         (librdkafka, *reassign, "--verify")],
        [(librdkafka, *quota_user, "--alter", "--add-config", "producer_byte_rate=1024"),
         (java, *quota_user, "--describe")],
        [(librdkafka, "configs", "--alter", "--entity-type", "users", "--entity-name", "gina",
          "--add-config", "SCRAM-SHA-256=[password=gina-secret]")],
        [(librdkafka, "reassign-partitions", "--list")],
        [(java, "transactions", "describe", "--transactional-id", transactional_id,
          "--output", "json")],
        [(librdkafka, "transactions", "list", "--output", "json")],
        [(java, "transactions", "describe-producers", "--topic", topic, "--partition", "0",
          "--output", "json")],
        [(str(tmp_path / "missing.properties"), "reassign-partitions", "--list")],
        [(str(unusable), "transactions", "list")],
    ]  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda chain: [run(*step) for step in chain], chains))
    producer.abort_transaction(10)
    (execute, verify), (alter, quotas), (scram,), (listed,), *rest = results
    (described,), (transactions,), (producers,), (missing,), (refused,) = rest
    assert "The inter-broker throttle limit was set to 1000000 B/s" in ok(execute).stdout
    assert "Successfully started partition reassignments" in execute.stdout
    assert f"Reassignment of partition {topic}-0 is completed." in ok(verify).stdout
    assert "Throttle was removed." in verify.stdout
    assert ok(listed).stdout.strip() == "No partition reassignments found."
    assert "user-principal 'quota-user'" in ok(alter).stdout
    assert ok(quotas).stdout.strip() == (
        "Quota configs for user-principal 'quota-user' are producer_byte_rate=1024.0"
    )
    ok(scram)
    login = scram_login(secure.ports["SASL_PLAINTEXT"], SCRAM_SHA_256, "gina", "gina-secret")
    assert login.error_code == ErrorCode.none
    (transaction,) = json.loads(ok(described).stdout)
    assert (transaction["transactional_id"], transaction["transaction_state"]) == (
        transactional_id,
        "Ongoing",
    )
    assert transaction["topic_partitions"] == f"{topic}-0"
    listing = [
        t for t in json.loads(ok(transactions).stdout) if t["transactional_id"] == transactional_id
    ]
    assert [(t["producer_id"], t["transaction_state"]) for t in listing] == [
        (transaction["producer_id"], "Ongoing")
    ]
    (state,) = json.loads(ok(producers).stdout)
    assert (state["producer_id"], state["current_transaction_start_offset"]) == (
        transaction["producer_id"],
        0,
    )
    assert "missing.properties" in one_line_error(missing, 2)
    assert "ssl.truststore.type=JKS" in one_line_error(refused, 2)


def test_tools_at_a_sasl_controller_listener(tmp_path: Path) -> None:
    """Every tool that takes `--bootstrap-controller` (as Kafka's kafka-metadata-quorum,
    kafka-configs, kafka-acls, kafka-cluster and kafka-reassign-partitions do) logs in
    with a Java-style client file to a controller listener that wants SASL (PLAIN here)
    and is served there by the active controller, the super user's requests authorized
    as Kafka's controller authorizes them. What the controllers do not serve
    (DescribeClientQuotas) is one line; without the file, or with a wrong password, the
    tool says so in one line and exits 1."""
    process = BrokerProcess(tmp_path / "data")
    with_controller_listener(process)
    process.overrides.update(
        {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "true",  # the plaintext client listener
        }
    )
    good, bad = (
        java_client_file(tmp_path / f"{name}.properties", "PLAIN", "admin", secret)
        for name, secret in (("good", "admin-secret"), ("bad", "wrong"))
    )
    process.start()
    try:
        controller = f"127.0.0.1:{process.ports['CONTROLLER']}"
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        admin.create_topics([NewTopic("at-controller", 1, 1)])["at-controller"].result(15)
        topic = ("--entity-type", "topics", "--entity-name", "at-controller")
        acl = ("--allow-principal", "User:alice", "--operation", "Read", "--topic", "at-controller")
        gina = ("--entity-type", "users", "--entity-name", "gina")
        # Chains of runs, each in order, side by side with the others; a run is the
        # client file and the tool's arguments.
        chains: list[list[tuple[str | None, ...]]] = [
            [(good, "metadata-quorum", "describe", "--status")],
            [(None, "metadata-quorum", "describe", "--status")],
            [(bad, "metadata-quorum", "describe", "--status")],
            [(good, "configs", "--alter", *topic, "--add-config", "retention.ms=60000"),
             (good, "configs", "--describe", *topic)],
            [(good, "acls", "--add", *acl),
             (good, "acls", "--list", "--topic", "at-controller"),
             (good, "acls", "--remove", "--force", *acl)],
            [(good, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1",
              "--all")],
            [(good, "configs", "--alter", *gina, "--add-config",
              "SCRAM-SHA-256=[password=gina-secret]"),
             (good, "configs", "--alter", *gina, "--add-config", "producer_byte_rate=1024"),
             (good, "configs", "--describe", *gina)],
            [(good, "cluster")],
            [(good, "reassign-partitions", "--list")],
        ]  # fmt: skip

        def run(file: str | None, name: str, *args: str) -> subprocess.CompletedProcess:
            config = ("--command-config", file) if file else ()
            return strom(name, "--bootstrap-controller", controller, *config, *args)

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda chain: [run(*step) for step in chain], chains))
        (status,), (unauthenticated,), (refused,), configs, acls, (broker,), users, *rest = results
        cluster, (reassignments,) = rest
        gina_logs_in = scram_login(
            process.ports["CONTROLLER"], SCRAM_SHA_256, "gina", "gina-secret"
        )
    finally:
        process.stop()
    assert "LeaderId:               1" in ok(status).stdout
    assert controller in one_line_error(unauthenticated, 1)
    line = one_line_error(refused, 1)
    assert "SASL login" in line and "refused" in line, line
    altered, described = configs
    assert "Completed updating config for topic 'at-controller'." in ok(altered).stdout
    assert "retention.ms\t60000\tDYNAMIC_TOPIC_CONFIG" in ok(described).stdout
    added, listed, removed = acls
    binding = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    for result in (added, listed, removed):
        assert binding in ok(result).stdout
    assert "node.id\t1\tSTATIC_BROKER_CONFIG" in ok(broker).stdout
    scram, quota, quotas = users
    ok(scram)
    assert gina_logs_in.error_code == ErrorCode.none
    assert "user-principal 'gina'" in ok(quota).stdout
    assert "does not serve DescribeClientQuotas" in one_line_error(quotas, 1)
    (overview,) = cluster
    assert f"1\t{controller}\tactive" in ok(overview).stdout
    assert ok(reassignments).stdout.strip() == "No partition reassignments found."


def _cluster_acl(operation: AclOperation, principal: str = "User:carol") -> AclBinding:
    return AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        principal,
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def test_update_features_needs_alter_on_the_cluster(secure: SecureBroker) -> None:
    """carol (SASL PLAIN, not a super user; the cluster's ACLs give her DESCRIBE, not
    ALTER) is refused UpdateFeatures with CLUSTER_AUTHORIZATION_FAILED and the feature
    stays where it was, while ApiVersions still tells her the finalized features; given
    ALTER, the same request (validate only) passes."""

    def finalized(raw: RawClient) -> dict[str, int]:
        versions = raw.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.none
        return {f.name: int(f.max_version_level) for f in versions.finalized_features}

    def share_off(raw: RawClient, validate_only: bool) -> Any:
        return raw.request(
            UpdateFeaturesRequest(
                timeout=datetime.timedelta(seconds=10),
                feature_updates=(
                    # A safe downgrade: share groups turned off, were it allowed.
                    FeatureUpdateKey(
                        feature="share.version", max_version_level=i16(0), upgrade_type=i8(2)
                    ),
                ),
                validate_only=validate_only,
            )
        )

    admin = AdminClient({"bootstrap.servers": secure.process.bootstrap})
    describe, alter = _cluster_acl(AclOperation.DESCRIBE), _cluster_acl(AclOperation.ALTER)
    for future in admin.create_acls([describe]).values():
        future.result(15)
    try:
        with RawClient(secure.ports["SASL_PLAINTEXT"]) as raw:
            assert handshake(raw, "PLAIN").error_code == ErrorCode.none
            assert authenticate(raw, b"\0carol\0carol-secret").error_code == ErrorCode.none
            assert finalized(raw)["share.version"] == 1
            refused = share_off(raw, validate_only=False)
            assert refused.error_code == ErrorCode.cluster_authorization_failed
            assert [(r.feature, r.error_code) for r in refused.results] == [
                ("share.version", ErrorCode.cluster_authorization_failed)
            ]
            assert finalized(raw)["share.version"] == 1
            for future in admin.create_acls([alter]).values():
                future.result(15)
            deadline = time.monotonic() + 15
            while (answer := share_off(raw, validate_only=True)).error_code != ErrorCode.none:
                assert answer.error_code == ErrorCode.cluster_authorization_failed, answer
                assert time.monotonic() < deadline, "ALTER on the cluster never took effect"
                time.sleep(0.1)
            assert finalized(raw)["share.version"] == 1  # validated, not written
    finally:
        delete_acls(admin, describe, alter, timeout=15)
