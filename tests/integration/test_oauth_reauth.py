"""SASL/OAUTHBEARER and re-authentication (KIP-368) against a real broker.

The broker has three listeners: PLAINTEXT for the tests' administration (its
User:ANONYMOUS is a super user), SASL_SSL taking OAUTHBEARER JWTs signed by a key the
module makes (checked against a JWKS file, with audience and issuer) and SCRAM-SHA-512,
with sessions that end after 2 s, and SASL_PLAINTEXT taking Kafka's unsigned
development tokens. confluent-kafka, kafka-python and aiokafka authenticate with tokens;
a token signed by another key, expired, or for another audience is refused with Kafka's
answers; the token's subject is the principal ACLs see; librdkafka re-authenticates its
connections as sessions end, without reconnecting; a connection whose session has ended
is closed on its next request; re-authenticating as someone else fails.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import importlib
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
from aiokafka.helpers import create_ssl_context
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer
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
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka import KafkaConsumer, KafkaProducer
from kafka.sasl.oauth import AbstractTokenProvider
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from raw_client import RawClient
from tls_certs import Authority, make_ca

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import encode_request
from strom.security.sasl import SCRAM_SHA_512, ScramClient

ISSUER, AUDIENCE = "https://issuer.test", "strom"
REAUTH_MS = 2000
SCRAM_USERS = {"scrammy": "scram-secret", "other": "other-secret"}
METADATA = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@dataclass
class OAuthBroker:
    process: BrokerProcess
    ports: dict[str, int]
    ca: Authority
    key: Any  # the RSA key whose public half the broker's JWKS holds

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def token(self, sub: str = "alice", lifetime: float = 3600, **overrides: Any) -> str:
        now = int(time.time())
        claims = {"sub": sub, "iat": now, "exp": now + lifetime, "iss": ISSUER, "aud": AUDIENCE}
        claims.update(overrides)
        key = claims.pop("key", self.key)
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthBroker]:
    root = tmp_path_factory.mktemp("oauth")
    ca = make_ca(root / "ca")
    server = ca.issue("server", "/CN=localhost")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="RS256")
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk]}))
    process = BrokerProcess(root / "data")
    ports = process.ports  # read once started: a port another process took is replaced
    for name in ("SASL_SSL", "SASL_PLAINTEXT"):
        process.extra_port(name)
    process.overrides.update(
        {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.location": str(server.bundle),
            "sasl.enabled.mechanisms": "OAUTHBEARER,SCRAM-SHA-512",
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
            ),
            "listener.name.sasl_ssl.sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
            "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER,
            "listener.name.sasl_ssl.connections.max.reauth.ms": str(REAUTH_MS),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:ANONYMOUS",
        }
    )
    process.start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    upserts = [
        UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
        )
        for user, password in SCRAM_USERS.items()
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(15)
    yield OAuthBroker(process, ports, ca, key)
    if process.alive():
        process.stop()


def new_topic(broker: OAuthBroker) -> str:
    name = f"oauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.process.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def oauth_settings(broker: OAuthBroker, sub: str = "alice", **token: Any) -> dict[str, Any]:
    def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
        return broker.token(sub, **token), time.time() + 3600, sub, {}

    return {
        "bootstrap.servers": broker.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(broker.ca.cert),
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def produce(settings: dict[str, Any], topic: str, count: int) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 15000})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: outcomes.append(e))
    producer.flush(30)
    return outcomes


def consume(settings: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


# Clients with tokens ------------------------------------------------------------------


def test_confluent_kafka_with_a_signed_token(broker: OAuthBroker) -> None:
    topic = new_topic(broker)
    settings = oauth_settings(broker)
    assert produce(settings, topic, 50) == [None] * 50
    assert consume(settings, topic, 50) == [f"v{i}".encode() for i in range(50)]


def test_the_token_subject_is_the_principal_acls_see(broker: OAuthBroker) -> None:
    topic = new_topic(broker)
    admin = AdminClient({"bootstrap.servers": broker.process.bootstrap})
    deny = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:mallory",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    allow = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([deny, allow]).values():
        future.result(15)
    refused = produce(oauth_settings(broker, "mallory"), topic, 3)
    assert [e.code() if e else None for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert produce(oauth_settings(broker, "alice"), topic, 3) == [None] * 3


class KafkaPythonTokens(AbstractTokenProvider):
    def __init__(self, broker: OAuthBroker) -> None:
        self.broker = broker

    def token(self) -> str:
        return self.broker.token("alice")


class AioTokens(AioTokenProvider):
    def __init__(self, broker: OAuthBroker) -> None:
        self.broker = broker

    async def token(self) -> str:
        return self.broker.token("alice")


def test_kafka_python_with_a_signed_token(broker: OAuthBroker) -> None:
    topic = new_topic(broker)
    settings = {
        "bootstrap_servers": broker.address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(broker.ca.cert),
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": KafkaPythonTokens(broker),
    }
    producer = KafkaProducer(**settings, acks="all")
    for i in range(20):
        producer.send(topic, f"k{i}".encode()).get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(
        topic, **settings, auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    values = [m.value for _, m in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert values == [f"k{i}".encode() for i in range(20)]


def test_aiokafka_with_a_signed_token(broker: OAuthBroker) -> None:
    topic = new_topic(broker)

    async def run() -> list[bytes]:
        settings = {
            "bootstrap_servers": broker.address("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(broker.ca.cert)),
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": AioTokens(broker),
        }
        producer = AIOKafkaProducer(**settings, acks="all")
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **settings, auto_offset_reset="earliest")
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(20):
                while len(values) < 20:
                    batch = await consumer.getmany(timeout_ms=1000)
                    values += [m.value for records in batch.values() for m in records]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(20)]


def test_unsigned_development_tokens_where_no_jwks_is_set(broker: OAuthBroker) -> None:
    topic = new_topic(broker)
    settings = {
        "bootstrap.servers": broker.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=bob",
    }
    assert produce(settings, topic, 5) == [None] * 5
    # The JWKS listener refuses the same unsigned token.
    errors: list[KafkaError] = []
    unsigned_on_ssl = {
        **settings,
        "bootstrap.servers": broker.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(broker.ca.cert),
        "error_cb": errors.append,
    }
    producer = Producer(unsigned_on_ssl)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION


# Refused tokens, raw ------------------------------------------------------------------


def tls_raw(broker: OAuthBroker, listener: str = "SASL_SSL") -> RawClient:
    raw = RawClient(broker.ports[listener])
    context = ssl.create_default_context(cafile=str(broker.ca.cert))
    raw.sock = context.wrap_socket(raw.sock, server_hostname="127.0.0.1")
    return raw


def bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def sasl(raw: RawClient, mechanism: str, *tokens: bytes) -> list[Any]:
    assert raw.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
    return [raw.request(SaslAuthenticateRequest(auth_bytes=token)) for token in tokens]


def test_refused_tokens_get_kafkas_answers(broker: OAuthBroker) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token in [
        broker.token(key=other_key),
        broker.token(lifetime=-60),
        broker.token(aud="elsewhere"),
        broker.token(iss="https://evil.test"),
    ]:
        with tls_raw(broker) as raw:
            (challenge,) = sasl(raw, "OAUTHBEARER", bearer(token))
            assert challenge.error_code == ErrorCode.none
            assert json.loads(bytes(challenge.auth_bytes)) == {"status": "invalid_token"}
            (failure,) = sasl_continue(raw, b"\x01")
            assert failure.error_code == ErrorCode.sasl_authentication_failed
            assert "invalid_token" in failure.error_message
            raw.send_bytes(b"\0\0\0\0")
            assert raw.is_closed_by_peer()
    with tls_raw(broker) as raw:  # a good token is still served
        (done,) = sasl(raw, "OAUTHBEARER", bearer(broker.token()))
        assert done.error_code == ErrorCode.none, done.error_message
        assert raw.request(METADATA).brokers


def sasl_continue(raw: RawClient, *tokens: bytes) -> list[Any]:
    return [raw.request(SaslAuthenticateRequest(auth_bytes=token)) for token in tokens]


# Re-authentication ----------------------------------------------------------------------


def scram(raw: RawClient, user: str, password: str, handshake: bool = True) -> Any:
    client = ScramClient(SCRAM_SHA_512, user, password)
    if handshake:
        response = raw.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        assert response.error_code == ErrorCode.none
    first = raw.request(SaslAuthenticateRequest(auth_bytes=client.first()))
    if first.error_code != ErrorCode.none:
        return first
    return raw.request(SaslAuthenticateRequest(auth_bytes=client.final(bytes(first.auth_bytes))))


def lifetime_ms(response: Any) -> float:
    return response.session_lifetime.total_seconds() * 1000


def test_a_session_ends_and_the_next_request_closes_the_connection(broker: OAuthBroker) -> None:
    with tls_raw(broker) as raw:
        done = scram(raw, "scrammy", SCRAM_USERS["scrammy"])
        assert done.error_code == ErrorCode.none
        assert lifetime_ms(done) == REAUTH_MS
        assert raw.request(METADATA).brokers  # within the session
        time.sleep(REAUTH_MS / 1000 + 0.3)
        raw.send_bytes(encode_request(99, "t", METADATA))
        assert raw.is_closed_by_peer()


def test_a_session_is_bounded_by_its_tokens_expiry(broker: OAuthBroker) -> None:
    with tls_raw(broker) as raw:
        (done,) = sasl(raw, "OAUTHBEARER", bearer(broker.token(lifetime=1)))
        assert done.error_code == ErrorCode.none, done.error_message
        assert 0 <= lifetime_ms(done) <= 1000


def test_reauthentication_extends_the_session(broker: OAuthBroker) -> None:
    """A request sent after the first session ended, while the one a re-authentication
    1.2 s later began still runs, is served. The first session ended by ``first_done``
    + 2 s at the latest, the second ends ``reauth_sent`` + 2 s at the earliest: a
    connection closed before then is a failure; one closed later says nothing (the
    machine was too slow to send it in the window), and the test tries again."""
    for _ in range(3):
        with tls_raw(broker) as raw:
            assert scram(raw, "scrammy", SCRAM_USERS["scrammy"]).error_code == ErrorCode.none
            first_done = time.monotonic()
            time.sleep(1.2)  # the gap between the two sessions' ends
            reauth_sent = time.monotonic()
            again = scram(raw, "scrammy", SCRAM_USERS["scrammy"])
            assert again.error_code == ErrorCode.none, again.error_message
            assert lifetime_ms(again) == REAUTH_MS
            time.sleep(max(0.0, first_done + REAUTH_MS / 1000 + 0.1 - time.monotonic()))
            raw.send_bytes(encode_request(99, "t", METADATA))
            if not raw.is_closed_by_peer():
                return  # past the first session's end: still served
            assert time.monotonic() >= reauth_sent + REAUTH_MS / 1000, "closed in session"
    raise AssertionError("three tries, each too slow to send a request in the window")


def test_reauthentication_cannot_change_the_principal(broker: OAuthBroker) -> None:
    with tls_raw(broker) as raw:
        assert scram(raw, "scrammy", SCRAM_USERS["scrammy"]).error_code == ErrorCode.none
        # A first re-authentication may come at once (the once-a-second limit is between
        # re-authentications): no wait, which the 2 s session could run out in.
        refused = scram(raw, "other", SCRAM_USERS["other"])
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals" in refused.error_message
        raw.send_bytes(b"\0\0\0\0")
        assert raw.is_closed_by_peer()
    with tls_raw(broker) as raw:  # nor the mechanism
        assert scram(raw, "scrammy", SCRAM_USERS["scrammy"]).error_code == ErrorCode.none
        (refused,) = sasl(raw, "OAUTHBEARER", bearer(broker.token("scrammy")))
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert "re-authentication" in refused.error_message


def test_librdkafka_reauthenticates_without_reconnecting(broker: OAuthBroker) -> None:
    """A producer and a consumer run across three session lifetimes; librdkafka's
    statistics count one connection per broker, so it re-authenticated instead of being
    cut off and reconnecting."""
    topic = new_topic(broker)
    stats: list[dict[str, Any]] = []
    settings = {
        **oauth_settings(broker),
        "statistics.interval.ms": 500,
        "stats_cb": lambda text: stats.append(json.loads(text)),
    }
    producer = Producer({**settings, "acks": "all", "linger.ms": 5})
    outcomes: list[KafkaError | None] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda e, _m: outcomes.append(e))
        sent += 1
        producer.poll(0.02)
    producer.flush(30)
    assert len(outcomes) == sent and all(e is None for e in outcomes)
    connects = {
        name: b["connects"]
        for name, b in stats[-1]["brokers"].items()
        if b["nodeid"] >= 0 and b["connects"]
    }
    assert connects and all(count == 1 for count in connects.values()), connects
    assert consume(oauth_settings(broker), topic, sent)[-1] == f"r{sent - 1}".encode()


def unsigned_token(sub: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'exp': time.time() + 600})}."


def test_refused_topic_admin_of_every_version_is_answered(broker: OAuthBroker) -> None:
    """A topic creation or deletion the ACLs refuse is answered per topic in the shape
    of the request's version (CreateTopics v7 and DeleteTopics v6 carry topic ids)."""
    admin = AdminClient({"bootstrap.servers": broker.process.bootstrap})
    existing = new_topic(broker)
    deny = [
        AclBinding(
            resource,
            name,
            ResourcePatternType.LITERAL,
            "User:dave",
            "*",
            op,
            AclPermissionType.DENY,
        )
        for resource, name, op in [
            (ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE),
            (ResourceType.TOPIC, "*", AclOperation.CREATE),
            (ResourceType.TOPIC, "*", AclOperation.DELETE),
        ]
    ]
    for future in admin.create_acls(deny).values():
        future.result(15)
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as raw:
        (done,) = sasl(raw, "OAUTHBEARER", bearer(unsigned_token("dave")))
        assert done.error_code == ErrorCode.none, done.error_message
        for version in (2, 5, 7):
            module = importlib.import_module(f"kio.schema.create_topics.v{version}.request")
            topic = module.CreatableTopic(
                name="refused", num_partitions=1, replication_factor=1, assignments=(), configs=()
            )
            created = raw.request(
                module.CreateTopicsRequest(
                    topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False
                )
            )
            assert [t.error_code for t in created.topics] == [ErrorCode.topic_authorization_failed]
        deleted = raw.request(
            delete_v6.DeleteTopicsRequest(
                topics=(delete_v6.DeleteTopicState(name=existing, topic_id=uuid.UUID(int=0)),),
                timeout=datetime.timedelta(seconds=10),
            )
        )
        assert [r.error_code for r in deleted.responses] == [ErrorCode.topic_authorization_failed]
    assert existing in admin.list_topics(timeout=10).topics
