"""An aggregation of a stream (``COUNT``, ``SUM``, ``AVG``, ``MIN``, ``MAX`` over numbers,
per group, with or without a TUMBLING window, EMIT CHANGES, no HAVING) run a batch at
a time: the fast path of both of ``strom.ksql.runtime``'s steps for it.

- ``ArrowGrouping`` is the grouping ``mapInArrow``: a batch read with
  ``strom.ksql.arrow_stateless``' JSON reader, WHERE, the GROUP BY expressions and the
  aggregates' arguments as Arrow compute calls, each row's group pickled as the
  record-at-a-time step pickles it (so a group's state is the same whichever step
  keyed its rows). ``GroupPacker`` then packs a task's rows by (group, partition): one
  grouped row holding the rows' times and arguments in offset order (fixed-width
  numpy records), so the aggregation step gets a few rows per group and micro-batch,
  not one per record. A batch it cannot vouch for answers None and runs record at a
  time (its payloads, the rows, are then not read either). Spark drops no grouped
  row as late; the step drops late rows by ksqlDB's rule (their window has closed).
- ``ArrowAggregation`` is the aggregation of one group's rows in a micro-batch: the
  windows and accumulators kept in the same state as ``strom.ksql.operators``' (so
  either may carry on the other's), each row's update computed a window at a time
  with numpy's running sums, counts, minima and maxima (late rows dropped by the same
  rule: the window's end plus the grace at or before the stream time), then the
  projection and the records written on Arrow, each with its source record's
  partition and offset (the order they are written in).

What it gives is what the record-at-a-time operators give, record for record (a
DOUBLE's running MIN or MAX over a NaN or a zero runs row by row, as the operators
compare). Does not own Spark's state store, timers or the query's other shapes.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.ksql import values as v
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


_FUNCTIONS = ("COUNT", "SUM", "AVG", "MIN", "MAX")
_NUMBERS = ("INTEGER", "BIGINT", "DOUBLE")
_COUNTABLE = (*_NUMBERS, "BOOLEAN", "STRING")


def _batch_calls(plan: QueryPlan) -> list[tuple[str, str | None]]:
    """Each aggregate call's function and argument kind (None: ``COUNT(*)``), or
    Unsupported when the plan is not of the batch path's shape."""
    aggregation = plan.aggregation
    if aggregation is None or plan.emit_final or aggregation.having is not None:
        raise Unsupported("the aggregation's shape")
    window = aggregation.window
    if window is not None and window.kind != "TUMBLING":
        raise Unsupported("the window")
    if not aggregation.calls:
        raise Unsupported("no aggregate")
    calls: list[tuple[str, str | None]] = []
    for call in aggregation.calls:
        name = call.name.upper()
        if name == "COUNT" and not call.arguments:
            calls.append((name, None))
            continue
        if name not in _FUNCTIONS or len(call.arguments) != 1 or call.literal_arguments:
            raise Unsupported(f"the aggregate function {name}")
        kind = v.base(call.argument_types[0])
        if kind not in (_COUNTABLE if name == "COUNT" else _NUMBERS):
            raise Unsupported(f"{name} of {kind}")
        calls.append((name, kind))
    return calls


def _layout(calls: list[tuple[str, str | None]]) -> Any:
    """The numpy record of one packed row: its time, its source partition's stream time
    at it, its source partition and offset (the order its update is written in), then
    each argument's value and whether it is not null."""
    import numpy as np

    fields: list[tuple[str, str]] = [("t", "<i8"), ("s", "<i8"), ("p", "<i4"), ("o", "<i8")]
    for index, (_, kind) in enumerate(calls):
        if kind is not None:
            fields += [(f"v{index}", "<f8" if kind == "DOUBLE" else "<i8"), (f"n{index}", "?")]
    return np.dtype(fields)


def compile_grouping(plan: QueryPlan) -> ArrowGrouping | None:
    try:
        return ArrowGrouping(plan)
    except (Unsupported, KsqlStatementError):
        return None


def compile_aggregation(plan: QueryPlan) -> ArrowAggregation | None:
    try:
        return ArrowAggregation(plan)
    except (Unsupported, KsqlStatementError):
        return None


class ArrowGrouping:
    """WHERE, the group and the aggregates' arguments of each row of a batch."""

    def __init__(self, plan: QueryPlan) -> None:
        calls = _batch_calls(plan)
        ArrowAggregation(plan)  # the aggregation step must read these packed rows
        aggregation = plan.aggregation
        assert aggregation is not None
        self.reader = JsonSourceReader(plan)
        expressions = ArrowExpressions(plan.source_scope(), self.reader.available)
        self.where = expressions.compile(plan.where)[0] if plan.where is not None else None
        self.group_by = [expressions.compile(e)[0] for e in aggregation.group_by]
        self.layout = _layout(calls)
        self.arguments = [
            (index, kind, expressions.compile(call.arguments[0])[0])
            for index, ((_, kind), call) in enumerate(zip(calls, aggregation.calls, strict=True))
            if kind is not None
        ]

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
        records = np.empty(rows, dtype=self.layout)
        records["t"] = records["s"] = np.asarray(columns["ROWTIME"], dtype=np.int64)
        records["p"] = partitions = np.asarray(columns["ROWPARTITION"], dtype=np.int32)
        records["o"] = offsets = np.asarray(columns["ROWOFFSET"], dtype=np.int64)
        for index, kind, evaluate in self.arguments:
            argument = _full(evaluate(columns), rows)
            records[f"n{index}"] = np.asarray(pc.is_valid(argument))
            if kind in _NUMBERS:
                number = pa.float64() if kind == "DOUBLE" else pa.int64()
                filled = pc.fill_null(argument.cast(number), pa.scalar(0, number))
                records[f"v{index}"] = np.asarray(filled)
            else:  # COUNT's argument: only whether it is null counts
                records[f"v{index}"] = 0
        return Keyed(groups, partitions, offsets, records)


def stamp_stream_times(keyed: Keyed, running: dict[int, int]) -> None:
    """Each kept row's ``s``: its source partition's stream time at it (the largest time
    of the partition's kept rows up to it, in offset order), running on from
    ``running`` (the task's earlier batches; updated)."""
    import numpy as np

    records, partitions = keyed.records, keyed.partitions
    if not len(partitions):
        return
    first = int(partitions[0])
    if first == partitions.min() == partitions.max():  # a task reads one partition
        found: list[int] = [first]
    else:
        found = np.unique(partitions).tolist()
    for partition in found:
        at: Any = slice(None) if len(found) == 1 else np.flatnonzero(partitions == partition)
        times = records["t"][at]
        stream = np.maximum.accumulate(np.maximum(times, running.get(partition, -(2**63))))
        records["s"][at] = stream
        running[partition] = int(stream[-1])


@dataclass
class Keyed:
    """A batch's kept rows: the pickled group (Arrow binary), partition and offset, and
    the packed record (numpy: ROWTIME in ms ``t``, the arguments)."""

    groups: Any
    partitions: Any
    offsets: Any
    records: Any


class GroupPacker:
    """Keyed rows gathered over a task's batches and packed: one grouped row per
    (group, partition), its ``seq`` ``PACKED``, its ``off`` the first row's offset, its
    ``ts`` the latest row's time (so the watermark is the one the rows would give), its
    payload the rows' packed records in offset order. The aggregation
    step then gets a few rows per group instead of one per record: a row per record
    costs PySpark a Python row and a pandas frame row on its way in."""

    def __init__(self) -> None:
        self.parts: list[Keyed] = []
        self.rows = 0

    def add(self, keyed: Keyed) -> None:
        self.parts.append(keyed)
        self.rows += len(keyed.records)

    def flush(self) -> Any:
        """The packed rows of what was added (then forgotten), as a grouped batch."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        parts, self.parts, self.rows = self.parts, [], 0
        if not parts:
            return None
        groups = pa.chunked_array([k.groups for k in parts], pa.binary()).combine_chunks()
        partitions = np.concatenate([k.partitions for k in parts])
        offsets = np.concatenate([k.offsets for k in parts])
        records = np.concatenate([k.records for k in parts])
        encoded = pc.dictionary_encode(groups)
        codes = np.asarray(encoded.indices, dtype=np.int64)
        order = np.lexsort((offsets, partitions, codes))
        codes, partitions = codes[order], partitions[order]
        offsets, records = offsets[order], records[order]
        changes = (codes[1:] != codes[:-1]) | (partitions[1:] != partitions[:-1])
        starts = np.flatnonzero(np.concatenate(([True], changes))) if len(codes) else codes
        latest = np.maximum.reduceat(records["t"], starts) if len(starts) else starts
        width = records.dtype.itemsize
        bounds = (np.append(starts, len(records)) * width).astype(np.int32)
        payload = pa.Array.from_buffers(
            pa.binary(),
            len(starts),
            [None, pa.py_buffer(bounds.tobytes()), pa.py_buffer(records.tobytes())],
        )
        return pa.RecordBatch.from_arrays(
            [
                pc.take(encoded.dictionary, pa.array(codes[starts])),
                pa.array(partitions[starts], pa.int32()),
                pa.array(offsets[starts], pa.int64()),
                pa.array(np.full(len(starts), PACKED, np.int32)),
                pa.array(latest * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                payload,
            ],
            names=["grp", "part", "off", "seq", "ts", "payload"],
        )


class ArrowAggregation:
    """One group's rows aggregated into its windows, the updates written as records."""

    def __init__(self, plan: QueryPlan) -> None:
        from strom.ksql.operators import window_grace

        self.calls = _batch_calls(plan)
        aggregation = plan.aggregation
        assert aggregation is not None and plan.sink is not None
        if plan.source.kind != "STREAM" or plan.joins or plan.table_functions:
            raise Unsupported("the plan's shape")
        window = aggregation.window
        self.size = window.size_ms if window is not None else None
        self.grace = window_grace(window) if window is not None else 0
        self.layout = _layout(self.calls)
        self.columns = [c.column for c in aggregation.calls]
        self.result_types = [_arrow_type(c.result_type) for c in aggregation.calls]
        self.group_columns = list(aggregation.group_columns)
        self.group_types = [_arrow_type(t) for t in aggregation.group_types]
        expressions = ArrowExpressions(plan.output_scope(), set(aggregation.columns))
        self.writer = JsonSinkWriter(plan, expressions)
        if plan.sink.is_windowed != (window is not None):
            raise Unsupported("the sink's window")

    def records(
        self,
        positions: tuple[Any, Any, Any],
        stamps: Any,
        payloads: Any,
        arguments: Callable[[int, dict[str, Any]], list[Any]],
    ) -> Any:
        """A group's grouped rows, in (partition, offset, seq) order, as packed records
        in that order: a packed row's own, or a record-at-a-time row (its payload the
        pickled row, its time ``stamps``, its place the ``positions``' partition and
        offset) with its arguments by ``arguments``."""
        import numpy as np

        partitions, offsets, seqs = positions
        pieces = []
        for index, (seq, payload) in enumerate(zip(seqs, payloads, strict=True)):
            if seq == PACKED:
                pieces.append(np.frombuffer(payload, dtype=self.layout))
                continue
            record = np.zeros(1, dtype=self.layout)
            record["t"] = stamps[index]
            record["p"], record["o"] = partitions[index], offsets[index]
            unpickled = pickle.loads(payload)
            columns = unpickled[0]
            record["s"] = unpickled[2] if len(unpickled) > 2 else stamps[index]
            for call, (_, kind) in enumerate(self.calls):
                if kind is None:
                    continue
                [value] = arguments(call, columns)
                record[f"n{call}"] = value is not None
                if value is not None and kind in _NUMBERS:
                    record[f"v{call}"] = value
            pieces.append(record)
        if not pieces:
            return np.zeros(0, dtype=self.layout)
        return np.concatenate(pieces)

    def run(self, stored: dict[str, Any], group: tuple[Any, ...], records: Any, floor: int) -> Any:
        """``records`` (the rows' packed records in offset order) aggregated into
        ``stored`` (the group's state, changed in place); the records of the updates
        (None: none).

        Row by row this is the operators' rule; it is computed a window at a time: each
        row's stream time is its source partition's at it (``s``, at least ``floor``,
        the stream time when the micro-batch began), a row whose window has closed by
        then is dropped, and a window's kept rows run on from its stored accumulators."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        windows: dict[int, dict[str, Any]] = stored["windows"]
        size, grace = self.size, self.grace
        times = np.asarray(records["t"], dtype=np.int64)
        if not len(times):
            return None
        stream = np.maximum(np.asarray(records["s"], dtype=np.int64), floor)
        stored["stream_time"] = max(stored["stream_time"], int(stream.max()))
        if size is None:
            starts = np.full(len(times), -1, dtype=np.int64)
        else:
            starts = times - times % size  # numpy's % floors, as Python's
            kept = starts + size + grace > stream  # late: its window has closed
            times, starts, records = times[kept], starts[kept], records[kept]
        rows = len(times)
        results = [_Running(name, kind, rows) for name, kind in self.calls]
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
                initial = [r.initial() for r in results]
                slot = windows[start] = {"end": end, "acc": initial, "ts": int(times[at[0]])}
            slot["acc"] = [
                running.add(at, slot["acc"][index], records[at], index)
                for index, running in enumerate(results)
            ]
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
        for name, kind, running in zip(self.columns, self.result_types, results, strict=True):
            columns[name] = running.array(kind)
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
        written = self.writer.batch(keys, values, timestamps)
        for name, array in positions(records["p"], records["o"]).items():
            written = written.append_column(name, array)
        return written


def positions(partitions: Any, offsets: Any) -> dict[str, Any]:
    """The columns that place output records in the order of the source records that
    made them (``strom.ksql.runtime`` writes them in it): one update a record here."""
    import numpy as np
    import pyarrow as pa

    return {
        "part": pa.array(partitions, pa.int32()),
        "off": pa.array(offsets, pa.int64()),
        "seq": pa.array(np.zeros(len(offsets), np.int64)),
    }


_INT32 = 2**31


class _Running:
    """One aggregate's result after each row, filled a window at a time; its
    accumulator is the one ``strom.ksql.aggregate_functions`` keeps (COUNT and SUM a
    number, AVG (sum, count), MIN and MAX the value or None)."""

    def __init__(self, name: str, kind: str | None, rows: int) -> None:
        import numpy as np

        self.name, self.kind = name, kind
        self.values = np.empty(rows, dtype=np.float64 if self._double_result() else np.int64)
        self.valid = np.ones(rows, dtype=bool)

    def _double_result(self) -> bool:
        return self.name == "AVG" or (self.name != "COUNT" and self.kind == "DOUBLE")

    def initial(self) -> Any:
        if self.name == "COUNT":
            return 0
        zero = 0.0 if self.kind == "DOUBLE" else 0
        if self.name == "SUM":
            return zero
        if self.name == "AVG":
            return (zero, 0)
        return None  # MIN, MAX

    def array(self, arrow_type: Any) -> Any:
        import pyarrow as pa

        mask = None if self.valid.all() else ~self.valid
        return pa.array(self.values, arrow_type, mask=mask)

    def add(self, at: Any, accumulator: Any, records: Any, index: int) -> Any:
        """The window's rows ``at`` (their ``records``) run on from ``accumulator``;
        the accumulator after the last."""
        import numpy as np

        count = len(at)
        if self.kind is None:  # COUNT(*)
            self.values[at] = accumulator + np.arange(1, count + 1, dtype=np.int64)
            return accumulator + count
        valid = records[f"n{index}"]
        if self.name == "COUNT":
            self.values[at] = accumulator + np.cumsum(valid, dtype=np.int64)
            return int(self.values[at[-1]])
        numbers = np.where(valid, records[f"v{index}"], 0)
        if self.name == "SUM":
            totals = self._sums(accumulator, numbers)
            self.values[at] = totals
            return totals[-1].item()
        if self.name == "AVG":
            totals = self._sums(accumulator[0], numbers)
            counts = accumulator[1] + np.cumsum(valid, dtype=np.int64)
            self.values[at] = np.where(
                counts == 0, 0.0, totals.astype(np.float64) / np.maximum(counts, 1)
            )
            return (totals[-1].item(), int(counts[-1]))
        return self._extreme(at, accumulator, records[f"v{index}"], valid)

    def _sums(self, accumulator: Any, numbers: Any) -> Any:
        """Running sums as the operators add (INTEGER wraps at 32 bits, BIGINT at 64:
        modular, so wrapping once at the end is wrapping at each step; a DOUBLE's in
        order, from the accumulator)."""
        import numpy as np

        if self.kind == "DOUBLE":
            return np.add.accumulate(np.concatenate(([float(accumulator)], numbers)))[1:]
        with np.errstate(over="ignore"):
            totals = np.int64(accumulator) + np.cumsum(numbers, dtype=np.int64)
        if self.kind == "INTEGER":
            totals = (totals + _INT32) % (2 * _INT32) - _INT32
        return totals

    def _extreme(self, at: Any, accumulator: Any, numbers: Any, valid: Any) -> Any:
        import numpy as np

        largest = self.name == "MAX"
        double = self.kind == "DOUBLE"
        candidates = numbers[valid]
        if double and (
            np.isnan(candidates).any()
            or (candidates == 0).any()
            or (accumulator is not None and (accumulator != accumulator or accumulator == 0))
        ):  # NaN and signed zeros: compared as the operators compare them, row by row
            for row, number, present in zip(at, numbers.tolist(), valid.tolist(), strict=True):
                if present and (
                    accumulator is None
                    or (number > accumulator if largest else number < accumulator)
                ):
                    accumulator = number
                self.valid[row] = accumulator is not None
                self.values[row] = 0 if accumulator is None else accumulator
            return accumulator
        if double:
            sentinel: Any = -np.inf if largest else np.inf
        else:
            bounds = np.iinfo(np.int64)
            sentinel = bounds.min if largest else bounds.max
        first = sentinel if accumulator is None else accumulator
        step = np.maximum if largest else np.minimum
        filled = np.where(valid, numbers, sentinel)
        running = step.accumulate(np.concatenate(([first], filled)))[1:]
        seen = np.cumsum(valid) > 0 if accumulator is None else np.ones(len(at), dtype=bool)
        self.values[at] = np.where(seen, running, 0)  # a null's slot holds 0, in range
        self.valid[at] = seen
        return running[-1].item() if seen[-1] else None
