"""CREATE OR REPLACE: which changes to a stream, a table or a persistent query are
accepted, with ksqlDB's messages for the ones that are not.

A source (CREATE OR REPLACE STREAM / TABLE, or the sink of CREATE OR REPLACE ... AS
SELECT) may be replaced by one with the same name, kind, topic and timestamp column,
the same key columns, and value columns that keep the old ones at their places (new
columns go at the end): ``check_source_upgrade``.

A persistent query may be replaced by one that reads the same source (topic, formats,
timestamp column) and writes the same sink (topic, formats, timestamp column) when the
steps between differ only in what ksqlDB calls passive steps: the filter (WHERE) and
the projection. A PARTITION BY must stay the same; an aggregation must keep its
grouping, its aggregate calls and its window kind (a windowed one, a join, a table
function or an aggregation over a table are not upgradeable, as in ksqlDB):
``check_query_upgrade``. The replaced query keeps its id and its progress (offsets and
state).

Pure: no I/O. Does not own executing the replacement (``strom.ksql.engine``).
"""

from __future__ import annotations

from strom.ksql.metastore import Column, DataSource, KsqlStatementError
from strom.ksql.planner import QueryPlan

_STEP_CLASS = "class io.confluent.ksql.execution.plan."


def _column_text(column: Column) -> str:
    namespace = "" if column.namespace == "VALUE" else f" {column.namespace}"
    return f"`{column.name}` {column.type}{namespace}"


def _schema_text(source: DataSource) -> str:
    return ", ".join(_column_text(c) for c in source.columns if c.namespace != "HEADER")


def _changed(old: tuple[Column, ...], new: tuple[Column, ...]) -> list[Column]:
    """The old columns not at the same place (with the same type) in ``new``."""
    placed = {(index, c.name, str(c.type)) for index, c in enumerate(new)}
    return [c for index, c in enumerate(old) if (index, c.name, str(c.type)) not in placed]


def check_source_upgrade(old: DataSource, new: DataSource) -> None:
    """``KsqlStatementError`` (ksqlDB's "Cannot upgrade data source") when ``new`` cannot
    replace ``old``."""
    issues: list[str] = []

    def differs(name: str, before: object, after: object) -> None:
        if before != after:
            issues.append(
                f"DataSource '`{old.name}`' has {name} = {before} which is not upgradeable to "
                f"{after}"
            )

    differs("type", f"K{old.kind}", f"K{new.kind}")
    differs("topic", old.topic, new.topic)
    differs("timestampColumn", old.timestamp_column, new.timestamp_column)
    key_changes = _changed(old.key_columns, new.key_columns)
    if key_changes or len(old.key_columns) != len(new.key_columns):
        changed = key_changes or list(old.key_columns)
        detail = (
            "Key columns must be identical. The following key columns are changed, missing or "
            f"reordered: [{', '.join(_column_text(c) for c in changed)}]"
        )
    else:
        value_changes = _changed(old.value_columns, new.value_columns)
        detail = (
            "The following columns are changed, missing or reordered: "
            f"[{', '.join(_column_text(c) for c in value_changes)}]"
            if value_changes
            else ""
        )
    if detail:
        issues.append(
            f"DataSource '`{old.name}`' has schema = {_schema_text(old)} which is not "
            f"upgradeable to {_schema_text(new)}. ({detail})"
        )
    if issues:
        raise KsqlStatementError("Cannot upgrade data source: " + "\n\tAND ".join(issues))


def _must_match(step: str, name: str, before: object, after: object) -> None:
    if before != after:
        raise KsqlStatementError(
            f"Query is not upgradeable. Plan step of type {step} must have matching {name}. "
            f"Values differ: {before} vs. {after}"
        )


def _not_supported(step: str) -> KsqlStatementError:
    return KsqlStatementError(f"Upgrades not yet supported for {step}")


def _formats(source: DataSource) -> str:
    return f"KEY_FORMAT={source.key_format}, VALUE_FORMAT={source.value_format}"


def check_query_upgrade(old: QueryPlan, new: QueryPlan) -> None:
    """``KsqlStatementError`` with ksqlDB's message when the query of ``new`` cannot
    replace the running query of ``old`` (keeping its offsets and state)."""
    stream = "Stream" if old.kind == "STREAM" else "Table"
    if old.sink is not None and new.sink is not None:
        sink = f"{stream}Sink"
        _must_match(sink, "formats", _formats(old.sink), _formats(new.sink))
        _must_match(sink, "topicName", old.sink.topic, new.sink.topic)
        _must_match(sink, "timestampColumn", old.sink.timestamp_column, new.sink.timestamp_column)
    for plan in (old, new):
        if plan.join is not None:
            shape = {"stream-table": "StreamTableJoin", "table-table": "TableTableJoin"}
            raise _not_supported(shape.get(plan.join.shape, "StreamStreamJoin"))
        if plan.table_functions:
            raise _not_supported("StreamFlatMap")
    if old.partition_by != new.partition_by:
        if old.partition_by is None:
            raise KsqlStatementError(
                "Query is not upgradeable. Cannot add a "
                f"{_STEP_CLASS}StreamSelectKey step that is not in the original query plan."
            )
        _must_match("StreamSelectKey", "keyExpression", old.partition_by, new.partition_by or "[]")
    before, after = old.aggregation, new.aggregation
    if before is not None or after is not None:
        if before is None or after is None:
            step = "StreamAggregate" if old.source.kind == "STREAM" else "TableAggregate"
            raise KsqlStatementError(
                "Query is not upgradeable. Cannot add a "
                f"{_STEP_CLASS}{step} step that is not in the original query plan."
                if before is None
                else f"Query is not upgradeable. Plan step of type {step} must have matching class."
            )
        if old.source.kind == "TABLE":
            raise _not_supported("TableAggregate")
        if before.window is not None or after.window is not None:
            raise _not_supported("StreamWindowedAggregate")
        _must_match("StreamGroupBy", "groupByExpressions", before.group_by, after.group_by)
        _must_match(
            "StreamAggregate",
            "aggregate functions",
            [(c.name, c.arguments, c.literal_arguments) for c in before.calls],
            [(c.name, c.arguments, c.literal_arguments) for c in after.calls],
        )
    source = f"{'Stream' if old.source.kind == 'STREAM' else 'Table'}Source"
    _must_match(source, "topicName", old.source.topic, new.source.topic)
    _must_match(source, "formats", _formats(old.source), _formats(new.source))
    _must_match(source, "timestampColumn", old.source.timestamp_column, new.source.timestamp_column)
