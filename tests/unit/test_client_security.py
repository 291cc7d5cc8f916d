"""The tools' client properties: the Java client's security names, and what a raw
connection takes from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tls_certs import make_ca

from strom.client_security import ClientSecurity, librdkafka_properties


def test_a_java_client_file_becomes_librdkafkas_names(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    me = ca.issue("me", "/CN=me")
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="alice" password="p\\"w;d";',
        "ssl.truststore.location": str(ca.cert),
        "ssl.truststore.type": "PEM",
        "ssl.keystore.location": str(me.bundle),
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
        "ssl.ca.location": str(ca.cert),
        "ssl.certificate.location": str(me.bundle),
        "ssl.key.location": str(me.bundle),
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }
    security = ClientSecurity.from_properties(props)
    assert (security.tls, security.sasl, security.mechanism) == (True, True, "SCRAM-SHA-512")
    assert (security.username, security.check_hostname) == ("alice", False)
    assert security.context is not None and not security.context.check_hostname


def test_librdkafka_names_pass_as_they_are(tmp_path: Path) -> None:
    ca = str(make_ca(tmp_path / "ca").cert)
    props = {"security.protocol": "SSL", "ssl.ca.location": ca, "linger.ms": "5"}
    assert librdkafka_properties(props) == props
    security = ClientSecurity.from_properties(props)
    assert (security.tls, security.sasl, security.ca_file) == (True, False, ca)
    assert security.context is not None and security.context.check_hostname


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
        ({"security.protocol": "SSL", "ssl.ca.location": "/no/ca.pem"}, "cannot read /no/ca.pem"),
    ],
)
def test_connection_settings_that_cannot_be_served_are_named(
    props: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        ClientSecurity.from_properties(props)
