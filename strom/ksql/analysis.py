"""A query checked against the metastore before it is planned: the first step of the
compiler, with ksqlDB's messages.

Owns resolving a query's sources (FROM and each JOIN, by name or alias) and the columns
its clauses name: each column reference must be a column of a source (qualified by its
name or alias, or unqualified), a pseudo column (ROWTIME, ROWPARTITION, ROWOFFSET;
WINDOWSTART and WINDOWEND in a windowed query or over a windowed source), or a lambda's
parameter. ``analyze`` returns the sources by the names the query may use; a query that
does not resolve raises ``KsqlStatementError`` (``Exception while preparing statement:
X does not exist.``, ``Line: 1, Col: 8: WHERE column 'X' cannot be resolved.``).

Does not own types, the output schema or the plan (the Spark compiler's, later).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from strom.ksql import expressions as ex
from strom.ksql import statements as st
from strom.ksql.metastore import DataSource, KsqlStatementError, Metastore

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


def analyze(query: st.Query, metastore: Metastore) -> Analysis:
    relations = [query.source.left, *(join.right for join in query.source.joins)]
    sources: dict[str, DataSource] = {}
    for relation in relations:
        source = metastore.source(relation.name)
        if source is None:
            raise KsqlStatementError(
                f"Exception while preparing statement: {relation.name} does not exist."
            )
        sources[relation.name] = source
        if relation.alias is not None:
            sources[relation.alias] = source
    windowed = query.window is not None or any(s.is_windowed for s in sources.values())
    clauses: list[tuple[str, ex.Expression]] = [
        (prefix, expression)
        for prefix, expressions in (
            ("SELECT", [i.expression for i in query.select if isinstance(i, st.SelectExpression)]),
            ("WHERE", [query.where] if query.where is not None else []),
            ("GROUP BY", list(query.group_by or ())),
            ("PARTITION BY", list(query.partition_by or ())),
            ("HAVING", [query.having] if query.having is not None else []),
            ("JOIN ON", [join.condition for join in query.source.joins]),
        )
        for expression in expressions
    ]
    for item in query.select:
        if isinstance(item, st.AllColumns) and item.source is not None:
            if item.source not in sources:
                raise KsqlStatementError(
                    f"Exception while preparing statement: {item.source} does not exist."
                )
    # ksqlDB's synthetic join key (ROWKEY, ROWKEY_n) is known once the join is planned:
    # the planner resolves an unqualified one in the SELECT of a join (not aggregated)
    synthetic = bool(query.source.joins) and query.group_by is None
    for prefix, expression in clauses:
        for reference in _references(expression):
            if (
                synthetic
                and prefix == "SELECT"
                and reference.source is None
                and reference.name.startswith("ROWKEY")
            ):
                continue
            if not _resolves(reference, sources, windowed):
                where = (
                    f"Line: {reference.line}, Col: {reference.column}: " if reference.line else ""
                )
                raise KsqlStatementError(
                    f"{where}{prefix} column '{reference}' cannot be resolved."
                )
    return Analysis(sources, windowed)


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
