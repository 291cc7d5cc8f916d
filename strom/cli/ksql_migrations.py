"""``strom ksql-migrations``: ksqlDB's schema migrations tool (``ksql-migrations``)
against a ksql server (Strom's or ksqlDB's).

    strom ksql-migrations new-project PATH KSQL_SERVER_URL
    strom ksql-migrations -c PATH/ksql-migrations.properties initialize-metadata
    strom ksql-migrations -c FILE create DESCRIPTION [-v VERSION]
    strom ksql-migrations -c FILE apply (--all | --next | --until N | --version N)
                                        [--dry-run] [--define NAME=VALUE ...] [--headers FILE]
    strom ksql-migrations -c FILE info | validate | destroy-metadata

As ksqlDB 0.29's tool: a project is a directory with ``ksql-migrations.properties``
(``ksql.server.url``, the metadata stream and table's names and topics, TLS and basic
authentication) and ``migrations/V000001__name.sql`` files. ``initialize-metadata``
creates the MIGRATION_EVENTS stream and the MIGRATION_SCHEMA_VERSIONS table (its
LATEST_BY_OFFSET of each version's events); ``apply`` runs each migration's statements
on ``/ksql`` (DEFINE / UNDEFINE and SET / UNSET kept by the tool, ``${name}``
substituted; SELECT, SHOW, DESCRIBE, EXPLAIN, PRINT, LIST and RUN SCRIPT refused) and
records its state (RUNNING, then MIGRATED or ERROR with ksqlDB's message, with the
file's checksum, the start and end times and the previous version) as events written
on ``/inserts-stream``; ``info`` and ``validate`` read the table with pull queries on
``/query-stream``. The configuration file is ``--config-file``/``-c``, before or after
the command.

The tool's lines go to stdout as ksqlDB's do, its errors to stderr; a failure is exit
code 1, a wrong argument one line and exit code 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from strom.ksql import migrations as mg
from strom.ksql.rest_client import (
    DELIMITED_MEDIA_TYPE,
    KsqlRestClient,
    KsqlServerError,
    KsqlUnreachable,
)

COMMAND = "ksql-migrations"
VERIFY_RETRIES = 10
VERIFY_BACKOFF_S = 1.0
# after apply: how long (in VERIFY_BACKOFF_S) the table's query may take to show the
# last migration (a Spark micro-batch on a loaded machine, the first after a cold start)
CATCH_UP_RETRIES = 60


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        COMMAND,
        help="ksqlDB's schema migrations tool: versioned .sql files applied to a ksql server",
    )
    _config_option(parser, "config_file")
    actions = parser.add_subparsers(dest="migrations_command", required=True, metavar="COMMAND")
    new = _action(actions, "new-project", "create a migrations project directory and config file")
    new.add_argument("project_path", help="the project's root directory")
    new.add_argument("ksql_server_url", help="the ksql server to connect to")
    _action(actions, "initialize-metadata", "create the migrations metadata stream and table")
    create = _action(actions, "create", "create a blank migration file")
    create.add_argument("description", help="the migration's description")
    create.add_argument(
        "-v",
        "--version",
        type=_version,
        default=0,
        help="its version (default: the next after the existing files)",
    )
    apply = _action(actions, "apply", "apply migrations to the ksql server")
    target = apply.add_mutually_exclusive_group(required=True)
    target.add_argument("-a", "--all", action="store_true", help="all available migrations")
    target.add_argument("-n", "--next", action="store_true", help="the next migration only")
    target.add_argument(
        "-u",
        "--until",
        type=_version,
        metavar="VERSION",
        help="the migrations up through this version",
    )
    target.add_argument(
        "-v", "--version", type=_version, metavar="VERSION", help="the migration of this version"
    )
    apply.add_argument(
        "--dry-run", action="store_true", help="show which migrations would run; send no statements"
    )
    apply.add_argument(
        "-d",
        "--define",
        action="append",
        default=[],
        type=_variable,
        metavar="NAME=VALUE",
        help="a variable for ${NAME} (repeatable)",
    )
    apply.add_argument(
        "--headers", metavar="FILE", help="a properties file of headers sent with every request"
    )
    _action(actions, "info", "the current version and each migration's state")
    _action(actions, "validate", "check the applied migrations' files against their checksums")
    _action(actions, "destroy-metadata", "drop the metadata stream and table and their topics")
    parser.set_defaults(run=run, parser=parser)


def _action(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    action: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
    _config_option(action, "config_file_after")
    return action


def _config_option(parser: argparse.ArgumentParser, dest: str) -> None:
    parser.add_argument(
        "-c",
        "--config-file",
        dest=dest,
        metavar="FILE",
        help="the migrations configuration file (all but new-project)",
    )


def _version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid version: {text!r}") from None
    if not 1 <= value <= mg.MAX_VERSION:
        raise argparse.ArgumentTypeError(f"{value} is not a version from 1 to {mg.MAX_VERSION}")
    return value


def _variable(text: str) -> tuple[str, str]:
    parts = text.split("=")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(
            f"Failed to parse argument {text}: variables must be defined using '=' (i.e. var=val)."
        )
    return parts[0], parts[1]


def _info(text: str) -> None:
    print(text, flush=True)


def _error(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    code = _command(args)
    _info(f"Execution time: {time.monotonic() - start:.4f} seconds")
    return code


def _command(args: argparse.Namespace) -> int:
    given = [f for f in (args.config_file, getattr(args, "config_file_after", None)) if f]
    if len(given) > 1:
        args.parser.error("--config-file may be given once")
    config_file = given[0] if given else None
    name = args.migrations_command
    try:
        if name == "new-project":
            if config_file:
                raise mg.MigrationError(
                    "This command does not expect a config file to be passed. Rather, this "
                    "command will create one as part of preparing the migrations directory."
                )
            return _new_project(args.project_path, args.ksql_server_url)
        if not config_file or not config_file.strip():
            raise mg.MigrationError(
                "Migrations config file required but not specified. "
                "Specify with --config-file (or, equivalently, -c)."
            )
        config = _load_config(config_file)
        if name == "create":
            return _create(config, args.description, args.version)
        migrations = Migrations(config, getattr(args, "headers", None))
        commands: dict[str, Callable[[], int]] = {
            "initialize-metadata": migrations.initialize,
            "apply": lambda: migrations.apply(args),
            "info": migrations.info,
            "validate": migrations.validate_command,
            "destroy-metadata": migrations.destroy,
        }
        return commands[name]()
    except mg.MigrationError as exc:
        _error(str(exc))
        return 1


def _new_project(path: str, url: str) -> int:
    _info(f"Creating new migrations project at {path}")
    config_path = os.path.join(path, mg.CONFIG_FILE)
    if not (_make_directory(path) and _make_directory(os.path.join(path, mg.MIGRATIONS_DIR))):
        return 1
    if os.path.exists(config_path):
        _error(f"Failed to create file. File already exists: {config_path}")
        return 1
    text = mg.initial_config(url)
    _info(f"Creating file: {config_path}")
    _info(f"Writing to config file: {text.rstrip()}")
    try:
        with open(config_path, "x", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        _error(f"Failed to create file {config_path}: {exc.strerror}")
        return 1
    _info("Migrations project directory created successfully")
    return 0


def _make_directory(path: str) -> bool:
    if os.path.isdir(path):
        _error(f"{path} already exists. Skipping directory creation.")
        return True
    if os.path.exists(path):
        _error(f"{path} already exists as a file. Cannot create directory.")
        return False
    try:
        _info(f"Creating directory: {path}")
        os.makedirs(path)
    except PermissionError:
        _error(f"Permission denied: create directory {path}")
        return False
    except OSError as exc:
        _error(f"Failed to create directory {path}: {exc.strerror}")
        return False
    return True


def _load_config(path: str) -> mg.MigrationConfig:
    from strom.cli.properties_file import PropertiesError, read_properties_file

    try:
        properties = read_properties_file(path)
    except (PropertiesError, OSError) as exc:
        raise mg.MigrationError(str(exc)) from None
    return mg.MigrationConfig.of(properties, path)


def _create(config: mg.MigrationConfig, description: str, version: int) -> int:
    directory = config.migrations_dir
    if version:
        existing = mg.migration_for_version(version, directory)
        if existing is not None:
            raise mg.MigrationError(
                f"Found existing migrations file for version {version}: {existing.path}"
            )
    if not description:
        raise mg.MigrationError("Description cannot be empty.")
    if not version:
        versions = [m.version for m in _all_migrations(directory)]
        version = (versions[-1] if versions else 0) + 1
    if version > mg.MAX_VERSION:
        raise mg.MigrationError(
            f"Invalid version file version: {version}. Version must fit into a six-digit integer."
        )
    path = os.path.join(directory, mg.new_file_name(version, description))
    _info(f"Creating migration file: {path}")
    try:
        with open(path, "x", encoding="utf-8"):
            pass
    except OSError as exc:
        raise mg.MigrationError(f"Failed to create file {path}: {exc.strerror}") from None
    _info("Migration file successfully created")
    return 0


def _all_migrations(directory: str) -> list[mg.MigrationFile]:
    skipped: list[str] = []
    found = mg.all_migrations(directory, skipped)
    for warning in skipped:
        _error(warning)
    return found


def _client_message(exc: KsqlServerError | KsqlUnreachable) -> str:
    """A refusal as ksqlDB's Java client words it (the server's message and code)."""
    if isinstance(exc, KsqlUnreachable):
        return str(exc)
    code = exc.body.get("error_code", exc.status)
    return f"Received {exc.status} response from server: {exc}. Error code: {code}"


class Migrations:
    """The commands that talk to the server: its client, made from the config (the
    server's /info read first, for its service id, which names the default topics)."""

    def __init__(self, config: mg.MigrationConfig, headers_file: str | None = None) -> None:
        self.config = config
        self.client = _client(config, headers_file)
        url = config[mg.SERVER_URL]
        try:
            info = self.client.info()
        except (KsqlServerError, KsqlUnreachable) as exc:
            raise mg.MigrationError(f"Failed to query {url}/info: {_client_message(exc)}") from None
        self.service_id = str(info.get("ksqlServiceId", ""))
        self.server_version = str(info.get("version", ""))
        self.stream = config[mg.STREAM_NAME]
        self.table = config[mg.TABLE_NAME]

    # -- the server's answers

    def execute(self, sql: str, properties: dict[str, str] | None = None) -> list[dict[str, Any]]:
        try:
            return self.client.ksql(sql, properties)
        except (KsqlServerError, KsqlUnreachable) as exc:
            raise _Refused(_client_message(exc)) from None

    def pull(self, sql: str) -> list[list[Any]]:
        """A pull query's rows (``/query-stream``)."""
        rows: list[list[Any]] = []
        body = {"sql": sql, "properties": {}}
        try:
            for line in self.client.lines("/query-stream", body, DELIMITED_MEDIA_TYPE):
                if not line.strip():
                    continue
                item = json.loads(line)
                if isinstance(item, list):
                    rows.append(item)
                elif isinstance(item, dict) and "columnNames" not in item:
                    raise _Refused(str(item.get("message", line)))
        except (KsqlServerError, KsqlUnreachable) as exc:
            raise _Refused(_client_message(exc)) from None
        return rows

    def insert(self, row: dict[str, Any]) -> None:
        try:
            acks = self.client.inserts(self.stream, [row])
        except (KsqlServerError, KsqlUnreachable) as exc:
            raise _Refused(_client_message(exc)) from None
        for ack in acks:
            if ack.get("status") != "ok":
                raise _Refused(str(ack.get("message", ack)))

    # -- the versions table

    def current_version(self) -> str:
        sql = f"SELECT VERSION FROM {self.table} WHERE version_key = '{mg.CURRENT_VERSION_KEY}';"
        try:
            rows = self.pull(sql)
        except _Refused as exc:
            raise mg.MigrationError(f"Could not query {self.table}: {exc}") from None
        return str(rows[0][0]) if rows else mg.NONE_VERSION

    def _select(self, where: str) -> str:
        return (
            "SELECT version, checksum, previous, state, name, started_on, completed_on, "
            f"error_reason FROM {self.table} WHERE version_key {where};"
        )

    def optional_info(self, version: str) -> mg.VersionInfo | None:
        try:
            rows = self.pull(self._select(f"= '{version}'"))
        except _Refused as exc:
            raise mg.MigrationError(
                f"Failed to query state for migration with version {version}: {exc}"
            ) from None
        return mg.VersionInfo.from_row(rows[0]) if rows else None

    def version_info(self, version: str) -> mg.VersionInfo:
        info = self.optional_info(version)
        if info is None:
            raise mg.MigrationError(
                f"Failed to query state for migration with version {version}: no such "
                "migration is present in the migrations metadata table"
            )
        return info

    def infos(self, versions: list[int]) -> dict[int, mg.VersionInfo]:
        """The versions' rows in one multi-key pull query."""
        keys = "', '".join(map(str, versions))
        try:
            rows = self.pull(self._select(f"IN ('{keys}')"))
        except _Refused as exc:
            raise mg.MigrationError(
                f"Failed to query state for migration with versions {versions}: {exc}"
            ) from None
        found = {info.version: info for info in map(mg.VersionInfo.from_row, rows)}
        return {v: found[v] for v in versions if v in found}

    def latest_migrated_version(self) -> str:
        current = self.current_version()
        if current == mg.NONE_VERSION:
            return current
        info = self.version_info(current)
        if info.state == "MIGRATED":
            return current
        if info.previous == mg.NONE_VERSION:
            return mg.NONE_VERSION
        _check_migrated(info.previous, self.version_info(info.previous), current)
        return info.previous

    def write_state(
        self,
        state: str,
        started: str,
        migration: mg.MigrationFile,
        previous: str,
        error: str | None = None,
    ) -> None:
        """The migration's state as two events: the CURRENT row's and its version's."""
        completed = str(_now_ms()) if state in ("MIGRATED", "ERROR") else ""
        checksum = mg.checksum(migration.path)
        for key in (mg.CURRENT_VERSION_KEY, str(migration.version)):
            self.insert(
                {
                    "VERSION_KEY": key,
                    "VERSION": str(migration.version),
                    "NAME": migration.name,
                    "STATE": state,
                    "CHECKSUM": checksum,
                    "STARTED_ON": started,
                    "COMPLETED_ON": completed,
                    "PREVIOUS": previous,
                    "ERROR_REASON": error if error is not None else mg.EMPTY_ERROR_REASON,
                }
            )

    # -- the commands

    def check_initialized(self) -> None:
        for name, kind in ((self.stream, "stream"), (self.table, "table")):
            try:
                self.execute(f"DESCRIBE {name};")
            except _Refused as exc:
                raise mg.MigrationError(
                    f"Failed to verify existence of migrations metadata {kind} '{name}'. "
                    f"Did you run `strom {COMMAND} initialize-metadata`? Error message: {exc}"
                ) from None

    def initialize(self) -> int:
        replicas = self.config.replicas
        stream_topic = self.config.topic(mg.STREAM_TOPIC_NAME, self.service_id)
        table_topic = self.config.topic(mg.TABLE_TOPIC_NAME, self.service_id)
        create_stream = (
            f"CREATE STREAM {self.stream} (\n  version_key  STRING KEY,\n  version      STRING,\n"
            "  name         STRING,\n  state        STRING,  \n  checksum     STRING,\n"
            "  started_on   STRING,\n  completed_on STRING,\n  previous     STRING,\n"
            f"  error_reason STRING\n) WITH (  \n  KAFKA_TOPIC='{stream_topic}',\n"
            f"  VALUE_FORMAT='JSON',\n  PARTITIONS=1,\n  REPLICAS= {replicas} \n);\n"
        )
        columns = (
            "version",
            "name",
            "state",
            "checksum",
            "started_on",
            "completed_on",
            "previous",
            "error_reason",
        )
        create_table = (
            f"CREATE TABLE {self.table}\n  WITH (\n    KAFKA_TOPIC='{table_topic}'\n  )\n"
            "  AS SELECT \n    version_key, \n"
            + "".join(f"    latest_by_offset({c}) AS {c}, \n" for c in columns).removesuffix(", \n")
            + f" \n  FROM {self.stream} \n  GROUP BY version_key;\n"
        )
        _info("Initializing migrations metadata")
        for sql, name, kind in ((create_stream, self.stream, "stream"),
                                (create_table, self.table, "table")):  # fmt: skip
            _info(f"Creating {kind}: {name}")
            try:
                # the table's query reads the stream from its start: events written
                # before it runs (a server slow to start it) are in the table too
                self.execute(sql, {"auto.offset.reset": "earliest"})
            except _Refused as exc:
                _error(f"Failed to create {kind} {name}: {exc}")
                return 1
        _info("Migrations metadata initialized successfully")
        return 0

    def destroy(self) -> int:
        _info("Cleaning migrations metadata stream and table from ksqlDB server")
        if self._drop(self.table, "table") and self._drop(self.stream, "stream"):
            _info("Migrations metadata cleaned successfully")
            return 0
        return 1

    def _drop(self, name: str, kind: str) -> bool:
        try:
            [listed] = self.execute(f"LIST {kind.upper()}S;") or [{}]
        except _Refused as exc:
            _error(f"Failed to check for presence of metadata {kind} '{name}': {exc}")
            return False
        sources = listed.get(f"{kind}s", [])
        if not any(str(s.get("name", "")).upper() == name.upper() for s in sources):
            _info(f"Metadata {kind} does not exist. Skipping cleanup.")
            return True
        if kind == "table":
            try:
                [described] = self.execute(f"DESCRIBE {name};") or [{}]
            except _Refused as exc:
                _error(f"Failed to describe metadata {kind} '{name}': {exc}")
                return False
            queries = described.get("sourceDescription", {}).get("writeQueries", [])
            ids = [str(q.get("id")) for q in queries]
            if len(ids) > 1:
                _error(
                    "Found multiple queries writing to the metadata table. Query IDs: '"
                    + "', '".join(ids)
                    + "'."
                )
                return False
            if not ids:
                _info("Found 0 queries writing to the metadata table")
            else:
                _info(f"Found 1 query writing to the metadata table. Query ID: {ids[0]}")
                _info(f"Terminating query with ID: {ids[0]}")
                try:
                    self.execute(f"TERMINATE {ids[0]};")
                except _Refused as exc:
                    _error(
                        "Failed to terminate query populating metadata table. "
                        f"Query ID: {ids[0]}. Error: {exc}"
                    )
                    return False
        _info(f"Dropping migrations metadata {kind}: {name}")
        try:
            self.execute(f"DROP {kind.upper()} {name} DELETE TOPIC;")
        except _Refused as exc:
            _error(f"Failed to drop metadata {kind} '{name}': {exc}")
            return False
        return True

    def info(self) -> int:
        self.check_initialized()
        _info(f"Current migration version: {self.current_version()}")
        found = _all_migrations(self.config.migrations_dir)
        if not found:
            _info("No migrations files found")
            return 0
        infos = self.infos([m.version for m in found])
        _info(
            mg.format_versions(
                [infos.get(m.version) or mg.VersionInfo.pending(m) for m in found]
            ).rstrip("\n")
        )
        return 0

    def validate_command(self) -> int:
        self.check_initialized()
        if not self.validate():
            return 1
        _info("Successfully validated checksums for migrations that have already been applied")
        return 0

    def validate(self) -> bool:
        """Each migrated version, newest first, has its file and the file its checksum."""
        directory = self.config.migrations_dir
        version = self.latest_migrated_version()
        next_version: str | None = None
        while version != mg.NONE_VERSION:
            info = self.version_info(version)
            if next_version is not None:
                _check_migrated(version, info, next_version)
            migration = mg.migration_for_version(version, directory)
            if migration is None:
                _error(
                    f"No migrations file found for version with status MIGRATED. Version: {version}"
                )
                return False
            actual = mg.checksum(migration.path)
            if info.checksum != actual:
                _error(
                    f"Migrations file found for version {version} does not match the checksum "
                    f"saved for this version. Expected checksum: {info.checksum}. Actual "
                    f"checksum: {actual}. File name: {migration.path}"
                )
                return False
            next_version, version = version, info.previous
        return True

    def apply(self, args: argparse.Namespace) -> int:
        self.check_initialized()
        if args.dry_run:
            _info("This is a dry run. No ksqlDB statements will be submitted to the ksqlDB server.")
        _info("Validating current migration state before applying new migrations")
        if not self.validate():
            return 1
        previous = self.latest_migrated_version()
        _info("Loading migration files")
        chosen = self._to_apply(args, previous)
        if chosen:
            _info(f"{len(chosen)} migration file(s) loaded.")
        else:
            _info("No eligible migrations found.")
        runner = _MigrationRun(self, dict(args.define), args.dry_run)
        for migration in chosen:
            if not runner.apply(migration, previous):
                return 1
            previous = str(migration.version)
        if chosen and not args.dry_run:
            # the next command reads the table: wait until it shows the last state
            if not self.verify_migrated(previous, False, True, CATCH_UP_RETRIES):
                _error(
                    f"{self.table} does not show version {previous} as the current "
                    "version yet: its query has not caught up"
                )
        return 0

    def _to_apply(self, args: argparse.Namespace, previous: str) -> list[mg.MigrationFile]:
        directory = self.config.migrations_dir
        minimum = 1 if previous == mg.NONE_VERSION else int(previous) + 1
        if args.version:
            migration = mg.migration_for_version(args.version, directory)
            if migration is None:
                raise mg.MigrationError(f"No migration file with version {args.version} exists.")
            if args.version < minimum:
                raise mg.MigrationError(
                    "Version must be newer than the last version migrated. Last version "
                    f"migrated was {previous}"
                )
            return [migration]
        chosen = [
            m
            for m in _all_migrations(directory)
            if m.version >= minimum and (not args.until or m.version <= args.until)
        ]
        if args.next:
            if not chosen:
                raise mg.MigrationError("No eligible migrations found.")
            return chosen[:1]
        return chosen

    def verify_migrated(
        self,
        version: str,
        report: bool = True,
        current: bool = False,
        retries: int = VERIFY_RETRIES,
    ) -> bool:
        """``version`` shows MIGRATED in the table (and with ``current`` is the current
        version), asked again (a second apart, as ksqlDB's tool does) while the table's
        query has not caught up."""
        if version == mg.NONE_VERSION:
            return True
        problem = ""
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(VERIFY_BACKOFF_S)
            try:
                if current and self.current_version() != version:
                    problem = f"Expected current version {version}"
                    continue
                state = self.version_info(version).state
            except mg.MigrationError as exc:
                problem = str(exc)
                continue
            if state == "MIGRATED":
                return True
            problem = f"Expected status MIGRATED for version {version}. Got {state}"
        if report:
            _error(problem)
        return False


class _Refused(Exception):
    """The server refused a request; the message is ksqlDB's client's."""


class _MigrationRun:
    """One apply's statements: the variables of --define (set again before each pass
    over a file) and the properties its SET statements give."""

    def __init__(self, migrations: Migrations, defined: dict[str, str], dry_run: bool) -> None:
        self.migrations = migrations
        self.defined = defined
        self.dry_run = dry_run

    def apply(self, migration: mg.MigrationFile, previous: str) -> bool:
        _info(f"Applying migration version {migration.version}: {migration.name}")
        content = mg.read_file(migration.path)
        _info(f"{migration.path} contents:\n{content}")
        if self.dry_run:
            _info("Dry run complete. No migrations were actually applied.")
            return True
        if not self.migrations.verify_migrated(previous):
            _error(f"Failed to verify status of version {previous}")
            return False
        started = str(_now_ms())
        try:
            self.migrations.write_state("RUNNING", started, migration, previous)
        except _Refused as exc:
            _error(str(exc))
            return False
        try:
            commands = mg.split_sql(content)
            self._pass(commands, migration, started, previous, execute=False)
            self._pass(commands, migration, started, previous, execute=True)
        except mg.MigrationError as exc:
            _error(str(exc))
            return False
        try:
            self.migrations.write_state("MIGRATED", started, migration, previous)
        except _Refused as exc:
            _error(str(exc))
            return False
        _info("Successfully migrated")
        return True

    def _pass(
        self,
        commands: list[str],
        migration: mg.MigrationFile,
        started: str,
        previous: str,
        execute: bool,
    ) -> None:
        """Each statement parsed (DEFINE and UNDEFINE taking effect), and with
        ``execute`` run; the first that fails records ERROR with its reason."""
        variables = dict(self.defined)
        properties: dict[str, str] = {}
        for command in commands:
            try:
                self._statement(command, variables, properties, execute)
            except (mg.MigrationError, _Refused) as exc:
                action = "execute" if execute else "parse"
                reason = f"Failed to {action} sql: {command.strip()}. Error: {exc}"
                try:
                    self.migrations.write_state("ERROR", started, migration, previous, reason)
                except _Refused as refused:
                    _error(str(refused))
                raise mg.MigrationError(reason) from None

    def _statement(
        self, command: str, variables: dict[str, str], properties: dict[str, str], execute: bool
    ) -> None:
        from strom.ksql import statements as st
        from strom.ksql.parser import KsqlSyntaxError, parse_statement, substitute

        mg.check_supported(command)
        substituted = substitute(command, variables)
        try:
            statement = parse_statement(substituted.strip().removesuffix(";"))
        except KsqlSyntaxError as exc:
            raise mg.MigrationError(
                f"Failed to parse the statement. Statement: {command.strip()}. Reason: {exc}"
            ) from None
        if isinstance(statement, st.DefineVariable):
            variables[statement.name] = statement.value
        elif isinstance(statement, st.UndefineVariable):
            variables.pop(statement.name, None)
        elif not execute:
            return
        elif isinstance(statement, st.SetProperty):
            properties[statement.name] = statement.value
        elif isinstance(statement, st.UnsetProperty):
            properties.pop(statement.name, None)
        else:
            self.migrations.execute(substituted, dict(properties))


def _check_migrated(version: str, info: mg.VersionInfo, next_version: str) -> None:
    if info.state != "MIGRATED":
        raise mg.MigrationError(
            "Discovered version with previous version that does not have status MIGRATED. "
            f"Version: {next_version}. Previous version: {version}. Previous version status: "
            f"{info.state}"
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _client(config: mg.MigrationConfig, headers_file: str | None) -> KsqlRestClient:
    """The server's client: its URL checked, basic authentication when a username or
    password is set, TLS (PEM files) for an https URL, the headers file's headers."""
    from urllib.parse import urlsplit

    url = config[mg.SERVER_URL]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is no number raises
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise mg.MigrationError(f"Invalid ksql server URL: {url}")
    headers: dict[str, str] = {}
    if headers_file and headers_file.strip():
        from strom.cli.properties_file import PropertiesError, read_properties_file

        try:
            headers.update(read_properties_file(headers_file.strip()))
        except (PropertiesError, OSError):
            raise mg.MigrationError(f"Could not parse headers file '{headers_file}'.") from None
    user, password = config[mg.BASIC_AUTH_USERNAME], config[mg.BASIC_AUTH_PASSWORD]
    if user or password:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    context = None
    if parts.scheme == "https":
        from strom.security.tls import TlsConfigError, TlsSettings, client_context

        settings = TlsSettings(
            keystore_location=config[mg.SSL_KEYSTORE_LOCATION] or None,
            key_password=config[mg.SSL_KEY_PASSWORD] or None,
            truststore_location=config[mg.SSL_TRUSTSTORE_LOCATION] or None,
            endpoint_identification_algorithm="https" if config.flag(mg.SSL_VERIFY_HOST) else "",
        )
        try:
            context = client_context(settings)
        except TlsConfigError as exc:
            raise mg.MigrationError(str(exc)) from None
    return KsqlRestClient(url, headers, context)
