"""TLS settings without a broker: contexts from PEM files and inline PEM, each bad
setting refused in one line naming the property, subjects in RFC 2253 form, the
principal mapping rules, and the listener security a BrokerConfig gives."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from tls_certs import Authority, make_ca

from strom.broker.access.authentication import ListenerSecurity, peer_security
from strom.config import BrokerConfig, ConfigError
from strom.security.tls import (
    NoMatchingRule,
    PrincipalMapper,
    ReloadingContext,
    TlsConfigError,
    TlsSettings,
    client_context,
    server_context,
    subject_dn,
)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_ca(tmp_path_factory.mktemp("ca"))


def der_of(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def test_subject_in_rfc2253_form(ca: Authority) -> None:
    issued = ca.issue("odd", "/C=US/ST=New York/O=Acme, Inc./OU=eng/CN=#alice<co>")
    assert subject_dn(der_of(issued.cert)) == (
        "CN=\\#alice\\<co\\>,OU=eng,O=Acme\\, Inc.,ST=New York,C=US"
    )
    with_mail = ca.issue("mail", "/CN=bob/emailAddress=bob@example.org")
    # An attribute without a short name is its OID and the hex of its DER value.
    assert subject_dn(der_of(with_mail.cert)) == (
        "1.2.840.113549.1.9.1=#160f626f62406578616d706c652e6f7267,CN=bob"
    )


def test_principal_mapping_rules() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=.*$/$1/U, DEFAULT"
    )
    assert mapper.name_of("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name_of("CN=Duke,OU=JavaSoft,O=Sun Microsystems") == "duke@javasoft"
    assert mapper.name_of("cn=duke,ou=javasoft,dc=example") == "DUKE"
    assert mapper.name_of("C=US") == "C=US"  # DEFAULT: the subject as it is
    strict = PrincipalMapper("RULE:^CN=(.*)$/$1/")
    with pytest.raises(NoMatchingRule):
        strict.name_of("O=Org")
    for bad in ["RULE:^CN=(.*)$", "RULE:(/x/", "NOT A RULE"]:
        with pytest.raises(TlsConfigError, match="ssl.principal.mapping.rules"):
            PrincipalMapper(bad)


def test_contexts_from_files_and_inline_pem(ca: Authority) -> None:
    server = ca.issue("server", "/CN=localhost")
    context = server_context(
        TlsSettings(
            keystore_location=str(server.bundle),
            truststore_location=str(ca.cert),
            client_auth="required",
        )
    )
    assert context.verify_mode == ssl.CERT_REQUIRED
    one_line = " ".join(server.cert.read_text().splitlines())  # whitespace does not matter
    inline = server_context(
        TlsSettings(keystore_certificate_chain=one_line, keystore_key=server.key.read_text())
    )
    assert inline.verify_mode == ssl.CERT_NONE
    assert client_context(TlsSettings(truststore_certificates=ca.cert.read_text())).check_hostname


def test_an_encrypted_key_needs_its_password(ca: Authority) -> None:
    server = ca.issue("locked", "/CN=localhost", key_password="s3cret")
    server_context(TlsSettings(keystore_location=str(server.bundle), key_password="s3cret"))
    with pytest.raises(TlsConfigError, match="ssl.keystore.location: .*ssl.key.password"):
        server_context(TlsSettings(keystore_location=str(server.bundle), key_password="no"))


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"keystore_location": "/nonexistent.pem"}, "ssl.keystore.location: cannot read"),
        ({"keystore_type": "JKS"}, "ssl.keystore.type: JKS is not served"),
        ({"client_auth": "required", "truststore_location": None}, "needs a truststore"),
        ({"client_auth": "sometimes"}, "ssl.client.auth: must be one of"),
        ({"enabled_protocols": ("TLSv1",)}, "ssl.enabled.protocols: TLSv1 is not served"),
        ({"cipher_suites": ("NO_SUCH_CIPHER",)}, "ssl.cipher.suites"),
        ({"truststore_location": "/nonexistent-ca.pem"}, "ssl.truststore.location: cannot read"),
        ({"keystore_location": "CA"}, "ssl.keystore.location: holds no private key"),
        ({"keystore_location": None}, "needs its key and certificate"),
    ],
)
def test_bad_settings_are_one_line(ca: Authority, change: dict, needle: str) -> None:
    server = ca.issue("bad", "/CN=localhost")
    values = {"keystore_location": str(server.bundle), "prefix": "listener SSL: ", **change}
    for key, value in values.items():
        if value == "CA":
            values[key] = str(ca.cert)
    with pytest.raises(TlsConfigError) as info:
        server_context(TlsSettings(**values))
    message = str(info.value)
    assert needle in message and "\n" not in message and message.startswith("listener SSL: ")


def test_cipher_suites_by_iana_or_openssl_name(ca: Authority) -> None:
    server = ca.issue("ciphers", "/CN=localhost")
    for suites in [
        ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",),
        ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLS_AES_128_GCM_SHA256"),
    ]:
        server_context(TlsSettings(keystore_location=str(server.bundle), cipher_suites=suites))


def test_listener_security_from_broker_config(ca: Authority) -> None:
    server = ca.issue("listener", "/CN=localhost")
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";'
    )
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.location": str(server.bundle),
            "listener.name.sasl_ssl.ssl.keystore.location": str(server.bundle),
            "listener.name.ssl.ssl.truststore.location": str(ca.cert),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        }
    )
    ssl_listener = ListenerSecurity.of(config, "SSL")
    assert ssl_listener.tls is not None and not ssl_listener.sasl
    assert ssl_listener.tls.context.verify_mode == ssl.CERT_REQUIRED
    sasl = ListenerSecurity.of(config, "SASL_SSL")
    assert sasl.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert sasl.plain_users == {"alice": "alice-secret"}
    assert sasl.tls is not None and sasl.tls.context.verify_mode == ssl.CERT_NONE
    assert ListenerSecurity.of(config, "PLAINTEXT").tls is None


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "GSSAPI is not served"),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent"},
            "cannot read /nonexistent",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
            "SASL/PLAIN on listener SASL_PLAINTEXT needs",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": "org.Module required user_a=b",
            },
            "sasl.jaas.config: the options of org.Module must end with ';'",
        ),
        ({"listener.name.ssl.ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ],
)
def test_bad_listener_security_is_one_line(props: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        config = BrokerConfig(props)
        for listener in config.parsed_listeners:
            ListenerSecurity.of(config, listener.name)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_broker_reports_bad_tls_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "strom.cli.main", "broker", "--override", "listeners=SSL://127.0.0.1:0",
            "--override", f"log.dirs={tmp_path}",
            "--override", f"ssl.keystore.location={tmp_path / 'missing.pem'}",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("strom broker: listener SSL: ssl.keystore.location: cannot read")
    assert "Traceback" not in result.stderr


def test_peer_security_of_the_inter_broker_listener(ca: Authority) -> None:
    server = ca.issue("peer", "/CN=localhost")
    props = {
        "listeners": "INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "ssl.keystore.location": str(server.bundle),
        "ssl.truststore.location": str(ca.cert),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    }
    key = "sasl.mechanism.inter.broker.protocol"
    with pytest.raises(ConfigError, match="need username=.* in listener.name.internal"):
        peer_security(BrokerConfig(props), "INTERNAL", key)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="broker-secret";'
    )
    config = BrokerConfig({**props, "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas})
    security = peer_security(config, "INTERNAL", key)
    assert security is not None and security.ssl_context is not None
    assert (security.sasl_mechanism, security.username, security.password) == (
        "SCRAM-SHA-512",
        "broker",
        "broker-secret",
    )
    assert peer_security(config, "CONTROLLER", "sasl.mechanism.controller.protocol") is None
    with pytest.raises(ConfigError, match="GSSAPI is not served"):
        peer_security(BrokerConfig({**props, key: "GSSAPI"}), "INTERNAL", key)


def test_a_keystore_that_no_longer_loads_keeps_the_previous_context(
    ca: Authority, tmp_path: Path
) -> None:
    first = ca.issue("reload-a", "/CN=localhost")
    second = ca.issue("reload-b", "/CN=localhost")
    keystore = tmp_path / "keystore.pem"
    keystore.write_text(first.bundle.read_text())
    reloading = ReloadingContext(TlsSettings(keystore_location=str(keystore)), name="SSL")
    original = reloading.current()
    keystore.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    reloading._checked = 0.0  # as if the check interval had passed
    assert reloading.current() is original
    keystore.write_text(second.bundle.read_text() + "\n")
    reloading._checked = 0.0
    renewed = reloading.current()
    assert renewed is not original
    reloading._checked = 0.0
    assert reloading.current() is renewed  # unchanged files: the same context
