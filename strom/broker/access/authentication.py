"""Who a connection is: each listener's security (TLS context, SASL mechanisms, users)
and each connection's authentication, SaslHandshake (17) v0-1 and SaslAuthenticate (36)
v0-2.

A listener's security comes from its protocol in ``listener.security.protocol.map``:
SSL and SASL_SSL listeners speak TLS (``strom.security.tls``; a client certificate on
an SSL listener names the principal, ``User:<subject DN>`` mapped by
``ssl.principal.mapping.rules``), SASL_PLAINTEXT and SASL_SSL listeners authenticate
with ``sasl.enabled.mechanisms`` (PLAIN users from the listener's JAAS configuration,
SCRAM credentials from the metadata image, OAUTHBEARER tokens checked against the JWKS of
``sasl.oauthbearer.jwks.endpoint.url``, or unsigned ones as Kafka's default validator
takes them when none is set). Every setting may be given per listener as
``listener.name.<listener>.<property>``.

Until a SASL connection has authenticated it is served ApiVersions, SaslHandshake and
SaslAuthenticate only; anything else closes it, as Kafka does. SaslHandshake v1 is
followed by SaslAuthenticate requests, v0 by the mechanism's tokens framed bare (KIP-43).
An unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with those enabled; a failed
authentication SASL_AUTHENTICATION_FAILED with the reason; either way the connection
closes once the answer is sent. On a connection that needs no SASL, or has finished it,
both APIs answer ILLEGAL_SASL_STATE.

Re-authentication (KIP-368): a session ends after ``connections.max.reauth.ms`` (per
listener and mechanism as ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``),
or when its OAUTHBEARER token expires if sooner; SaslAuthenticate v1+ tells the client
the session's lifetime. Within it the client authenticates again on the same connection
(SaslHandshake v1 with the same mechanism, then SaslAuthenticate, at most once a
second) as the same principal; a connection whose session has ended and that sends
anything else is closed, as Kafka closes it. GSSAPI and delegation tokens are not served.

Also builds the security of this node's own connections to other nodes
(``peer_security``): a TLS or SASL inter-broker or controller listener is reached with
that listener's ``ssl.*`` settings (its keystore as client certificate), the mechanism of
``sasl.mechanism.inter.broker.protocol`` or ``sasl.mechanism.controller.protocol``, and the
``username``/``password`` of that listener's JAAS configuration, as Kafka's brokers do.

Does not own the mechanisms (``strom.security.sasl``), certificates
(``strom.security.tls``) or the connection loop (``server``).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.broker.network.peer_client import PeerSecurity
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.config import (
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    BrokerConfig,
    ConfigError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build
from strom.security.oauthbearer import (
    OAUTHBEARER,
    OAUTHBEARER_LOGIN_MODULE,
    UNSECURED_VALIDATOR_CLASS,
    VALIDATOR_CLASSES,
    JwksError,
    JwksKeys,
    JwtValidator,
    OAuthBearerServer,
    UnsecuredValidator,
    Validator,
)
from strom.security.principal import ANONYMOUS, USER, KafkaPrincipal
from strom.security.sasl import (
    PLAIN,
    SCRAM_MECHANISMS,
    JaasConfigError,
    PlainServer,
    SaslAuthenticationFailed,
    ScramCredential,
    ScramServer,
    client_credentials,
    parse_jaas_config,
    plain_users,
)
from strom.security.tls import (
    CertificateError,
    NoMatchingRule,
    PrincipalMapper,
    ReloadingContext,
    TlsConfigError,
    TlsSettings,
    client_context,
    subject_dn,
)

if TYPE_CHECKING:
    from strom.broker.network.router import NodeServices
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
NO_SESSION_LIFETIME = datetime.timedelta(0)


def tls_settings(config: BrokerConfig, listener: str) -> TlsSettings:
    """A listener's ``ssl.*`` settings (its ``listener.name.<l>.`` overrides first)."""

    def value(key: str) -> Any:
        return config.listener_value(listener, key)

    return TlsSettings(
        keystore_type=value("ssl.keystore.type"),
        keystore_location=value("ssl.keystore.location"),
        keystore_certificate_chain=value("ssl.keystore.certificate.chain"),
        keystore_key=value("ssl.keystore.key"),
        key_password=value("ssl.key.password"),
        truststore_type=value("ssl.truststore.type"),
        truststore_location=value("ssl.truststore.location"),
        truststore_certificates=value("ssl.truststore.certificates"),
        client_auth=value("ssl.client.auth"),
        enabled_protocols=tuple(value("ssl.enabled.protocols")),
        cipher_suites=tuple(value("ssl.cipher.suites")),
        endpoint_identification_algorithm=value("ssl.endpoint.identification.algorithm") or "",
        prefix=f"listener {listener}: ",
    )


@dataclass
class ListenerSecurity:
    """What a connection on one listener goes through before it is served."""

    name: str
    protocol: str = "PLAINTEXT"
    tls: ReloadingContext | None = None
    mapper: PrincipalMapper = field(default_factory=PrincipalMapper)
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth: Validator | None = None
    # connections.max.reauth.ms per mechanism (0: sessions do not end)
    reauth_ms: dict[str, int] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @classmethod
    def of(cls, config: BrokerConfig, listener: str) -> ListenerSecurity:
        """The listener's security from the config; ConfigError (one line) if unusable."""
        try:
            protocol = config.security_protocol(listener)
        except ConfigError:
            protocol = "PLAINTEXT"
        security = cls(listener, protocol)
        try:
            if protocol in TLS_PROTOCOLS:
                security.tls = ReloadingContext(tls_settings(config, listener), name=listener)
                security.mapper = PrincipalMapper(
                    config.listener_value(listener, "ssl.principal.mapping.rules")
                )
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
        if protocol in SASL_PROTOCOLS:
            security.mechanisms = tuple(config.sasl_mechanisms(listener))
            if PLAIN in security.mechanisms:
                security.plain_users = _plain_users(config, listener)
            if OAUTHBEARER in security.mechanisms:
                security.oauth = _oauth_validator(config, listener)
            security.reauth_ms = {
                mechanism: int(
                    config.mechanism_value(listener, mechanism, "connections.max.reauth.ms")
                )
                for mechanism in security.mechanisms
            }
        return security


def _oauth_validator(config: BrokerConfig, listener: str) -> Validator:
    """How a listener checks OAUTHBEARER tokens: against a JWKS when one is configured
    (or the validator class asks for it), else unsigned tokens, Kafka's default."""
    handler_key = "sasl.server.callback.handler.class"
    handler = config.mechanism_value(listener, OAUTHBEARER, handler_key)
    url = config.mechanism_value(listener, OAUTHBEARER, "sasl.oauthbearer.jwks.endpoint.url")
    if handler is not None and handler not in VALIDATOR_CLASSES + (UNSECURED_VALIDATOR_CLASS,):
        raise ConfigError(
            f"listener.name.{listener.lower()}.oauthbearer.{handler_key}: {handler} is not "
            f"served; Strom validates OAUTHBEARER tokens with {VALIDATOR_CLASSES[0]} (set "
            "sasl.oauthbearer.jwks.endpoint.url) or the unsecured validator"
        )
    if url and handler != UNSECURED_VALIDATOR_CLASS:

        def value(key: str) -> Any:
            return config.mechanism_value(listener, OAUTHBEARER, key)

        try:
            keys = JwksKeys(url, int(value("sasl.oauthbearer.jwks.endpoint.refresh.ms")))
        except JwksError as exc:
            raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url: {exc}") from None
        return JwtValidator(
            keys,
            tuple(value("sasl.oauthbearer.expected.audience")),
            value("sasl.oauthbearer.expected.issuer"),
            value("sasl.oauthbearer.sub.claim.name"),
            value("sasl.oauthbearer.scope.claim.name"),
            int(value("sasl.oauthbearer.clock.skew.seconds")),
        )
    if handler in VALIDATOR_CLASSES:
        raise ConfigError(
            f"{handler} on listener {listener} needs sasl.oauthbearer.jwks.endpoint.url "
            "(an http(s) or file URL of the identity provider's JWKS)"
        )
    options: dict[str, str] = {}
    found = config.jaas_config(listener, OAUTHBEARER)
    if found is not None:
        try:
            entries = parse_jaas_config(found[1])
        except JaasConfigError as exc:
            raise ConfigError(f"{found[0]}: {exc}") from None
        for entry in entries:
            if entry.login_module == OAUTHBEARER_LOGIN_MODULE:
                options.update(entry.options)
    try:
        validator = UnsecuredValidator.from_jaas_options(options)
    except ValueError as exc:
        raise ConfigError(f"{found[0] if found else 'sasl.jaas.config'}: {exc}") from None
    log.warning(
        "listener %s takes unsigned OAUTHBEARER tokens (no sasl.oauthbearer.jwks.endpoint.url "
        "is set): for development only",
        listener,
    )
    return validator


def _plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    found = config.jaas_config(listener, PLAIN)
    wanted = (
        f"listener.name.{listener.lower()}.plain.sasl.jaas.config with the PlainLoginModule "
        'and a user_<name>="<password>" option per user'
    )
    if found is None:
        raise ConfigError(f"SASL/PLAIN on listener {listener} needs {wanted}")
    key, text = found
    try:
        users = plain_users(parse_jaas_config(text))
    except JaasConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not users:
        raise ConfigError(
            f"{key} names no PLAIN user: SASL/PLAIN on listener {listener} needs {wanted}"
        )
    return users


def peer_security(
    config: BrokerConfig, listener: str | None, mechanism_key: str
) -> PeerSecurity | None:
    """How this node connects to ``listener`` of other nodes (None: plaintext);
    ``mechanism_key`` names the property holding the SASL mechanism to use."""
    if listener is None:
        return None
    try:
        protocol = config.security_protocol(listener)
    except ConfigError:
        return None
    if protocol not in TLS_PROTOCOLS and protocol not in SASL_PROTOCOLS:
        return None
    context = None
    if protocol in TLS_PROTOCOLS:
        try:
            context = client_context(tls_settings(config, listener))
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None
    if protocol not in SASL_PROTOCOLS:
        return PeerSecurity(context)
    mechanism = str(config[mechanism_key]).upper()
    if mechanism not in SASL_MECHANISMS or mechanism == OAUTHBEARER:
        raise ConfigError(
            f"{mechanism_key}: {mechanism} is not served (listener {listener} is {protocol}); "
            f"Strom's nodes authenticate to each other with PLAIN, SCRAM-SHA-256 or "
            "SCRAM-SHA-512"
        )
    found = config.jaas_config(listener, mechanism)
    login = None
    if found is not None:
        try:
            login = client_credentials(parse_jaas_config(found[1]))
        except JaasConfigError as exc:
            raise ConfigError(f"{found[0]}: {exc}") from None
    if login is None:
        raise ConfigError(
            f"this node's own {mechanism} connections to listener {listener} need "
            f'username="..." password="..." in listener.name.{listener.lower()}.'
            f"{mechanism.lower()}.sasl.jaas.config (or sasl.jaas.config)"
        )
    return PeerSecurity(context, mechanism, login[0], login[1])


class ConnectionSession:
    """One connection's authentication: its principal, and the SASL exchange under way."""

    def __init__(self, broker: NodeServices, security: ListenerSecurity) -> None:
        self.broker = broker
        self.security = security
        self.listener = security.name
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticated = not security.sasl
        self.server: PlainServer | ScramServer | OAuthBearerServer | _Refused | None = None
        self.mechanism: str | None = None  # the mechanism the session authenticated with
        self.raw_tokens = False  # after SaslHandshake v0: tokens come framed bare
        self.close_after_response = False
        # KIP-368: when the session ends (time.monotonic()); None: it does not
        self.expires_at: float | None = None
        self.session_lifetime_ms = 0
        self.reauthenticating = False
        self.reauthentication_started = float("-inf")
        self.reauthentications = 0
        # Called once when the connection closes, by key (a later one of the same key
        # replaces it): the share sessions opened on it end then.
        self.on_close: dict[object, Callable[[], None]] = {}

    def expired(self) -> bool:
        """Whether the session has ended (a request other than SaslHandshake then closes
        the connection)."""
        return self.expires_at is not None and time.monotonic() > self.expires_at

    def allows(self, api_key: int) -> bool:
        return self.authenticated or api_key in BEFORE_AUTHENTICATION

    def tls_established(self, ssl_object: ssl.SSLObject | None) -> None:
        """Take the principal from the client's certificate (an SSL listener only; on
        SASL_SSL the SASL identity wins). ValueError when no mapping rule applies."""
        if ssl_object is None or self.security.sasl:
            return
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return
        try:
            name = self.security.mapper.name_of(subject_dn(der))
        except (CertificateError, NoMatchingRule) as exc:
            raise ValueError(str(exc)) from None
        self.principal = KafkaPrincipal(USER, name)

    # SASL -----------------------------------------------------------------------------

    def start(self, mechanism: str, version: int = 1) -> ErrorCode:
        if not self.security.sasl:
            return ErrorCode.illegal_sasl_state  # as Kafka answers it; the connection goes on
        if self.authenticated:
            now = time.monotonic()
            if self.expires_at is None or version < 1 or now - self.reauthentication_started < 1:
                return ErrorCode.illegal_sasl_state  # no re-authentication: the same answer
            self.reauthentication_started = now
            self.reauthenticating, self.authenticated = True, False
            if mechanism != self.mechanism:
                self.server = _Refused(
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'"
                )
                return ErrorCode.none
            self.server = None
        if self.server is not None:
            self.close_after_response = True
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.security.mechanisms:
            self.close_after_response = True
            return ErrorCode.unsupported_sasl_mechanism
        if mechanism == PLAIN:
            self.server = PlainServer(self.security.plain_users)
        elif mechanism == OAUTHBEARER:
            assert self.security.oauth is not None
            self.server = OAuthBearerServer(self.security.oauth)
        else:
            scram = SCRAM_MECHANISMS[mechanism]
            image_of = self.broker.state

            def lookup(user: str) -> ScramCredential | None:
                record = image_of.image.scram_credentials.get((user, scram.kafka_type))
                if record is None:
                    return None
                return ScramCredential(
                    record.salt, record.stored_key, record.server_key, record.iterations
                )

            self.server = ScramServer(scram, lookup)
        return ErrorCode.none

    def evaluate(self, token: bytes) -> bytes:
        """The mechanism's answer to a token; SaslAuthenticationFailed ends the session."""
        server = self.server
        if server is None or self.authenticated:
            self.close_after_response = True
            raise SaslAuthenticationFailed("Unexpected SASL token: no SASL exchange under way")
        try:
            answer = server.evaluate(token)
        except SaslAuthenticationFailed as exc:
            self.close_after_response = True
            if self.broker.metrics is not None:
                self.broker.metrics.failed_authentications += 1
            log.info(
                "authentication with %s failed on listener %s: %s",
                server.mechanism,
                self.listener,
                exc,
            )
            raise
        if server.complete:
            assert server.username is not None
            principal = KafkaPrincipal(USER, server.username)
            if self.reauthenticating and principal != self.principal:
                self.close_after_response = True
                raise SaslAuthenticationFailed(
                    "Cannot change principals during re-authentication from "
                    f"{self.principal.principal_type}.{self.principal.name}: "
                    f"{principal.principal_type}.{principal.name}"
                )
            if self.reauthenticating:
                self.reauthentications += 1
                log.debug("re-authenticated %s on listener %s", principal, self.listener)
            self.principal = principal
            self.mechanism = server.mechanism
            self.authenticated = True
            self.reauthenticating = False
            self.raw_tokens = False
            self._start_session(getattr(server, "expires_ms", None))
        return answer

    def _start_session(self, credential_expires_ms: int | None) -> None:
        """The session's lifetime: ``connections.max.reauth.ms`` for its mechanism, or
        the credential's remaining life if sooner (Kafka's rule); 0 when neither ends it."""
        assert self.mechanism is not None
        max_reauth = self.security.reauth_ms.get(self.mechanism, 0)
        if credential_expires_ms is None and max_reauth <= 0:
            self.expires_at, self.session_lifetime_ms = None, 0
            return
        lifetimes = [max_reauth] if max_reauth > 0 else []
        if credential_expires_ms is not None:
            lifetimes.append(credential_expires_ms - int(time.time() * 1000))
        lifetime = max(0, min(lifetimes))
        self.session_lifetime_ms = lifetime
        self.expires_at = time.monotonic() + lifetime / 1000


class _Refused:
    """A re-authentication with another mechanism: its first token fails, as Kafka's."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.complete = False
        self.mechanism = "?"
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise SaslAuthenticationFailed(self.message)


# Handlers ------------------------------------------------------------------------------


def _session(ctx: RequestContext) -> ConnectionSession | None:
    session = ctx.session
    return session if isinstance(session, ConnectionSession) else None


@handles_controller(SASL_HANDSHAKE, 0, 1)
@handles(SASL_HANDSHAKE, 0, 1)
def handle_sasl_handshake(ctx: RequestContext, request: req.SaslHandshake) -> resp.SaslHandshake:
    response_type: type[resp.SaslHandshake] = ctx.response_type
    session = _session(ctx)
    if session is None:
        return build(response_type, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    code = session.start(request.mechanism, ctx.api_version)
    if code == ErrorCode.none and ctx.api_version == 0:
        session.raw_tokens = True
    return build(response_type, error_code=code, mechanisms=session.security.mechanisms)


@handles_controller(SASL_AUTHENTICATE, 0, 2)
@handles(SASL_AUTHENTICATE, 0, 2)
def handle_sasl_authenticate(
    ctx: RequestContext, request: req.SaslAuthenticate
) -> resp.SaslAuthenticate | Awaitable[resp.SaslAuthenticate]:
    response_type: type[resp.SaslAuthenticate] = ctx.response_type
    session = _session(ctx)

    def answer(
        code: ErrorCode, message: str | None, auth_bytes: bytes = b""
    ) -> resp.SaslAuthenticate:
        values: dict[str, Any] = {
            "error_code": code,
            "error_message": message,
            "auth_bytes": auth_bytes,
        }
        if ctx.api_version >= 1:
            values["session_lifetime"] = (
                datetime.timedelta(milliseconds=session.session_lifetime_ms)
                if session is not None and code == ErrorCode.none and session.authenticated
                else NO_SESSION_LIFETIME
            )
        return build(response_type, **values)

    if session is None or session.server is None or session.authenticated:
        if session is not None and session.security.sasl and not session.authenticated:
            session.close_after_response = True
        return answer(
            ErrorCode.illegal_sasl_state,
            "SaslAuthenticate request received after successful authentication"
            if session is not None and session.authenticated and session.security.sasl
            else "Unexpected SaslAuthenticate request: no SaslHandshake on this connection",
        )
    try:
        token = session.evaluate(bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        refused = answer(ErrorCode.sasl_authentication_failed, str(exc))
        delay_ms = int(ctx.broker.config["connection.failed.authentication.delay.ms"])
        return _later(delay_ms / 1000, refused) if delay_ms > 0 else refused
    return answer(ErrorCode.none, None, token)


async def _later(delay_s: float, response: resp.SaslAuthenticate) -> resp.SaslAuthenticate:
    """connection.failed.authentication.delay.ms: a failed login is answered (and its
    connection closed) that much later, as Kafka delays it, so that guessing passwords
    costs time; the event loop serves everyone else meanwhile."""
    await asyncio.sleep(delay_s)
    return response
