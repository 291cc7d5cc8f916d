"""TLS for listeners and for this node's own connections, from Kafka's ``ssl.*`` properties.

Owns: reading a listener's TLS settings (PEM only: ``ssl.keystore.location`` holding the
key and its chain, or inline ``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``;
``ssl.key.password``; ``ssl.truststore.location`` or inline
``ssl.truststore.certificates``; ``ssl.client.auth``; ``ssl.enabled.protocols``;
``ssl.cipher.suites``), building server and client ``ssl.SSLContext``s from them (a bad
setting is one ConfigError line), rebuilding a server context when its files change
(``ReloadingContext``: new connections get the new one), and the principal of a client
certificate: its subject in RFC 2253 form (read from the DER, as Java prints it) mapped
by ``ssl.principal.mapping.rules`` (``RULE:pattern/replacement/[LU]`` and ``DEFAULT``).

Does not own where the settings come from (``strom.config``) or sockets.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CLIENT_AUTH_CHOICES = ("none", "requested", "required")
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.3 suites cannot be narrowed through Python's ssl module: they are always on.
TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
RELOAD_CHECK_S = 1.0  # how often (at most) a server context looks at its files


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; the message is one line naming the property."""


@dataclass(frozen=True)
class TlsSettings:
    """One listener's (or one client's) TLS properties, as configured."""

    keystore_type: str = "PEM"
    keystore_location: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    key_password: str | None = None
    truststore_type: str = "PEM"
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str = "https"
    prefix: str = ""  # "listener.name.ssl." when the settings came from a listener prefix

    def watched_files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.keystore_location, self.truststore_location) if p)


def _problem(settings: TlsSettings, key: str, what: str) -> TlsConfigError:
    return TlsConfigError(f"{settings.prefix}{key}: {what}")


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def normalize_pem(text: str) -> str:
    """PEM blocks re-wrapped: an inline value may arrive on one line (whitespace between
    the markers does not matter, as Kafka reads it)."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        data = "".join(body.replace("\\n", "").split())
        lines = [data[i : i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]))
    return "\n".join(blocks) + "\n"


def _read(settings: TlsSettings, key: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise _problem(settings, key, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _problem(settings, key, f"{path} is not a PEM file") from None


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.keystore_type.upper() != "PEM":
        raise _problem(
            settings, "ssl.keystore.type", f"{settings.keystore_type} is not served; use PEM"
        )
    if settings.keystore_location and (
        settings.keystore_certificate_chain or settings.keystore_key
    ):
        raise _problem(
            settings,
            "ssl.keystore.location",
            "set either the location or ssl.keystore.certificate.chain/ssl.keystore.key",
        )
    if settings.keystore_location:
        key = "ssl.keystore.location"
        pem = _read(settings, key, settings.keystore_location)
    elif settings.keystore_certificate_chain or settings.keystore_key:
        key = "ssl.keystore.certificate.chain"
        if not (settings.keystore_certificate_chain and settings.keystore_key):
            raise _problem(settings, key, "needs ssl.keystore.key with it (both or neither)")
        pem = normalize_pem(settings.keystore_key) + normalize_pem(
            settings.keystore_certificate_chain
        )
    else:
        return
    if "PRIVATE KEY-----" not in pem:
        raise _problem(settings, key, "holds no private key")
    if "CERTIFICATE-----" not in pem:
        raise _problem(settings, key, "holds no certificate")
    # load_cert_chain reads files only: the PEM goes through a private temporary file.
    with tempfile.TemporaryDirectory(prefix="strom-tls-") as folder:
        path = os.path.join(folder, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(pem)
        try:
            context.load_cert_chain(path, password=settings.key_password or None)
        except ssl.SSLError as exc:
            reason = exc.reason or str(exc)
            if "ENCRYPTED" in pem:
                reason = "the key cannot be decrypted (check ssl.key.password)"
            elif "KEY_VALUES_MISMATCH" in str(exc):
                reason = "the private key does not match the certificate"
            message = f"cannot load the key and certificate: {reason}"
            raise _problem(settings, key, message) from None
        except (OSError, TypeError, ValueError) as exc:
            raise _problem(settings, key, f"cannot load the key and certificate: {exc}") from None


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Load the trusted certificates; False when none are configured."""
    if settings.truststore_type.upper() != "PEM":
        raise _problem(
            settings, "ssl.truststore.type", f"{settings.truststore_type} is not served; use PEM"
        )
    if settings.truststore_location and settings.truststore_certificates:
        raise _problem(
            settings,
            "ssl.truststore.location",
            "set either the location or ssl.truststore.certificates",
        )
    if settings.truststore_location:
        key = "ssl.truststore.location"
        pem = _read(settings, key, settings.truststore_location)
    elif settings.truststore_certificates:
        key = "ssl.truststore.certificates"
        pem = settings.truststore_certificates
    else:
        return False
    pem = normalize_pem(pem)
    if "CERTIFICATE-----" not in pem:
        raise _problem(settings, key, "holds no certificate")
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise _problem(settings, key, f"cannot load the certificates: {exc}") from None
    return True


def _iana_to_openssl(name: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``; an
    OpenSSL name is returned as it is."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    exchange, _, cipher = name[4:].partition("_WITH_")
    cipher = re.sub(r"^AES_(\d+)", r"AES\1", cipher)
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = [] if exchange == "RSA" else [exchange.replace("_", "-")]
    return "-".join([*parts, cipher.replace("_", "-")])


def _apply_protocols(context: ssl.SSLContext, settings: TlsSettings) -> None:
    versions = []
    for name in settings.enabled_protocols:
        if name not in TLS_VERSIONS:
            raise _problem(
                settings,
                "ssl.enabled.protocols",
                f"{name} is not served (use {', '.join(TLS_VERSIONS)})",
            )
        versions.append(TLS_VERSIONS[name])
    if not versions:
        raise _problem(settings, "ssl.enabled.protocols", "names no protocol")
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    older = [_iana_to_openssl(s) for s in settings.cipher_suites if s not in TLS13_SUITES]
    if older:
        try:
            context.set_ciphers(":".join(older))
        except ssl.SSLError:
            raise _problem(
                settings,
                "ssl.cipher.suites",
                f"no cipher suite known among {','.join(settings.cipher_suites)}",
            ) from None
    elif settings.cipher_suites and ssl.TLSVersion.TLSv1_3 not in versions:
        raise _problem(settings, "ssl.cipher.suites", "names only TLS 1.3 suites without TLSv1.3")


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: its key and chain, and client certificates checked against
    the truststore as ``ssl.client.auth`` asks."""
    if settings.client_auth not in CLIENT_AUTH_CHOICES:
        raise _problem(
            settings, "ssl.client.auth", f"must be one of {', '.join(CLIENT_AUTH_CHOICES)}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(context, settings)
    _load_keystore(context, settings)
    if not (settings.keystore_location or settings.keystore_certificate_chain):
        raise _problem(
            settings,
            "ssl.keystore.location",
            "a TLS listener needs its key and certificate (ssl.keystore.location, or "
            "ssl.keystore.certificate.chain and ssl.keystore.key)",
        )
    trusted = _load_truststore(context, settings)
    if settings.client_auth != "none":
        if not trusted:
            raise _problem(
                settings,
                "ssl.truststore.location",
                f"ssl.client.auth={settings.client_auth} needs a truststore to check "
                "client certificates against",
            )
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.client_auth == "required" else ssl.CERT_OPTIONAL
        )
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the server checked against the truststore (the system's
    authorities without one), its host name checked unless
    ``ssl.endpoint.identification.algorithm`` is empty, and a certificate of our own
    when a keystore is configured."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(context, settings)
    _load_keystore(context, settings)
    if not _load_truststore(context, settings):
        context.load_default_certs()
    context.check_hostname = settings.endpoint_identification_algorithm.lower() == "https"
    return context


class ReloadingContext:
    """A server context rebuilt when the files it was built from change.

    ``current()`` looks at the files' size and modification time at most every
    RELOAD_CHECK_S; a changed set is loaded into a new context for the connections to
    come (those open keep theirs). A set that fails to load is logged once and the old
    context kept."""

    def __init__(
        self,
        settings: TlsSettings,
        build: Callable[[TlsSettings], ssl.SSLContext] = server_context,
        name: str = "",
    ) -> None:
        self.settings = settings
        self.name = name
        self._build = build
        self._seen = self._fingerprint()
        self.context = build(settings)
        self._checked = time.monotonic()

    def _fingerprint(self) -> tuple[tuple[str, int, int, int], ...]:
        out = []
        for path in self.settings.watched_files():
            try:
                st = os.stat(path)
                out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((path, -1, -1, -1))
        return tuple(out)

    def serving(self) -> ssl.SSLContext:
        """The context to create the server with: at each client hello (the SNI callback
        runs for every handshake) the connection moves to the current context."""
        base = self.context

        def move_to_current(
            connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
        ) -> None:
            current = self.current()
            if current is not context:
                connection.context = current

        base.sni_callback = move_to_current
        return base

    def current(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= RELOAD_CHECK_S and self.settings.watched_files():
            self._checked = now
            seen = self._fingerprint()
            if seen != self._seen:
                self._seen = seen
                try:
                    self.context = self._build(self.settings)
                    log.info("listener %s: TLS certificates reloaded", self.name)
                except (TlsConfigError, ssl.SSLError, OSError, ValueError) as exc:
                    # Never raised into a handshake: the connections to come keep working.
                    log.warning(
                        "listener %s: keeping the previous TLS certificates: %s", self.name, exc
                    )
        return self.context


# Principals from certificates ---------------------------------------------------------

_ATTRIBUTE_NAMES = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRING_CODECS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x16: "ascii",  # IA5String
    0x14: "latin-1",  # T61String
    0x1E: "utf-16-be",  # BMPString
    0x1C: "utf-32-be",  # UniversalString
}


class CertificateError(ValueError):
    """A certificate whose subject cannot be read."""


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``pos``."""
    if pos + 2 > len(data):
        raise CertificateError("truncated DER")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise CertificateError("truncated DER")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, value start, value end) of each element in a constructed value."""
    out = []
    pos = start
    while pos < end:
        tag, value_start, value_end = _tlv(data, pos)
        out.append((tag, pos, value_start, value_end))
        pos = value_end
    return out


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateError("empty OID")
    parts = [min(raw[0] // 40, 2)]
    parts.append(raw[0] - 40 * parts[0])
    value = 0
    for byte in raw[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(der: bytes) -> str:
    """The certificate's subject in RFC 2253 form (``CN=alice,OU=eng,O=acme,C=US``): the
    RDNs last to first, attributes with no short name as ``oid=#hex``, as Java's
    X500Principal.getName() prints it."""
    _, start, end = _tlv(der, 0)
    tbs_tag, _, tbs_start, tbs_end = _children(der, start, end)[0]
    fields = _children(der, tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    if len(fields) < 5:
        raise CertificateError("no subject in the certificate")
    _, _, name_start, name_end = fields[4]  # serial, signature, issuer, validity, subject
    rdns = []
    for _, _, set_start, set_end in _children(der, name_start, name_end):
        attributes = []
        for _, _, seq_start, seq_end in _children(der, set_start, set_end):
            (_, _, oid_start, oid_end), (tag, value_pos, v_start, v_end) = _children(
                der, seq_start, seq_end
            )[:2]
            oid = _oid(der[oid_start:oid_end])
            short = _ATTRIBUTE_NAMES.get(oid)
            codec = _STRING_CODECS.get(tag)
            if short is not None and codec is not None:
                attributes.append(f"{short}={_escape(der[v_start:v_end].decode(codec))}")
            else:
                attributes.append(f"{short or oid}=#{der[value_pos:v_end].hex()}")
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


_RULE = re.compile(
    r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?)"
    r"\s*(?:[,\n]\s*|$)"
)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a subject."""


@dataclass(frozen=True)
class _MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _java_replacement(template: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement: ``$n`` a group, ``\\x`` the character x."""
    out = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch == "\\" and i + 1 < len(template):
            out.append(template[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(template) and template[i + 1].isdigit():
            j = i + 1
            while j < len(template) and template[j].isdigit():
                j += 1
            out.append(match.group(int(template[i + 1 : j])) or "")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule whose pattern matches the whole
    subject gives the name; ``DEFAULT`` is the subject as it is; no match refuses."""

    def __init__(self, rules_text: str = "DEFAULT") -> None:
        self.text = rules_text.strip() or "DEFAULT"
        self.rules: list[_MappingRule] = []
        pos = 0
        while pos < len(self.text):
            match = _RULE.match(self.text, pos)
            if match is None or match.end() == pos:
                raise TlsConfigError(
                    f"ssl.principal.mapping.rules: cannot read a rule at {self.text[pos:]!r} "
                    "(expected RULE:pattern/replacement/[LU] or DEFAULT)"
                )
            if match.group(1):
                self.rules.append(_MappingRule(None))
            else:
                try:
                    pattern = re.compile(match.group(2))
                except re.error as exc:
                    raise TlsConfigError(
                        f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {exc}"
                    ) from None
                self.rules.append(_MappingRule(pattern, match.group(3), match.group(4)))
            pos = match.end()

    def name_of(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules apply to {dn}")
