"""A counting aggregation (``COUNT(*)`` per group, with or without a TUMBLING window,
EMIT CHANGES, no HAVING) run a batch at a time: the fast path of both of
``strom.ksql.runtime``'s steps for it.

- ``ArrowGrouping`` is the grouping ``mapInArrow``: a batch read with
  ``strom.ksql.arrow_stateless``' JSON reader, WHERE and the GROUP BY expressions as
  Arrow compute calls, each row's group pickled as the record-at-a-time step pickles
  it (so a group's state is the same whichever step keyed its rows). ``GroupPacker``
  then packs a task's rows by (group, partition): one grouped row holding the rows'
  times in offset order (the count needs nothing else), so the aggregation step gets
  a few rows per group and micro-batch, not one per record. A batch it cannot vouch
  for answers None and runs record at a time (its payloads, the rows, are then not
  read either). Spark drops a grouped row older than the watermark before the
  aggregation step sees it; a packed row is as old as its latest time, so its older
  rows reach the step, which drops them by ksqlDB's rule (their window has closed).
- ``ArrowCounting`` is the aggregation of one group's rows in a micro-batch: the
  windows and counts kept in the same state as ``strom.ksql.operators``' (so either
  may carry on the other's), each row's update computed in one plain loop (late rows
  dropped by the same rule: the window's end plus the grace at or before the stream
  time), then the projection and the records written on Arrow.

What it gives is what the record-at-a-time operators give, record for record. Does
not own Spark's state store, timers or the query's other shapes.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

from strom.ksql.arrow_stateless import (
    ArrowExpressions,
    Columns,
    JsonSinkWriter,
    JsonSourceReader,
    Unsupported,
    _arrow_type,
    _filtered,
    _full,
)
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.planner import QueryPlan

PACKED = -1  # the ``seq`` of a grouped row that packs a group's rows (``GroupPacker``)


def _counting_only(plan: QueryPlan) -> None:
    aggregation = plan.aggregation
    if aggregation is None or plan.emit_final or aggregation.having is not None:
        raise Unsupported("the aggregation's shape")
    if not aggregation.calls or any(
        c.name.upper() != "COUNT" or c.arguments for c in aggregation.calls
    ):
        raise Unsupported("aggregate functions other than COUNT(*)")
    window = aggregation.window
    if window is not None and window.kind != "TUMBLING":
        raise Unsupported("the window")


def compile_grouping(plan: QueryPlan) -> ArrowGrouping | None:
    try:
        return ArrowGrouping(plan)
    except (Unsupported, KsqlStatementError):
        return None


def compile_counting(plan: QueryPlan) -> ArrowCounting | None:
    try:
        return ArrowCounting(plan)
    except (Unsupported, KsqlStatementError):
        return None


class ArrowGrouping:
    """WHERE and the group of each row of a batch, as the grouped frame's rows."""

    def __init__(self, plan: QueryPlan) -> None:
        _counting_only(plan)
        ArrowCounting(plan)  # the aggregation step must read these rows' empty payloads
        aggregation = plan.aggregation
        assert aggregation is not None
        self.reader = JsonSourceReader(plan)
        expressions = ArrowExpressions(plan.source_scope(), self.reader.available)
        self.where = expressions.compile(plan.where)[0] if plan.where is not None else None
        self.group_by = [expressions.compile(e)[0] for e in aggregation.group_by]

    def run(self, batch: Any) -> Any:
        """The batch's grouped rows, packed (see ``GroupPacker``), or None when the
        batch must be run record at a time."""
        keyed = self.keyed(batch)
        if keyed is None:
            return None
        packer = GroupPacker()
        packer.add(keyed)
        return packer.flush()

    def keyed(self, batch: Any) -> Keyed | None:
        """Each kept row's pickled group, partition, offset and time, or None when the
        batch must be run record at a time."""
        try:
            columns = self.reader.read(batch)
            if columns is None:
                return None
            return self._keyed(_filtered(columns, self.where))
        except Exception:  # noqa: BLE001 - whatever it cannot do, the record path does
            return None

    def _keyed(self, columns: Columns) -> Keyed:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = len(columns["ROWTIME"])
        keys = [_full(g(columns), rows) for g in self.group_by]
        if rows:  # a null in the group: the row is dropped, as ksqlDB drops it
            present = pc.and_(*[pc.is_valid(k) for k in keys]) if len(keys) > 1 else None
            present = pc.is_valid(keys[0]) if present is None else present
            if not pc.all(present).as_py():
                keys = [pc.filter(k, present) for k in keys]
                columns = {name: pc.filter(array, present) for name, array in columns.items()}
                rows = len(columns["ROWTIME"])
        if len(keys) == 1:
            encoded = pc.dictionary_encode(keys[0])
            pickled = pa.array(
                [pickle.dumps((k,)) for k in encoded.dictionary.to_pylist()], pa.binary()
            )
            groups = pc.take(pickled, encoded.indices)
        else:
            known: dict[tuple[Any, ...], bytes] = {}
            pickles = []
            for group in zip(*[k.to_pylist() for k in keys], strict=True):
                found = known.get(group)
                if found is None:
                    found = known[group] = pickle.dumps(group)
                pickles.append(found)
            groups = pa.array(pickles, pa.binary())
        return Keyed(
            groups,
            np.asarray(columns["ROWPARTITION"], dtype=np.int32),
            np.asarray(columns["ROWOFFSET"], dtype=np.int64),
            np.asarray(columns["ROWTIME"], dtype=np.int64),
        )


@dataclass
class Keyed:
    """A batch's kept rows: the pickled group (Arrow binary), partition, offset and
    ROWTIME in ms (numpy)."""

    groups: Any
    partitions: Any
    offsets: Any
    times: Any


class GroupPacker:
    """Keyed rows gathered over a task's batches and packed: one grouped row per
    (group, partition), its ``seq`` ``PACKED``, its ``off`` the first row's offset, its
    ``ts`` the latest row's time (so the watermark is the one the rows would give), its
    payload the rows' times in offset order (little-endian int64s). The aggregation
    step then gets a few rows per group instead of one per record: a row per record
    costs PySpark a Python row and a pandas frame row on its way in."""

    def __init__(self) -> None:
        self.parts: list[Keyed] = []
        self.rows = 0

    def add(self, keyed: Keyed) -> None:
        self.parts.append(keyed)
        self.rows += len(keyed.times)

    def flush(self) -> Any:
        """The packed rows of what was added (then forgotten), as a grouped batch."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        parts, self.parts, self.rows = self.parts, [], 0
        if parts:
            groups = pa.chunked_array([k.groups for k in parts], pa.binary()).combine_chunks()
            partitions = np.concatenate([k.partitions for k in parts])
            offsets = np.concatenate([k.offsets for k in parts])
            times = np.concatenate([k.times for k in parts])
        else:
            groups = pa.array([], pa.binary())
            partitions = np.empty(0, np.int32)
            offsets = times = np.empty(0, np.int64)
        encoded = pc.dictionary_encode(groups)
        codes = np.asarray(encoded.indices, dtype=np.int64)
        order = np.lexsort((offsets, partitions, codes))
        codes, partitions = codes[order], partitions[order]
        offsets, times = offsets[order], times[order]
        starts = np.flatnonzero(
            np.concatenate(
                ([True], (codes[1:] != codes[:-1]) | (partitions[1:] != partitions[:-1]))
            )
        ) if len(codes) else np.empty(0, np.int64)  # fmt: skip
        latest = np.maximum.reduceat(times, starts) if len(starts) else times[:0]
        bounds = np.append(starts, len(times)).astype(np.int32) * 8
        payload = pa.Array.from_buffers(
            pa.binary(),
            len(starts),
            [None, pa.py_buffer(bounds.tobytes()), pa.py_buffer(times.astype("<i8").tobytes())],
        )
        packs = len(starts)
        return pa.RecordBatch.from_arrays(
            [
                pc.take(encoded.dictionary, pa.array(codes[starts])),
                pa.array(partitions[starts], pa.int32()),
                pa.array(offsets[starts], pa.int64()),
                pa.array(np.full(packs, PACKED, np.int32)),
                pa.array(latest * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                payload,
            ],
            names=["grp", "part", "off", "seq", "ts", "payload"],
        )


def packed_times(seqs: Any, stamps: Any, payloads: Any) -> Any:
    """The times (ms, numpy int64) of a group's grouped rows, already in (partition,
    offset, seq) order: a packed row's times, or a record-at-a-time row's own time."""
    import numpy as np

    if not (seqs == PACKED).any():
        return stamps
    pieces = [
        np.frombuffer(payload, dtype="<i8") if seq == PACKED else stamps[i : i + 1]
        for i, (seq, payload) in enumerate(zip(seqs, payloads, strict=True))
    ]
    return np.concatenate(pieces).astype(np.int64, copy=False)


class ArrowCounting:
    """One group's rows counted into its windows, the updates written as records."""

    def __init__(self, plan: QueryPlan) -> None:
        from strom.ksql.operators import DEFAULT_GRACE_MS

        _counting_only(plan)
        aggregation = plan.aggregation
        assert aggregation is not None and plan.sink is not None
        if plan.source.kind != "STREAM" or plan.joins or plan.table_functions:
            raise Unsupported("the plan's shape")
        window = aggregation.window
        self.size = window.size_ms if window is not None else None
        self.grace = (
            DEFAULT_GRACE_MS if window is None or window.grace_ms is None else window.grace_ms
        )
        self.calls = [c.column for c in aggregation.calls]
        self.group_columns = list(aggregation.group_columns)
        self.group_types = [_arrow_type(t) for t in aggregation.group_types]
        expressions = ArrowExpressions(plan.output_scope(), set(aggregation.columns))
        self.writer = JsonSinkWriter(plan, expressions)
        if plan.sink.is_windowed != (window is not None):
            raise Unsupported("the sink's window")

    def run(self, stored: dict[str, Any], group: tuple[Any, ...], times: Any, floor: int) -> Any:
        """``times`` (the rows' ROWTIME in offset order) counted into ``stored`` (the
        group's state, changed in place); the records of the updates (None: none).

        Row by row this is the operators' rule; it is computed a window at a time: each
        row's stream time is the running maximum, a row whose window has closed by then
        is dropped, and a window's kept rows count on from its stored counts."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        windows: dict[int, dict[str, Any]] = stored["windows"]
        size, grace, width = self.size, self.grace, len(self.calls)
        times = np.asarray(times, dtype=np.int64)
        if not len(times):
            return None
        stream = np.maximum.accumulate(np.maximum(times, max(stored["stream_time"], floor)))
        stored["stream_time"] = int(stream[-1])
        if size is None:
            starts = np.full(len(times), -1, dtype=np.int64)
        else:
            starts = times - times % size  # numpy's % floors, as Python's
            kept = starts + size + grace > stream  # late: its window has closed
            times, starts = times[kept], starts[kept]
        rows = len(times)
        counts = np.empty((width, rows), dtype=np.int64)
        stamps = np.empty(rows, dtype=np.int64)
        order = np.argsort(starts, kind="stable")  # each window's rows, in offset order
        ordered = starts[order]
        edges = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), rows]
        for first, last in zip(edges, edges[1:], strict=False):
            if first == last:
                continue
            at = order[first:last]
            start = int(ordered[first])
            slot = windows.get(start)
            if slot is None:
                end = -1 if size is None else start + size
                slot = windows[start] = {"end": end, "acc": [0] * width, "ts": int(times[at[0]])}
            running = np.arange(1, last - first + 1, dtype=np.int64)
            for index in range(width):
                counts[index, at] = slot["acc"][index] + running
            slot["acc"] = [count + last - first for count in slot["acc"]]
            slot_stamps = np.maximum.accumulate(np.maximum(times[at], slot["ts"]))
            stamps[at] = slot_stamps
            slot["ts"] = int(slot_stamps[-1])
        if size is not None:
            ended = stored["stream_time"]
            for start in [s for s, slot in windows.items() if slot["end"] + grace <= ended]:
                del windows[start]
        if not rows:
            return None
        columns: Columns = {
            name: pa.array([value] * rows, kind)
            for name, value, kind in zip(self.group_columns, group, self.group_types, strict=True)
        }
        for index, name in enumerate(self.calls):
            columns[name] = pa.array(counts[index])
        columns["ROWTIME"] = timestamps = pa.array(stamps)
        if size is not None:
            columns["WINDOWSTART"] = pa.array(starts)
            columns["WINDOWEND"] = pa.array(starts + size)
        keys = self.writer.key_bytes(columns, rows)
        if size is not None:
            unique, where = np.unique(starts, return_inverse=True)
            bounds = pa.array([struct.pack(">q", int(s)) for s in unique], pa.binary())
            keys = pc.binary_join_element_wise(
                pc.fill_null(keys, b""), pc.take(bounds, pa.array(where)), b""
            )
        values = self.writer.value_bytes(columns, rows)
        return self.writer.batch(keys, values, timestamps)
