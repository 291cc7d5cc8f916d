"""SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768), server side, as a sans-I/O state
machine, and the validation of the bearer tokens it carries.

Owns: reading the client's initial response (``n,a=<authzid>,^Aauth=Bearer
<token>^A<extensions>^A^A``), the exchange's error path (an invalid token is answered
with a JSON error challenge, the client's ``^A`` then ends the exchange with that error,
as Kafka's OAuthBearerSaslServer does), and two token validators:

- ``JwtValidator``: a signed JWT checked against a JSON Web Key Set (JWKS) read from a
  file or fetched from a URL (``sasl.oauthbearer.jwks.endpoint.url``), with its
  signature, ``exp`` and ``iat`` (required), the expected audience and issuer, and the
  principal in ``sasl.oauthbearer.sub.claim.name``. The JWKS at a URL is fetched again
  every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` and, sooner, when a token names a
  key id it does not hold, on a thread of its own: validation never waits on the
  network. Signatures are checked by PyJWT (with ``cryptography``); only asymmetric
  algorithms are accepted.
- ``UnsecuredValidator``: Kafka's default when no JWKS is configured, for development
  only: unsigned (``alg: none``) tokens whose claims are checked, with the options of
  Kafka's OAuthBearerUnsecuredValidatorCallbackHandler (``unsecuredValidator
  PrincipalClaimName``, ``...RequiredScope``, ``...AllowableClockSkewMs``).

A validated token gives the principal's name and its expiry, which bounds the
session's lifetime for re-authentication (KIP-368, ``strom.broker.access.authentication``).

Does not own the Kafka requests that carry the tokens, sockets, or where the JWKS
location is configured (``strom.broker.access.authentication``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import jwt

from strom.security.sasl import SaslAuthenticationFailed

log = logging.getLogger(__name__)

OAUTHBEARER = "OAUTHBEARER"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# sasl.server.callback.handler.class values that ask for JWT validation against a JWKS.
VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
UNSECURED_VALIDATOR_CLASS = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
# Algorithms a key from a JWKS may verify: asymmetric only (an HMAC "key" taken from a
# public key set would let anyone sign).
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_KEY_TYPE_OF = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
INVALID_TOKEN_CHALLENGE = b'{"status":"invalid_token"}'
_CONTROL_A = b"\x01"


class TokenInvalid(Exception):
    """A bearer token that does not authenticate anyone; the message says why (logged
    by the broker, not sent to the client)."""


class JwksError(Exception):
    """A JWKS that cannot be read or holds no usable key."""


@dataclass(frozen=True)
class BearerToken:
    principal: str
    expires_ms: int  # epoch milliseconds
    scopes: frozenset[str] = frozenset()


# The client's initial response ---------------------------------------------------------

_GS2_HEADER = re.compile(rb"^([ny]),(?:a=((?:[\x01-\x7f]|=2C|=3D)*?))?,\x01")
_AUTH = re.compile(r"^([A-Za-z]+) +([-_~+/.a-zA-Z0-9]+=*)$")
_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")


@dataclass(frozen=True)
class InitialResponse:
    authorization_id: str
    token: str
    extensions: dict[str, str]


def parse_initial_response(data: bytes) -> InitialResponse:
    """RFC 7628's client initial response; SaslAuthenticationFailed if malformed."""
    header = _GS2_HEADER.match(data)
    if header is None or not data.endswith(b"\x01\x01"):
        raise SaslAuthenticationFailed("Authentication failed: Invalid OAUTHBEARER client response")
    authzid = (header.group(2) or b"").decode().replace("=2C", ",").replace("=3D", "=")
    pairs = data[header.end() : -2].split(b"\x01") if data[header.end() : -2] else []
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.decode("utf-8", "replace").partition("=")
        if not sep or not _EXTENSION_KEY.match(key):
            raise SaslAuthenticationFailed(
                "Authentication failed: Invalid OAUTHBEARER client response"
            )
        values[key] = value
    auth = _AUTH.match(values.pop("auth", ""))
    if auth is None or auth.group(1).lower() != "bearer":
        raise SaslAuthenticationFailed(
            "Authentication failed: Invalid OAUTHBEARER client response: no auth=Bearer <token>"
        )
    return InitialResponse(authzid, auth.group(2), values)


# Validators ---------------------------------------------------------------------------


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise TokenInvalid(f"the token's {what} is not base64url-encoded JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TokenInvalid(f"the token's {what} is not a JSON object")
    return value


def _scopes(value: Any, claim: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return frozenset(value)
    raise TokenInvalid(f"the {claim} claim is neither a string nor a list of strings")


def _principal(claims: dict[str, Any], claim: str) -> str:
    value = claims.get(claim)
    if not isinstance(value, str) or not value.strip():
        raise TokenInvalid(f"the token has no {claim} claim naming the principal")
    return value.strip()


class UnsecuredValidator:
    """Unsigned tokens (``alg: none``), Kafka's default validator: for development."""

    def __init__(
        self,
        principal_claim: str = "sub",
        required_scopes: tuple[str, ...] = (),
        clock_skew_ms: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.principal_claim = principal_claim
        self.required_scopes = frozenset(required_scopes)
        self.clock_skew_ms = clock_skew_ms
        self.clock = clock

    @classmethod
    def from_jaas_options(cls, options: dict[str, str]) -> UnsecuredValidator:
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "0")
        try:
            skew_ms = int(skew)
        except ValueError:
            raise ValueError(
                f"unsecuredValidatorAllowableClockSkewMs must be a number, got {skew!r}"
            ) from None
        scopes = options.get("unsecuredValidatorRequiredScope", "")
        return cls(
            options.get("unsecuredValidatorPrincipalClaimName", "sub"),
            tuple(s.strip() for s in scopes.split(",") if s.strip()),
            skew_ms,
        )

    def validate(self, token: str) -> BearerToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise TokenInvalid("an unsecured token has three parts and an empty signature")
        header = _b64url_json(parts[0], "header")
        if header.get("alg") != "none":
            raise TokenInvalid(
                f"the token is signed ({header.get('alg')!r}) but no JWKS is configured "
                "to check it: set sasl.oauthbearer.jwks.endpoint.url"
            )
        claims = _b64url_json(parts[1], "claims")
        now_ms = int(self.clock() * 1000)
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenInvalid("the token has no numeric exp claim")
        expires_ms = int(exp * 1000)
        if now_ms - self.clock_skew_ms >= expires_ms:
            raise TokenInvalid("the token has expired")
        iat = claims.get("iat")
        if iat is not None:
            if not isinstance(iat, int | float) or isinstance(iat, bool):
                raise TokenInvalid("the token's iat claim is not a number")
            if iat * 1000 > now_ms + self.clock_skew_ms:
                raise TokenInvalid("the token was issued in the future (iat)")
            if iat * 1000 >= expires_ms:
                raise TokenInvalid("the token expires before it was issued")
        scopes = _scopes(claims.get("scope"), "scope")
        missing = self.required_scopes - scopes
        if missing:
            raise TokenInvalid(f"the token lacks the required scope {', '.join(sorted(missing))}")
        return BearerToken(_principal(claims, self.principal_claim), expires_ms, scopes)


def _read_url(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (configured)
        body: bytes = response.read()
        return body


def jwks_file(url: str) -> str | None:
    """The path a ``file:`` JWKS URL (or a bare path) names; None for http(s)."""
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme == "file":
        return parsed.path
    if parsed.scheme == "":
        return url
    raise JwksError(f"a JWKS is read from an http(s) or file URL, not {url!r}")


def parse_jwks(data: bytes | str, source: str) -> dict[str | None, list[dict[str, Any]]]:
    """The signing keys of a JWKS document by key id (``None`` for keys without one)."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise JwksError(f"{source} is not JSON: {exc}") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise JwksError(f"{source} is not a JWKS: no 'keys' list")
    usable: dict[str | None, list[dict[str, Any]]] = {}
    for key in keys:
        if not isinstance(key, dict) or key.get("use", "sig") != "sig":
            continue
        if key.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        usable.setdefault(key.get("kid"), []).append(key)
    if not usable:
        raise JwksError(f"{source} holds no RSA, EC or OKP signing key")
    return usable


class JwksKeys:
    """The keys of a JWKS, kept fresh: a file is read again when it changes, a URL is
    fetched again every ``refresh_ms`` and when a token names a key id it lacks."""

    MIN_EXPEDITED_INTERVAL = 10.0  # seconds between refreshes asked for by unknown kids

    def __init__(
        self,
        url: str,
        refresh_ms: int = 3_600_000,
        fetch: Callable[[str], bytes] = _read_url,
    ) -> None:
        self.url = url
        self.path = jwks_file(url)
        self.refresh_s = max(refresh_ms, 1000) / 1000
        self.fetch = fetch
        self._keys: dict[str | None, list[dict[str, Any]]] = {}
        self._loaded: dict[tuple[str, str], Any] = {}  # (key json, alg) -> PyJWK
        self._mtime: float | None = None
        self._checked = 0.0
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._last_expedited = 0.0
        self._keys = self._read()
        self._thread: threading.Thread | None = None
        if self.path is None:
            self._thread = threading.Thread(target=self._refresh_loop, daemon=True, name="jwks")
            self._thread.start()

    def _read(self) -> dict[str | None, list[dict[str, Any]]]:
        if self.path is not None:
            try:
                self._mtime = os.stat(self.path).st_mtime
                with open(self.path, "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                raise JwksError(f"cannot read the JWKS {self.path}: {exc.strerror}") from None
            return parse_jwks(data, self.path)
        try:
            data = self.fetch(self.url)
        except OSError as exc:
            raise JwksError(f"cannot fetch the JWKS {self.url}: {exc}") from None
        return parse_jwks(data, self.url)

    def _refresh_loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self._keys = self._read()
            except JwksError as exc:
                log.warning("keeping the JWKS held: %s", exc)

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()

    def _maybe_reread_file(self) -> None:
        now = time.monotonic()
        if self.path is None or now - self._checked < 1.0:
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return
        if mtime != self._mtime:
            try:
                self._keys = self._read()
                log.info("read the JWKS %s again", self.path)
            except JwksError as exc:
                log.warning("keeping the JWKS held: %s", exc)

    def candidates(self, kid: str | None, algorithm: str) -> list[Any]:
        """The keys that may have signed a token with this key id and algorithm."""
        self._maybe_reread_file()
        keys = self._keys
        if kid is not None:
            found = keys.get(kid, [])
            if not found:
                self._expedite()
        else:
            found = [key for group in keys.values() for key in group]
        kty = _KEY_TYPE_OF.get(algorithm[:2])
        out = []
        for key in found:
            if key.get("kty") != kty or key.get("alg", algorithm) != algorithm:
                continue
            cache_key = (json.dumps(key, sort_keys=True), algorithm)
            loaded = self._loaded.get(cache_key)
            if loaded is None:
                try:
                    loaded = jwt.PyJWK(key, algorithm)
                except jwt.PyJWTError as exc:
                    log.warning("skipping an unusable key of the JWKS %s: %s", self.url, exc)
                    continue
                self._loaded[cache_key] = loaded
            out.append(loaded)
        return out

    def _expedite(self) -> None:
        now = time.monotonic()
        if self.path is None and now - self._last_expedited >= self.MIN_EXPEDITED_INTERVAL:
            self._last_expedited = now
            self._wake.set()


class JwtValidator:
    """Signed JWTs checked against a JWKS, as Kafka's OAuthBearerValidatorCallbackHandler
    does: signature, ``exp`` and ``iat`` required, audience and issuer when expected."""

    def __init__(
        self,
        keys: JwksKeys,
        expected_audience: tuple[str, ...] = (),
        expected_issuer: str | None = None,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
        clock_skew_s: int = 30,
    ) -> None:
        self.keys = keys
        self.expected_audience = expected_audience
        self.expected_issuer = expected_issuer
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s

    def validate(self, token: str) -> BearerToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"malformed token: {exc}") from None
        algorithm = header.get("alg")
        if algorithm not in ASYMMETRIC_ALGORITHMS:
            raise TokenInvalid(f"signing algorithm {algorithm!r} is not accepted")
        kid = header.get("kid")
        keys = self.keys.candidates(kid, algorithm)
        if not keys:
            raise TokenInvalid(
                f"no {algorithm} key"
                + (f" with key id {kid!r}" if kid is not None else "")
                + f" in the JWKS {self.keys.url}"
            )
        required = ["exp", "iat"]
        if self.expected_issuer is not None:
            required.append("iss")
        options: jwt.types.Options = {
            "require": required,
            "verify_aud": bool(self.expected_audience),
        }
        claims: dict[str, Any] | None = None
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[algorithm],
                    audience=list(self.expected_audience) or None,
                    issuer=self.expected_issuer,
                    leeway=self.clock_skew_s,
                    options=options,
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                raise TokenInvalid(f"could not validate the token: {exc}") from None
        if claims is None:
            raise TokenInvalid("the token's signature does not verify with the JWKS's keys")
        expires_ms = int(float(claims["exp"]) * 1000)
        scopes = _scopes(claims.get(self.scope_claim), self.scope_claim)
        return BearerToken(_principal(claims, self.sub_claim), expires_ms, scopes)


Validator = UnsecuredValidator | JwtValidator


# The exchange -------------------------------------------------------------------------


class OAuthBearerServer:
    """The broker's side of one OAUTHBEARER exchange."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: Validator) -> None:
        self.validator = validator
        self.complete = False
        self.username: str | None = None
        self.expires_ms: int | None = None  # the token's expiry: bounds the session
        self._failed: str | None = None  # the error challenge sent, awaiting ^A

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Authentication failed: OAUTHBEARER already completed")
        if self._failed is not None:
            if token == _CONTROL_A:
                raise SaslAuthenticationFailed(self._failed)
            raise SaslAuthenticationFailed(
                "Authentication failed: expected the client's %x01 after the error challenge"
            )
        response = parse_initial_response(token)
        try:
            bearer = self.validator.validate(response.token)
        except TokenInvalid as exc:
            log.info("OAUTHBEARER token refused: %s", exc)
            self._failed = INVALID_TOKEN_CHALLENGE.decode()
            return INVALID_TOKEN_CHALLENGE
        if response.authorization_id and response.authorization_id != bearer.principal:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id "
                f"({response.authorization_id}) that is different from the token's "
                f"principal name ({bearer.principal})"
            )
        self.username = bearer.principal
        self.expires_ms = bearer.expires_ms
        self.complete = True
        return b""
