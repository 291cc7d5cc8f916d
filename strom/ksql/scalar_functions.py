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

import base64
import binascii
import datetime
import decimal
import functools
import hashlib
import json
import math
import random
import re
import struct
import unicodedata
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from strom.ksql import datetime_patterns as patterns
from strom.ksql import expressions as ex
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
    one_match: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(implementation: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = ScalarFunction(
            name,
            tuple(signature(params, returns) for params, returns in signatures),
            implementation,
            takes_types,
            deterministic,
            one_match,
        )
        return implementation

    return add


def _same_as(index: int) -> ResultRule:
    """The result has the type of argument ``index`` (as the signature widened it)."""

    def rule(types: list[Any], _: Any) -> Any:
        return types[index]

    return rule


def _java_trim(text: str) -> str:
    """Java's ``String.trim``: strips every character up to the space."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


# ---- strings --------------------------------------------------------------------------


@_register("UCASE", [("STRING", "STRING")])
@null_in_null_out
def _ucase(text: str) -> str:
    return text.upper()


@_register("LCASE", [("STRING", "STRING")])
@null_in_null_out
def _lcase(text: str) -> str:
    return text.lower()


@_register("TRIM", [("STRING", "STRING")])
@null_in_null_out
def _trim(text: str) -> str:
    return _java_trim(text)


@_register("INITCAP", [("STRING", "STRING")])
@null_in_null_out
def _initcap(text: str) -> str:
    words = re.findall(r"\S+\s*", text.lower())
    return "".join(word[:1].upper() + word[1:] for word in words)


@_register("LEN", [("STRING", "INT"), ("BYTES", "INT")])
@null_in_null_out
def _len(value: Any) -> int:
    return len(value)


@_register("CONCAT", [("STRING...", "STRING"), ("BYTES...", "BYTES")])
def _concat(*parts: Any) -> Any:
    present = [p for p in parts if p is not None]
    if present and isinstance(present[0], bytes):
        return b"".join(present)
    return "".join(present)


@_register("CONCAT_WS", [("STRING, STRING...", "STRING"), ("BYTES, BYTES...", "BYTES")])
def _concat_ws(separator: Any, *parts: Any) -> Any:
    if not parts:
        raise v.EvaluationError("Function Concat_WS expects at least two input arguments.")
    if separator is None:
        return None
    return separator.join(p for p in parts if p is not None)


def _start_index(length: int, position: int) -> int:
    return max(length + position, 0) if position < 0 else max(min(position - 1, length), 0)


@_register(
    "SUBSTRING",
    [
        ("STRING, INT", "STRING"),
        ("STRING, INT, INT", "STRING"),
        ("BYTES, INT", "BYTES"),
        ("BYTES, INT, INT", "BYTES"),
    ],
)
@null_in_null_out
def _substring(value: Any, position: int, length: int | None = None) -> Any:
    start = _start_index(len(value), position)
    if length is None:
        return value[start:]
    end = max(min(start + length, len(value)), start)
    return value[start:end]


@_register("REPLACE", [("STRING, STRING, STRING", "STRING")])
@null_in_null_out
def _replace(text: str, old: str, new: str) -> str:
    if old == "":
        return new.join([""] + list(text) + [""])  # Java inserts around every character
    return text.replace(old, new)


@_register(
    "INSTR",
    [
        ("STRING, STRING", "INT"),
        ("STRING, STRING, INT", "INT"),
        ("STRING, STRING, INT, INT", "INT"),
    ],
)
def _instr(text: Any, sub: Any, position: int = 1, occurrence: int = 1) -> int:
    if text is None or sub is None or position is None or occurrence is None:
        return 0
    if abs(position) > len(text):
        return 0
    if position < 0:
        reversed_text, reversed_sub = text[::-1], sub[::-1]
        found = _ordinal_index(reversed_text[-position - 1 :], reversed_sub, occurrence)
        if found < 0:
            return 0
        return len(text) + position - found - len(sub) + 2
    found = _ordinal_index(text[position - 1 :], sub, occurrence)
    return 0 if found < 0 else found + position


def _ordinal_index(text: str, sub: str, occurrence: int) -> int:
    index = -1
    for _ in range(max(occurrence, 1)):
        index = text.find(sub, index + 1)
        if index < 0:
            return -1
    return index


def _pad(value: Any, length: int, padding: Any, left: bool) -> Any:
    if value is None or padding is None or len(padding) == 0 or length is None or length < 0:
        return None
    if len(value) >= length:
        return value[:length]
    fill_count = length - len(value)
    fill = (padding * (fill_count // len(padding) + 1))[:fill_count]
    return fill + value if left else value + fill


@_register("LPAD", [("STRING, INT, STRING", "STRING"), ("BYTES, INT, BYTES", "BYTES")])
def _lpad(value: Any, length: Any, padding: Any) -> Any:
    return _pad(value, length, padding, left=True)


@_register("RPAD", [("STRING, INT, STRING", "STRING"), ("BYTES, INT, BYTES", "BYTES")])
def _rpad(value: Any, length: Any, padding: Any) -> Any:
    return _pad(value, length, padding, left=False)


@_register("SPLIT", [("STRING, STRING", "ARRAY<STRING>"), ("BYTES, BYTES", "ARRAY<BYTES>")])
@null_in_null_out
def _split(value: Any, delimiter: Any) -> list[Any]:
    if len(delimiter) == 0:
        if isinstance(value, bytes):
            return [bytes([b]) for b in value] if value else [b""]
        return list(value) if value else [""]
    return value.split(delimiter)  # type: ignore[no-any-return]


@_register("SPLIT_TO_MAP", [("STRING, STRING, STRING", "MAP<STRING, STRING>")])
@null_in_null_out
def _split_to_map(text: str, entry_delimiter: str, kv_delimiter: str) -> dict[str, str] | None:
    if not entry_delimiter or not kv_delimiter or entry_delimiter == kv_delimiter:
        return None
    result: dict[str, str] = {}
    for entry in text.split(entry_delimiter):
        if entry and kv_delimiter in entry:
            parts = entry.split(kv_delimiter)
            result[parts[0]] = parts[1]
    return result


_MASK_DEFAULTS = ("X", "x", "n", "-")


def _mask_char(char: str, masks: tuple[str | None, ...]) -> str:
    category = unicodedata.category(char)
    if category == "Lu":
        mask = masks[0]
    elif category == "Ll":
        mask = masks[1]
    elif category == "Nd":
        mask = masks[2]
    else:
        mask = masks[3]
    return char if mask is None else mask


def _masks(arguments: tuple[Any, ...]) -> tuple[str | None, ...]:
    if not arguments:
        return _MASK_DEFAULTS
    for mask in arguments:
        if mask is not None and len(mask) != 1:
            raise v.EvaluationError(
                f"Invalid mask character. Must be only single character, but was '{mask}'"
            )
    return tuple(arguments)


def _mask_text(text: str, masks: tuple[str | None, ...]) -> str:
    return "".join(_mask_char(c, masks) for c in text)


_MASK_CHARS = "STRING, STRING, STRING, STRING"


@_register("MASK", [("STRING", "STRING"), (f"STRING, {_MASK_CHARS}", "STRING")])
def _mask(text: Any, *masks: Any) -> Any:
    if text is None:
        return None
    return _mask_text(text, _masks(masks))


def _check_count(name: str, count: int) -> None:
    if count is not None and count < 0:
        raise v.EvaluationError(
            f"function {name} requires a non-negative number of characters to mask or skip"
        )


def _register_partial_mask(name: str, keep: bool, left: bool) -> None:
    @_register(name, [("STRING, INT", "STRING"), (f"STRING, INT, {_MASK_CHARS}", "STRING")])
    def partial(text: Any, count: Any, *masks: Any) -> Any:
        _check_count(name.lower(), count)
        if text is None or count is None:
            return None if text is None else text
        count = min(count, len(text))
        chosen = _masks(masks)
        if left:
            head, tail = text[:count], text[count:]
            return head + _mask_text(tail, chosen) if keep else _mask_text(head, chosen) + tail
        head, tail = text[: len(text) - count], text[len(text) - count :]
        return _mask_text(head, chosen) + tail if keep else head + _mask_text(tail, chosen)


_register_partial_mask("MASK_KEEP_LEFT", keep=True, left=True)
_register_partial_mask("MASK_KEEP_RIGHT", keep=True, left=False)
_register_partial_mask("MASK_LEFT", keep=False, left=True)
_register_partial_mask("MASK_RIGHT", keep=False, left=False)


def _joined_surrogates(units: str) -> str:
    """Java's UTF-16 text as Python's: a surrogate pair (``\\ud820\\udeb8``) is one
    character; a lone surrogate is ``?``, as Java writes it in UTF-8."""
    raw = units.encode("utf-16-le", "surrogatepass")
    try:
        return raw.decode("utf-16-le")
    except UnicodeDecodeError:
        return raw.decode("utf-16-le", "replace").replace("\ufffd", "?")


@_register("CHR", [("INT", "STRING"), ("STRING", "STRING")])
@null_in_null_out
def _chr(code: Any) -> str | None:
    if isinstance(code, str):
        if len(code) < 6 or not code.startswith("\\u"):
            return None
        try:
            units = code.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            return None
        return _joined_surrogates(units)
    if not 0 <= code <= 0x10FFFF:
        return None
    return chr(code)


@_register("ELT", [("INT, STRING...", "STRING")])
def _elt(index: Any, *items: Any) -> Any:
    if index is None or index < 1 or index > len(items):
        return None
    return items[index - 1]


@_register("FIELD", [("STRING, STRING...", "INT")])
def _field(text: Any, *items: Any) -> int:
    if text is None:
        return 0
    for position, item in enumerate(items, start=1):
        if item == text:
            return position
    return 0


@_register("UUID", [("", "STRING"), ("BYTES", "STRING")], deterministic=False)
def _uuid(*arguments: Any) -> str | None:
    if not arguments:
        return str(uuid.uuid4())
    raw = arguments[0]
    if raw is None or len(raw) != 16:
        return None
    return str(uuid.UUID(bytes=raw))


@_register("MD5", [("STRING", "STRING")])
@null_in_null_out
def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


# ---- regular expressions --------------------------------------------------------------


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return _compiled_regex(pattern)
    except re.error as error:
        raise v.EvaluationError(f"Invalid regular expression pattern: {pattern}: {error}") from None


_compiled_regex = functools.lru_cache(maxsize=256)(re.compile)


def _java_replacement(replacement: str) -> str:
    """Java's ``$1`` / ``${name}`` group references and ``\\$`` escapes for Python."""
    out, index = [], 0
    while index < len(replacement):
        char = replacement[index]
        if char == "\\" and index + 1 < len(replacement):
            out.append(replacement[index + 1].replace("\\", "\\\\"))
            index += 2
        elif char == "$":
            match = re.match(r"\$(\d+|\{(\w+)\})", replacement[index:])
            if match is None:
                raise v.EvaluationError("Illegal group reference")
            group = match.group(2) or match.group(1)
            out.append(f"\\g<{group}>")
            index += match.end()
        else:
            out.append("\\\\" if char == "\\" else char)
            index += 1
    return "".join(out)


@_register("REGEXP_EXTRACT", [("STRING, STRING", "STRING"), ("STRING, STRING, INT", "STRING")])
@null_in_null_out
def _regexp_extract(pattern: str, text: str, group: int = 0) -> str | None:
    compiled = _regex(pattern)
    if group > compiled.groups:
        return None
    match = compiled.search(text)
    return match.group(group) if match else None


@_register(
    "REGEXP_EXTRACT_ALL",
    [("STRING, STRING", "ARRAY<STRING>"), ("STRING, STRING, INT", "ARRAY<STRING>")],
)
@null_in_null_out
def _regexp_extract_all(pattern: str, text: str, group: int = 0) -> list[str | None] | None:
    compiled = _regex(pattern)
    if group > compiled.groups:
        return None
    return [match.group(group) for match in compiled.finditer(text)]


@_register("REGEXP_REPLACE", [("STRING, STRING, STRING", "STRING")])
@null_in_null_out
def _regexp_replace(text: str, pattern: str, replacement: str) -> str:
    return _regex(pattern).sub(_java_replacement(replacement), text)


@_register("REGEXP_SPLIT_TO_ARRAY", [("STRING, STRING", "ARRAY<STRING>")])
@null_in_null_out
def _regexp_split(text: str, pattern: str) -> list[str]:
    compiled = _regex(pattern)
    if pattern == "" or compiled.fullmatch(""):
        parts = [p for p in compiled.split(text)]
        parts = list(text) if pattern == "" else parts
        while parts and parts[-1] == "":  # Java's split drops trailing empty strings
            parts.pop()
        return parts
    return (
        compiled.split(text)
        if compiled.groups == 0
        else [p for i, p in enumerate(compiled.split(text)) if i % (compiled.groups + 1) == 0]
    )


# ---- bytes and encodings --------------------------------------------------------------

_ENCODINGS = ("hex", "utf8", "ascii", "base64")


def _hex_digits(text: str) -> str:
    """Hex digits without ksqlDB's prefixes: ``0xAB7`` (an odd count gets a leading 0)
    and ``X'AB79'`` / ``x'AB79'``."""
    if text.startswith("0x"):
        return ("0" if len(text) % 2 else "") + text[2:]
    if len(text) >= 3 and text[:2] in ("X'", "x'") and text.endswith("'"):
        return text[2:-1]
    return text


def _to_bytes(text: str, encoding: str) -> bytes:
    name = encoding.lower()
    try:
        if name == "hex":
            return bytes.fromhex(_hex_digits(text))
        if name == "utf8":
            return text.encode("utf-8")
        if name == "ascii":
            return text.encode("ascii", "replace")
        if name == "base64":
            return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as error:
        raise v.EvaluationError(f"Failed to decode '{text}' as {encoding}: {error}") from None
    raise v.EvaluationError(
        f"Unknown encoding: {encoding}. Supported encodings are: hex, utf8, ascii and base64"
    )


def _from_bytes(raw: bytes, encoding: str) -> str:
    name = encoding.lower()
    if name == "hex":
        return raw.hex().upper()
    if name == "utf8":
        return raw.decode("utf-8", "replace")
    if name == "ascii":
        return raw.decode("ascii", "replace")
    if name == "base64":
        return base64.b64encode(raw).decode()
    raise v.EvaluationError(
        f"Unknown encoding: {encoding}. Supported encodings are: hex, utf8, ascii and base64"
    )


@_register("TO_BYTES", [("STRING, STRING", "BYTES")])
@null_in_null_out
def _to_bytes_function(text: str, encoding: str) -> bytes:
    return _to_bytes(text, encoding)


@_register("FROM_BYTES", [("BYTES, STRING", "STRING")])
@null_in_null_out
def _from_bytes_function(raw: bytes, encoding: str) -> str:
    return _from_bytes(raw, encoding)


@_register("ENCODE", [("STRING, STRING, STRING", "STRING")])
@null_in_null_out
def _encode(text: str, input_encoding: str, output_encoding: str) -> str:
    if input_encoding.lower() not in _ENCODINGS or output_encoding.lower() not in _ENCODINGS:
        raise v.EvaluationError(
            "Supported input and output encodings are: hex, utf8, ascii and base64"
        )
    raw = _to_bytes(text, input_encoding)
    if output_encoding.lower() == "hex":
        return raw.hex()  # ENCODE writes hex in lower case, FROM_BYTES in upper case
    return _from_bytes(raw, output_encoding)


def _register_number_from_bytes(name: str, size: int, kind: str, result: str) -> None:
    @_register(name, [("BYTES", result), ("BYTES, STRING", result)])
    @null_in_null_out
    def from_bytes(raw: bytes, byte_order: str = "BIG_ENDIAN") -> Any:
        if len(raw) != size:
            raise v.EvaluationError(
                f"Number of bytes must be equal to {size}, but found {len(raw)}"
            )
        order = byte_order.upper()
        if order not in ("BIG_ENDIAN", "LITTLE_ENDIAN"):
            raise v.EvaluationError(f"byte order must be BIG_ENDIAN or LITTLE_ENDIAN: {byte_order}")
        prefix = ">" if order == "BIG_ENDIAN" else "<"
        return struct.unpack(prefix + kind, raw)[0]


_register_number_from_bytes("INT_FROM_BYTES", 4, "i", "INT")
_register_number_from_bytes("BIGINT_FROM_BYTES", 8, "q", "BIGINT")
_register_number_from_bytes("DOUBLE_FROM_BYTES", 8, "d", "DOUBLE")


# ---- math -----------------------------------------------------------------------------

_NUMBERS_SAME: list[tuple[str, str | ResultRule]] = [
    ("INT", "INT"),
    ("BIGINT", "BIGINT"),
    ("DOUBLE", "DOUBLE"),
    ("DECIMAL", _same_as(0)),
]


@_register("ABS", _NUMBERS_SAME)
@null_in_null_out
def _abs(value: Any) -> Any:
    return abs(value)


def _integral_decimal(value: decimal.Decimal, rounding: str) -> decimal.Decimal:
    """``value`` rounded to a whole number, kept at its scale (ksqlDB's CEIL and FLOOR)."""
    whole = value.quantize(decimal.Decimal(1), rounding=rounding, context=v.DECIMAL_CONTEXT)
    return whole.quantize(
        decimal.Decimal(1).scaleb(value.as_tuple().exponent),  # type: ignore[arg-type]
        context=v.DECIMAL_CONTEXT,
    )


@_register("CEIL", _NUMBERS_SAME)
@null_in_null_out
def _ceil(value: Any) -> Any:
    if isinstance(value, float):
        return float(math.ceil(value)) if math.isfinite(value) else value
    if isinstance(value, decimal.Decimal):
        return _integral_decimal(value, decimal.ROUND_CEILING)
    return value


@_register("FLOOR", _NUMBERS_SAME)
@null_in_null_out
def _floor(value: Any) -> Any:
    if isinstance(value, float):
        return float(math.floor(value)) if math.isfinite(value) else value
    if isinstance(value, decimal.Decimal):
        return _integral_decimal(value, decimal.ROUND_FLOOR)
    return value


def _whole_decimal(types: list[Any], _: Any) -> ex.SqlType:
    source = types[0]
    assert isinstance(source, ex.DecimalType)
    return ex.DecimalType(max(source.precision - source.scale, 1), 0)


def _java_round(value: float) -> int:
    """Java's ``Math.round``: half up toward positive infinity."""
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return 2**63 - 1 if value > 0 else -(2**63)
    return max(-(2**63), min(2**63 - 1, math.floor(value + 0.5)))


def _round_decimal(value: decimal.Decimal, places: int) -> decimal.Decimal:
    rounding = decimal.ROUND_HALF_UP if value > 0 else decimal.ROUND_HALF_DOWN
    return value.quantize(
        decimal.Decimal(1).scaleb(-places), rounding=rounding, context=v.DECIMAL_CONTEXT
    )


@_register(
    "ROUND",
    [
        ("INT", "BIGINT"),
        ("BIGINT", "BIGINT"),
        ("DOUBLE", "BIGINT"),
        ("DOUBLE, INT", "DOUBLE"),
        ("DECIMAL", _whole_decimal),
        ("DECIMAL, INT", _same_as(0)),
    ],
)
@null_in_null_out
def _round(value: Any, places: int | None = None) -> Any:
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if places is None:
            return _java_round(value)
        if not math.isfinite(value):
            return value
        return float(_round_decimal(decimal.Decimal(repr(value)), places))
    scale = -int(value.as_tuple().exponent)
    if places is None:
        return _round_decimal(value, 0)
    return _round_decimal(value, places).quantize(
        decimal.Decimal(1).scaleb(-scale), context=v.DECIMAL_CONTEXT
    )


@_register(
    "TRUNC",
    [
        ("INT", "BIGINT"),
        ("BIGINT", "BIGINT"),
        ("DOUBLE", "BIGINT"),
        ("DOUBLE, INT", "DOUBLE"),
        ("DECIMAL", _whole_decimal),
        ("DECIMAL, INT", _same_as(0)),
    ],
)
@null_in_null_out
def _trunc(value: Any, places: int | None = None) -> Any:
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if places is None:
            return (
                int(value)
                if math.isfinite(value)
                else (0 if math.isnan(value) else _java_round(value))
            )
        if not math.isfinite(value):
            return value
        quantum = decimal.Decimal(1).scaleb(-places)
        return float(
            decimal.Decimal(repr(value)).quantize(
                quantum, rounding=decimal.ROUND_DOWN, context=v.DECIMAL_CONTEXT
            )
        )
    scale = -int(value.as_tuple().exponent)
    truncated = value.quantize(
        decimal.Decimal(1).scaleb(-(places or 0)),
        rounding=decimal.ROUND_DOWN,
        context=v.DECIMAL_CONTEXT,
    )
    if places is None:
        return truncated
    return truncated.quantize(decimal.Decimal(1).scaleb(-scale), context=v.DECIMAL_CONTEXT)


def _double_function(name: str, function: Callable[[float], float]) -> None:
    @_register(name, [("DOUBLE", "DOUBLE")])
    @null_in_null_out
    def apply(value: float) -> float:
        return function(value)


def _safe(
    function: Callable[[float], float], overflow: float = math.inf
) -> Callable[[float], float]:
    def call(value: float) -> float:
        try:
            return function(value)
        except ValueError:
            return math.nan
        except OverflowError:
            return overflow

    return call


def _ln(value: float) -> float:
    if value == 0:
        return -math.inf
    if value < 0 or math.isnan(value):
        return math.nan
    return math.log(value)


def _cot(value: float) -> float:
    tangent = math.tan(value)
    return v.java_double_divide(1.0, tangent)


for _name, _function in {
    "SQRT": _safe(math.sqrt),
    "CBRT": _safe(lambda x: math.copysign(abs(x) ** (1 / 3), x) if math.isfinite(x) else x),
    "EXP": _safe(math.exp),
    "LN": _ln,
    "SIN": _safe(math.sin),
    "COS": _safe(math.cos),
    "TAN": _safe(math.tan),
    "ASIN": _safe(math.asin),
    "ACOS": _safe(math.acos),
    "ATAN": _safe(math.atan),
    "SINH": _safe(math.sinh),
    "COSH": _safe(math.cosh),
    "TANH": _safe(math.tanh),
    "COT": _cot,
    "DEGREES": _safe(math.degrees),
    "RADIANS": _safe(math.radians),
}.items():
    _double_function(_name, _function)


@_register("LOG", [("DOUBLE", "DOUBLE"), ("DOUBLE, DOUBLE", "DOUBLE")])
@null_in_null_out
def _log(first: float, second: float | None = None) -> float:
    if second is None:
        return _ln(first)
    if second == 0:
        return -math.inf
    if second < 0 or first <= 0 or first == 1 or math.isnan(first) or math.isnan(second):
        return math.nan
    return math.log(second) / math.log(first)


@_register("POWER", [("DOUBLE, DOUBLE", "DOUBLE")])
@null_in_null_out
def _power(base: float, exponent: float) -> float:
    try:
        result = math.pow(base, exponent)
    except ValueError:
        return math.nan
    except OverflowError:
        return math.inf
    return result


@_register("ATAN2", [("DOUBLE, DOUBLE", "DOUBLE")])
@null_in_null_out
def _atan2(y: float, x: float) -> float:
    return math.atan2(y, x)


@_register("PI", [("", "DOUBLE")])
def _pi() -> float:
    return math.pi


@_register("SIGN", [("INT", "INT"), ("BIGINT", "INT"), ("DOUBLE", "INT")])
@null_in_null_out
def _sign(value: Any) -> int:
    if isinstance(value, float) and math.isnan(value):
        return 0
    return int(value > 0) - int(value < 0)


@_register("RANDOM", [("", "DOUBLE")], deterministic=False)
def _random() -> float:
    return random.random()


def _extreme(values: tuple[Any, ...], largest: bool) -> Any:
    present = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not present:
        return None
    key = (lambda x: bytes(b ^ 0x80 for b in x)) if isinstance(present[0], bytes) else None
    return max(present, key=key) if largest else min(present, key=key)


_COMPARABLE_VARIADIC: list[tuple[str, str | ResultRule]] = [
    ("INT, INT...", "INT"),
    ("BIGINT, BIGINT...", "BIGINT"),
    ("DOUBLE, DOUBLE...", "DOUBLE"),
    ("DECIMAL, DECIMAL...", lambda types, _: _widest_decimal(types)),
    ("STRING, STRING...", "STRING"),
    ("BYTES, BYTES...", "BYTES"),
    ("DATE, DATE...", "DATE"),
    ("TIME, TIME...", "TIME"),
    ("TIMESTAMP, TIMESTAMP...", "TIMESTAMP"),
]


def _widest_decimal(types: list[Any]) -> ex.SqlType:
    result: ex.SqlType = types[0]
    for item in types[1:]:
        if item is not None:
            result = v.widen_decimals(result, item)
    return result


# GREATEST and LEAST have one variadic signature a type, all ranked alike by ksqlDB: a
# call that fits more than one (all nulls; INTEGER with BIGINT, which widen to several)
# is ambiguous there.
@_register("GREATEST", _COMPARABLE_VARIADIC, one_match=True)
def _greatest(*values: Any) -> Any:
    return _extreme(values, largest=True)


@_register("LEAST", _COMPARABLE_VARIADIC, one_match=True)
def _least(*values: Any) -> Any:
    return _extreme(values, largest=False)


_EARTH_RADIUS = {"KM": 6371.0, "KILOMETERS": 6371.0, "KILOMETER": 6371.0, "KILOMETRE": 6371.0,
                 "KILOMETRES": 6371.0, "MI": 3959.0,
                 "MILES": 3959.0, "MILE": 3959.0}  # fmt: skip


@_register(
    "GEO_DISTANCE",
    [
        ("DOUBLE, DOUBLE, DOUBLE, DOUBLE", "DOUBLE"),
        ("DOUBLE, DOUBLE, DOUBLE, DOUBLE, STRING", "DOUBLE"),
    ],
)
def _geo_distance(
    lat1: float | None,
    lon1: float | None,
    lat2: float | None,
    lon2: float | None,
    unit: str | None = "KM",
) -> float | None:
    if lat1 is None or lon1 is None or lat2 is None or lon2 is None:
        return None
    radius = _EARTH_RADIUS.get((unit or "").strip().upper() or "KM")  # none or blank: km
    if radius is None:
        raise v.EvaluationError(
            "GeoDistance function units parameter must be one of miles, mi, or kilometers, km"
        )
    for latitude in (lat1, lat2):
        if not -90 <= latitude <= 90:
            raise v.EvaluationError(
                "valid latitude values for GeoDistance function are in the range of -90 to 90 "
                f"decimal degrees. Got {latitude}"
            )
    for longitude in (lon1, lon2):
        if not -180 <= longitude <= 180:
            raise v.EvaluationError(
                "valid longitude values for GeoDistance function are in the range of -180 to "
                f"+180 decimal degrees. Got {longitude}"
            )
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlambda = math.radians(lat2 - lat1), math.radians(lon2 - lon1)
    a = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * radius * math.asin(math.sqrt(a))


# ---- nulls and conditionals -----------------------------------------------------------


@_register("COALESCE", [("T, T...", "T")])
def _coalesce(*arguments: Any) -> Any:
    return next((a for a in arguments if a is not None), None)


@_register("IFNULL", [("T, T", "T")])
def _ifnull(value: Any, alternative: Any) -> Any:
    return alternative if value is None else value


@_register("NULLIF", [("T, T", "T")])
def _nullif(value: Any, other: Any) -> Any:
    return None if value is not None and value == other else value


@_register("AS_VALUE", [("T", "T")])
def _as_value(value: Any) -> Any:
    return value


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
    result: dict[Any, Any] = {}
    for k, x in collection.items():
        key = keys(k, x)
        if key in result:
            raise v.EvaluationError(f"Duplicate key {key} in the transformed map")
        result[key] = values(k, x)
    return result


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


# ---- arrays ---------------------------------------------------------------------------


def _distinct(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


@_register("ARRAY_CONTAINS", [("ARRAY<T>, T", "BOOLEAN")])
def _array_contains(array: Any, value: Any) -> bool:
    if array is None:
        return False
    return value in array


@_register("ARRAY_DISTINCT", [("ARRAY<T>", "ARRAY<T>")])
@null_in_null_out
def _array_distinct(array: list[Any]) -> list[Any]:
    return _distinct(array)


@_register("ARRAY_EXCEPT", [("ARRAY<T>, ARRAY<T>", "ARRAY<T>")])
@null_in_null_out
def _array_except(left: list[Any], right: list[Any]) -> list[Any]:
    return [item for item in _distinct(left) if item not in right]


@_register("ARRAY_INTERSECT", [("ARRAY<T>, ARRAY<T>", "ARRAY<T>")])
@null_in_null_out
def _array_intersect(left: list[Any], right: list[Any]) -> list[Any]:
    return [item for item in _distinct(left) if item in right]


@_register("ARRAY_UNION", [("ARRAY<T>, ARRAY<T>", "ARRAY<T>")])
@null_in_null_out
def _array_union(left: list[Any], right: list[Any]) -> list[Any]:
    return _distinct(left + right)


@_register("ARRAY_CONCAT", [("ARRAY<T>, ARRAY<T>", "ARRAY<T>")])
def _array_concat(left: Any, right: Any) -> Any:
    if left is None and right is None:
        return None
    return (left or []) + (right or [])


@_register("ARRAY_JOIN", [("ARRAY<T>", "STRING"), ("ARRAY<T>, STRING", "STRING")], takes_types=True)
def _array_join(types: list[Any], array: Any, delimiter: Any = ",") -> Any:
    if array is None:
        return None
    element = types[0].element if isinstance(types[0], ex.ArrayType) else None
    if v.base(element) in ("ARRAY", "MAP", "STRUCT", "BYTES"):
        raise v.EvaluationError(
            f"error: hit element of type {element} which is currently not supported"
        )
    return ("" if delimiter is None else delimiter).join(
        "null" if item is None else _element_text(item) for item in array
    )


def _element_text(item: Any) -> str:
    """Java's ``toString`` of a primitive element (what ARRAY_JOIN writes)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float):
        return v.double_text(item)
    return str(item)


@_register("ARRAY_LENGTH", [("ARRAY<T>", "INT")])
@null_in_null_out
def _array_length(array: list[Any]) -> int:
    return len(array)


def _sort_key(item: Any) -> Any:
    return bytes(b ^ 0x80 for b in item) if isinstance(item, bytes) else item


@_register("ARRAY_MAX", [("ARRAY<T>", "T")])
@null_in_null_out
def _array_max(array: list[Any]) -> Any:
    present = [x for x in array if x is not None]
    return max(present, key=_sort_key) if present else None


@_register("ARRAY_MIN", [("ARRAY<T>", "T")])
@null_in_null_out
def _array_min(array: list[Any]) -> Any:
    present = [x for x in array if x is not None]
    return min(present, key=_sort_key) if present else None


@_register("ARRAY_REMOVE", [("ARRAY<T>, T", "ARRAY<T>")])
def _array_remove(array: Any, victim: Any) -> Any:
    if array is None:
        return None
    return [item for item in array if item != victim]


@_register("ARRAY_SORT", [("ARRAY<T>", "ARRAY<T>"), ("ARRAY<T>, STRING", "ARRAY<T>")])
def _array_sort(array: Any, direction: Any = "ASC") -> Any:
    if array is None or direction is None:
        return None
    way = direction.upper()
    if way not in ("ASC", "ASCENDING", "DESC", "DESCENDING"):
        return None
    present = sorted(
        (x for x in array if x is not None), key=_sort_key, reverse=way.startswith("DESC")
    )
    return present + [None] * (len(array) - len(present))


@_register("SLICE", [("ARRAY<T>, INT, INT", "ARRAY<T>")])
def _slice(array: Any, start: Any, end: Any) -> Any:
    if array is None:
        return None
    first = 0 if start is None else start - 1
    last = len(array) if end is None else end
    if first < 0 or last > len(array) or first > last:
        return None
    return array[first:last]


@_register(
    "GENERATE_SERIES",
    [
        ("INT, INT", "ARRAY<INT>"),
        ("INT, INT, INT", "ARRAY<INT>"),
        ("BIGINT, BIGINT", "ARRAY<BIGINT>"),
        ("BIGINT, BIGINT, INT", "ARRAY<BIGINT>"),
    ],
)
def _generate_series(start: Any, end: Any, step: Any = None) -> list[int]:
    if start is None or end is None:
        raise v.EvaluationError("GENERATE_SERIES start and end cannot be null")
    if step is None:
        step = 1 if end - start > 0 else -1
    if step == 0:
        raise v.EvaluationError("GENERATE_SERIES step cannot be zero")
    difference = end - start
    if (difference > 0 > step) or (difference < 0 < step):
        raise v.EvaluationError("GENERATE_SERIES step has wrong sign")
    return list(range(start, end + (1 if step > 0 else -1), step))


# ---- maps -----------------------------------------------------------------------------


def _entries_type(types: list[Any], _: Any) -> ex.SqlType:
    value_type = types[0].value if isinstance(types[0], ex.MapType) else v.STRING
    return ex.ArrayType(
        ex.StructType((ex.StructField("K", v.STRING), ex.StructField("V", value_type)))
    )


@_register("ENTRIES", [("MAP<STRING,T>, BOOLEAN", _entries_type)])
def _entries(mapping: Any, sort: Any) -> Any:
    if mapping is None:
        return None
    items = sorted(mapping.items()) if sort else list(mapping.items())
    return [{"K": k, "V": x} for k, x in items]


@_register("AS_MAP", [("ARRAY<STRING>, ARRAY<T>", "MAP<STRING,T>")])
@null_in_null_out
def _as_map(keys: list[Any], values: list[Any]) -> dict[Any, Any]:
    return {key: values[index] if index < len(values) else None for index, key in enumerate(keys)}


@_register("MAP_KEYS", [("MAP<K,V>", "ARRAY<K>")])
@null_in_null_out
def _map_keys(mapping: dict[Any, Any]) -> list[Any]:
    return list(mapping)


@_register("MAP_VALUES", [("MAP<K,V>", "ARRAY<V>")])
@null_in_null_out
def _map_values(mapping: dict[Any, Any]) -> list[Any]:
    return list(mapping.values())


@_register("MAP_UNION", [("MAP<K,V>...", "MAP<K,V>")])
def _map_union(*maps: Any) -> Any:
    present = [m for m in maps if m is not None]
    if not present:
        return None
    result: dict[Any, Any] = {}
    for mapping in present:
        result.update(mapping)
    return result


# ---- JSON -----------------------------------------------------------------------------

_NOT_JSON = object()


_JSON_DECODER = json.JSONDecoder(parse_float=decimal.Decimal, parse_constant=lambda name: _NOT_JSON)


def _parse_json(text: str) -> Any:
    """The first JSON value of ``text`` (what follows it is ignored, as Jackson's
    readTree does), numbers with fractions as exact decimals; ``_NOT_JSON`` when there
    is none."""
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        return _NOT_JSON
    try:
        value, _ = _JSON_DECODER.raw_decode(stripped)
    except (ValueError, RecursionError):
        return _NOT_JSON
    return _NOT_JSON if value is _NOT_JSON else value


def _json_text(value: Any) -> str:
    """Jackson's compact JSON text (doubles as Java writes them)."""
    if isinstance(value, float):
        return v.double_text(value) if math.isfinite(value) else f'"{v.double_text(value)}"'
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(_json_text(x) for x in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{json.dumps(str(k))}:{_json_text(x)}" for k, x in value.items()) + "}"
        )
    if isinstance(value, decimal.Decimal):
        return v.decimal_text(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


_JSON_PATH_STEP = re.compile(
    r"\.([^.\[\]]+)|\[\s*(\d+)\s*\]|\[\s*'([^']*)'\s*\]|\[\s*\"([^\"]*)\"\s*\]"
)


def _json_path(path: str) -> list[str | int] | None:
    text = path.strip()
    if not text.startswith("$"):
        return None
    steps: list[str | int] = []
    index = 1
    while index < len(text):
        match = _JSON_PATH_STEP.match(text, index)
        if match is None:
            return None
        if match.group(2) is not None:
            steps.append(int(match.group(2)))
        else:
            steps.append(
                next(g for g in (match.group(1), match.group(3), match.group(4)) if g is not None)
            )
        index = match.end()
    return steps


@_register("EXTRACTJSONFIELD", [("STRING, STRING", "STRING")])
@null_in_null_out
def _extract_json_field(text: str, path: str) -> str | None:
    steps = _json_path(path)
    if steps is None:
        raise v.EvaluationError(f"Invalid JsonPath: {path}")
    node = _parse_json(text)
    if node is _NOT_JSON:
        return None
    for step in steps:
        if isinstance(step, int) and isinstance(node, list) and step < len(node):
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return None
    if node is None:
        return None
    return node if isinstance(node, str) else _json_text(node)


@_register("IS_JSON_STRING", [("STRING", "BOOLEAN")])
def _is_json_string(text: Any) -> bool:
    return text is not None and _parse_json(text) is not _NOT_JSON


@_register("JSON_ARRAY_LENGTH", [("STRING", "INT")])
@null_in_null_out
def _json_array_length(text: str) -> int | None:
    node = _parse_json(text)
    return len(node) if isinstance(node, list) else None


@_register(
    "JSON_ARRAY_CONTAINS",
    [
        ("STRING, BOOLEAN", "BOOLEAN"),
        ("STRING, INT", "BOOLEAN"),
        ("STRING, BIGINT", "BOOLEAN"),
        ("STRING, DOUBLE", "BOOLEAN"),
        ("STRING, STRING", "BOOLEAN"),
    ],
)
def _json_array_contains(text: Any, value: Any) -> bool:
    if text is None:
        return False
    node = _parse_json(text)
    if not isinstance(node, list):
        return False
    for item in node:
        if value is None and item is None:
            return True
        if isinstance(value, bool) or isinstance(item, bool):
            if isinstance(value, bool) and isinstance(item, bool) and value == item:
                return True
        elif isinstance(value, int) and isinstance(item, int) and value == item:
            return True
        elif (
            isinstance(value, float)
            and isinstance(item, float | int | decimal.Decimal)
            and float(item) == value
        ):
            return True
        elif isinstance(value, str) and isinstance(item, str) and value == item:
            return True
    return False


@_register("JSON_KEYS", [("STRING", "ARRAY<STRING>")])
@null_in_null_out
def _json_keys(text: str) -> list[str] | None:
    node = _parse_json(text)
    return list(node) if isinstance(node, dict) else None


@_register("JSON_RECORDS", [("STRING", "MAP<STRING,STRING>")])
@null_in_null_out
def _json_records(text: str) -> dict[str, str] | None:
    node = _parse_json(text)
    if not isinstance(node, dict):
        return None
    return {
        key: value if isinstance(value, str) else _json_text(value) for key, value in node.items()
    }


@_register("JSON_ITEMS", [("STRING", "ARRAY<STRING>")])
@null_in_null_out
def _json_items(text: str) -> list[str] | None:
    node = _parse_json(text)
    if not isinstance(node, list):
        return None
    return [_json_text(item) for item in node]


@_register("JSON_CONCAT", [("STRING...", "STRING")])
def _json_concat(*texts: Any) -> str | None:
    nodes = []
    for text in texts:
        if text is None:
            return None
        node = _parse_json(text)
        if node is _NOT_JSON:
            return None
        nodes.append(node)
    if not nodes:
        return None
    if all(isinstance(n, dict) for n in nodes):
        merged: dict[str, Any] = {}
        for node in nodes:
            merged.update(node)
        return _json_text(merged)
    result = nodes[0] if isinstance(nodes[0], list) else [nodes[0]]
    for node in nodes[1:]:
        result = result + (node if isinstance(node, list) else [node])
    return _json_text(result)


def _value_as_json(value: Any, sql_type: ex.SqlType | None) -> str:
    if value is None:
        return "null"
    kind = v.base(sql_type)
    if kind in ("TIMESTAMP", "DATE", "TIME", "BYTES"):
        return json.dumps(v.to_text(value, sql_type))
    if isinstance(sql_type, ex.ArrayType):
        return "[" + ",".join(_value_as_json(x, sql_type.element) for x in value) + "]"
    if isinstance(sql_type, ex.MapType):
        return (
            "{"
            + ",".join(
                f"{json.dumps(str(k))}:{_value_as_json(x, sql_type.value)}"
                for k, x in value.items()
            )
            + "}"
        )
    if isinstance(sql_type, ex.StructType):
        return (
            "{"
            + ",".join(
                f"{json.dumps(f.name)}:{_value_as_json(value.get(f.name), f.type)}"
                for f in sql_type.fields
            )
            + "}"
        )
    return _json_text(value)


@_register("TO_JSON_STRING", [("ANY", "STRING")], takes_types=True)
def _to_json_string(types: list[Any], value: Any) -> str:
    return _value_as_json(value, types[0])


# ---- dates and times ------------------------------------------------------------------

_MS_PER_DAY = 86_400_000
_UTC = datetime.UTC
_TIME_UNITS_MS = {
    "NANOSECONDS": 1e-6, "MICROSECONDS": 1e-3, "MILLISECONDS": 1, "SECONDS": 1000,
    "MINUTES": 60_000, "HOURS": 3_600_000, "DAYS": _MS_PER_DAY,
}  # fmt: skip
TIME_UNIT_NAMES = frozenset(
    list(_TIME_UNITS_MS) + [name.removesuffix("S") for name in _TIME_UNITS_MS]
)


def _unit_ms(unit: str) -> float:
    name = unit.upper()
    factor = _TIME_UNITS_MS.get(name) or _TIME_UNITS_MS.get(name + "S")
    if factor is None:
        raise v.EvaluationError(f"Unknown time unit: {unit}")
    return factor


def _moment(epoch_ms: int, zone: datetime.tzinfo = _UTC) -> datetime.datetime:
    return (
        datetime.datetime(1970, 1, 1, tzinfo=_UTC) + datetime.timedelta(milliseconds=epoch_ms)
    ).astimezone(zone)


def _epoch_ms(moment: datetime.datetime) -> int:
    return (moment - datetime.datetime(1970, 1, 1, tzinfo=_UTC)) // datetime.timedelta(
        milliseconds=1
    )


def _zone(name: str) -> datetime.tzinfo:
    try:
        return patterns.zone(name)
    except ValueError as error:
        raise v.EvaluationError(f"Invalid time zone: {error}") from None


def _format(moment: datetime.datetime, pattern: str, what: str) -> str:
    try:
        return patterns.format_datetime(moment, pattern)
    except ValueError as error:
        raise v.EvaluationError(
            f"Failed to format {what} with formatter '{pattern}': {error}"
        ) from None


def _parse(
    text: str, pattern: str, zone: datetime.tzinfo, what: str, prefix: bool = False
) -> tuple[datetime.datetime, bool, bool]:
    """``prefix``: PARSE_DATE, PARSE_TIME and STRINGTODATE read with Java's
    SimpleDateFormat, which ignores what follows the pattern."""
    try:
        return patterns.parse_datetime(text, pattern, zone, prefix=prefix)
    except ValueError as error:
        raise v.EvaluationError(
            f"Failed to parse {what} '{text}' with formatter '{pattern}': {error}"
        ) from None


@_register("UNIX_TIMESTAMP", [("", "BIGINT"), ("TIMESTAMP", "BIGINT")], deterministic=False)
def _unix_timestamp(*arguments: Any) -> Any:
    if not arguments:
        return int(datetime.datetime.now(_UTC).timestamp() * 1000)
    return arguments[0]


@_register("UNIX_DATE", [("", "INT"), ("DATE", "INT")], deterministic=False)
def _unix_date(*arguments: Any) -> Any:
    if not arguments:
        return (datetime.datetime.now(_UTC).date() - datetime.date(1970, 1, 1)).days
    return arguments[0]


@_register("FROM_UNIXTIME", [("BIGINT", "TIMESTAMP")])
def _from_unixtime(epoch_ms: Any) -> Any:
    return epoch_ms


@_register("FROM_DAYS", [("INT", "DATE")])
def _from_days(days: Any) -> Any:
    return days


@_register(
    "FORMAT_TIMESTAMP",
    [("TIMESTAMP, STRING", "STRING"), ("TIMESTAMP, STRING, STRING", "STRING")],
)
@null_in_null_out
def _format_timestamp(epoch_ms: int, pattern: str, zone: str = "UTC") -> str:
    return _format(_moment(epoch_ms, _zone(zone)), pattern, "timestamp")


@_register(
    "TIMESTAMPTOSTRING",
    [("BIGINT, STRING", "STRING"), ("BIGINT, STRING, STRING", "STRING")],
)
@null_in_null_out
def _timestamp_to_string(epoch_ms: int, pattern: str, zone: str | None = None) -> str:
    chosen = _zone(zone) if zone is not None else _UTC
    return _format(_moment(epoch_ms, chosen), pattern, "timestamp")


@_register(
    "PARSE_TIMESTAMP",
    [("STRING, STRING", "TIMESTAMP"), ("STRING, STRING, STRING", "TIMESTAMP")],
)
@null_in_null_out
def _parse_timestamp(text: str, pattern: str, zone: str = "UTC") -> int:
    moment, _, _ = _parse(text, pattern, _zone(zone), "timestamp")
    return _epoch_ms(moment)


@_register(
    "STRINGTOTIMESTAMP",
    [("STRING, STRING", "BIGINT"), ("STRING, STRING, STRING", "BIGINT")],
)
@null_in_null_out
def _string_to_timestamp(text: str, pattern: str, zone: str | None = None) -> int:
    chosen = _zone(zone) if zone is not None else _UTC
    moment, _, _ = _parse(text, pattern, chosen, "timestamp")
    return _epoch_ms(moment)


@_register("FORMAT_DATE", [("DATE, STRING", "STRING")])
@null_in_null_out
def _format_date(days: int, pattern: str) -> str:
    return _format(_moment(days * _MS_PER_DAY), pattern, "date")


@_register("DATETOSTRING", [("INT, STRING", "STRING")])
@null_in_null_out
def _date_to_string(days: int, pattern: str) -> str:
    return _format(_moment(days * _MS_PER_DAY), pattern, "date")


def _days_of(text: str, pattern: str) -> int:
    moment, _, has_time = _parse(text, pattern, _UTC, "date", prefix=True)
    if has_time and (moment.hour or moment.minute or moment.second or moment.microsecond):
        raise v.EvaluationError(f"Date format contains time field: {pattern}")
    return (moment.date() - datetime.date(1970, 1, 1)).days


@_register("PARSE_DATE", [("STRING, STRING", "DATE")])
@null_in_null_out
def _parse_date(text: str, pattern: str) -> int:
    return _days_of(text, pattern)


@_register("STRINGTODATE", [("STRING, STRING", "INT")])
@null_in_null_out
def _string_to_date(text: str, pattern: str) -> int:
    return _days_of(text, pattern)


@_register("FORMAT_TIME", [("TIME, STRING", "STRING")])
@null_in_null_out
def _format_time(ms_of_day: int, pattern: str) -> str:
    return _format(_moment(ms_of_day), pattern, "time")


@_register("PARSE_TIME", [("STRING, STRING", "TIME")])
@null_in_null_out
def _parse_time(text: str, pattern: str) -> int:
    moment, has_date, _ = _parse(text, pattern, _UTC, "time", prefix=True)
    if has_date:
        raise v.EvaluationError(f"Time format contains date field: {pattern}")
    return (
        (moment.hour * 60 + moment.minute) * 60 + moment.second
    ) * 1000 + moment.microsecond // 1000


@_register("CONVERT_TZ", [("TIMESTAMP, STRING, STRING", "TIMESTAMP")])
@null_in_null_out
def _convert_tz(epoch_ms: int, from_zone: str, to_zone: str) -> int:
    instant = _moment(epoch_ms)
    source, target = _zone(from_zone), _zone(to_zone)
    offset = (instant.astimezone(target).utcoffset() or datetime.timedelta(0)) - (
        instant.astimezone(source).utcoffset() or datetime.timedelta(0)
    )
    return epoch_ms + offset // datetime.timedelta(milliseconds=1)


def _shift(unit: str, interval: int) -> int:
    return int(_unit_ms(unit) * interval)


@_register("TIMESTAMPADD", [("STRING, INT, TIMESTAMP", "TIMESTAMP")])
@null_in_null_out
def _timestamp_add(unit: str, interval: int, epoch_ms: int) -> int:
    return epoch_ms + _shift(unit, interval)


@_register("TIMESTAMPSUB", [("STRING, INT, TIMESTAMP", "TIMESTAMP")])
@null_in_null_out
def _timestamp_sub(unit: str, interval: int, epoch_ms: int) -> int:
    return epoch_ms - _shift(unit, interval)


@_register("DATEADD", [("STRING, INT, DATE", "DATE")])
@null_in_null_out
def _date_add(unit: str, interval: int, days: int) -> int:
    return v.java_divide(days * _MS_PER_DAY + _shift(unit, interval), _MS_PER_DAY)


@_register("DATESUB", [("STRING, INT, DATE", "DATE")])
@null_in_null_out
def _date_sub(unit: str, interval: int, days: int) -> int:
    return v.java_divide(days * _MS_PER_DAY - _shift(unit, interval), _MS_PER_DAY)


@_register("TIMEADD", [("STRING, INT, TIME", "TIME")])
@null_in_null_out
def _time_add(unit: str, interval: int, ms_of_day: int) -> int:
    return (ms_of_day + _shift(unit, interval)) % _MS_PER_DAY


@_register("TIMESUB", [("STRING, INT, TIME", "TIME")])
@null_in_null_out
def _time_sub(unit: str, interval: int, ms_of_day: int) -> int:
    return (ms_of_day - _shift(unit, interval)) % _MS_PER_DAY


# ---- URLs -----------------------------------------------------------------------------


def _url(text: str) -> urllib.parse.SplitResult | None:
    try:
        parts = urllib.parse.urlsplit(text)
        _ = parts.port
    except ValueError:
        return None
    return parts


@_register("URL_ENCODE_PARAM", [("STRING", "STRING")])
@null_in_null_out
def _url_encode(text: str) -> str:
    return urllib.parse.quote_plus(text, safe="*")


@_register("URL_DECODE_PARAM", [("STRING", "STRING")])
@null_in_null_out
def _url_decode(text: str) -> str:
    return urllib.parse.unquote_plus(text)


@_register("URL_EXTRACT_HOST", [("STRING", "STRING")])
@null_in_null_out
def _url_host(text: str) -> str | None:
    parts = _url(text)
    return parts.hostname if parts is not None and parts.hostname else None


@_register("URL_EXTRACT_PATH", [("STRING", "STRING")])
@null_in_null_out
def _url_path(text: str) -> str | None:
    parts = _url(text)
    return urllib.parse.unquote(parts.path) if parts is not None else None


@_register("URL_EXTRACT_PORT", [("STRING", "INT")])
@null_in_null_out
def _url_port(text: str) -> int | None:
    parts = _url(text)
    return parts.port if parts is not None else None


@_register("URL_EXTRACT_PROTOCOL", [("STRING", "STRING")])
@null_in_null_out
def _url_protocol(text: str) -> str | None:
    parts = _url(text)
    return parts.scheme or None if parts is not None else None


@_register("URL_EXTRACT_QUERY", [("STRING", "STRING")])
@null_in_null_out
def _url_query(text: str) -> str | None:
    parts = _url(text)
    return urllib.parse.unquote(parts.query) or None if parts is not None else None


@_register("URL_EXTRACT_FRAGMENT", [("STRING", "STRING")])
@null_in_null_out
def _url_fragment(text: str) -> str | None:
    parts = _url(text)
    return urllib.parse.unquote(parts.fragment) or None if parts is not None else None


@_register("URL_EXTRACT_PARAMETER", [("STRING, STRING", "STRING")])
@null_in_null_out
def _url_parameter(text: str, name: str) -> str | None:
    parts = _url(text)
    if parts is None:
        return None
    for pair in parts.query.split("&"):
        key, equals, value = pair.partition("=")
        if urllib.parse.unquote_plus(key) == name:
            return urllib.parse.unquote_plus(value) if equals else None
    return None
