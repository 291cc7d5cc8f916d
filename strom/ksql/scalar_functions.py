"""ksqlDB's scalar functions evaluated in Python, as its function reference describes
them: each one's signatures, result type and null behaviour.

Owns ``scalar_function(name)`` and the implementations, grouped as the reference groups
them: strings, regular expressions, bytes, math, dates and times, JSON, arrays, maps,
lambdas (TRANSFORM, FILTER, REDUCE get their lambdas as Python callables), nulls and
conditionals, URLs.

Does not own the signature machinery (``strom.ksql.function_types``), expressions
(``strom.ksql.evaluation``), aggregates (``strom.ksql.aggregate_functions``) or the
SHOW FUNCTIONS catalogue (``strom.ksql.functions``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from strom.ksql import values as v
from strom.ksql.function_types import (
    ResultRule,
    ScalarFunction,
    null_in_null_out,
    signature,
)

_REGISTRY: dict[str, ScalarFunction] = {}


def scalar_function(name: str) -> ScalarFunction | None:
    """The scalar function of this name (any case), None when ksqlDB has none."""
    return _REGISTRY.get(name.upper())


def scalar_function_names() -> list[str]:
    return sorted(_REGISTRY)


def _register(
    name: str,
    signatures: Sequence[tuple[str, str | ResultRule]],
    *,
    takes_types: bool = False,
    deterministic: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(implementation: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = ScalarFunction(
            name,
            tuple(signature(params, returns) for params, returns in signatures),
            implementation,
            takes_types,
            deterministic,
        )
        return implementation

    return add


# ---- strings --------------------------------------------------------------------------


@_register("UCASE", [("STRING", "STRING")])
@null_in_null_out
def _ucase(text: str) -> str:
    return text.upper()


@_register("LCASE", [("STRING", "STRING")])
@null_in_null_out
def _lcase(text: str) -> str:
    return text.lower()


@_register("CONCAT", [("STRING...", "STRING"), ("BYTES...", "BYTES")])
def _concat(*parts: Any) -> Any:
    present = [p for p in parts if p is not None]
    if present and isinstance(present[0], bytes):
        return b"".join(present)
    return "".join(present)


@_register("LEN", [("STRING", "INT"), ("BYTES", "INT")])
@null_in_null_out
def _len(value: Any) -> int:
    return len(value)


# ---- math -----------------------------------------------------------------------------


def _same_as(index: int) -> ResultRule:
    """The result has the type of argument ``index`` (as the signature widened it)."""

    def rule(types: list[Any], _: Any) -> Any:
        return types[index]

    return rule


@_register(
    "ABS", [("INT", "INT"), ("BIGINT", "BIGINT"), ("DOUBLE", "DOUBLE"), ("DECIMAL", _same_as(0))]
)
@null_in_null_out
def _abs(value: Any) -> Any:
    return abs(value)


@_register("SQRT", [("INT", "DOUBLE"), ("BIGINT", "DOUBLE"), ("DOUBLE", "DOUBLE")])
@null_in_null_out
def _sqrt(value: float) -> float:
    return math.sqrt(value) if value >= 0 else math.nan


# ---- nulls ----------------------------------------------------------------------------


@_register("COALESCE", [("T, T...", "T")])
def _coalesce(*arguments: Any) -> Any:
    return next((a for a in arguments if a is not None), None)


@_register("IFNULL", [("T, T", "T")])
def _ifnull(value: Any, alternative: Any) -> Any:
    return alternative if value is None else value


# ---- lambdas --------------------------------------------------------------------------


@_register(
    "TRANSFORM",
    [
        ("ARRAY<T>, LAMBDA(T)->O", "ARRAY<O>"),
        ("MAP<K,V>, LAMBDA(K,V)->A, LAMBDA(K,V)->B", "MAP<A,B>"),
    ],
)
def _transform(collection: Any, *functions: Callable[..., Any]) -> Any:
    if collection is None:
        return None
    if isinstance(collection, list):
        return [functions[0](item) for item in collection]
    keys, values = functions
    return {keys(k, x): values(k, x) for k, x in collection.items()}


@_register(
    "FILTER",
    [("ARRAY<T>, LAMBDA(T)->BOOLEAN", "ARRAY<T>"), ("MAP<K,V>, LAMBDA(K,V)->BOOLEAN", "MAP<K,V>")],
)
def _filter(collection: Any, keep: Callable[..., Any]) -> Any:
    if collection is None:
        return None
    if isinstance(collection, list):
        return [item for item in collection if keep(item) is True]
    return {k: x for k, x in collection.items() if keep(k, x) is True}


@_register(
    "REDUCE",
    [("ARRAY<T>, S, LAMBDA(S,T)->S", "S"), ("MAP<K,V>, S, LAMBDA(S,K,V)->S", "S")],
)
def _reduce(collection: Any, state: Any, step: Callable[..., Any]) -> Any:
    if collection is None:
        return state
    if state is None:
        return None
    if isinstance(collection, list):
        for item in collection:
            state = step(state, item)
        return state
    for k, x in collection.items():
        state = step(state, k, x)
    return state


_ = v  # the value helpers serve the functions added below
