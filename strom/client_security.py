"""The security settings of Strom's own clients (the tools), in the names users have.

Owns two things:

- ``librdkafka_properties``: a client properties file as librdkafka (confluent-kafka)
  takes it. A Kafka user's file for Kafka's tools is written for the Java client, so
  its names are translated: ``sasl.jaas.config`` with the PLAIN or SCRAM login module
  becomes ``sasl.username`` / ``sasl.password``, ``sasl.mechanism`` stays (librdkafka
  takes it), a PEM ``ssl.truststore.location`` becomes ``ssl.ca.location``, a PEM
  ``ssl.keystore.location`` (certificate and key in one file) becomes
  ``ssl.certificate.location`` and ``ssl.key.location``, and an empty
  ``ssl.endpoint.identification.algorithm`` becomes ``none``. JKS and PKCS12 stores,
  and other login modules, are a ValueError naming the setting (one line for the tool).
- ``ClientSecurity``: what a raw-protocol connection (``wire_client``) needs from those
  properties: TLS (a context with the CA, the client certificate and hostname checking
  as the properties say) and SASL (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with a
  username and password).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_JAAS = re.compile(r"^\s*(\S+)\s+(required|requisite|sufficient|optional)\s+(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')


def librdkafka_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` with the Java client's security names translated to librdkafka's."""
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        username, password = _jaas_credentials(str(jaas))
        out.setdefault("sasl.username", username)
        out.setdefault("sasl.password", password)
    truststore = out.pop("ssl.truststore.location", None)
    truststore_type = str(out.pop("ssl.truststore.type", "JKS" if truststore else "PEM"))
    out.pop("ssl.truststore.password", None)  # a PEM truststore has none
    if truststore is not None:
        if truststore_type.upper() != "PEM":
            raise ValueError(
                f"ssl.truststore.type={truststore_type}: only PEM stores are read "
                "(or give ssl.ca.location)"
            )
        out.setdefault("ssl.ca.location", truststore)
    keystore = out.pop("ssl.keystore.location", None)
    keystore_type = str(out.pop("ssl.keystore.type", "JKS" if keystore else "PEM"))
    keystore_password = out.pop("ssl.keystore.password", None)
    if keystore is not None:
        if keystore_type.upper() != "PEM":
            raise ValueError(
                f"ssl.keystore.type={keystore_type}: only PEM stores are read "
                "(or give ssl.certificate.location and ssl.key.location)"
            )
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
        if keystore_password is not None:
            out.setdefault("ssl.key.password", keystore_password)
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def _jaas_credentials(text: str) -> tuple[str, str]:
    match = _JAAS.match(text)
    if match is None or match.group(1) not in _LOGIN_MODULES:
        raise ValueError(
            "sasl.jaas.config: only the PlainLoginModule and ScramLoginModule are read "
            "(or give sasl.username and sasl.password)"
        )
    options = {
        m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group(3))
    }
    if "username" not in options or "password" not in options:
        raise ValueError("sasl.jaas.config: the login module needs username and password")
    return options["username"], options["password"]


@dataclass(frozen=True)
class ClientSecurity:
    """How a raw-protocol client connects: the listener's protocol and what it asks."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    verify_certificate: bool = True
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify_certificate:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not self.check_hostname:
            context.check_hostname = False
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file, self.key_password)
        return context

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ClientSecurity:
        """From librdkafka-named properties (``librdkafka_properties`` first for a Java
        client's file); ValueError naming a setting that cannot be served."""
        protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol={protocol}: expected one of {PROTOCOLS}")
        mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "PLAIN")))
        mechanism = mechanism.upper()
        security = cls(
            protocol=protocol,
            mechanism=mechanism,
            username=props.get("sasl.username"),
            password=props.get("sasl.password"),
            ca_file=props.get("ssl.ca.location"),
            cert_file=props.get("ssl.certificate.location"),
            key_file=props.get("ssl.key.location"),
            key_password=props.get("ssl.key.password"),
            verify_certificate=str(props.get("enable.ssl.certificate.verification", "true"))
            .lower()
            .strip()
            != "false",
            check_hostname=str(props.get("ssl.endpoint.identification.algorithm", "https"))
            .lower()
            .strip()
            != "none",
        )
        if security.sasl:
            if mechanism not in MECHANISMS:
                raise ValueError(f"sasl.mechanism={mechanism}: expected one of {MECHANISMS}")
            if security.username is None or security.password is None:
                raise ValueError(
                    f"security.protocol={protocol} needs sasl.username and sasl.password "
                    "(or sasl.jaas.config)"
                )
        return security
