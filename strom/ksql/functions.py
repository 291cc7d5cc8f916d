"""The catalogue of ksqlDB's built-in functions as SHOW FUNCTIONS and DESCRIBE FUNCTION
answer them: each function's name, kind (SCALAR, AGGREGATE, TABLE), category and
signatures, from ksqlDB's function reference.

Owns the catalogue and its two REST shapes (``function_names`` and
``describe_function``). Does not own evaluating functions: scalar functions are
``strom.ksql.scalar_functions``', aggregates ``strom.ksql.aggregate_functions``'; every
name listed here evaluates (table functions are the query runtime's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_AUTHOR = "Confluent"
_VERSION = ""


@dataclass(frozen=True)
class Signature:
    arguments: tuple[tuple[str, str], ...]  # (name, type)
    returns: str
    variadic: bool = False  # the last argument repeats


@dataclass(frozen=True)
class Function:
    name: str
    kind: str  # SCALAR, AGGREGATE, TABLE
    category: str
    description: str
    signatures: tuple[Signature, ...]

    def description_json(self, statement_text: str) -> dict[str, Any]:
        """ksqlDB's ``describe_function`` entity."""
        variants = []
        for signature in self.signatures:
            arguments = [
                {
                    "name": name,
                    "type": arg_type,
                    "description": "",
                    "isVariadic": signature.variadic and index == len(signature.arguments) - 1,
                }
                for index, (name, arg_type) in enumerate(signature.arguments)
            ]
            variants.append(
                {
                    "arguments": arguments,
                    "returnType": signature.returns,
                    "description": self.description,
                }
            )
        return {
            "@type": "describe_function",
            "statementText": statement_text,
            "name": self.name,
            "description": self.description,
            "author": _AUTHOR,
            "version": _VERSION,
            "path": "internal",
            "functions": variants,
            "type": self.kind,
        }


def _sig(spec: str, returns: str, variadic: bool = False) -> Signature:
    """``"STRING input, INT length"`` as a Signature."""
    arguments = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        arg_type, _, name = part.rpartition(" ")
        arguments.append((name, arg_type))
    return Signature(tuple(arguments), returns, variadic)


def _f(name: str, kind: str, category: str, description: str, *signatures: Signature) -> Function:
    return Function(name, kind, category, description, signatures)


S, A, T = "SCALAR", "AGGREGATE", "TABLE"
_STR, _MATH, _DT = "STRING", "MATHEMATICAL", "DATE / TIME"
_ARR, _MAP, _JSON, _COND = "ARRAY", "MAP", "JSON", "CONDITIONAL"
_LAMBDA, _CONV, _OTHER = "LAMBDA", "CONVERSIONS", "OTHER"

FUNCTIONS: tuple[Function, ...] = (
    # aggregates
    _f("COUNT", A, "AGGREGATE", "Counts records.", _sig("", "BIGINT"), _sig("T col", "BIGINT")),
    _f("COUNT_DISTINCT", A, "AGGREGATE", "Returns the approximate number of unique values.",
       _sig("T col", "BIGINT")),
    _f("SUM", A, "AGGREGATE", "Returns the sum of the values.", _sig("INT col", "INT"),
       _sig("BIGINT col", "BIGINT"), _sig("DOUBLE col", "DOUBLE"),
       _sig("DECIMAL col", "DECIMAL")),
    _f("SUM_LIST", A, "AGGREGATE", "Returns the sum of the elements of the lists.",
       _sig("ARRAY<INT> col", "INT"), _sig("ARRAY<BIGINT> col", "BIGINT"),
       _sig("ARRAY<DOUBLE> col", "DOUBLE")),
    _f("AVG", A, "AGGREGATE", "Returns the average of the values.", _sig("INT col", "DOUBLE"),
       _sig("BIGINT col", "DOUBLE"), _sig("DOUBLE col", "DOUBLE")),
    _f("MIN", A, "AGGREGATE", "Returns the minimum value.", _sig("T col", "T")),
    _f("MAX", A, "AGGREGATE", "Returns the maximum value.", _sig("T col", "T")),
    _f("COLLECT_LIST", A, "AGGREGATE", "Gathers the values into an array.",
       _sig("T col", "ARRAY<T>")),
    _f("COLLECT_SET", A, "AGGREGATE", "Gathers the distinct values into an array.",
       _sig("T col", "ARRAY<T>")),
    _f("ATTR", A, "AGGREGATE", "The group's single value, null when it has had several.",
       _sig("T col", "T")),
    _f("EARLIEST_BY_OFFSET", A, "AGGREGATE", "The earliest value by offset.",
       _sig("T col", "T"), _sig("T col, BOOLEAN ignoreNulls", "T"),
       _sig("T col, INT earliestN", "ARRAY<T>")),
    _f("LATEST_BY_OFFSET", A, "AGGREGATE", "The latest value by offset.",
       _sig("T col", "T"), _sig("T col, BOOLEAN ignoreNulls", "T"),
       _sig("T col, INT latestN", "ARRAY<T>")),
    _f("TOPK", A, "AGGREGATE", "The top k values.", _sig("T col, INT k", "ARRAY<T>")),
    _f("TOPKDISTINCT", A, "AGGREGATE", "The distinct top k values.",
       _sig("T col, INT k", "ARRAY<T>")),
    _f("HISTOGRAM", A, "AGGREGATE", "The count of each distinct value.",
       _sig("STRING col", "MAP<STRING, BIGINT>")),
    _f("STDDEV_SAMPLE", A, "AGGREGATE", "The sample standard deviation.",
       _sig("DOUBLE col", "DOUBLE")),
    _f("STDDEV_SAMP", A, "AGGREGATE", "The sample variance (as ksqlDB computes it).",
       _sig("DOUBLE col", "DOUBLE")),
    # table functions
    _f("EXPLODE", T, "TABLE", "Outputs one row per element of the array.",
       _sig("ARRAY<T> input", "T")),
    _f("CUBE_EXPLODE", T, "TABLE", "Outputs every combination of the columns with nulls.",
       _sig("ARRAY<T> input", "ARRAY<T>")),
    # strings
    _f("CONCAT", S, _STR, "Concatenates strings or bytes.",
       _sig("STRING inputs", "STRING", True), _sig("BYTES inputs", "BYTES", True)),
    _f("CONCAT_WS", S, _STR, "Concatenates with a separator.",
       _sig("STRING separator, STRING inputs", "STRING", True)),
    _f("LCASE", S, _STR, "Lower-cases a string.", _sig("STRING input", "STRING")),
    _f("UCASE", S, _STR, "Upper-cases a string.", _sig("STRING input", "STRING")),
    _f("INITCAP", S, _STR, "Capitalizes each word.", _sig("STRING input", "STRING")),
    _f("LEN", S, _STR, "The length of a string or bytes.", _sig("STRING input", "INT"),
       _sig("BYTES input", "INT")),
    _f("TRIM", S, _STR, "Removes leading and trailing spaces.", _sig("STRING input", "STRING")),
    _f("LPAD", S, _STR, "Pads on the left.",
       _sig("STRING input, INT length, STRING padding", "STRING")),
    _f("RPAD", S, _STR, "Pads on the right.",
       _sig("STRING input, INT length, STRING padding", "STRING")),
    _f("SUBSTRING", S, _STR, "A part of a string, positions from 1.",
       _sig("STRING str, INT pos", "STRING"), _sig("STRING str, INT pos, INT length", "STRING")),
    _f("REPLACE", S, _STR, "Replaces every occurrence.",
       _sig("STRING input, STRING old, STRING new", "STRING")),
    _f("INSTR", S, _STR, "The position of a substring.",
       _sig("STRING string, STRING substring", "INT")),
    _f("SPLIT", S, _STR, "Splits at a delimiter.",
       _sig("STRING string, STRING delimiter", "ARRAY<STRING>")),
    _f("SPLIT_TO_MAP", S, _STR, "Splits into a map.",
       _sig("STRING input, STRING entryDelimiter, STRING kvDelimiter", "MAP<STRING, STRING>")),
    _f("MASK", S, _STR, "Masks letters and digits.", _sig("STRING input", "STRING")),
    _f("REGEXP_EXTRACT", S, "REGULAR EXPRESSION", "The first match of a regex.",
       _sig("STRING pattern, STRING string", "STRING")),
    _f("REGEXP_REPLACE", S, "REGULAR EXPRESSION", "Replaces matches of a regex.",
       _sig("STRING input, STRING regex, STRING replacement", "STRING")),
    _f("REGEXP_SPLIT_TO_ARRAY", S, "REGULAR EXPRESSION", "Splits at a regex.",
       _sig("STRING string, STRING regexp", "ARRAY<STRING>")),
    _f("UUID", S, _STR, "A random UUID.", _sig("", "STRING")),
    _f("CHR", S, _STR, "The character of a code point.", _sig("INT decimalCode", "STRING")),
    _f("ENCODE", S, _STR, "Changes a string's encoding.",
       _sig("STRING input, STRING inputEncoding, STRING outputEncoding", "STRING")),
    _f("TO_BYTES", S, _CONV, "A string's bytes.", _sig("STRING string, STRING encoding", "BYTES")),
    _f("FROM_BYTES", S, _CONV, "Bytes as a string.",
       _sig("BYTES bytes, STRING encoding", "STRING")),
    # math
    _f("ABS", S, _MATH, "The absolute value.", _sig("INT col1", "INT"),
       _sig("BIGINT col1", "BIGINT"), _sig("DOUBLE col1", "DOUBLE")),
    _f("CEIL", S, _MATH, "Rounds up.", _sig("DOUBLE col1", "DOUBLE")),
    _f("FLOOR", S, _MATH, "Rounds down.", _sig("DOUBLE col1", "DOUBLE")),
    _f("ROUND", S, _MATH, "Rounds half up.", _sig("DOUBLE val", "BIGINT"),
       _sig("DOUBLE val, INT decimals", "DOUBLE")),
    _f("TRUNC", S, _MATH, "Truncates.", _sig("DOUBLE val", "BIGINT")),
    _f("SQRT", S, _MATH, "The square root.", _sig("DOUBLE col1", "DOUBLE")),
    _f("POWER", S, _MATH, "A power.", _sig("DOUBLE base, DOUBLE exponent", "DOUBLE")),
    _f("EXP", S, _MATH, "e to a power.", _sig("DOUBLE exponent", "DOUBLE")),
    _f("LN", S, _MATH, "The natural logarithm.", _sig("DOUBLE value", "DOUBLE")),
    _f("LOG", S, _MATH, "A logarithm.", _sig("DOUBLE value", "DOUBLE"),
       _sig("DOUBLE base, DOUBLE value", "DOUBLE")),
    _f("SIGN", S, _MATH, "The sign.", _sig("DOUBLE value", "INT")),
    _f("RANDOM", S, _MATH, "A random number in [0, 1).", _sig("", "DOUBLE")),
    _f("GREATEST", S, _MATH, "The greatest value.", _sig("T val, T vals", "T", True)),
    _f("LEAST", S, _MATH, "The least value.", _sig("T val, T vals", "T", True)),
    _f("GEO_DISTANCE", S, _MATH, "The great-circle distance.",
       _sig("DOUBLE lat1, DOUBLE lon1, DOUBLE lat2, DOUBLE lon2, STRING units", "DOUBLE")),
    # dates and times
    _f("UNIX_TIMESTAMP", S, _DT, "Milliseconds since the epoch.", _sig("", "BIGINT"),
       _sig("TIMESTAMP timestamp", "BIGINT")),
    _f("UNIX_DATE", S, _DT, "Days since the epoch.", _sig("", "INT"), _sig("DATE date", "INT")),
    _f("TIMESTAMPTOSTRING", S, _DT, "Formats epoch milliseconds.",
       _sig("BIGINT epochMilli, STRING formatPattern", "STRING"),
       _sig("BIGINT epochMilli, STRING formatPattern, STRING timeZone", "STRING")),
    _f("STRINGTOTIMESTAMP", S, _DT, "Parses into epoch milliseconds.",
       _sig("STRING formattedTimestamp, STRING formatPattern", "BIGINT"),
       _sig("STRING formattedTimestamp, STRING formatPattern, STRING timeZone", "BIGINT")),
    _f("FORMAT_TIMESTAMP", S, _DT, "Formats a TIMESTAMP.",
       _sig("TIMESTAMP timestamp, STRING formatPattern", "STRING")),
    _f("PARSE_TIMESTAMP", S, _DT, "Parses a TIMESTAMP.",
       _sig("STRING formattedTimestamp, STRING formatPattern", "TIMESTAMP")),
    _f("FORMAT_DATE", S, _DT, "Formats a DATE.", _sig("DATE date, STRING formatPattern", "STRING")),
    _f("PARSE_DATE", S, _DT, "Parses a DATE.",
       _sig("STRING formattedDate, STRING formatPattern", "DATE")),
    _f("FORMAT_TIME", S, _DT, "Formats a TIME.", _sig("TIME time, STRING formatPattern", "STRING")),
    _f("PARSE_TIME", S, _DT, "Parses a TIME.",
       _sig("STRING formattedTime, STRING formatPattern", "TIME")),
    _f("FROM_UNIXTIME", S, _DT, "A TIMESTAMP from epoch milliseconds.",
       _sig("BIGINT epochMilli", "TIMESTAMP")),
    _f("DATEADD", S, _DT, "Adds an interval to a DATE.",
       _sig("STRING unit, INT interval, DATE date", "DATE")),
    _f("DATESUB", S, _DT, "Subtracts an interval from a DATE.",
       _sig("STRING unit, INT interval, DATE date", "DATE")),
    _f("TIMESTAMPADD", S, _DT, "Adds an interval to a TIMESTAMP.",
       _sig("STRING unit, INT interval, TIMESTAMP timestamp", "TIMESTAMP")),
    _f("TIMESTAMPSUB", S, _DT, "Subtracts an interval from a TIMESTAMP.",
       _sig("STRING unit, INT interval, TIMESTAMP timestamp", "TIMESTAMP")),
    _f("CONVERT_TZ", S, _DT, "Converts a TIMESTAMP between time zones.",
       _sig("TIMESTAMP timestamp, STRING fromTz, STRING toTz", "TIMESTAMP")),
    # JSON
    _f("EXTRACTJSONFIELD", S, _JSON, "A field of a JSON string by JSONPath.",
       _sig("STRING input, STRING path", "STRING")),
    _f("JSON_ARRAY_LENGTH", S, _JSON, "The length of a JSON array.",
       _sig("STRING input", "INT")),
    _f("JSON_CONCAT", S, _JSON, "Merges JSON values.", _sig("STRING inputs", "STRING", True)),
    _f("JSON_KEYS", S, _JSON, "The keys of a JSON object.",
       _sig("STRING input", "ARRAY<STRING>")),
    _f("JSON_RECORDS", S, _JSON, "The entries of a JSON object.",
       _sig("STRING input", "MAP<STRING, STRING>")),
    _f("IS_JSON_STRING", S, _JSON, "Whether a string is valid JSON.",
       _sig("STRING input", "BOOLEAN")),
    _f("TO_JSON_STRING", S, _JSON, "A value as JSON text.", _sig("T input", "STRING")),
    # arrays and maps
    _f("ARRAY_CONTAINS", S, _ARR, "Whether an array holds a value.",
       _sig("ARRAY<T> array, T val", "BOOLEAN")),
    _f("ARRAY_DISTINCT", S, _ARR, "The distinct elements.", _sig("ARRAY<T> input", "ARRAY<T>")),
    _f("ARRAY_EXCEPT", S, _ARR, "Elements of one array not in another.",
       _sig("ARRAY<T> left, ARRAY<T> right", "ARRAY<T>")),
    _f("ARRAY_INTERSECT", S, _ARR, "Elements in both arrays.",
       _sig("ARRAY<T> left, ARRAY<T> right", "ARRAY<T>")),
    _f("ARRAY_UNION", S, _ARR, "Elements in either array.",
       _sig("ARRAY<T> left, ARRAY<T> right", "ARRAY<T>")),
    _f("ARRAY_JOIN", S, _ARR, "Joins the elements into a string.",
       _sig("ARRAY<T> array, STRING delimiter", "STRING")),
    _f("ARRAY_LENGTH", S, _ARR, "The length of an array.", _sig("ARRAY<T> array", "INT")),
    _f("ARRAY_MAX", S, _ARR, "The greatest element.", _sig("ARRAY<T> array", "T")),
    _f("ARRAY_MIN", S, _ARR, "The least element.", _sig("ARRAY<T> array", "T")),
    _f("ARRAY_REMOVE", S, _ARR, "Removes every occurrence of a value.",
       _sig("ARRAY<T> array, T victim", "ARRAY<T>")),
    _f("ARRAY_SORT", S, _ARR, "Sorts an array.", _sig("ARRAY<T> input", "ARRAY<T>"),
       _sig("ARRAY<T> input, STRING direction", "ARRAY<T>")),
    _f("SLICE", S, _ARR, "A part of an array.",
       _sig("ARRAY<T> list, INT from, INT to", "ARRAY<T>")),
    _f("GENERATE_SERIES", S, _ARR, "A series of numbers.",
       _sig("INT start, INT end", "ARRAY<INT>"),
       _sig("INT start, INT end, INT step", "ARRAY<INT>")),
    _f("AS_MAP", S, _MAP, "A map from arrays of keys and values.",
       _sig("ARRAY<STRING> keys, ARRAY<T> values", "MAP<STRING, T>")),
    _f("MAP_KEYS", S, _MAP, "The keys of a map.", _sig("MAP<K, V> input", "ARRAY<K>")),
    _f("MAP_VALUES", S, _MAP, "The values of a map.", _sig("MAP<K, V> input", "ARRAY<V>")),
    _f("MAP_UNION", S, _MAP, "Merges maps.", _sig("MAP<K, V> maps", "MAP<K, V>", True)),
    _f("ENTRIES", S, _MAP, "A map's entries as structs.",
       _sig("MAP<STRING, T> map, BOOLEAN sorted", "ARRAY<STRUCT<K STRING, V T>>")),
    # lambdas
    _f("TRANSFORM", S, _LAMBDA, "Applies a lambda to each element.",
       _sig("ARRAY<T> array, LAMBDA function", "ARRAY<O>"),
       _sig("MAP<K, V> map, LAMBDA keyFunction, LAMBDA valueFunction", "MAP<K1, V1>")),
    _f("FILTER", S, _LAMBDA, "Keeps the elements a lambda accepts.",
       _sig("ARRAY<T> array, LAMBDA function", "ARRAY<T>"),
       _sig("MAP<K, V> map, LAMBDA function", "MAP<K, V>")),
    _f("REDUCE", S, _LAMBDA, "Folds with a lambda.",
       _sig("ARRAY<T> array, S initialState, LAMBDA function", "S"),
       _sig("MAP<K, V> map, S initialState, LAMBDA function", "S")),
    # conditionals and others
    _f("COALESCE", S, _COND, "The first value that is not null.",
       _sig("T first, T others", "T", True)),
    _f("IFNULL", S, _COND, "A replacement for null.",
       _sig("T expression, T altValue", "T")),
    _f("NULLIF", S, _COND, "Null when the two are equal.", _sig("T expr1, T expr2", "T")),
    _f("URL_EXTRACT_HOST", S, "URL", "The host of a URL.", _sig("STRING input", "STRING")),
    _f("URL_EXTRACT_PATH", S, "URL", "The path of a URL.", _sig("STRING input", "STRING")),
    _f("URL_EXTRACT_PARAMETER", S, "URL", "A query parameter of a URL.",
       _sig("STRING input, STRING paramToFind", "STRING")),
    _f("URL_ENCODE_PARAM", S, "URL", "Encodes for a URL.", _sig("STRING input", "STRING")),
    _f("URL_DECODE_PARAM", S, "URL", "Decodes from a URL.", _sig("STRING input", "STRING")),
    _f("AS_VALUE", S, _OTHER, "The value, copied into the value columns of a result.",
       _sig("T val", "T")),
    # added with the evaluator: the rest of ksqlDB's reference
    _f("ACOS", S, _MATH, "The inverse cosine.", _sig("DOUBLE value", "DOUBLE")),
    _f("ASIN", S, _MATH, "The inverse sine.", _sig("DOUBLE value", "DOUBLE")),
    _f("ATAN", S, _MATH, "The inverse tangent.", _sig("DOUBLE value", "DOUBLE")),
    _f("ATAN2", S, _MATH, "The angle of a point.", _sig("DOUBLE y, DOUBLE x", "DOUBLE")),
    _f("CBRT", S, _MATH, "The cube root.", _sig("DOUBLE value", "DOUBLE")),
    _f("COS", S, _MATH, "The cosine.", _sig("DOUBLE value", "DOUBLE")),
    _f("COSH", S, _MATH, "The hyperbolic cosine.", _sig("DOUBLE value", "DOUBLE")),
    _f("COT", S, _MATH, "The cotangent.", _sig("DOUBLE value", "DOUBLE")),
    _f("DEGREES", S, _MATH, "Radians as degrees.", _sig("DOUBLE value", "DOUBLE")),
    _f("PI", S, _MATH, "The number pi.", _sig("", "DOUBLE")),
    _f("RADIANS", S, _MATH, "Degrees as radians.", _sig("DOUBLE value", "DOUBLE")),
    _f("SIN", S, _MATH, "The sine.", _sig("DOUBLE value", "DOUBLE")),
    _f("SINH", S, _MATH, "The hyperbolic sine.", _sig("DOUBLE value", "DOUBLE")),
    _f("TAN", S, _MATH, "The tangent.", _sig("DOUBLE value", "DOUBLE")),
    _f("TANH", S, _MATH, "The hyperbolic tangent.", _sig("DOUBLE value", "DOUBLE")),
    _f("ARRAY_CONCAT", S, _ARR, "Two arrays one after the other.",
       _sig("ARRAY<T> left, ARRAY<T> right", "ARRAY<T>")),
    _f("ELT", S, _STR, "The n-th of the strings, from 1.",
       _sig("INT n, STRING args", "STRING", True)),
    _f("FIELD", S, _STR, "The position of a string among the others, 0 when absent.",
       _sig("STRING str, STRING args", "INT", True)),
    _f("MASK_KEEP_LEFT", S, _STR, "Masks all but the first characters.",
       _sig("STRING input, INT numChars", "STRING")),
    _f("MASK_KEEP_RIGHT", S, _STR, "Masks all but the last characters.",
       _sig("STRING input, INT numChars", "STRING")),
    _f("MASK_LEFT", S, _STR, "Masks the first characters.",
       _sig("STRING input, INT numChars", "STRING")),
    _f("MASK_RIGHT", S, _STR, "Masks the last characters.",
       _sig("STRING input, INT numChars", "STRING")),
    _f("MD5", S, _STR, "The MD5 hash in hex.", _sig("STRING input", "STRING")),
    _f("REGEXP_EXTRACT_ALL", S, "REGULAR EXPRESSION", "Every match of a regex.",
       _sig("STRING pattern, STRING string", "ARRAY<STRING>")),
    _f("INT_FROM_BYTES", S, _CONV, "An INT from 4 bytes.", _sig("BYTES value", "INT"),
       _sig("BYTES value, STRING byteOrder", "INT")),
    _f("BIGINT_FROM_BYTES", S, _CONV, "A BIGINT from 8 bytes.", _sig("BYTES value", "BIGINT"),
       _sig("BYTES value, STRING byteOrder", "BIGINT")),
    _f("DOUBLE_FROM_BYTES", S, _CONV, "A DOUBLE from 8 bytes.", _sig("BYTES value", "DOUBLE"),
       _sig("BYTES value, STRING byteOrder", "DOUBLE")),
    _f("FROM_DAYS", S, _DT, "A DATE from days since the epoch.", _sig("INT days", "DATE")),
    _f("TIMEADD", S, _DT, "Adds an interval to a TIME.",
       _sig("STRING unit, INT interval, TIME time", "TIME")),
    _f("TIMESUB", S, _DT, "Subtracts an interval from a TIME.",
       _sig("STRING unit, INT interval, TIME time", "TIME")),
    _f("DATETOSTRING", S, _DT, "Formats epoch days.",
       _sig("INT epochDays, STRING formatPattern", "STRING")),
    _f("STRINGTODATE", S, _DT, "Parses into epoch days.",
       _sig("STRING formattedDate, STRING formatPattern", "INT")),
    _f("JSON_ARRAY_CONTAINS", S, _JSON, "Whether a JSON array holds a value.",
       _sig("STRING jsonArray, T val", "BOOLEAN")),
    _f("JSON_ITEMS", S, _JSON, "The items of a JSON array as JSON strings.",
       _sig("STRING input", "ARRAY<STRING>")),
    _f("URL_EXTRACT_FRAGMENT", S, "URL", "The fragment of a URL.", _sig("STRING input", "STRING")),
    _f("URL_EXTRACT_PORT", S, "URL", "The port of a URL.", _sig("STRING input", "INT")),
    _f("URL_EXTRACT_PROTOCOL", S, "URL", "The protocol of a URL.", _sig("STRING input", "STRING")),
    _f("URL_EXTRACT_QUERY", S, "URL", "The query of a URL.", _sig("STRING input", "STRING")),
    _f("CORRELATION", A, "AGGREGATE", "The correlation of two columns.",
       _sig("DOUBLE x, DOUBLE y", "DOUBLE")),
)  # fmt: skip

_BY_NAME = {function.name: function for function in FUNCTIONS}


def find_function(name: str) -> Function | None:
    return _BY_NAME.get(name.upper())


def function_names_json(statement_text: str) -> dict[str, Any]:
    """ksqlDB's ``function_names`` entity (SHOW FUNCTIONS)."""
    return {
        "@type": "function_names",
        "statementText": statement_text,
        "functions": [
            {"name": f.name, "type": f.kind, "category": f.category}
            for f in sorted(FUNCTIONS, key=lambda f: f.name)
        ],
        "warnings": [],
    }
