"""The records of an aggregation's batch path, carried packed out of its
``transformWithStateInPandas`` and unpacked before the sink; a join's records sorted
before the sink (``in_join_order``).

PySpark turns every row a stateful step yields from pandas into Arrow, column by column,
checking each value for null; a group's updates (one a record with EMIT CHANGES) cost
that per record. The aggregation step of ``strom.ksql.runtime`` therefore yields one row
per group and micro-batch whose ``packed`` column holds its records as one Arrow IPC
stream (``pack``), beside the plain rows other paths yield (``packed`` null); the
``mapInArrow`` after it (``unpack``) hands on both as records (topic, key, value,
timestamp, and the source partition, offset and sequence that order them).

Imports nothing of the project: a Python worker that runs only ``unpack`` starts fast.
Does not own the records' content, the state or the sink.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# the records, and the place of the source record that made each (for their order)
RECORD_COLUMNS = ["topic", "key", "value", "timestamp", "part", "off", "seq"]
PACKED_RECORDS = 100_000  # records in one packed row at most (a big group's take several)
ORDERED_BATCH = 100_000  # records in one batch of ``unpack_in_order`` at most
# a join's records, and what orders them: the time, tie order, source partition and
# offset of the record its step took (as each key's step takes them), and a sequence
JOINED_COLUMNS = ["topic", "key", "value", "timestamp", "at", "tie", "part", "off", "seq"]


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
        if "packed" not in batch.schema.names:
            yield batch.select(RECORD_COLUMNS)
            continue
        packed = batch.column("packed")
        plain = pc.is_null(packed)
        if pc.any(plain).as_py():
            yield batch.filter(plain).select(RECORD_COLUMNS)
        for blob in packed.filter(pc.invert(plain)).to_pylist():
            with pa.ipc.open_stream(blob) as reader:
                for records in reader:
                    yield records.select(RECORD_COLUMNS)


def unpack_in_order(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` over a task's rows of the aggregation (plain or packed): all its
    records (topic, key, value, timestamp), sorted by their place (source partition,
    offset and sequence)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = pa.schema(
        [("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
         ("timestamp", pa.int64()), ("part", pa.int32()), ("off", pa.int64()),
         ("seq", pa.int64())]
    )  # fmt: skip
    unpacked = [records.cast(schema) for records in unpack(batches)]
    if not unpacked:
        return
    table = pa.Table.from_batches(unpacked, schema)
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in RECORD_COLUMNS[4:]])
    yield from table.take(order).select(RECORD_COLUMNS[:4]).to_batches(ORDERED_BATCH)


def in_join_order(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` over a task's records of a join (gathered by source partition):
    the records (topic, key, value, timestamp) sorted by the time, tie order and place
    of the records that made them, then their sequence: each key's in the order its
    step made them, and the keys' interleaved as their records are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    received = [batch for batch in batches if batch.num_rows]
    if not received:
        return
    table = pa.Table.from_batches(received)
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in JOINED_COLUMNS[4:]])
    yield from table.take(order).select(JOINED_COLUMNS[:4]).to_batches(ORDERED_BATCH)
