"""ksqlDB's values in Python and the Java semantics they carry: what the expression
evaluator, the scalar functions and the aggregates share.

Owns the type constants and questions about types (numeric widening as ksqlDB's
``SqlBaseType.canImplicitlyCast``, the DECIMAL a number widens to, the DECIMAL type of a
literal, the common type of a list), Java's integer arithmetic (32- and 64-bit
wrapping, division and remainder truncating toward zero), Java's text of a double
(``Double.toString``) and of a value cast to STRING (``String.valueOf``: lists as
``[a, b]``, maps as ``{k=v}``, structs as ``Struct{F=v}``), ksqlDB's TIMESTAMP, DATE and
TIME text forms (``2020-05-26T23:59:58.000``, partial forms parsed), and CAST between
types (``cast_supported``, ``cast_value``).

Row values: BOOLEAN bool, INTEGER/BIGINT int, DOUBLE float, DECIMAL decimal.Decimal,
STRING str, BYTES bytes, TIMESTAMP int epoch milliseconds, DATE int epoch days, TIME
int milliseconds of the day, ARRAY list, MAP dict, STRUCT dict in the type's field
order, null None. A type may be None where ksqlDB's is the type of a NULL literal.

Does not own expressions (``strom.ksql.evaluation``) or functions.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import math
import re
from collections.abc import Sequence
from typing import Any

from strom.ksql import expressions as ex

BOOLEAN = ex.PrimitiveType("BOOLEAN")
INTEGER = ex.PrimitiveType("INTEGER")
BIGINT = ex.PrimitiveType("BIGINT")
DOUBLE = ex.PrimitiveType("DOUBLE")
STRING = ex.PrimitiveType("STRING")
BYTES = ex.PrimitiveType("BYTES")
DATE = ex.PrimitiveType("DATE")
TIME = ex.PrimitiveType("TIME")
TIMESTAMP = ex.PrimitiveType("TIMESTAMP")

INT_AS_DECIMAL = ex.DecimalType(10, 0)
BIGINT_AS_DECIMAL = ex.DecimalType(19, 0)
_NUMBER_ORDER = {"INTEGER": 0, "BIGINT": 1, "DECIMAL": 2, "DOUBLE": 3}
_TEMPORAL = ("TIMESTAMP", "DATE", "TIME")
_MS_PER_DAY = 86_400_000
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# Quantizing a DECIMAL (precision up to 38, and the scales ROUND or TRUNC ask for) needs
# more digits than Python's default context has (28).
DECIMAL_CONTEXT = decimal.Context(prec=1000)


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit int."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value


def java_hash_map_order(mapping: dict[str, Any]) -> dict[str, Any]:
    """``mapping`` in the order a Java ``HashMap`` made with its size as capacity and
    filled in this order iterates it (ksqlDB's JSON reader makes maps so: functions over
    a map's entries, REDUCE or MAP_KEYS, see them in that order)."""
    size = len(mapping)
    if size < 2:
        return mapping
    table = 1
    while table < size:
        table *= 2
    while size > table * 3 // 4:  # the HashMap grows past three quarters full
        table *= 2

    def bucket(key: str) -> int:
        hashed = _java_string_hash(key)
        return (hashed ^ (hashed >> 16)) & (table - 1)

    return {key: mapping[key] for key in sorted(mapping, key=bucket)}


class EvaluationError(Exception):
    """A value that cannot be computed for one row (ksqlDB logs it and yields null)."""


class ProcessingFailure(Exception):
    """A record the query cannot get past (an aggregate function's error, a timestamp
    it cannot extract under ksql.timestamp.throw.on.invalid): ksqlDB's Kafka Streams
    task stops at it and the query fails with the error."""


def base(sql_type: ex.SqlType | None) -> str:
    """ksqlDB's base type name: a primitive's name, DECIMAL, ARRAY, MAP, STRUCT or NULL."""
    if sql_type is None:
        return "NULL"
    if isinstance(sql_type, ex.PrimitiveType):
        return sql_type.name
    if isinstance(sql_type, ex.DecimalType):
        return "DECIMAL"
    if isinstance(sql_type, ex.ArrayType):
        return "ARRAY"
    if isinstance(sql_type, ex.MapType):
        return "MAP"
    if isinstance(sql_type, ex.StructType):
        return "STRUCT"
    return str(sql_type)


def is_number(sql_type: ex.SqlType | None) -> bool:
    return base(sql_type) in _NUMBER_ORDER


def is_temporal(sql_type: ex.SqlType | None) -> bool:
    return base(sql_type) in _TEMPORAL


def can_widen(source: ex.SqlType | None, target: ex.SqlType | None) -> bool:
    """Whether ``source`` converts implicitly to ``target`` (equal, or a number to a wider
    number; a DECIMAL only into one that holds its digits)."""
    if source is None:
        return True
    if source == target:
        return True
    if not (is_number(source) and is_number(target)):
        return False
    if _NUMBER_ORDER[base(source)] > _NUMBER_ORDER[base(target)]:
        return False
    if isinstance(target, ex.DecimalType):
        have = as_decimal_type(source)
        return (
            have.scale <= target.scale
            and have.precision - have.scale <= target.precision - target.scale
        )
    return True


def as_decimal_type(sql_type: ex.SqlType | None) -> ex.DecimalType:
    """The DECIMAL an INTEGER, BIGINT or DECIMAL widens to without loss."""
    if isinstance(sql_type, ex.DecimalType):
        return sql_type
    if sql_type == INTEGER:
        return INT_AS_DECIMAL
    if sql_type == BIGINT:
        return BIGINT_AS_DECIMAL
    raise EvaluationError(f"Cannot convert {base(sql_type)} to DECIMAL.")


def decimal_type_of(value: decimal.Decimal) -> ex.DecimalType:
    """The DECIMAL type of a literal (ksqlDB's ``DecimalUtil.fromValue``)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    if -1 < value < 1:
        return ex.DecimalType(scale + 1, scale)
    precision = len(digits) + max(exponent, 0)
    return ex.DecimalType(max(precision, scale), scale)


def widen_decimals(left: ex.SqlType, right: ex.SqlType) -> ex.DecimalType:
    """A DECIMAL wide enough for either (ksqlDB's ``DecimalUtil.widen``)."""
    a, b = as_decimal_type(left), as_decimal_type(right)
    whole = max(a.precision - a.scale, b.precision - b.scale)
    scale = max(a.scale, b.scale)
    return ex.DecimalType(whole + scale, scale)


def common_type(types: Sequence[ex.SqlType | None]) -> ex.SqlType | None:
    """The type all of ``types`` convert to (numbers widen, NULL fits all), or raise
    ``ValueError`` naming the two that do not meet; None when all are NULL."""
    result: ex.SqlType | None = None
    for sql_type in types:
        if sql_type is None:
            continue
        if result is None or result == sql_type:
            result = sql_type
        elif is_number(result) and is_number(sql_type):
            order_a, order_b = _NUMBER_ORDER[base(result)], _NUMBER_ORDER[base(sql_type)]
            if base(result) == "DECIMAL" or base(sql_type) == "DECIMAL":
                if max(order_a, order_b) == _NUMBER_ORDER["DOUBLE"]:
                    result = DOUBLE
                else:
                    result = widen_decimals(result, sql_type)
            elif order_b > order_a:
                result = sql_type
        elif base(result) == "STRING" and is_temporal(sql_type):
            result = sql_type
        elif is_temporal(result) and base(sql_type) == "STRING":
            pass
        elif isinstance(result, ex.ArrayType) and isinstance(sql_type, ex.ArrayType):
            element = common_type([result.element, sql_type.element])
            result = ex.ArrayType(element if element is not None else result.element)
        elif isinstance(result, ex.MapType) and isinstance(sql_type, ex.MapType):
            key = common_type([result.key, sql_type.key])
            value = common_type([result.value, sql_type.value])
            result = ex.MapType(key or result.key, value or result.value)
        elif isinstance(result, ex.StructType) and isinstance(sql_type, ex.StructType):
            result = _wider_struct(result, sql_type)
        else:
            raise ValueError(f"{result} and {sql_type}")
    return result


def _wider_struct(first: ex.StructType, second: ex.StructType) -> ex.StructType:
    """Every field of either, in order of first appearance, each of the common type."""
    fields = {f.name: f.type for f in first.fields}
    for field in second.fields:
        have = fields.get(field.name)
        fields[field.name] = (
            field.type if have is None else (common_type([have, field.type]) or have)
        )
    return ex.StructType(tuple(ex.StructField(name, t) for name, t in fields.items()))


# ---- Java's numbers -------------------------------------------------------------------


def wrap32(value: int) -> int:
    return ((value + 2**31) % 2**32) - 2**31


def wrap64(value: int) -> int:
    return ((value + 2**63) % 2**64) - 2**63


def java_divide(left: int, right: int) -> int:
    """Java's ``/`` on integers: truncates toward zero; by zero is an error."""
    if right == 0:
        raise EvaluationError("/ by zero")
    quotient = abs(left) // abs(right)
    return quotient if (left >= 0) == (right >= 0) else -quotient


def java_remainder(left: int, right: int) -> int:
    """Java's ``%`` on integers: the sign of the dividend; by zero is an error."""
    if right == 0:
        raise EvaluationError("/ by zero")
    return left - right * java_divide(left, right)


def java_double_remainder(left: float, right: float) -> float:
    if right == 0 or math.isinf(left) or math.isnan(left) or math.isnan(right):
        return math.nan
    if math.isinf(right):
        return left
    return math.fmod(left, right)


def java_double_divide(left: float, right: float) -> float:
    if right == 0:
        if left == 0 or math.isnan(left):
            return math.nan
        negative = (math.copysign(1.0, left) < 0) != (math.copysign(1.0, right) < 0)
        return -math.inf if negative else math.inf
    return left / right


def double_text(value: float) -> str:
    """Java's ``Double.toString``: ``1.0``, ``0.001``, ``1.0E7``, ``1.0E-4``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    magnitude = abs(value)
    digits_text = repr(magnitude)
    shortest = decimal.Decimal(digits_text)
    sign = "-" if value < 0 else ""
    if 1e-3 <= magnitude < 1e7:
        text = format(shortest, "f")
        if "." not in text:
            text += ".0"
        return sign + text
    if len(shortest.as_tuple().digits) == 1:
        # Java writes at least two digits: the two closest to the exact value (4.9E-324)
        exact = decimal.Decimal(magnitude)
        shortest = exact.quantize(
            decimal.Decimal(1).scaleb(exact.adjusted() - 1), rounding=decimal.ROUND_HALF_EVEN
        )
    _, digits, exponent = shortest.as_tuple()
    assert isinstance(exponent, int)
    digit_text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    mantissa = digit_text[0] + "." + (digit_text[1:] or "0")
    return f"{sign}{mantissa}E{power}"


def decimal_text(value: decimal.Decimal) -> str:
    """Java's ``BigDecimal.toPlainString``."""
    return format(value, "f")


def int_in_range(value: int, sql_type: ex.SqlType) -> bool:
    if sql_type == INTEGER:
        return -(2**31) <= value < 2**31
    return -(2**63) <= value < 2**63


# ---- temporal text --------------------------------------------------------------------


def format_timestamp(epoch_ms: int) -> str:
    moment = _EPOCH + datetime.timedelta(milliseconds=epoch_ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def format_date(epoch_days: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=epoch_days)).isoformat()


def format_time(ms_of_day: int) -> str:
    """Java's ``LocalTime.toString`` of the whole seconds (ksqlDB drops milliseconds)."""
    seconds = ms_of_day // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


_TIMESTAMP_HELP = (
    " Required format is: \"yyyy-MM-dd'T'HH:mm:ss.SSS\", with an optional numeric 4-digit "
    "timezone, for example: '2020-05-26T23:59:58.000' or with tz: "
    "'2020-05-26T23:59:58.000+0200'. A trailing 'Z' instead of tz indicates the zero UTC "
    'offset. Partials are also supported, for example "2020-05-26"'
)
_TIME_PATTERN = "HH:mm:ss.SSS"


def _complete_date(text: str) -> str:
    parts = text.split("-")
    if len(parts) == 1:
        return text + "-01-01"
    if len(parts) == 2:
        return text + "-01"
    return text


def _complete_time(text: str) -> str:
    if len(text) >= len(_TIME_PATTERN):
        return text
    return text + re.sub("[a-zA-Z]", "0", _TIME_PATTERN[len(text) :])


def _zone_offset(text: str) -> datetime.timedelta:
    match = re.fullmatch(r"([+-])(\d{2}):?(\d{2})?(?::?(\d{2}))?", text)
    if match is None:
        raise ValueError(f"Failed to parse timezone '{text}'")
    sign = -1 if match.group(1) == "-" else 1
    hours, minutes = int(match.group(2)), int(match.group(3) or 0)
    seconds = int(match.group(4) or 0)
    return sign * datetime.timedelta(hours=hours, minutes=minutes, seconds=seconds)


def parse_timestamp(text: str) -> int:
    """A TIMESTAMP from ksqlDB's text form, partials allowed (``2020``, ``2020-05``,
    ``2020-05-26T01``), with an optional ``+hhmm`` / ``-hhmm`` zone or ``Z``."""
    try:
        if "T" in text:
            date_part, _, rest = text.partition("T")
            zone = ""
            for marker in "+-":
                if marker in rest:
                    zone = rest[rest.index(marker) :]
                    break
            time_part = rest[: len(rest) - len(zone)] if zone else rest
            time_part = _complete_time(time_part.removesuffix("Z"))
        else:
            date_part, time_part, zone = _complete_date(text), _complete_time(""), ""
        # hour 24 of a day is its end, the next day's midnight, as Java's parser reads it
        end_of_day = time_part == "24:00:00.000"
        if end_of_day:
            time_part = "00:00:00.000"
        moment = datetime.datetime.strptime(f"{date_part}T{time_part}", "%Y-%m-%dT%H:%M:%S.%f")
        if end_of_day:
            moment += datetime.timedelta(days=1)
        if not re.fullmatch(
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}", f"{date_part}T{time_part}"
        ):
            raise ValueError("Text could not be parsed")
        offset = _zone_offset(zone) if zone.strip() else datetime.timedelta(0)
        utc = moment.replace(tzinfo=datetime.UTC) - offset
        return (utc - _EPOCH) // datetime.timedelta(milliseconds=1)
    except ValueError as error:
        raise EvaluationError(
            f"Failed to parse timestamp '{text}': {error}.{_TIMESTAMP_HELP}"
        ) from None


def parse_date(text: str) -> int:
    try:
        day = datetime.date.fromisoformat(_complete_date(text))
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", _complete_date(text)):
            raise ValueError("Text could not be parsed")
    except ValueError as error:
        raise EvaluationError(
            f"Failed to parse date '{text}': {error}. Required format is: \"yyyy-MM-dd\", "
            "for example '2020-05-26'. Partials are also supported, for example '2020-05'"
        ) from None
    return (day - datetime.date(1970, 1, 1)).days


def parse_time(text: str) -> int:
    match = re.fullmatch(r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?", text)
    if (
        match is None
        or int(match.group(1)) > 23
        or int(match.group(2)) > 59
        or int(match.group(3) or 0) > 59
    ):
        raise EvaluationError(
            f"Failed to parse time '{text}': Text '{text}' could not be parsed. Required "
            "format is: \"HH:mm:ss.SSS\", for example: '01:34:20.123' or '01:34:20'. "
            "Partials are also supported, for example '01:34'"
        )
    hours, minutes, seconds = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    fraction = (match.group(4) or "0").ljust(9, "0")
    return ((hours * 60 + minutes) * 60 + seconds) * 1000 + int(fraction) // 1_000_000


# ---- text of values -------------------------------------------------------------------


def to_text(value: Any, sql_type: ex.SqlType | None) -> str | None:
    """A value as CAST(... AS STRING) writes it (Java's ``String.valueOf``)."""
    if value is None:
        return None
    return _java_text(value, sql_type)


def _java_text(value: Any, sql_type: ex.SqlType | None) -> str:
    if value is None:
        return "null"
    kind = base(sql_type)
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "TIMESTAMP":
        return format_timestamp(value)
    if kind == "DATE":
        return format_date(value)
    if kind == "TIME":
        return format_time(value)
    if isinstance(value, float):
        return double_text(value)
    if isinstance(value, decimal.Decimal):
        return decimal_text(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        element = sql_type.element if isinstance(sql_type, ex.ArrayType) else None
        return "[" + ", ".join(_java_text(item, element) for item in value) + "]"
    if isinstance(value, dict) and isinstance(sql_type, ex.StructType):
        types = {f.name: f.type for f in sql_type.fields}
        inner = ",".join(
            f"{name}={_java_text(item, types.get(name))}"
            for name, item in value.items()
            if item is not None
        )
        return "Struct{" + inner + "}"
    if isinstance(value, dict):
        key_type = sql_type.key if isinstance(sql_type, ex.MapType) else None
        value_type = sql_type.value if isinstance(sql_type, ex.MapType) else None
        return (
            "{"
            + ", ".join(
                f"{_java_text(k, key_type)}={_java_text(v, value_type)}" for k, v in value.items()
            )
            + "}"
        )
    return str(value)


# ---- CAST -----------------------------------------------------------------------------

_CASTS = {
    ("BOOLEAN", "STRING"),
    ("INTEGER", "BIGINT"), ("INTEGER", "DECIMAL"), ("INTEGER", "DOUBLE"), ("INTEGER", "STRING"),
    ("BIGINT", "INTEGER"), ("BIGINT", "DECIMAL"), ("BIGINT", "DOUBLE"), ("BIGINT", "STRING"),
    ("DECIMAL", "INTEGER"), ("DECIMAL", "BIGINT"), ("DECIMAL", "DECIMAL"),
    ("DECIMAL", "DOUBLE"), ("DECIMAL", "STRING"),
    ("DOUBLE", "INTEGER"), ("DOUBLE", "BIGINT"), ("DOUBLE", "DECIMAL"), ("DOUBLE", "STRING"),
    ("STRING", "BOOLEAN"), ("STRING", "INTEGER"), ("STRING", "BIGINT"), ("STRING", "DECIMAL"),
    ("STRING", "DOUBLE"), ("STRING", "TIMESTAMP"), ("STRING", "TIME"), ("STRING", "DATE"),
    ("STRING", "BYTES"),
    ("ARRAY", "ARRAY"), ("ARRAY", "STRING"),
    ("MAP", "MAP"), ("MAP", "STRING"),
    ("STRUCT", "STRUCT"), ("STRUCT", "STRING"),
    ("TIMESTAMP", "STRING"), ("TIMESTAMP", "TIME"), ("TIMESTAMP", "DATE"),
    ("DATE", "TIMESTAMP"), ("TIME", "STRING"), ("DATE", "STRING"),
}  # fmt: skip


def cast_supported(source: ex.SqlType | None, target: ex.SqlType) -> bool:
    """Whether ksqlDB casts ``source`` to ``target`` (its ``CastEvaluator``'s table)."""
    if source is None or source == target:
        return True
    if (base(source), base(target)) not in _CASTS:
        return False
    if isinstance(source, ex.ArrayType) and isinstance(target, ex.ArrayType):
        return cast_supported(source.element, target.element)
    if isinstance(source, ex.MapType) and isinstance(target, ex.MapType):
        return cast_supported(source.key, target.key) and cast_supported(source.value, target.value)
    if isinstance(source, ex.StructType) and isinstance(target, ex.StructType):
        have = {f.name: f.type for f in source.fields}
        return all(
            f.name not in have or cast_supported(have[f.name], f.type) for f in target.fields
        )
    return True


def fit_decimal(value: decimal.Decimal, target: ex.DecimalType) -> decimal.Decimal:
    """``value`` at ``target``'s scale, HALF_UP; an error when its whole digits overflow."""
    digits = target.precision - target.scale
    if abs(value) >= decimal.Decimal(10) ** digits:
        raise EvaluationError(
            f"Numeric field overflow: A field with precision {target.precision} and scale "
            f"{target.scale} must round to an absolute value less than 10^{digits}. Got "
            f"{decimal_text(value)}"
        )
    context = decimal.Context(prec=max(target.precision, 1) + 40)
    rounded = value.quantize(
        decimal.Decimal(1).scaleb(-target.scale), rounding=decimal.ROUND_HALF_UP, context=context
    )
    if abs(rounded) >= decimal.Decimal(10) ** digits:
        raise EvaluationError(
            f"Numeric field overflow: A field with precision {target.precision} and scale "
            f"{target.scale} must round to an absolute value less than 10^{digits}. Got "
            f"{decimal_text(rounded)}"
        )
    return rounded


def parse_boolean(text: str) -> bool:
    """ksqlDB's ``SqlBooleans.parseBoolean``: any prefix of true or yes, any case."""
    lowered = text.lower()
    return bool(lowered) and ("true".startswith(lowered) or "yes".startswith(lowered))


def _java_int(text: str, sql_type: ex.SqlType) -> int:
    if not re.fullmatch(r"[+-]?\d+", text):
        raise EvaluationError(f'For input string: "{text}"')
    value = int(text)
    if not int_in_range(value, sql_type):
        raise EvaluationError(f'For input string: "{text}"')
    return value


def _double_to_int(value: float, bits: int) -> int:
    """Java's ``(int)`` / ``(long)`` of a double: truncated, saturated, NaN as 0."""
    if math.isnan(value):
        return 0
    limit: int = 2 ** (bits - 1)
    if math.isinf(value):
        return limit - 1 if value > 0 else -limit
    return max(-limit, min(limit - 1, int(value)))


def cast_value(value: Any, source: ex.SqlType | None, target: ex.SqlType) -> Any:
    """``value`` of ``source`` as ``target``, as ksqlDB's CAST computes it."""
    if value is None or source is None or source == target:
        return value
    to, frm = base(target), base(source)
    if to == "STRING":
        return to_text(value, source)
    if frm == "STRING":
        text = value.strip()
        if to == "BOOLEAN":
            return parse_boolean(text)
        if to in ("INTEGER", "BIGINT"):
            return _java_int(text, target)
        if to == "DOUBLE":
            try:
                number = float(text)
            except ValueError:
                raise EvaluationError(f'For input string: "{text}"') from None
            if math.isinf(number) or math.isnan(number):
                raise EvaluationError(f"Invalid double value: {text}")
            return number
        if to == "DECIMAL":
            assert isinstance(target, ex.DecimalType)
            try:
                parsed = decimal.Decimal(text)
            except decimal.InvalidOperation:
                raise EvaluationError(
                    "Character " + (text[:1] or "array") + " is neither a decimal digit number,"
                    ' decimal point, nor "e" notation exponential mark.'
                ) from None
            return fit_decimal(parsed, target)
        if to == "TIMESTAMP":
            return parse_timestamp(text)
        if to == "DATE":
            return parse_date(text)
        if to == "TIME":
            return parse_time(text)
        if to == "BYTES":
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise EvaluationError(f"Illegal base64 character in '{text}'") from None
    if to == "INTEGER":
        if isinstance(value, float):
            return _double_to_int(value, 32)
        return wrap32(int(value))
    if to == "BIGINT":
        if isinstance(value, float):
            return _double_to_int(value, 64)
        return wrap64(int(value))
    if to == "DOUBLE":
        return float(value)
    if to == "DECIMAL":
        assert isinstance(target, ex.DecimalType)
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                raise EvaluationError(f"Infinite or NaN: {value}")
            # Java's new BigDecimal(double, MathContext(precision)): HALF_UP to the precision
            context = decimal.Context(prec=target.precision, rounding=decimal.ROUND_HALF_UP)
            exact = context.plus(decimal.Decimal(value))
        else:
            exact = decimal.Decimal(value)
        return fit_decimal(exact, target)
    if frm == "TIMESTAMP" and to == "DATE":
        return value // _MS_PER_DAY
    if frm == "TIMESTAMP" and to == "TIME":
        return value % _MS_PER_DAY
    if frm == "DATE" and to == "TIMESTAMP":
        return value * _MS_PER_DAY
    if isinstance(source, ex.ArrayType) and isinstance(target, ex.ArrayType):
        return [cast_value(item, source.element, target.element) for item in value]
    if isinstance(source, ex.MapType) and isinstance(target, ex.MapType):
        return {
            cast_value(k, source.key, target.key): cast_value(v, source.value, target.value)
            for k, v in value.items()
        }
    if isinstance(source, ex.StructType) and isinstance(target, ex.StructType):
        have = {f.name: f.type for f in source.fields}
        return {
            f.name: cast_value(value.get(f.name), have[f.name], f.type) if f.name in have else None
            for f in target.fields
        }
    raise EvaluationError(f"Cast of {source} to {target} is not supported")


def coerce(value: Any, source: ex.SqlType | None, target: ex.SqlType | None) -> Any:
    """An implicit conversion (a number widened, a string read as a time type)."""
    if value is None or source is None or target is None or source == target:
        return value
    if is_number(target) and is_number(source):
        if base(target) == "DOUBLE":
            return float(value)
        if isinstance(target, ex.DecimalType):
            return fit_decimal(decimal.Decimal(value), target)
        return value
    if base(source) == "STRING" and is_temporal(target):
        return cast_value(value, source, target)
    if isinstance(source, ex.ArrayType) and isinstance(target, ex.ArrayType):
        return [coerce(item, source.element, target.element) for item in value]
    if isinstance(source, ex.MapType) and isinstance(target, ex.MapType):
        return {
            coerce(k, source.key, target.key): coerce(v, source.value, target.value)
            for k, v in value.items()
        }
    if isinstance(source, ex.StructType) and isinstance(target, ex.StructType):
        have = {f.name: f.type for f in source.fields}
        return {f.name: coerce(value.get(f.name), have.get(f.name), f.type) for f in target.fields}
    return value


class LambdaType(ex.SqlType):
    """A lambda argument's type as a function's signature sees it: its parameters' types
    and its body's result type."""

    def __init__(self, parameters: tuple[ex.SqlType | None, ...], result: ex.SqlType | None):
        self.parameters = parameters
        self.result = result

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LambdaType)
            and other.parameters == self.parameters
            and other.result == self.result
        )

    def __hash__(self) -> int:
        return hash((self.parameters, self.result))

    def __str__(self) -> str:
        return "LAMBDA"

    def schema_json(self) -> dict[str, Any]:
        raise TypeError("a lambda is not a column type")
