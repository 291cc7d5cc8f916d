"""ksqlDB's SQL types and expressions as immutable values: what the parser builds and
what the plan compiler (a later part: Spark Structured Streaming) reads.

Owns the type tree (primitive types, DECIMAL(p, s), ARRAY, MAP, STRUCT and references
to custom types made with CREATE TYPE), its SQL text (``str(sql_type)`` is ksqlDB's
spelling, as DESCRIBE shows it) and its REST schema form (``schema_json``: the
``{"type", "fields", "memberSchema"}`` of ksqlDB's ``FieldInfo``), and the expression
tree (literals, column references, dereference ``->``, subscripts, function calls with
lambdas, CAST, CASE, constructors, comparisons and arithmetic).

Does not own parsing (``strom.ksql.parser``), resolving names against the metastore, or
evaluating anything.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass, field
from typing import Any

# ksqlDB's primitive types by every name its grammar accepts for them.
PRIMITIVE_TYPES = {
    "BOOLEAN": "BOOLEAN",
    "INT": "INTEGER",
    "INTEGER": "INTEGER",
    "BIGINT": "BIGINT",
    "DOUBLE": "DOUBLE",
    "STRING": "STRING",
    "VARCHAR": "STRING",
    "BYTES": "BYTES",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
}


class SqlType:
    """A column's type. Subclasses are frozen dataclasses, compared by value."""

    def schema_json(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class PrimitiveType(SqlType):
    name: str  # one of PRIMITIVE_TYPES' values

    def __str__(self) -> str:
        return self.name

    def schema_json(self) -> dict[str, Any]:
        return {"type": self.name, "fields": None, "memberSchema": None}


@dataclass(frozen=True)
class DecimalType(SqlType):
    precision: int
    scale: int

    def __str__(self) -> str:
        return f"DECIMAL({self.precision}, {self.scale})"

    def schema_json(self) -> dict[str, Any]:
        return {
            "type": "DECIMAL",
            "fields": None,
            "memberSchema": None,
            "parameters": {"precision": self.precision, "scale": self.scale},
        }


@dataclass(frozen=True)
class ArrayType(SqlType):
    element: SqlType

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>"

    def schema_json(self) -> dict[str, Any]:
        return {"type": "ARRAY", "fields": None, "memberSchema": self.element.schema_json()}


@dataclass(frozen=True)
class MapType(SqlType):
    key: SqlType
    value: SqlType

    def __str__(self) -> str:
        return f"MAP<{self.key}, {self.value}>"

    def schema_json(self) -> dict[str, Any]:
        return {"type": "MAP", "fields": None, "memberSchema": self.value.schema_json()}


@dataclass(frozen=True)
class StructField:
    name: str
    type: SqlType


@dataclass(frozen=True)
class StructType(SqlType):
    fields: tuple[StructField, ...]

    def __str__(self) -> str:
        inner = ", ".join(f"`{f.name}` {f.type}" for f in self.fields)
        return f"STRUCT<{inner}>"

    def schema_json(self) -> dict[str, Any]:
        fields = [{"name": f.name, "schema": f.type.schema_json()} for f in self.fields]
        return {"type": "STRUCT", "fields": fields, "memberSchema": None}


@dataclass(frozen=True)
class TypeReference(SqlType):
    """A custom type's name (CREATE TYPE), resolved by the metastore."""

    name: str

    def __str__(self) -> str:
        return self.name

    def schema_json(self) -> dict[str, Any]:
        raise TypeError(f"type {self.name} is not resolved")


# ---- expressions ----------------------------------------------------------------------


class Expression:
    """An expression node. Subclasses are frozen dataclasses, compared by value."""


@dataclass(frozen=True)
class Literal(Expression):
    """``value`` is None (NULL), bool, int, float, decimal.Decimal or str."""

    value: None | bool | int | float | decimal.Decimal | str


@dataclass(frozen=True)
class ColumnReference(Expression):
    name: str
    source: str | None = None  # the qualifier of ``source.name``
    # Where it was written (1-based), for messages; not part of its value.
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return self.name if self.source is None else f"{self.source}.{self.name}"


@dataclass(frozen=True)
class Dereference(Expression):
    """``base->field``: a field of a struct."""

    base: Expression
    field: str


@dataclass(frozen=True)
class Subscript(Expression):
    """``base[index]``: an array element (from 1; negative from the end) or a map value."""

    base: Expression
    index: Expression


@dataclass(frozen=True)
class FunctionCall(Expression):
    name: str
    arguments: tuple[Expression, ...]
    star: bool = False  # COUNT(*)


@dataclass(frozen=True)
class Lambda(Expression):
    parameters: tuple[str, ...]
    body: Expression


@dataclass(frozen=True)
class Cast(Expression):
    operand: Expression
    type: SqlType


@dataclass(frozen=True)
class Case(Expression):
    """Searched (``operand`` None: each ``when`` is a condition) or simple CASE."""

    operand: Expression | None
    whens: tuple[tuple[Expression, Expression], ...]
    default: Expression | None


@dataclass(frozen=True)
class ArrayConstructor(Expression):
    items: tuple[Expression, ...]


@dataclass(frozen=True)
class MapConstructor(Expression):
    entries: tuple[tuple[Expression, Expression], ...]


@dataclass(frozen=True)
class StructConstructor(Expression):
    fields: tuple[tuple[str, Expression], ...]


@dataclass(frozen=True)
class Comparison(Expression):
    operator: str  # = <> < <= > >= (!= is read as <>)
    left: Expression
    right: Expression


@dataclass(frozen=True)
class Logical(Expression):
    operator: str  # AND, OR
    left: Expression
    right: Expression


@dataclass(frozen=True)
class Not(Expression):
    operand: Expression


@dataclass(frozen=True)
class IsNull(Expression):
    operand: Expression
    negated: bool = False


@dataclass(frozen=True)
class IsDistinctFrom(Expression):
    left: Expression
    right: Expression
    negated: bool = False


@dataclass(frozen=True)
class Between(Expression):
    operand: Expression
    low: Expression
    high: Expression
    negated: bool = False


@dataclass(frozen=True)
class Like(Expression):
    operand: Expression
    pattern: Expression
    escape: str | None = None
    negated: bool = False


@dataclass(frozen=True)
class InList(Expression):
    operand: Expression
    items: tuple[Expression, ...]
    negated: bool = False


@dataclass(frozen=True)
class Arithmetic(Expression):
    operator: str  # + - * / % and || (string concatenation)
    left: Expression
    right: Expression


@dataclass(frozen=True)
class Negate(Expression):
    operand: Expression
