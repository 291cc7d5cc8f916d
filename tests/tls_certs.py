"""A throwaway certificate authority for TLS tests, made with the openssl command.

``make_ca(folder)`` writes ca.pem and ca.key; ``issue(ca, name, subject)`` writes
``<name>.pem`` (certificate), ``<name>.key`` and ``<name>-bundle.pem`` (key then
certificate, what ``ssl.keystore.location`` takes). Server certificates name
127.0.0.1 and localhost.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    bundle: Path


@dataclass(frozen=True)
class Authority:
    folder: Path
    cert: Path
    key: Path

    def issue(self, name: str, subject: str, key_password: str | None = None) -> Issued:
        folder = self.folder
        key = folder / f"{name}.key"
        csr = folder / f"{name}.csr"
        cert = folder / f"{name}.pem"
        ext = folder / f"{name}.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
        )
        _openssl(
            "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key.name, cwd=folder
        )
        _openssl("req", "-new", "-key", key.name, "-subj", subject, "-out", csr.name, cwd=folder)
        _openssl(
            "x509", "-req", "-in", csr.name, "-CA", self.cert.name, "-CAkey", self.key.name,
            "-CAcreateserial", "-days", "2", "-sha256", "-extfile", ext.name, "-out", cert.name,
            cwd=folder,
        )  # fmt: skip
        key_text = key.read_text()
        if key_password is not None:
            encrypted = folder / f"{name}-encrypted.key"
            _openssl(
                "pkcs8", "-topk8", "-in", key.name, "-out", encrypted.name,
                "-passout", f"pass:{key_password}", cwd=folder,
            )  # fmt: skip
            key_text = encrypted.read_text()
        bundle = folder / f"{name}-bundle.pem"
        bundle.write_text(key_text + cert.read_text())
        return Issued(cert, key, bundle)


def make_ca(folder: Path, name: str = "ca", subject: str = "/CN=Strom Test CA") -> Authority:
    folder.mkdir(parents=True, exist_ok=True)
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key.name, cwd=folder)
    _openssl(
        "req", "-x509", "-new", "-key", key.name, "-subj", subject, "-days", "2",
        "-sha256", "-out", cert.name, cwd=folder,
    )  # fmt: skip
    return Authority(folder, cert, key)
