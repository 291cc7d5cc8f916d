"""Text to statements: ksqlDB's language parsed with lark (LALR, the grammar in
``grammar.lark``) into the typed values of ``strom.ksql.statements``.

Owns splitting a request into statements at the ``;`` outside strings, quoted names and
comments (``split_statements``), substituting ``${name}`` variables (``substitute``:
ksqlDB replaces them in the text, strings and names included, before parsing), and the
transformer from lark's tree to statements. A statement that does not parse raises
``KsqlSyntaxError`` with ksqlDB's ``line L:C: Syntax Error`` message, its line and
column counted from the statement's start.

``parse_statements`` parses a request in order, applying each DEFINE and UNDEFINE to
the variables the statements after it see, as ksqlDB does within one request.

lark was chosen as the parser generator: pure Python, a grammar file that reads like
ksqlDB's own reference, and a standalone LALR parser fast enough for every request.

Does not own executing statements or resolving names against the metastore.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from collections.abc import Callable, Iterator, MutableMapping
from importlib import resources
from typing import Any

import lark
from lark import Token, Transformer, v_args

from strom.ksql import expressions as ex
from strom.ksql import statements as st

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class KsqlSyntaxError(ValueError):
    """A statement that does not parse; ``str()`` is ksqlDB's message."""

    def __init__(self, line: int, column: int, detail: str) -> None:
        # ``column`` counts from 0 (ANTLR's char position in line); ksqlDB shows it from 1
        super().__init__(f"line {line}:{column + 1}: Syntax Error\n{detail}")
        self.line = line
        self.column = column
        self.statement_text = ""  # the statement that failed, set by parse_statements


@functools.cache
def _lark() -> lark.Lark:
    grammar = resources.files("strom.ksql").joinpath("grammar.lark").read_text()
    return lark.Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        maybe_placeholders=True,
        propagate_positions=True,
    )


def split_statements(text: str) -> list[str]:
    """The statements of ``text``, without their ``;`` and surrounding blanks; a last
    statement needs no ``;``. Comments stay inside the statement they are in; a piece
    holding only comments is dropped."""
    pieces: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in "'`\"":
            end = text.find(ch, i + 1)
            while end != -1 and end + 1 < n and text[end + 1] == ch:  # a doubled quote
                end = text.find(ch, end + 2)
            i = n if end == -1 else end + 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end == -1 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end == -1 else end + 2
            continue
        if ch == ";":
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if _has_code(piece)]


def _has_code(piece: str) -> bool:
    without = re.sub(r"--[^\n]*|/\*.*?\*/", "", piece, flags=re.S)
    return bool(without.strip())


def substitute(text: str, variables: MutableMapping[str, str]) -> str:
    """``${name}`` replaced by the variable's value (names are case-insensitive); an
    undefined variable is left as written."""
    if "${" not in text:
        return text
    lowered = {name.lower(): value for name, value in variables.items()}
    return _VARIABLE.sub(lambda m: lowered.get(m.group(1).lower(), m.group(0)), text)


def parse_statement(text: str) -> st.Statement:
    """One statement (no ``;`` needed) parsed; ``KsqlSyntaxError`` if it does not."""
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedToken as exc:
        token = exc.token
        shown = "<EOF>" if token.type == "$END" else str(token)
        if set(exc.expected) == {"_ARROW"}:
            # a parenthesised list of names that is no lambda's: ksqlDB's grammar takes
            # only one expression in parentheses there (GROUP BY a, (b, c))
            raise KsqlSyntaxError(
                exc.line if exc.line > 0 else _last_line(text),
                max(exc.column - 1, 0) if exc.column > 0 else _end_column(text),
                "missing ')' at ','",
            ) from None
        if {"TOPIC", "SCHEMA"} <= set(exc.expected) and token.type != "$END":
            # after ASSERT, ksqlDB's grammar also has its test-only ASSERT VALUES /
            # NULL VALUES / STREAM / TABLE: none takes the token (no viable alternative)
            line = exc.line if exc.line > 0 else 1
            raise KsqlSyntaxError(
                line,
                exc.column - 1,
                f"Syntax error at or near '{shown}' at line {line}:{exc.column}",
            ) from None
        readable = sorted({_readable(name) for name in exc.expected})
        expected = ", ".join(readable)
        raise KsqlSyntaxError(
            exc.line if exc.line > 0 else _last_line(text),
            max(exc.column - 1, 0) if exc.column > 0 else _end_column(text),
            # ksqlDB names a short list of what it expected alone
            f"Expecting {{{expected}}}"
            if len(readable) <= 3 and token.type != "$END"
            else f"mismatched input '{shown}' expecting {{{expected}}}",
        ) from None
    except lark.exceptions.UnexpectedCharacters as exc:
        rest = text[exc.pos_in_stream :].split("\n", 1)[0]
        raise KsqlSyntaxError(
            exc.line, exc.column - 1, f"token recognition error at: '{rest}'"
        ) from None
    except lark.exceptions.UnexpectedEOF:
        raise KsqlSyntaxError(
            _last_line(text), _end_column(text), "mismatched input '<EOF>'"
        ) from None
    try:
        builder = _StatementBuilder()
        statement = builder.transform(tree)
        if builder.overflow is not None:  # a DOUBLE literal too large, not negated
            raise _syntax_error(builder.overflow, f"Number overflows DOUBLE: {builder.overflow}")
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, KsqlSyntaxError):
            raise exc.orig_exc from None
        raise
    assert isinstance(statement, st.Statement)
    return statement


def parse_statements(
    text: str, variables: MutableMapping[str, str] | None = None
) -> Iterator[st.ParsedStatement]:
    """Each statement of ``text`` in order, variables substituted from ``variables``,
    which DEFINE and UNDEFINE change as they are reached (the caller sees the changes).
    A generator: the caller may execute each statement before the next is parsed."""
    scope: MutableMapping[str, str] = {} if variables is None else variables
    for piece in split_statements(text):
        substituted = substitute(piece, scope)
        try:
            statement = parse_statement(substituted)
        except KsqlSyntaxError as exc:
            exc.statement_text = substituted
            raise
        if isinstance(statement, st.DefineVariable):
            scope[statement.name] = statement.value
        elif isinstance(statement, st.UndefineVariable):
            for name in [n for n in scope if n.lower() == statement.name.lower()]:
                del scope[name]
        yield st.ParsedStatement(substituted, statement)


def _last_line(text: str) -> int:
    return text.count("\n") + 1


def _end_column(text: str) -> int:
    return len(text) - (text.rfind("\n") + 1)


_TOKEN_TEXT = {
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "SEMICOLON": "';'",
    "EQUAL": "'='",
    "DOT": "'.'",
    "STAR": "'*'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LESSTHAN": "'<'",
    "MORETHAN": "'>'",
    "STRING": "STRING",
    "TYPE_STRING": "'STRING'",
    "INTEGER_VALUE": "INTEGER_VALUE",
    "_ARROW": "'=>'",
    "IDENTIFIER": "IDENTIFIER",
}


def _readable(name: str) -> str:
    if name in _TOKEN_TEXT:
        return _TOKEN_TEXT[name]
    if name.startswith("__") or name.endswith("IDENTIFIER"):
        return "IDENTIFIER" if name.endswith("IDENTIFIER") else name
    return f"'{name.replace('_', ' ')}'"


# ---- tree to statements ---------------------------------------------------------------


def _name(token: Token) -> str:
    """An identifier as ksqlDB resolves it: quoted ones as written, others upper-cased."""
    text = str(token)
    if token.type == "BACKQUOTED_IDENTIFIER":
        return text[1:-1].replace("``", "`")
    if token.type == "QUOTED_IDENTIFIER":
        return text[1:-1].replace('""', '"')
    return text.upper()


# Functions whose first argument is a time unit written as a word (DATEADD(DAYS, 1, d)):
# ksqlDB's grammar reads DAYS, HOURS, MINUTES, SECONDS, MILLISECONDS and MILLISECOND
# there as the unit (its other unit words are names), passed on as its text.
_UNIT_FIRST = frozenset(
    {"DATEADD", "DATESUB", "TIMEADD", "TIMESUB", "TIMESTAMPADD", "TIMESTAMPSUB"}
)
_UNIT_WORDS = frozenset({"DAYS", "HOURS", "MINUTES", "SECONDS", "MILLISECONDS", "MILLISECOND"})


def _names_unit(argument: ex.Expression) -> bool:
    return (
        isinstance(argument, ex.ColumnReference)
        and argument.source is None
        and argument.name in _UNIT_WORDS
    )


def _string(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _syntax_error(token: Token | None, detail: str) -> KsqlSyntaxError:
    line = token.line if token is not None and token.line else 1
    column = token.column - 1 if token is not None and token.column else 0
    return KsqlSyntaxError(line, column, detail)


_MASKED = "'[string]'"  # a connector property's value in the statement shown back


def _config_text(value: Any) -> str:
    """A literal as the text of a Connect config value (Java's ``toString``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _literal_text(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return _config_text(value)


Children = list[Any]
_inline: Callable[[Any], Any] = v_args(inline=True)


class _StatementBuilder(Transformer[Token, Any]):
    """lark's tree to ``strom.ksql.statements`` values, bottom up."""

    def __init__(self) -> None:
        super().__init__()
        # a DOUBLE literal that overflows, refused once it is known whether a minus sign
        # makes it negative (ksqlDB's message shows the literal with its sign)
        self.overflow: Token | None = None

    # ---- names, literals, types
    @_inline
    def identifier(self, token: Token) -> str:
        return _name(token)

    @_inline
    def name(self, identifier: str) -> str:
        return identifier

    @_inline
    def string_literal(self, token: Token) -> ex.Literal:
        return ex.Literal(_string(token))

    @_inline
    def integer_literal(self, token: Token) -> ex.Literal:
        value = int(token)
        return ex.Literal(value)

    @_inline
    def decimal_literal(self, token: Token) -> ex.Literal:
        return ex.Literal(decimal.Decimal(str(token)))

    @_inline
    def float_literal(self, token: Token) -> ex.Literal:
        value = float(token)
        if math.isinf(value) and self.overflow is None:
            self.overflow = token
        return ex.Literal(value)

    def true_literal(self, _: Children) -> ex.Literal:
        return ex.Literal(True)

    def false_literal(self, _: Children) -> ex.Literal:
        return ex.Literal(False)

    def null_literal(self, _: Children) -> ex.Literal:
        return ex.Literal(None)

    @_inline
    def literal(self, value: ex.Literal) -> ex.Literal:
        return value

    def parameterized_type(self, children: Children) -> ex.SqlType:
        """A type with parameters ksqlDB's grammar takes and its types ignore."""
        return self.named_type(children[0])  # type: ignore[no-any-return]

    def type_parameter(self, _: Children) -> None:
        return None

    @_inline
    def named_type(self, token: Token) -> ex.SqlType:
        if token.type == "BACKQUOTED_IDENTIFIER":
            return ex.TypeReference(_name(token))
        if str(token).upper() == "NULL":  # a word of ksqlDB's grammar, not a type's name
            line = token.line or 1
            raise _syntax_error(  # ksqlDB's words for a token no rule takes (no viable alt)
                token, f"Syntax error at or near '{token}' at line {line}:{token.column or 1}"
            )
        primitive = ex.PRIMITIVE_TYPES.get(str(token).upper())
        return ex.PrimitiveType(primitive) if primitive else ex.TypeReference(_name(token))

    @_inline
    def array_type(self, element: ex.SqlType) -> ex.SqlType:
        return ex.ArrayType(element)

    @_inline
    def map_type(self, _word: Token, key: ex.SqlType, value: ex.SqlType) -> ex.SqlType:
        return ex.MapType(key, value)

    def struct_type(self, fields: Children) -> ex.SqlType:
        return ex.StructType(tuple(f for f in fields if f is not None))

    @_inline
    def struct_field(self, name: str, sql_type: ex.SqlType) -> ex.StructField:
        return ex.StructField(name, sql_type)

    @_inline
    def decimal_type(self, precision: Token, scale: Token) -> ex.SqlType:
        if int(precision) < 1 or int(scale) > int(precision):
            raise _syntax_error(
                precision, f"DECIMAL({precision}, {scale}): precision must be at least 1 "
                "and scale at most the precision"
            )  # fmt: skip
        return ex.DecimalType(int(precision), int(scale))

    # ---- expressions
    @v_args(inline=True, meta=True)
    def column_ref(self, meta: Any, first: str, second: str | None = None) -> ex.ColumnReference:
        line, column = getattr(meta, "line", 0), getattr(meta, "column", 0)
        if second is None:
            return ex.ColumnReference(first, line=line, column=column)
        return ex.ColumnReference(second, source=first, line=line, column=column)

    @_inline
    def dereference(self, base: ex.Expression, field: str) -> ex.Expression:
        return ex.Dereference(base, field)

    @_inline
    def subscript(self, base: ex.Expression, index: ex.Expression) -> ex.Expression:
        return ex.Subscript(base, index)

    @_inline
    def function_star(self, name: str) -> ex.Expression:
        return ex.FunctionCall(name, (), star=True)

    def function_call(self, children: Children) -> ex.Expression:
        name, *args = children
        arguments = [a for a in args if a is not None]
        if name in _UNIT_FIRST and arguments and _names_unit(arguments[0]):
            first = arguments[0]
            assert isinstance(first, ex.ColumnReference)
            arguments[0] = ex.Literal(first.name)
        return ex.FunctionCall(name, tuple(arguments))

    def lambda_params(self, names: Children) -> tuple[str, ...]:
        return tuple(names)

    @_inline
    def lambda_(self, params: str | tuple[str, ...], body: ex.Expression) -> ex.Expression:
        return ex.Lambda(params if isinstance(params, tuple) else (params,), body)

    @v_args(inline=True, meta=True)
    def lambda_one(self, meta: Any, param: ex.Expression, body: ex.Expression) -> ex.Expression:
        """``(x) => body``: the parenthesised expression must be a bare name."""
        if not isinstance(param, ex.ColumnReference) or param.source is not None:
            raise KsqlSyntaxError(
                getattr(meta, "line", 1), getattr(meta, "column", 1) - 1, "extraneous input '=>'"
            )
        return ex.Lambda((param.name,), body)

    @_inline
    def cast(self, operand: ex.Expression, sql_type: ex.SqlType) -> ex.Expression:
        return ex.Cast(operand, sql_type)

    @_inline
    def when_clause(self, when: ex.Expression, then: ex.Expression) -> tuple[Any, Any]:
        return (when, then)

    @_inline
    def else_clause(self, value: ex.Expression) -> ex.Expression:
        return value

    def searched_case(self, children: Children) -> ex.Expression:
        return self._case(None, children)

    def simple_case(self, children: Children) -> ex.Expression:
        return self._case(children[0], children[1:])

    @staticmethod
    def _case(operand: ex.Expression | None, rest: Children) -> ex.Expression:
        whens = tuple(c for c in rest if isinstance(c, tuple))
        default = rest[-1] if rest and isinstance(rest[-1], ex.Expression) else None
        return ex.Case(operand, whens, default)

    def array_constructor(self, items: Children) -> ex.Expression:
        return ex.ArrayConstructor(tuple(i for i in items if i is not None))

    @_inline
    def map_entry(self, key: ex.Expression, value: ex.Expression) -> tuple[Any, Any]:
        return (key, value)

    def map_constructor(self, entries: Children) -> ex.Expression:
        return ex.MapConstructor(tuple(e for e in entries[1:] if e is not None))

    @_inline
    def struct_entry(self, name: str, value: ex.Expression) -> tuple[Any, Any]:
        return (name, value)

    def struct_constructor(self, entries: Children) -> ex.Expression:
        return ex.StructConstructor(tuple(e for e in entries if e is not None))

    @_inline
    def comparison_op(self, token: Token) -> str:
        return "<>" if str(token) == "!=" else str(token)

    additive_op = comparison_op
    multiplicative_op = comparison_op

    @_inline
    def comparison(self, left: ex.Expression, op: str, right: ex.Expression) -> ex.Expression:
        return ex.Comparison(op, left, right)

    @_inline
    def arithmetic(self, left: ex.Expression, op: str, right: ex.Expression) -> ex.Expression:
        return ex.Arithmetic(op, left, right)

    @_inline
    def or_(self, left: ex.Expression, right: ex.Expression) -> ex.Expression:
        return ex.Logical("OR", left, right)

    @_inline
    def and_(self, left: ex.Expression, right: ex.Expression) -> ex.Expression:
        return ex.Logical("AND", left, right)

    @_inline
    def not_(self, operand: ex.Expression) -> ex.Expression:
        return ex.Not(operand)

    @_inline
    def negate(self, operand: ex.Expression) -> ex.Expression:
        overflow = self.overflow
        if overflow is not None and isinstance(operand, ex.Literal) and operand.value == math.inf:
            raise _syntax_error(overflow, f"Number overflows DOUBLE: -{overflow}")
        if isinstance(operand, ex.Literal) and isinstance(operand.value, int | float):
            return ex.Literal(-operand.value)
        if isinstance(operand, ex.Literal) and isinstance(operand.value, decimal.Decimal):
            return ex.Literal(-operand.value)
        return ex.Negate(operand)

    def is_null(self, children: Children) -> ex.Expression:
        return ex.IsNull(children[0], negated=len(children) > 1)

    def is_distinct(self, children: Children) -> ex.Expression:
        return ex.IsDistinctFrom(children[0], children[-1], negated=len(children) > 2)

    def between(self, children: Children) -> ex.Expression:
        operand, *rest = children
        negated = isinstance(rest[0], Token)
        low, high = rest[-2:]
        return ex.Between(operand, low, high, negated)

    def like(self, children: Children) -> ex.Expression:
        operand, *rest = children
        negated = isinstance(rest[0], Token) and rest[0].type == "NOT"
        if negated:
            rest = rest[1:]
        escape = _string(rest[1]) if len(rest) > 1 else None
        return ex.Like(operand, rest[0], escape, negated)

    def in_list(self, children: Children) -> ex.Expression:
        operand, *rest = children
        negated = isinstance(rest[0], Token)
        items = tuple(rest[1:] if negated else rest)
        return ex.InList(operand, items, negated)

    # ---- DDL
    def or_replace(self, children: Children) -> bool:
        return children[0] is not None

    if_not_exists = or_replace
    if_exists = or_replace
    delete_topic = or_replace
    extended = or_replace

    @_inline
    def source_or_table_kind(self, token: Token) -> str:
        return str(token).upper()

    @_inline
    def key_column(self, _: Token) -> str:
        return "KEY"

    @_inline
    def primary_key_column(self, _: Token) -> str:
        return "PRIMARY KEY"

    def headers_column(self, _: Children) -> str:
        return "HEADERS"

    @_inline
    def header_column(self, token: Token) -> str:
        return f"HEADER('{_string(token)}')"

    def table_element(self, children: Children) -> st.TableElement:
        name, sql_type, *constraint = children
        return st.TableElement(name, sql_type, constraint[0] if constraint else None)

    def table_elements(self, elements: Children) -> tuple[st.TableElement, ...]:
        return tuple(elements)

    @_inline
    def property(self, name: str, value: ex.Literal) -> tuple[str, Any]:
        return (name.upper(), value.value)

    def with_props(self, pairs: Children) -> dict[str, Any]:
        return dict(pairs)

    @_inline
    def create_source(
        self,
        or_replace: bool,
        source: Token | None,
        kind: str,
        if_not_exists: bool,
        name: str,
        elements: tuple[st.TableElement, ...] | None,
        properties: dict[str, Any] | None,
        query: st.Query | None,
    ) -> st.Statement:
        props = properties or {}
        if query is None:
            if properties is None:
                raise KsqlSyntaxError(1, 0, f"CREATE {kind} {name} needs a WITH clause")
            return st.CreateSource(
                kind, name, elements or (), props, or_replace, if_not_exists, source is not None
            )
        if source is not None or elements is not None:
            what = "SOURCE" if source is not None else "a column list"
            raise KsqlSyntaxError(1, 0, f"CREATE {kind} AS SELECT cannot have {what}")
        return st.CreateAsSelect(kind, name, query, props, or_replace, if_not_exists)

    @_inline
    def drop_source(self, kind: str, if_exists: bool, name: str, delete: bool) -> st.Statement:
        return st.DropSource(kind, name, if_exists, delete)

    @_inline
    def create_type(self, if_not_exists: bool, name: str, sql_type: ex.SqlType) -> st.Statement:
        return st.CreateType(name, sql_type, if_not_exists)

    @_inline
    def drop_type(self, if_exists: bool, name: str) -> st.Statement:
        return st.DropType(name, if_exists)

    @_inline
    def alter_option(self, name: str, sql_type: ex.SqlType) -> st.TableElement:
        return st.TableElement(name, sql_type)

    def alter_source(self, children: Children) -> st.Statement:
        kind, name, *columns = children
        return st.AlterSource(kind, name, tuple(columns))

    # ---- DML and queries
    def column_list(self, names: Children) -> tuple[str, ...]:
        return tuple(names)

    def insert_values(self, children: Children) -> st.Statement:
        target, columns, *values = children
        return st.InsertValues(target, columns or (), tuple(v for v in values if v is not None))

    def insert_select(self, children: Children) -> st.Statement:
        target, *rest = children
        properties = rest[0] if len(rest) == 2 else {}
        return st.InsertInto(target, rest[-1], properties)

    def select_all(self, _: Children) -> st.SelectItem:
        return st.AllColumns()

    @_inline
    def select_all_of(self, source: str) -> st.SelectItem:
        return st.AllColumns(source)

    @_inline
    def select_struct_all(self, expression: ex.Expression) -> st.SelectItem:
        return st.StructAll(expression)

    def select_expr(self, children: Children) -> st.SelectItem:
        return st.SelectExpression(children[0], children[1] if len(children) > 1 else None)

    def select_items(self, items: Children) -> tuple[st.SelectItem, ...]:
        return tuple(items)

    def aliased_source(self, children: Children) -> st.AliasedSource:
        return st.AliasedSource(children[0], children[1] if len(children) > 1 else None)

    def inner_join(self, _: Children) -> str:
        return "INNER"

    def left_join(self, _: Children) -> str:
        return "LEFT"

    def right_join(self, _: Children) -> str:
        return "RIGHT"

    def full_join(self, _: Children) -> str:
        return "FULL"

    @_inline
    def time_unit(self, token: Token) -> Token:
        if not st.known_time_unit(str(token)):
            raise _syntax_error(token, f"Unknown time unit '{token}'")
        return token

    @_inline
    def duration(self, amount: Token, unit: Token) -> st.Duration:
        return st.Duration(int(amount), str(unit).upper())

    @_inline
    def grace(self, duration: st.Duration) -> tuple[str, st.Duration]:
        return ("GRACE", duration)

    def within_one(self, children: Children) -> st.Within:
        grace = children[1][1] if len(children) > 1 else None
        return st.Within(children[0], children[0], grace)

    def within_two(self, children: Children) -> st.Within:
        grace = children[2][1] if len(children) > 2 else None
        return st.Within(children[0], children[1], grace)

    def join(self, children: Children) -> st.Join:
        kind, right, *rest = children
        within = rest[0] if len(rest) > 1 else None
        return st.Join(kind, right, rest[-1], within)

    def relation(self, children: Children) -> st.Relation:
        return st.Relation(children[0], tuple(children[1:]))

    @_inline
    def retention(self, duration: st.Duration) -> tuple[str, st.Duration]:
        return ("RETENTION", duration)

    @_inline
    def window_grace(self, duration: st.Duration) -> tuple[str, st.Duration]:
        return ("GRACE", duration)

    @staticmethod
    def _window(
        kind: str, size: st.Duration, advance: st.Duration | None, options: Children
    ) -> st.WindowExpression:
        settings = dict(options)
        return st.WindowExpression(
            kind, size, advance, settings.get("RETENTION"), settings.get("GRACE")
        )

    def tumbling(self, children: Children) -> st.WindowExpression:
        return self._window("TUMBLING", children[0], None, children[1:])

    def hopping(self, children: Children) -> st.WindowExpression:
        return self._window("HOPPING", children[0], children[1], children[2:])

    def session(self, children: Children) -> st.WindowExpression:
        return self._window("SESSION", children[0], None, children[1:])

    def window(self, children: Children) -> tuple[str, Any]:
        return ("window", children[-1])  # after the window's name, if it has one

    @_inline
    def where(self, expression: ex.Expression) -> tuple[str, Any]:
        return ("where", expression)

    def group_by(self, expressions: Children) -> tuple[str, Any]:
        return ("group_by", tuple(expressions))

    def group_by_empty(self, _: Children) -> tuple[str, Any]:
        return ("group_by", ())

    @v_args(inline=True, meta=True)
    def group_by_names(self, meta: Any, names: tuple[str, ...]) -> tuple[str, Any]:
        """GROUP BY (a, b): the columns, which the grammar reads as a lambda's names
        first (the two agree up to the ``)``)."""
        line, column = getattr(meta, "line", 0), getattr(meta, "column", 0)
        return ("group_by", tuple(ex.ColumnReference(n, line=line, column=column) for n in names))

    def partition_by(self, expressions: Children) -> tuple[str, Any]:
        return ("partition_by", tuple(expressions))

    def partition_by_empty(self, _: Children) -> tuple[str, Any]:
        return ("partition_by", ())

    @_inline
    def having(self, expression: ex.Expression) -> tuple[str, Any]:
        return ("having", expression)

    def emit_changes(self, _: Children) -> tuple[str, Any]:
        return ("emit", "CHANGES")

    def emit_final(self, _: Children) -> tuple[str, Any]:
        return ("emit", "FINAL")

    @_inline
    def limit(self, count: Token) -> tuple[str, Any]:
        return ("limit", int(count))

    def query(self, children: Children) -> st.Query:
        select, source, *clauses = children
        return st.Query(select, source, **dict(clauses))

    # ---- metadata and session statements
    @_inline
    def show(self, statement: st.Show) -> st.Statement:
        return statement

    def _show(what: str) -> Callable[[Any, Children], st.Show]:  # type: ignore[misc]
        def build(self: Any, children: Children) -> st.Show:
            extended = bool(children and children[-1] is True)
            all_topics = bool(children and isinstance(children[0], Token))
            return st.Show(what, extended, all_topics)

        return build

    show_streams = _show("STREAMS")
    show_tables = _show("TABLES")
    show_topics = _show("TOPICS")
    show_queries = _show("QUERIES")
    show_properties = _show("PROPERTIES")
    show_functions = _show("FUNCTIONS")
    show_types = _show("TYPES")
    show_variables = _show("VARIABLES")

    # ---- the connector statements
    def show_connectors(self, _: Children) -> st.Statement:
        return st.ListConnectors("ALL")

    def show_source_connectors(self, _: Children) -> st.Statement:
        return st.ListConnectors("SOURCE")

    def show_sink_connectors(self, _: Children) -> st.Statement:
        return st.ListConnectors("SINK")

    def show_connector_plugins(self, _: Children) -> st.Statement:
        return st.ListConnectorPlugins()

    @_inline
    def connector_name(self, token: Token) -> tuple[str, str]:
        return _name(token), str(token)

    @_inline
    def connector_property(self, key: Token, value: ex.Literal) -> tuple[str, str, Any]:
        """(the key as ksqlDB reads it, the key as written, the value)."""
        name = _string(key) if key.type == "STRING" else _name(key)
        return name, str(key), value.value

    def connector_props(self, properties: Children) -> list[tuple[str, str, Any]]:
        return list(properties)

    @_inline
    def create_connector(
        self,
        kind: Token,
        if_not_exists: bool,
        name: tuple[str, str],
        properties: list[tuple[str, str, Any]],
    ) -> st.Statement:
        """The config's values as text, as ksqlDB passes them to Connect (a NULL one is
        left out); ``masked_text`` the statement as ksqlDB shows it back, every value but
        connector.class's masked."""
        resolved, written = name
        kind_word = str(kind).split()[0].upper()
        config = {key: _config_text(value) for key, _, value in properties if value is not None}
        shown = [
            f"{raw}={_literal_text(value) if key.lower() == 'connector.class' else _MASKED}"
            for key, raw, value in properties
        ]
        exists = " IF NOT EXISTS" if if_not_exists else ""
        masked = f"CREATE {kind_word} CONNECTOR{exists} {written} WITH ({', '.join(shown)})"
        return st.CreateConnector(resolved, kind_word, config, if_not_exists, masked)

    @_inline
    def drop_connector(self, if_exists: bool, name: str) -> st.Statement:
        return st.DropConnector(name, if_exists)

    @_inline
    def describe_connector(self, name: str) -> st.Statement:
        return st.DescribeConnector(name)

    @_inline
    def describe_source(self, name: str, extended: bool) -> st.Statement:
        return st.DescribeSource(name, extended)

    @_inline
    def describe_streams(self, extended: bool) -> st.Statement:
        return st.DescribeSources("STREAM", extended)

    @_inline
    def describe_tables(self, extended: bool) -> st.Statement:
        return st.DescribeSources("TABLE", extended)

    @_inline
    def describe_function(self, name: str) -> st.Statement:
        return st.DescribeFunction(name)

    @_inline
    def query_id(self, token: Token) -> str:
        return str(token).upper()

    @_inline
    def explain(self, target: str | st.Statement) -> st.Statement:
        if isinstance(target, str):
            return st.Explain(query_id=target)
        return st.Explain(statement=target)

    @_inline
    def terminate(self, target: str | Token) -> st.Statement:
        if isinstance(target, Token) and target.type == "ALL":
            return st.Terminate(None)
        return st.Terminate(str(target))

    @_inline
    def pause_query(self, target: str | Token) -> st.Statement:
        if isinstance(target, Token) and target.type == "ALL":
            return st.PauseQuery(None)
        return st.PauseQuery(str(target))

    @_inline
    def resume_query(self, target: str | Token) -> st.Statement:
        if isinstance(target, Token) and target.type == "ALL":
            return st.ResumeQuery(None)
        return st.ResumeQuery(str(target))

    @_inline
    def topic_name(self, token: Token) -> str:
        if token.type == "STRING":
            return _string(token)
        if token.type == "IDENTIFIER":
            return str(token)  # PRINT keeps an unquoted topic name's case
        return _name(token)

    def from_beginning(self, _: Children) -> tuple[str, Any]:
        return ("from_beginning", True)

    @_inline
    def print_interval(self, count: Token) -> tuple[str, Any]:
        return ("interval", int(count))

    @_inline
    def print_limit(self, count: Token) -> tuple[str, Any]:
        return ("limit", int(count))

    def print_topic(self, children: Children) -> st.Statement:
        topic, *options = children
        return st.PrintTopic(topic, **dict(options))

    @_inline
    def set_property(self, name: Token, value: Token) -> st.Statement:
        return st.SetProperty(_string(name), _string(value))

    @_inline
    def unset_property(self, name: Token) -> st.Statement:
        return st.UnsetProperty(_string(name))

    @_inline
    def define_variable(self, name: str, value: Token) -> st.Statement:
        return st.DefineVariable(name.lower(), _string(value))

    @_inline
    def undefine_variable(self, name: str) -> st.Statement:
        return st.UndefineVariable(name.lower())

    @_inline
    def run_script(self, path: Token) -> st.Statement:
        return st.RunScript(_string(path))

    @_inline
    def assert_exists(self, not_exists: Token | None) -> bool:
        return not_exists is None

    @_inline
    def assert_timeout(self, duration: st.Duration) -> st.Duration:
        return duration

    @_inline
    def assert_topic(
        self,
        exists: bool,
        topic: str,
        properties: dict[str, Any] | None,
        timeout: st.Duration | None,
    ) -> st.Statement:
        return st.AssertTopic(topic, properties or {}, timeout, exists)

    @_inline
    def assert_schema(
        self,
        exists: bool,
        subject: str | None,
        schema_id: ex.Literal | None,
        timeout: st.Duration | None,
    ) -> st.Statement:
        return st.AssertSchema(
            subject, None if schema_id is None else schema_id.value, timeout, exists
        )
