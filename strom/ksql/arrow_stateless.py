"""A persistent query's filter and projection run a batch at a time on Arrow: the fast
path of ``strom.ksql.runtime``'s ``mapInArrow`` for the common shape (a stream read in
JSON with a STRING key or none, WHERE and SELECT made of column references, literals,
comparisons, AND / OR / NOT, IS [NOT] NULL and integer, double and string arithmetic
without division, written as JSON with a KAFKA STRING key).

It gives exactly what the record-at-a-time operators (``strom.ksql.operators``) give
for the batch, or nothing: a batch it cannot vouch for (a value that is not one JSON
object, a field whose JSON type is not its column's, a field named twice in different
cases, invalid UTF-8, a negative timestamp...) answers None and the caller runs the
batch record at a time, where such records get their processing log entries. A plan
of any other shape is refused when compiled (``compile_stateless`` answers None).

Semantics kept: JSON fields matched to columns case-insensitively (an exact name and
its case variants never both in one batch), a missing field or a null value is null,
INTEGER read only in its range; comparisons with a null operand are false, AND / OR /
NOT three-valued, integer arithmetic wraps as Java's does; rows whose WHERE is not
true are dropped; a record whose value is null (a stream's null row) is dropped by
WHERE, else written with a null value (and a null key unless its key is the source's
key alone), as the record path does; values written as ``strom.ksql.formats`` writes
JSON (the columns in the sink's order, strings as ``json.dumps`` escapes them), each
record keeping ROWTIME as its timestamp.

Does not own reading records of other formats, the operators' semantics, or Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import formats
from strom.ksql import values as v
from strom.ksql.evaluation import Scope, arithmetic_result_type
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.operators import reads_only
from strom.ksql.planner import QueryPlan

_ARROW_TYPES = {"BOOLEAN": "bool_", "INTEGER": "int32", "BIGINT": "int64", "DOUBLE": "float64"}
_PSEUDO = ("ROWTIME", "ROWPARTITION", "ROWOFFSET")
_COMPARISONS = {
    "=": "equal",
    "<>": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}
_ARITHMETIC = {"+": "add", "-": "subtract", "*": "multiply"}
NULL_ROW = "\x00null row"  # JsonSourceReader's column: the record's value was null
# Strings json.dumps writes as they are, between quotes (printable ASCII but " and \).
_PLAIN_TEXT = r"^[ !#-\[\]-~]*$"

Columns = dict[str, Any]  # column name -> Arrow array
Evaluator = Callable[[Columns], Any]  # an Arrow array or scalar


class Unsupported(Exception):
    """A plan or expression the batch path does not run."""


def _arrow_type(sql_type: ex.SqlType | None) -> Any:
    import pyarrow as pa

    name = v.base(sql_type)
    if name == "STRING":
        return pa.string()
    if name in _ARROW_TYPES:
        return getattr(pa, _ARROW_TYPES[name])()
    raise Unsupported(f"type {sql_type}")


def compile_stateless(plan: QueryPlan) -> ArrowStateless | None:
    """The batch path of ``plan``, or None when it needs the record-at-a-time one."""
    try:
        return ArrowStateless(plan)
    except (Unsupported, KsqlStatementError):
        return None


class ArrowExpressions:
    """Expressions over a scope compiled into Arrow compute calls over ``Columns``
    (``available``: the scope's keys the columns hold)."""

    def __init__(self, scope: Scope, available: set[str]) -> None:
        self.scope = scope
        self.available = available

    def typed(self, node: ex.Expression, kind: str) -> Evaluator:
        evaluator, sql_type = self.compile(node)
        if v.base(sql_type) != kind:
            raise Unsupported("a projection of another type than its column")
        return evaluator

    def compile(self, node: ex.Expression) -> tuple[Evaluator, ex.SqlType]:
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(node, ex.ColumnReference):
            key = self.scope.resolve(node)
            sql_type = self.scope.type_of(key)
            _arrow_type(sql_type)
            if key not in self.available:
                raise Unsupported(f"column {key}")
            return (lambda columns: columns[key]), sql_type
        if isinstance(node, ex.Literal):
            value = node.value
            if isinstance(value, bool):
                literal_type = v.BOOLEAN
            elif isinstance(value, int):
                literal_type = v.INTEGER if -(2**31) <= value < 2**31 else v.BIGINT
            elif isinstance(value, float):
                literal_type = v.DOUBLE
            elif isinstance(value, str):
                literal_type = v.STRING
            else:
                raise Unsupported("a literal of this type")
            scalar = pa.scalar(value, _arrow_type(literal_type))
            return (lambda columns: scalar), literal_type
        if isinstance(node, ex.Comparison):
            left, left_type = self.compile(node.left)
            right, right_type = self.compile(node.right)
            kinds = (v.base(left_type), v.base(right_type))
            integers = ("INTEGER", "BIGINT")
            if kinds[0] in integers and kinds[1] in integers:
                left, right = _cast(left, pa.int64()), _cast(right, pa.int64())
            elif "DOUBLE" in kinds and _exact_double(node, kinds):
                left, right = _cast(left, pa.float64()), _cast(right, pa.float64())
            elif kinds[0] != kinds[1] or kinds[0] not in ("STRING", "DOUBLE", "BOOLEAN"):
                raise Unsupported("a comparison of these types")
            if kinds[0] == "BOOLEAN" and node.operator not in ("=", "<>"):
                raise Unsupported("an ordering of booleans")
            compare = getattr(pc, _COMPARISONS[node.operator])

            def comparison(columns: Columns) -> Any:  # a null operand: false
                return pc.fill_null(compare(left(columns), right(columns)), False)

            return comparison, v.BOOLEAN
        if isinstance(node, ex.Logical):
            left = self.typed(node.left, "BOOLEAN")
            right = self.typed(node.right, "BOOLEAN")
            combine = pc.and_kleene if node.operator == "AND" else pc.or_kleene
            return (lambda columns: combine(left(columns), right(columns))), v.BOOLEAN
        if isinstance(node, ex.Not):
            operand = self.typed(node.operand, "BOOLEAN")
            return (lambda columns: pc.invert(operand(columns))), v.BOOLEAN
        if isinstance(node, ex.IsNull):
            operand = self.compile(node.operand)[0]
            test = pc.is_valid if node.negated else pc.is_null
            return (lambda columns: test(operand(columns))), v.BOOLEAN
        if isinstance(node, ex.Arithmetic):
            return self._arithmetic(node)
        raise Unsupported(type(node).__name__)

    def _arithmetic(self, node: ex.Arithmetic) -> tuple[Evaluator, ex.SqlType]:
        import pyarrow.compute as pc

        left, left_type = self.compile(node.left)
        right, right_type = self.compile(node.right)
        result_type = arithmetic_result_type(node, node.operator, left_type, right_type)
        kind = v.base(result_type)
        if kind == "STRING" and node.operator in ("+", "||"):
            return (
                lambda columns: pc.binary_join_element_wise(left(columns), right(columns), "")
            ), result_type
        if kind not in ("INTEGER", "BIGINT", "DOUBLE") or node.operator not in _ARITHMETIC:
            raise Unsupported("this arithmetic")
        target = _arrow_type(result_type)
        left, right = _cast(left, target), _cast(right, target)
        operation = getattr(pc, _ARITHMETIC[node.operator])  # wraps, as Java's long and int
        return (lambda columns: operation(left(columns), right(columns))), result_type


class JsonSourceReader:
    """A stream's records (JSON values, a KAFKA STRING key or none) read into Arrow
    columns: the value columns, the key column, ROWTIME, ROWPARTITION, ROWOFFSET."""

    def __init__(self, plan: QueryPlan) -> None:
        source = plan.source
        if (
            plan.joins
            or plan.table_functions
            or source.kind != "STREAM"
            or source.is_windowed
            or source.timestamp_column is not None
            or any(c.namespace == "HEADER" for c in source.columns)
        ):
            raise Unsupported("the plan's shape")
        if source.value_format != "JSON":
            raise Unsupported("formats")
        if source.wrap_single_value is False and len(source.value_columns) == 1:
            raise Unsupported("an unwrapped value")
        _check_key(source.key_format, source.key_columns)
        self.key = source.key_columns[0].name if source.key_columns else None
        self.value_columns = [(c.name, _arrow_type(c.type)) for c in source.value_columns]
        self.available = {*_PSEUDO, *(name for name, _ in self.value_columns)}
        if self.key is not None:
            self.available.add(self.key)

    def read(self, batch: Any, null_rows: bool = False) -> Columns | None:
        """The batch's columns, or None when it must be read record at a time. A record
        whose value is null (a stream's null row) is left out, or with ``null_rows``
        kept with its value columns null and marked true in ``columns[NULL_ROW]``."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        names = batch.schema.names
        present = pc.is_valid(batch.column(names.index("value")))
        if not null_rows and batch.num_rows and not pc.all(present).as_py():
            batch = batch.filter(present)
            present = pc.is_valid(batch.column(names.index("value")))
        rows = batch.num_rows
        micros = batch.column(names.index("timestamp")).cast(pa.int64())
        micros = pc.fill_null(micros, 0)
        if rows and pc.min(micros).as_py() < 0:
            return None  # floor division of negative times: record at a time
        columns: Columns = {
            "ROWTIME": pc.divide(micros, 1000),
            "ROWPARTITION": batch.column(names.index("partition")).cast(pa.int32()),
            "ROWOFFSET": batch.column(names.index("offset")).cast(pa.int64()),
        }
        if self.key is not None:
            columns[self.key] = batch.column(names.index("key")).cast(pa.string())
        if null_rows:
            columns[NULL_ROW] = pc.invert(present)
        if not self.value_columns:
            return columns
        values = batch.column(names.index("value"))
        # a null row's value columns are null, as ``{}``'s
        values = pc.fill_null(values, pa.scalar(b"{}", pa.binary()))
        if rows and not (
            pc.all(pc.starts_with(values, "{")).as_py()
            and pc.all(pc.ends_with(values, "}")).as_py()
            and not pc.any(pc.match_substring(values, "\n")).as_py()
        ):
            return None  # each value one line holding one object, or record at a time
        if not rows:
            columns.update({name: pa.array([], kind) for name, kind in self.value_columns})
            return columns
        lines = pc.binary_join_element_wise(values, b"\n", b"")  # one line a value
        bounds = np.frombuffer(lines.buffers()[1], dtype=np.int32)
        start, end = int(bounds[lines.offset]), int(bounds[lines.offset + rows])
        text = lines.buffers()[2].slice(start, end - start)
        table = pj.read_json(
            pa.BufferReader(text),
            read_options=pj.ReadOptions(use_threads=False, block_size=end - start + 1),
        )
        if table.num_rows != rows:
            return None
        by_upper: dict[str, list[str]] = {}
        for name in table.column_names:
            by_upper.setdefault(name.upper(), []).append(name)
        for name, arrow_type in self.value_columns:
            found = by_upper.get(name.upper(), [])
            if len(found) > 1:
                return None  # an exact name and a case variant: record at a time
            if not found:
                columns[name] = pa.nulls(rows, arrow_type)
                continue
            read = _column(table.column(found[0]).combine_chunks(), arrow_type)
            if read is None:
                return None
            columns[name] = read
        return columns


class JsonSinkWriter:
    """A sink's records from its projection over Arrow columns: the KAFKA STRING key
    (or none) and the JSON value, as ``strom.ksql.formats`` writes them."""

    def __init__(self, plan: QueryPlan, expressions: ArrowExpressions) -> None:
        sink = plan.sink
        if sink is None or sink.timestamp_column is not None or sink.window_type == "SESSION":
            raise Unsupported("the sink's shape")
        if sink.value_format != "JSON":
            raise Unsupported("formats")
        if sink.wrap_single_value is False and len(sink.value_columns) == 1:
            raise Unsupported("an unwrapped value")
        _check_key(sink.key_format, sink.key_columns)
        by_name = {(p.namespace, p.name): p for p in plan.projection}
        self.key: Evaluator | None = None
        self.key_of_key = True  # whether the key reads the source's key alone
        if sink.key_columns:
            found = by_name.get(("KEY", sink.key_columns[0].name))
            if found is None:
                raise Unsupported("a key the projection does not give")
            self.key = expressions.typed(found.expression, "STRING")
            source_keys = {c.name for c in plan.source.key_columns}
            self.key_of_key = reads_only(found.expression, expressions.scope, source_keys)
        self.values: list[tuple[str, str, Evaluator]] = []
        for column in sink.value_columns:
            found = by_name.get(("VALUE", column.name))
            if found is None:
                raise Unsupported("a value the projection does not give")
            kind = v.base(column.type)
            self.values.append(
                (json.dumps(column.name), kind, expressions.typed(found.expression, kind))
            )
        self.topic = sink.topic

    def key_bytes(self, columns: Columns, rows: int) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.key is None:
            return pa.nulls(rows, pa.binary())
        return pc.cast(_full(self.key(columns), rows), pa.binary())

    def value_bytes(self, columns: Columns, rows: int) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if not rows:
            return pa.array([], pa.binary())
        pieces: list[Any] = []
        for index, (quoted_name, kind, evaluate) in enumerate(self.values):
            pieces.append(("{" if index == 0 else ",") + quoted_name + ":")
            pieces.append(_json_texts(_full(evaluate(columns), rows), kind))
        pieces.append("}" if self.values else "{}")
        text = pc.binary_join_element_wise(*pieces, "")
        if isinstance(text, pa.Scalar):
            text = pa.array([text.as_py()] * rows, pa.string())
        return pc.cast(text, pa.binary())

    def batch(self, keys: Any, values: Any, timestamps: Any) -> Any:
        """The output batch (topic, key, value, timestamp)."""
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [pa.array([self.topic] * len(values), pa.string()), keys, values, timestamps],
            names=["topic", "key", "value", "timestamp"],
        )


class ArrowStateless:
    """A compiled filter and projection over Arrow batches of the ``strom`` source."""

    def __init__(self, plan: QueryPlan) -> None:
        if plan.aggregation is not None or plan.sink is None or plan.sink.is_windowed:
            raise Unsupported("the plan's shape")
        self.reader = JsonSourceReader(plan)
        expressions = ArrowExpressions(plan.source_scope(), self.reader.available)
        self.where = expressions.compile(plan.where)[0] if plan.where is not None else None
        self.writer = JsonSinkWriter(plan, expressions)

    def run(self, batch: Any) -> Any:
        """The output batch (topic, key, value, timestamp) of a source batch, or None
        when the batch must be run record at a time."""

        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            # a stream's null row: dropped by WHERE, else passed on as a null value
            columns = self.reader.read(batch, null_rows=self.where is None)
            if columns is None:
                return None
            null_rows = columns.pop(NULL_ROW, None)
            columns = _filtered(columns, self.where)
            rows = len(columns["ROWTIME"])
            keys = self.writer.key_bytes(columns, rows)
            values = self.writer.value_bytes(columns, rows)
            if null_rows is not None and rows and pc.any(null_rows).as_py():
                values = pc.if_else(null_rows, pa.scalar(None, pa.binary()), values)
                if not self.writer.key_of_key:  # a key of the value's columns: null
                    keys = pc.if_else(null_rows, pa.scalar(None, pa.binary()), keys)
            return self.writer.batch(keys, values, columns["ROWTIME"])
        except Exception:  # noqa: BLE001 - whatever it cannot do, the record path does
            return None


def _filtered(columns: Columns, where: Evaluator | None) -> Columns:
    """The rows whose WHERE is true."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(columns["ROWTIME"])
    if where is None or not rows:
        return columns
    passed = where(columns)
    if isinstance(passed, pa.Scalar):
        passed = pa.array([passed.as_py()] * rows, pa.bool_())
    selected = pc.fill_null(passed, False)
    return {name: pc.filter(array, selected) for name, array in columns.items()}


def _check_key(key_format: str, keys: tuple[Any, ...]) -> None:
    if keys and (key_format != "KAFKA" or len(keys) != 1 or v.base(keys[0].type) != "STRING"):
        raise Unsupported("key format")


def _exact_double(node: ex.Comparison, kinds: tuple[str, str]) -> bool:
    """A DOUBLE compared with DOUBLE, or with an integer literal a double holds exactly
    (as Python compares an int with a float)."""
    if kinds == ("DOUBLE", "DOUBLE"):
        return True
    other = node.right if kinds[0] == "DOUBLE" else node.left
    return (
        isinstance(other, ex.Literal)
        and isinstance(other.value, int)
        and not isinstance(other.value, bool)
        and abs(other.value) <= 2**53
    )


def _cast(evaluate: Evaluator, target: Any) -> Evaluator:
    import pyarrow.compute as pc

    def cast(columns: Columns) -> Any:
        value = evaluate(columns)
        return value if value.type == target else pc.cast(value, target, safe=False)

    return cast


def _full(value: Any, rows: int) -> Any:
    """An evaluated expression as an array of ``rows`` (a literal is a scalar)."""
    import pyarrow as pa

    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()] * rows, value.type)
    return value


def _column(column: Any, arrow_type: Any) -> Any:
    """A JSON field's parsed values as their column's type, or None when they are not
    what ksqlDB's JSON reading would give alike (then the batch goes record at a time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = column.type
    if pa.types.is_null(found):
        return pa.nulls(len(column), arrow_type)
    if arrow_type == pa.string():
        if not pa.types.is_string(found):
            return None
        column.validate(full=True)  # invalid UTF-8: ArrowInvalid, record at a time
        return column
    if arrow_type == pa.bool_():
        return column if pa.types.is_boolean(found) else None
    if arrow_type == pa.float64():
        if pa.types.is_floating(found) or pa.types.is_integer(found):
            return pc.cast(column, pa.float64())
        return None
    if not pa.types.is_integer(found):
        return None
    if arrow_type == pa.int32():
        return pc.cast(column, pa.int32())  # out of the range: ArrowInvalid, record at a time
    return pc.cast(column, pa.int64())


def _json_texts(array: Any, kind: str) -> Any:
    """Each value as ``strom.ksql.formats`` writes it in JSON (null as ``null``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "STRING":
        plain = pc.match_substring_regex(array, _PLAIN_TEXT)
        if pc.all(pc.fill_null(plain, True)).as_py():
            texts = pc.binary_join_element_wise('"', array, '"', "")
        else:
            texts = pa.array(
                [None if s is None else json.dumps(s) for s in array.to_pylist()], pa.string()
            )
    elif kind == "DOUBLE":  # Python's float text, as json.dumps writes it
        text = formats._json_text
        finite = math.isfinite
        texts = pa.array(
            [
                None if d is None else float.__repr__(d) if finite(d) else text(d)
                for d in array.to_pylist()
            ],
            pa.string(),
        )  # a finite float's json.dumps is its repr, at a tenth of the cost
    else:  # integers in decimal; booleans as true / false
        texts = pc.cast(array, pa.string())
    return pc.fill_null(texts, "null")
