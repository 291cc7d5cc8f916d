"""OAUTHBEARER without a broker: the client's initial response, unsigned tokens checked
as Kafka's unsecured validator checks them, signed JWTs checked against a JWKS file
(signature, expiry, audience, issuer, key id, a key set that changes on disk), and the
exchange's error path (a JSON challenge, then the failure once the client sends ^A)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from strom.security.oauthbearer import (
    INVALID_TOKEN_CHALLENGE,
    JwksError,
    JwksKeys,
    JwtValidator,
    OAuthBearerServer,
    TokenInvalid,
    UnsecuredValidator,
    parse_initial_response,
)
from strom.security.sasl import SaslAuthenticationFailed

ISSUER, AUDIENCE = "https://issuer.test", "strom"


def initial(token: str, authzid: str = "", **extensions: str) -> bytes:
    extra = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{extra}\x01".encode()


def unsecured(claims: dict[str, Any], alg: str = "none") -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': alg})}.{part(claims)}."


def test_initial_response_is_read() -> None:
    parsed = parse_initial_response(initial("abc.def.ghi", "alice", traceid="42"))
    assert (parsed.authorization_id, parsed.token, parsed.extensions) == (
        "alice",
        "abc.def.ghi",
        {"traceid": "42"},
    )
    for bad in [b"", b"n,,\x01auth=Bearer x\x01", b"n,,\x01\x01", b"p,,\x01auth=Bearer x\x01\x01"]:
        with pytest.raises(SaslAuthenticationFailed):
            parse_initial_response(bad)


def test_unsecured_tokens() -> None:
    now = time.time()
    validator = UnsecuredValidator(required_scopes=("produce",))
    token = validator.validate(unsecured({"sub": "bob", "exp": now + 60, "scope": "produce x"}))
    assert token.principal == "bob" and token.scopes == {"produce", "x"}
    assert abs(token.expires_ms - (now + 60) * 1000) < 2
    for claims, alg in [
        ({"sub": "bob", "exp": now - 1, "scope": "produce"}, "none"),  # expired
        ({"sub": "bob", "scope": "produce"}, "none"),  # no exp
        ({"exp": now + 60, "scope": "produce"}, "none"),  # no principal
        ({"sub": "bob", "exp": now + 60}, "none"),  # lacks the required scope
        ({"sub": "bob", "exp": now + 60, "scope": "produce", "iat": now + 30}, "none"),
        ({"sub": "bob", "exp": now + 60, "scope": "produce"}, "RS256"),  # signed
    ]:
        with pytest.raises(TokenInvalid):
            validator.validate(unsecured(claims, alg))
    with pytest.raises(TokenInvalid):
        validator.validate("not-a-token")
    options = {
        "unsecuredValidatorPrincipalClaimName": "user",
        "unsecuredValidatorAllowableClockSkewMs": "5000",
    }
    lenient = UnsecuredValidator.from_jaas_options(options)
    assert lenient.validate(unsecured({"user": "carl", "exp": now - 1})).principal == "carl"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(signing.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return {"signing": signing, "other": other, "path": path, "jwk": jwk}


def signed(key: Any, kid: str | None = "k1", alg: str = "RS256", **overrides: Any) -> str:
    now = int(time.time())
    claims = {"sub": "alice", "iat": now, "exp": now + 60, "iss": ISSUER, "aud": AUDIENCE}
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims, key, algorithm=alg, headers=headers)


def test_signed_tokens_against_a_jwks_file(keys: dict[str, Any]) -> None:
    validator = JwtValidator(
        JwksKeys(keys["path"].as_uri()), (AUDIENCE, "other"), ISSUER, clock_skew_s=0
    )
    token = validator.validate(signed(keys["signing"], scope=["read", "write"]))
    assert token.principal == "alice" and token.scopes == {"read", "write"}
    assert validator.validate(signed(keys["signing"], kid=None)).principal == "alice"
    refused = [
        signed(keys["other"]),  # signed by a key the JWKS does not hold
        signed(keys["signing"], kid="k2"),  # names a key the JWKS lacks
        signed(keys["signing"], exp=int(time.time()) - 5),
        signed(keys["signing"], iat=None),
        signed(keys["signing"], aud="elsewhere"),
        signed(keys["signing"], iss="https://evil.test"),
        signed(keys["signing"], sub=None),
        jwt.encode({"sub": "alice", "exp": time.time() + 60}, "s" * 32, algorithm="HS256"),
        unsecured({"sub": "alice", "exp": time.time() + 60}),
        "a.b.c",
    ]
    for token_text in refused:
        with pytest.raises(TokenInvalid):
            validator.validate(token_text)


def test_a_changed_jwks_file_is_read_again(keys: dict[str, Any]) -> None:
    jwks = JwksKeys(str(keys["path"]))
    validator = JwtValidator(jwks, (AUDIENCE,), ISSUER)
    rotated = ec.generate_private_key(ec.SECP256R1())
    token = signed(rotated, kid="k2", alg="ES256")
    with pytest.raises(TokenInvalid):
        validator.validate(token)
    jwk = jwt.algorithms.ECAlgorithm.to_jwk(rotated.public_key(), as_dict=True)
    jwk["kid"] = "k2"
    keys["path"].write_text(json.dumps({"keys": [keys["jwk"], jwk]}))
    stat = keys["path"].stat()
    os.utime(keys["path"], (stat.st_atime, stat.st_mtime + 5))
    jwks._checked = 0.0  # the file is looked at again at most once a second
    assert validator.validate(token).principal == "alice"


def test_unusable_jwks_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text('{"keys": []}')
    (tmp_path / "bad.json").write_text("{")
    for name in ["empty.json", "bad.json", "missing.json"]:
        with pytest.raises(JwksError):
            JwksKeys((tmp_path / name).as_uri())
    with pytest.raises(JwksError):
        JwksKeys("ftp://example.test/jwks")


def test_jwks_fetched_from_a_url_is_refreshed_for_an_unknown_key_id(
    keys: dict[str, Any],
) -> None:
    documents = [json.dumps({"keys": [keys["jwk"]]}).encode()]
    fetched: list[str] = []

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            fetched.append(self.path)
            body = documents[-1]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    jwks = JwksKeys(f"http://127.0.0.1:{server.server_address[1]}/jwks")
    try:
        validator = JwtValidator(jwks, (AUDIENCE,), ISSUER)
        assert validator.validate(signed(keys["signing"])).principal == "alice"
        jwk2 = jwt.algorithms.RSAAlgorithm.to_jwk(keys["other"].public_key(), as_dict=True)
        jwk2["kid"] = "k2"
        documents.append(json.dumps({"keys": [keys["jwk"], jwk2]}).encode())
        token = signed(keys["other"], kid="k2")
        with pytest.raises(TokenInvalid):
            validator.validate(token)  # unknown kid: refused now, fetched again soon
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                assert validator.validate(token).principal == "alice"
                break
            except TokenInvalid:
                time.sleep(0.01)
        else:
            pytest.fail("the JWKS was not fetched again for an unknown key id")
        assert fetched == ["/jwks", "/jwks"]
    finally:
        jwks.close()
        server.shutdown()


def test_the_exchange(keys: dict[str, Any]) -> None:
    validator = JwtValidator(JwksKeys(keys["path"].as_uri()), (AUDIENCE,), ISSUER)
    server = OAuthBearerServer(validator)
    assert server.evaluate(initial(signed(keys["signing"]), "alice")) == b""
    assert server.complete and server.username == "alice" and server.expires_ms

    refused = OAuthBearerServer(validator)
    assert refused.evaluate(initial(signed(keys["other"]))) == INVALID_TOKEN_CHALLENGE
    assert not refused.complete
    with pytest.raises(SaslAuthenticationFailed, match="invalid_token"):
        refused.evaluate(b"\x01")

    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        OAuthBearerServer(validator).evaluate(initial(signed(keys["signing"]), "mallory"))
