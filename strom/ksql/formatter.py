"""Statements written back as SQL text, as ksqlDB's ``SqlFormatter`` writes them: the
text ksqlDB answers in ``statementText``, keeps in the command topic and shows in
DESCRIBE once it has added what it decided (the formats it defaulted to, the topic's
cleanup policy).

Owns CREATE STREAM / TABLE's text: upper-case keywords, names as resolved (in backticks
when they are not a plain upper-case identifier or are a reserved word), types in
ksqlDB's spelling, the WITH properties sorted by name, strings in single quotes.

Does not own parsing or deciding the properties.
"""

from __future__ import annotations

import re
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import statements as st

_PLAIN = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Words a name cannot be without quotes (ksqlDB's reserved words the grammar here uses).
RESERVED = frozenset(
    """ALL AND ARRAY AS BETWEEN BY CASE CAST CREATE DELETE DESCRIBE DISTINCT DROP ELSE
    EMIT END EXISTS EXPLAIN FALSE FROM FULL GROUP HAVING IF IN INNER INSERT INTO IS JOIN
    LEFT LIKE LIMIT MAP NOT NULL ON OR OUTER PARTITION PRINT RIGHT SELECT SET SHOW STREAM
    STRUCT TABLE THEN TRUE VALUES WHEN WHERE WINDOW WITH WITHIN""".split()
)


def name(text: str) -> str:
    return text if _PLAIN.match(text) and text not in RESERVED else f"`{text}`"


def sql_type(value: ex.SqlType) -> str:
    if isinstance(value, ex.ArrayType):
        return f"ARRAY<{sql_type(value.element)}>"
    if isinstance(value, ex.MapType):
        return f"MAP<{sql_type(value.key)}, {sql_type(value.value)}>"
    if isinstance(value, ex.StructType):
        return (
            "STRUCT<" + ", ".join(f"{name(f.name)} {sql_type(f.type)}" for f in value.fields) + ">"
        )
    if isinstance(value, ex.TypeReference):
        return name(value.name)
    return str(value)


def literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def create_source(statement: st.CreateSource, properties: dict[str, Any]) -> str:
    """The CREATE statement with ``properties`` as its WITH clause."""
    words = ["CREATE"]
    if statement.or_replace:
        words.append("OR REPLACE")
    if statement.is_source:
        words.append("SOURCE")
    words.append(statement.kind)
    if statement.if_not_exists:
        words.append("IF NOT EXISTS")
    words.append(name(statement.name))
    columns = ", ".join(
        f"{name(e.name)} {sql_type(e.type)}" + (f" {e.constraint}" if e.constraint else "")
        for e in statement.elements
    )
    with_clause = ", ".join(f"{k}={literal(v)}" for k, v in sorted(properties.items()))
    return " ".join(words) + (f" ({columns})" if columns else "") + f" WITH ({with_clause});"
