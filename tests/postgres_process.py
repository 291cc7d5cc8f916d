"""A real PostgreSQL server for tests and benchmarks: Debian's ``postgresql`` binaries,
``initdb`` into a fresh directory, listening on a free port of 127.0.0.1 (its unix socket
in that directory), run as an unprivileged user (``nobody`` when the tests run as root,
as PostgreSQL refuses to run as root), with the superuser ``postgres`` trusted locally.

``./dev test`` installs the binaries (need_postgresql). Durability is off (``fsync``,
``synchronous_commit``, ``full_page_writes``): a test database is thrown away.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "postgres"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql (./dev test does)")
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresProcess:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="strom-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
            self.run_as = ["runuser", "-u", "nobody", "--"]
        os.chmod(self.dir, 0o755)

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self.run_as, *args], capture_output=True, text=True, cwd=self.dir, check=False
        )
        if result.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {result.stderr or result.stdout}\n{tail}")

    def start(self) -> PostgresProcess:
        self._run(
            _bin("initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-N", "-E", "UTF8"
        )
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c wal_level=logical"
        )
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.dir / "server.log"), "-w", "start")  # fmt: skip
        return self

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/postgres"

    def connect(self):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                               autocommit=True)  # fmt: skip

    def query(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        with self.connect() as connection:
            cursor = connection.execute(sql, params or None)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
