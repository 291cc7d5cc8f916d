"""The records of an aggregation's batch path, carried packed out of its
``transformWithStateInPandas`` and unpacked before the sink.

PySpark turns every row a stateful step yields from pandas into Arrow, column by column,
checking each value for null; a group's updates (one a record with EMIT CHANGES) cost
that per record. The aggregation step of ``strom.ksql.runtime`` therefore yields one row
per group and micro-batch whose ``packed`` column holds its records as one Arrow IPC
stream (``pack``), beside the plain rows other paths yield (``packed`` null); the
``mapInArrow`` after it (``unpack``) hands the sink both as records (topic, key, value,
timestamp).

Imports nothing of the project: a Python worker that runs only ``unpack`` starts fast.
Does not own the records' content, the state or the sink.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

RECORD_COLUMNS = ["topic", "key", "value", "timestamp"]
PACKED_RECORDS = 100_000  # records in one packed row at most (a big group's take several)


def pack(records: Any) -> bytes:
    """An Arrow batch of records as the bytes of one IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, records.schema) as writer:
        writer.write_batch(records)
    packed: bytes = sink.getvalue().to_pybytes()
    return packed


def unpack(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` over the aggregation's rows: plain rows as they are, packed rows'
    records unpacked, all as record batches of ``RECORD_COLUMNS``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        packed = batch.column("packed")
        plain = pc.is_null(packed)
        if pc.any(plain).as_py():
            yield batch.filter(plain).select(RECORD_COLUMNS)
        for blob in packed.filter(pc.invert(plain)).to_pylist():
            with pa.ipc.open_stream(blob) as reader:
                for records in reader:
                    yield records.select(RECORD_COLUMNS)
