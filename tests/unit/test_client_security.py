"""The tools' client properties: the Java client's security names, and what a raw
connection takes from them."""

from __future__ import annotations

import pytest

from strom.client_security import ClientSecurity, librdkafka_properties


def test_a_java_client_file_becomes_librdkafkas_names() -> None:
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="p\\"w;d";',
        "ssl.truststore.location": "/ca.pem",
        "ssl.truststore.type": "PEM",
        "ssl.keystore.location": "/me.pem",
        "ssl.keystore.type": "PEM",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "",
    }
    props = librdkafka_properties(java)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 'p"w;d',  # a quoted value's escapes undone
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/me.pem",
        "ssl.key.location": "/me.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }
    security = ClientSecurity.from_properties(props)
    assert (security.tls, security.sasl, security.mechanism) == (True, True, "SCRAM-SHA-512")
    assert (security.username, security.check_hostname) == ("alice", False)


def test_librdkafka_names_pass_as_they_are() -> None:
    props = {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem", "linger.ms": "5"}
    assert librdkafka_properties(props) == props
    security = ClientSecurity.from_properties(props)
    assert (security.tls, security.sasl, security.ca_file) == (True, False, "/ca.pem")


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"ssl.truststore.location": "/t.jks"}, "ssl.truststore.type=JKS"),
        ({"ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12"}, "PKCS12"),
        ({"sasl.jaas.config": "com.example.Login required a=1;"}, "sasl.jaas.config"),
        ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
          'required username="u";'}, "username and password"),
    ],
)  # fmt: skip
def test_what_cannot_be_read_is_named(props: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        librdkafka_properties(props)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"security.protocol": "KERBEROS"}, "security.protocol"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.username"),
    ],
)
def test_connection_settings_that_cannot_be_served_are_named(
    props: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        ClientSecurity.from_properties(props)
