"""What ksqlDB's schema migrations tool (``ksql-migrations``) keeps, for
``strom ksql-migrations``: its configuration, its migration files, its metadata.

Owns the properties of ``ksql-migrations.properties`` (their names and defaults, as
ksqlDB 0.29 reads them; the metadata topics named after the server's service id), the
migrations directory (``V<six digits>__<name>.sql`` files, their MD5 checksums, the name
of a new one), the splitting of a migration file into its statements (comments
dropped, a missing ``;`` refused) and the versions table's rows (``MigrationVersionInfo``)
printed as ksqlDB prints them. Knows nothing of HTTP: the commands
(``strom.cli.ksql_migrations``) talk to the server.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
from dataclasses import dataclass

SERVER_URL = "ksql.server.url"
BASIC_AUTH_USERNAME = "ksql.auth.basic.username"
BASIC_AUTH_PASSWORD = "ksql.auth.basic.password"
SSL_TRUSTSTORE_LOCATION = "ssl.truststore.location"
SSL_TRUSTSTORE_PASSWORD = "ssl.truststore.password"
SSL_KEYSTORE_LOCATION = "ssl.keystore.location"
SSL_KEYSTORE_PASSWORD = "ssl.keystore.password"
SSL_KEY_PASSWORD = "ssl.key.password"
SSL_KEY_ALIAS = "ssl.key.alias"
SSL_ALPN = "ssl.alpn"
SSL_VERIFY_HOST = "ssl.verify.host"
STREAM_NAME = "ksql.migrations.stream.name"
TABLE_NAME = "ksql.migrations.table.name"
STREAM_TOPIC_NAME = "ksql.migrations.stream.topic.name"
TABLE_TOPIC_NAME = "ksql.migrations.table.topic.name"
TOPIC_REPLICAS = "ksql.migrations.topic.replicas"
DIR_OVERRIDE = "ksql.migrations.dir.override"

MIGRATIONS_DIR = "migrations"
CONFIG_FILE = "ksql-migrations.properties"
NONE_VERSION = "<none>"
CURRENT_VERSION_KEY = "CURRENT"
EMPTY_ERROR_REASON = "N/A"
STATES = ("PENDING", "RUNNING", "MIGRATED", "ERROR")
MAX_VERSION = 999999

# Each property's default as new-project writes it (blank: none); the topics' defaults
# are '<service id>ksql_<stream or table name>'.
DEFAULTS: dict[str, str] = {
    STREAM_NAME: "MIGRATION_EVENTS",
    TABLE_NAME: "MIGRATION_SCHEMA_VERSIONS",
    STREAM_TOPIC_NAME: "",
    TABLE_TOPIC_NAME: "",
    TOPIC_REPLICAS: "1",
    SSL_TRUSTSTORE_LOCATION: "",
    SSL_TRUSTSTORE_PASSWORD: "",
    SSL_KEYSTORE_LOCATION: "",
    SSL_KEYSTORE_PASSWORD: "",
    SSL_KEY_PASSWORD: "",
    SSL_KEY_ALIAS: "",
    SSL_ALPN: "false",
    SSL_VERIFY_HOST: "true",
    BASIC_AUTH_USERNAME: "",
    BASIC_AUTH_PASSWORD: "",
    DIR_OVERRIDE: "",
}
_PASSWORDS = {BASIC_AUTH_PASSWORD, SSL_TRUSTSTORE_PASSWORD, SSL_KEYSTORE_PASSWORD, SSL_KEY_PASSWORD}
_SECTIONS = (
    ("Migrations metadata configs",
     (STREAM_NAME, TABLE_NAME, STREAM_TOPIC_NAME, TABLE_TOPIC_NAME, TOPIC_REPLICAS)),
    ("TLS configs",
     (SSL_TRUSTSTORE_LOCATION, SSL_TRUSTSTORE_PASSWORD, SSL_KEYSTORE_LOCATION,
      SSL_KEYSTORE_PASSWORD, SSL_KEY_PASSWORD, SSL_KEY_ALIAS, SSL_ALPN, SSL_VERIFY_HOST)),
    ("ksqlDB server authentication configs", (BASIC_AUTH_USERNAME, BASIC_AUTH_PASSWORD)),
    ("Migrations directory configs", (DIR_OVERRIDE,)),
)  # fmt: skip
_FILE_NAME = re.compile(r"V([0-9]{6})__(.+)\.sql")
_INVALID_FILENAME_CHARS = re.compile(r'\s|/|\\|:|\*|\?|"|<|>|\|')


class MigrationError(Exception):
    """An expected failure of a migrations command; one line (ksqlDB's words)."""


def initial_config(server_url: str) -> str:
    """The ``ksql-migrations.properties`` new-project writes: the server's URL and every
    other property commented out with its default."""
    lines = [f"{SERVER_URL}={server_url}"]
    for header, keys in _SECTIONS:
        lines += ["", f"# {header}:"]
        for key in keys:
            default = "" if key in _PASSWORDS else DEFAULTS[key]
            if key in (STREAM_TOPIC_NAME, TABLE_TOPIC_NAME):
                default = (
                    "ksql-service-idksql_"
                    + DEFAULTS[STREAM_NAME if key == STREAM_TOPIC_NAME else TABLE_NAME]
                )
            lines.append(f"# {key}={default}")
    return "\n".join(lines) + "\n"


@dataclass
class MigrationConfig:
    """A project's properties (the file's over the defaults) and where the file is."""

    values: dict[str, str]
    path: str

    @classmethod
    def of(cls, properties: dict[str, str], path: str) -> MigrationConfig:
        """The file's properties checked as ksqlDB's ConfigDef checks them (a missing
        server URL, a replica count that is no number, a boolean that is neither)."""
        if SERVER_URL not in properties:
            raise MigrationError(f"Missing required property: {SERVER_URL}")
        values = {**DEFAULTS, **{k: v.strip() for k, v in properties.items()}}
        try:
            int(values[TOPIC_REPLICAS])
        except ValueError:
            raise MigrationError(
                f"Invalid value {values[TOPIC_REPLICAS]} for configuration {TOPIC_REPLICAS}: "
                "Not a number of type INT"
            ) from None
        for key in (SSL_ALPN, SSL_VERIFY_HOST):
            if values[key].lower() not in ("true", "false"):
                raise MigrationError(
                    f"Invalid value {values[key]} for configuration {key}: "
                    "Expected value to be either true or false"
                )
        return cls(values, path)

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    def flag(self, key: str) -> bool:
        return self.values[key].lower() == "true"

    @property
    def replicas(self) -> int:
        return int(self.values[TOPIC_REPLICAS])

    def topic(self, key: str, service_id: str) -> str:
        """The stream's or table's topic: configured, else ``<service id>ksql_<name>``."""
        if self.values[key]:
            return self.values[key]
        name = self.values[STREAM_NAME if key == STREAM_TOPIC_NAME else TABLE_NAME]
        return f"{service_id}ksql_{name}"

    @property
    def migrations_dir(self) -> str:
        """``ksql.migrations.dir.override``, else ``migrations`` beside the config file."""
        if self.values[DIR_OVERRIDE]:
            return self.values[DIR_OVERRIDE]
        return os.path.join(os.path.dirname(os.path.abspath(self.path)), MIGRATIONS_DIR)


@dataclass(frozen=True)
class MigrationFile:
    version: int
    name: str  # the description, '_' read as ' '
    path: str


def file_prefix(version: int | str) -> str:
    return "V" + str(version).rjust(6, "0")


def new_file_name(version: int, description: str) -> str:
    return f"{file_prefix(version)}__{_INVALID_FILENAME_CHARS.sub('_', description)}.sql"


def _names(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        raise MigrationError(f"{directory} is not a directory.")
    try:
        return sorted(os.listdir(directory))
    except OSError as exc:
        raise MigrationError(f"Failed to retrieve files from {directory}: {exc.strerror}") from None


def _migration(directory: str, name: str, skipped: list[str] | None) -> MigrationFile | None:
    match = _FILE_NAME.match(name)
    if match is None:
        if skipped is not None:
            skipped.append(
                "Skipping file does not match expected migration file pattern "
                f"'V<six digit number>__<name>.sql': {name}"
            )
        return None
    version = int(match.group(1))
    if version <= 0:
        raise MigrationError(f"MigrationFile file versions must be positive. Found: {name}")
    return MigrationFile(version, match.group(2).replace("_", " "), os.path.join(directory, name))


def _unique(migrations: list[MigrationFile]) -> list[MigrationFile]:
    for previous, migration in zip(migrations, migrations[1:], strict=False):
        if migration.version == previous.version:
            raise MigrationError(
                "Found multiple migration files with the same version. Version: "
                f"{migration.version}. Files: '{migration.path}', '{previous.path}'"
            )
    return migrations


def all_migrations(directory: str, skipped: list[str] | None = None) -> list[MigrationFile]:
    """The directory's migration files by version; a file whose name is not a
    migration's is skipped (its warning added to ``skipped``)."""
    found = []
    for name in _names(directory):
        if os.path.isdir(os.path.join(directory, name)):
            continue
        migration = _migration(directory, name, skipped)
        if migration is not None:
            found.append(migration)
    return _unique(found)


def migration_for_version(version: int | str, directory: str) -> MigrationFile | None:
    prefix = file_prefix(version)
    found = [
        migration
        for name in _names(directory)
        if name.startswith(prefix) and (migration := _migration(directory, name, None)) is not None
    ]
    return _unique(found)[0] if found else None


def checksum(path: str) -> str:
    """The MD5 of the file's bytes in hex, as the versions table keeps it."""
    try:
        with open(path, "rb") as handle:
            return hashlib.md5(handle.read(), usedforsecurity=False).hexdigest()
    except OSError as exc:
        raise MigrationError(f"Could not compute hash for file '{path}': {exc.strerror}") from None


def read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise MigrationError(f"Failed to read {path}: {reason}") from None


def split_sql(sql: str) -> list[str]:
    """A migration file's statements, each with its ``;``, its comments removed (``--``
    to the end of the line, ``/* */``); quoted text is kept whole. Text after the last
    ``;`` is refused, as are an unclosed quote or comment."""
    commands: list[str] = []
    current: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "'":
            close = sql.find("'", i + 1)
            _closed("'", close)
            current.append(sql[i : close + 1])
            i = close + 1
        elif i < n - 1 and sql.startswith("--", i):
            close = sql.find("\n", i + 1)
            _closed("\n", close)
            i = close + 1
        elif i < n - 1 and sql.startswith("/*", i):
            close = sql.find("*/", i + 1)
            _closed("*/", close)
            i = close + 2
        elif ch == ";":
            current.append(";")
            commands.append("".join(current))
            current = []
            i += 1
        else:
            current.append(ch)
            i += 1
    rest = "".join(current)
    if rest.strip():
        raise MigrationError(f"Unmatched command at end of file; missing semicolon: '{rest}'")
    return commands


def _closed(token: str, index: int) -> None:
    if index < 0:
        raise MigrationError(f"Invalid sql - failed to find closing token '{token}'")


_UNSUPPORTED = ("DESCRIBE", "EXPLAIN", "SELECT", "PRINT", "SHOW", "LIST")
_TOKENS = re.compile(r"('([^']*|(''))*')|\s+")


def check_supported(sql: str) -> None:
    """Statements a migration may not hold (queries, listings, RUN SCRIPT) refused."""
    tokens = [t for t in _split_tokens(sql.upper()) if t]
    if tokens and tokens[0] in _UNSUPPORTED:
        raise MigrationError(f"'{tokens[0]}' statements are not supported.")
    if len(tokens) > 1 and tokens[0] == "RUN" and tokens[1] == "SCRIPT":
        raise MigrationError("'RUN SCRIPT' statements are not supported.")


def _split_tokens(text: str) -> list[str]:
    out: list[str] = []
    last = 0
    for match in _TOKENS.finditer(text):
        out.append(text[last : match.start()])
        last = match.end()
    out.append(text[last:])
    return out


def _timestamp(epoch_ms: str) -> str:
    """``yyyy-MM-dd HH:mm:ss.SSS z`` in the local zone; blank and N/A as they are."""
    if epoch_ms in ("", "N/A"):
        return epoch_ms
    try:
        millis = int(epoch_ms)
    except ValueError:
        return epoch_ms
    moment = datetime.datetime.fromtimestamp(millis / 1000).astimezone()
    return f"{moment:%Y-%m-%d %H:%M:%S}.{millis % 1000:03d} {moment.tzname()}"


@dataclass(frozen=True)
class VersionInfo:
    """One row of the versions table (or a pending file's stand-in)."""

    version: int
    checksum: str
    previous: str
    state: str
    name: str
    started_on: str
    completed_on: str
    error_reason: str

    @classmethod
    def from_row(cls, row: list[object]) -> VersionInfo:
        """A pull query's row: version, checksum, previous, state, name, started_on,
        completed_on, error_reason."""
        text = ["" if value is None else str(value) for value in row]
        try:
            version = int(text[0])
        except ValueError:
            raise MigrationError(f"Invalid version in the migrations table: {text[0]}") from None
        if text[3] not in STATES:
            raise MigrationError(f"Invalid migration state in the migrations table: {text[3]}")
        return cls(version, *text[1:8])

    @classmethod
    def pending(cls, migration: MigrationFile) -> VersionInfo:
        return cls(migration.version, "N/A", "N/A", "PENDING", migration.name, "N/A", "N/A",
                   EMPTY_ERROR_REASON)  # fmt: skip


_COLUMNS = ("Version", "Name", "State", "Previous Version", "Started On", "Completed On",
            "Error Reason")  # fmt: skip


def format_versions(infos: list[VersionInfo]) -> str:
    """The versions as ksqlDB's info prints them: a dashed table, one row a version."""
    rows = [
        [str(i.version), i.name, i.state, i.previous, _timestamp(i.started_on),
         _timestamp(i.completed_on), i.error_reason]
        for i in infos
    ]  # fmt: skip
    widths = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in enumerate(_COLUMNS)]
    divider = "-" * (sum(widths) + 3 * len(widths) - 1)

    def line(cells: list[str] | tuple[str, ...]) -> str:
        return " " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " "

    return "\n".join([divider, line(_COLUMNS), divider, *map(line, rows), divider]) + "\n"
