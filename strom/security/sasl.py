"""SASL mechanisms as sans-I/O state machines: PLAIN (RFC 4616) and SCRAM-SHA-256 /
SCRAM-SHA-512 (RFC 5802, RFC 7677), server side and client side.

Owns: each mechanism's exchange (a server takes the client's token and returns its
answer until ``complete``; a failure raises ``SaslAuthenticationFailed`` whose message
goes to the client), SCRAM's salted credentials (``ScramCredential``: salt, stored key,
server key, iterations, what Kafka stores in UserScramCredentialRecord) and the JAAS
configuration syntax Kafka reads users and client credentials from
(``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_alice="alice-secret";``). Proofs and passwords are compared
in constant time.

Does not own where credentials are stored, the Kafka requests that carry the tokens
(``strom.broker.access.authentication``) or sockets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

PLAIN = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class SaslAuthenticationFailed(Exception):
    """The client did not authenticate; the message is what the client is told."""


class JaasConfigError(ValueError):
    """A ``sasl.jaas.config`` value that cannot be read."""


# JAAS -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str]


_JAAS_TOKEN = re.compile(r'\s*(?:(;)|(=)|"((?:\\.|[^"\\])*)"|([^\s=;"]+))')
_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """The login modules of a JAAS configuration value, each with its options."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None:
            raise JaasConfigError(f"cannot read the JAAS configuration at {text[pos:]!r}")
        if match.group(1):
            tokens.append((";", ";"))
        elif match.group(2):
            tokens.append(("=", "="))
        elif match.group(3) is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match.group(3))))
        elif match.group(4):
            tokens.append(("word", match.group(4)))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise JaasConfigError("expected: LoginModuleClass required key=value ...;")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _CONTROL_FLAGS:
            raise JaasConfigError(f"unknown control flag {tokens[i + 1][1]!r} after {module}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or tokens[i][0] != "word":
                raise JaasConfigError(f"expected key=value among the options of {module}")
            if tokens[i + 2][0] not in ("word", "value"):
                raise JaasConfigError(f"option {tokens[i][1]} of {module} has no value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasConfigError(f"the options of {module} must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("names no login module")
    return entries


def plain_users(entries: list[JaasEntry]) -> dict[str, str]:
    """PlainLoginModule's ``user_<name>="<password>"`` options: the users PLAIN accepts."""
    users: dict[str, str] = {}
    for entry in entries:
        if entry.login_module == PLAIN_LOGIN_MODULE:
            for key, value in entry.options.items():
                if key.startswith("user_"):
                    users[key[len("user_") :]] = value
    return users


def client_credentials(entries: list[JaasEntry]) -> tuple[str, str] | None:
    """(username, password) a client logs in with, from the first module naming both."""
    for entry in entries:
        username, password = entry.options.get("username"), entry.options.get("password")
        if username is not None and password is not None:
            return username, password
    return None


# PLAIN ----------------------------------------------------------------------------------

INVALID_PLAIN = "Authentication failed: Invalid username or password"


class PlainServer:
    """RFC 4616 PLAIN: one token ``authzid NUL authcid NUL passwd``, checked against
    the configured users."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Authentication failed: PLAIN already completed")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed(
                "Authentication failed: Invalid SASL/PLAIN response: expected 3 tokens, got "
                f"{len(parts)}"
            )
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(
                "Authentication failed: Invalid SASL/PLAIN response: not UTF-8"
            ) from None
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        expected = self.users.get(username)
        # Compared even for an unknown user, so the answer takes as long either way.
        matches = hmac.compare_digest(
            (expected or "\x00unknown").encode(), password.encode("utf-8")
        )
        if expected is None or not matches:
            raise SaslAuthenticationFailed(INVALID_PLAIN)
        self.username = username
        self.complete = True
        return b""


def plain_client_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


# SCRAM ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    kafka_type: int  # the mechanism's number in Kafka's records and requests
    min_iterations: int = 4096
    max_iterations: int = 16384

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
SCRAM_MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
SCRAM_BY_TYPE = {m.kafka_type: m for m in SCRAM_MECHANISMS.values()}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted(
    mechanism: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """What the server keeps of a salted password (RFC 5802 section 3)."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramCredential(
        salt,
        mechanism.digest(client_key),
        mechanism.hmac(salted_password, b"Server Key"),
        iterations,
    )


def new_credential(
    mechanism: ScramMechanism, password: str, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SaslAuthenticationFailed("Authentication failed: invalid base64 in SCRAM") from None


def _saslname_decode(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise SaslAuthenticationFailed("Authentication failed: invalid username encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


def _saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise SaslAuthenticationFailed("Authentication failed: malformed SCRAM message")
        out.append((key, value))
    return out


class ScramServer:
    """The server side of one SCRAM exchange: client-first in, server-first out;
    client-final in, server-final out. ``lookup`` gives a user's credential (None when
    the user has none for this mechanism). Channel binding is not served, nor Kafka's
    delegation tokens (``tokenauth``)."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        nonce: str | None = None,
    ) -> None:
        self.scram = mechanism
        self.mechanism = mechanism.name
        self.lookup = lookup
        self.server_nonce = nonce or _b64(os.urandom(24))
        self.complete = False
        self.username: str | None = None
        self._step = 0
        self._failed = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def _invalid(self) -> SaslAuthenticationFailed:
        self._failed = True
        return SaslAuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism}"
        )

    def _malformed(self, what: str) -> SaslAuthenticationFailed:
        self._failed = True
        return SaslAuthenticationFailed(f"Authentication failed: {what}")

    def evaluate(self, token: bytes) -> bytes:
        if self._failed or self.complete:
            raise self._malformed("SCRAM exchange already ended")
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._malformed("SCRAM message is not UTF-8") from None
        try:
            if self._step == 0:
                return self._client_first(message)
            return self._client_final(message)
        except SaslAuthenticationFailed:
            self._failed = True
            raise

    def _client_first(self, message: str) -> bytes:
        binding, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or binding not in ("n", "y"):
            if binding.startswith("p="):
                raise self._malformed("channel binding is not supported")
            raise self._malformed("invalid SCRAM client-first message")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise self._malformed("invalid SCRAM client-first message")
        username = _saslname_decode(attributes[0][1])
        client_nonce = attributes[1][1]
        if not client_nonce or not username:
            raise self._malformed("invalid SCRAM client-first message")
        if any(key == "m" for key, _ in attributes[2:]):
            raise self._malformed("SCRAM mandatory extensions are not supported")
        if "tokenauth=true" in bare.split(",")[2:]:
            raise self._malformed("delegation tokens are not supported")
        if authzid:
            if not authzid.startswith("a=") or _saslname_decode(authzid[2:]) != username:
                raise self._malformed(
                    "Client requested an authorization id that is different from username"
                )
        credential = self.lookup(username)
        if credential is None:
            raise self._invalid()
        self._credential = credential
        self.username = username
        self._gs2_header = f"{binding},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self.server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._step = 1
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise self._malformed("invalid SCRAM client-final message")
        attributes = dict(_attributes(without_proof))
        # Kafka checks only that the nonce ends with the one it sent: librdkafka before
        # 2.1 sends its own nonce again in front of it.
        if not attributes.get("r", "").endswith(self._nonce):
            raise self._malformed("invalid SCRAM nonce")
        if _unb64(attributes.get("c", "")) != self._gs2_header.encode():
            raise self._malformed("invalid SCRAM channel binding")
        proof = _unb64(proof_part)
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = self.scram.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._invalid()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.scram.digest(client_key), credential.stored_key):
            raise self._invalid()
        self.complete = True
        return f"v={_b64(self.scram.hmac(credential.server_key, auth_message))}".encode()


class ScramClient:
    """The client side of one SCRAM exchange (this node's own connections, and tests)."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None
    ) -> None:
        self.scram = mechanism
        self.password = password
        self.nonce = nonce or _b64(os.urandom(24))
        self.client_first_bare = f"n={_saslname_encode(username)},r={self.nonce}"
        self._server_signature = b""
        self.complete = False

    def first(self) -> bytes:
        return f"n,,{self.client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = dict(_attributes(text))
        nonce, salt, iterations = attributes["r"], _unb64(attributes["s"]), int(attributes["i"])
        if not nonce.startswith(self.nonce):
            raise SaslAuthenticationFailed("server nonce does not extend the client's")
        salted = self.scram.salted_password(self.password, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self.client_first_bare},{text},{without_proof}".encode()
        client_key = self.scram.hmac(salted, b"Client Key")
        signature = self.scram.hmac(self.scram.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self.scram.hmac(salted, b"Server Key")
        self._server_signature = self.scram.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode(errors="replace")
        if not text.startswith("v=") or not hmac.compare_digest(
            _unb64(text[2:]), self._server_signature
        ):
            raise SaslAuthenticationFailed(f"server signature does not verify: {text}")
        self.complete = True
