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
  as the properties say, built once by ``strom.security.tls.client_context``) and SASL
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with a username and password). The JAAS text
  is read by ``strom.security.sasl.parse_jaas_config``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.security.sasl import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    client_credentials,
    parse_jaas_config,
)
from strom.security.tls import TlsSettings, client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE}


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
    try:
        entries = parse_jaas_config(text)
    except JaasConfigError as exc:
        raise ValueError(f"sasl.jaas.config: {exc}") from None
    if any(entry.login_module not in _LOGIN_MODULES for entry in entries):
        raise ValueError(
            "sasl.jaas.config: only the PlainLoginModule and ScramLoginModule are read "
            "(or give sasl.username and sasl.password)"
        )
    credentials = client_credentials(entries)
    if credentials is None:
        raise ValueError("sasl.jaas.config: the login module needs username and password")
    return credentials


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
    # Built once from the settings above (``strom.security.tls.client_context``) when the
    # protocol is SSL or SASL_SSL: every connection of the tool shares it.
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS client context of these settings; ValueError (``TlsConfigError``,
        one line naming the setting) when a file cannot be read or used."""
        keystore: dict[str, Any] = {}
        if self.cert_file is not None and self.cert_file == self.key_file:
            keystore = {"keystore_location": self.cert_file}  # key and certificate in one file
        elif self.cert_file is not None or self.key_file is not None:
            keystore = {
                "keystore_certificate_chain": _read(self.cert_file, "ssl.certificate.location"),
                "keystore_key": _read(self.key_file, "ssl.key.location"),
            }
        context = client_context(
            TlsSettings(
                truststore_location=self.ca_file,
                key_password=self.key_password,
                endpoint_identification_algorithm="https" if self.check_hostname else "",
                **keystore,
            )
        )
        if not self.verify_certificate:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
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
        if security.tls:
            object.__setattr__(security, "context", security._tls_context())
        return security


def _read(path: str | None, key: str) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
