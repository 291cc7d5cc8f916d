"""A real MariaDB server for tests and benchmarks: Debian's ``mariadb-server`` binaries,
``mariadb-install-db`` into a fresh directory, ``mariadbd`` listening on a free port of
127.0.0.1 (its unix socket in that directory), run as an unprivileged user (``nobody``
when the tests run as root), with a ``root`` user that logs in without a password and
one database, ``strom``.

``./dev test`` installs the binaries (need_postgresql). Durability is off
(``innodb_flush_log_at_trx_commit=0``, no doublewrite, no binary log) and the buffers are
small: a test database is thrown away. The JDBC URL is ``jdbc:mariadb://...``; Python
reaches it with PyMySQL, as the JDBC sink does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

USER = "root"
DATABASE = "strom"
START_TIMEOUT_S = 60.0


def _bin(*names: str) -> str:
    for name in names:
        for folder in ("/usr/sbin", "/usr/bin"):
            if os.access(f"{folder}/{name}", os.X_OK):
                return f"{folder}/{name}"
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"{names[0]} not found: install Debian's mariadb-server (./dev test does)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MariaDBProcess:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="strom-mariadb-"))
        self.data = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.port = _free_port()
        self.user = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
        os.chmod(self.dir, 0o755)
        self.proc: subprocess.Popen[bytes] | None = None

    def _options(self) -> list[str]:
        return [
            "--no-defaults",
            f"--datadir={self.data}",
            f"--user={self.user}",
        ]

    def start(self) -> MariaDBProcess:
        install = subprocess.run(
            [_bin("mariadb-install-db", "mysql_install_db"), *self._options(),
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, text=True, cwd=self.dir, check=False,
        )  # fmt: skip
        if install.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {install.stderr or install.stdout}")
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the server's for its life
        self.proc = subprocess.Popen(
            [_bin("mariadbd", "mysqld"), *self._options(),
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
             f"--pid-file={self.dir / 'mysqld.pid'}", "--skip-log-bin",
             "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
             "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
             "--performance-schema=0", "--skip-name-resolve"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
        )  # fmt: skip
        log.close()
        import pymysql  # here: a missing driver is its own error, not "did not start"

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.query(f"CREATE DATABASE IF NOT EXISTS {DATABASE}", database=None)
                return self
            except pymysql.err.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self.dir / "server.log").read_text(errors="replace")[-2000:]
                    self.stop()  # its fixture fails in setup and never reaches the teardown
                    raise RuntimeError(f"mariadbd did not start:\n{tail}") from None
                time.sleep(0.1)

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:mariadb://127.0.0.1:{self.port}/{DATABASE}"

    def connect(self, database: str | None = DATABASE) -> Any:
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user=USER, password="",
                               database=database, autocommit=True)  # fmt: skip

    def query(
        self, sql: str, *params: object, database: str | None = DATABASE
    ) -> list[tuple[Any, ...]]:
        connection = self.connect(database)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params or None)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            connection.close()

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()  # a test database: nothing to keep
                self.proc.wait(30)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
