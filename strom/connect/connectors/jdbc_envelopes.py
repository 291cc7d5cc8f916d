"""JsonConverter envelopes (``{"schema":...,"payload":...}``) handled a column at a time with
Arrow, for the JDBC sink's PostgreSQL path: ``split_envelopes`` checks that every record
of a column carries one schema text and cuts out the payloads; ``typed_rows`` reads the
payloads with Arrow's JSON reader into typed columns and ``csv_text`` writes those as the
rows of a ``COPY ... (FORMAT csv)``; where Arrow's reader refuses a payload (a number
written as a string...) ``copy_text`` lays the payloads out, numbered in their order, as
the rows of a ``COPY`` in PostgreSQL's text format, for the database to read the JSON.

No Python code runs per record here. Does not own what a schema means or where the rows
go (``jdbc_sink``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

ENVELOPE_START = b'{"schema":'
PAYLOAD_KEY = b',"payload":'
_NEWLINE, _RETURN = ord("\n"), ord("\r")
# COPY's text format: a backslash starts an escape, a newline ends a row, a tab a column.
# A JSON text holds raw ones only as whitespace between tokens.
_COPY_ESCAPES = ((b"\\", b"\\\\"), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t"))


@dataclass(frozen=True)
class Envelopes:
    """A column of envelopes that all carry the schema text ``schema_text``."""

    schema_text: bytes
    payloads: pa.ChunkedArray  # JSON objects; null where the record's value is null


def split_envelopes(values: pa.ChunkedArray) -> Envelopes | None:
    """The payloads of ``values`` when every non-null value is an envelope with the same
    schema text whose payload is a JSON object or ``null`` (both null in the answer);
    None otherwise (the caller decodes record by record). ``values`` stays in its chunks:
    the envelopes are large (the schema text in each), their payloads small."""
    present = pc.drop_null(values)
    if len(present) == 0:
        return None
    first = present[0].as_py()
    split = first.find(PAYLOAD_KEY)
    if not first.startswith(ENVELOPE_START) or split < 0:
        return None
    prefix = first[: split + len(PAYLOAD_KEY)]
    alike = pc.and_(pc.starts_with(values, prefix), pc.ends_with(values, b"}"))
    if not pc.all(pc.fill_null(alike, True)).as_py():
        return None
    payloads = pc.binary_slice(values, len(prefix), -1)
    nulls = pc.equal(payloads, pa.scalar(b"null", pa.binary()))
    payloads = pc.if_else(nulls, pa.scalar(None, pa.binary()), payloads)
    objects = pc.starts_with(payloads, b"{")
    if not pc.all(pc.fill_null(objects, True)).as_py():
        return None  # a payload that is not a struct: decoded and refused record by record
    return Envelopes(prefix[len(ENVELOPE_START) : split], payloads)


def typed_rows(payloads: pa.BinaryArray, schema: pa.Schema) -> pa.Table | None:
    """The non-null payloads as rows of ``schema``'s columns (a field missing from a
    payload is null, one not in ``schema`` ignored); None when Arrow's JSON reader does
    not take them as they are (a value of another JSON type than its column's, a raw line
    break between tokens)."""
    present = pc.drop_null(payloads)
    if len(present) == 0:
        return schema.empty_table()
    text = np.frombuffer(_data(present), np.uint8)
    if (text == _NEWLINE).any() or (text == _RETURN).any():
        return None  # a payload over several lines: one JSON document a line is read here
    lines = pc.binary_join_element_wise(
        present, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary())
    )
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(pa.BufferReader(_data(lines)), parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return table.select(schema.names) if table.num_rows == len(present) else None


def csv_text(rows: pa.Table) -> pa.Buffer:
    """``rows`` as CSV lines without a header: a null is an empty field, an empty string
    ``""``, as PostgreSQL's ``COPY ... (FORMAT csv)`` reads them."""
    out = io.BytesIO()
    pa_csv.write_csv(rows, out, write_options=pa_csv.WriteOptions(include_header=False))
    return pa.py_buffer(out.getbuffer())


def _data(strings: pa.BinaryArray) -> pa.Buffer:
    """The bytes of ``strings`` one after the other (the array's data buffer, sliced)."""
    if len(strings) == 0:
        return pa.py_buffer(b"")
    offsets = np.frombuffer(strings.buffers()[1], np.int32)
    start, end = int(offsets[strings.offset]), int(offsets[strings.offset + len(strings)])
    data = strings.buffers()[2]
    assert data is not None
    return data[start:end]


def copy_text(payloads: pa.BinaryArray, numbers: np.ndarray) -> pa.Buffer:
    """``number<TAB>payload<NEWLINE>`` for each non-null payload, in order: the rows of a
    COPY in text format into ``(BIGINT, JSON)`` columns."""
    chosen = pc.invert(pc.is_null(payloads))
    texts = pc.filter(payloads, chosen)
    for raw, escaped in _COPY_ESCAPES:
        if pc.any(pc.match_substring(texts.cast(pa.binary()), raw.decode())).as_py():
            texts = pc.replace_substring(texts, raw, escaped)
    numbered = pc.filter(pa.array(numbers, pa.int64()), chosen).cast(pa.string())
    lines = pc.binary_join_element_wise(
        numbered.cast(pa.binary()), texts, pa.scalar(b"\t", pa.binary())
    )
    lines = pc.binary_join_element_wise(lines, b"", pa.scalar(b"\n", pa.binary()))
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    return _data(lines)
