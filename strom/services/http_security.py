"""TLS and HTTP basic authentication on the services' HTTP listeners (schema registry,
REST proxy, console), from the service's own properties file, in the names Confluent's
services use.

Owns:
- the listener URL, ``http://HOST:PORT`` or ``https://HOST:PORT`` (``ListenerUrl``);
- the TLS context of an ``https`` listener, from ``ssl.keystore.location`` (PEM: key and
  chain), ``ssl.key.password``, ``ssl.truststore.location``, ``ssl.client.authentication``
  (NONE, REQUESTED, REQUIRED; the older ``ssl.client.auth=true`` means REQUIRED),
  ``ssl.enabled.protocols`` and ``ssl.cipher.suites``, built by ``strom.security.tls``;
- basic authentication (``authentication.method=BASIC``): users and roles from the file
  ``authentication.users.file`` in the format of Jetty's property-file login module
  (``name: password[,role ...]``, a password plain or ``MD5:<hex>``; Confluent's
  services reach the same file through a JAAS login module), ``authentication.realm``
  for the challenge, and ``authentication.roles`` (a user needs one of them; ``*``, the
  default, lets every known user in). A request without valid credentials gets 401 with
  a ``WWW-Authenticate`` challenge, a known user without a role 403, both as JSON;
- the settings with which the services reach a schema registry
  (``schema.registry.*``: confluent-kafka's ``basic.auth.user.info``,
  ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``).

The broker's HTTP listeners (its admin listener, the registry and REST proxy it embeds)
take the same settings from its properties with a prefix (``admin.``,
``schema.registry.``, ``rest.proxy.``); ``http_security``'s ``prefix`` names them so in
its messages. A bad setting is one ``HttpSecurityError`` line naming it. Does not own the
names' table (``strom.config.HTTP_LISTENER_CONFIGS``), the server
(``strom.services.http``) or routes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler

from strom.config import (
    HTTP_LISTENER_CONFIGS,
    REGISTRY_CLIENT_CONFIGS,
    ConfigError,
    parse_http_listener,
)
from strom.security.tls import TlsConfigError, TlsSettings, client_context, server_context

_CLIENT_AUTHENTICATION = {"NONE": "none", "REQUESTED": "requested", "REQUIRED": "required"}
# A service's --config also takes two names Confluent's property files carry: the older
# ssl.client.auth=true, and ssl.truststore.password (a PEM truststore needs none).
KNOWN_KEYS = frozenset(
    {d.name for d in HTTP_LISTENER_CONFIGS} | {"ssl.client.auth", "ssl.truststore.password"}
)
REGISTRY_CLIENT_PREFIX = "schema.registry."
_REGISTRY_CLIENT_KEYS = tuple(d.name for d in REGISTRY_CLIENT_CONFIGS)


class HttpSecurityError(ValueError):
    """A listener or security setting that cannot be used; one line naming it."""


@dataclass(frozen=True)
class ListenerUrl:
    scheme: str
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port if port is None else port}"


def parse_listener(spec: str) -> ListenerUrl:
    """``http://HOST:PORT`` or ``https://HOST:PORT`` (an empty host: every interface)."""
    try:
        return ListenerUrl(*parse_http_listener(spec, schemes=("http", "https")))
    except ConfigError as exc:
        raise HttpSecurityError(str(exc)) from None


@dataclass(frozen=True)
class BasicUser:
    password: str  # as written in the file: plain, or MD5:<hex>
    roles: frozenset[str]

    def accepts(self, offered: str) -> bool:
        if self.password.startswith("MD5:"):
            digest = hashlib.md5(offered.encode()).hexdigest()  # noqa: S324 (Jetty's format)
            return hmac.compare_digest(digest, self.password[4:].lower())
        return hmac.compare_digest(offered.encode(), self.password.encode())


def read_users(path: str, prefix: str = "") -> dict[str, BasicUser]:
    """Users of a Jetty property file: ``name: password[,role ...]`` per line (``prefix``:
    that of the setting naming the file, for messages)."""
    key = f"{prefix}authentication.users.file"
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise HttpSecurityError(f"{key}: cannot read {path}: {reason}") from None
    users: dict[str, BasicUser] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, rest = line.partition(":")
        if not sep or not name.strip() or not rest.strip():
            raise HttpSecurityError(f"{key}: {path} line {number}: expected name: password[,role]")
        password, *roles = (part.strip() for part in rest.split(","))
        users[name.strip()] = BasicUser(password, frozenset(r for r in roles if r))
    return users


@dataclass(frozen=True)
class BasicAuth:
    realm: str
    roles: frozenset[str]  # empty: any known user
    users: dict[str, BasicUser] = field(default_factory=dict)

    def check(self, header: str | None) -> int:
        """200 when the Authorization header is a known user with a role, 401 when it
        names no known user (or is missing or malformed), 403 when the user lacks a role."""
        if not header or not header[:6].lower() == "basic ":
            return 401
        try:
            name, sep, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return 401
        user = self.users.get(name)
        if not sep or user is None or not user.accepts(password):
            return 401
        if self.roles and not (self.roles & user.roles):
            return 403
        return 200

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        challenge = f'Basic realm="{self.realm}"'

        @web.middleware
        async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            status = self.check(request.headers.get("Authorization"))
            if status == 200:
                return await handler(request)
            message = "Unauthorized" if status == 401 else "Forbidden"
            return web.Response(
                text=json.dumps({"error_code": status, "message": message}),
                status=status,
                content_type="application/json",
                headers={"WWW-Authenticate": challenge} if status == 401 else None,
            )

        return basic_auth


@dataclass(frozen=True)
class HttpSecurity:
    """What a service's listener needs: its TLS context (https) and basic auth."""

    listener: ListenerUrl
    ssl_context: ssl.SSLContext | None = None
    basic_auth: BasicAuth | None = None
    registry_client: dict[str, str] = field(default_factory=dict)
    # For calls to another instance of the same service (a registry forwarding a change to
    # its primary): the truststore checks it, the keystore is shown when it asks.
    forwarding_tls: ssl.SSLContext | None = None


def _tls_settings(props: dict[str, str], prefix: str) -> TlsSettings:
    client_auth = "none"
    if "ssl.client.authentication" in props:
        value = props["ssl.client.authentication"].strip().upper()
        if value not in _CLIENT_AUTHENTICATION:
            raise HttpSecurityError(
                f"{prefix}ssl.client.authentication: {props['ssl.client.authentication']!r} "
                "is not NONE, REQUESTED or REQUIRED"
            )
        client_auth = _CLIENT_AUTHENTICATION[value]
    elif props.get("ssl.client.auth", "false").strip().lower() == "true":
        client_auth = "required"

    def listed(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if key not in props:
            return default
        return tuple(p.strip() for p in props[key].split(",") if p.strip())

    return TlsSettings(
        keystore_type=props.get("ssl.keystore.type", "PEM"),
        keystore_location=props.get("ssl.keystore.location"),
        key_password=props.get("ssl.key.password") or props.get("ssl.keystore.password"),
        truststore_type=props.get("ssl.truststore.type", "PEM"),
        truststore_location=props.get("ssl.truststore.location"),
        client_auth=client_auth,
        enabled_protocols=listed("ssl.enabled.protocols", ("TLSv1.2", "TLSv1.3")),
        cipher_suites=listed("ssl.cipher.suites", ()),
        prefix=prefix,
    )


def http_security(listener: str, props: dict[str, str], prefix: str = "") -> HttpSecurity:
    """The security of a service listening on ``listener`` with its properties ``props``;
    ``prefix``: that of the properties where they came from (the broker's ``admin.``,
    ``schema.registry.`` or ``rest.proxy.``), for messages."""
    url = parse_listener(listener)
    unknown = sorted(
        k for k in props if k not in KNOWN_KEYS and not k.startswith(REGISTRY_CLIENT_PREFIX)
    )
    if unknown:
        raise HttpSecurityError(
            f"unknown setting {prefix}{unknown[0]} (known: {prefix}ssl.*, {prefix}authentication.*)"
        )
    context = forwarding = None
    if url.scheme == "https":
        try:
            settings = _tls_settings(props, prefix)
            context = server_context(settings)
            forwarding = client_context(settings)
        except TlsConfigError as exc:
            raise HttpSecurityError(str(exc)) from None
    elif any(k.startswith("ssl.") for k in props):
        raise HttpSecurityError(f"{prefix}ssl.* settings need an https:// listener, not {listener}")
    method = props.get("authentication.method", "NONE").strip().upper()
    basic = None
    if method == "BASIC":
        path = props.get("authentication.users.file")
        if not path:
            raise HttpSecurityError(
                f"{prefix}authentication.method=BASIC needs {prefix}authentication.users.file"
            )
        roles = {r.strip() for r in props.get("authentication.roles", "*").split(",")}
        roles.discard("")
        basic = BasicAuth(
            realm=props.get("authentication.realm", "Strom"),
            roles=frozenset() if "*" in roles else frozenset(roles),
            users=read_users(path, prefix),
        )
    elif method != "NONE":
        raise HttpSecurityError(
            f"{prefix}authentication.method: {props['authentication.method']!r} is not NONE "
            "or BASIC"
        )
    registry_client = {}
    for key, value in props.items():
        if key.startswith(REGISTRY_CLIENT_PREFIX):
            name = key[len(REGISTRY_CLIENT_PREFIX) :]
            if name not in _REGISTRY_CLIENT_KEYS:
                known = f"{prefix}{REGISTRY_CLIENT_PREFIX}"
                raise HttpSecurityError(
                    f"unknown setting {prefix}{key} (known: "
                    + ", ".join(known + k for k in _REGISTRY_CLIENT_KEYS)
                    + ")"
                )
            registry_client[name] = value
    return HttpSecurity(url, context, basic, registry_client, forwarding)
