"""ksqlDB's expressions evaluated in Python over rows: what projections, filters, keys
and HAVING clauses of the query runtime compute.

Owns ``Scope`` (a row's columns and their types, and the keys qualified references and
already computed expressions map to), ``compile_expression`` (an expression checked
and typed as ksqlDB types it, with its messages, then turned into a Python closure) and
``CompiledExpression.evaluate(row, on_error)``. Semantics follow ksqlDB's: numbers
widen INTEGER < BIGINT < DECIMAL < DOUBLE; INTEGER and BIGINT arithmetic wraps as
Java's int and long; DECIMAL results take ksqlDB's precision and scale and fail when
they would round; a comparison with a null is false (``IS DISTINCT FROM`` is not);
AND, OR and NOT over null booleans follow SQL's three-valued logic; null in
arithmetic, CAST, LIKE, subscripts and dereferences is null. A value that cannot be
computed for one row (division by zero, a bad cast, a function's failure) makes the
expression null for that row and is reported to ``on_error`` (ksqlDB's processing log).

Does not own functions (``strom.ksql.scalar_functions``; aggregates are the runtime's,
which hands their results in through ``Scope.expressions``), parsing or resolving
names against the metastore (``strom.ksql.analysis``).
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Mapping
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import values as v
from strom.ksql.aggregate_functions import is_aggregate
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.scalar_functions import TIME_UNIT_NAMES, scalar_function

# A compiled node: (row, lambda variables) -> value.
Evaluator = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
_NO_VARIABLES: Mapping[str, Any] = {}
# Where the on_error callback of an evaluation travels among the lambda variables (no
# parameter can be named so): guarded sub-expressions report through it.
_ERROR_SINK = "\x00on_error"
_NUMERIC = ("INTEGER", "BIGINT", "DECIMAL", "DOUBLE")


class Scope:
    """The columns an expression may read: the row keys and their types.

    ``qualified`` maps ``(source or None, name)`` of a column reference to its row key
    (for joins: ``("L", "ID") -> "L_ID"``); an unqualified reference not in it is read
    by its name. ``expressions`` maps whole expressions already computed (aggregate
    calls, GROUP BY expressions) to the row key holding their value.
    """

    def __init__(
        self,
        columns: Mapping[str, ex.SqlType],
        qualified: Mapping[tuple[str | None, str], str] | None = None,
        expressions: Mapping[ex.Expression, str] | None = None,
    ) -> None:
        self.columns = dict(columns)
        self.qualified = dict(qualified or {})
        self.expressions = dict(expressions or {})

    def resolve(self, ref: ex.ColumnReference) -> str:
        key = self.qualified.get((ref.source, ref.name))
        if key is not None:
            return key
        if ref.source is None and ref.name in self.columns:
            return ref.name
        raise KsqlStatementError(f"Column '{ref}' cannot be resolved.")

    def type_of(self, key: str) -> ex.SqlType:
        return self.columns[key]


class CompiledExpression:
    """An expression ready to evaluate over rows; ``sql_type`` is its ksqlDB type."""

    def __init__(self, expression: ex.Expression, evaluator: Evaluator, sql_type: ex.SqlType):
        self.expression = expression
        self.text = expression_text(expression)
        self.sql_type = sql_type
        self._evaluator = evaluator

    def evaluate(
        self, row: Mapping[str, Any], on_error: Callable[[str], None] | None = None
    ) -> Any:
        variables = _NO_VARIABLES if on_error is None else {_ERROR_SINK: on_error}
        try:
            return self._evaluator(row, variables)
        except Exception as error:  # one row's failure: null, reported, the query goes on
            if on_error is not None:
                on_error(f"Error computing expression {self.text}: {_reason(error)}")
            return None

    def __repr__(self) -> str:
        return f"CompiledExpression({self.text} : {self.sql_type})"


def _reason(error: Exception) -> str:
    if isinstance(error, decimal.DivisionByZero | decimal.InvalidOperation):
        return "Division by zero"
    if isinstance(error, decimal.Inexact):
        return "Rounding necessary"
    text = str(error)
    return text or type(error).__name__


class CoercionError(KsqlStatementError):
    """A CAST or an IN list whose values cannot be coerced: ksqlDB finds these only when
    it generates the clause's code, so its message names the clause (``Invalid Select:``,
    ``Invalid Predicate:``) rather than the expression's type checking."""


_CODE_CLAUSES = {"SELECT": "Select", "WHERE": "Predicate", "HAVING": "Predicate"}


_UNRESOLVED = re.compile(r"Column '([^']*)' cannot be resolved\.")


def compile_expression(
    expression: ex.Expression, scope: Scope, clause: str | None = None
) -> CompiledExpression:
    """``expression`` typed and compiled over ``scope``; ``KsqlStatementError`` with
    ksqlDB's message when it does not type. ``clause`` (SELECT, WHERE or HAVING) words
    the message as ksqlDB's does for that clause: ``Error in WHERE expression: ...`` for
    a type error in a filter (a line ``Statement: `` and the filter's text after it),
    ``Invalid Select: ...`` / ``Invalid Predicate: ...`` for a ``CoercionError``."""
    try:
        evaluator, sql_type = _Compiler(scope).compile(expression, {})
    except CoercionError as exc:
        if clause not in _CODE_CLAUSES:
            raise
        raise KsqlStatementError(f"Invalid {_CODE_CLAUSES[clause]}: {exc}.") from None
    except KsqlStatementError as exc:
        if clause not in ("WHERE", "HAVING"):
            raise
        # a column the analysis let through (a window bound of a windowed aggregation)
        # that the filter's row has not: ksqlDB's type checker's words
        unknown = _UNRESOLVED.fullmatch(str(exc))
        message = f"Unknown column {unknown.group(1)}." if unknown else str(exc)
        # ksqlDB's FilterTypeValidator: the filter's text follows, as its statement
        raise KsqlStatementError(
            f"Error in {clause} expression: {message}\nStatement: {expression_text(expression)}"
        ) from None
    if sql_type is None:
        raise KsqlStatementError(
            "Can't infer a type of null. Please explicitly cast it to a required type, e.g. "
            "CAST(null AS VARCHAR)."
        )
    return CompiledExpression(expression, evaluator, sql_type)


def expression_type(expression: ex.Expression, scope: Scope) -> ex.SqlType | None:
    """The type ksqlDB gives ``expression`` (None for a bare NULL)."""
    return _Compiler(scope).compile(expression, {})[1]


# ---- the text of an expression (ksqlDB's ExpressionFormatter) -------------------------


def expression_text(node: ex.Expression) -> str:
    text = expression_text
    if isinstance(node, ex.Literal):
        value = node.value
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        if isinstance(value, float):
            return v.double_text(value)
        return str(value)
    if isinstance(node, ex.ColumnReference):
        return str(node)
    if isinstance(node, ex.Dereference):
        return f"{text(node.base)}->{node.field}"
    if isinstance(node, ex.Subscript):
        return f"{text(node.base)}[{text(node.index)}]"
    if isinstance(node, ex.FunctionCall):
        arguments = "*" if node.star else ", ".join(text(a) for a in node.arguments)
        return f"{node.name}({arguments})"
    if isinstance(node, ex.Lambda):
        return f"({', '.join(node.parameters)}) => {text(node.body)}"
    if isinstance(node, ex.Cast):
        return f"CAST({text(node.operand)} AS {node.type})"
    if isinstance(node, ex.Case):
        parts = ["CASE"] + ([text(node.operand)] if node.operand is not None else [])
        parts += [f"WHEN {text(w)} THEN {text(t)}" for w, t in node.whens]
        if node.default is not None:
            parts += ["ELSE", text(node.default)]
        return "(" + " ".join(parts + ["END"]) + ")"
    if isinstance(node, ex.ArrayConstructor):
        return "ARRAY[" + ", ".join(text(i) for i in node.items) + "]"
    if isinstance(node, ex.MapConstructor):
        return "MAP(" + ", ".join(f"{text(k)}:={text(x)}" for k, x in node.entries) + ")"
    if isinstance(node, ex.StructConstructor):
        return "STRUCT(" + ", ".join(f"{k}:={text(x)}" for k, x in node.fields) + ")"
    if isinstance(node, ex.Comparison | ex.Logical | ex.Arithmetic):
        return f"({text(node.left)} {node.operator} {text(node.right)})"
    if isinstance(node, ex.Not):
        return f"(NOT {text(node.operand)})"
    if isinstance(node, ex.IsNull):
        return f"({text(node.operand)} IS {'NOT ' if node.negated else ''}NULL)"
    if isinstance(node, ex.IsDistinctFrom):
        word = "IS NOT DISTINCT FROM" if node.negated else "IS DISTINCT FROM"
        return f"({text(node.left)} {word} {text(node.right)})"
    if isinstance(node, ex.Between):
        inner = f"({text(node.operand)} BETWEEN {text(node.low)} AND {text(node.high)})"
        return f"(NOT {inner})" if node.negated else inner
    if isinstance(node, ex.Like):
        escape = f" ESCAPE '{node.escape}'" if node.escape is not None else ""
        inner = f"({text(node.operand)} LIKE {text(node.pattern)}{escape})"
        return f"(NOT {inner})" if node.negated else inner
    if isinstance(node, ex.InList):
        inner = f"({text(node.operand)} IN ({', '.join(text(i) for i in node.items)}))"
        return f"(NOT {inner})" if node.negated else inner
    if isinstance(node, ex.Negate):
        inner = text(node.operand)
        return "-" + (" " if inner.startswith("-") else "") + inner
    return repr(node)


# ---- the compiler ---------------------------------------------------------------------

Compiled = tuple[Evaluator, ex.SqlType | None]


def _type_error(node: ex.Expression, detail: str) -> KsqlStatementError:
    return KsqlStatementError(f"Error processing expression: {expression_text(node)}. {detail}")


class _Compiler:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def compile(self, node: ex.Expression, lambdas: Mapping[str, ex.SqlType | None]) -> Compiled:
        key = self.scope.expressions.get(node) if self.scope.expressions else None
        if key is not None:
            return (lambda row, _vars, key=key: row.get(key)), self.scope.type_of(key)
        method = getattr(self, "_" + type(node).__name__.lower(), None)
        if method is None:
            raise KsqlStatementError(f"Unsupported expression: {expression_text(node)}")
        return method(node, lambdas)  # type: ignore[no-any-return]

    # -- leaves
    def _literal(self, node: ex.Literal, lambdas: Any) -> Compiled:
        value = node.value
        if value is None:
            sql_type: ex.SqlType | None = None
        elif isinstance(value, bool):
            sql_type = v.BOOLEAN
        elif isinstance(value, int):
            sql_type = v.INTEGER if -(2**31) <= value < 2**31 else v.BIGINT
            if not -(2**63) <= value < 2**63:
                raise KsqlStatementError(f"Invalid numeric literal: {value}")
        elif isinstance(value, float):
            sql_type = v.DOUBLE
        elif isinstance(value, decimal.Decimal):
            sql_type = v.decimal_type_of(value)
        else:
            sql_type = v.STRING
        return (lambda row, _vars: value), sql_type

    def _columnreference(
        self, node: ex.ColumnReference, lambdas: Mapping[str, ex.SqlType | None]
    ) -> Compiled:
        if node.source is None and node.name in lambdas:
            name = node.name
            return (lambda row, variables: variables[name]), lambdas[name]
        key = self.scope.resolve(node)
        return (lambda row, _vars: row.get(key)), self.scope.type_of(key)

    # -- structure access
    def _dereference(self, node: ex.Dereference, lambdas: Any) -> Compiled:
        base, base_type = self.compile(node.base, lambdas)
        if not isinstance(base_type, ex.StructType):
            raise _type_error(node, f"Expected STRUCT type, got: {base_type}")
        match = next((f for f in base_type.fields if f.name == node.field), None)
        if match is None:
            match = next(
                (f for f in base_type.fields if f.name.upper() == node.field.upper()), None
            )
        if match is None:
            raise KsqlStatementError(
                f"Could not find field '{node.field}' in '{expression_text(node.base)}'."
            )
        name = match.name

        def dereference(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            struct = base(row, variables)
            return None if struct is None else struct.get(name)

        return dereference, match.type

    def _subscript(self, node: ex.Subscript, lambdas: Any) -> Compiled:
        base, base_type = self.compile(node.base, lambdas)
        index, index_type = self.compile(node.index, lambdas)
        if isinstance(base_type, ex.ArrayType):
            if index_type is not None and v.base(index_type) not in ("INTEGER", "BIGINT"):
                raise _type_error(node, f"Array index must be an INTEGER, got {index_type}")

            def element(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
                array, position = base(row, variables), index(row, variables)
                if array is None or position is None:
                    return None
                true_index = position - 1 if position >= 0 else len(array) + position
                if not 0 <= true_index < len(array):
                    return None
                return array[true_index]

            return element, base_type.element
        if isinstance(base_type, ex.MapType):
            key_type = base_type.key

            def entry(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
                mapping, key = base(row, variables), index(row, variables)
                if mapping is None or key is None:
                    return None
                return mapping.get(v.coerce(key, index_type, key_type))

            return entry, base_type.value
        hint = (
            f" Use the dereference operator for STRUCTS: {expression_text(node.base)}->"
            f"{expression_text(node.index)}"
            if isinstance(base_type, ex.StructType)
            else ""
        )
        raise KsqlStatementError(
            f"Subscript expression ({expression_text(node)}) do not apply to {base_type}.{hint}"
        )

    # -- constructors
    def _compile_list(self, nodes: list[ex.Expression], lambdas: Any) -> list[Compiled]:
        """A user's list (ARRAY[...], MAP(...), IN (...)): string literals among numbers or
        booleans are read as numbers or booleans, other literals among strings written
        as strings, as ksqlDB coerces them (the first element that is not NULL
        decides)."""
        compiled = [self.compile(item, lambdas) for item in nodes]
        first = next((t for _, t in compiled if t is not None), None)
        if first == v.STRING:
            for index, item in enumerate(nodes):
                if isinstance(item, ex.Literal) and item.value is not None:
                    if not isinstance(item.value, str):
                        text = v.to_text(item.value, compiled[index][1])
                        compiled[index] = self.compile(ex.Literal(text), lambdas)
            return compiled
        if not (v.is_number(first) or first == v.BOOLEAN):
            return compiled
        for index, item in enumerate(nodes):
            if isinstance(item, ex.Literal) and isinstance(item.value, str):
                compiled[index] = self.compile(_read_literal(item.value, first), lambdas)
        return compiled

    def _list_type(
        self, node: ex.Expression, items: list[Compiled], what: str, parts: str = "values"
    ) -> ex.SqlType:
        try:
            common = v.common_type([t for _, t in items])
        except ValueError as error:
            raise _type_error(node, f"operator does not exist: {error}") from None
        if common is None:
            raise KsqlStatementError(
                f"Cannot construct {what} with all NULL {parts}"
                " (see https://github.com/confluentinc/ksql/issues/4239). As a workaround, you "
                "may cast a NULL value to the desired type."
            )
        return common

    def _arrayconstructor(self, node: ex.ArrayConstructor, lambdas: Any) -> Compiled:
        if not node.items:
            raise KsqlStatementError(
                "Array constructor cannot be empty. Please supply at least one element "
                "(see https://github.com/confluentinc/ksql/issues/4239)."
            )
        items = self._compile_list(list(node.items), lambdas)
        element_type = self._list_type(node, items, "an array", "elements")
        parts = [
            (_guarded(item, fn, always=True), t)
            for item, (fn, t) in zip(node.items, items, strict=True)
        ]

        def array(row: Mapping[str, Any], variables: Mapping[str, Any]) -> list[Any]:
            return [v.coerce(fn(row, variables), t, element_type) for fn, t in parts]

        return array, ex.ArrayType(element_type)

    def _mapconstructor(self, node: ex.MapConstructor, lambdas: Any) -> Compiled:
        if not node.entries:
            raise KsqlStatementError(
                "Map constructor cannot be empty. Please supply at least one key value pair "
                "(see https://github.com/confluentinc/ksql/issues/4239)."
            )
        keys = self._compile_list([k for k, _ in node.entries], lambdas)
        values = self._compile_list([x for _, x in node.entries], lambdas)
        key_type = self._list_type(node, keys, "a map", "keys")
        value_type = self._list_type(node, values, "a map")
        keys = [(_guarded(k, fn), t) for (k, _), (fn, t) in zip(node.entries, keys, strict=True)]
        values = [
            (_guarded(x, fn), t) for (_, x), (fn, t) in zip(node.entries, values, strict=True)
        ]

        def mapping(row: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[Any, Any]:
            return {
                v.coerce(kf(row, variables), kt, key_type): v.coerce(
                    vf(row, variables), vt, value_type
                )
                for (kf, kt), (vf, vt) in zip(keys, values, strict=True)
            }

        return mapping, ex.MapType(key_type, value_type)

    def _structconstructor(self, node: ex.StructConstructor, lambdas: Any) -> Compiled:
        fields = [
            (
                name,
                _guarded(value, (compiled := self.compile(value, lambdas))[0], always=True),
                compiled[1],
            )
            for name, value in node.fields
        ]
        for name, _, field_type in fields:
            if field_type is None:
                raise KsqlStatementError(
                    f"Can't infer a type of null for field {name}. Please explicitly cast it "
                    "to a required type, e.g. CAST(null AS VARCHAR)."
                )
        seen: dict[str, ex.SqlType | None] = {}
        for name, _, field_type in fields:
            if name in seen:  # as ksqlDB's struct type refuses it, both fields shown
                raise KsqlStatementError(
                    f"Duplicate field names found in STRUCT: '`{name}` {seen[name]}' and "
                    f"'`{name}` {field_type}'"
                )
            seen[name] = field_type
        sql_type = ex.StructType(tuple(ex.StructField(n, t) for n, _, t in fields if t is not None))

        def struct(row: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
            return {name: fn(row, variables) for name, fn, _ in fields}

        return struct, sql_type

    # -- CAST and CASE
    def _cast(self, node: ex.Cast, lambdas: Any) -> Compiled:
        operand, source = self.compile(node.operand, lambdas)
        target = node.type
        if isinstance(target, ex.TypeReference):
            raise KsqlStatementError(f"Unknown type: {target.name}")
        if not v.cast_supported(source, target):
            raise CoercionError(f"Cast of {source} to {target} is not supported")
        if source is None or source == target:
            return operand, target

        def cast(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            return v.cast_value(operand(row, variables), source, target)

        return _guarded(node, cast, always=True), target

    def _case(self, node: ex.Case, lambdas: Any) -> Compiled:
        operand = self.compile(node.operand, lambdas) if node.operand is not None else None
        conditions: list[Evaluator] = []
        results: list[Compiled] = []
        result_type: ex.SqlType | None = None
        for when, then in node.whens:
            if operand is not None:
                condition_node: ex.Expression = ex.Comparison("=", node.operand, when)  # type: ignore[arg-type]
                condition, condition_type = self.compile(condition_node, lambdas)
            else:
                condition, condition_type = self.compile(when, lambdas)
            if condition_type != v.BOOLEAN:
                raise KsqlStatementError(
                    "WHEN operand type should be boolean.\n"
                    f"Type for '{expression_text(when)}' is {condition_type}"
                )
            compiled = self.compile(then, lambdas)
            if compiled[1] is not None:
                if result_type is None:
                    result_type = compiled[1]
                elif result_type != compiled[1]:
                    raise KsqlStatementError(
                        "Invalid Case expression. Type for all 'THEN' clauses should be the "
                        f"same.\nTHEN expression 'WHEN {expression_text(when)} THEN "
                        f"{expression_text(then)}' has type: {compiled[1]}.\n"
                        f"Previous THEN expression(s) type: {result_type}."
                    )
            conditions.append(condition)
            results.append(compiled)
        default = self.compile(node.default, lambdas) if node.default is not None else None
        if default is not None and default[1] is not None:
            if result_type is not None and default[1] != result_type:
                raise KsqlStatementError(
                    "Invalid Case expression. Type for the default clause should be the same "
                    f"as for 'THEN' clauses.\nTHEN type: {result_type}.\n"
                    f"DEFAULT type: {default[1]}."
                )
            result_type = default[1]
        if result_type is None:
            raise KsqlStatementError("Invalid Case expression. All case branches have NULL type")
        branches = [(c, r[0]) for c, r in zip(conditions, results, strict=True)]
        otherwise = default[0] if default is not None else None

        def case(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            for condition, result in branches:
                if condition(row, variables) is True:
                    return result(row, variables)
            return otherwise(row, variables) if otherwise is not None else None

        return case, result_type

    # -- logic
    def _boolean_operand(
        self, node: ex.Expression, operand: ex.Expression, lambdas: Any
    ) -> Evaluator:
        evaluator, sql_type = self.compile(operand, lambdas)
        if sql_type not in (v.BOOLEAN, None):
            raise _type_error(
                node,
                "Logical operators need BOOLEAN operands: "
                f"{expression_text(operand)} is {sql_type}",
            )
        return evaluator

    def _logical(self, node: ex.Logical, lambdas: Any) -> Compiled:
        left = self._boolean_operand(node, node.left, lambdas)
        right = self._boolean_operand(node, node.right, lambdas)
        if node.operator == "AND":

            def conjunction(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool | None:
                a = left(row, variables)
                if a is False:
                    return False
                b = right(row, variables)
                if b is False:
                    return False
                return None if a is None or b is None else True

            return conjunction, v.BOOLEAN

        def disjunction(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool | None:
            a = left(row, variables)
            if a is True:
                return True
            b = right(row, variables)
            if b is True:
                return True
            return None if a is None or b is None else False

        return disjunction, v.BOOLEAN

    def _not(self, node: ex.Not, lambdas: Any) -> Compiled:
        operand = self._boolean_operand(node, node.operand, lambdas)

        def negation(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool | None:
            value = operand(row, variables)
            return None if value is None else not value

        return negation, v.BOOLEAN

    def _isnull(self, node: ex.IsNull, lambdas: Any) -> Compiled:
        operand, _ = self.compile(node.operand, lambdas)
        if node.negated:
            return (lambda row, variables: operand(row, variables) is not None), v.BOOLEAN
        return (lambda row, variables: operand(row, variables) is None), v.BOOLEAN

    # -- comparisons
    def _comparison(self, node: ex.Comparison, lambdas: Any) -> Compiled:
        return self._compare(node, node.operator, node.left, node.right, lambdas), v.BOOLEAN

    def _isdistinctfrom(self, node: ex.IsDistinctFrom, lambdas: Any) -> Compiled:
        operator = "IS NOT DISTINCT FROM" if node.negated else "IS DISTINCT FROM"
        return self._compare(node, operator, node.left, node.right, lambdas), v.BOOLEAN

    def _compare(
        self,
        node: ex.Expression,
        operator: str,
        left_node: ex.Expression,
        right_node: ex.Expression,
        lambdas: Any,
    ) -> Evaluator:
        left_node, right_node = _magic_timestamps(left_node, right_node)
        left, left_type = self.compile(left_node, lambdas)
        right, right_type = self.compile(right_node, lambdas)
        distinct = operator.startswith("IS")
        if (left_type is None or right_type is None) and not distinct:
            raise KsqlStatementError(
                f"Comparison with NULL not supported: {v.base(left_type)} {operator} "
                f"{v.base(right_type)}\nUse 'IS NULL' or 'IS NOT NULL' instead."
            )
        if left_type is not None and right_type is not None:
            if not _comparable(left_type, operator, right_type):
                raise KsqlStatementError(
                    f"Cannot compare {expression_text(left_node)} ({left_type}) to "
                    f"{expression_text(right_node)} ({right_type}) with "
                    f"{_OPERATOR_NAMES[operator]}."
                )
        key = _comparison_key(left_type, right_type)
        test = _OPERATORS[operator]
        if isinstance(right_node, ex.Literal) and right_node.value is not None:
            constant = _constant_key(key, right_node.value, right_type)
            if constant is not None:
                wanted = constant[0]
                null_answer = operator == "IS DISTINCT FROM"  # a null vs a value

                def compare_constant(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool:
                    a = left(row, variables)
                    if a is None:
                        return null_answer
                    return test(key(a, left_type), wanted)

                return compare_constant

        def compare(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool:
            a, b = left(row, variables), right(row, variables)
            if a is None or b is None:
                if distinct:
                    both = a is None and b is None
                    return both if operator == "IS NOT DISTINCT FROM" else not both
                return False
            return test(key(a, left_type), key(b, right_type))

        return compare

    def _between(self, node: ex.Between, lambdas: Any) -> Compiled:
        low = self._compare(node, ">=", node.operand, node.low, lambdas)
        high = self._compare(node, "<=", node.operand, node.high, lambdas)
        negated = node.negated

        def between(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool:
            inside = low(row, variables) and high(row, variables)
            return not inside if negated else inside

        return between, v.BOOLEAN

    def _like(self, node: ex.Like, lambdas: Any) -> Compiled:
        operand, operand_type = self.compile(node.operand, lambdas)
        pattern, pattern_type = self.compile(node.pattern, lambdas)
        for part, part_type in ((node.operand, operand_type), (node.pattern, pattern_type)):
            if part_type not in (v.STRING, None):
                raise _type_error(
                    node, f"LIKE needs STRING operands: {expression_text(part)} is {part_type}"
                )
        escape = node.escape
        if escape is not None and len(escape) != 1:
            raise KsqlStatementError(f"Escape character must be a single character: '{escape}'")
        negated = node.negated
        cache: dict[str, re.Pattern[str]] = {}

        def like(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool | None:
            text, wanted = operand(row, variables), pattern(row, variables)
            if text is None or wanted is None:
                return None
            compiled = cache.get(wanted)
            if compiled is None:
                compiled = like_regex(wanted, escape)
                if len(cache) < 256:
                    cache[wanted] = compiled
            matched = compiled.fullmatch(text) is not None
            return not matched if negated else matched

        return like, v.BOOLEAN

    def _inlist(self, node: ex.InList, lambdas: Any) -> Compiled:
        try:
            operand_type = self.compile(node.operand, lambdas)[1]
            coerced = tuple(_literals_as(item, operand_type) for item in node.items)
            node = ex.InList(node.operand, coerced, node.negated)
            compiled = self._compile_list([node.operand, *node.items], lambdas)
        except CoercionError:
            raise
        except KsqlStatementError as exc:
            if not str(exc).startswith("invalid input syntax"):
                raise
            raise CoercionError(str(exc)) from None
        (operand, operand_type), *items = compiled
        common = operand_type
        for item_node, (_, item_type) in zip(node.items, items, strict=True):
            try:
                common = v.common_type([common, item_type])
            except ValueError:
                raise CoercionError(
                    f"operator does not exist: {common} = {item_type} "
                    f"({expression_text(item_node)})\nHint: You might need to add explicit "
                    "type casts."
                ) from None
        negated = node.negated
        # every value is converted to the common type first, so one key serves all
        operand_key = _comparison_key(common, common)
        keys = [(fn, t, operand_key) for fn, t in items]

        def in_list(row: Mapping[str, Any], variables: Mapping[str, Any]) -> bool:
            value = operand(row, variables)
            found = False
            if value is not None:
                wanted = operand_key(v.coerce(value, operand_type, common), common)
                for fn, item_type, key in keys:
                    item = fn(row, variables)
                    if (
                        item is not None
                        and key(v.coerce(item, item_type, common), common) == wanted
                    ):
                        found = True
                        break
            return not found if negated else found

        return in_list, v.BOOLEAN

    # -- arithmetic
    def _negate(self, node: ex.Negate, lambdas: Any) -> Compiled:
        operand, sql_type = self.compile(node.operand, lambdas)
        kind = v.base(sql_type)
        if kind not in _NUMERIC:
            raise _type_error(node, f"Negation on unsupported type: {sql_type}")
        wrap = v.wrap32 if kind == "INTEGER" else v.wrap64 if kind == "BIGINT" else None

        def negate(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            value = operand(row, variables)
            if value is None:
                return None
            return wrap(-value) if wrap is not None else -value

        return negate, sql_type

    def _arithmetic(self, node: ex.Arithmetic, lambdas: Any) -> Compiled:
        left, left_type = self.compile(node.left, lambdas)
        right, right_type = self.compile(node.right, lambdas)
        operator = node.operator
        if left_type is None or right_type is None:
            raise _type_error(
                node,
                f"Arithmetic on types {_null_or(left_type)} and {_null_or(right_type)} are "
                "not supported.",
            )
        result_type = arithmetic_result_type(node, operator, left_type, right_type)
        operation = _arithmetic_operation(operator, left_type, right_type, result_type)

        def arithmetic(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            a = left(row, variables)
            if a is None:
                return None
            b = right(row, variables)
            if b is None:
                return None
            return operation(a, b)

        if lambdas:  # in a lambda's body ksqlDB's arithmetic fails on a null operand
            text = expression_text(node)

            def strict(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
                a = left(row, variables)
                b = right(row, variables)
                if a is None or b is None:
                    raise v.EvaluationError(f"Error computing {text}: a null operand in a lambda")
                return operation(a, b)

            return strict, result_type
        return arithmetic, result_type

    # -- functions and lambdas
    def _functioncall(self, node: ex.FunctionCall, lambdas: Any) -> Compiled:
        name = node.name.upper()
        function = scalar_function(name)
        if function is None:
            if is_aggregate(name):
                for argument in node.arguments:  # ksqlDB types the arguments first
                    if not isinstance(argument, ex.Lambda):
                        self.compile(argument, lambdas)
                raise KsqlStatementError(
                    f"Use of aggregate function {name} requires a GROUP BY clause."
                )
            raise KsqlStatementError(f"Can't find any functions with the name '{name}'")
        arguments = node.arguments
        if name in _UNIT_FUNCTIONS and arguments and _is_time_unit(arguments[0]):
            unit = arguments[0]
            assert isinstance(unit, ex.ColumnReference)
            arguments = (ex.Literal(unit.name.upper()), *arguments[1:])
        compiled: list[Compiled | None] = []
        argument_types: list[ex.SqlType | None] = []
        for argument in arguments:
            if isinstance(argument, ex.Lambda):
                compiled.append(None)
                argument_types.append(v.LambdaType(tuple(None for _ in argument.parameters), None))
            else:
                item = self.compile(argument, lambdas)
                compiled.append(item)
                argument_types.append(item[1])
        for index, argument in enumerate(arguments):
            if isinstance(argument, ex.Lambda):
                parameter_types = function.lambda_parameter_types(argument_types, index)
                if len(parameter_types) != len(argument.parameters):
                    raise function._refuse(argument_types)  # noqa: SLF001
                scope = dict(lambdas)
                scope.update(zip(argument.parameters, parameter_types, strict=True))
                body, body_type = self.compile(argument.body, scope)
                compiled[index] = (_lambda_value(argument.parameters, body), None)
                argument_types[index] = v.LambdaType(tuple(parameter_types), body_type)
        result_type = function.result_type(argument_types)
        implementation = function.bind(argument_types)
        evaluators = [
            _guarded(argument, c[0])
            for argument, c in zip(arguments, compiled, strict=True)
            if c is not None
        ]

        def call(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
            return implementation(*[fn(row, variables) for fn in evaluators])

        return call, result_type

    def _lambda(self, node: ex.Lambda, lambdas: Any) -> Compiled:
        raise KsqlStatementError(
            f"Lambda expressions are only allowed as function arguments: {expression_text(node)}"
        )


# Functions whose first argument is a time unit written as a bare word (DAYS, SECONDS).
_UNIT_FUNCTIONS = frozenset(
    {"TIMESTAMPADD", "TIMESTAMPSUB", "DATEADD", "DATESUB", "TIMEADD", "TIMESUB"}
)


def _is_time_unit(argument: ex.Expression) -> bool:
    return (
        isinstance(argument, ex.ColumnReference)
        and argument.source is None
        and argument.name.upper() in TIME_UNIT_NAMES
    )


def _guarded(node: ex.Expression, evaluator: Evaluator, *, always: bool = False) -> Evaluator:
    """ksqlDB's nested error handling: a CAST, an element of ARRAY[...], MAP(...) or
    STRUCT(...) (``always``), and a function call or dereference given as a function's
    argument fail alone: null for that part, reported, the rest of the expression goes
    on. Other failures make the whole expression null."""
    if not always and not isinstance(node, ex.FunctionCall | ex.Dereference):
        return evaluator
    text = expression_text(node)

    def guarded(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Any:
        try:
            return evaluator(row, variables)
        except Exception as error:  # null for this part, reported, the rest goes on
            sink = variables.get(_ERROR_SINK)
            if sink is not None:
                sink(f"Error computing expression {text}: {_reason(error)}")
            return None

    return guarded


def _lambda_value(parameters: tuple[str, ...], body: Evaluator) -> Evaluator:
    """An evaluator whose value is a Python callable running ``body`` with the lambda's
    parameters bound (over the row and variables of the call it is built in)."""

    def build(row: Mapping[str, Any], variables: Mapping[str, Any]) -> Callable[..., Any]:
        def run(*arguments: Any) -> Any:
            scope = dict(variables)
            scope.update(zip(parameters, arguments, strict=True))
            return body(row, scope)

        return run

    return build


def _null_or(sql_type: ex.SqlType | None) -> str:
    return "null" if sql_type is None else str(sql_type)


# ---- comparison helpers ---------------------------------------------------------------


def _comparable(left: ex.SqlType, operator: str, right: ex.SqlType) -> bool:
    kind, other = v.base(left), v.base(right)
    equality = operator in ("=", "<>", "IS DISTINCT FROM", "IS NOT DISTINCT FROM")
    if kind in _NUMERIC:
        return other in _NUMERIC
    if kind == "STRING":
        return other == "STRING" or other in ("TIMESTAMP", "DATE", "TIME")
    if kind in ("BOOLEAN", "ARRAY", "MAP", "STRUCT"):
        return other == kind and equality
    if kind == "TIME":
        return other in ("TIME", "STRING")
    if kind in ("DATE", "TIMESTAMP"):
        return other in ("DATE", "TIMESTAMP", "STRING")
    if kind == "BYTES":
        return other == "BYTES"
    return False


def _comparison_key(
    sql_type: ex.SqlType | None, other: ex.SqlType | None
) -> Callable[[Any, ex.SqlType | None], Any]:
    """How a value of ``sql_type`` is made comparable with one of ``other``."""
    kinds = {v.base(sql_type), v.base(other)}
    if "DECIMAL" in kinds:
        return lambda value, t: (
            decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)
        )
    if kinds & {"TIMESTAMP", "DATE"}:
        return _to_epoch_ms
    if "TIME" in kinds:
        return lambda value, t: v.parse_time(value.strip()) if isinstance(value, str) else value
    if kinds == {"BYTES"}:
        return lambda value, t: bytes(b ^ 0x80 for b in value)  # Java's signed bytes
    return lambda value, t: value


_TIME_COLUMNS = frozenset({"ROWTIME", "WINDOWSTART", "WINDOWEND"})


def _magic_timestamps(
    left: ex.Expression, right: ex.Expression
) -> tuple[ex.Expression, ex.Expression]:
    """ROWTIME, WINDOWSTART and WINDOWEND (BIGINT) compared with a string literal take
    it as a timestamp's text, as ksqlDB rewrites them (``ROWTIME > '2018-01-01'``)."""

    def is_time_column(node: ex.Expression) -> bool:
        return isinstance(node, ex.ColumnReference) and node.name in _TIME_COLUMNS

    def as_millis(node: ex.Expression) -> ex.Expression:
        if isinstance(node, ex.Literal) and isinstance(node.value, str):
            try:
                return ex.Literal(v.parse_timestamp(node.value.strip()))
            except v.EvaluationError as error:
                raise KsqlStatementError(str(error)) from None
        return node

    if is_time_column(left):
        return left, as_millis(right)
    if is_time_column(right):
        return as_millis(left), right
    return left, right


def _literals_as(node: ex.Expression, target: ex.SqlType | None) -> ex.Expression:
    """An ARRAY, MAP or STRUCT constructor of an IN list with its string literals read as
    the operand's element, value or field types where those are numbers or booleans, as
    ksqlDB coerces them (``ARRAY['3', null]`` against ARRAY<BIGINT>)."""
    if isinstance(node, ex.ArrayConstructor) and isinstance(target, ex.ArrayType):
        return ex.ArrayConstructor(tuple(_literals_as(i, target.element) for i in node.items))
    if isinstance(node, ex.MapConstructor) and isinstance(target, ex.MapType):
        return ex.MapConstructor(
            tuple((k, _literals_as(value, target.value)) for k, value in node.entries)
        )
    if isinstance(node, ex.StructConstructor) and isinstance(target, ex.StructType):
        types = {f.name.upper(): f.type for f in target.fields}
        return ex.StructConstructor(
            tuple(
                (name, _literals_as(value, types.get(name.upper()))) for name, value in node.fields
            )
        )
    if (
        isinstance(node, ex.Literal)
        and isinstance(node.value, str)
        and (v.is_number(target) or target == v.BOOLEAN)
    ):
        return _read_literal(node.value, target)
    return node


def _read_literal(text: str, sql_type: ex.SqlType | None) -> ex.Literal:
    """A string literal read as a number or boolean (ksqlDB's list coercion)."""
    stripped = text.strip()
    if sql_type == v.BOOLEAN:
        lowered = stripped.lower()
        if lowered and ("true".startswith(lowered) or "yes".startswith(lowered)):
            return ex.Literal(True)
        if lowered and ("false".startswith(lowered) or "no".startswith(lowered)):
            return ex.Literal(False)
    else:
        try:
            if re.fullmatch(r"[+-]?\d+", stripped):
                return ex.Literal(int(stripped))
            return ex.Literal(decimal.Decimal(stripped))
        except decimal.InvalidOperation:
            pass
    raise KsqlStatementError(f'invalid input syntax for type {v.base(sql_type)}: "{text}".')


def _constant_key(
    key: Callable[[Any, ex.SqlType | None], Any], value: Any, sql_type: ex.SqlType | None
) -> tuple[Any] | None:
    """A literal's comparison key computed once; None when it fails (then it fails, and
    is reported, row by row)."""
    try:
        return (key(value, sql_type),)
    except Exception:  # noqa: BLE001 - reported per row instead
        return None


def _to_epoch_ms(value: Any, sql_type: ex.SqlType | None) -> int:
    if isinstance(value, str):
        return v.parse_timestamp(value.strip())
    if v.base(sql_type) == "DATE":
        return int(value) * 86_400_000
    return int(value)


_OPERATOR_NAMES = {  # as ksqlDB's messages name them
    "=": "EQUAL", "<>": "NOT_EQUAL", "<": "LESS_THAN", "<=": "LESS_THAN_OR_EQUAL",
    ">": "GREATER_THAN", ">=": "GREATER_THAN_OR_EQUAL",
    "IS DISTINCT FROM": "IS_DISTINCT_FROM", "IS NOT DISTINCT FROM": "IS_NOT_DISTINCT_FROM",
}  # fmt: skip

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "IS DISTINCT FROM": lambda a, b: a != b,
    "IS NOT DISTINCT FROM": lambda a, b: a == b,
}


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """ksqlDB's LIKE pattern as a regular expression: ``%`` any run, ``_`` one
    character, the escape character making the next one literal."""
    parts: list[str] = []
    escaped = False
    for char in pattern:
        if escaped:
            parts.append(re.escape(char))
            escaped = False
        elif escape is not None and char == escape:
            escaped = True
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    if escaped:
        raise v.EvaluationError("LIKE pattern must not end with escape character")
    return re.compile("".join(parts), re.DOTALL)


# ---- arithmetic helpers ---------------------------------------------------------------


def arithmetic_result_type(
    node: ex.Expression, operator: str, left: ex.SqlType, right: ex.SqlType
) -> ex.SqlType:
    """ksqlDB's ``Operator.resultType``."""
    kind_left, kind_right = v.base(left), v.base(right)
    if operator in ("+", "||") and kind_left == "STRING" and kind_right == "STRING":
        return v.STRING
    if operator != "||" and kind_left in _NUMERIC and kind_right in _NUMERIC:
        order = {"INTEGER": 0, "BIGINT": 1, "DECIMAL": 2, "DOUBLE": 3}
        if order[kind_left] <= order[kind_right]:
            if kind_right != "DECIMAL":
                return right
        elif kind_left != "DECIMAL":
            return left
        a, b = v.as_decimal_type(left), v.as_decimal_type(right)
        return _decimal_result(operator, a, b)
    raise _type_error(node, f"Unsupported arithmetic types. {kind_left} {kind_right}")


def _decimal_result(operator: str, a: ex.DecimalType, b: ex.DecimalType) -> ex.DecimalType:
    if operator in ("+", "-"):
        scale = max(a.scale, b.scale)
        precision = scale + max(a.precision - a.scale, b.precision - b.scale) + 1
    elif operator == "*":
        precision, scale = a.precision + b.precision + 1, a.scale + b.scale
    elif operator == "/":
        scale = max(6, a.scale + b.precision + 1)
        precision = a.precision - a.scale + b.scale + scale
    else:
        scale = max(a.scale, b.scale)
        precision = min(a.precision - a.scale, b.precision - b.scale) + scale
    return ex.DecimalType(precision, scale)


def _arithmetic_operation(
    operator: str, left: ex.SqlType, right: ex.SqlType, result: ex.SqlType
) -> Callable[[Any, Any], Any]:
    kind = v.base(result)
    if kind == "STRING":
        return lambda a, b: a + b
    if kind == "DOUBLE":
        double_operations: dict[str, Callable[[float, float], float]] = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "/": v.java_double_divide,
            "%": v.java_double_remainder,
        }
        operation = double_operations[operator]
        return lambda a, b: operation(float(a), float(b))
    if kind in ("INTEGER", "BIGINT"):
        wrap = v.wrap32 if kind == "INTEGER" else v.wrap64
        integer_operations: dict[str, Callable[[int, int], int]] = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "/": v.java_divide,
            "%": v.java_remainder,
        }
        operation_int = integer_operations[operator]
        return lambda a, b: wrap(operation_int(a, b))
    assert isinstance(result, ex.DecimalType)
    context = decimal.Context(
        prec=result.precision,
        rounding=decimal.ROUND_HALF_UP,
        traps=[decimal.Inexact, decimal.DivisionByZero, decimal.InvalidOperation],
    )
    scale_context = decimal.Context(prec=result.precision + 50, traps=[decimal.Inexact])
    quantum = decimal.Decimal(1).scaleb(-result.scale)
    decimal_operations: dict[str, Callable[[decimal.Decimal, decimal.Decimal], decimal.Decimal]] = {
        "+": context.add,
        "-": context.subtract,
        "*": context.multiply,
        "/": context.divide,
        "%": context.remainder,
    }
    operation_decimal = decimal_operations[operator]

    def decimal_arithmetic(a: Any, b: Any) -> decimal.Decimal:
        value = operation_decimal(decimal.Decimal(a), decimal.Decimal(b))
        return value.quantize(quantum, context=scale_context)

    return decimal_arithmetic
