"""The shape of ksqlDB's scalar functions: signatures written as type patterns, how a
call's argument types select a signature (exact first, then with ksqlDB's implicit
widening of numbers), the result type that follows, and the binding of an
implementation to the types it is called with.

Owns ``ScalarFunction`` (``result_type``, ``lambda_parameter_types``, ``bind``,
``call``), ``Signature`` and the pattern language: ``STRING``, ``INT``, ``DECIMAL`` (any
precision), ``ARRAY<T>``, ``MAP<K,V>``, ``STRUCT``, a generic letter bound by the first
argument that meets it, ``ANY``, and ``LAMBDA(T)->O`` for a lambda argument (its
parameters' types from what the other arguments bound, its body's type binding ``O``).

Does not own any function (``strom.ksql.scalar_functions`` defines them) or expressions.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.ksql import expressions as ex
from strom.ksql import values as v
from strom.ksql.metastore import KsqlStatementError

SqlTypeOrNull = ex.SqlType | None
Bindings = dict[str, ex.SqlType]
ResultRule = Callable[[list[SqlTypeOrNull], Bindings], ex.SqlType]


# ---- names as ksqlDB declares them -------------------------------------------------------

# ksqlDB's messages name a function as its implementation declares it, which is not always
# upper case ("Function 'dateadd' does not accept parameters ..."); the rest are upper.
_DECLARED_LOWER = frozenset(
    """acos array_concat array_distinct array_except array_intersect array_max array_min
    array_remove array_sort array_union asin atan atan2 avg bigint_from_bytes cbrt
    collect_list collect_set concat concat_ws convert_tz correlation cos cosh cot
    cube_explode dateadd datesub datetostring degrees double_from_bytes elt encode exp
    explode extractjsonfield field filter format_date format_time format_timestamp
    from_bytes from_days from_unixtime geo_distance greatest histogram initcap instr
    int_from_bytes lcase least len ln log map_keys map_union map_values mask mask_keep_left
    mask_keep_right mask_left mask_right md5 parse_date parse_time parse_timestamp pi power
    radians random reduce regexp_extract regexp_extract_all regexp_replace
    regexp_split_to_array replace sign sin sinh slice split split_to_map sqrt stringtodate
    stringtotimestamp substring sum_list tan tanh timeadd timestampadd timestampsub
    timestamptostring timesub to_bytes transform trim trunc ucase unix_date unix_timestamp
    url_decode_param url_encode_param url_extract_fragment url_extract_host
    url_extract_parameter url_extract_path url_extract_port url_extract_protocol
    url_extract_query""".split()
)
_DECLARED_MIXED = {
    "ABS": "Abs",
    "CEIL": "Ceil",
    "CHR": "Chr",
    "FLOOR": "Floor",
    "LPAD": "LPad",
    "RPAD": "RPad",
    "ROUND": "Round",
}


def declared_name(name: str) -> str:
    """``name`` (any case) as ksqlDB's messages spell the function."""
    upper = name.upper()
    if upper.lower() in _DECLARED_LOWER:
        return upper.lower()
    return _DECLARED_MIXED.get(upper, upper)


# ---- type patterns --------------------------------------------------------------------


@dataclass(frozen=True)
class _Pattern:
    kind: str  # PRIMITIVE, DECIMAL, ARRAY, MAP, STRUCT, GENERIC, ANY, LAMBDA
    name: str = ""
    children: tuple[_Pattern, ...] = ()

    def __str__(self) -> str:
        if self.kind == "ARRAY":
            return f"ARRAY<{self.children[0]}>"
        if self.kind == "MAP":
            return f"MAP<{self.children[0]}, {self.children[1]}>"
        if self.kind == "LAMBDA":
            inner = ", ".join(str(c) for c in self.children[:-1])
            return f"LAMBDA<Function{len(self.children) - 1}<{inner}, {self.children[-1]}>>"
        return self.name


_ALIASES = {"INT": "INTEGER", "VARCHAR": "STRING"}
_PRIMITIVES = {
    "BOOLEAN",
    "INTEGER",
    "BIGINT",
    "DOUBLE",
    "STRING",
    "BYTES",
    "DATE",
    "TIME",
    "TIMESTAMP",
}


def _parse_pattern(text: str) -> _Pattern:
    pattern, rest = _parse_one(text.replace(" ", ""))
    if rest:
        raise ValueError(f"bad type pattern {text!r}")
    return pattern


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for index, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char == ")" or (char == ">" and text[index - 1 : index] != "-"):
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _parse_one(text: str) -> tuple[_Pattern, str]:
    if text.startswith("LAMBDA("):
        close = text.index(")->")
        params = [_parse_pattern(p) for p in _split_top(text[7:close])] if close > 7 else []
        result, rest = _parse_one(text[close + 3 :])
        return _Pattern("LAMBDA", children=(*params, result)), rest
    match = re.match(r"[A-Z_]+", text)
    if match is None:
        raise ValueError(f"bad type pattern {text!r}")
    word, rest = match.group(0), text[match.end() :]
    word = _ALIASES.get(word, word)
    if word in ("ARRAY", "MAP") and rest.startswith("<"):
        depth, end = 0, 0
        for index, char in enumerate(rest):
            depth += char == "<"
            depth -= char == ">"
            if depth == 0:
                end = index
                break
        children = tuple(_parse_pattern(p) for p in _split_top(rest[1:end]))
        return _Pattern(word, children=children), rest[end + 1 :]
    if word in _PRIMITIVES:
        return _Pattern("PRIMITIVE", word), rest
    if word in ("DECIMAL", "STRUCT", "ANY"):
        return _Pattern(word, word), rest
    return _Pattern("GENERIC", word), rest


def _match(pattern: _Pattern, actual: SqlTypeOrNull, bindings: Bindings, widen: bool) -> bool:
    if pattern.kind == "ANY":
        return not isinstance(actual, v.LambdaType)
    if actual is None:  # a NULL literal fits any parameter but a lambda
        return pattern.kind != "LAMBDA"
    if pattern.kind == "LAMBDA":
        if not isinstance(actual, v.LambdaType):
            return False
        if len(actual.parameters) != len(pattern.children) - 1:
            return False
        return _match(pattern.children[-1], actual.result, bindings, widen)
    if isinstance(actual, v.LambdaType):
        return False
    if pattern.kind == "GENERIC":
        bound = bindings.get(pattern.name)
        if bound is None:
            bindings[pattern.name] = actual
            return True
        if bound == actual:
            return True
        if widen:
            try:
                common = v.common_type([bound, actual])
            except ValueError:
                return False
            if common is not None and v.is_number(common) == v.is_number(actual):
                bindings[pattern.name] = common
                return True
        return False
    if pattern.kind == "PRIMITIVE":
        target = ex.PrimitiveType(pattern.name)
        if actual == target:
            return True
        if widen and v.is_number(target):
            return v.can_widen(actual, target)
        # ksqlDB converts a STRING argument to a DATE, TIME or TIMESTAMP parameter
        return widen and v.is_temporal(target) and actual == v.STRING
    if pattern.kind == "DECIMAL":
        return isinstance(actual, ex.DecimalType) or (widen and actual in (v.INTEGER, v.BIGINT))
    if pattern.kind == "STRUCT":
        return isinstance(actual, ex.StructType)
    if pattern.kind == "ARRAY":
        return isinstance(actual, ex.ArrayType) and _match(
            pattern.children[0], actual.element, bindings, widen
        )
    if pattern.kind == "MAP":
        return (
            isinstance(actual, ex.MapType)
            and _match(pattern.children[0], actual.key, bindings, widen)
            and _match(pattern.children[1], actual.value, bindings, widen)
        )
    return False


def _resolve(pattern: _Pattern, bindings: Bindings, actual: SqlTypeOrNull = None) -> SqlTypeOrNull:
    """The concrete type of ``pattern`` under ``bindings`` (``actual`` where it is open)."""
    if pattern.kind == "PRIMITIVE":
        return ex.PrimitiveType(pattern.name)
    if pattern.kind == "GENERIC":
        return bindings.get(pattern.name, actual)
    if pattern.kind == "DECIMAL":
        if actual is None or isinstance(actual, ex.DecimalType):
            return actual
        return v.as_decimal_type(actual)
    if pattern.kind == "ARRAY":
        element = actual.element if isinstance(actual, ex.ArrayType) else None
        resolved = _resolve(pattern.children[0], bindings, element)
        return ex.ArrayType(resolved) if resolved is not None else actual
    if pattern.kind == "MAP":
        key = actual.key if isinstance(actual, ex.MapType) else None
        value = actual.value if isinstance(actual, ex.MapType) else None
        rk = _resolve(pattern.children[0], bindings, key)
        rv = _resolve(pattern.children[1], bindings, value)
        return ex.MapType(rk, rv) if rk is not None and rv is not None else actual
    return actual


# ---- functions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    parameters: tuple[_Pattern, ...]
    returns: _Pattern | ResultRule
    variadic: bool = False  # the last parameter repeats (zero or more times)

    def fits(self, count: int) -> bool:
        if self.variadic:
            return count >= len(self.parameters) - 1
        return count == len(self.parameters)

    def parameter(self, index: int) -> _Pattern:
        if self.variadic and index >= len(self.parameters) - 1:
            return self.parameters[-1]
        return self.parameters[index]

    def text(self, name: str) -> str:
        parts = [str(p) for p in self.parameters]
        if self.variadic:
            parts[-1] += "..."
        return f"{name}({', '.join(parts)})"


@dataclass
class ScalarFunction:
    """One ksqlDB scalar function: its signatures and one implementation over Python
    values. ``implementation`` receives the arguments (lambdas as callables), already
    converted to the parameter types of the signature that matched; with
    ``takes_types`` it first receives the list of those types."""

    name: str
    signatures: tuple[Signature, ...]
    implementation: Callable[..., Any]
    takes_types: bool = False
    deterministic: bool = True
    one_match: bool = False  # a call fitting several signatures is ambiguous (ksqlDB's rank)
    _cache: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)

    # -- types
    def _select(
        self, argument_types: Sequence[SqlTypeOrNull], skip: frozenset[int] = frozenset()
    ) -> tuple[Signature, Bindings] | None:
        for widen in (False, True):
            found: list[tuple[Signature, Bindings]] = []
            for signature in self.signatures:
                if not signature.fits(len(argument_types)):
                    continue
                bindings: Bindings = {}
                if all(
                    index in skip or _match(signature.parameter(index), actual, bindings, widen)
                    for index, actual in enumerate(argument_types)
                ):
                    if not self.one_match:
                        return signature, bindings
                    found.append((signature, bindings))
            if len(found) > 1:
                given = ", ".join("null" if t is None else str(t) for t in argument_types)
                raise KsqlStatementError(
                    f"Function '{declared_name(self.name)}' cannot be resolved due to ambiguous"
                    f" method parameters ({given})."
                )
            if found:
                return found[0]
        return None

    def _refuse(self, argument_types: Sequence[SqlTypeOrNull]) -> KsqlStatementError:
        given = ", ".join("null" if t is None else str(t) for t in argument_types)
        alternatives = "\n".join(s.text(self.name) for s in self.signatures)
        return KsqlStatementError(
            f"Function '{declared_name(self.name)}' does not accept parameters ({given}).\n"
            f"Valid alternatives are:\n{alternatives}\n"
            "For detailed information on a function run: DESCRIBE FUNCTION <Function-Name>;"
        )

    def _bound(
        self, argument_types: Sequence[SqlTypeOrNull]
    ) -> tuple[Signature, Bindings, list[SqlTypeOrNull]]:
        key = tuple(argument_types)
        found = self._cache.get(key)
        if found is None:
            selected = self._select(argument_types)
            if selected is None:
                raise self._refuse(argument_types)
            signature, bindings = selected
            parameter_types = [
                actual
                if isinstance(actual, v.LambdaType)
                else _resolve(signature.parameter(index), bindings, actual)
                for index, actual in enumerate(argument_types)
            ]
            found = (signature, bindings, parameter_types)
            self._cache[key] = found
        return found

    def result_type(self, argument_types: list[SqlTypeOrNull]) -> ex.SqlType:
        """The type of a call with arguments of ``argument_types`` (None: a NULL literal;
        ``values.LambdaType`` for a lambda), or ksqlDB's refusal."""
        signature, bindings, parameter_types = self._bound(argument_types)
        if callable(signature.returns) and not isinstance(signature.returns, _Pattern):
            return signature.returns(parameter_types, bindings)
        resolved = _resolve(signature.returns, bindings)
        if resolved is None:
            raise KsqlStatementError(
                f"Cannot infer the return type of {self.name} from a NULL argument: cast it"
                " to a type first"
            )
        return resolved

    def lambda_parameter_types(
        self, argument_types: list[SqlTypeOrNull], index: int
    ) -> list[SqlTypeOrNull]:
        """The types of the parameters of the lambda at ``index``, from the other
        arguments (those of lambdas not compiled yet may be anything there)."""
        lambdas = frozenset(i for i, t in enumerate(argument_types) if isinstance(t, v.LambdaType))
        selected = self._select(argument_types, skip=lambdas | {index})
        if selected is None:
            raise self._refuse(argument_types)
        signature, bindings = selected
        pattern = signature.parameter(index)
        if pattern.kind != "LAMBDA":
            raise self._refuse(argument_types)
        return [_resolve(p, bindings) for p in pattern.children[:-1]]

    # -- values
    def bind(self, argument_types: list[SqlTypeOrNull]) -> Callable[..., Any]:
        """The implementation for arguments of these types: converts each argument to
        its parameter's type (INTEGER to DOUBLE, ...) and calls."""
        _, _, parameter_types = self._bound(argument_types)
        conversions = [
            (index, actual, target)
            for index, (actual, target) in enumerate(
                zip(argument_types, parameter_types, strict=True)
            )
            if actual is not None
            and target is not None
            and actual != target
            and not isinstance(actual, v.LambdaType)
        ]
        implementation = self.implementation
        types = list(parameter_types)

        def call(*arguments: Any) -> Any:
            if conversions:
                arguments_list = list(arguments)
                for index, actual, target in conversions:
                    arguments_list[index] = v.coerce(arguments_list[index], actual, target)
                arguments = tuple(arguments_list)
            if self.takes_types:
                return implementation(types, *arguments)
            return implementation(*arguments)

        return call

    def call(self, *arguments: Any) -> Any:
        """The implementation over plain values (types read from the values)."""
        if self.takes_types:
            return self.implementation([_type_of_value(a) for a in arguments], *arguments)
        return self.implementation(*arguments)


def _type_of_value(value: Any) -> SqlTypeOrNull:
    if value is None:
        return None
    if isinstance(value, bool):
        return v.BOOLEAN
    if isinstance(value, int):
        return v.BIGINT
    if isinstance(value, float):
        return v.DOUBLE
    if isinstance(value, str):
        return v.STRING
    if isinstance(value, bytes):
        return v.BYTES
    if isinstance(value, decimal.Decimal):
        return v.decimal_type_of(value)
    return None


def signature(text: str, returns: str | ResultRule) -> Signature:
    """``"STRING, INT..."`` -> parameters (``...`` marks the last one variadic)."""
    variadic = text.endswith("...")
    body = text.removesuffix("...")
    parameters = tuple(_parse_pattern(p) for p in _split_top(body.replace(" ", ""))) if body else ()
    result: _Pattern | ResultRule = _parse_pattern(returns) if isinstance(returns, str) else returns
    return Signature(parameters, result, variadic)


def null_in_null_out(implementation: Callable[..., Any]) -> Callable[..., Any]:
    """The function yields null when any argument is null."""

    def guarded(*arguments: Any) -> Any:
        if any(a is None for a in arguments):
            return None
        return implementation(*arguments)

    guarded.__name__ = implementation.__name__
    guarded.__doc__ = implementation.__doc__
    return guarded
