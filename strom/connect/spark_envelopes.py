"""JsonConverter's record values built from Arrow columns, for source tasks on Spark: a
poll's rows go to Spark's Python workers as typed Arrow columns (ten BIGINTs are 80 bytes
a row) and each worker writes the values it builds to Kafka with the ``strom`` batch
writer, instead of the JVM making each row's JSON text with the schema's text before it
(a 670-byte string a row, copied into Arrow for the writer).

Takes the struct schemas whose fields Arrow writes as JsonConverter does without a
per-row Python step (:func:`arrow_writes`): INT8-INT64, BOOLEAN, FLOAT32/FLOAT64 (NaN
and infinities as the strings Spark's ``to_json`` writes), STRING (quotes and backslashes
escaped; a control character is escaped by Python's ``json`` for that column), and
Connect's Timestamp (epoch millis) and Date (epoch days). Floats are written in Arrow's
shortest form with a ``.0`` added to whole numbers (``1.5``, ``3.0``, ``1e+20``), which
reads back as the same double. Any other schema is the runner's JVM path
(``spark_runner.record_frame``). Does not own the writing (``strom.spark.sink``) nor
the rows (the task's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from strom.connect.converters import schema_to_json
from strom.connect.data import (
    BOOLEAN,
    DATE,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    STRUCT,
    TIMESTAMP,
    Schema,
)

if TYPE_CHECKING:
    import pyarrow as pa

_PLAIN = (INT8, INT16, INT32, INT64, BOOLEAN, FLOAT32, FLOAT64, STRING)


def arrow_writes(schema: Schema) -> bool:
    """Whether :class:`EnvelopeWriter` builds this struct's values."""
    return schema.type == STRUCT and all(
        (f.schema.name is None and f.schema.type in _PLAIN)
        or (f.schema.name == TIMESTAMP and f.schema.type == INT64)
        or (f.schema.name == DATE and f.schema.type == INT32)
        for f in schema.fields
    )


class EnvelopeWriter:
    """A ``mapInArrow`` function: the rows of a Spark partition made JsonConverter values
    (with the schema's envelope when ``schemas_enabled``) and written to ``topic`` with
    the ``strom`` batch writer (which fails unless every record is acknowledged); yields
    the count written."""

    def __init__(
        self, topic: str, schema: Schema, schemas_enabled: bool, writer_options: Mapping[str, str]
    ) -> None:
        self.topic = topic
        self.schema = schema
        self.options = {**writer_options, "topic": topic}
        names = [f.name for f in schema.fields]
        self.separators = [
            ("{" if i == 0 else ",") + json.dumps(name) + ":" for i, name in enumerate(names)
        ]
        self.start = ""
        self.end = "}"
        if schemas_enabled:
            schema_text = json.dumps(schema_to_json(schema), separators=(",", ":"))
            self.start = '{"schema":' + schema_text + ',"payload":'
            self.end = "}}"

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.types import BinaryType, StructField, StructType

        from strom.spark.sink import StromBatchWriter

        writer = StromBatchWriter(self.options, StructType([StructField("value", BinaryType())]))
        written = writer.write(self.values(batch) for batch in batches)
        yield pa.RecordBatch.from_arrays([pa.array([written.count], pa.int64())], ["written"])

    def values(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch's records: one ``value`` column of JSON text."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if batch.num_rows == 0 or not self.schema.fields:
            empty = self.start + "{" * bool(self.schema.fields) + self.end
            texts = pa.array([empty] * batch.num_rows, pa.string())
        else:
            parts: list[Any] = [self.start]
            for i, field in enumerate(self.schema.fields):
                parts += [self.separators[i], _json_text(batch.column(i), field.schema)]
            parts.append(self.end)
            texts = pc.binary_join_element_wise(*parts, "")
        return pa.RecordBatch.from_arrays([texts.cast(pa.binary())], ["value"])


def _json_text(column: pa.Array, schema: Schema) -> pa.Array:
    """A column's values as JSON text, null as ``null``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if schema.name == TIMESTAMP:  # epoch millis, floored as Spark's unix_millis
        micros = column.cast(pa.int64())
        millis = pa.array(
            np.floor_divide(micros.to_numpy(zero_copy_only=False), 1000),
            pa.int64(),
            mask=micros.is_null().to_numpy(zero_copy_only=False) if micros.null_count else None,
        )
        text = millis.cast(pa.string())
    elif schema.name == DATE:
        text = column.cast(pa.int32()).cast(pa.string())
    elif schema.type == BOOLEAN:
        text = pc.if_else(column, "true", "false")
    elif schema.type in (FLOAT32, FLOAT64):
        text = column.cast(pa.string())
        whole = pc.invert(pc.match_substring_regex(text, "[.en]"))  # not nan, inf
        text = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
        if pc.any(pc.invert(pc.is_finite(column))).as_py():  # as Spark's to_json writes them
            for special, written in ((math.nan, '"NaN"'), (math.inf, '"Infinity"'),
                                     (-math.inf, '"-Infinity"')):  # fmt: skip
                found = pc.is_nan(column) if special != special else pc.equal(column, special)
                text = pc.if_else(pc.fill_null(found, False), written, text)
    elif schema.type == STRING:
        text = _quoted(column)
    else:
        text = column.cast(pa.string())
    return pc.fill_null(text, "null")


def _quoted(column: pa.Array) -> pa.Array:
    """Strings as JSON string literals (null stays null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pc.any(pc.match_substring_regex(column, "[\\x00-\\x1f]")).as_py():
        return pa.array(
            [None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()],
            pa.string(),
        )
    escaped = pc.replace_substring(column, "\\", "\\\\")
    escaped = pc.replace_substring(escaped, '"', '\\"')
    return pc.binary_join_element_wise('"', escaped, '"', "")
