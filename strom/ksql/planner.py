"""A query planned: a resolved ``Query`` (and, for CREATE ... AS SELECT and INSERT INTO
... SELECT, its sink) turned into a ``QueryPlan``, the pure data the operators
(``strom.ksql.operators``) run, in the server or on Spark.

Owns ksqlDB's output schema rules:

- the result is a STREAM, or a TABLE when the source is a table or the query has GROUP
  BY (CREATE STREAM AS SELECT of a table result, and the reverse, are refused with
  ksqlDB's messages);
- key columns: the source's, the PARTITION BY expressions' (a stream re-keyed; PARTITION
  BY NULL leaves no key), or the GROUP BY expressions' (their key format JSON when KAFKA
  or NONE cannot hold them, as ksqlDB switches it); a persistent query must select them
  (``Key missing from projection (ie, SELECT)...``), a transient one selects what it
  likes;
- select item names: the alias, a column's name, a struct field's name for ``a->b``,
  else ``KSQL_COL_n`` (the first free n, counting from 0);
- aggregation: the aggregate calls of SELECT and HAVING, ksqlDB's checks (``GROUP BY
  requires aggregate functions...``, ``Non-aggregate SELECT expression(s) not part of
  GROUP BY: ...``), and the select expressions rewritten over the aggregation's output
  (grouping key columns, aggregate results, WINDOWSTART / WINDOWEND, ROWTIME);
- windows (TUMBLING, HOPPING, SESSION with GRACE PERIOD and RETENTION) and EMIT
  CHANGES / FINAL;
- the sink: name, topic (the sink's name after ksql.output.topic.name.prefix unless
  KAFKA_TOPIC), partitions (the source topic's unless PARTITIONS), formats (the
  source's unless FORMAT / KEY_FORMAT / VALUE_FORMAT), window, as a ``DataSource``
  the metastore takes.

Types come from the expression compiler (``strom.ksql.evaluation``); nothing here
evaluates. Joins are planned as a left-deep chain of ``JoinPlan``s (stream-table,
table-table on primary keys or on the left's foreign key, stream-stream WITHIN), each
with its own key and ksqlDB's rules, joined columns and refusals; GROUP BY and PARTITION
BY apply to the joined row. Does not own I/O, topics or the metastore's changes.
"""

from __future__ import annotations

import dataclasses
import decimal
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.analysis import analyze
from strom.ksql.evaluation import Scope, compile_expression, expression_text
from strom.ksql.function_types import declared_name
from strom.ksql.metastore import (
    KEY_FORMATS,
    VALUE_FORMATS,
    Column,
    DataSource,
    KsqlStatementError,
    Metastore,
    check_protobuf_nullable,
    check_serde_shapes,
    primitive_format_refusal,
    refuse_map_keys,
    serde_refusal,
)
from strom.ksql.scalar_functions import scalar_function

BIGINT = ex.PrimitiveType("BIGINT")
INTEGER = ex.PrimitiveType("INTEGER")
PSEUDO_TYPES: dict[str, ex.SqlType] = {
    "ROWTIME": BIGINT,
    "ROWPARTITION": INTEGER,
    "ROWOFFSET": BIGINT,
}
WINDOW_BOUND_TYPES: dict[str, ex.SqlType] = {"WINDOWSTART": BIGINT, "WINDOWEND": BIGINT}
# The system columns a joined row holds unprefixed: its own time and, over windowed
# sources, its window (the left record's, else the right's)
JOINED_SYSTEM_COLUMNS = (*PSEUDO_TYPES, *WINDOW_BOUND_TYPES)
# Key types each primitive key format can hold (ksqlDB's supportsKeyType).
_KAFKA_KEY_TYPES = ("INTEGER", "BIGINT", "DOUBLE", "STRING", "BYTES")
SINK_PROPERTIES = frozenset(
    {
        "KAFKA_TOPIC",
        "PARTITIONS",
        "REPLICAS",
        "RETENTION_MS",
        "FORMAT",
        "KEY_FORMAT",
        "VALUE_FORMAT",
        "VALUE_DELIMITER",
        "KEY_DELIMITER",
        "WRAP_SINGLE_VALUE",
        "TIMESTAMP",
        "TIMESTAMP_FORMAT",
        "KEY_SCHEMA_ID",
        "VALUE_SCHEMA_ID",
        "KEY_SCHEMA_FULL_NAME",
        "VALUE_SCHEMA_FULL_NAME",
        "KEY_PROTOBUF_NULLABLE_REPRESENTATION",
        "VALUE_PROTOBUF_NULLABLE_REPRESENTATION",
    }
)


@dataclass(frozen=True)
class Projection:
    """One output column: its name, type, namespace (KEY or VALUE) and the expression
    that computes it (over the source row, or over the aggregation's row)."""

    name: str
    type: ex.SqlType
    expression: ex.Expression
    namespace: str = "VALUE"


@dataclass(frozen=True)
class AggregateCall:
    """One aggregate of the query: ``column`` names its result in the aggregation's row."""

    column: str
    name: str
    arguments: tuple[ex.Expression, ...]  # the per-row arguments
    literal_arguments: tuple[Any, ...]  # trailing literal arguments (TOPK's k...)
    argument_types: tuple[ex.SqlType, ...]
    result_type: ex.SqlType
    # COLLECT_LIST / COLLECT_SET: the most elements kept (ksql.functions.collect_*.limit)
    collect_limit: int | None = None


@dataclass(frozen=True)
class Window:
    kind: str  # TUMBLING, HOPPING, SESSION
    size_ms: int  # the gap for SESSION
    advance_ms: int
    grace_ms: int | None  # None: ksqlDB's default (24 hours for streams)
    retention_ms: int | None


@dataclass(frozen=True)
class Aggregation:
    group_by: tuple[ex.Expression, ...]  # over the source row
    group_columns: tuple[str, ...]  # their names in the aggregation's row
    group_types: tuple[ex.SqlType, ...]
    calls: tuple[AggregateCall, ...]
    window: Window | None
    having: ex.Expression | None  # over the aggregation's row
    columns: dict[str, ex.SqlType] = field(hash=False)  # the aggregation row's columns


def side_system_columns(source: DataSource) -> dict[str, ex.SqlType]:
    """The system columns a source brings to a join under its name (``L_ROWTIME``...):
    the pseudo columns, and the window bounds of a windowed source."""
    found = dict(PSEUDO_TYPES)
    if source.is_windowed:
        found.update(WINDOW_BOUND_TYPES)
    return found


@dataclass(frozen=True)
class JoinPlan:
    """A join of two sources on equal keys: stream-table (each stream record looks up
    the table's row), table-table (on both primary keys: each change joins the other
    side's row), stream-stream (records of both sides within the WITHIN window). The
    joined row's columns are ``<name>_<column>`` for each side's name (alias), its
    pseudo columns and window bounds too (``L_ROWTIME``: the left record's time)."""

    kind: str  # INNER, LEFT, RIGHT or FULL
    right: DataSource
    left_name: str
    right_name: str
    left_key: ex.Expression  # over the joined row: the left side of the condition
    right_key: ex.Expression  # the right side's
    shape: str = "stream-table"  # or table-table, stream-stream
    before_ms: int = 0  # stream-stream: WITHIN (before, after) and its GRACE PERIOD
    after_ms: int = 0
    grace_ms: int | None = None
    # A chain (``a JOIN b ... JOIN c ...``) is joined left-deep: after the first join,
    # the left side is the previous join's row, its columns already prefixed.
    left_joined: bool = False
    left_columns: tuple[str, ...] = ()  # the left side's columns in the joined row
    # table-table on the left's foreign key (an expression of the left table's columns)
    # and the right table's primary key: the result is keyed by the left's primary key
    foreign_key: bool = False
    left_key_columns: tuple[str, ...] = ()  # foreign key: the left's primary key columns
    # The last join's key column when no source column equals it (a FULL OUTER join, or
    # a condition of expressions): ksqlDB's synthetic ROWKEY, which the joined row holds.
    synthetic_key: str | None = None
    # A windowed side would be repartitioned: joined on other than its key, or its key
    # in another format or window than the other's (ksqlDB refuses it as it builds the
    # query's streams, after its planner's checks).
    windowed_rekey: bool = False

    def prefixed(self, side: str, columns: dict[str, Any]) -> dict[str, Any]:
        """A side's row with its columns prefixed, its pseudo columns (and window bounds)
        too: ``L.ROWTIME`` is ``L_ROWTIME``, the left record's time. The left keeps them
        unprefixed as well: they are the joined row's (its time, its window)."""
        if side == "left" and self.left_joined:
            return columns
        name = self.left_name if side == "left" else self.right_name
        row = {f"{name}_{column}": value for column, value in columns.items()}
        if side == "left":
            for system in JOINED_SYSTEM_COLUMNS:
                if system in columns:
                    row[system] = columns[system]
        return row


SYNTHETIC_KEY = "ROWKEY"  # the prefix of ksqlDB's synthetic join key column
SYNTHETIC_KEY_DOC = "https://cnfl.io/2LV7ouS"  # ksqlDB's page on it, which its message names
TABLE_FUNCTIONS = ("EXPLODE", "CUBE_EXPLODE")
_TABLE_FUNCTION_SIGNATURES = {  # as ksqlDB lists them when a call fits none
    "EXPLODE": "explode(ARRAY<DECIMAL> input)\nexplode(ARRAY<T> list)",
    "CUBE_EXPLODE": "cube_explode(ARRAY<T> columns)",
}
SYNTH_PREFIX = "KSQL_SYNTH_"  # the columns table functions add to the row


@dataclass(frozen=True)
class TableFunction:
    """A table function of the SELECT (EXPLODE, CUBE_EXPLODE): each input row gives as
    many rows as the longest of its functions' outputs (ksqlDB zips them, a shorter
    output null past its end); ``column`` holds the function's value in each."""

    column: str
    name: str
    argument: ex.Expression  # over the source row


@dataclass(frozen=True)
class QueryPlan:
    """What a query does, as data (picklable: it travels to Spark's executors)."""

    kind: str  # STREAM or TABLE: what the query produces
    source: DataSource
    source_columns: dict[str, ex.SqlType] = field(hash=False)  # the source row's columns
    qualified: dict[tuple[str | None, str], str] = field(hash=False)
    where: ex.Expression | None
    partition_by: tuple[ex.Expression, ...] | None
    aggregation: Aggregation | None
    projection: tuple[Projection, ...]
    emit_final: bool
    limit: int | None
    sink: DataSource | None  # None for a transient query
    statement: str = ""
    persistent: bool = False
    join: JoinPlan | None = None
    later_joins: tuple[JoinPlan, ...] = ()  # a chain's joins after the first
    table_functions: tuple[TableFunction, ...] = ()

    @property
    def key_columns(self) -> tuple[Projection, ...]:
        return tuple(p for p in self.projection if p.namespace == "KEY")

    @property
    def value_columns(self) -> tuple[Projection, ...]:
        return tuple(p for p in self.projection if p.namespace == "VALUE")

    @property
    def sources(self) -> list[DataSource]:
        return [self.source] + [j.right for j in self.joins]

    @property
    def joins(self) -> tuple[JoinPlan, ...]:
        """The joins, left-deep: each one's left side is the join before it."""
        return () if self.join is None else (self.join, *self.later_joins)

    @property
    def windowed(self) -> bool:
        return (self.aggregation is not None and self.aggregation.window is not None) or (
            self.source.is_windowed
        )

    def source_scope(self) -> Scope:
        return Scope(self.source_columns, self.qualified)

    def output_scope(self) -> Scope:
        """The scope the projection's expressions are written over."""
        if self.aggregation is not None:
            return Scope(self.aggregation.columns)
        return self.source_scope()


@dataclass(frozen=True)
class SinkRequest:
    """Where a persistent query writes: a new stream or table (CREATE ... AS SELECT) or
    an existing one (INSERT INTO)."""

    name: str
    kind: str | None  # STREAM or TABLE for CREATE ... AS SELECT; None for INSERT INTO
    properties: dict[str, Any] = field(default_factory=dict, hash=False)
    existing: DataSource | None = None
    topic_partitions: int | None = None  # the source topic's, the default for the sink
    statement: str = ""
    topic_prefix: str = ""  # ksql.output.topic.name.prefix: a new sink's topic without KAFKA_TOPIC
    new_planner: bool = False  # ksql.new.query.planner.enabled (``new_query_planner``)
    # ksql.persistence.default.format.key: a keyed sink's format over sources without keys
    default_key_format: str = "KAFKA"


NEW_QUERY_PLANNER = "ksql.new.query.planner.enabled"


def new_query_planner(properties: dict[str, Any]) -> bool:
    """Whether ``properties`` ask for ksqlDB's experimental query planner of persistent
    queries (``ksql.new.query.planner.enabled``)."""
    return str(properties.get(NEW_QUERY_PLANNER, "false")).strip().lower() == "true"


# ---- expression helpers -----------------------------------------------------------------


def transform(
    expression: ex.Expression, replace: Any, bound: frozenset[str] = frozenset()
) -> ex.Expression:
    """``expression`` with each node for which ``replace(node, bound)`` gives a value
    replaced by it (top-down; replaced nodes are not descended into)."""
    found = replace(expression, bound)
    if isinstance(found, ex.Expression):
        return found
    if isinstance(expression, ex.Lambda):
        inner = bound | frozenset(expression.parameters)
        return dataclasses.replace(expression, body=transform(expression.body, replace, inner))
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(expression):  # type: ignore[arg-type]
        value = getattr(expression, item.name)
        new = _transform_value(value, replace, bound)
        if new is not value:
            changes[item.name] = new
    return dataclasses.replace(expression, **changes) if changes else expression  # type: ignore[type-var]


def _transform_value(value: Any, replace: Any, bound: frozenset[str]) -> Any:
    if isinstance(value, ex.Expression):
        return transform(value, replace, bound)
    if isinstance(value, tuple):
        items = tuple(_transform_value(v, replace, bound) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def walk(expression: ex.Expression) -> list[ex.Expression]:
    """Every node of ``expression``, itself first."""
    nodes: list[ex.Expression] = []

    def visit(node: ex.Expression, bound: frozenset[str]) -> None:
        nodes.append(node)

    transform(expression, visit)
    return nodes


def _expand_struct_all(query: st.Query, scope: Scope) -> st.Query:
    """``s->*`` as one item a field of the struct, each named by its field."""
    if not any(isinstance(item, st.StructAll) for item in query.select):
        return query
    items: list[st.SelectItem] = []
    for item in query.select:
        if not isinstance(item, st.StructAll):
            items.append(item)
            continue
        struct_type = compile_expression(item.expression, scope, "SELECT").sql_type
        if not isinstance(struct_type, ex.StructType):
            raise KsqlStatementError(
                f"Expected STRUCT type, got: {struct_type} in {expression_text(item.expression)}->*"
            )
        items.extend(
            st.SelectExpression(ex.Dereference(item.expression, f.name), f.name)
            for f in struct_type.fields
        )
    return dataclasses.replace(query, select=tuple(items))


def _check_window_bounds(query: st.Query) -> None:
    """In a windowed aggregation WINDOWSTART and WINDOWEND are the window's, known once a
    group's window is: ksqlDB takes them in the SELECT only, not in an aggregate's
    arguments, the GROUP BY or HAVING."""
    if query.window is None:
        return

    def bound_in(expressions: list[ex.Expression], in_aggregates_only: bool) -> str | None:
        for expression in expressions:
            for node in walk(expression):
                if in_aggregates_only and not (
                    isinstance(node, ex.FunctionCall) and is_aggregate(node.name)
                ):
                    continue
                for inner in walk(node):
                    if isinstance(inner, ex.ColumnReference) and inner.name in WINDOW_BOUND_TYPES:
                        return inner.name
        return None

    select = [i.expression for i in query.select if isinstance(i, st.SelectExpression)]
    found = (
        bound_in(select, True)
        or bound_in(list(query.group_by or ()), False)
        or bound_in([query.having] if query.having is not None else [], False)
    )
    if found is not None:
        raise KsqlStatementError(
            f"Window bounds column {found} can only be used in the SELECT clause of windowed "
            "aggregations and can not be passed to aggregate functions.\n"
            "See https://github.com/confluentinc/ksql/issues/4397"
        )


def _refuse_aggregates_without_grouping(query: st.Query) -> None:
    """A persistent query aggregating without GROUP BY, as ksqlDB refuses it (it groups
    such a query by a constant): the columns that are not aggregated, else the calls."""
    expressions = [i.expression for i in query.select if isinstance(i, st.SelectExpression)]

    def aggregated(expression: ex.Expression) -> bool:
        return any(
            isinstance(n, ex.FunctionCall) and is_aggregate(n.name) for n in walk(expression)
        )

    loose = [
        expression_text(e)
        for e in expressions
        if not aggregated(e) and any(isinstance(n, ex.ColumnReference) for n in walk(e))
    ]
    if loose:
        raise KsqlStatementError(
            "Non-aggregate SELECT expression(s) not part of GROUP BY: "
            + ", ".join(loose)
            + "\nEither add the column(s) to the GROUP BY or remove them from the SELECT."
        )
    calls = [
        expression_text(ex.FunctionCall(n.name, (ex.ColumnReference("ROWTIME"),)))
        if n.star
        else expression_text(n)
        for e in expressions
        for n in walk(e)
        if isinstance(n, ex.FunctionCall) and is_aggregate(n.name)
    ]
    raise KsqlStatementError(
        f"CREATE TABLE AS SELECT statement does not support aggregate function "
        f"[{', '.join(calls)}] without a GROUP BY clause."
    )


def _with_joined_names(
    error: KsqlStatementError, query: st.Query, scope: Scope
) -> KsqlStatementError:
    """Over a join, ksqlDB's messages name a source's column as the joined row has it
    (``I1_BAR``, not ``I1.BAR``)."""
    if not query.source.joins:
        return error
    message = str(error)
    for source, name in scope.qualified:
        if source is not None:
            message = re.sub(
                rf"(?<![\w.`]){re.escape(source)}\.{re.escape(name)}(?![\w`])",
                f"{source}_{name}",
                message,
            )
    return KsqlStatementError(message)


# Aggregates whose parameters after the aggregated column are literals (ignoreNulls, n);
# TOPK's are not: it may take more columns before its k
_LITERAL_PARAMETERS = frozenset({"EARLIEST_BY_OFFSET", "LATEST_BY_OFFSET"})

# Aggregates whose running state is one value of a primitive type; the others keep a
# struct, list or map (AVG its sum and count, TOPK a list...).
_PRIMITIVE_STATE = frozenset({"COUNT", "SUM", "MIN", "MAX"})


def _check_state_format(aggregation: Aggregation, source: DataSource) -> None:
    """ksqlDB keeps an aggregation's state in the source's value format, and DELIMITED
    cannot hold the state of an aggregate that is not one primitive value."""
    if source.value_format != "DELIMITED":
        return
    if any(call.name not in _PRIMITIVE_STATE for call in aggregation.calls):
        raise KsqlStatementError(
            "One of the functions used in the statement has an intermediate type that the "
            "value format can not handle. Please remove the function or change the format.\n"
            "Consider up-voting https://github.com/confluentinc/ksql/issues/3950, which will "
            "resolve this limitation"
        )


def _refuse_unknown_functions(expressions: list[ex.Expression]) -> None:
    """ksqlDB names a function it does not have before it checks the query's shape."""
    for expression in expressions:
        for node in walk(expression):
            if isinstance(node, ex.FunctionCall):
                name = node.name.upper()
                if not (scalar_function(name) or is_aggregate(name) or name in TABLE_FUNCTIONS):
                    raise KsqlStatementError(f"Can't find any functions with the name '{name}'")


def is_aggregate(name: str) -> bool:
    from strom.ksql.aggregate_functions import is_aggregate as named_aggregate

    return named_aggregate(name)


def _sink_name(name: str) -> str:
    return f"`{name}`"


# ---- the planner --------------------------------------------------------------------------


_NUMBERED_NAME = re.compile(r"(?P<name>.*?)?(?:_(?P<number>\d+))?")


def _name_and_number(name: str) -> tuple[str, int]:
    """``ITEMID_1`` -> (ITEMID, 1); ``ITEMID`` -> (ITEMID, 0), as ksqlDB splits names."""
    found = _NUMBERED_NAME.fullmatch(name)
    assert found is not None
    number = found.group("number")
    return found.group("name") or "", int(number) if number is not None else 0


class _Names:
    """Names for select items without an alias, as ksqlDB's alias generator gives them:
    ``KSQL_COL_n`` for expressions and the field's name for a struct field (``F``, then
    ``F_1``...), skipping the numbers the sources' columns use (a source column ``ITEMID``
    makes ``IID->ITEMID`` ``ITEMID_1``)."""

    _GENERATED = "KSQL_COL"

    def __init__(self, source_columns: set[str]) -> None:
        self.used: dict[str, set[int]] = {}
        for column in source_columns:
            name, number = _name_and_number(column)
            self.used.setdefault(name, set()).add(number)
        self.next: dict[str, int] = {}

    def _next(self, prefix: str) -> str:
        used = self.used.get(prefix, set())
        index = self.next.get(prefix, 0)
        while index in used:
            index += 1
        self.next[prefix] = index + 1
        if index == 0 and prefix != self._GENERATED:
            return prefix
        return f"{prefix}_{index}"

    def generated(self) -> str:
        return self._next(self._GENERATED)

    def field(self, field: str) -> str:
        return self._next(_name_and_number(field)[0])


def _implicit_name(expression: ex.Expression) -> str | None:
    if isinstance(expression, ex.ColumnReference) and expression.name.startswith(SYNTH_PREFIX):
        return None  # a table function's value: named KSQL_COL_n, as the call it was
    if isinstance(expression, ex.ColumnReference):
        return expression.name
    if isinstance(expression, ex.Dereference):
        return expression.field
    return None


def _window(window: st.WindowExpression | None) -> Window | None:
    if window is None:
        return None
    size = window.size.milliseconds
    advance = window.advance.milliseconds if window.advance is not None else size
    if window.kind == "HOPPING":
        if window.advance is None:
            raise KsqlStatementError("HOPPING windows require an ADVANCE BY")
        if advance > size:
            raise KsqlStatementError(
                f"Window advance must be less than or equal to the window size. "
                f"Got: advance={advance}, size={size}"
            )
        if advance <= 0:
            raise KsqlStatementError("Window advance must be greater than zero.")
    return Window(
        kind=window.kind,
        size_ms=size,
        advance_ms=advance if window.kind == "HOPPING" else size,
        grace_ms=window.grace.milliseconds if window.grace is not None else None,
        retention_ms=window.retention.milliseconds if window.retention is not None else None,
    )


def source_columns(
    source: DataSource, names: tuple[str | None, ...]
) -> tuple[dict[str, ex.SqlType], dict[tuple[str | None, str], str]]:
    """The columns a row of ``source`` has (its own, the pseudo columns, the window
    bounds of a windowed source) and their qualified names (by ``names``)."""
    columns: dict[str, ex.SqlType] = {c.name: c.type for c in source.columns}
    for name, sql_type in PSEUDO_TYPES.items():
        columns.setdefault(name, sql_type)
    if source.is_windowed:
        for name, sql_type in WINDOW_BOUND_TYPES.items():
            columns.setdefault(name, sql_type)
    qualified = {(qualifier, column): column for qualifier in names for column in columns}
    return columns, qualified


def plan_query(
    query: st.Query,
    metastore: Metastore,
    sink: SinkRequest | None = None,
    statement: str = "",
    partitions: Callable[[str], int | None] | None = None,
) -> QueryPlan:
    """The plan of ``query`` (a transient query when ``sink`` is None); ksqlDB's
    ``KsqlStatementError`` for what it refuses (``partitions(topic)``: a topic's
    partition count, for a join's check that its sides' match)."""
    if query.partition_by == ():  # PARTITION BY (), which ksqlDB's parser refuses so
        raise KsqlStatementError("PARTITION BY requires at least one expression")
    analyze(query, metastore, sink is not None)
    if sink is not None:
        relations = [query.source.left, *(join.right for join in query.source.joins)]
        for named_source in (metastore.source(r.name) for r in relations):
            if (
                named_source is not None
                and named_source.kind == "TABLE"
                and named_source.is_windowed
            ):
                raise KsqlStatementError(
                    "KSQL does not support persistent queries on windowed tables."
                )
    relation = query.source.left
    source = metastore.source(relation.name)
    assert source is not None  # analyze checked it
    if sink is not None and sink.new_planner:
        query = _new_planner_query(query, source)
    joins: tuple[JoinPlan, ...] = ()
    if query.source.joins:
        joins, columns, qualified = _plan_join(query, metastore, source)
    else:
        columns, qualified = source_columns(source, (None, relation.name, relation.alias))
    query, table_functions = _plan_table_functions(query, source, Scope(columns, qualified))
    columns.update({f.column: f.argument_type for f in table_functions})
    scope = Scope(columns, qualified)
    query = _expand_struct_all(query, scope)
    persistent = sink is not None
    emit_final = query.emit == "FINAL"
    if query.where is not None:
        try:
            where_type = compile_expression(query.where, scope, "WHERE").sql_type
        except KsqlStatementError as exc:
            raise _with_joined_names(exc, query, scope) from None
        if str(where_type) != "BOOLEAN":
            raise KsqlStatementError(
                f"Type error in WHERE expression: Should evaluate to boolean but is "
                f"{expression_text(query.where)} ({where_type}) instead."
            )
    aggregates_used = any(
        isinstance(node, ex.FunctionCall) and is_aggregate(node.name)
        for item in query.select
        if isinstance(item, st.SelectExpression)
        for node in walk(item.expression)
    )
    grouped = query.group_by is not None
    if aggregates_used and not grouped and persistent:
        _refuse_aggregates_without_grouping(query)
    if query.window is not None and not grouped:
        raise KsqlStatementError(
            "WINDOW clause requires a GROUP BY clause."
            if not aggregates_used
            else "Use of aggregate functions requires a GROUP BY clause."
        )
    if aggregates_used and not grouped:
        raise KsqlStatementError("Use of aggregate functions requires a GROUP BY clause.")
    if query.having is not None and not grouped:
        raise KsqlStatementError("Having clause requires a GROUP BY clause.")
    if emit_final and not (grouped and query.window is not None):
        raise KsqlStatementError("EMIT FINAL is only supported for windowed aggregations.")
    if query.partition_by is not None and grouped:
        raise KsqlStatementError("Cannot use PARTITION BY with GROUP BY.")
    if query.partition_by is not None and len(query.partition_by) > 1:
        if any(isinstance(e, ex.Literal) and e.value is None for e in query.partition_by):
            raise KsqlStatementError("Cannot PARTITION BY multiple columns including NULL")
    joined_kind = ("TABLE" if joins[-1].shape == "table-table" else "STREAM") if joins else None
    if query.partition_by is not None and (joined_kind or source.kind) == "TABLE":
        raise KsqlStatementError(
            "ksqlDB does not support PARTITION BY on a table: use GROUP BY to re-key a table."
        )
    result_kind = "TABLE" if grouped else (joined_kind or source.kind)
    if grouped:
        _check_window_bounds(query)
        aggregation, projection = _plan_aggregation(query, source, scope, persistent, sink, joins)
        _check_state_format(aggregation, source)
    else:
        aggregation = None
        projection = _plan_projection(query, source, scope, persistent, sink, joins)
    plan = QueryPlan(
        kind=result_kind,
        source=source,
        source_columns=columns,
        qualified=qualified,
        where=query.where,
        partition_by=query.partition_by,
        aggregation=aggregation,
        projection=projection,
        emit_final=emit_final,
        limit=query.limit,
        sink=None,
        statement=statement,
        persistent=persistent,
        join=joins[0] if joins else None,
        later_joins=joins[1:],
        table_functions=tuple(TableFunction(f.column, f.name, f.argument) for f in table_functions),
    )
    if sink is None:
        stream_refusals(plan, partitions)
        return plan
    if sink.kind is None and sink.existing is not None:  # INSERT INTO: literals fitted
        plan = _fitted_to_insert_target(plan, sink.existing)
    planned = dataclasses.replace(plan, sink=_sink(plan, sink, statement))
    stream_refusals(planned, partitions)
    return planned


def _new_planner_query(query: st.Query, source: DataSource) -> st.Query:
    """A persistent query under ksqlDB's experimental new planner, after its refusals (in
    its order): it selects a stream's columns by name only (an alias is not used: each
    keeps its own name), its key columns those selected (none: no key)."""
    clauses = (
        ("WHERE", query.where),
        ("GROUP BY", query.group_by),
        ("HAVING", query.having),
        ("WINDOWS", query.window),
        ("PARTITION BY", query.partition_by),
        ("LIMIT", query.limit),
        ("joins", query.source.joins or None),
    )
    for name, clause in clauses:
        if clause is not None:
            raise KsqlStatementError(
                f"New query planner does not support {name}. Set {NEW_QUERY_PLANNER}=false."
            )
    if source.kind == "TABLE":
        raise KsqlStatementError("Input TABLES are not supported by the new planner")
    columns = {c.name for c in source.columns}
    select: list[st.SelectItem] = []
    for item in query.select:
        if isinstance(item, st.AllColumns):
            select.append(item)
            continue
        if not (
            isinstance(item, st.SelectExpression)
            and isinstance(item.expression, ex.ColumnReference)
        ):
            raise KsqlStatementError(
                "New query planner only support column references, no expressions or aliases."
            )
        reference = item.expression
        if reference.name not in columns:  # a pseudo column or window bound: not the stream's
            where = f"Line: {reference.line}, Col: {reference.column}: " if reference.line else ""
            raise KsqlStatementError(f"{where}SELECT column '{reference}' cannot be resolved.")
        select.append(st.SelectExpression(reference))
    return dataclasses.replace(query, select=tuple(select))


def _fitted_to_insert_target(plan: QueryPlan, target: DataSource) -> QueryPlan:
    """ksqlDB's implicit casts of INSERT INTO ... SELECT: a column of the target that is a
    DECIMAL takes, at its place in the projection, a number literal whose digits it holds
    or a DECIMAL whose digits it holds, as that DECIMAL (other types must be the same)."""
    targets = [c for c in target.columns if c.namespace != "HEADER"]
    fitted = []
    for projection, column in zip(plan.projection, targets, strict=False):
        wanted = column.type
        have: ex.SqlType | None = projection.type
        expression = projection.expression
        if isinstance(expression, ex.Literal) and isinstance(
            expression.value, int | float | decimal.Decimal
        ):
            have = None if isinstance(expression.value, bool) else _decimal_of(expression.value)
        if (
            isinstance(wanted, ex.DecimalType)
            and isinstance(have, ex.DecimalType)
            and projection.type != wanted
            and have.scale <= wanted.scale
            and have.precision - have.scale <= wanted.precision - wanted.scale
        ):
            projection = Projection(
                projection.name, wanted, ex.Cast(expression, wanted), projection.namespace
            )
        fitted.append(projection)
    fitted.extend(plan.projection[len(fitted) :])
    return dataclasses.replace(plan, projection=tuple(fitted))


def _decimal_of(number: int | float | decimal.Decimal) -> ex.DecimalType:
    """The DECIMAL a number literal's value is, as ksqlDB's ``DecimalUtil.fromValue``
    types it: its digits and scale, a value between -1 and 1 one digit more than its
    scale."""
    value = decimal.Decimal(str(number))
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = len(digits) + max(exponent, 0)
    if -1 < value < 1:
        precision = scale + 1
    return ex.DecimalType(max(precision, scale, 1), scale)


@dataclass(frozen=True)
class _PlannedTableFunction:
    column: str
    name: str
    argument: ex.Expression
    argument_type: ex.SqlType  # the type of the function's value in each row


def _plan_table_functions(
    query: st.Query, source: DataSource, scope: Scope
) -> tuple[st.Query, list[_PlannedTableFunction]]:
    """The query with each table function call of its SELECT replaced by a reference to
    the column holding its value, and the calls; ksqlDB's refusals."""
    found: list[_PlannedTableFunction] = []

    def replace(node: ex.Expression, bound: frozenset[str]) -> ex.Expression | None:
        if not (isinstance(node, ex.FunctionCall) and node.name.upper() in TABLE_FUNCTIONS):
            return None
        name = node.name.upper()
        for argument in node.arguments:
            for inner in walk(argument):
                if isinstance(inner, ex.FunctionCall) and inner.name.upper() in TABLE_FUNCTIONS:
                    raise KsqlStatementError(
                        f"Table functions cannot be nested: {name}({inner.name.upper()}())"
                    )
        if query.group_by is not None:
            raise KsqlStatementError("Table functions cannot be used with aggregations.")
        if source.kind == "TABLE":
            raise KsqlStatementError("Table source is not supported with table functions")
        types = [compile_expression(a, scope).sql_type for a in node.arguments]
        if len(types) != 1 or not isinstance(types[0], ex.ArrayType):
            shown = ", ".join(str(t) for t in types)
            raise KsqlStatementError(
                f"Function '{declared_name(name)}' does not accept parameters ({shown}).\n"
                f"Valid alternatives are:\n{_TABLE_FUNCTION_SIGNATURES[name]}\n"
                "For detailed information on a function run: DESCRIBE FUNCTION <Function-Name>;"
            )
        element = types[0] if name == "CUBE_EXPLODE" else types[0].element
        planned = _PlannedTableFunction(
            f"{SYNTH_PREFIX}{len(found)}", name, node.arguments[0], element
        )
        found.append(planned)
        return ex.ColumnReference(planned.column)

    select: list[st.SelectItem] = []
    for item in query.select:
        if isinstance(item, st.SelectExpression):
            expression = transform(item.expression, replace)
            if expression is not item.expression:
                item = dataclasses.replace(item, expression=expression)
        select.append(item)
    if not found:
        return query, found
    return dataclasses.replace(query, select=tuple(select)), found


def _select_items(
    query: st.Query,
    source: DataSource,
    persistent: bool,
    joins: tuple[JoinPlan, ...] = (),
    scope: Scope | None = None,
) -> list[tuple[str | None, ex.Expression]]:
    """(alias, expression) of each select item, ``*`` expanded to the key columns, the
    window bounds of a windowed source in a transient query, then the value (and
    header) columns; over a join, each side's as ``<name>_<column>``, and a column that
    more than one source has named ``<name>_<column>`` too."""
    items: list[tuple[str | None, ex.Expression]] = []
    for item in query.select:
        if isinstance(item, st.AllColumns) and joins:
            synthetic = joins[-1].synthetic_key
            if synthetic is not None and item.source is None:
                items.append((synthetic, ex.ColumnReference(synthetic)))
            sides = [(joins[0].left_name, source), *((j.right_name, j.right) for j in joins)]
            for name, side in sides:
                if item.source is not None and item.source != name and item.source != side.name:
                    continue
                # its key columns, a windowed side's window bounds, its value columns
                ordered = [c.name for c in side.key_columns]
                if side.is_windowed:
                    ordered += list(WINDOW_BOUND_TYPES)
                ordered += [c.name for c in side.columns if c.namespace != "KEY"]
                items.extend((f"{name}_{c}", ex.ColumnReference(c, name)) for c in ordered)
        elif isinstance(item, st.AllColumns) and query.partition_by is not None:
            items.extend(_repartitioned_columns(query.partition_by, source))
        elif isinstance(item, st.AllColumns):
            names = [c.name for c in source.key_columns]
            if source.is_windowed and not persistent:
                names += list(WINDOW_BOUND_TYPES)
            names += [c.name for c in source.columns if c.namespace != "KEY"]
            items.extend((None, ex.ColumnReference(name)) for name in names)
        elif isinstance(item, st.StructAll):  # expanded by plan_query before
            raise AssertionError("s->* is expanded before the select list is named")
        elif joins and scope is not None and item.alias is None:
            items.append((_joined_name(item.expression, scope), item.expression))
        else:
            items.append((item.alias, item.expression))
    return items


def _repartitioned_columns(
    partition_by: tuple[ex.Expression, ...], source: DataSource
) -> list[tuple[str | None, ex.Expression]]:
    """``SELECT *`` under PARTITION BY, expanded over the repartitioned schema as ksqlDB
    expands it: the partitioning expressions first (the new key: a column's name, a
    struct field's, else ``KSQL_COL_n``), then the value columns not moved into the key,
    then the source's key columns (now values)."""
    items: list[tuple[str | None, ex.Expression]] = []
    moved: set[str] = set()
    for expression in partition_by:
        if isinstance(expression, ex.Literal) and expression.value is None:
            continue  # PARTITION BY NULL: no key
        if isinstance(expression, ex.ColumnReference):
            moved.add(expression.name)
        items.append((None, expression))
    values = [c.name for c in source.columns if c.namespace != "KEY" and c.name not in moved]
    keys = [c.name for c in source.key_columns if c.name not in moved]
    items.extend((None, ex.ColumnReference(name)) for name in [*values, *keys])
    return items


def _joined_name(expression: ex.Expression, scope: Scope) -> str | None:
    """A joined column's name when more than one source has it (``<name>_<column>``),
    as every source has the pseudo columns (``L.ROWTIME`` is ``L_ROWTIME``); a window
    bound keeps its name, as ksqlDB names it."""
    if not isinstance(expression, ex.ColumnReference) or expression.name in WINDOW_BOUND_TYPES:
        return None
    if (None, expression.name) in scope.qualified:
        return None
    return scope.qualified.get((expression.source, expression.name))


def _named(
    items: list[tuple[str | None, ex.Expression]],
    source_columns: set[str],
    duplicates: list[str] | None = None,
) -> list[tuple[str, ex.Expression]]:
    """The SELECT items with their names; a name given twice is refused, or, with
    ``duplicates``, listed there (refused by ``_refuse_duplicates`` once typed)."""
    names = _Names(source_columns)
    named: list[tuple[str, ex.Expression]] = []
    seen: set[str] = set()
    for alias, expression in items:
        if alias is not None:
            name = alias
        elif isinstance(expression, ex.Dereference):
            name = names.field(expression.field)
        else:
            name = _implicit_name(expression) or names.generated()
        if name in seen:
            if duplicates is None:
                raise KsqlStatementError(f"Duplicate value columns found in schema: `{name}`")
            duplicates.append(name)
        seen.add(name)
        named.append((name, expression))
    return named


def _refuse_duplicates(duplicates: list[str], projection: list[Projection]) -> None:
    """ksqlDB's refusal of a column name given twice, naming the column as its schema
    builder does: the keys come first, so the second of the name is a value column
    unless both are keys; with its type."""
    if not duplicates:
        return
    name = duplicates[0]
    columns = [p for p in projection if p.name == name]
    values = [p for p in columns if p.namespace != "KEY"]
    second = values[-1] if values and len(values) < len(columns) else columns[-1]
    namespace = "key" if not values else "value"
    raise KsqlStatementError(
        f"Duplicate {namespace} columns found in schema: `{name}` {second.type}"
    )


def _source_column_names(source: DataSource, joins: tuple[JoinPlan, ...]) -> set[str]:
    return {c.name for s in (source, *(j.right for j in joins)) for c in s.columns}


def _plan_projection(
    query: st.Query,
    source: DataSource,
    scope: Scope,
    persistent: bool,
    sink: SinkRequest | None,
    joins: tuple[JoinPlan, ...] = (),
) -> tuple[Projection, ...]:
    duplicates: list[str] = []
    named = _named(
        _select_items(query, source, persistent, joins, scope),
        _source_column_names(source, joins),
        None if joins else duplicates,
    )
    if joins:
        _check_synthetic_references([expression for _, expression in named], scope)
    if joins and query.partition_by is None:
        return _join_projection(query, named, joins, scope, persistent, sink)
    if query.partition_by is not None:
        keys = [
            e for e in query.partition_by if not (isinstance(e, ex.Literal) and e.value is None)
        ]
        what = "partitioning expression"
    else:
        keys = [ex.ColumnReference(c.name) for c in source.key_columns]
        what = "key column"
    projection: list[Projection] = []
    found: dict[int, str] = {}  # each key selected: the name it is selected as
    for name, expression in named:
        sql_type = compile_expression(expression, scope, "SELECT").sql_type
        namespace = "VALUE"
        if persistent:
            matching = [i for i, k in enumerate(keys) if _same(k, expression, scope, joins)]
            index = next((i for i in matching if i not in found), None)
            if index is not None:
                found[index] = name
                namespace = "KEY"
            elif matching:
                _key_twice(found[matching[0]], name, grouped=query.group_by is not None)
        projection.append(Projection(name, sql_type, expression, namespace))
    # ksqlDB's new planner keys the sink by the key columns selected, if any
    if persistent and len(found) < len(keys) and not (sink is not None and sink.new_planner):
        if query.partition_by is not None:  # as ksqlDB shows them: qualified by the source
            qualifier = query.source.left.alias or query.source.left.name
            missing = [expression_text(_with_qualifier(k, qualifier)) for k in keys]
        else:
            missing = [expression_text(k) for k in keys]  # all of them, as ksqlDB lists them
        if sink is not None:  # ksqlDB's output node checks the TIMESTAMP column first
            _sink_timestamp(sink.properties, [(p.name, p.type) for p in projection])
        _keys_missing(sink, what, missing)
    _refuse_duplicates(duplicates, projection)
    return _keys_first(projection)


def _join_projection(
    query: st.Query,
    named: list[tuple[str, ex.Expression]],
    joins: tuple[JoinPlan, ...],
    scope: Scope,
    persistent: bool,
    sink: SinkRequest | None,
) -> tuple[Projection, ...]:
    """A join's columns. Its key column is ksqlDB's: the first of the chain's viable key
    columns (``_viable_keys``) that the SELECT names (``*`` names them all, ``s.*``
    those of ``s``), or the synthetic key; the items that read that column (once) are
    the key, any other column equal to it a value. A foreign-key join is keyed by the
    left table's primary key."""
    last = joins[-1]

    def resolved(expression: ex.Expression) -> Any:
        if isinstance(expression, ex.ColumnReference):
            try:
                return scope.resolve(expression)
            except KsqlStatementError:
                return expression
        return expression

    if last.foreign_key:
        return _foreign_key_projection(named, last, scope, persistent, sink, resolved)
    synthetic = last.synthetic_key
    keys = [ex.ColumnReference(synthetic)] if synthetic else _viable_keys(joins, scope)
    chosen = next((resolved(k) for k in keys if _selects(query, k, scope)), None)
    projection: list[Projection] = []
    aliases: list[str] = []  # the names the key column is selected as
    for name, expression in named:
        sql_type = compile_expression(expression, scope, "SELECT").sql_type
        namespace = "VALUE"
        if persistent and chosen is not None and resolved(expression) == chosen:
            aliases.append(name)
            namespace = "KEY"
        projection.append(Projection(name, sql_type, expression, namespace))
    if len(aliases) > 1:
        shown = sorted(aliases)
        listed = ", ".join(shown[:-1]) + " and " + shown[-1]
        raise KsqlStatementError(
            f"The projection contains a key column (`{chosen}`) more than once, aliased as: "
            f"{listed}."
        )
    if persistent and chosen is None:
        names = [joins[0].left_name, *(j.right_name for j in joins)]
        shown = [expression_text(_qualified(k, scope, names)) for k in keys]
        listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
        plural = "s" if len(shown) > 1 else ""
        see = f"See {SYNTHETIC_KEY_DOC}." if synthetic else ""
        why = (
            f"\n{synthetic} was added as a synthetic key column because the join criteria did "
            "not match any source column. This expression must be included in the projection "
            "and may be aliased."
            if synthetic
            else ""
        )
        raise KsqlStatementError(
            f"Key missing from projection (ie, SELECT). {see}\n"
            f"The query used to build {_sink_name(sink.name if sink else '')} must include "
            f"the join expression{plural} {listed} in its projection (eg, SELECT "
            f"{shown[0]}...).{why}"
        )
    return _keys_first(projection)


def _selects(query: st.Query, column: ex.ColumnReference, scope: Scope) -> bool:
    """Whether the SELECT names ``column`` (a joined column), as ksqlDB's projection
    contains it: a ``*`` names every column, ``s.*`` each of source ``s``, else an item
    that is the column itself (aliased or not)."""
    try:
        wanted = scope.resolve(column)
    except KsqlStatementError:
        return False
    for item in query.select:
        if isinstance(item, st.AllColumns):
            if item.source is None or scope.qualified.get((item.source, column.name)) == wanted:
                return True
        elif isinstance(item, st.SelectExpression) and isinstance(
            item.expression, ex.ColumnReference
        ):
            try:
                if scope.resolve(item.expression) == wanted:
                    return True
            except KsqlStatementError:
                continue
    return False


def _check_synthetic_references(expressions: list[ex.Expression], scope: Scope) -> None:
    """A join's SELECT may name ksqlDB's synthetic key (``ROWKEY``, ``ROWKEY_n``) before
    the join is planned; one the join does not have is refused as ksqlDB refuses it once
    its plan is built: each such column on a line of its own, with its place."""
    unknown: list[str] = []
    for expression in expressions:
        for node in walk(expression):
            if (
                isinstance(node, ex.ColumnReference)
                and node.source is None
                and node.name.startswith(SYNTHETIC_KEY)
                and (None, node.name) not in scope.qualified
                and node.name not in scope.columns
            ):
                where = f"Line: {node.line}, Col: {node.column}: " if node.line else ""
                unknown.append(f"{where}Column '{node}' cannot be resolved.")
    if unknown:
        raise KsqlStatementError("\n".join(dict.fromkeys(unknown)))


def _key_twice(first: str, second: str, grouped: bool) -> None:
    """ksqlDB's refusal of a key column selected twice (``first``, then ``second``)."""
    if grouped:
        raise KsqlStatementError(
            f"The projection contains a key column more than once: `{first}` and `{second}`."
        )
    aliases = " and ".join(sorted((first, second)))
    raise KsqlStatementError(
        f"The projection contains a key column (`{first}`) more than once, aliased as: {aliases}."
    )


def _equal_keys(joins: tuple[JoinPlan, ...], scope: Scope) -> list[ex.Expression]:
    """The expressions equal to the last join's key: both sides of its condition, and
    both sides of each earlier condition that shares one of them (in the order they
    are written)."""

    def same(one: ex.Expression, other: ex.Expression) -> bool:
        return bool(_resolved(one, scope) == _resolved(other, scope))

    equal = [joins[-1].left_key, joins[-1].right_key]
    for join in reversed(joins[:-1]):
        if join.kind == "FULL":  # its key equals neither side: nothing before it either
            break
        if any(same(k, e) for k in (join.left_key, join.right_key) for e in equal):
            equal += [join.left_key, join.right_key]
    order = [k for join in joins for k in (join.left_key, join.right_key)]
    keys: list[ex.Expression] = []
    for key in order:
        if any(same(key, e) for e in equal) and not any(same(key, k) for k in keys):
            keys.append(key)
    return keys


def _viable_keys(joins: tuple[JoinPlan, ...], scope: Scope) -> list[ex.ColumnReference]:
    """ksqlDB's viable key columns of a join chain: the columns of its conditions that
    equal its key, one of which the SELECT must name to key the result (in the order
    the conditions name them, left before right). A join's key equals both sides of
    its condition, and what the join before it equals when one side does; a FULL OUTER
    join's key equals neither side (none: the key is synthetic)."""

    def among(one: ex.Expression, others: Sequence[ex.Expression]) -> bool:
        return any(_resolved(one, scope) == _resolved(other, scope) for other in others)

    equal: list[ex.Expression] = []
    viable: list[ex.ColumnReference] = []
    for join in joins:
        if join.kind == "FULL":
            equal, viable = [], []
            continue
        sides = [join.left_key, join.right_key]
        equal = sides + equal if any(among(side, equal) for side in sides) else sides
        found: list[ex.ColumnReference] = []
        for key in [*viable, *sides]:
            if isinstance(key, ex.ColumnReference) and among(key, equal) and not among(key, found):
                found.append(key)
        viable = found
    return viable


def _resolved(expression: ex.Expression, scope: Scope) -> Any:
    """An expression compared by what it reads: a column by its joined row's name."""

    def replace(node: ex.Expression, bound: frozenset[str]) -> ex.Expression | None:
        if isinstance(node, ex.ColumnReference) and node.name not in bound:
            try:
                return ex.ColumnReference(scope.resolve(node))
            except KsqlStatementError:
                return None
        return None

    return transform(expression, replace)


def _foreign_key_projection(
    named: list[tuple[str, ex.Expression]],
    join: JoinPlan,
    scope: Scope,
    persistent: bool,
    sink: SinkRequest | None,
    resolved: Any,
) -> tuple[Projection, ...]:
    """A foreign-key join's columns: its key is the left table's primary key, each of
    whose columns a persistent query must select (once)."""
    wanted = list(join.left_key_columns)
    found: dict[str, str] = {}
    projection: list[Projection] = []
    for name, expression in named:
        sql_type = compile_expression(expression, scope, "SELECT").sql_type
        namespace = "VALUE"
        column = resolved(expression)
        if persistent and column in wanted:
            if column in found:
                raise KsqlStatementError(
                    f"The projection contains a key column (`{column}`) more than once, "
                    f"aliased as: {found[column]} and {name}."
                )
            found[column] = name
            namespace = "KEY"
        projection.append(Projection(name, sql_type, expression, namespace))
    missing = [c for c in wanted if c not in found]
    if persistent and missing:
        plural = "s" if len(missing) > 1 else ""
        prefix = f"{join.left_name}_"
        shown = ", ".join(f"`{c.removeprefix(prefix)}`" for c in missing)
        raise KsqlStatementError(
            f"Primary key column{plural} missing in projection. For foreign-key table-table "
            "joins, the projection must include all primary key columns from the left input "
            f"table (`{join.left_name}`). Missing column{plural}: {shown}."
        )
    if persistent:  # the key in the left table's key order
        order = {name: index for index, name in enumerate(found[c] for c in wanted)}
        keys = sorted((p for p in projection if p.namespace == "KEY"), key=lambda p: order[p.name])
        return tuple(keys + [p for p in projection if p.namespace != "KEY"])
    return tuple(projection)


def _join_refusals(join: st.Join, left_kind: str, left_text: str, right: DataSource) -> str:
    """The join's shape ("stream-table", "table-table", "stream-stream") after ksqlDB's
    checks of its kind and window."""
    shape = f"{left_kind.lower()}-{right.kind.lower()}"
    if shape == "table-stream":
        shown = {"INNER": "[INNER]", "FULL": "[FULL] OUTER"}.get(join.kind, f"{join.kind} [OUTER]")
        raise KsqlStatementError(
            "Invalid join order: table-stream joins are not supported; only stream-table "
            f"joins. Got {left_text} {shown} JOIN {right.name}."
        )
    if shape == "stream-table" and join.kind in ("FULL", "RIGHT"):
        outer = "full-outer" if join.kind == "FULL" else "right-outer"
        shown = "[FULL] OUTER JOIN" if join.kind == "FULL" else "RIGHT [OUTER] JOIN"
        raise KsqlStatementError(
            f"Invalid join type: {outer} join not supported for stream-table join. Got "
            f"{left_text} {shown} {right.name}."
        )
    if shape == "stream-stream" and join.within is None:
        raise KsqlStatementError(
            "Stream-Stream joins must have a WITHIN clause specified. None was provided. To "
            "learn about how to specify a WITHIN clause with a stream-stream join, please "
            "visit: https://docs.confluent.io/current/ksql/docs/syntax-reference.html"
            "#create-stream-as-select"
        )
    if shape != "stream-stream" and join.within is not None:
        what = "Stream-Table" if shape == "stream-table" else "Table-Table"
        raise KsqlStatementError(
            f"A window definition was provided for a {what} join. These joins are not "
            "windowed. Please drop the window definition (ie. the WITHIN clause) and try "
            "to re-run your join."
        )
    return shape


def _joined_sources(
    query: st.Query, metastore: Metastore, left: DataSource
) -> list[tuple[str, DataSource]]:
    """Each source of the join with its name in the joined row (its alias), after
    ksqlDB's refusal of a source joined to itself."""
    sources = [(query.source.left.alias or left.name, left)]
    for join in query.source.joins:
        right = metastore.source(join.right.name)
        assert right is not None  # analyze checked it
        if any(source.name == right.name for _, source in sources):
            if len(query.source.joins) == 1:
                raise KsqlStatementError(
                    f"Can not join '{right.name}' to '{right.name}': self joins are not yet "
                    "supported."
                )
            raise KsqlStatementError(
                "N-way joins do not support multiple occurrences of the same source. "
                f"Source: '{right.name}'"
            )
        sources.append((join.right.alias or right.name, right))
    return sources


def _plan_join(
    query: st.Query, metastore: Metastore, left: DataSource
) -> tuple[tuple[JoinPlan, ...], dict[str, ex.SqlType], dict[tuple[str | None, str], str]]:
    """The joins of the query, left-deep (``a JOIN b ON ... JOIN c ON ...`` joins c to
    the join of a and b): each one's sides and keys, and the joined row's columns and
    names."""
    sources = _joined_sources(query, metastore, left)
    columns: dict[str, ex.SqlType] = {}
    qualified: dict[tuple[str | None, str], str] = {}
    counts: dict[str, int] = {}
    for name, side in sources:
        aliases = {side.name, name}
        for column in side.columns:
            columns[f"{name}_{column.name}"] = column.type
            for alias in aliases:
                qualified[(alias, column.name)] = f"{name}_{column.name}"
            counts[column.name] = counts.get(column.name, 0) + 1
        for system, sql_type in side_system_columns(side).items():
            columns[f"{name}_{system}"] = sql_type
            for alias in aliases:
                qualified[(alias, system)] = f"{name}_{system}"
    for name, sql_type in PSEUDO_TYPES.items():  # the joined row's own, named by no query
        columns[name] = sql_type
    for column_name, count in counts.items():
        if count == 1:
            owner = next(n for n, s in sources if any(c.name == column_name for c in s.columns))
            qualified[(None, column_name)] = qualified[(owner, column_name)]
    scope = Scope(columns, qualified)
    plans: list[JoinPlan] = []
    left_kind = left.kind
    # ksqlDB's analysis checks every condition and the sides' windows before its
    # planner checks the joins' kinds
    keys: list[tuple[ex.Expression, ex.Expression, list[tuple[str, ex.Expression]]]] = []
    by_name = dict(sources)
    for index, join in enumerate(query.source.joins):
        left_names = [name for name, _ in sources[: index + 1]]
        right_name = sources[index + 1][0]
        left_key, right_key, left_name = _join_sides(join, scope, left_names, right_name)
        written = [(left_name, left_key), (right_name, right_key)]
        if isinstance(join.condition, ex.Comparison) and join.condition.left is right_key:
            written.reverse()
        _refuse_window_mix([(name, by_name[name]) for name, _ in written])
        keys.append((left_key, right_key, written))
    for index, join in enumerate(query.source.joins):
        right = sources[index + 1][1]
        shape = _join_refusals(join, left_kind, sources[0][1].name, right)
        left_key, right_key, written = keys[index]
        windowed_rekey = _rekeys_window([(name, by_name[name]) for name, _ in written])
        for name, expression in written:
            side = by_name[name]
            side_keys = {f"{name}_{c.name}" for c in side.key_columns}
            if side.is_windowed and not (  # a windowed side joined on other than its key
                isinstance(expression, ex.ColumnReference)
                and scope.resolve(expression) in side_keys
            ):
                windowed_rekey = True
            # a stream joined on a value column is repartitioned by it: its new key
            if side.kind == "STREAM" and isinstance(expression, ex.ColumnReference):
                new_key = scope.resolve(expression)
                if new_key not in side_keys:
                    refuse_map_keys([Column(new_key, scope.columns[new_key], "KEY")])
        plan = _join_plan(join, shape, plans, sources, index, scope, left_key, right_key)
        plans.append(dataclasses.replace(plan, windowed_rekey=windowed_rekey))
        left_kind = "TABLE" if shape == "table-table" else "STREAM"
    synthetic = _synthetic_key(query, tuple(plans), scope, [s for _, s in sources])
    if synthetic is not None:
        columns[synthetic] = compile_expression(plans[-1].left_key, scope).sql_type
        qualified[(None, synthetic)] = synthetic
        plans[-1] = dataclasses.replace(plans[-1], synthetic_key=synthetic)
    return tuple(plans), columns, qualified


def _synthetic_key(
    query: st.Query, joins: tuple[JoinPlan, ...], scope: Scope, sources: list[DataSource]
) -> str | None:
    """The name of ksqlDB's synthetic key column when the join's result has one: a FULL
    OUTER join (either side's key may be null), or a join whose key no source column
    equals (``ABS(l.id) = ABS(r.id)``). It is ``ROWKEY``, or ``ROWKEY_n`` with the
    first n no source column is numbered with. None for a foreign-key join, and under
    GROUP BY or PARTITION BY (their key is the query's)."""
    last = joins[-1]
    if last.foreign_key or query.group_by is not None or query.partition_by is not None:
        return None
    if _viable_keys(joins, scope):
        return None
    used: set[int] = set()
    for source in sources:
        for column in source.columns:
            found = re.fullmatch(r"(.*?)(?:_(\d+))?", column.name)
            if found is not None and found.group(1) == SYNTHETIC_KEY:
                used.add(int(found.group(2) or 0))
    index = next(i for i in range(len(used) + 1) if i not in used)
    return SYNTHETIC_KEY if index == 0 else f"{SYNTHETIC_KEY}_{index}"


# Key formats whose serializer infers the schema: ksqlDB repartitions a join's sides in
# them whatever their key, in the join's key format (no windowed key is refused for it)
_INFERRED_KEY_FORMATS = frozenset({"AVRO", "PROTOBUF", "JSON_SR"})


def _rekeys_window(sides: list[tuple[str, DataSource]]) -> bool:
    """Whether joining two windowed sources on their keys rewrites one's key: in a key
    format without an inferred schema, a key in another format or window than the
    other's is written again in the join's (ksqlDB refuses that for a windowed key)."""
    (_, one), (_, other) = sides
    if not (one.is_windowed and other.is_windowed):
        return False
    if one.key_format in _INFERRED_KEY_FORMATS and other.key_format in _INFERRED_KEY_FORMATS:
        return False
    return (one.key_format, one.window_type, one.window_size_ms) != (
        other.key_format,
        other.window_type,
        other.window_size_ms,
    )


def stream_refusals(plan: QueryPlan, partitions: Callable[[str], int | None] | None = None) -> None:
    """ksqlDB's refusals of a join once it builds the query's streams (after its
    planner's checks), in its order: each join but a foreign-key one, the last first, of
    sides whose topics' partition counts differ (the left side's count its right-most
    source's, its name its left-most's; ``partitions(topic)``: a topic's count, None
    when unknown), then a windowed side that would be repartitioned."""
    joins = plan.joins
    if partitions is not None:
        for index in reversed(range(len(joins))):
            join = joins[index]
            if join.foreign_key:
                continue
            left_topic = plan.source.topic if index == 0 else joins[index - 1].right.topic
            left, right = partitions(left_topic), partitions(join.right.topic)
            if left is None or right is None or left == right:
                continue
            left_name, right_name = f"`{join.left_name}`", f"`{join.right_name}`"
            raise KsqlStatementError(
                f"Can't join {left_name} with {right_name} since the number of partitions "
                f"don't match. {left_name} partitions = {left}; {right_name} partitions = "
                f"{right}. Please repartition either one so that the number of partitions "
                "match."
            )
    if any(join.windowed_rekey for join in joins):
        raise KsqlStatementError(
            "Implicit repartitioning of windowed sources is not supported. See "
            "https://github.com/confluentinc/ksql/issues/4385."
        )


def _refuse_window_mix(sides: list[tuple[str, DataSource]]) -> None:
    """ksqlDB's refusal of a join of a windowed source to one not windowed, or of
    session windows to time windows (``sides``: the condition's, as written)."""
    (left_name, left), (right_name, right) = sides
    if left.is_windowed != right.is_windowed:
        raise KsqlStatementError(
            "Can not join windowed source to non-windowed source.\n"
            f"`{left_name}` is {left.window_type or 'not'} windowed\n"
            f"`{right_name}` is {right.window_type or 'not'} windowed"
        )
    if left.window_type is None or right.window_type is None:
        return
    if (left.window_type == "SESSION") != (right.window_type == "SESSION"):
        raise KsqlStatementError(
            "Incompatible windowed sources.\n"
            f"Left source: {left.window_type}\n"
            f"Right source: {right.window_type}\n"
            "Session windowed sources can only be joined to other session windowed sources, "
            "and may still not result in expected behaviour as session bounds must be an exact "
            "match for the join to work\n"
            "Hopping and tumbling windowed sources can only be joined to other hopping and "
            "tumbling windowed sources"
        )


def _join_sides(
    join: st.Join, scope: Scope, left_names: list[str], right_name: str
) -> tuple[ex.Expression, ex.Expression, str]:
    """The condition's left and right expressions (the left naming the sources joined
    so far, the right the source joined), after ksqlDB's checks, and the name of the
    source the left one names."""
    condition = join.condition
    if isinstance(condition, ex.Logical) and all(
        isinstance(side, ex.Comparison) and side.operator == "="
        for side in (condition.left, condition.right)
    ):
        raise KsqlStatementError(
            "Invalid join condition: joins on multiple conditions are not yet supported. "
            f"Got {expression_text(condition)}."
        )
    if not (isinstance(condition, ex.Comparison) and condition.operator == "="):
        raise KsqlStatementError(
            f"Unsupported join expression: {expression_text(condition)}. Only equality "
            "joins are supported."
        )
    names = [*left_names, right_name]

    def sides_of(expression: ex.Expression) -> set[str]:
        """The sources whose columns ``expression`` names."""
        resolved = [scope.resolve(n) for n in walk(expression) if isinstance(n, ex.ColumnReference)]
        return {name for name in names if any(column.startswith(name + "_") for column in resolved)}

    first, second = condition.left, condition.right
    first_sides, second_sides = sides_of(first), sides_of(second)
    if len(first_sides) != 1 or len(second_sides) != 1:
        empty = first if len(first_sides) != 1 else second
        raise KsqlStatementError(
            f"Invalid comparison expression '{expression_text(empty)}' in join "
            f"'{expression_text(condition)}'. Each side of the join comparision must contain "
            "references from exactly one source."
        )
    if first_sides == second_sides:
        raise KsqlStatementError(
            "Each side of the join must reference exactly one source and not the same "
            f"source. Left side references `{first_sides.pop()}` and right references "
            f"`{second_sides.pop()}`"
        )
    if first_sides == {right_name}:
        first, second = second, first
        first_sides, second_sides = second_sides, first_sides
    if second_sides != {right_name}:
        raise KsqlStatementError(
            f"A join criteria is expected to reference the source (`{right_name}`) in the "
            f"FROM clause, instead the right source references `{second_sides.pop()}` and "
            f"the left source references `{first_sides.pop()}`"
        )
    return first, second, first_sides.pop()


def _join_plan(
    join: st.Join,
    shape: str,
    earlier: list[JoinPlan],
    sources: list[tuple[str, DataSource]],
    index: int,
    scope: Scope,
    left_key: ex.Expression,
    right_key: ex.Expression,
) -> JoinPlan:
    """One join of the chain, after ksqlDB's checks of its keys."""
    right_name, right = sources[index + 1]
    names = [name for name, _ in sources]
    left_text = expression_text(_qualified(left_key, scope, names))
    right_text = expression_text(_qualified(right_key, scope, names))
    written = join.condition
    flipped = isinstance(written, ex.Comparison) and written.left is right_key
    # the condition as the statement wrote it, as ksqlDB names it
    condition = f"{right_text} = {left_text}" if flipped else f"{left_text} = {right_text}"

    def key_column(expression: ex.Expression, name: str, source: DataSource) -> bool:
        keys = {f"{name}_{c.name}" for c in source.key_columns}
        return isinstance(expression, ex.ColumnReference) and scope.resolve(expression) in keys

    # a join is on one column: a table keyed by several is never joined on its key
    if shape == "stream-table" and (
        len(right.key_columns) != 1 or not key_column(right_key, right_name, right)
    ):
        raise KsqlStatementError(
            "Invalid join condition: stream-table joins require to join on the table's "
            f"primary key. Got {condition}."
        )
    foreign_key = False
    if shape == "table-table":
        if len(right.key_columns) != 1 or not key_column(right_key, right_name, right):
            raise KsqlStatementError(
                "Invalid join condition: table-table joins require to join on the primary key "
                f"of the right input table. Got {condition}."
            )
        if index == 0:
            left_name, left = sources[0]
            # one of several key columns is a foreign key: the output keeps the whole key
            foreign_key = len(left.key_columns) != 1 or not key_column(left_key, left_name, left)
        else:  # on the key of the result so far; ksqlDB refuses a foreign key there
            keys: list[ex.Expression] = (
                [ex.ColumnReference(c) for c in earlier[-1].left_key_columns]
                if earlier[-1].foreign_key
                else _equal_keys(tuple(earlier), scope)
            )
            if not any(_resolved(left_key, scope) == _resolved(k, scope) for k in keys):
                raise KsqlStatementError(
                    "Invalid join condition: foreign-key table-table joins are not supported "
                    f"as part of n-way joins. Got {condition}."
                )
        if foreign_key and join.kind in ("RIGHT", "FULL"):
            shown = "RIGHT OUTER" if join.kind == "RIGHT" else "FULL OUTER"
            raise KsqlStatementError(f"{shown} JOIN on a foreign key is not supported")
    left_type = compile_expression(left_key, scope).sql_type
    right_type = compile_expression(right_key, scope).sql_type
    if left_type != right_type:
        raise KsqlStatementError(
            f"Invalid join condition: types don't match. Got {left_text}"
            f"{{{left_type}}} = {right_text}{{{right_type}}}."
        )
    within = join.within
    left_name, left = sources[0]
    return JoinPlan(
        kind=join.kind,
        right=right,
        left_name=left_name,
        right_name=right_name,
        left_key=left_key,
        right_key=right_key,
        shape=shape,
        before_ms=within.before.milliseconds if within is not None else 0,
        after_ms=within.after.milliseconds if within is not None else 0,
        grace_ms=within.grace.milliseconds if within and within.grace is not None else None,
        left_joined=index > 0,
        left_columns=tuple(
            f"{name}_{column}"
            for name, source in sources[: index + 1]
            for column in [*(c.name for c in source.columns), *side_system_columns(source)]
        ),
        foreign_key=foreign_key,
        left_key_columns=tuple(f"{left_name}_{c.name}" for c in left.key_columns),
    )


def _qualified(expression: ex.Expression, scope: Scope, names: list[str]) -> ex.Expression:
    """``expression`` with each unqualified column qualified by the name of its source,
    as ksqlDB writes a join condition in its messages."""

    def replace(node: ex.Expression, bound: frozenset[str]) -> ex.Expression | None:
        if isinstance(node, ex.ColumnReference) and node.source is None and node.name not in bound:
            try:
                column = scope.resolve(node)
            except KsqlStatementError:
                return None
            owner = next((n for n in names if scope.qualified.get((n, node.name)) == column), None)
            return None if owner is None else ex.ColumnReference(node.name, owner)
        return None

    return transform(expression, replace)


def _same(
    key: ex.Expression,
    expression: ex.Expression,
    scope: Scope | None = None,
    joins: tuple[JoinPlan, ...] = (),
) -> bool:
    """Whether ``expression`` is the key ``key``: the same column however qualified,
    or, over a join (``scope`` its row), the same column of the same source (L.K is not
    R.K, whatever the join's condition)."""
    if isinstance(key, ex.ColumnReference) and isinstance(expression, ex.ColumnReference):
        if joins and scope is not None:
            try:
                return scope.resolve(key) == scope.resolve(expression)
            except KsqlStatementError:
                pass
        return key.name == expression.name
    return key == expression


def _call_text(call: AggregateCall) -> str:
    """An aggregate call as ksqlDB's messages show it: ``SUM(VALUE)``."""
    arguments = [expression_text(a) for a in call.arguments]
    arguments += [expression_text(ex.Literal(v)) for v in call.literal_arguments]
    return f"{call.name.upper()}({', '.join(arguments)})"


def _with_qualifier(expression: ex.Expression, qualifier: str) -> ex.Expression:
    """``expression`` with each unqualified column reference qualified by ``qualifier``."""

    def qualify(node: ex.Expression, bound: frozenset[str]) -> ex.Expression | None:
        if isinstance(node, ex.ColumnReference) and node.source is None and node.name not in bound:
            return ex.ColumnReference(node.name, qualifier)
        return None

    return transform(expression, qualify)


def _keys_missing(sink: SinkRequest | None, what: str, missing: list[str]) -> None:
    name = _sink_name(sink.name if sink is not None else "")
    plural = "s" if len(missing) > 1 else ""
    joined = (
        " and ".join(missing)
        if len(missing) <= 2
        else (", ".join(missing[:-1]) + " and " + missing[-1])
    )
    raise KsqlStatementError(
        f"Key{plural} missing from projection (ie, SELECT). \n"
        f"The query used to build {name} must include the {what}{plural} {joined} in its "
        f"projection (eg, SELECT {', '.join(missing)}...)."
    )


def _keys_first(projection: list[Projection]) -> tuple[Projection, ...]:
    return tuple(
        [p for p in projection if p.namespace == "KEY"]
        + [p for p in projection if p.namespace != "KEY"]
    )


def _sink_timestamp(props: dict[str, Any], columns: list[tuple[str, ex.SqlType]]) -> str | None:
    """The sink's TIMESTAMP column (WITH), after ksqlDB's checks that the query's
    output has it, of a type its extraction reads."""
    timestamp = props.get("TIMESTAMP")
    if timestamp is None:
        return None
    timestamp = str(timestamp).strip("`").upper()
    found = next((t for name, t in columns if name == timestamp), None)
    if found is None:
        raise KsqlStatementError(
            "The TIMESTAMP column set in the WITH clause does not exist in the schema: "
            f"'{timestamp}'"
        )
    _check_timestamp_type(Column(timestamp, found, "VALUE"), props.get("TIMESTAMP_FORMAT"))
    return timestamp


def _check_timestamp_type(column: Column, timestamp_format: Any) -> None:
    """ksqlDB's refusals of a TIMESTAMP column its extraction cannot read."""
    kind = str(column.type)
    if kind == "STRING":
        if not timestamp_format:
            raise KsqlStatementError(
                "A String timestamp field has been specified without also specifying the "
                "timestamp_format"
            )
        return
    if timestamp_format:
        raise KsqlStatementError(
            "'TIMESTAMP_FORMAT' set in the WITH clause can only be used when the timestamp "
            "column is of type STRING."
        )
    if kind not in ("BIGINT", "TIMESTAMP"):
        raise KsqlStatementError(
            f"Timestamp column, `{column.name}`, should be LONG(INT64), TIMESTAMP, or a String "
            "with a timestamp_format specified."
        )


def _refuse_table_aggregation(calls: list[AggregateCall], window: Window | None) -> None:
    """ksqlDB's refusals of an aggregation over a table: no window, and only functions
    that can take a row back out (the table's updates and deletes)."""
    from strom.ksql.aggregate_functions import aggregate_function

    if window is not None:
        raise KsqlStatementError("Windowing not supported for table aggregations.")
    refused: list[str] = []
    for call in calls:
        function = aggregate_function(
            call.name, list(call.argument_types), list(call.literal_arguments)
        )
        if function is not None and not function.can_undo and call.name not in refused:
            refused.append(call.name)
    if refused:
        listed = (
            refused[0] if len(refused) == 1 else ", ".join(refused[:-1]) + " and " + refused[-1]
        )
        plural = "s" if len(refused) > 1 else ""
        raise KsqlStatementError(
            f"The aggregation function{plural} {listed} cannot be applied to a table source, "
            "only to a stream source."
        )


def _plan_aggregation(
    query: st.Query,
    source: DataSource,
    scope: Scope,
    persistent: bool,
    sink: SinkRequest | None,
    joins: tuple[JoinPlan, ...] = (),
) -> tuple[Aggregation, tuple[Projection, ...]]:
    from strom.ksql.aggregate_functions import aggregate_function

    group_by = tuple(query.group_by or ())
    if not joins:  # the same expression twice, however qualified, as ksqlDB names it
        qualifier = query.source.left.alias or query.source.left.name
        seen_groups: set[ex.Expression] = set()
        for expression in group_by:
            qualified = _with_qualifier(expression, qualifier)
            if qualified in seen_groups:
                raise KsqlStatementError(
                    f"Duplicate GROUP BY expression: {expression_text(qualified)}"
                )
            seen_groups.add(qualified)
    window = _window(query.window)
    group_columns = tuple(f"KSQL_GROUP_{i}" for i in range(len(group_by)))
    for expression in group_by:
        for node in walk(expression):
            if isinstance(node, ex.FunctionCall) and is_aggregate(node.name):
                raise KsqlStatementError(
                    "GROUP BY does not support aggregate functions: "
                    f"{node.name.upper()} is an aggregate function."
                )
    group_types = tuple(compile_expression(e, scope).sql_type for e in group_by)
    calls: list[AggregateCall] = []

    def aggregate_of(call: ex.FunctionCall) -> str:
        for existing in calls:
            if existing.name == call.name.upper() and existing.arguments == call.arguments:
                return existing.column
        arguments = list(call.arguments)
        literals: list[Any] = []
        while len(arguments) > 1 and isinstance(arguments[-1], ex.Literal):
            last = arguments.pop()
            assert isinstance(last, ex.Literal)
            literals.insert(0, last.value)
        for argument in arguments:
            for node in walk(argument):
                if isinstance(node, ex.FunctionCall) and is_aggregate(node.name):
                    raise KsqlStatementError(
                        "Aggregate functions can not be nested: "
                        f"{call.name}({expression_text(node)})"
                    )
        if call.name.upper() in _LITERAL_PARAMETERS and len(arguments) > 1:
            raise KsqlStatementError(  # the parameters after the column must be literals
                f"Parameter 2 passed to function {call.name.upper()} must be a literal "
                f"constant, but was expression: '{expression_text(arguments[1])}'"
            )
        types = tuple(compile_expression(a, scope).sql_type for a in arguments)
        function = aggregate_function(call.name.upper(), list(types), literals)
        if function is None:
            shown = ", ".join(str(t) for t in types)
            raise KsqlStatementError(
                f"Function '{declared_name(call.name)}' does not accept parameters ({shown})."
            )
        column = f"KSQL_AGG_VARIABLE_{len(calls)}"
        calls.append(
            AggregateCall(
                column,
                call.name.upper(),
                tuple(arguments),
                tuple(literals),
                types,
                function.result_type,
            )
        )
        return column

    def rewrite(expression: ex.Expression) -> ex.Expression:
        def replace(node: ex.Expression, bound: frozenset[str]) -> ex.Expression | None:
            for index, group in enumerate(group_by):
                if _same(group, node):
                    return ex.ColumnReference(group_columns[index])
            if isinstance(node, ex.FunctionCall) and is_aggregate(node.name):
                return ex.ColumnReference(aggregate_of(node))
            if (
                isinstance(node, ex.ColumnReference)
                and node.source is not None
                and node.name in WINDOW_BOUND_TYPES
            ):  # the window's bounds, however qualified
                return ex.ColumnReference(node.name)
            return None

        return transform(expression, replace)

    duplicates: list[str] = []
    named = _named(
        _select_items(query, source, persistent, joins, scope),
        _source_column_names(source, joins),
        duplicates,
    )
    rewritten = [(name, expression, rewrite(expression)) for name, expression in named]
    having = rewrite(query.having) if query.having is not None else None
    if not calls:
        _refuse_unknown_functions([e for _, e in named] + list(group_by))
        raise KsqlStatementError(
            "GROUP BY requires aggregate functions in either the SELECT or HAVING clause."
        )
    allowed = set(group_columns) | {c.column for c in calls} | set(WINDOW_BOUND_TYPES) | {"ROWTIME"}
    unmatched = [
        expression_text(original)
        for _, original, expression in rewritten
        if any(
            isinstance(node, ex.ColumnReference) and node.name not in allowed
            for node in walk(expression)
        )
    ]
    if unmatched:
        raise KsqlStatementError(
            "Non-aggregate SELECT expression(s) not part of GROUP BY: "
            + ", ".join(unmatched)
            + "\nEither add the column(s) to the GROUP BY or remove them from the SELECT."
        )
    loose_having = list(
        dict.fromkeys(
            expression_text(node)
            for node in (walk(having) if having is not None else ())
            if isinstance(node, ex.ColumnReference) and node.name not in allowed
        )
    )
    if loose_having:  # the columns HAVING names that are neither grouped nor aggregated
        raise KsqlStatementError(
            "Non-aggregate HAVING expression not part of GROUP BY: "
            + ", ".join(loose_having)
            + "\nConsider switching the HAVING clause to a WHERE clause before the GROUP BY."
        )
    if source.kind == "TABLE" and not joins:
        _refuse_table_aggregation(calls, window)
    columns: dict[str, ex.SqlType] = dict(zip(group_columns, group_types, strict=True))
    columns.update({c.column: c.result_type for c in calls})
    columns["ROWTIME"] = BIGINT
    if window is not None or source.is_windowed:
        columns.update(WINDOW_BOUND_TYPES)
    aggregate_scope = Scope(columns)
    projection: list[Projection] = []
    found: dict[int, str] = {}  # each grouping expression selected: its name
    for name, _original, expression in rewritten:
        sql_type = compile_expression(expression, aggregate_scope, "SELECT").sql_type
        namespace = "VALUE"
        if isinstance(expression, ex.ColumnReference) and expression.name in group_columns:
            index = group_columns.index(expression.name)
            if index not in found:
                found[index] = name
                namespace = "KEY"
            elif persistent:
                _key_twice(found[index], name, grouped=True)
        projection.append(Projection(name, sql_type, expression, namespace))
    if having is not None:
        try:
            having_type = compile_expression(having, aggregate_scope, "HAVING").sql_type
        except KsqlStatementError as exc:  # named as the user wrote them, as ksqlDB does
            internal = {c.column: _call_text(c) for c in calls}
            internal.update(zip(group_columns, map(expression_text, group_by), strict=True))
            message = str(exc)
            for column in sorted(internal, key=len, reverse=True):
                message = message.replace(column, internal[column])
            raise _with_joined_names(KsqlStatementError(message), query, scope) from None
        if str(having_type) != "BOOLEAN":
            raise KsqlStatementError(
                f"Type error in HAVING expression: Should evaluate to boolean but is "
                f"{having_type} instead."
            )
    if persistent and len(found) < len(group_by):
        missing = [expression_text(g) for i, g in enumerate(group_by) if i not in found]
        _keys_missing(sink, "grouping expression", missing)
    _refuse_duplicates(duplicates, projection)
    if not persistent:
        # A transient query's key columns are what it selects, in its order.
        projection = [dataclasses.replace(p, namespace="VALUE") for p in projection]
    aggregation = Aggregation(
        group_by=group_by,
        group_columns=group_columns,
        group_types=group_types,
        calls=tuple(calls),
        window=window,
        having=having,
        columns=columns,
    )
    if not persistent:
        return aggregation, tuple(projection)
    # the key columns in the order of the GROUP BY, as ksqlDB's schema has them
    position = {name: index for index, name in found.items()}
    keys = sorted((p for p in projection if p.namespace == "KEY"), key=lambda p: position[p.name])
    return aggregation, (*keys, *(p for p in projection if p.namespace != "KEY"))


# ---- the sink -----------------------------------------------------------------------------


def _format(value: Any, allowed: tuple[str, ...]) -> str:
    text = str(value).strip().upper()
    if text not in allowed:
        raise KsqlStatementError(f"Unknown format: {value}")
    return text


def _key_format(fmt: str, key_types: list[ex.SqlType], windowed: bool, keyed: str) -> str:
    """The sink's key format when the statement names none: the source's, or ``keyed``
    when the source has no key (NONE) and the result has one: a join's first source
    with a key format, else ``ksql.persistence.default.format.key`` (ksqlDB's JoinNode
    and its repartitions). ksqlDB does not switch a format that cannot hold the new
    key: the sink is refused."""
    if key_types and not windowed and fmt == "NONE":
        return keyed
    return fmt


def _check_primitive_sink_formats(
    key_format: str, keys: list[Column], value_format: str, values: list[Column]
) -> None:
    """What KAFKA or DELIMITED cannot write, refused in ksqlDB's envelope: KAFKA holds
    one field of a primitive type, DELIMITED no ARRAY, MAP or STRUCT."""
    for what, fmt, side in (("key", key_format, keys), ("value", value_format, values)):
        if fmt == "KAFKA" and len(side) > 1:
            shown = ", ".join(f"`{c.name}` {c.type}{' KEY' if what == 'key' else ''}" for c in side)
            reason: str | None = f"The 'KAFKA' format only supports a single field. Got: [{shown}]"
        else:
            reason = primitive_format_refusal(fmt, side, what)
        if reason is not None:
            raise KsqlStatementError(serde_refusal(what, fmt, side, reason))


def _sink(plan: QueryPlan, request: SinkRequest, statement: str) -> DataSource:
    props = request.properties
    unknown = sorted(set(props) - SINK_PROPERTIES)
    if unknown:
        raise KsqlStatementError(f"Invalid config variable(s) in the WITH clause: {unknown[0]}")
    existing = request.existing
    if request.kind is None:  # INSERT INTO an existing stream
        assert existing is not None
        return _check_insert_target(plan, existing)
    if request.kind == "STREAM" and plan.kind == "TABLE":
        raise KsqlStatementError(
            "Invalid result type. Your SELECT query produces a TABLE. "
            "Please use CREATE TABLE AS SELECT statement instead."
        )
    if request.kind == "TABLE" and plan.kind == "STREAM":
        raise KsqlStatementError(
            "Invalid result type. Your SELECT query produces a STREAM. "
            "Please use CREATE STREAM AS SELECT statement instead."
        )
    both = props.get("FORMAT")
    if both is not None and ("KEY_FORMAT" in props or "VALUE_FORMAT" in props):
        which = "VALUE_FORMAT" if "VALUE_FORMAT" in props else "KEY_FORMAT"
        raise KsqlStatementError(
            f"Cannot supply both '{which}' and 'FORMAT' properties, as 'FORMAT' sets both key "
            "and value formats. Either use just 'FORMAT', or use 'KEY_FORMAT' and "
            "'VALUE_FORMAT'."
        )
    window = plan.aggregation.window if plan.aggregation is not None else None
    windowed = window is not None or plan.source.is_windowed
    key_types = [p.type for p in plan.key_columns]
    keyed = next(
        (s.key_format for s in plan.sources if s.key_format != "NONE"),
        request.default_key_format,
    )
    explicit_key = both if both is not None else props.get("KEY_FORMAT")
    if explicit_key is not None:
        key_format = _format(explicit_key, KEY_FORMATS)
        if not key_types and key_format != "NONE" and "KEY_FORMAT" in props:
            raise KsqlStatementError("Key format specified for stream without key columns.")
    else:
        key_format = _key_format(plan.source.key_format, key_types, windowed, keyed)
    value_source = both if both is not None else props.get("VALUE_FORMAT")
    value_format = (
        _format(value_source, VALUE_FORMATS)
        if value_source is not None
        else plan.source.value_format
    )
    columns = tuple(Column(p.name, p.type, p.namespace) for p in plan.projection)
    if not any(c.namespace == "VALUE" for c in columns):
        raise KsqlStatementError("The projection contains no value columns.")
    refuse_map_keys([c for c in columns if c.namespace == "KEY"])
    if key_format == "NONE" and plan.key_columns:
        if explicit_key is not None:  # the statement asked for no key, yet it has one
            raise KsqlStatementError(
                "The 'NONE' format can only be used when no columns are defined. Got: ["
                + ", ".join(f"`{c.name}` {c.type} KEY" for c in columns if c.namespace == "KEY")
                + "]"
            )
        key_format = _key_format("NONE", key_types, windowed, keyed)
    if not plan.key_columns and explicit_key is None and plan.source.key_format != "NONE":
        key_format = "KAFKA" if key_format in ("NONE",) else key_format
    keys = [c for c in columns if c.namespace == "KEY"]
    values = [c for c in columns if c.namespace == "VALUE"]
    check_protobuf_nullable(props)
    check_serde_shapes(key_format, keys, value_format, values, props.get("WRAP_SINGLE_VALUE"))
    _check_primitive_sink_formats(key_format, keys, value_format, values)
    partitions = props.get("PARTITIONS", request.topic_partitions)
    for name in ("PARTITIONS", "REPLICAS"):
        value = props.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise KsqlStatementError(
                f"Invalid value {value} for property {name}: must be a positive integer"
            )
    timestamp = _sink_timestamp(props, [(c.name, c.type) for c in columns])
    window_type = window.kind if window is not None else plan.source.window_type
    window_size = (
        window.size_ms
        if window is not None and window.kind != "SESSION"
        else (None if window is not None else plan.source.window_size_ms)
    )
    properties = dict(props)
    properties["PARTITIONS"] = partitions
    return DataSource(
        kind=request.kind,
        name=request.name,
        columns=columns,
        topic=str(props.get("KAFKA_TOPIC", request.topic_prefix + request.name)),
        key_format=key_format,
        value_format=value_format,
        statement=statement,
        timestamp_column=timestamp,
        timestamp_format=props.get("TIMESTAMP_FORMAT"),
        window_type=window_type,
        window_size_ms=window_size,
        wrap_single_value=props.get("WRAP_SINGLE_VALUE"),
        # a format taken from the source keeps its delimiter, as ksqlDB's does
        value_delimiter=props.get("VALUE_DELIMITER")
        or (plan.source.value_delimiter if value_source is None else None),
        key_delimiter=props.get("KEY_DELIMITER")
        or (
            plan.source.key_delimiter
            if explicit_key is None and key_format == plan.source.key_format
            else None
        ),
        properties=properties,
    )


def _check_insert_target(plan: QueryPlan, target: DataSource) -> DataSource:
    if target.kind != "STREAM":
        raise KsqlStatementError(
            f"INSERT INTO can only be used to insert into a stream. {target.name} is a table."
        )
    if any(c.namespace == "HEADER" for c in target.columns):
        raise KsqlStatementError(f"Cannot insert into {target.name} because it has header columns")
    if target.is_source:
        raise KsqlStatementError(f"Cannot insert into read-only stream: {target.name}")
    if plan.kind != "STREAM":
        raise KsqlStatementError(
            f"Incompatible data sink and query result. Data sink ({target.name}) type is "
            "KSTREAM but select query result is KTABLE."
        )
    produced = [(p.name, str(p.type), p.namespace) for p in plan.projection]
    expected = [
        (c.name, str(c.type), c.namespace) for c in target.columns if c.namespace != "HEADER"
    ]
    if produced != expected:
        result = ", ".join(f"`{n}` {t}{' KEY' if ns == 'KEY' else ''}" for n, t, ns in produced)
        sink = ", ".join(f"`{n}` {t}{' KEY' if ns == 'KEY' else ''}" for n, t, ns in expected)
        raise KsqlStatementError(
            "Incompatible schema between results and sink.\n"
            f"Result schema is {result}\nSink schema is {sink}"
        )
    return target


_WRAP_SINGLE_VALUES = "ksql.persistence.wrap.single.values"
COLLECT_LIMITS = {
    "COLLECT_LIST": "ksql.functions.collect_list.limit",
    "COLLECT_SET": "ksql.functions.collect_set.limit",
}


def _collect_limit(value: Any) -> int | None:
    """A ``ksql.functions.collect_*.limit`` value as ksqlDB reads it: a number or a
    string of one; a negative one (or none) is no limit."""
    if value is None or isinstance(value, bool):
        return None
    try:
        limit = int(value) if isinstance(value, int | float) else int(str(value).strip())
    except ValueError:
        return None
    return None if limit < 0 else limit


def collect_limits_from_properties(plan: QueryPlan, properties: dict[str, Any]) -> QueryPlan:
    """ksqlDB's ``ksql.functions.collect_list.limit`` and ``collect_set.limit`` (the
    query's properties over the server's): how many elements COLLECT_LIST and
    COLLECT_SET keep."""
    aggregation = plan.aggregation
    if aggregation is None:
        return plan
    calls = tuple(
        dataclasses.replace(call, collect_limit=_collect_limit(properties.get(key)))
        if (key := COLLECT_LIMITS.get(call.name)) is not None
        else call
        for call in aggregation.calls
    )
    if calls == aggregation.calls:
        return plan
    return dataclasses.replace(plan, aggregation=dataclasses.replace(aggregation, calls=calls))


def wrapping_from_properties(
    plan: QueryPlan, statement: st.CreateAsSelect | st.InsertInto, properties: dict[str, Any]
) -> QueryPlan:
    """ksqlDB's ``ksql.persistence.wrap.single.values``: whether a new sink with one value
    column wraps it in an object, when its WITH clause does not say."""
    setting = properties.get(_WRAP_SINGLE_VALUES)
    sink = plan.sink
    if (
        setting is None
        or sink is None
        or not isinstance(statement, st.CreateAsSelect)
        or "WRAP_SINGLE_VALUE" in statement.properties
        or len(sink.value_columns) != 1
        or sink.value_format not in ("JSON", "JSON_SR", "AVRO")
    ):
        return plan
    wrap = str(setting).strip().lower() == "true"
    return dataclasses.replace(plan, sink=dataclasses.replace(sink, wrap_single_value=wrap))
