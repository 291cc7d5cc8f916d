"""A query checked against the metastore before it is planned: the first step of the
compiler, with ksqlDB's messages.

Owns resolving a query's sources (FROM and each JOIN, by name or alias) and the columns
its clauses name: each column reference must be a column of a source (qualified by its
name or alias, or unqualified), a pseudo column (ROWTIME, ROWPARTITION, ROWOFFSET;
WINDOWSTART and WINDOWEND in a windowed query or over a windowed source), or a lambda's
parameter; a system column's name as a SELECT alias, or selected by a persistent query,
is refused before the columns are resolved, as ksqlDB refuses it. ``analyze`` returns
the sources by the names the query may use; a query that does not resolve raises
``KsqlStatementError`` (``Exception while preparing statement: X does not exist.``,
``Line: 1, Col: 8: WHERE column 'X' cannot be resolved.``; an unknown qualifier, a name
two joined sources have, a join or GROUP BY over values in the KAFKA format, each as
ksqlDB words it).

Does not own types, the output schema or the plan (the Spark compiler's, later).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.metastore import SYSTEM_COLUMNS, DataSource, KsqlStatementError, Metastore

PSEUDO_COLUMNS = frozenset({"ROWTIME", "ROWPARTITION", "ROWOFFSET"})
WINDOW_BOUNDS = frozenset({"WINDOWSTART", "WINDOWEND"})


@dataclass(frozen=True)
class Analysis:
    """The query's sources by every name it may use for them (name and alias)."""

    sources: dict[str, DataSource]
    windowed: bool


def _references(
    expression: ex.Expression, bound: frozenset[str] = frozenset()
) -> Iterator[ex.ColumnReference]:
    """The column references of ``expression``, less lambda parameters in scope."""
    if isinstance(expression, ex.ColumnReference):
        if expression.source is not None or expression.name not in bound:
            yield expression
        return
    if isinstance(expression, ex.Lambda):
        yield from _references(expression.body, bound | frozenset(expression.parameters))
        return
    for item in fields(expression):  # type: ignore[arg-type]
        yield from _children(getattr(expression, item.name), bound)


def _children(value: object, bound: frozenset[str]) -> Iterator[ex.ColumnReference]:
    if isinstance(value, ex.Expression):
        yield from _references(value, bound)
    elif isinstance(value, tuple):
        for item in value:
            yield from _children(item, bound)


def analyze(query: st.Query, metastore: Metastore, persistent: bool = False) -> Analysis:
    """The query's sources and whether it is windowed, after ksqlDB's analysis: its
    sources known, the SELECT's system column names, then every column reference."""
    relations = [query.source.left, *(join.right for join in query.source.joins)]
    sources: dict[str, DataSource] = {}
    for relation in relations:
        source = metastore.source(relation.name)
        if source is None:
            raise KsqlStatementError(
                f"Exception while preparing statement: {relation.name} does not exist."
                + metastore.alternatives(relation.name)
            )
        sources[relation.name] = source
        if relation.alias is not None:
            sources[relation.alias] = source
    _refuse_unknown_and_ambiguous(query, relations, sources)
    _refuse_kafka_values(query, relations, sources)
    check_reserved_names(query, persistent)
    windowed = query.window is not None or any(s.is_windowed for s in sources.values())
    # ksqlDB resolves no WINDOWSTART / WINDOWEND in the windowed aggregation of a join
    # (its query-validation case 'windowed join with window bounds', issue 5931)
    bounds = windowed and not (
        query.source.joins and not any(s.is_windowed for s in sources.values())
    )
    clauses: list[tuple[str, ex.Expression]] = [
        (prefix, expression)
        for prefix, expressions in (  # the FROM clause's first, as ksqlDB analyzes it
            ("JOIN ON", [join.condition for join in query.source.joins]),
            (
                "SELECT",
                [
                    i.expression
                    for i in query.select
                    if isinstance(i, st.SelectExpression | st.StructAll)
                ],
            ),
            ("WHERE", [query.where] if query.where is not None else []),
            ("GROUP BY", list(query.group_by or ())),
            ("PARTITION BY", list(query.partition_by or ())),
            ("HAVING", [query.having] if query.having is not None else []),
        )
        for expression in expressions
    ]
    for item in query.select:
        if isinstance(item, st.AllColumns) and item.source is not None:
            if item.source not in sources:
                raise KsqlStatementError(_unknown_qualifier(item.source))
    # ksqlDB's synthetic join key (ROWKEY, ROWKEY_n) is known once the join is planned:
    # the planner resolves an unqualified one in the SELECT of a join (not aggregated)
    synthetic = bool(query.source.joins) and query.group_by is None
    for prefix, expression in clauses:
        references = list(_references(expression))
        for reference in references:  # an unknown qualifier is named before the rest
            if reference.source is not None and reference.source not in sources:
                raise KsqlStatementError(_unknown_qualifier(reference.source))
        for reference in references:
            if (
                synthetic
                and prefix == "SELECT"
                and reference.source is None
                and reference.name.startswith("ROWKEY")
            ):
                continue
            if reference.source is not None and reference.source not in sources:
                raise KsqlStatementError(_unknown_qualifier(reference.source))
            _refuse_ambiguous(reference, relations, sources)
            if not _resolves(reference, sources, bounds):
                where = (
                    f"Line: {reference.line}, Col: {reference.column}: " if reference.line else ""
                )
                hint = (  # ksqlDB's reminder that it partitions the input
                    f" '{reference}' must be a column in the source schema since PARTITION BY "
                    "is applied on the input."
                    if prefix == "PARTITION BY"
                    else ""
                )
                raise KsqlStatementError(
                    f"{where}{prefix} column '{reference}' cannot be resolved.{hint}"
                )
    return Analysis(sources, windowed)


def _refuse_unknown_and_ambiguous(
    query: st.Query, relations: list[Any], sources: dict[str, DataSource]
) -> None:
    """An unknown qualifier, then a name more than one joined source has, as ksqlDB's
    parser and sanitizer refuse them before its analyzer's checks (``SELECT ROWTIME``
    over a join is ambiguous before it is a reserved name)."""
    if not query.source.joins:
        return
    expressions = [
        *(join.condition for join in query.source.joins),
        *(i.expression for i in query.select if isinstance(i, st.SelectExpression | st.StructAll)),
        *([query.where] if query.where is not None else []),
        *(query.group_by or ()),
        *(query.partition_by or ()),
        *([query.having] if query.having is not None else []),
    ]
    for expression in expressions:
        references = list(_references(expression))
        for reference in references:
            if reference.source is not None and reference.source not in sources:
                raise KsqlStatementError(_unknown_qualifier(reference.source))
        for reference in references:
            if reference.source is None and reference.name.startswith("ROWKEY"):
                continue  # maybe ksqlDB's synthetic join key, which the planner resolves
            _refuse_ambiguous(reference, relations, sources)


def check_reserved_names(query: st.Query, persistent: bool) -> None:
    """ksqlDB's system columns as names of the SELECT: never as an alias; selected as
    they are only by a transient query (a persistent one's sink would have them twice)."""
    for item in query.select:
        if not isinstance(item, st.SelectExpression):
            continue
        expression = item.expression
        named = expression.name if isinstance(expression, ex.ColumnReference) else None
        if (
            query.source.joins
            and item.alias is None
            and isinstance(expression, ex.ColumnReference)
            and expression.source is not None
            and expression.name.upper() in PSEUDO_COLUMNS
        ):
            continue  # a join names L.ROWTIME L_ROWTIME
        alias = item.alias if item.alias is not None else named
        if alias is None or alias.upper() not in SYSTEM_COLUMNS:
            continue
        if named is None or named.upper() != alias.upper():
            raise KsqlStatementError(
                f"`{alias.upper()}` is a reserved column name. You cannot use it as an alias "
                "for a column."
            )
        if persistent:
            raise KsqlStatementError(
                f"Reserved column name in select: `{alias.upper()}`. Please remove or alias "
                "the column."
            )


_KAFKA_VALUES_LIMITATION = (
    "The KAFKA format is primarily intended for use as a key format. It can be used as a "
    "value format, but can not be used in any operation that requires a repartition or "
    "changelog topic.\nRemoving this limitation requires enhancements to the core of KSQL. "
    "This will come in a future release. Until then, avoid using the KAFKA format for values."
    "\nIf you have an existing topic with KAFKA formatted values you can duplicate the data "
    "and serialize using Avro or JSON with a statement such as: \n\n'CREATE STREAM "
    "<new-stream-name> WITH(VALUE_FORMAT='Avro') AS SELECT * FROM "
    "<existing-kafka-formated-stream-name>;'\nFor more info see "
    "https://github.com/confluentinc/ksql/issues/3060"
)


def _refuse_kafka_values(
    query: st.Query, relations: list[Any], sources: dict[str, DataSource]
) -> None:
    """ksqlDB joins and groups no source whose values are in the KAFKA format."""
    kafka = [r.alias or r.name for r in relations if sources[r.name].value_format == "KAFKA"]
    if not kafka:
        return
    named = ", ".join(kafka)
    if query.source.joins:
        operation = "JOIN"
    elif query.group_by is not None:
        operation = "GROUP BY"
    else:
        return
    raise KsqlStatementError(
        f"Source(s) {named} are using the 'KAFKA' value format. This format does not yet "
        f"support {operation}.\n{_KAFKA_VALUES_LIMITATION}"
    )


def _unknown_qualifier(name: str) -> str:
    # ksqlDB finds it while building the statement's tree, hence its prefix
    return f"Failed to prepare statement: '{name}' is not a valid stream/table name or alias."


def _refuse_ambiguous(
    reference: ex.ColumnReference, relations: list[Any], sources: dict[str, DataSource]
) -> None:
    """An unqualified name that more than one source of a join has is ambiguous: every
    source has the pseudo columns, every windowed source the window bounds (ksqlDB lists
    the choices sorted)."""
    if reference.source is not None or len(relations) < 2:
        return
    name = reference.name
    having = [
        r.alias or r.name
        for r in relations
        if name in PSEUDO_COLUMNS
        or (name in WINDOW_BOUNDS and sources[r.name].is_windowed)
        or sources[r.name].column(name) is not None
    ]
    if len(having) > 1:
        where = f"Line: {reference.line}, Col: {reference.column}: " if reference.line else ""
        shown = sorted(f"{h}.{name}" for h in having)
        choices = ", ".join(shown[:-1]) + " or " + shown[-1]
        raise KsqlStatementError(
            f"Exception while preparing statement: {where}Column '{reference.name}' is"
            f" ambiguous. Could be {choices}."
        )


def _resolves(
    reference: ex.ColumnReference, sources: dict[str, DataSource], windowed: bool
) -> bool:
    name = reference.name
    if name in PSEUDO_COLUMNS or (windowed and name in WINDOW_BOUNDS):
        return reference.source is None or reference.source in sources
    if reference.source is not None:
        source = sources.get(reference.source)
        return source is not None and source.column(name) is not None
    return any(source.column(name) is not None for source in sources.values())
