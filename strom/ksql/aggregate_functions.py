"""ksqlDB's aggregate functions in Python: what GROUP BY queries compute per group.

Owns ``aggregate_function(name, argument_types, literal_arguments)`` ->
``AggregateFunction`` (``result_type``, ``initial``, ``add``, ``undo`` with
``can_undo``, ``merge``, ``result``) for COUNT (``COUNT(*)`` and ``COUNT(col)``, which
skips nulls), COUNT_DISTINCT, SUM, SUM_LIST (the sum of lists' elements), AVG, MIN, MAX,
COLLECT_LIST, COLLECT_SET, EARLIEST_BY_OFFSET and LATEST_BY_OFFSET (with ignoreNulls and
the n forms), TOPK, TOPKDISTINCT, HISTOGRAM, STDDEV_SAMP (which is the variance in
ksqlDB), STDDEV_SAMPLE, CORRELATION and ATTR (the group's one value, null when it has
had several), with ksqlDB's result types and null behaviour. Accumulators are plain
picklable values (ints, floats, tuples, lists, dicts): the runtime keeps them in Spark's
state store. ``add``
receives the aggregated columns' values only (the literal arguments, such as TOPK's k, were given
when the function was made); rows arrive in offset order, which is what the BY_OFFSET
functions rely on, and ``merge(a, b)`` takes ``a`` as the earlier session.

Differences from ksqlDB: COUNT_DISTINCT counts exactly (ksqlDB estimates with a
HyperLogLog: equal for small counts); COLLECT_LIST and COLLECT_SET keep at most
``collect_limit`` elements (ksqlDB's ``ksql.functions.collect_list.limit`` and
``ksql.functions.collect_set.limit``, no limit by default): the first ones added.

Does not own grouping, windows or state (the runtime's) or scalar functions.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import values as v
from strom.ksql.function_types import declared_name
from strom.ksql.metastore import KsqlStatementError

AGGREGATE_NAMES = frozenset(
    {
        "COUNT",
        "COUNT_DISTINCT",
        "SUM",
        "SUM_LIST",
        "AVG",
        "MIN",
        "MAX",
        "COLLECT_LIST",
        "COLLECT_SET",
        "EARLIEST_BY_OFFSET",
        "LATEST_BY_OFFSET",
        "TOPK",
        "TOPKDISTINCT",
        "HISTOGRAM",
        "STDDEV_SAMP",
        "STDDEV_SAMPLE",
        "CORRELATION",
        "ATTR",
    }
)
HISTOGRAM_LIMIT = 1000


def is_aggregate(name: str) -> bool:
    return name.upper() in AGGREGATE_NAMES


class AggregateFunction:
    """One aggregation's behaviour. Subclasses set ``result_type`` and override what
    differs; ``can_undo`` False means the runtime refuses it over a table."""

    name: str = ""
    result_type: ex.SqlType
    can_undo: bool = False

    def initial(self) -> Any:
        raise NotImplementedError

    def add(self, accumulator: Any, *values: Any) -> Any:
        raise NotImplementedError

    def undo(self, accumulator: Any, *values: Any) -> Any:
        raise NotImplementedError(f"{self.name} cannot undo")

    def merge(self, first: Any, second: Any) -> Any:
        raise NotImplementedError(f"{self.name} cannot merge")

    def result(self, accumulator: Any) -> Any:
        return accumulator


def _refuse(name: str, argument_types: list[ex.SqlType | None]) -> KsqlStatementError:
    given = ", ".join("null" if t is None else str(t) for t in argument_types)
    return KsqlStatementError(
        f"Function '{declared_name(name)}' does not accept parameters ({given})."
    )


# ---- counting -------------------------------------------------------------------------


class _Count(AggregateFunction):
    name = "COUNT"
    result_type = v.BIGINT
    can_undo = True

    def __init__(self, star: bool) -> None:
        self.star = star

    def initial(self) -> int:
        return 0

    def add(self, accumulator: int, *values: Any) -> int:
        if self.star or not values or values[0] is not None:
            return accumulator + 1
        return accumulator

    def undo(self, accumulator: int, *values: Any) -> int:
        if self.star or not values or values[0] is not None:
            return accumulator - 1
        return accumulator

    def merge(self, first: int, second: int) -> int:
        return first + second


class _CountDistinct(AggregateFunction):
    name = "COUNT_DISTINCT"
    result_type = v.BIGINT

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: list[Any], *values: Any) -> list[Any]:
        value = _hashable(values[0])
        if value is not None and value not in accumulator:
            return [*accumulator, value]
        return accumulator

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        return first + [x for x in second if x not in first]

    def result(self, accumulator: list[Any]) -> int:
        return len(accumulator)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(x) for x in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(x)) for k, x in value.items())
    return value


# ---- sums and averages ----------------------------------------------------------------


class _Sum(AggregateFunction):
    name = "SUM"
    can_undo = True

    def __init__(self, sql_type: ex.SqlType) -> None:
        self.result_type = sql_type
        kind = v.base(sql_type)
        self.kind = kind

    def initial(self) -> Any:
        if self.kind == "DOUBLE":
            return 0.0
        if self.kind == "DECIMAL":
            return decimal.Decimal(0)
        return 0

    def _fit(self, total: Any) -> Any:
        if self.kind == "INTEGER":
            return v.wrap32(total)
        if self.kind == "BIGINT":
            return v.wrap64(total)
        if self.kind == "DECIMAL":
            assert isinstance(self.result_type, ex.DecimalType)
            return v.fit_decimal(total, self.result_type)
        return total

    def add(self, accumulator: Any, *values: Any) -> Any:
        value = values[0]
        if value is None:
            return accumulator
        if self.kind == "DECIMAL":
            return self._fit(self._decimal_total(accumulator, value))
        return self._fit(accumulator + value)

    def _decimal_total(self, accumulator: decimal.Decimal, value: Any) -> decimal.Decimal:
        """ksqlDB's DecimalSumKudaf: the sum rounded to the type's precision (HALF_UP);
        one whose whole digits overflow fails the query (a KsqlFunctionException in
        its aggregation, which ksqlDB does not catch)."""
        target = self.result_type
        assert isinstance(target, ex.DecimalType)
        context = decimal.Context(prec=max(target.precision, 1), rounding=decimal.ROUND_HALF_UP)
        total = context.add(accumulator, value)
        digits = target.precision - target.scale
        if abs(total) >= decimal.Decimal(10) ** digits:
            raise v.ProcessingFailure(
                f"Numeric field overflow: A field with precision {target.precision} and scale "
                f"{target.scale} must round to an absolute value less than 10^{digits}. Got "
                f"{v.decimal_text(total)}"
            )
        return total

    def undo(self, accumulator: Any, *values: Any) -> Any:
        value = values[0]
        if value is None:
            return accumulator
        return self._fit(accumulator - value)

    def merge(self, first: Any, second: Any) -> Any:
        return self._fit(first + second)


class _SumList(_Sum):
    """SUM_LIST: the sum of the elements of every list (null lists and elements
    skipped), as ksqlDB's ListSumUdaf; a table's old list is taken back out."""

    name = "SUM_LIST"

    def add(self, accumulator: Any, *values: Any) -> Any:
        elements = values[0]
        if elements is None:
            return accumulator
        return self._fit(accumulator + sum(e for e in elements if e is not None))

    def undo(self, accumulator: Any, *values: Any) -> Any:
        elements = values[0]
        if elements is None:
            return accumulator
        return self._fit(accumulator - sum(e for e in elements if e is not None))


class _Average(AggregateFunction):
    """Accumulator: (sum, count)."""

    name = "AVG"
    result_type = v.DOUBLE
    can_undo = True

    def __init__(self, sql_type: ex.SqlType) -> None:
        self.kind = v.base(sql_type)

    def initial(self) -> tuple[Any, int]:
        return (0.0 if self.kind == "DOUBLE" else 0, 0)

    def _wrap(self, total: Any) -> Any:
        if self.kind == "INTEGER":
            return v.wrap32(total)
        if self.kind == "BIGINT":
            return v.wrap64(total)
        return total

    def add(self, accumulator: tuple[Any, int], *values: Any) -> tuple[Any, int]:
        value = values[0]
        if value is None:
            return accumulator
        return (self._wrap(accumulator[0] + value), accumulator[1] + 1)

    def undo(self, accumulator: tuple[Any, int], *values: Any) -> tuple[Any, int]:
        value = values[0]
        if value is None:
            return accumulator
        return (self._wrap(accumulator[0] - value), accumulator[1] - 1)

    def merge(self, first: tuple[Any, int], second: tuple[Any, int]) -> tuple[Any, int]:
        return (self._wrap(first[0] + second[0]), first[1] + second[1])

    def result(self, accumulator: tuple[Any, int]) -> float:
        total, count = accumulator
        if count == 0:
            return 0.0
        return float(total) / count


class _StddevSample(AggregateFunction):
    """Accumulator: (count, sum, sum of squares), as floats but the count.

    ksqlDB's STDDEV_SAMP answers the sample variance (no square root: its
    query-validation tests expect 50.0 for 0 and 10), STDDEV_SAMPLE the standard
    deviation; both are kept as they are."""

    result_type = v.DOUBLE
    can_undo = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.square_root = name == "STDDEV_SAMPLE"

    def initial(self) -> tuple[int, float, float]:
        return (0, 0.0, 0.0)

    def add(self, accumulator: tuple[int, float, float], *values: Any) -> tuple[int, float, float]:
        if values[0] is None:
            return accumulator
        x = float(values[0])
        return (accumulator[0] + 1, accumulator[1] + x, accumulator[2] + x * x)

    def undo(self, accumulator: tuple[int, float, float], *values: Any) -> tuple[int, float, float]:
        if values[0] is None:
            return accumulator
        x = float(values[0])
        return (accumulator[0] - 1, accumulator[1] - x, accumulator[2] - x * x)

    def merge(
        self, first: tuple[int, float, float], second: tuple[int, float, float]
    ) -> tuple[int, float, float]:
        return (first[0] + second[0], first[1] + second[1], first[2] + second[2])

    def result(self, accumulator: tuple[int, float, float]) -> float:
        count, total, squares = accumulator
        if count < 2:
            return 0.0
        variance = max((squares - total * total / count) / (count - 1), 0.0)
        return math.sqrt(variance) if self.square_root else variance


class _Correlation(AggregateFunction):
    """Accumulator: (count, sum x, sum y, sum x², sum y², sum xy)."""

    name = "CORRELATION"
    result_type = v.DOUBLE
    can_undo = True

    def initial(self) -> tuple[int, float, float, float, float, float]:
        return (0, 0.0, 0.0, 0.0, 0.0, 0.0)

    def _step(self, accumulator: tuple[Any, ...], values: tuple[Any, ...], sign: int) -> Any:
        if len(values) < 2 or values[0] is None or values[1] is None:
            return accumulator
        x, y = float(values[0]), float(values[1])
        n, sx, sy, sxx, syy, sxy = accumulator
        return (n + sign, sx + sign * x, sy + sign * y, sxx + sign * x * x,
                syy + sign * y * y, sxy + sign * x * y)  # fmt: skip

    def add(self, accumulator: Any, *values: Any) -> Any:
        return self._step(accumulator, values, 1)

    def undo(self, accumulator: Any, *values: Any) -> Any:
        return self._step(accumulator, values, -1)

    def merge(self, first: Any, second: Any) -> Any:
        return tuple(a + b for a, b in zip(first, second, strict=True))

    def result(self, accumulator: Any) -> float:
        n, sx, sy, sxx, syy, sxy = accumulator
        numerator = n * sxy - sx * sy
        denominator = math.sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))
        return v.java_double_divide(numerator, denominator)


# ---- extremes -------------------------------------------------------------------------


def _order_key(value: Any) -> Any:
    if isinstance(value, bytes):
        return bytes(b ^ 0x80 for b in value)  # Java compares bytes signed
    return value


class _Extreme(AggregateFunction):
    can_undo = False

    def __init__(self, name: str, sql_type: ex.SqlType) -> None:
        self.name = name
        self.result_type = sql_type
        self.largest = name == "MAX"

    def initial(self) -> Any:
        return None

    def add(self, accumulator: Any, *values: Any) -> Any:
        value = values[0]
        if value is None:
            return accumulator
        if accumulator is None:
            return value
        if self.largest:
            return value if _order_key(value) > _order_key(accumulator) else accumulator
        return value if _order_key(value) < _order_key(accumulator) else accumulator

    def merge(self, first: Any, second: Any) -> Any:
        return self.add(first, second)


# ---- collections ----------------------------------------------------------------------


class _CollectList(AggregateFunction):
    name = "COLLECT_LIST"
    can_undo = True

    def __init__(self, sql_type: ex.SqlType, limit: int | None = None) -> None:
        self.result_type = ex.ArrayType(sql_type)
        self.limit = limit

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: list[Any], *values: Any) -> list[Any]:
        if self.limit is not None and len(accumulator) >= self.limit:
            return accumulator
        return [*accumulator, values[0]]

    def undo(self, accumulator: list[Any], *values: Any) -> list[Any]:
        for index in range(len(accumulator) - 1, -1, -1):
            if accumulator[index] == values[0]:
                return accumulator[:index] + accumulator[index + 1 :]
        return accumulator

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        if self.limit is not None:
            return first + second[: max(0, self.limit - len(first))]
        return first + second


class _Attr(AggregateFunction):
    """Accumulator: [value, count] pairs, one per distinct value (null included) in the
    order first seen; the result is the value when exactly one has a count above 0."""

    name = "ATTR"
    can_undo = True

    def __init__(self, sql_type: ex.SqlType) -> None:
        self.result_type = sql_type

    def initial(self) -> list[list[Any]]:
        return []

    @staticmethod
    def _counted(accumulator: list[list[Any]], value: Any, count: int) -> list[list[Any]]:
        pairs = [list(pair) for pair in accumulator]
        for pair in pairs:
            if pair[0] == value:
                pair[1] = max(0, pair[1] + count)
                return pairs
        if count > 0:
            pairs.append([value, count])
        return pairs

    def add(self, accumulator: list[list[Any]], *values: Any) -> list[list[Any]]:
        return self._counted(accumulator, values[0], 1)

    def undo(self, accumulator: list[list[Any]], *values: Any) -> list[list[Any]]:
        return self._counted(accumulator, values[0], -1)

    def merge(self, first: list[list[Any]], second: list[list[Any]]) -> list[list[Any]]:
        merged = first
        for value, count in second:
            merged = self._counted(merged, value, count)
        return merged

    def result(self, accumulator: list[list[Any]]) -> Any:
        present = [value for value, count in accumulator if count > 0]
        return present[0] if len(present) == 1 else None


class _CollectSet(AggregateFunction):
    name = "COLLECT_SET"

    def __init__(self, sql_type: ex.SqlType, limit: int | None = None) -> None:
        self.result_type = ex.ArrayType(sql_type)
        self.limit = limit

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: list[Any], *values: Any) -> list[Any]:
        if values[0] in accumulator:
            return accumulator
        if self.limit is not None and len(accumulator) >= self.limit:
            return accumulator
        return [*accumulator, values[0]]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        merged = list(first)
        for value in second:
            merged = self.add(merged, value)
        return merged


class _Histogram(AggregateFunction):
    name = "HISTOGRAM"
    result_type = ex.MapType(v.STRING, v.BIGINT)
    can_undo = True

    def initial(self) -> dict[str, int]:
        return {}

    def add(self, accumulator: dict[str, int], *values: Any) -> dict[str, int]:
        value = values[0]
        if value is None:
            return accumulator
        if len(accumulator) >= HISTOGRAM_LIMIT and value not in accumulator:
            return accumulator
        counts = dict(accumulator)
        counts[value] = counts.get(value, 0) + 1
        return counts

    def undo(self, accumulator: dict[str, int], *values: Any) -> dict[str, int]:
        value = values[0]
        if value is None or value not in accumulator:
            return accumulator
        counts = dict(accumulator)
        counts[value] -= 1
        if counts[value] < 1:
            del counts[value]
        return counts

    def merge(self, first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
        counts = dict(first)
        for key, count in second.items():
            if len(counts) < HISTOGRAM_LIMIT or key in counts:
                counts[key] = counts.get(key, 0) + count
        return counts


class _TopK(AggregateFunction):
    """Accumulator: the k largest values so far, largest first."""

    def __init__(self, name: str, sql_type: ex.SqlType, k: int, distinct: bool) -> None:
        self.name = name
        self.result_type = ex.ArrayType(sql_type)
        self.k = k
        self.distinct = distinct

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: list[Any], *values: Any) -> list[Any]:
        value = values[0]
        if value is None or (self.distinct and value in accumulator):
            return accumulator
        return sorted([*accumulator, value], key=_order_key, reverse=True)[: self.k]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        merged = first + [x for x in second if not (self.distinct and x in first)]
        return sorted(merged, key=_order_key, reverse=True)[: self.k]


class _TopKRows(AggregateFunction):
    """TOPK(col, other..., k): the k records with the largest col, as ksqlDB's TopkKudaf
    keeps them: structs of ``sort_col`` and the other columns ``col0``, ``col1``...,
    largest first, a later record after an equal one (and not kept when the list is
    full and it is no larger than the last)."""

    name = "TOPK"

    def __init__(self, sql_type: ex.SqlType, others: list[ex.SqlType], k: int) -> None:
        self.fields = ["sort_col", *(f"col{i}" for i in range(len(others)))]
        self.result_type = ex.ArrayType(
            ex.StructType(
                tuple(
                    ex.StructField(name, field_type)
                    for name, field_type in zip(self.fields, [sql_type, *others], strict=True)
                )
            )
        )
        self.k = k

    def initial(self) -> list[Any]:
        return []

    def add(self, accumulator: list[Any], *values: Any) -> list[Any]:
        if values[0] is None:
            return accumulator
        row = dict(zip(self.fields, values, strict=True))
        ordered = sorted([*accumulator, row], key=lambda r: _order_key(r["sort_col"]), reverse=True)
        return ordered[: self.k]

    def merge(self, first: list[Any], second: list[Any]) -> list[Any]:
        merged = sorted(first + second, key=lambda r: _order_key(r["sort_col"]), reverse=True)
        return merged[: self.k]


# ---- by offset ------------------------------------------------------------------------


class _ByOffset(AggregateFunction):
    """EARLIEST_BY_OFFSET / LATEST_BY_OFFSET. Accumulator of the single form: a
    (found, value) pair; of the n form: the list of kept values."""

    def __init__(
        self, name: str, sql_type: ex.SqlType, ignore_nulls: bool, count: int | None
    ) -> None:
        self.name = name
        self.latest = name == "LATEST_BY_OFFSET"
        self.ignore_nulls = ignore_nulls
        self.count = count
        self.result_type = ex.ArrayType(sql_type) if count is not None else sql_type

    def initial(self) -> Any:
        return [] if self.count is not None else (False, None)

    def add(self, accumulator: Any, *values: Any) -> Any:
        value = values[0]
        if value is None and self.ignore_nulls:
            return accumulator
        if self.count is not None:
            if self.latest:
                return [*accumulator, value][-self.count :]
            return accumulator if len(accumulator) >= self.count else [*accumulator, value]
        if self.latest or not accumulator[0]:
            return (True, value)
        return accumulator

    def merge(self, first: Any, second: Any) -> Any:
        if self.count is not None:
            both = first + second
            return both[-self.count :] if self.latest else both[: self.count]
        if self.latest:
            return second if second[0] else first
        return first if first[0] else second

    def result(self, accumulator: Any) -> Any:
        if self.count is not None:
            return list(accumulator)
        return accumulator[1]


# ---- the factory ----------------------------------------------------------------------

_COMPARABLE = ("INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "STRING", "BYTES", "DATE", "TIME",
               "TIMESTAMP")  # fmt: skip
_SUMMABLE = ("INTEGER", "BIGINT", "DOUBLE", "DECIMAL")


def aggregate_function(
    name: str,
    argument_types: list[ex.SqlType | None],
    literal_arguments: list[Any],
    collect_limit: int | None = None,
) -> AggregateFunction | None:
    """The aggregate ``name`` over columns of ``argument_types`` (for COUNT(*): none),
    with ``literal_arguments`` the literal values after the first (TOPK's k,
    ignoreNulls, n) and ``collect_limit`` the most elements COLLECT_LIST / COLLECT_SET
    keep (None: no limit); None when ``name`` is no aggregate; ksqlDB's refusal when the
    types do not fit."""
    name = name.upper()
    if name not in AGGREGATE_NAMES:
        return None
    first = argument_types[0] if argument_types else None
    kind = v.base(first)
    if name == "COUNT":
        return _Count(star=not argument_types)
    if not argument_types:
        raise _refuse(name, argument_types)
    if first is None:
        raise KsqlStatementError(
            f"Can't infer a type of null for {name}. Please explicitly cast it to a required "
            "type, e.g. CAST(null AS VARCHAR)."
        )
    if name == "COUNT_DISTINCT":
        return _CountDistinct()
    if name == "SUM":
        if kind not in _SUMMABLE:
            raise _refuse(name, argument_types)
        return _Sum(first)
    if name == "SUM_LIST":
        element = first.element if isinstance(first, ex.ArrayType) else None
        if element is None or v.base(element) not in ("INTEGER", "BIGINT", "DOUBLE"):
            raise _refuse(name, argument_types)
        return _SumList(element)
    if name == "AVG":
        if kind not in ("INTEGER", "BIGINT", "DOUBLE"):
            raise _refuse(name, argument_types)
        return _Average(first)
    if name in ("STDDEV_SAMP", "STDDEV_SAMPLE"):
        if kind not in ("INTEGER", "BIGINT", "DOUBLE"):
            raise _refuse(name, argument_types)
        return _StddevSample(name)
    if name == "CORRELATION":
        if len(argument_types) != 2 or any(
            v.base(t) not in ("INTEGER", "BIGINT", "DOUBLE") for t in argument_types
        ):
            raise _refuse(name, argument_types)
        return _Correlation()
    if name in ("MIN", "MAX"):
        if kind not in _COMPARABLE:
            raise _refuse(name, argument_types)
        return _Extreme(name, first)
    if name == "COLLECT_LIST":
        return _CollectList(first, collect_limit)
    if name == "ATTR":
        return _Attr(first)
    if name == "COLLECT_SET":
        return _CollectSet(first, collect_limit)
    if name == "HISTOGRAM":
        if kind != "STRING":
            raise _refuse(name, argument_types)
        return _Histogram()
    if name in ("TOPK", "TOPKDISTINCT"):
        if kind not in _COMPARABLE or len(literal_arguments) != 1:
            raise _refuse(name, argument_types)
        k = literal_arguments[0]
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise KsqlStatementError(f"{name}: k must be a positive INTEGER literal, got {k!r}")
        if name == "TOPK" and len(argument_types) > 1:  # with other columns: structs
            others = argument_types[1:]
            if any(t is None for t in others):
                raise _refuse(name, argument_types)
            return _TopKRows(first, [t for t in others if t is not None], k)
        return _TopK(name, first, k, distinct=name == "TOPKDISTINCT")
    return _by_offset(name, first, argument_types, literal_arguments)


def _by_offset(
    name: str,
    sql_type: ex.SqlType,
    argument_types: list[ex.SqlType | None],
    literal_arguments: list[Any],
) -> AggregateFunction:
    ignore_nulls, count = True, None
    for literal in literal_arguments:
        if isinstance(literal, bool):
            ignore_nulls = literal
        elif isinstance(literal, int):
            count = literal
        else:
            raise _refuse(name, argument_types)
    if count is not None and count < 1:
        which = "latestN" if name == "LATEST_BY_OFFSET" else "earliestN"
        raise KsqlStatementError(f"{which} must be 1 or greater")
    return _ByOffset(name, sql_type, ignore_nulls, count)


@dataclass(frozen=True)
class AggregateCall:
    """An aggregate call's parts as the runtime finds them in a query: the function
    name, the column expressions it aggregates and the literal arguments after them."""

    name: str
    columns: tuple[ex.Expression, ...]
    literals: tuple[Any, ...]


def split_aggregate_call(call: ex.FunctionCall) -> AggregateCall:
    """``TOPK(x, 3)`` -> columns (x,), literals (3,); ``COUNT(*)`` -> no columns.
    CORRELATION aggregates two columns; the others one, then literals."""
    name = call.name.upper()
    if call.star or not call.arguments:
        return AggregateCall(name, (), ())
    column_count = 2 if name == "CORRELATION" else 1
    columns = call.arguments[:column_count]
    literals: list[Any] = []
    for argument in call.arguments[column_count:]:
        if not isinstance(argument, ex.Literal):
            raise KsqlStatementError(
                f"Parameter {len(literals) + column_count + 1} passed to function {name} must"
                " be a literal constant."
            )
        literals.append(argument.value)
    return AggregateCall(name, tuple(columns), tuple(literals))
