"""SASL mechanisms without a broker: RFC 7677's SCRAM-SHA-256 example, both sides of
SCRAM-SHA-256/512 against each other, PLAIN, the JAAS syntax, and random tokens that
must end in a refusal, never another exception."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.security.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    JaasConfigError,
    PlainServer,
    SaslAuthenticationFailed,
    ScramClient,
    ScramServer,
    client_credentials,
    new_credential,
    parse_jaas_config,
    plain_users,
)


def test_rfc7677_example() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = new_credential(SCRAM_SHA_256, "pencil", 4096, salt)
    server = ScramServer(
        SCRAM_SHA_256,
        {"user": credential}.get,
        nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_client_and_server_agree(mechanism) -> None:
    users = {"a,b=c": new_credential(mechanism, "secret")}  # a name that needs escaping
    server = ScramServer(mechanism, users.get)
    client = ScramClient(mechanism, "a,b=c", "secret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.username == "a,b=c"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "secret")])
def test_scram_refuses_a_wrong_password_or_unknown_user(user: str, password: str) -> None:
    users = {"alice": new_credential(SCRAM_SHA_512, "secret")}
    server = ScramServer(SCRAM_SHA_512, users.get)
    client = ScramClient(SCRAM_SHA_512, user, password)
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.evaluate(client.final(server.evaluate(client.first())))
    assert not server.complete
    with pytest.raises(SaslAuthenticationFailed):  # and it stays failed
        server.evaluate(client.first())


def test_scram_refuses_a_proof_made_for_another_exchange_and_channel_binding() -> None:
    users = {"alice": new_credential(SCRAM_SHA_256, "secret")}
    client = ScramClient(SCRAM_SHA_256, "alice", "secret")
    first_server = ScramServer(SCRAM_SHA_256, users.get)
    final = client.final(first_server.evaluate(client.first()))
    second_server = ScramServer(SCRAM_SHA_256, users.get)
    second_server.evaluate(client.first())
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        second_server.evaluate(final)  # its nonce is another server's
    with pytest.raises(SaslAuthenticationFailed, match="channel binding"):
        ScramServer(SCRAM_SHA_256, users.get).evaluate(b"p=tls-unique,,n=alice,r=abc")


def test_plain() -> None:
    server = PlainServer({"alice": "secret"})
    assert server.evaluate(b"\0alice\0secret") == b""
    assert server.complete and server.username == "alice"
    for token, reason in [
        (b"\0alice\0wrong", "Invalid username or password"),
        (b"\0bob\0secret", "Invalid username or password"),
        (b"bob\0alice\0secret", "authorization id"),
        (b"alice\0secret", "expected 3 tokens"),
        (b"\0\0secret", "username not specified"),
    ]:
        with pytest.raises(SaslAuthenticationFailed, match=reason):
            PlainServer({"alice": "secret"}).evaluate(token)


def test_jaas_config() -> None:
    entries = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="a \\"quoted\\" secret";'
    )
    assert plain_users(entries) == {"admin": "admin-secret", "alice": 'a "quoted" secret'}
    assert client_credentials(entries) == ("admin", "admin-secret")
    for bad in [
        "",
        "org.Module required username=admin",  # no ';'
        "org.Module mandatory;",
        "org.Module required username;",
    ]:
        with pytest.raises(JaasConfigError):
            parse_jaas_config(bad)


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_random_tokens_end_in_a_refusal(tokens: list[bytes]) -> None:
    users = {"alice": new_credential(SCRAM_SHA_256, "secret", salt=b"salt")}
    for server in (ScramServer(SCRAM_SHA_256, users.get), PlainServer({"alice": "secret"})):
        try:
            for token in tokens:
                server.evaluate(token)
        except SaslAuthenticationFailed:
            continue
        assert not server.complete or server.username == "alice"


def test_scram_takes_the_nonce_librdkafka_2_0_sends() -> None:
    """librdkafka before 2.1 puts its own nonce in front of the server's (which begins
    with it) in client-final; Kafka accepts a nonce that ends with the one it sent."""
    scram = SCRAM_SHA_256
    salt = b"0123456789abcdef"
    users = {"alice": new_credential(scram, "secret", salt=salt)}
    server = ScramServer(scram, users.get)
    bare = "n=alice,r=clientnonce"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    server_nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r=clientnonce{server_nonce}"  # the client nonce twice
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    salted = scram.salted_password("secret", salt, 4096)
    client_key = scram.hmac(salted, b"Client Key")
    signature = scram.hmac(scram.digest(client_key), auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    server_final = server.evaluate(final)
    expected = scram.hmac(scram.hmac(salted, b"Server Key"), auth_message)
    assert server_final == b"v=" + base64.b64encode(expected)
    assert server.complete
