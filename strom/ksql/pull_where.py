"""A pull query's WHERE clause checked as ksqlDB checks it when table scans are disabled
(``ksql.query.pull.table.scan.enabled=false``): ksqlDB's QueryFilterNode validation and
its physical plan's choice of a key lookup, a range scan or a table scan.

The clause is taken apart as ksqlDB rewrites it: BETWEEN as two bounds, IN as equalities
joined by OR, then in disjunctive normal form. Each disjunct must compare every key
column once, with ``=`` (or, for a single STRING or BYTES key, a range bound), to an
expression without columns; anything else is refused with ksqlDB's message, and a query
that would still need a table scan with ``Query requires table scan to be enabled``.
Strom itself answers any pull query by a lookup or a scan (``push_queries``); this only
refuses what ksqlDB refuses. Whatever the setting, a key lookup's values are resolved as
ksqlDB resolves them: null, or a literal of another type than the key's, is refused.
"""

from __future__ import annotations

import decimal

from strom.ksql import expressions as ex
from strom.ksql.evaluation import expression_text
from strom.ksql.metastore import DataSource, KsqlStatementError
from strom.ksql.planner import walk

TABLE_SCAN_REQUIRED = (
    "Query requires table scan to be enabled. Table scans can be enabled by setting "
    "ksql.query.pull.table.scan.enabled=true"
)
WINDOW_BOUNDS = ("WINDOWSTART", "WINDOWEND")
RANGE_OPERATORS = ("<", "<=", ">", ">=")
PULL_HELP = (
    " See https://cnfl.io/queries for more info.\n"
    "Add EMIT CHANGES if you intended to issue a push query."
)


def _invalid(message: str, windowed: bool) -> KsqlStatementError:
    """ksqlDB's ``invalidWhereClauseException``: the message and its help."""
    additional = (
        "\n - (optionally) limits the time bounds of the windowed table."
        "\n\t Bounds on [`WINDOWSTART`, `WINDOWEND`] are supported"
        "\n\t Supported operators are [EQUAL, GREATER_THAN, GREATER_THAN_OR_EQUAL, LESS_THAN, "
        "LESS_THAN_OR_EQUAL]"
        if windowed
        else ""
    )
    return KsqlStatementError(
        message + ". " + PULL_HELP + "\nPull queries require a WHERE clause that:"
        "\n - includes a key equality expression, e.g. `SELECT * FROM X WHERE <key-column> = Y;`."
        "\n - in the case of a multi-column key, is a conjunction of equality expressions that "
        "cover all key columns."
        "\n - to support range expressions, e.g.,  SELECT * FROM X WHERE <key-column> < Y;`, "
        "range scans need to be enabled by setting ksql.query.pull.range.scan.enabled=true"
        + additional
        + "\nIf more flexible queries are needed, , table scans can be enabled by setting "
        "ksql.query.pull.table.scan.enabled=true."
    )


def disjuncts(expression: ex.Expression) -> list[list[ex.Expression]]:
    """The clause in disjunctive normal form: its disjuncts, each a list of conditions
    (BETWEEN two bounds, IN equalities)."""
    if isinstance(expression, ex.Between) and not expression.negated:
        low = ex.Comparison(">=", expression.operand, expression.low)
        return [[low, ex.Comparison("<=", expression.operand, expression.high)]]
    if isinstance(expression, ex.InList) and not expression.negated and expression.items:
        return [[ex.Comparison("=", expression.operand, item)] for item in expression.items]
    if isinstance(expression, ex.Logical) and expression.operator == "OR":
        return disjuncts(expression.left) + disjuncts(expression.right)
    if isinstance(expression, ex.Logical) and expression.operator == "AND":
        return [a + b for a in disjuncts(expression.left) for b in disjuncts(expression.right)]
    return [[expression]]


def _text(conditions: list[ex.Expression]) -> str:
    joined = conditions[0]
    for condition in conditions[1:]:
        joined = ex.Logical("AND", joined, condition)
    return expression_text(joined)


def _key_list(source: DataSource) -> str:
    return "[" + ", ".join(f"`{c.name}` {c.type} KEY" for c in source.key_columns) + "]"


def check_without_table_scan(
    where: ex.Expression | None, source: DataSource, range_scans: bool = True
) -> None:
    """Refuses (``KsqlStatementError``, ksqlDB's message) a pull query on ``source``
    with this WHERE clause when table scans are disabled."""
    if where is None:
        raise KsqlStatementError(TABLE_SCAN_REQUIRED)
    windowed = source.window_type is not None
    keys = {c.name: c for c in source.key_columns}
    # each disjunct's operator per key column
    constraints: list[dict[str, str]] = []
    for conditions in disjuncts(where):
        operators: dict[str, str] = {}
        for condition in conditions:
            if isinstance(condition, ex.Like):
                if not isinstance(condition.operand, ex.ColumnReference):
                    raise _invalid("Like condition must be between strings", windowed)
                continue
            if not isinstance(condition, ex.Comparison):
                text = expression_text(condition)
                raise _invalid(f"Unsupported expression in WHERE clause: {text}", False)
            if isinstance(condition.right, ex.ColumnReference):
                column, other = condition.right, condition.left
            elif isinstance(condition.left, ex.ColumnReference):
                column, other = condition.left, condition.right
            else:
                raise _invalid("A comparison must directly reference a key column", windowed)
            if any(isinstance(part, ex.ColumnReference) for part in walk(other)):
                raise _invalid(
                    "A comparison must be between a key column and a resolvable expression",
                    windowed,
                )
            if column.name in WINDOW_BOUNDS or column.name not in keys:
                continue
            if condition.operator == "<>":
                raise _invalid(
                    f"Bound on key columns '{_key_list(source)}' must currently be '='",
                    windowed,
                )
            if column.name in operators:
                raise _invalid(
                    "A comparison condition on the key column cannot be combined with other "
                    "comparisons such as an IN predicate",
                    windowed,
                )
            operators[column.name] = condition.operator
        if not operators:
            raise _invalid(
                f"WHERE clause missing key column for disjunct: {_text(conditions)}", windowed
            )
        if len(operators) != len(keys):
            seen = ", ".join(f"`{name}`" for name in keys if name in operators)
            raise _invalid(
                "Multi-column sources must specify every key in the WHERE clause. "
                f"Specified: [{seen}] Expected: {_key_list(source)}",
                windowed,
            )
        constraints.append(operators)
    if all(set(ops.values()) == {"="} for ops in constraints):
        return  # a key lookup
    ranged = (
        len(constraints) == 1
        and len(keys) == 1
        and next(iter(constraints[0].values())) in RANGE_OPERATORS
        and str(next(iter(keys.values())).type) in ("STRING", "BYTES")
    )
    if ranged and range_scans and not windowed:
        return  # a range scan
    raise KsqlStatementError(TABLE_SCAN_REQUIRED)


# the key types a literal's Python value may be read as without conversion (ksqlDB's
# strict coercion: numbers widen, nothing else converts)
_STRICT = {
    "STRING": (str,),
    "INTEGER": (int,),
    "BIGINT": (int,),
    "DOUBLE": (int, float, decimal.Decimal),
    "BOOLEAN": (bool,),
}


def check_key_values(where: ex.Expression | None, source: DataSource) -> None:
    """Refuses (``KsqlStatementError``, ksqlDB's message) a key lookup's value that is
    null or a literal of another type than the key column's: ksqlDB resolves the key
    values when every disjunct of the WHERE clause binds every key column with ``=``
    (a lookup, whatever the table scan setting)."""
    if where is None:
        return
    keys = {c.name: c for c in source.key_columns}
    lookups: list[tuple[ex.Comparison, ex.Expression, str]] = []
    for conditions in disjuncts(where):
        bound: set[str] = set()
        for condition in conditions:
            if not isinstance(condition, ex.Comparison):
                if isinstance(condition, ex.Like):
                    continue
                return  # not a lookup
            if isinstance(condition.right, ex.ColumnReference):
                column, other = condition.right, condition.left
            elif isinstance(condition.left, ex.ColumnReference):
                column, other = condition.left, condition.right
            else:
                return
            if any(isinstance(part, ex.ColumnReference) for part in walk(other)):
                return
            if column.name in keys:
                if condition.operator != "=" or column.name in bound:
                    return
                bound.add(column.name)
                lookups.append((condition, other, column.name))
        if len(bound) != len(keys):
            return
    for condition, other, name in lookups:
        if not isinstance(other, ex.Literal):
            continue
        value, key = other.value, keys[name]
        if value is None:
            text = expression_text(condition)
            raise KsqlStatementError(f"Primary key columns can not be NULL: {text}")
        allowed = _STRICT.get(str(key.type))
        if allowed is None:
            continue
        if isinstance(value, bool) != (str(key.type) == "BOOLEAN") or not isinstance(
            value, allowed
        ):
            raise KsqlStatementError(
                f"'{value}' can not be converted to the type of the key column: "
                f"{name} {key.type} KEY"
            )
