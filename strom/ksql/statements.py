"""ksqlDB's statements as immutable values: one class per statement the language has,
what ``strom.ksql.parser`` builds from text and what the server executes (DDL and
metadata now; the queries are the plan the Spark compiler reads).

Names of streams, tables, columns and types are stored as ksqlDB resolves them:
upper-cased unless they were quoted. WITH properties are kept under upper-cased names
with their literal values (str, int, float, Decimal, bool). Durations are kept with
their unit and give milliseconds.

Does not own parsing, the metastore or execution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.ksql.expressions import Expression, SqlType

PropertyValue = Any  # a literal: str, int, float, decimal.Decimal, bool or None

_UNIT_MS = {
    "MILLISECOND": 1,
    "SECOND": 1000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
}


@dataclass(frozen=True)
class Duration:
    amount: int
    unit: str  # MILLISECONDS, SECOND, MINUTES... as written, upper-cased

    @property
    def milliseconds(self) -> int:
        return self.amount * _UNIT_MS[self.unit.removesuffix("S")]

    def __str__(self) -> str:
        return f"{self.amount} {self.unit}"


def known_time_unit(unit: str) -> bool:
    return unit.upper().removesuffix("S") in _UNIT_MS


class Statement:
    """A parsed statement. Subclasses are frozen dataclasses."""


@dataclass(frozen=True)
class TableElement:
    """A column of CREATE STREAM/TABLE. ``constraint``: None (a value column), ``KEY``,
    ``PRIMARY KEY``, ``HEADERS`` or ``HEADER('name')``."""

    name: str
    type: SqlType
    constraint: str | None = None

    @property
    def is_key(self) -> bool:
        return self.constraint in ("KEY", "PRIMARY KEY")


@dataclass(frozen=True)
class CreateSource(Statement):
    """CREATE [OR REPLACE] [SOURCE] STREAM|TABLE [IF NOT EXISTS] name (...) WITH (...)."""

    kind: str  # STREAM or TABLE
    name: str
    elements: tuple[TableElement, ...]
    properties: dict[str, PropertyValue] = field(default_factory=dict, hash=False)
    or_replace: bool = False
    if_not_exists: bool = False
    is_source: bool = False


@dataclass(frozen=True)
class CreateAsSelect(Statement):
    """CREATE [OR REPLACE] STREAM|TABLE [IF NOT EXISTS] name [WITH (...)] AS SELECT ..."""

    kind: str
    name: str
    query: Query
    properties: dict[str, PropertyValue] = field(default_factory=dict, hash=False)
    or_replace: bool = False
    if_not_exists: bool = False


@dataclass(frozen=True)
class InsertInto(Statement):
    """INSERT INTO target [WITH (...)] SELECT ..."""

    target: str
    query: Query
    properties: dict[str, PropertyValue] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class InsertValues(Statement):
    """INSERT INTO target [(columns)] VALUES (...)."""

    target: str
    columns: tuple[str, ...]
    values: tuple[Expression, ...]


# ---- queries -------------------------------------------------------------------------


@dataclass(frozen=True)
class AllColumns:
    """``*`` or ``source.*`` in a SELECT list."""

    source: str | None = None


@dataclass(frozen=True)
class SelectExpression:
    expression: Expression
    alias: str | None = None


@dataclass(frozen=True)
class StructAll:
    """``s->*`` in a SELECT list: every field of the struct, each a column named by it."""

    expression: Expression


SelectItem = AllColumns | SelectExpression | StructAll


@dataclass(frozen=True)
class AliasedSource:
    name: str
    alias: str | None = None


@dataclass(frozen=True)
class Within:
    """A stream-stream join's window: WITHIN n or WITHIN (before, after), GRACE PERIOD."""

    before: Duration
    after: Duration
    grace: Duration | None = None


@dataclass(frozen=True)
class Join:
    kind: str  # INNER, LEFT, RIGHT, FULL
    right: AliasedSource
    condition: Expression
    within: Within | None = None


@dataclass(frozen=True)
class Relation:
    left: AliasedSource
    joins: tuple[Join, ...] = ()


@dataclass(frozen=True)
class WindowExpression:
    kind: str  # TUMBLING, HOPPING, SESSION
    size: Duration  # the session's gap for SESSION
    advance: Duration | None = None
    retention: Duration | None = None
    grace: Duration | None = None


@dataclass(frozen=True)
class Query(Statement):
    """SELECT. ``emit`` is CHANGES (a push query), FINAL, or None (a pull query)."""

    select: tuple[SelectItem, ...]
    source: Relation
    window: WindowExpression | None = None
    where: Expression | None = None
    group_by: tuple[Expression, ...] | None = None
    partition_by: tuple[Expression, ...] | None = None
    having: Expression | None = None
    emit: str | None = None
    limit: int | None = None

    @property
    def is_pull(self) -> bool:
        return self.emit is None


# ---- other statements ----------------------------------------------------------------


@dataclass(frozen=True)
class DropSource(Statement):
    kind: str
    name: str
    if_exists: bool = False
    delete_topic: bool = False


@dataclass(frozen=True)
class AlterSource(Statement):
    """ALTER STREAM|TABLE name ADD COLUMN name type, ..."""

    kind: str
    name: str
    columns: tuple[TableElement, ...]


@dataclass(frozen=True)
class CreateType(Statement):
    name: str
    type: SqlType
    if_not_exists: bool = False


@dataclass(frozen=True)
class DropType(Statement):
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class Terminate(Statement):
    query_id: str | None  # None: TERMINATE ALL


@dataclass(frozen=True)
class PauseQuery(Statement):
    """PAUSE query_id | ALL: the persistent query stops consuming, its state kept."""

    query_id: str | None  # None: PAUSE ALL


@dataclass(frozen=True)
class ResumeQuery(Statement):
    """RESUME query_id | ALL: a paused persistent query consumes again where it stopped."""

    query_id: str | None  # None: RESUME ALL


@dataclass(frozen=True)
class CreateConnector(Statement):
    """CREATE SOURCE|SINK CONNECTOR [IF NOT EXISTS] name WITH (...): ``config`` keyed as
    written (a bare name upper-cased), each value as text; ``masked_text`` the statement
    with every value but connector.class's shown as '[string]', as ksqlDB echoes it."""

    name: str
    kind: str  # SOURCE or SINK
    config: dict[str, str] = field(default_factory=dict, hash=False)
    if_not_exists: bool = False
    masked_text: str = ""


@dataclass(frozen=True)
class DropConnector(Statement):
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class DescribeConnector(Statement):
    name: str


@dataclass(frozen=True)
class ListConnectors(Statement):
    """SHOW / LIST [SOURCE | SINK] CONNECTORS."""

    scope: str = "ALL"  # ALL, SOURCE or SINK


@dataclass(frozen=True)
class ListConnectorPlugins(Statement):
    """SHOW / LIST CONNECTOR PLUGINS."""


@dataclass(frozen=True)
class Show(Statement):
    """SHOW/LIST ``what``: STREAMS, TABLES, TOPICS, QUERIES, PROPERTIES, FUNCTIONS, TYPES,
    VARIABLES (the connectors are ``ListConnectors``)."""

    what: str
    extended: bool = False
    all_topics: bool = False


@dataclass(frozen=True)
class DescribeSource(Statement):
    name: str
    extended: bool = False


@dataclass(frozen=True)
class DescribeSources(Statement):
    """DESCRIBE STREAMS|TABLES [EXTENDED]."""

    kind: str
    extended: bool = False


@dataclass(frozen=True)
class DescribeFunction(Statement):
    name: str


@dataclass(frozen=True)
class Explain(Statement):
    query_id: str | None = None
    statement: Statement | None = None


@dataclass(frozen=True)
class PrintTopic(Statement):
    topic: str
    from_beginning: bool = False
    interval: int = 1
    limit: int | None = None


@dataclass(frozen=True)
class SetProperty(Statement):
    name: str
    value: str


@dataclass(frozen=True)
class UnsetProperty(Statement):
    name: str


@dataclass(frozen=True)
class DefineVariable(Statement):
    name: str
    value: str


@dataclass(frozen=True)
class UndefineVariable(Statement):
    name: str


@dataclass(frozen=True)
class RunScript(Statement):
    path: str


@dataclass(frozen=True)
class AssertTopic(Statement):
    """ASSERT [NOT EXISTS] TOPIC name [WITH (PARTITIONS=n, REPLICAS=n)] [TIMEOUT n unit]."""

    topic: str
    properties: dict[str, PropertyValue] = field(default_factory=dict)
    timeout: Duration | None = None
    exists: bool = True  # False: ASSERT NOT EXISTS


@dataclass(frozen=True)
class AssertSchema(Statement):
    """ASSERT [NOT EXISTS] SCHEMA [SUBJECT name] [ID literal] [TIMEOUT n unit]: ``schema_id``
    as written (ksqlDB refuses one that is not an integer when it runs)."""

    subject: str | None = None
    schema_id: PropertyValue = None
    timeout: Duration | None = None
    exists: bool = True


@dataclass(frozen=True)
class ParsedStatement:
    """One statement of a request: its text (variables substituted, without the ``;``)
    and what it parsed to."""

    text: str
    statement: Statement
