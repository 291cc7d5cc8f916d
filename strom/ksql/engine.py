"""Executing a ``POST /ksql`` request: its statements in order, each answered with the
entity ksqlDB 0.29 answers (``currentStatus``, ``streams``, ``sourceDescription``...),
the first failure with ksqlDB's ``statement_error`` carrying the entities of the
statements before it.

Owns the server's state (the metastore, rebuilt at start by replaying the command
topic; the command statuses ``/status`` reports), the DDL (CREATE STREAM / TABLE /
SOURCE TABLE with the topic created when PARTITIONS is given, DROP [DELETE TOPIC],
ALTER ... ADD COLUMN, CREATE / DROP TYPE, each written to the command topic before it
takes effect), the
metadata statements (SHOW, LIST, DESCRIBE: answered by ``strom.ksql.metadata``), the
connector statements (answered by the Connect cluster: ``strom.ksql.connectors``),
request-scoped SET / UNSET and DEFINE / UNDEFINE, and INSERT INTO ... VALUES (written by
``strom.ksql.inserts``).

The query statements: CREATE ... AS SELECT and INSERT INTO ... SELECT are planned
(``strom.ksql.planner``), their sink topic created, written to the command topic, and
their query registered (``strom.ksql.queries``) and started on Spark
(``strom.ksql.runtime``) by the server of the service id that owns it
(``join_query_group``, ``strom.ksql.ownership``), at once or, at start, once the command
topic is replayed (TERMINATE in it removes a query again, PAUSE keeps it stopped);
CREATE OR REPLACE checked as ksqlDB upgrades (``strom.ksql.upgrades``), the query
keeping its id; TERMINATE, PAUSE / RESUME (``QueryRegistry.pause``), EXPLAIN,
SHOW QUERIES, DESCRIBE's read and write queries; DROP refused while a query uses the
source. The transient queries of the server's /query endpoints are planned and
registered here too, pull queries answered from the sources materialized here
(``strom.ksql.push_queries``). SELECT and PRINT sent to /ksql answer ksqlDB's "issue it
to /query" error, as ksqlDB does. At start the processing log's topic is created and its
stream KSQL_PROCESSING_LOG added.

confluent-kafka's clients block: call ``execute`` from a worker thread; requests run one
at a time, and a command another server wrote is applied between them.

Does not own HTTP (``strom.ksql.server``), parsing or serialization.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from strom.ksql import asserts, formatter, processing_log
from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.command_topic import Command, CommandReader, CommandTopic, CommandTopicError
from strom.ksql.config import OUTPUT_TOPIC_PREFIX, KsqlServerConfig
from strom.ksql.connectors import ConnectorError, ConnectorStatements
from strom.ksql.inserts import RowWriter, check_value_count, insertable, statement_values
from strom.ksql.kafka_calls import (
    TIMEOUT_S,
    KafkaCallError,
    create_topic,
    delete_topic,
    topic_metadata,
)
from strom.ksql.metadata import MetadataStatements
from strom.ksql.metastore import Column, DataSource, KsqlStatementError, Metastore
from strom.ksql.ownership import QueryOwnership, slot_of
from strom.ksql.parser import KsqlSyntaxError, parse_statement, parse_statements
from strom.ksql.planner import (
    QueryPlan,
    SinkRequest,
    collect_limits_from_properties,
    new_query_planner,
    plan_query,
    walk,
    wrapping_from_properties,
)
from strom.ksql.pull_where import check_key_values, check_without_table_scan
from strom.ksql.queries import QueryRegistry, RunningQuery
from strom.ksql.query_stats import RuntimeStats
from strom.ksql.registry_formats import INFERRED_FORMATS, RegistryFormats
from strom.ksql.schema_ids import check_query_columns
from strom.ksql.upgrades import check_query_upgrade, check_source_upgrade

log = logging.getLogger(__name__)

ERROR_BAD_STATEMENT = 40001
ERROR_QUERY_ENDPOINT = 40002
ERROR_SERVER = 50000
ERROR_ASSERTION_FAILED = 41700  # HTTP 417, as ksqlDB
_KEY_FORMAT_DEFAULT = "ksql.persistence.default.format.key"
_VALUE_FORMAT_DEFAULT = "ksql.persistence.default.format.value"
_CLEANUP_POLICY_SET = (
    "Invalid config variable in the WITH clause: CLEANUP_POLICY.\n"
    "The CLEANUP_POLICY config is automatically inferred based on the type of source "
    "(STREAM or TABLE).\nUsers can't set the CLEANUP_POLICY config manually."
)
_NEEDS_QUERIES = (
    "{what} is not executed by this server yet; the statement was parsed but not executed."
)
_QUERY_PREFIXES = {"STREAM": "CSAS", "TABLE": "CTAS"}


class KsqlRequestError(Exception):
    """A request that failed: the HTTP status and ksqlDB's error body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.status = status
        self.body = body


def statement_error(
    message: str, text: str, entities: list[dict[str, Any]], code: int = ERROR_BAD_STATEMENT
) -> dict[str, Any]:
    return {
        "@type": "statement_error",
        "error_code": code,
        "message": message,
        "statementText": text,
        "entities": entities,
    }


@dataclass
class RequestScope:
    """What the statements of one request share: the properties (the request's
    ``streamsProperties`` and SET) and the variables (``sessionVariables`` and DEFINE)."""

    properties: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)


def _status_entity(text: str, command_id: str, message: str, sequence: int) -> dict[str, Any]:
    return {
        "@type": "currentStatus",
        "statementText": text,
        "commandId": command_id,
        "commandStatus": {"status": "SUCCESS", "message": message, "queryId": None},
        "commandSequenceNumber": sequence,
        "warnings": [],
    }


PULL_HELP = (
    " See https://cnfl.io/queries for more info.\n"
    "Add EMIT CHANGES if you intended to issue a push query."
)


def pull_clause_refusal(query: st.Query) -> str | None:
    """ksqlDB's PullQueryValidator's refusal of a clause a pull query may not have
    (checked, in its order, before the query is planned); None when it has none."""
    clauses = (
        (bool(query.source.joins), "JOIN"),
        (query.window is not None, "WINDOW"),
        (query.group_by is not None, "GROUP BY"),
        (query.partition_by is not None, "PARTITION BY"),
        (query.having is not None, "HAVING"),
    )
    for present, clause in clauses:
        if present:
            return f"Pull queries don't support {clause} clauses."
    return None


PULL_TABLE_SCANS = "ksql.query.pull.table.scan.enabled"
PULL_LIMITS = "ksql.query.pull.limit.clause.enabled"
PULL_LIMIT_DISABLED = (
    "LIMIT clause in pull queries is currently disabled. You can enable them by setting "
    "ksql.query.pull.limit.clause.enabled=true."
)
PULL_RANGE_SCANS = "ksql.query.pull.range.scan.enabled"


def pull_limit_refusal(plan: QueryPlan, settings: dict[str, Any]) -> str | None:
    """ksqlDB's refusal of a pull query's LIMIT when the settings disable it."""
    if plan.limit is not None and not _enabled(settings, PULL_LIMITS):
        return PULL_LIMIT_DISABLED + PULL_HELP
    return None


def _enabled(settings: dict[str, Any], name: str) -> bool:
    """A boolean setting (true unless set false), as a request's JSON or a file gives it."""
    return str(settings.get(name, "true")).strip().lower() != "false"


PUSH_V2 = "ksql.query.push.v2.enabled"


def scalable_push(plan: QueryPlan, settings: dict[str, Any], reset: str, writers: int) -> bool:
    """Whether ksqlDB runs a push query as a scalable push query (its id then starts
    ``SCALABLE_PUSH_QUERY_``, as ksqlDB's ScalablePushUtil decides): push queries v2
    enabled (off unless set), no GROUP BY, WINDOW, HAVING, PARTITION BY or JOIN, read
    from ``latest``, from a source one persistent query writes, without ROWPARTITION or
    ROWOFFSET."""
    return (
        str(settings.get(PUSH_V2, "false")).strip().lower() == "true"
        and plan.aggregation is None
        and plan.join is None
        and plan.partition_by is None
        and reset == "latest"
        and writers == 1
        and pull_pseudo_column_refusal(plan) is None
    )


# pseudo columns a pull query may not read (ksqlDB's SystemColumns, version 1 on)
PULL_DISALLOWED = ("ROWPARTITION", "ROWOFFSET")


def pull_pseudo_column_refusal(plan: QueryPlan) -> str | None:
    """ksqlDB's refusal of a pull query reading ROWPARTITION or ROWOFFSET: in its
    selected expressions, else in its WHERE clause (the columns in the order they come,
    each once); None when it reads neither."""
    clauses = (
        ("SELECT", [p.expression for p in plan.projection]),
        ("WHERE", [plan.where] if plan.where is not None else []),
    )
    for clause, expressions in clauses:
        found: list[str] = []
        for expression in expressions:
            for part in walk(expression):
                name = part.name if isinstance(part, ex.ColumnReference) else None
                if name in PULL_DISALLOWED and name not in found:
                    found.append(name)
        if found:
            columns = ", ".join(f"`{name}`" for name in found)
            return (
                f"Pull queries don't support the following columns in {clause} clauses: {columns}\n"
            )
    return None


class KsqlEngine:
    """The server's state and the execution of statements against it."""

    def __init__(self, config: KsqlServerConfig) -> None:
        self.config = config
        self.metastore = Metastore()
        self.admin = AdminClient(config.client_config())
        self.command_topic = CommandTopic(config, self.admin)
        self.statuses: dict[str, dict[str, Any]] = {}
        # Held while a request executes and while a followed command is applied.
        self.lock = threading.Lock()
        self._applied: set[int] = set()  # sequence numbers in the metastore
        self._reader: CommandReader | None = None
        self._follower: threading.Thread | None = None
        self._stopped = threading.Event()
        self._followed = 0  # the offset after the last command applied here
        self.registry = RegistryFormats(config.schema_registry_url, config.schema_registry_client)
        self.rows = RowWriter(config, self.registry)
        self.metadata = MetadataStatements(self.metastore, self.admin, config)
        self.cluster_id = ""
        # The figures of the persistent queries Spark runs here (DESCRIBE ... EXTENDED)
        self.runtime_stats = RuntimeStats()
        self.queries = QueryRegistry(
            self._spark_queries,
            config.listener,
            (config.query_retry_backoff_initial_ms, config.query_retry_backoff_max_ms),
        )
        self._materialized: dict[str, Any] = {}
        self._materialized_lock = threading.Lock()
        # The sources each CREATE ... AS SELECT's sink was made from: ksqlDB's drop
        # constraints (a source cannot be dropped while a sink made from it exists).
        self._made_from: dict[str, set[str]] = {}
        self.log_topic = processing_log.topic_name(config.service_id)
        # the connector statements, on the Kafka Connect cluster of ksql.connect.url
        self.connectors = ConnectorStatements(
            config, self.metastore, lambda source: self.metadata._description(source, False)
        )
        self.ownership: QueryOwnership | None = None

    def _spark_queries(self) -> Any:
        from strom.ksql.runtime import SparkQueries

        return SparkQueries(
            self.config.spark_master,
            self.config.spark_settings,
            self.config.state_dir / self.config.service_id,
            self.runtime_stats,
        )

    # ---- start: the command topic replayed
    def start(self) -> int:
        """Creates the command topic if needed and replays it; the commands applied. A
        thread then follows the topic: statements another server with the same service
        id accepts take effect here too."""
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        self.cluster_id = metadata.cluster_id or ""
        self.command_topic.ensure_exists()
        self._processing_log()
        self._reader = self.command_topic.reader()
        self._replaying = True
        applied = sum(self._apply(command) for command in self._reader.read_to_end())
        self._replaying = False
        self._followed = self._reader.position  # the commands applied, by offset
        for query in list(self.queries.queries.values()):
            self._start_query(query)
        self._follower = threading.Thread(target=self._follow, name="command-topic", daemon=True)
        self._follower.start()
        return applied

    def join_query_group(self, member_url: str) -> None:
        """Joins the service id's query group (``strom.ksql.ownership``), this server
        known to the others by ``member_url``: the persistent queries of the slots the
        group gives it start here, and move to another server when it leaves or dies."""
        self.queries.host = member_url
        ownership = QueryOwnership(
            self.config, self.admin, member_url, lambda owned: self.queries.rebalance()
        )
        self.ownership = ownership
        self.queries.owns = ownership.owns
        self.queries.hosts_of = self._hosts_of
        ownership.start()

    def _hosts_of(self, query_ids: list[str]) -> dict[str, str]:
        owners = self.ownership.owners() if self.ownership is not None else {}
        return {q: owners[slot_of(q)] for q in query_ids if slot_of(q) in owners}

    def _processing_log(self) -> None:
        """The processing log's topic, created when missing, and its stream."""
        new = NewTopic(
            self.log_topic,
            num_partitions=1,
            replication_factor=self.config.internal_topic_replicas,
        )
        try:
            create_topic(self.admin, new)
        except KafkaCallError as exc:
            log.warning("cannot create the processing log %s: %s", self.log_topic, exc)
            return
        text = processing_log.create_statement(self.log_topic)
        statement = parse_statement(text)
        assert isinstance(statement, st.CreateSource)
        source = self.metastore.source_from_statement(statement, text + ";")
        self.metastore.put_source(source)

    def _await_commands(self) -> None:
        """Waits (a bounded time) until the follower has applied every command in the
        topic now, as ksqlDB waits for its command runner: a statement another server
        accepted takes effect here before the next request."""
        reader = self._reader
        if reader is None or self._follower is None:
            return
        try:
            end = self.command_topic.end_offset()
        except CommandTopicError as exc:
            log.warning("%s", exc)
            return
        deadline = time.monotonic() + TIMEOUT_S
        while self._followed < end and time.monotonic() < deadline:
            self._stopped.wait(0.02)
        if self._followed < end:
            log.warning("commands up to %d not applied yet; executing anyway", end)

    def _follow(self) -> None:
        reader = self._reader
        assert reader is not None
        while not self._stopped.is_set():
            try:
                commands = reader.poll(0.2)
            except CommandTopicError as exc:
                log.warning("following the command topic: %s", exc)
                self._stopped.wait(1.0)
                continue
            with self.lock:
                for command in commands:
                    if command.sequence_number not in self._applied:
                        self._apply(command)
                self._followed = reader.position

    def _apply(self, command: Command) -> bool:
        """A command read from the topic applied to the metastore; whether it was."""
        self._applied.add(command.sequence_number)
        try:
            message = self._replay(command)
        except (KsqlStatementError, KsqlSyntaxError) as exc:
            log.warning("command %s not applied: %s", command.command_id, exc)
            self.statuses[command.command_id] = {
                "status": "ERROR",
                "message": str(exc),
                "queryId": None,
            }
            return False
        self._succeeded(command.command_id, message)
        return True

    def _replay(self, command: Command) -> str:
        statement = parse_statement(command.statement)
        defaults = (
            command.original_properties.get(_KEY_FORMAT_DEFAULT, "KAFKA"),
            command.original_properties.get(_VALUE_FORMAT_DEFAULT),
        )
        if isinstance(statement, st.CreateSource):
            source = self.metastore.source_from_statement(statement, command.statement, defaults)
            source = _source_wrapping(source, statement, command.original_properties)
            self.metastore.put_source(source)
            return f"{statement.kind.capitalize()} created"
        if isinstance(statement, st.DropSource):
            dropped = self.metastore.sources.get(statement.name)
            self._remove_source(statement.name)
            return _dropped_message(statement.name, dropped)
        if isinstance(statement, st.AlterSource):
            altered = self.metastore.altered(statement, command.statement)
            self.metastore.put_source(altered)
            return _altered_message(altered)
        if isinstance(statement, st.CreateType):
            self.metastore.register_type(statement)
            return _type_registered_message(statement, self.metastore)
        if isinstance(statement, st.DropType):
            self.metastore.drop_type(st.DropType(statement.name, if_exists=True))
            return f"Dropped type '{statement.name}'"
        if isinstance(statement, st.CreateAsSelect | st.InsertInto):
            prefix = command.streams_properties.get(
                OUTPUT_TOPIC_PREFIX, command.original_properties.get(OUTPUT_TOPIC_PREFIX, "")
            )
            query = self._persistent_query(
                statement,
                command.statement,
                command.streams_properties,
                command.sequence_number,
                str(prefix),
            )
            if not getattr(self, "_replaying", False):
                self._start_query(query)
            return f"Created query with ID {query.query_id}"
        if isinstance(statement, st.Terminate):
            for query_id in self._terminated(statement):
                self.queries.terminate(query_id)
            return "Query terminated."
        if isinstance(statement, st.PauseQuery | st.ResumeQuery):
            return self._paused_or_resumed(statement)
        raise KsqlStatementError(f"not a command: {command.statement}")

    def _record(self, command_id: str, text: str, properties: dict[str, Any]) -> int:
        """Writes the command; its sequence number."""
        original = {
            _KEY_FORMAT_DEFAULT: self.config.default_key_format,
        }
        if self.config.default_value_format is not None:
            original[_VALUE_FORMAT_DEFAULT] = self.config.default_value_format
        if self.config.output_topic_prefix:  # the sink topics of a replay stay the same
            original[OUTPUT_TOPIC_PREFIX] = self.config.output_topic_prefix
        command = Command(command_id, text, dict(properties), original)
        sequence = self.command_topic.append(command)
        self._applied.add(sequence)  # the caller applies it; the follower must not
        return sequence

    # ---- a request
    def execute(
        self,
        text: str,
        streams_properties: dict[str, Any] | None = None,
        session_variables: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The entities of each statement of ``text``; ``KsqlRequestError`` at the first
        that fails. One request at a time, once the commands written before it (by any
        server of the service id) are applied here."""
        self._await_commands()
        with self.lock:
            return self._execute(text, streams_properties, session_variables)

    def _execute(
        self,
        text: str,
        streams_properties: dict[str, Any] | None,
        session_variables: dict[str, Any] | None,
    ) -> list[dict[str, Any]]:
        scope = RequestScope(
            dict(streams_properties or {}),
            {str(k): str(v) for k, v in (session_variables or {}).items()},
        )
        entities: list[dict[str, Any]] = []
        statements = parse_statements(text, scope.variables)
        while True:
            try:
                parsed = next(statements)
            except StopIteration:
                return entities
            except KsqlSyntaxError as exc:
                raise KsqlRequestError(
                    400, statement_error(str(exc), _with_semicolon(exc.statement_text), entities)
                ) from None
            statement_text = _with_semicolon(parsed.text)
            try:
                entity = self._execute_one(parsed.statement, statement_text, scope)
            except _QueryEndpointError as exc:
                raise KsqlRequestError(
                    400, statement_error(str(exc), statement_text, [], ERROR_QUERY_ENDPOINT)
                ) from None
            except KsqlStatementError as exc:
                raise KsqlRequestError(
                    400, statement_error(str(exc), statement_text, entities)
                ) from None
            except KafkaException as exc:
                error = exc.args[0]
                message = error.str() if isinstance(error, KafkaError) else str(exc)
                raise KsqlRequestError(
                    500, statement_error(message, statement_text, entities, ERROR_SERVER)
                ) from None
            if entity is not None:
                entities.append(entity)

    def _execute_one(
        self, statement: st.Statement, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        handler = self._handlers().get(type(statement))
        if handler is None:
            raise KsqlStatementError(_NEEDS_QUERIES.format(what=type(statement).__name__))
        return handler(statement, text, scope)

    def _handlers(self) -> dict[type, Callable[[Any, str, RequestScope], dict[str, Any] | None]]:
        return {
            st.CreateSource: self._create_source,
            st.DropSource: self._drop_source,
            st.CreateType: self._create_type,
            st.DropType: self._drop_type,
            st.CreateConnector: self._connector_statement,
            st.DropConnector: self._connector_statement,
            st.DescribeConnector: self._connector_statement,
            st.ListConnectors: self._connector_statement,
            st.ListConnectorPlugins: self._connector_statement,
            st.PauseQuery: self._pause_or_resume,
            st.ResumeQuery: self._pause_or_resume,
            st.InsertValues: self._insert_values,
            st.Show: self._show,
            st.DescribeSource: self._describe_source,
            st.DescribeSources: lambda statement, text, _: self.metadata.describe_sources(
                statement, text
            ),
            st.DescribeFunction: lambda statement, text, _: self.metadata.describe_function(
                statement, text
            ),
            st.SetProperty: self._set_property,
            st.UnsetProperty: self._unset_property,
            st.DefineVariable: _no_entity,
            st.UndefineVariable: _no_entity,
            st.Query: _query_endpoint,
            st.PrintTopic: _query_endpoint,
            st.CreateAsSelect: self._create_as_select,
            st.InsertInto: self._insert_into,
            st.Terminate: self._terminate,
            st.Explain: self._explain,
            st.AlterSource: self._alter_source,
            st.RunScript: _cli_only,
            st.AssertTopic: self._assert_topic,
            st.AssertSchema: self._assert_schema,
        }

    # ---- ASSERT TOPIC / SCHEMA
    def _assert_topic(
        self, statement: st.AssertTopic, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        timeout = asserts.timeout_ms(statement, self.config.assert_topic_timeout_ms)
        self._asserted(lambda: asserts.check_topic(self.admin, statement), timeout)
        return asserts.topic_entity(text, statement)

    def _assert_schema(
        self, statement: st.AssertSchema, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        try:
            asserts.schema_id_of(statement)
        except ValueError as exc:
            raise KsqlStatementError(str(exc)) from None
        registry = self.registry.client()
        timeout = asserts.timeout_ms(statement, self.config.assert_schema_timeout_ms)
        self._asserted(lambda: asserts.check_schema(registry, statement), timeout)
        return asserts.schema_entity(text, statement)

    def _asserted(self, check: Callable[[], None], timeout_ms: int) -> None:
        """Wait for an assertion with the engine's lock let go (a TIMEOUT may be long,
        and other requests go on meanwhile); ksqlDB's 417 answer when it does not hold."""
        self.lock.release()
        try:
            asserts.retried(check, timeout_ms)
        except asserts.AssertionFailed as exc:
            raise KsqlRequestError(
                417,
                {
                    "@type": "generic_error",
                    "error_code": ERROR_ASSERTION_FAILED,
                    "message": str(exc),
                },
            ) from None
        finally:
            self.lock.acquire()

    # ---- DDL
    def _create_source(
        self, statement: st.CreateSource, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        if "CLEANUP_POLICY" in statement.properties:
            raise KsqlStatementError(_CLEANUP_POLICY_SET)
        defaults = (
            str(scope.properties.get(_KEY_FORMAT_DEFAULT, self.config.default_key_format)),
            scope.properties.get(_VALUE_FORMAT_DEFAULT, self.config.default_value_format),
        )
        existing = self.metastore.source(statement.name)
        if existing is None or not statement.if_not_exists:
            statement = self._with_inferred_columns(statement, defaults)
        source = self.metastore.source_from_statement(statement, text, defaults)
        source = _source_wrapping(source, statement, scope.properties)
        if existing is not None and statement.if_not_exists:
            return {
                "@type": "warning_entity",
                "statementText": text,
                "message": f"Cannot add {source.kind.lower()} `{source.name}`: A "
                f"{existing.kind.lower()} with the same name already exists.",
                "warnings": [],
            }
        self.metastore.check_can_add(source, statement.or_replace)
        if existing is not None:
            if self.queries.using(existing.name)[1]:
                raise KsqlStatementError(
                    f"Cannot add {source.kind.lower()} '{source.name}': A "
                    f"{existing.kind.lower()} with the same name already exists"
                )
            check_source_upgrade(existing, source)
        # What ksqlDB's injectors add before the statement is kept: the formats it
        # defaulted to, then the topic's cleanup policy.
        properties = dict(statement.properties)
        if "FORMAT" not in properties:
            properties.setdefault("KEY_FORMAT", source.key_format)
            properties.setdefault("VALUE_FORMAT", source.value_format)
        self._ensure_topic(statement, source, properties)
        # the columns' schema under a subject that has none (a side read from the
        # registry has one), as ksqlDB's injectors: inference first, then registration
        self.registry.register(source, if_absent=True)
        properties["CLEANUP_POLICY"] = "compact" if source.kind == "TABLE" else "delete"
        formatted = formatter.create_source(statement, properties)
        command_id = f"{source.kind.lower()}/`{source.name}`/create"
        sequence = self._record(command_id, formatted, scope.properties)
        self.metastore.put_source(replace(source, statement=formatted))
        message = f"{source.kind.capitalize()} created"
        self._succeeded(command_id, message)
        return _status_entity(formatted, command_id, message, sequence)

    def _alter_source(
        self, statement: st.AlterSource, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        """ALTER STREAM|TABLE ... ADD COLUMN: value columns added to a source a CREATE
        made (as ksqlDB: not a source table or stream, not a CREATE ... AS SELECT's),
        written to the command topic before it takes effect."""
        altered = self.metastore.altered(statement, text)
        command_id = f"{statement.kind.lower()}/{statement.name}/alter"
        sequence = self._record(command_id, text, scope.properties)
        self.metastore.put_source(altered)
        message = _altered_message(altered)
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _with_inferred_columns(
        self, statement: st.CreateSource, defaults: tuple[str, str | None]
    ) -> st.CreateSource:
        """The statement with the key and value columns it lacks taken from the schema
        registry, when its formats are ones ksqlDB infers them for."""
        props = statement.properties
        topic = props.get("KAFKA_TOPIC")
        both = props.get("FORMAT")
        key_format = str(both or props.get("KEY_FORMAT") or defaults[0] or "").upper()
        value_format = str(both or props.get("VALUE_FORMAT") or defaults[1] or "").upper()
        elements = list(statement.elements)
        keys = [e for e in elements if e.is_key]
        values = [e for e in elements if not e.is_key]
        if topic is None:
            return statement
        value_columns = [e for e in values if e.constraint is None]
        for side, fmt, given in (("KEY", key_format, keys), ("VALUE", value_format, value_columns)):
            if props.get(f"{side}_SCHEMA_ID") is None:
                continue
            if fmt not in INFERRED_FORMATS:
                raise KsqlStatementError(
                    f"{side}_FORMAT should support schema inference when {side}_SCHEMA_ID is "
                    f"provided. Current format is {fmt}."
                )
            if given:
                raise KsqlStatementError(
                    f"Table elements and {side}_SCHEMA_ID cannot both exist for create statement."
                )
        if not keys and key_format in INFERRED_FORMATS:
            constraint = "PRIMARY KEY" if statement.kind == "TABLE" else "KEY"
            keys = [
                st.TableElement(c.name, c.type, constraint)
                for c in self._registry_columns(str(topic), key_format, props, "KEY")
            ]
        if not value_columns and value_format in INFERRED_FORMATS:
            values += [
                st.TableElement(c.name, c.type)
                for c in self._registry_columns(str(topic), value_format, props, "VALUE")
            ]
        inferred = tuple(keys + values)
        return (
            statement if inferred == statement.elements else replace(statement, elements=inferred)
        )

    def _registry_columns(
        self, topic: str, fmt: str, properties: dict[str, Any], side: str
    ) -> list[Column]:
        """A side's columns from the schema ``<side>_SCHEMA_ID`` names, else from the
        subject's latest schema."""
        full_name = _schema_full_name(properties, side)
        schema_id = properties.get(f"{side}_SCHEMA_ID")
        # WRAP_SINGLE_VALUE=false: the value's schema is one column, a record's too; a
        # key's always is (ksqlDB infers keys unwrapped), but in PROTOBUF (a message)
        if side == "KEY":
            wrapped = fmt == "PROTOBUF"
        else:
            wrapped = properties.get("WRAP_SINGLE_VALUE") is not False
        if schema_id is None:
            return self.registry.inferred_columns(
                topic, fmt, side == "KEY", full_name, wrapped=wrapped
            )
        if not isinstance(schema_id, int) or schema_id < 0:
            raise KsqlStatementError(
                f"Invalid value {schema_id} for property {side}_SCHEMA_ID: Not an integer."
            )
        return self.registry.columns_of_id(
            topic, fmt, side == "KEY", schema_id, full_name, wrapped=wrapped
        )

    def _ensure_topic(
        self, statement: st.CreateSource, source: DataSource, properties: dict[str, Any]
    ) -> None:
        """The source's topic, created when missing and PARTITIONS is given (ksqlDB's
        TopicCreateInjector); ``properties``: the statement's, formats added."""
        partitions = statement.properties.get("PARTITIONS")
        replicas = statement.properties.get("REPLICAS")
        for name, value in (("PARTITIONS", partitions), ("REPLICAS", replicas)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise KsqlStatementError(
                    f"Invalid value {value} for property {name}: must be a positive integer"
                )
        found = topic_metadata(self.admin, source.topic)
        if found is not None:
            if partitions is not None and partitions != len(found.partitions):
                raise KsqlStatementError(
                    f"A Kafka topic with the name '{source.topic}' already exists, with "
                    "different partition/replica configuration than required. KSQL expects "
                    f"{partitions} partitions (topic has {len(found.partitions)})."
                )
            return
        if partitions is None:
            raise KsqlStatementError(
                f"Topic '{source.topic}' does not exist. If you want to create a new topic for "
                "the stream/table please re-run the statement providing the required "
                "'PARTITIONS' configuration in the WITH clause (and optionally 'REPLICAS'). "
                "For example: "
                + formatter.create_source(statement, {**properties, "PARTITIONS": 2})
            )
        topic_config = {"cleanup.policy": "compact" if source.kind == "TABLE" else "delete"}
        retention = statement.properties.get("RETENTION_MS")
        if retention is not None:
            topic_config["retention.ms"] = str(retention)
        new = NewTopic(
            source.topic,
            num_partitions=partitions,
            replication_factor=replicas if replicas is not None else -1,
            config=topic_config,
        )
        try:
            create_topic(self.admin, new)
        except KafkaCallError as exc:
            raise KsqlStatementError(f"Could not create topic '{source.topic}': {exc}") from None

    def _drop_source(
        self, statement: st.DropSource, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        dropped = self.metastore.droppable(statement)
        if dropped is not None:
            self._check_droppable(dropped.name)
        if dropped is not None and statement.delete_topic and dropped.is_source:
            raise KsqlStatementError(f"Cannot delete topic for read-only source: {dropped.name}")
        command_id = f"{statement.kind.lower()}/{statement.name}/drop"
        sequence = self._record(command_id, text, scope.properties)
        self._remove_source(statement.name)
        if dropped is not None and statement.delete_topic:
            self._delete_topic(dropped.topic)
        message = _dropped_message(statement.name, dropped)
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _check_droppable(self, name: str) -> None:
        """ksqlDB's refusals of DROP: while an INSERT INTO ... SELECT reads or writes the
        source, or while a sink a CREATE ... AS SELECT made from it exists. The query
        of the source's own CREATE ... AS SELECT does not stop it: the DROP ends it."""
        inserts = [q for q in self.queries.queries.values() if _is_insert(q.query_id)]
        reads = sorted(q.query_id for q in inserts if name in q.sources)
        writes = sorted(q.query_id for q in inserts if name in q.sinks)
        if reads or writes:
            raise KsqlStatementError(
                f"Cannot drop {name}.\n"
                f"The following queries read from this source: [{', '.join(reads)}].\n"
                f"The following queries write into this source: [{', '.join(writes)}].\n"
                f"You need to terminate them before dropping {name}."
            )
        readers = sorted(
            sink
            for sink, sources in self._made_from.items()
            if name in sources and sink != name and sink in self.metastore.sources
        )
        if readers:
            raise KsqlStatementError(
                f"Cannot drop {name}.\n"
                f"The following streams and/or tables read from this source: "
                f"[{', '.join(readers)}].\n"
                f"You need to drop them before dropping {name}."
            )

    def _remove_source(self, name: str) -> None:
        """The source gone from the metastore, and the query its CREATE ... AS SELECT
        made with it (as ksqlDB terminates it on DROP), its checkpoint deleted."""
        self.metastore.remove_source(name)
        self._made_from.pop(name, None)
        writer = self._writer_of(name)
        if writer is not None:
            self.queries.terminate(writer.query_id)

    def _delete_topic(self, topic: str) -> None:
        try:
            delete_topic(self.admin, topic)
        except KafkaCallError as exc:
            raise KsqlStatementError(
                f"Could not delete the corresponding kafka topic: {topic}: {exc}"
            ) from None

    def _create_type(
        self, statement: st.CreateType, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        command_id = f"type/{statement.name}/create"
        if statement.name in self.metastore.types and statement.if_not_exists:
            message = self.metastore.register_type(statement) or ""
            return _status_entity(text, command_id, message, -1)
        self.metastore.resolve(statement.type)  # an unknown type inside fails here
        if statement.name in self.metastore.types:
            self.metastore.register_type(statement)  # raises ksqlDB's error
        sequence = self._record(command_id, text, scope.properties)
        self.metastore.register_type(statement)
        message = _type_registered_message(statement, self.metastore)
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _drop_type(self, statement: st.DropType, text: str, scope: RequestScope) -> dict[str, Any]:
        command_id = f"type/{statement.name}/drop"
        if statement.name not in self.metastore.types:
            if not statement.if_exists:
                raise KsqlStatementError(f"Type {statement.name} does not exist.")
            return _status_entity(text, command_id, f"Type '{statement.name}' does not exist", -1)
        sequence = self._record(command_id, text, scope.properties)
        self.metastore.drop_type(statement)
        message = f"Dropped type '{statement.name}'"
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _succeeded(self, command_id: str, message: str) -> None:
        created = "Created query with ID "
        query_id = message.removeprefix(created) if message.startswith(created) else None
        self.statuses[command_id] = {"status": "SUCCESS", "message": message, "queryId": query_id}

    # ---- the connector statements: answered by the Connect cluster
    def _connector_statement(
        self, statement: st.Statement, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        try:
            return self.connectors.execute(statement, text)
        except ConnectorError as exc:  # ksqlDB's error of the whole request
            raise KsqlRequestError(exc.status, exc.body) from None

    # ---- INSERT VALUES
    def _insert_values(
        self, statement: st.InsertValues, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        check_value_count(statement)
        source = insertable(self.metastore, statement.target)
        try:
            values = statement_values(source, statement)
        except KsqlStatementError as exc:
            raise KsqlStatementError(
                f"Failed to insert values into '{source.name}'. {exc}"
            ) from None
        self.rows.write(source, values)
        return None

    # ---- persistent queries
    def _create_as_select(
        self, statement: st.CreateAsSelect, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        existing = self.metastore.source(statement.name)
        if existing is not None and statement.if_not_exists:
            return {
                "@type": "warning_entity",
                "statementText": text,
                "message": f"Cannot add {statement.kind.lower()} `{statement.name}`: A "
                f"{existing.kind.lower()} with the same name already exists.",
                "warnings": [],
            }
        if existing is not None and not statement.or_replace:
            raise KsqlStatementError(
                f"Cannot add {statement.kind.lower()} '{statement.name}': A "
                f"{existing.kind.lower()} with the same name already exists"
            )
        plan = self._plan(statement, text, self._topic_prefix(scope), scope.properties)
        assert plan.sink is not None
        if existing is not None:  # CREATE OR REPLACE: an upgrade of the sink and its query
            self.metastore.check_can_add(plan.sink, True)
            check_source_upgrade(existing, plan.sink)
            replaced = self._writer_of(statement.name)
            if replaced is not None:
                check_query_upgrade(replaced.plan, plan)
        self._check_schema_ids(plan.sink)
        self._ensure_sink_topic(plan)
        self.registry.register(plan.sink)  # before its first row, as ksqlDB does
        command_id = f"{statement.kind.lower()}/`{statement.name}`/create"
        return self._run_persistent(statement, text, scope, command_id)

    def _check_schema_ids(self, sink: DataSource) -> None:
        """A query sink's KEY_SCHEMA_ID / VALUE_SCHEMA_ID: of a registry format, and its
        columns those of the schema, as ksqlDB checks them."""
        for side, fmt, columns in (
            ("KEY", sink.key_format, sink.key_columns),
            ("VALUE", sink.value_format, sink.value_columns),
        ):
            if sink.properties.get(f"{side}_SCHEMA_ID") is None:
                continue
            if fmt not in INFERRED_FORMATS:
                raise KsqlStatementError(
                    f"{side}_FORMAT should support schema inference when {side}_SCHEMA_ID is "
                    f"provided. Current format is {fmt}."
                )
            registered = self._registry_columns(sink.topic, fmt, sink.properties, side)
            check_query_columns(list(columns), registered, side == "KEY")

    def _insert_into(
        self, statement: st.InsertInto, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        self._plan(statement, text, self._topic_prefix(scope), scope.properties)
        command_id = f"stream/`{statement.target}`/create"
        return self._run_persistent(statement, text, scope, command_id)

    def _run_persistent(
        self,
        statement: st.CreateAsSelect | st.InsertInto,
        text: str,
        scope: RequestScope,
        command_id: str,
    ) -> dict[str, Any]:
        sequence = self._record(command_id, text, scope.properties)
        query = self._persistent_query(
            statement, text, scope.properties, sequence, self._topic_prefix(scope)
        )
        self._start_query(query)
        message = f"Created query with ID {query.query_id}"
        self._succeeded(command_id, message)
        entity = _status_entity(text, command_id, message, sequence)
        entity["commandStatus"]["queryId"] = query.query_id
        return entity

    def _topic_prefix(self, scope: RequestScope) -> str:
        """ksql.output.topic.name.prefix: the request's, else the server's."""
        return str(scope.properties.get(OUTPUT_TOPIC_PREFIX, self.config.output_topic_prefix))

    def _plan(
        self,
        statement: st.CreateAsSelect | st.InsertInto,
        text: str,
        topic_prefix: str = "",
        properties: dict[str, Any] | None = None,
        check_partitions: bool = True,
    ) -> QueryPlan:
        """The statement's plan (``properties``: the request's, over the server's);
        ``check_partitions``: with the check that a join's sides have as many partitions
        (not for a command of the command topic, checked when it was written: a topic's
        partitions added since stop no query at a restart)."""
        new_planner = new_query_planner({**self.config.properties, **(properties or {})})
        default_key_format = str(
            (properties or {}).get(_KEY_FORMAT_DEFAULT, self.config.default_key_format)
        ).upper()
        source = self.metastore.source(statement.query.source.left.name)
        partitions = None
        if source is not None:
            found = topic_metadata(self.admin, source.topic)
            partitions = len(found.partitions) if found is not None else None
        if isinstance(statement, st.CreateAsSelect):
            request = SinkRequest(
                statement.name,
                statement.kind,
                statement.properties,
                None,
                partitions,
                text,
                topic_prefix,
                new_planner,
                default_key_format,
            )
        else:  # the planner refuses a table, a read-only stream or one with headers
            target = self.metastore.source(statement.target)
            if target is None:
                raise KsqlStatementError(f"Source `{statement.target}` does not exist.")
            request = SinkRequest(
                target.name,
                None,
                statement.properties,
                target,
                partitions,
                text,
                new_planner=new_planner,
                default_key_format=default_key_format,
            )
        counts = self._partition_count if check_partitions else None
        return plan_query(statement.query, self.metastore, request, text, counts)

    def _partition_count(self, topic: str) -> int | None:
        """A topic's partition count (None when it does not exist), for the planner's
        check that a join's sides have the same."""
        found = topic_metadata(self.admin, topic)
        return len(found.partitions) if found is not None else None

    def _persistent_query(
        self,
        statement: st.CreateAsSelect | st.InsertInto,
        text: str,
        properties: dict[str, Any],
        sequence: int,
        topic_prefix: str = "",
    ) -> RunningQuery:
        """The query of a recorded statement, its sink added to the metastore."""
        plan = self._plan(statement, text, topic_prefix, properties, check_partitions=False)
        plan = wrapping_from_properties(plan, statement, properties)
        plan = collect_limits_from_properties(plan, {**self.config.properties, **properties})
        assert plan.sink is not None
        replaced = (
            self._writer_of(statement.name)
            if isinstance(statement, st.CreateAsSelect) and statement.or_replace
            else None
        )
        if replaced is not None:  # the upgraded query keeps its id, offsets and state
            query_id = replaced.query_id
            self.metastore.put_source(replace(plan.sink, query_sink=True))
        elif isinstance(statement, st.CreateAsSelect):
            query_id = f"{_QUERY_PREFIXES[statement.kind]}_{statement.name}_{sequence}"
            self.metastore.put_source(replace(plan.sink, query_sink=True))
        else:
            query_id = f"INSERTQUERY_{sequence}"
        query = RunningQuery(query_id, text, plan, properties=dict(properties))
        if isinstance(statement, st.CreateAsSelect):
            self._made_from[statement.name] = set(query.sources)
        self.queries.add(query)
        return query

    def _writer_of(self, sink: str) -> RunningQuery | None:
        """The persistent query CREATE ... AS SELECT made to write ``sink``."""
        for query_id in self.queries.using(sink)[1]:
            found = self.queries.queries[query_id]
            if not _is_insert(query_id):
                return found
        return None

    def _starting_offsets(self, plan: QueryPlan, reset: str) -> str:
        """Where a new persistent query starts: ``earliest``, or for ``latest`` the end
        offsets of its sources' partitions now, as Spark's JSON (a query resuming from
        its checkpoint ignores it). Spark resolves ``latest`` only once its stream has
        started, seconds later, so records written as soon as the statement is answered
        were skipped; ksqlDB's query has its consumer's position by then."""
        if reset != "latest":
            return reset
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        every = []
        for topic in dict.fromkeys(s.topic for s in plan.sources):
            found = topic_metadata(self.admin, topic)
            if found is None:
                return reset
            every += [TopicPartition(topic, p) for p in sorted(found.partitions)]
        try:
            futures = self.admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in every}, request_timeout=30
            )
            ends: dict[str, dict[str, int]] = {}
            for tp, future in futures.items():
                ends.setdefault(tp.topic, {})[str(tp.partition)] = future.result().offset
        except KafkaException as exc:  # Spark resolves latest itself, later
            log.warning("end offsets of %s: %s", [tp.topic for tp in every], exc)
            return reset
        return json.dumps(ends)

    def _start_query(self, query: RunningQuery) -> None:
        from strom.ksql.runtime import QuerySpec

        properties = query.properties

        def setting(name: str, default: str) -> str:
            value = properties.get(name, properties.get("ksql.streams." + name, default))
            return str(value).strip().lower()

        merged = {**self.config.properties, **properties}
        throw = merged.get("ksql.timestamp.throw.on.invalid", "false")
        throw_on_invalid = str(throw).strip().lower() == "true"
        spec = QuerySpec(
            query_id=query.query_id,
            plan=query.plan,
            client=self.config.client_config(),
            registry_url=self.config.schema_registry_url,
            registry_settings=dict(self.config.schema_registry_client),
            log_topic=self.log_topic,
            exactly_once=setting("processing.guarantee", self.config.processing_guarantee)
            in ("exactly_once", "exactly_once_v2"),
            offset_reset=self._starting_offsets(
                query.plan, setting("auto.offset.reset", self.config.auto_offset_reset)
            ),
            trigger_ms=self.config.trigger_interval_ms,
            timestamp_throw_on_invalid=throw_on_invalid,
        )
        self.queries.start(query, spec)

    def _ensure_sink_topic(self, plan: QueryPlan) -> None:
        sink = plan.sink
        assert sink is not None
        partitions = sink.properties.get("PARTITIONS")
        found = topic_metadata(self.admin, sink.topic)
        if found is not None:
            if partitions is not None and partitions != len(found.partitions):
                raise KsqlStatementError(
                    f"A Kafka topic with the name '{sink.topic}' already exists, with different "
                    "partition/replica configuration than required. KSQL expects "
                    f"{partitions} partitions (topic has {len(found.partitions)})."
                )
            return
        replicas = sink.properties.get("REPLICAS")
        topic_config = {"cleanup.policy": "compact" if sink.kind == "TABLE" else "delete"}
        retention = sink.properties.get("RETENTION_MS")
        if retention is not None:
            topic_config["retention.ms"] = str(retention)
        new = NewTopic(
            sink.topic,
            num_partitions=partitions or 1,
            replication_factor=replicas if replicas is not None else -1,
            config=topic_config,
        )
        try:
            create_topic(self.admin, new)
        except KafkaCallError as exc:
            raise KsqlStatementError(f"Could not create topic '{sink.topic}': {exc}") from None

    def _terminated(self, statement: st.Terminate) -> list[str]:
        if statement.query_id is None:
            return sorted(
                q.query_id for q in self.queries.queries.values() if q.query_type == "PERSISTENT"
            )
        return [statement.query_id.upper()] if statement.query_id else []

    def _terminate(self, statement: st.Terminate, text: str, scope: RequestScope) -> dict[str, Any]:
        ids = self._terminated(statement)
        if statement.query_id is not None:
            found = self.queries.queries.get(ids[0])
            if found is None:
                raise KsqlStatementError(f"Unknown queryId: {ids[0]}")
            if found.query_type != "PERSISTENT":  # a push query: not a command
                self.queries.terminate(found.query_id)
                return _status_entity(text, f"terminate/{found.query_id}/execute",
                                      "Query terminated.", -1)  # fmt: skip
        command_id = (
            f"terminate/{statement.query_id.upper() if statement.query_id else 'ALL'}/execute"
        )
        sequence = self._record(command_id, text, scope.properties)
        for query_id in ids:
            self.queries.terminate(query_id)
        message = "Query terminated."
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _pause_or_resume(
        self, statement: st.PauseQuery | st.ResumeQuery, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        """PAUSE / RESUME, as ksqlDB's: a persistent query's id must be known; a
        transient query's id (``transient_`` in it) is written all the same and pauses
        nothing; ALL takes every persistent query. Written to the command topic, so the
        other servers and a restart pause or resume it too."""
        query_id = statement.query_id
        if query_id is not None and "transient_" not in query_id.lower():
            found = self.queries.queries.get(query_id)
            if found is None or found.query_type != "PERSISTENT":
                raise KsqlStatementError(f"Unknown queryId: {query_id}")
        verb = "pause" if isinstance(statement, st.PauseQuery) else "resume"
        command_id = f"{verb}/{query_id if query_id is not None else 'ALL'}/execute"
        sequence = self._record(command_id, text, scope.properties)
        message = self._paused_or_resumed(statement)
        self._succeeded(command_id, message)
        return _status_entity(text, command_id, message, sequence)

    def _paused_or_resumed(self, statement: st.PauseQuery | st.ResumeQuery) -> str:
        """PAUSE / RESUME applied here; ksqlDB's message."""
        if statement.query_id is not None:
            ids = [statement.query_id]
        else:
            ids = sorted(
                q.query_id for q in self.queries.queries.values() if q.query_type == "PERSISTENT"
            )
        paused = isinstance(statement, st.PauseQuery)
        for query_id in ids:
            (self.queries.pause if paused else self.queries.resume)(query_id)
        return "Query paused." if paused else "Query resumed."

    def _explain(self, statement: st.Explain, text: str, scope: RequestScope) -> dict[str, Any]:
        if statement.query_id is not None:
            found = self.queries.queries.get(statement.query_id.upper())
            if found is None:
                raise KsqlStatementError(
                    f"Query with id:{statement.query_id} does not exist, use SHOW QUERIES to view "
                    "the full set of running queries."
                )
            return self.queries.explain(text, found)
        inner = statement.statement
        if isinstance(inner, st.CreateAsSelect | st.InsertInto):
            plan = self._plan(inner, text, self._topic_prefix(scope), scope.properties)
        elif isinstance(inner, st.Query):
            plan = plan_query(inner, self.metastore, None, text)
        else:
            raise KsqlStatementError("EXPLAIN takes a query id or a query")
        described = RunningQuery("", text.removeprefix("EXPLAIN").strip(), plan, state="UNKNOWN")
        entity = self.queries.explain(text, described)
        entity["queryDescription"]["ksqlHostQueryStatus"] = {}
        return entity

    # ---- transient queries (push and pull), for the server's /query endpoints
    def transient_plan(self, query: st.Query, text: str) -> QueryPlan:
        """The plan of a push or pull query; ``KsqlStatementError`` with ksqlDB's message."""
        self._await_commands()
        with self.lock:
            counts = None if query.is_pull else self._partition_count
            refused = pull_clause_refusal(query) if query.is_pull else None
            if refused is not None:
                raise KsqlStatementError(refused + PULL_HELP)
            plan = plan_query(query, self.metastore, None, text, counts)
            if query.is_pull:
                self._check_pull(plan)
        return plan

    def _check_pull(self, plan: QueryPlan) -> None:
        tail = (
            " See https://cnfl.io/queries for more info.\n"
            "Add EMIT CHANGES if you intended to issue a push query."
        )
        if plan.aggregation is not None:
            raise KsqlStatementError("Pull queries don't support GROUP BY clauses." + tail)
        if plan.join is not None:
            raise KsqlStatementError("Pull queries don't support JOIN clauses." + tail)
        if plan.partition_by is not None:
            raise KsqlStatementError("Pull queries don't support PARTITION BY clauses." + tail)
        refused = pull_pseudo_column_refusal(plan)
        if refused is not None:
            raise KsqlStatementError(refused + tail)
        source = plan.source
        if (
            source.kind == "TABLE"
            and not source.is_source
            and not self.queries.using(source.name)[1]
        ):
            raise KsqlStatementError(
                f"The `{source.name}` table isn't queryable. To derive a queryable table, you can "
                f"do 'CREATE TABLE QUERYABLE_{source.name} AS SELECT * FROM {source.name}'." + tail
            )

    def partitions(self, topic: str) -> list[int]:
        found = topic_metadata(self.admin, topic)
        if found is None:
            raise KsqlStatementError(f"Topic '{topic}' does not exist")
        return sorted(found.partitions)

    def push_query(self, plan: QueryPlan, text: str, properties: dict[str, Any]) -> Any:
        """A push query registered (TERMINATE and /close-query stop it); run it with
        ``run`` on a worker thread, then ``end_transient``."""
        from confluent_kafka import Producer

        from strom.ksql.push_queries import PushQuery

        reset = properties.get(
            "auto.offset.reset",
            properties.get("ksql.streams.auto.offset.reset", self.config.auto_offset_reset),
        )
        plan = collect_limits_from_properties(plan, {**self.config.properties, **properties})
        settings = {**self.config.properties, **properties}
        writers = len(self.queries.using(plan.source.name)[1])
        if scalable_push(plan, settings, str(reset).strip().lower(), writers):
            query_id = f"SCALABLE_PUSH_QUERY_{uuid.uuid4()}"
        else:
            query_id = f"transient_{plan.source.name}_{uuid.uuid4().int % 10**19}"
        producer = Producer(self.config.client_config(**{"linger.ms": 5}))
        push = PushQuery(
            query_id,
            plan,
            self.config.client_config(),
            self.registry if self.config.schema_registry_url else None,
            str(reset).strip().lower(),
            producer,
            self.log_topic,
        )
        running = RunningQuery(
            query_id, text, plan, query_type="PUSH", state="RUNNING", stop=push.stopped.set
        )
        self.queries.add(running)
        return push

    def end_transient(self, query_id: str) -> None:
        self.queries.queries.pop(query_id, None)

    def pull_query(
        self, plan: QueryPlan, properties: dict[str, Any] | None = None
    ) -> list[list[Any]]:
        """The rows of a pull query, from the source's materialized rows; refused as
        ksqlDB refuses it when the request's properties (or the server's) disable table
        scans and the query would need one."""
        from strom.ksql.push_queries import Materialized, pull_rows

        source = plan.source
        settings = {**self.config.properties, **(properties or {})}
        refused = pull_limit_refusal(plan, settings)
        if refused is not None:
            raise KsqlStatementError(refused)
        if source.kind == "TABLE" and not _enabled(settings, PULL_TABLE_SCANS):
            check_without_table_scan(plan.where, source, _enabled(settings, PULL_RANGE_SCANS))
        if source.kind == "TABLE":
            check_key_values(plan.where, source)
        partitions = self.partitions(source.topic)
        with self._materialized_lock:
            found = self._materialized.get(source.name)
            if found is None or found.source != source:
                if found is not None:
                    found.close()
                registry = self.registry if self.config.schema_registry_url else None
                found = Materialized(source, self.config.client_config(), registry)
                self._materialized[source.name] = found
        with found.lock:
            found.catch_up(partitions)
            rows = found.current(plan.where)
        return pull_rows(plan, rows)

    def _show(self, statement: st.Show, text: str, scope: RequestScope) -> dict[str, Any]:
        if statement.what == "QUERIES":
            return self.queries.show(text, statement.extended)
        return self.metadata.show(statement, text, scope.properties, scope.variables)

    def _describe_source(
        self, statement: st.DescribeSource, text: str, scope: RequestScope
    ) -> dict[str, Any]:
        entity = self.metadata.describe_source(statement, text)
        description = entity["sourceDescription"]
        self.queries.refresh()
        for query in sorted(self.queries.queries.values(), key=lambda q: q.query_id):
            if query.query_type != "PERSISTENT":
                continue
            if statement.name in query.sources:
                description["readQueries"].append(query.running_json())
            if statement.name in query.sinks:
                description["writeQueries"].append(query.running_json())
        if statement.extended:
            self._runtime_statistics(description)
        return entity

    def _runtime_statistics(self, description: dict[str, Any]) -> None:
        """The local runtime statistics of ``DESCRIBE <source> EXTENDED`` (ksqlDB's
        ``statistics`` and ``clusterStatistics`` of the source's topic, and the
        ``queryOffsetSummaries`` of the queries writing it), from the queries that run
        on this server."""
        stats = self.runtime_stats
        topic = description["topic"]
        description["statistics"] = stats.statistics(topic)
        parsed = urllib.parse.urlsplit(self.queries.host)
        host = f"{parsed.hostname}:{parsed.port}" if parsed.hostname else self.queries.host
        description["clusterStatistics"] = stats.host_stats(topic, host)
        consumed: dict[str, dict[str, dict[int, int]]] = {}
        for written in description["writeQueries"]:
            query = self.queries.queries.get(written["id"])
            if query is None or not query.started:
                continue
            offsets = stats.consumed_offsets(query.query_id)
            topics = dict.fromkeys(s.topic for s in query.plan.sources)
            group = f"_confluent-ksql-{self.config.service_id}query_{query.query_id}"
            consumed[group] = {t: offsets.get(t, {}) for t in topics}
        if consumed:
            description["queryOffsetSummaries"] = self.metadata.offset_summaries(consumed)

    # ---- SHOW, LIST, DESCRIBE
    # ---- SET and UNSET
    def _set_property(
        self, statement: st.SetProperty, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        scope.properties[statement.name] = statement.value
        return None

    def _unset_property(
        self, statement: st.UnsetProperty, text: str, scope: RequestScope
    ) -> dict[str, Any] | None:
        scope.properties.pop(statement.name, None)
        return None

    # ---- state for /status and /info
    def status(self, command_id: str) -> dict[str, Any] | None:
        return self.statuses.get(command_id)

    def close(self) -> None:
        if self.ownership is not None:
            self.ownership.close()  # its queries stopped, their checkpoints kept
        self.queries.close()
        for materialized in self._materialized.values():
            materialized.close()
        self._stopped.set()
        if self._follower is not None:
            self._follower.join(5)
        if self._reader is not None:
            self._reader.close()
        self.command_topic.close()
        self.rows.close()


_WRAP_SINGLE_VALUES = "ksql.persistence.wrap.single.values"


def _source_wrapping(
    source: DataSource, statement: st.CreateSource, properties: dict[str, Any]
) -> DataSource:
    """``ksql.persistence.wrap.single.values`` for a created source: whether its one
    value column is read (and written) in an object, when its WITH clause does not say."""
    setting = properties.get(_WRAP_SINGLE_VALUES)
    if (
        setting is None
        or "WRAP_SINGLE_VALUE" in statement.properties
        or len(source.value_columns) != 1
        or source.value_format not in ("JSON", "JSON_SR", "AVRO")
    ):
        return source
    return replace(source, wrap_single_value=str(setting).strip().lower() == "true")


def _with_semicolon(text: str) -> str:
    return text if text.endswith(";") else text + ";"


def _is_insert(query_id: str) -> bool:
    """Whether the persistent query is an INSERT INTO ... SELECT's."""
    return query_id.startswith("INSERTQUERY_")


def _dropped_message(name: str, dropped: DataSource | None) -> str:
    if dropped is None:
        return f"Source `{name}` does not exist."
    return f"Source `{name}` (topic: {dropped.topic}) was dropped."


def _schema_full_name(properties: dict[str, Any], side: str) -> str | None:
    """KEY_SCHEMA_FULL_NAME / VALUE_SCHEMA_FULL_NAME (or VALUE_AVRO_SCHEMA_FULL_NAME)."""
    found = properties.get(f"{side}_SCHEMA_FULL_NAME")
    if found is None and side == "VALUE":
        found = properties.get("VALUE_AVRO_SCHEMA_FULL_NAME")
    return None if found is None else str(found)


def _altered_message(source: DataSource) -> str:
    return f"{source.kind.capitalize()} {source.name} altered."


def _type_registered_message(statement: st.CreateType, metastore: Metastore) -> str:
    registered = metastore.types.get(statement.name, statement.type)
    return f"Registered custom type with name '{statement.name}' and SQL type {registered}"


def _no_entity(statement: st.Statement, text: str, scope: RequestScope) -> None:
    return None


def _query_endpoint(statement: st.Statement, text: str, scope: RequestScope) -> None:
    raise _QueryEndpointError()


class _QueryEndpointError(KsqlStatementError):
    """SELECT and PRINT sent to /ksql."""

    def __str__(self) -> str:
        return (
            "The following statement types should be issued to the websocket endpoint "
            "'/query':\n\t* PRINT\n\t* SELECT"
        )


def _cli_only(statement: st.Statement, text: str, scope: RequestScope) -> None:
    raise KsqlStatementError(  # ksqlDB's server refusal, then where to run it
        "line 1:1: Syntax Error\nUnknown statement 'RUN'\n"
        "RUN SCRIPT is run by the CLI (strom ksql), which sends the script"
    )
