"""A query's operators as plain Python, one record at a time, host-agnostic: the same
code runs a persistent query's records inside Spark's tasks (``strom.ksql.runtime``)
and a push query's in the server (``strom.ksql.push_queries``).

Built from a ``QueryPlan`` (``Operators(plan)`` compiles its expressions):

- ``stateless(row)``: WHERE, PARTITION BY (the key is what the projection selects for
  it), the table functions (EXPLODE, CUBE_EXPLODE: one row a value, several zipped),
  the projection; over a table, an update that the filter drops, and a tombstone,
  give a tombstone for its key (tables are changelogs);
- ``group(row)``: WHERE, then the grouping key and the row, for the aggregation; a
  null grouping key is dropped, as ksqlDB drops it;
- ``TableRegrouping``: over a table, each source key's last grouped row kept, so an
  update gives the undo of the old row (under its old group) and the add of the new;
- ``aggregate(state, group, row, stream_time, sign)``: the row added to (sign ``ADD``) or
  undone from (``UNDO``; ``UNDO_QUIETLY``: no row given, the add of the same record to
  the same group follows) the accumulators of its windows (none; TUMBLING; HOPPING;
  SESSION, sessions merged), late records (their window's end + grace at or before the
  stream time; a session's, the merged session's end + gap + grace before it) dropped; with
  EMIT CHANGES each update gives the window's new row (every update, as
  ``cache.max.bytes.buffering=0``), HAVING that fails a tombstone when the window's
  last row passed (none else);
  ``close_windows(state, group, stream_time, before)``: for EMIT FINAL, one row per
  window once its grace has passed (unless the record that closed it moved the stream
  time past the window's retention, ksqlDB's window store then holding it no more);
  closed windows leave the state;
- ``join_step(state, side, row, stream_time)``: a row of a join's left or right source
  into its key's state: stream-table (the table's row kept, each stream row joined with
  it), table-table (both rows kept, the joined row upserted or deleted as either side
  changes), stream-stream (Kafka Streams 3.x's: each side's records kept while the
  side's window store keeps them, pairs within the window joined, a record that goes
  back in time joined too; an outer join's unmatched record gives a row with the other
  side null at once without GRACE PERIOD or when its window has closed, else
  ``close_joins`` gives it once the stream time passes its window and grace, and drops
  the records the stores no longer keep); ``join_rows`` gives the joined
  rows of any join of a chain (``step``) for the next one, ``finish`` projects the
  last's; ``foreign_key_route`` and ``foreign_key_join``: a foreign-key join's two keyed
  steps (``strom.ksql.join_flow`` puts the steps of a plan together).

The state of a group is a plain picklable dict (the host keeps it: a dict in the
server, Spark's state store in a task); the stream time is the host's (the largest
timestamp seen by the task). An expression that fails to evaluate gives null and calls
``on_error`` with ksqlDB's message (the processing log). Outputs are ``Change``s: key
columns, value columns or None (a tombstone), timestamp, window bounds.

Does not own reading or writing records, or the hosts' threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.ksql import expressions as ex
from strom.ksql.metastore import KsqlStatementError
from strom.ksql.planner import (
    JOINED_SYSTEM_COLUMNS,
    JoinPlan,
    QueryPlan,
    Window,
    side_system_columns,
)
from strom.ksql.readers import Row, parse_timestamp

if TYPE_CHECKING:
    from strom.ksql.evaluation import Scope

DEFAULT_GRACE_MS = 24 * 3_600_000  # ksqlDB's grace for a join without GRACE PERIOD
CUBE_MAX_COLUMNS = 20  # ksqlDB's bound on CUBE_EXPLODE's array (2^20 rows)
ErrorHandler = Callable[[str], None]


def window_grace(window: Window, emit_final: bool = False) -> int:
    """A window's grace: its GRACE PERIOD, else ksqlDB's default for an aggregation's
    window: none with EMIT FINAL (ksqlDB's ``RewrittenAnalysis``), else a day less its
    size (or gap), at least 0 (``StreamAggregateBuilder``)."""
    if window.grace_ms is not None:
        return window.grace_ms
    return 0 if emit_final else max(DEFAULT_GRACE_MS - window.size_ms, 0)


@dataclass
class Change:
    """An output record."""

    key: dict[str, Any]
    value: dict[str, Any] | None  # None: a tombstone
    timestamp: int
    window: tuple[int, int] | None = None
    keyless: bool = False  # written with no key (a stream's null key passed on)
    dropped: bool = False  # its sink TIMESTAMP column gave no valid time: not written


@dataclass
class Joined:
    """A join's row: the joined columns (a tombstone row when a table join's result
    went away), and its key when the join decides it (table-table: the join key; a
    foreign-key join: the left primary key; None when the projection does).

    ``old``: a table-table key join's row before this change (None: there was none), as
    Kafka Streams passes the old value on (the join's sources are materialized): the
    filter after the join gives a tombstone only for a key whose old row passed it."""

    key: Any
    row: Row
    old: dict[str, Any] | None = None
    table: bool = False  # a table-table key join's row: ``old`` is known


class _CompiledJoin:
    """One join of a chain: its plan, its keys compiled, the null columns of each side."""

    def __init__(self, plan: JoinPlan, scope: Any) -> None:
        from strom.ksql.evaluation import compile_expression

        self.plan = plan
        self.left_key = compile_expression(plan.left_key, scope)
        self.right_key = compile_expression(plan.right_key, scope)
        self.nulls = {
            "left": dict.fromkeys(plan.left_columns),
            "right": {
                f"{plan.right_name}_{column}": None
                for column in [
                    *(c.name for c in plan.right.columns),
                    *side_system_columns(plan.right),
                ]
            },
        }


_OUTER_SIDES = {"LEFT": ("left",), "RIGHT": ("right",), "FULL": ("left", "right")}  # null-padded


def _same_window(one: Row, other: Row, session: bool) -> bool:
    """Whether the records of two windowed sources have the same windowed key (their key
    being equal): the same start (a time window's key holds no end), and the same end
    for session windows; records of sources not windowed always do."""
    a, b = one.columns, other.columns
    if "WINDOWSTART" not in a or "WINDOWSTART" not in b:
        return True
    if a["WINDOWSTART"] != b["WINDOWSTART"]:
        return False
    return not session or a.get("WINDOWEND") == b.get("WINDOWEND")


def _ignore(message: str) -> None:
    return None


def reads_only(expression: ex.Expression, scope: Scope, columns: set[str]) -> bool:
    """Whether every column ``expression`` reads is one of ``columns``."""
    from strom.ksql.planner import walk

    for node in walk(expression):
        if isinstance(node, ex.ColumnReference):
            try:
                if scope.resolve(node) not in columns:
                    return False
            except KsqlStatementError:  # a lambda's variable: not a key column
                return False
    return True


class Operators:
    """The compiled operators of one plan."""

    def __init__(self, plan: QueryPlan, on_error: ErrorHandler | None = None) -> None:
        from strom.ksql.evaluation import compile_expression

        self.plan = plan
        self.on_error = on_error or _ignore
        source_scope = plan.source_scope()
        self.where = (
            compile_expression(plan.where, source_scope) if plan.where is not None else None
        )
        output_scope = plan.output_scope()
        self.projection = [
            (p.name, p.namespace, compile_expression(p.expression, output_scope))
            for p in plan.projection
        ]
        self.table_source = plan.source.kind == "TABLE"
        # a stream's key passed on as it is (no PARTITION BY, GROUP BY or join): a null
        # key stays null, whatever its columns (ksqlDB's projection keeps the key object)
        self.key_passes = not (
            self.table_source
            or plan.partition_by is not None
            or plan.aggregation is not None
            or plan.joins
        )
        source_keys = {c.name for c in plan.source.key_columns}
        self.reads_key_only = [
            reads_only(p.expression, output_scope, source_keys) for p in plan.projection
        ]
        self.table_functions = [
            (f.column, f.name, compile_expression(f.argument, source_scope))
            for f in plan.table_functions
        ]
        aggregation = plan.aggregation
        self.functions: list[Any] = []
        self.group_by: list[Any] = []
        self.arguments: list[list[Any]] = []
        self.having = None
        self.window: Window | None = None
        if aggregation is not None:
            from strom.ksql.aggregate_functions import aggregate_function

            self.group_by = [compile_expression(e, source_scope) for e in aggregation.group_by]
            for call in aggregation.calls:
                function = aggregate_function(
                    call.name,
                    list(call.argument_types),
                    list(call.literal_arguments),
                    call.collect_limit,
                )
                assert function is not None  # the planner found it
                self.functions.append(function)
                self.arguments.append([compile_expression(a, source_scope) for a in call.arguments])
            if aggregation.having is not None:
                self.having = compile_expression(aggregation.having, output_scope)
            self.window = aggregation.window
        self.timestamp_column = plan.sink.timestamp_column if plan.sink is not None else None
        self.timestamp_format = plan.sink.timestamp_format if plan.sink is not None else None
        self.join = plan.join
        self.join_steps = [_CompiledJoin(join, source_scope) for join in plan.joins]

    # ---- evaluation helpers
    def _evaluate(self, compiled: Any, row: dict[str, Any]) -> Any:
        return compiled.evaluate(row, self.on_error)

    def _passes(self, row: dict[str, Any]) -> bool:
        return self.where is None or self._evaluate(self.where, row) is True

    def project(
        self, row: dict[str, Any], timestamp: int, window: tuple[int, int] | None
    ) -> Change:
        key: dict[str, Any] = {}
        value: dict[str, Any] = {}
        for name, namespace, compiled in self.projection:
            (key if namespace == "KEY" else value)[name] = self._evaluate(compiled, row)
        change = Change(key, value, timestamp, window)
        if self.timestamp_column is not None:
            found = value.get(self.timestamp_column, key.get(self.timestamp_column))
            if isinstance(found, str):  # the sink's TIMESTAMP_FORMAT reads it
                try:
                    found = parse_timestamp(found, self.timestamp_format or "")
                except ValueError:
                    found = -1
            if isinstance(found, int) and not isinstance(found, bool):
                change.timestamp = found
                # ksqlDB's sink cannot take a time before the epoch (or one that does not
                # parse) from the column: the record is not written
                change.dropped = found < 0
        return change

    def _null_row(self, row: Row, window: tuple[int, int] | None) -> list[Change]:
        """A stream record whose value is null: dropped by WHERE and the table functions,
        else passed on as a null value, keyed by what the key columns alone give (a
        PARTITION BY of other columns: a null key), as ksqlDB's projection passes it."""
        if self.where is not None or self.table_functions:
            return []
        columns = row.columns
        key = {
            name: self._evaluate(compiled, columns) if reads_key else None
            for (name, namespace, compiled), reads_key in zip(
                self.projection, self.reads_key_only, strict=True
            )
            if namespace == "KEY"
        }
        return [Change(key, None, row.timestamp, window)]

    def _tombstone(self, row: dict[str, Any], window: tuple[int, int] | None) -> Change:
        key = {
            name: self._evaluate(compiled, row)
            for name, namespace, compiled in self.projection
            if namespace == "KEY"
        }
        return Change(key, None, int(row.get("ROWTIME") or 0), window)

    @staticmethod
    def _window_of(row: dict[str, Any]) -> tuple[int, int] | None:
        if row.get("WINDOWSTART") is not None:  # a windowed source's null key has none
            return int(row["WINDOWSTART"]), int(row["WINDOWEND"])
        return None

    # ---- stateless
    def stateless(self, row: Row, stream_time: int | None = None) -> list[Change]:
        """The row's outputs; under a sink's TIMESTAMP column a null value is stamped
        with ``stream_time`` (the task's, this row's included), as ksqlDB's sink stamps
        a record it cannot take the column from."""
        changes = self._stateless(row)
        if row.keyless and self.key_passes:
            for change in changes:
                change.keyless = True
        if self.timestamp_column is not None and stream_time is not None:
            for change in changes:
                if change.value is None:
                    change.timestamp = stream_time
        return changes

    def _stateless(self, row: Row) -> list[Change]:
        columns = row.columns
        window = self._window_of(columns)
        if row.tombstone:
            if self.table_source:
                return [self._tombstone(columns, window)]
            return self._null_row(row, window)
        if not self._passes(columns):
            return [self._tombstone(columns, window)] if self.table_source else []
        if self.table_functions:
            projected = [self.project(c, row.timestamp, window) for c in self._exploded(columns)]
            return [c for c in projected if not c.dropped]
        change = self.project(columns, row.timestamp, window)
        return [] if change.dropped else [change]

    # ---- table functions
    def _exploded(self, columns: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows the table functions make of one row: as many as the longest of their
        outputs, the shorter ones null past their end (ksqlDB zips them)."""
        outputs: list[tuple[str, list[Any]]] = []
        for column, name, compiled in self.table_functions:
            value = self._evaluate(compiled, columns)
            if value is None:
                outputs.append((column, []))
            elif name == "CUBE_EXPLODE":
                outputs.append((column, self._cube(list(value))))
            else:
                outputs.append((column, list(value)))
        longest = max(len(values) for _, values in outputs)
        return [
            {**columns, **{c: values[i] if i < len(values) else None for c, values in outputs}}
            for i in range(longest)
        ]

    def _cube(self, values: list[Any]) -> list[list[Any]]:
        """CUBE_EXPLODE: every combination of the values and nulls (2^n rows; a null value
        has only one), in ksqlDB's order."""
        size = len(values)
        if size > CUBE_MAX_COLUMNS:
            self.on_error(f"cube_explode: too many columns ({size}); max is {CUBE_MAX_COLUMNS}")
            return []
        present = 0
        for index, value in enumerate(values):
            if value is not None:
                present |= 1 << (size - 1 - index)
        rows = []
        for mask in range(1 << size):
            if mask & present != mask:
                continue  # a duplicate of a row with a null there already
            rows.append([values[i] if mask & (1 << (size - 1 - i)) else None for i in range(size)])
        return rows

    # ---- joins
    def stream_key(self, row: Row, step: int = 0) -> Any:
        """The join key of a left row (None: it joins nothing)."""
        join = self.join_steps[step]
        return self._evaluate(join.left_key, join.plan.prefixed("left", row.columns))

    def table_key(self, row: Row, step: int = 0) -> Any:
        """The join key of a right row."""
        join = self.join_steps[step]
        return self._evaluate(join.right_key, join.plan.prefixed("right", row.columns))

    def key_of(self, side: str, row: Row, step: int = 0) -> Any:
        return self.stream_key(row, step) if side == "left" else self.table_key(row, step)

    def _joined_row(self, left: Row | None, right: Row | None, step: int = 0) -> Row:
        join = self.join_steps[step]
        columns = dict(join.nulls["left"])
        if left is not None:
            columns.update(join.plan.prefixed("left", left.columns))
        columns.update(
            join.nulls["right"] if right is None else join.plan.prefixed("right", right.columns)
        )
        if left is None and right is not None:  # the row's time (window) is the right's
            for system in JOINED_SYSTEM_COLUMNS:
                if system in right.columns:
                    columns[system] = right.columns[system]
        return Row(columns)

    def joined(self, row: Row, table_row: Row | None, step: int = 0) -> list[Change]:
        """A stream row joined with the table's row for its key (None: none there)."""
        return [c for j in self._lookup(row, table_row, step) for c in self.finish(j)]

    def _lookup(self, row: Row, table_row: Row | None, step: int, key: Any = None) -> list[Joined]:
        if table_row is None and self.join_steps[step].plan.kind == "INNER":
            return []
        return [Joined(key, self._joined_row(row, table_row, step))]

    def join_step(
        self,
        state: dict[str, Any],
        side: str,
        row: Row,
        stream_time: int,
        step: int = 0,
        observed: dict[str, int] | None = None,
    ) -> list[Change]:
        """A row of ``side`` ("left" or "right") into its key's join ``state`` (changed
        in place); the joined rows it gives, projected (the last join of a chain)."""
        joined = self.join_rows(state, side, row, stream_time, step, observed=observed)
        return [c for j in joined for c in self.finish(j)]

    def join_rows(
        self,
        state: dict[str, Any],
        side: str,
        row: Row,
        stream_time: int,
        step: int = 0,
        key: Any = None,
        observed: dict[str, int] | None = None,
    ) -> list[Joined]:
        """A row of ``side`` into its key's join ``state`` (changed in place); the joined
        rows it gives (a table-table join's deleted row as a tombstone row holding the
        last columns). ``key``: the join key (computed when not given). ``stream_time``:
        the time both sides of the join have reached; ``observed`` (stream-stream): the
        largest time each side's records have reached, across keys, as far as the host
        knows (the key's own records count too)."""
        join = self.join_steps[step].plan
        from_stream = join.shape == "stream-stream" or (
            join.shape == "stream-table" and side == "left"
        )
        if row.tombstone and from_stream:
            return []  # a stream's null value joins nothing, as Kafka Streams skips it
        if key is None:
            key = self.key_of(side, row, step)
        if join.shape == "stream-table":
            if side == "right":
                state["right"] = None if row.tombstone else row
                return []
            return self._lookup(row, state.get("right"), step, key)
        if join.shape == "table-table":
            return self._table_join(state, side, row, step, key)
        return self._stream_join(state, side, row, stream_time, step, key, observed)

    def finish(self, joined: Joined) -> list[Change]:
        """A row of the last join (of a query without aggregation) as its output: WHERE,
        the projection; keyed by the join key (whichever side's column the projection
        names for it: an outer join's missing side has it too)."""
        last = self.join_steps[-1].plan
        row = joined.row
        if last.synthetic_key is not None:  # ksqlDB's ROWKEY: the join's key
            row.columns[last.synthetic_key] = joined.key
        if (
            joined.table
            and self.where is not None
            and (row.tombstone or not self._passes(row.columns))
        ):
            # Kafka Streams' KTable filter with old values: a key whose old row failed
            # the filter too (or had none) gives nothing, else a tombstone
            if joined.old is None or not self._passes(joined.old):
                return []
            changes = [self._tombstone(row.columns, None)]
        elif row.tombstone:
            changes = [self._tombstone(row.columns, None)]
        else:
            changes = self.stateless(row)
        rekeyed = self.plan.partition_by is not None or last.foreign_key
        if joined.key is not None and not rekeyed:
            for change in changes:
                change.key = {name: joined.key for name in change.key}
        return changes

    def _table_join(
        self, state: dict[str, Any], side: str, row: Row, step: int, key: Any
    ) -> list[Joined]:
        join = self.join_steps[step].plan
        previous = {"left": state.get("left"), "right": state.get("right")}
        state[side] = None if row.tombstone else row
        left, right = state.get("left"), state.get("right")
        if not self._table_join_present(join.kind, left, right):
            if not state.pop("emitted", False):
                return []
            last = self._joined_row(left or previous["left"], right or previous["right"], step)
            last.columns["ROWTIME"] = row.timestamp
            return [Joined(key, Row(last.columns, tombstone=True), last.columns, table=True)]
        state["emitted"] = True
        joined = self._joined_row(left, right, step)
        joined.columns["ROWTIME"] = row.timestamp
        old = None
        if self.where is not None and step == len(self.join_steps) - 1:
            if self._table_join_present(join.kind, previous["left"], previous["right"]):
                old = self._joined_row(previous["left"], previous["right"], step).columns
                old["ROWTIME"] = row.timestamp
        return [Joined(key, joined, old, table=True)]

    @staticmethod
    def _table_join_present(kind: str, left: Row | None, right: Row | None) -> bool:
        """Whether a table-table join of ``kind`` has a row for a key with these sides."""
        return {
            "INNER": left is not None and right is not None,
            "LEFT": left is not None,
            "RIGHT": right is not None,
            "FULL": left is not None or right is not None,
        }[kind]

    def _stream_join(
        self,
        state: dict[str, Any],
        side: str,
        row: Row,
        stream_time: int,
        step: int,
        key: Any,
        observed: dict[str, int] | None,
    ) -> list[Joined]:
        """Kafka Streams' stream-stream join (3.x) of a record in its key's ``state``: the
        pending outer rows the stream time has closed first (when the record does not go
        back in time), then the pairs with the other side's records still in its window
        store, then, for an outer side the record found nothing for, its row at once
        when it has no GRACE PERIOD (the old join windows) or its window has already
        closed (it went back in time), else later (``close_join_rows``). The record is
        kept unless its own side's store has already let its time go."""
        join = self.join_steps[step].plan
        other = "right" if side == "left" else "left"
        timestamp = row.timestamp
        seen = self._seen(state, observed)
        seen[side] = max(seen[side], timestamp)
        retention = self._join_retention(step)
        out: list[Joined] = []
        if timestamp >= stream_time:
            out += self.close_join_rows(state, stream_time, step, key, observed)
        # a left record at t meets right records in [t - before, t + after]
        low, high = (
            (timestamp - join.before_ms, timestamp + join.after_ms)
            if side == "left"
            else (timestamp - join.after_ms, timestamp + join.before_ms)
        )
        entry: dict[str, Any] = {"row": row, "matched": False}
        for candidate in state.get(other, []):
            there = candidate["row"].timestamp
            if there <= seen[other] - retention:
                continue  # gone from the other side's window store
            if low <= there <= high and _same_window(
                row, candidate["row"], join.right.window_type == "SESSION"
            ):
                candidate["matched"] = entry["matched"] = True
                pair = (row, candidate["row"]) if side == "left" else (candidate["row"], row)
                joined = self._joined_row(pair[0], pair[1], step)
                joined.columns["ROWTIME"] = max(r.timestamp for r in pair)
                out.append(Joined(key, joined))
        if not entry["matched"] and side in _OUTER_SIDES.get(join.kind, ()):
            if join.grace_ms is None or high < stream_time:
                # without GRACE PERIOD ksqlDB joins with Kafka Streams' old join windows:
                # a record that meets none gives its row at once (a later match its
                # joined row); with one, a record whose window has closed gives it too
                pair = (row, None) if side == "left" else (None, row)
                out.append(Joined(key, self._joined_row(pair[0], pair[1], step)))
                entry["padded"] = True
        if timestamp > seen[side] - retention:
            state.setdefault(side, []).append(entry)
        return out

    @staticmethod
    def _seen(state: dict[str, Any], observed: dict[str, int] | None) -> dict[str, int]:
        """The largest time each side's window store has seen: the host's (``observed``)
        or the key's own records', whichever is later; kept in ``state``."""
        seen: dict[str, int] = state.setdefault("seen", {"left": -1, "right": -1})
        for side, time in (observed or {}).items():
            seen[side] = max(seen[side], time)
        return seen

    @staticmethod
    def note_side_lags(state: dict[str, Any], stream_time: int) -> None:
        """How far each side's window store (the largest time it has seen, ``_seen``)
        is behind the stream time, kept in ``state`` after a key's records: a side's
        store moves on only with its own side's records, which may lag the other's."""
        seen = state.get("seen", {})
        state["lag"] = {
            side: max(0, stream_time - time) for side, time in seen.items() if time >= 0
        }

    @staticmethod
    def sides_at(state: dict[str, Any], stream_time: int) -> dict[str, int]:
        """The largest time each side's window store is taken to have seen at
        ``stream_time`` when the key has no record to tell: as far behind it as the
        key's last records found it (``note_side_lags``)."""
        return {side: stream_time - lag for side, lag in state.get("lag", {}).items()}

    def _join_grace(self, step: int) -> int:
        grace = self.join_steps[step].plan.grace_ms
        return DEFAULT_GRACE_MS if grace is None else grace

    def _join_retention(self, step: int) -> int:
        """How long a side's window store keeps a record behind the latest time it has
        seen: the join's window (before and after) and its grace."""
        join = self.join_steps[step].plan
        return join.before_ms + join.after_ms + self._join_grace(step)

    def join_reach(self, step: int = 0) -> int:
        """Stream-stream: how far behind the stream time a record may still join (its
        window and grace): the watermark delay of a host that has one."""
        return self._join_retention(step)

    def _pending(self, entry: dict[str, Any], side: str, step: int) -> bool:
        """Whether a kept record still owes its outer row (an outer side's record that
        met nothing, its row not given at once)."""
        join = self.join_steps[step].plan
        outer = _OUTER_SIDES.get(join.kind, ())
        return side in outer and not entry["matched"] and not entry.get("padded")

    def next_join_close(self, state: dict[str, Any], step: int = 0) -> int | None:
        """Stream-stream: the stream time after which the next record of ``state``
        leaves it (and an outer join's unmatched one is emitted)."""
        if not self.join_steps or self.join_steps[step].plan.shape != "stream-stream":
            return None
        join = self.join_steps[step].plan
        grace = self._join_grace(step)
        retention = self._join_retention(step)
        lag = state.get("lag", {})  # a store behind the stream time lets its records go later
        due = [
            entry["row"].timestamp
            + (
                (join.after_ms if side == "left" else join.before_ms) + grace
                if self._pending(entry, side, step)
                else retention + lag.get(side, 0)
            )
            for side in ("left", "right")
            for entry in state.get(side, [])
        ]
        return min(due) if due else None

    def close_joins(
        self,
        state: dict[str, Any],
        stream_time: int,
        step: int = 0,
        key: Any = None,
        observed: dict[str, int] | None = None,
    ) -> list[Change]:
        """Stream-stream: an outer join's unmatched records whose window (and grace) has
        passed give their row with the other side null; records that have left their
        side's window store leave ``state``."""
        closed = self.close_join_rows(state, stream_time, step, key, observed)
        return [c for j in closed for c in self.finish(j)]

    def close_join_rows(
        self,
        state: dict[str, Any],
        stream_time: int,
        step: int = 0,
        key: Any = None,
        observed: dict[str, int] | None = None,
    ) -> list[Joined]:
        """``close_joins``' rows, not projected, in the order of their records' times
        (as Kafka Streams' outer join store gives them)."""
        if not self.join_steps or self.join_steps[step].plan.shape != "stream-stream":
            return []
        join = self.join_steps[step].plan
        grace = self._join_grace(step)
        retention = self._join_retention(step)
        seen = self._seen(state, observed)
        closed: list[tuple[int, Joined]] = []
        for side in ("left", "right"):
            reach = join.after_ms if side == "left" else join.before_ms
            kept = []
            for entry in state.get(side, []):
                timestamp = entry["row"].timestamp
                if self._pending(entry, side, step) and timestamp + reach + grace < stream_time:
                    entry["padded"] = True
                    pair = (entry["row"], None) if side == "left" else (None, entry["row"])
                    joined_key = self.key_of(side, entry["row"], step) if key is None else key
                    joined = Joined(joined_key, self._joined_row(pair[0], pair[1], step))
                    closed.append((timestamp, joined))
                if self._pending(entry, side, step) or timestamp > seen[side] - retention:
                    kept.append(entry)
            state[side] = kept
        closed.sort(key=lambda item: item[0])
        return [joined for _, joined in closed]

    # ---- foreign-key joins
    def left_primary_key(self, row: Row, step: int = 0) -> tuple[Any, ...]:
        """A foreign-key join's left row: its primary key (the result's key)."""
        join = self.join_steps[step].plan
        prefixed = join.prefixed("left", row.columns)
        return tuple(prefixed.get(column) for column in join.left_key_columns)

    def foreign_key_route(
        self, state: dict[str, Any], row: Row, step: int = 0
    ) -> list[tuple[Any, tuple[Any, ...]]]:
        """A left row of a foreign-key join, in the ``state`` of its primary key (the
        foreign key it had): the (foreign key, message) pairs for the join by foreign
        key. A changed foreign key takes the row out of its old key's join (silently:
        the new key's join gives the result), a deleted row deletes its result."""
        primary = self.left_primary_key(row, step)
        had = "fk" in state
        old = state.get("fk")
        messages: list[tuple[Any, tuple[Any, ...]]] = []
        if row.tombstone:
            if had:
                messages.append((old, ("delete", primary, row)))
            state.clear()
            return messages
        new = self.stream_key(row, step)
        if had and old != new:
            messages.append((old, ("drop", primary)))
        messages.append((new, ("left", primary, row, had)))
        state["fk"] = new
        return messages

    def foreign_key_join(
        self, state: dict[str, Any], message: tuple[Any, ...], step: int = 0
    ) -> list[Joined]:
        """A message for one foreign key's join ``state`` (the right row with that
        primary key, the left rows that refer to it by their primary key): a right row
        (``("right", row)``) updates every left row's result; a left row's ``left``,
        ``drop`` and ``delete`` its own. Results are keyed by the left primary key."""
        join = self.join_steps[step].plan
        inner = join.kind == "INNER"
        lefts: dict[tuple[Any, ...], Row] = state.setdefault("lefts", {})
        kind = message[0]
        if kind == "right":
            row = message[1]
            had = state.get("right") is not None
            state["right"] = None if row.tombstone else row
            right = state["right"]
            if right is None and not had:
                return []
            out = []
            for primary, left in lefts.items():
                if right is None and inner:
                    out.append(self._fk_result(primary, left, None, row.timestamp, step, True))
                else:
                    out.append(self._fk_result(primary, left, right, row.timestamp, step, False))
            return out
        if kind == "drop":
            lefts.pop(message[1], None)
            return []
        if kind == "delete":
            _, primary, tombstone = message
            left = lefts.pop(primary, tombstone)
            return [self._fk_result(primary, left, None, tombstone.timestamp, step, True)]
        _, primary, row, update = message
        lefts[primary] = row
        right = state.get("right")
        if right is None and inner:
            if not update:
                return []
            return [self._fk_result(primary, row, None, row.timestamp, step, True)]
        return [self._fk_result(primary, row, right, row.timestamp, step, False)]

    def _fk_result(
        self,
        primary: tuple[Any, ...],
        left: Row,
        right: Row | None,
        timestamp: int,
        step: int,
        tombstone: bool,
    ) -> Joined:
        joined = self._joined_row(left, right, step)
        joined.columns["ROWTIME"] = timestamp
        return Joined(primary, Row(joined.columns, tombstone=tombstone))

    # ---- aggregation
    def group(self, row: Row) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The grouping key and the row, or None when the row is filtered out or its key
        is null (a tombstone of a table source: its key only, for the undo)."""
        columns = row.columns
        if row.tombstone and not self.table_source:
            return None  # a stream's null value: ksqlDB's GROUP BY drops it
        if not row.tombstone and not self._passes(columns):
            return None
        key = tuple(self._evaluate(g, columns) for g in self.group_by)
        if any(k is None for k in key):
            return None
        return key, columns

    def _values(self, index: int, row: dict[str, Any]) -> list[Any]:
        return [self._evaluate(a, row) for a in self.arguments[index]]

    def _windows(self, timestamp: int) -> list[tuple[int, int]]:
        window = self.window
        if window is None:
            return [(-1, -1)]
        if window.kind == "TUMBLING":
            start = timestamp - timestamp % window.size_ms
            return [(start, start + window.size_ms)]
        # HOPPING: every window [s, s + size) with s a multiple of the advance
        first = timestamp - timestamp % window.advance_ms
        windows = []
        start = first
        while start > timestamp - window.size_ms and start >= 0:
            windows.append((start, start + window.size_ms))
            start -= window.advance_ms
        return sorted(windows)

    def _grace(self) -> int:
        if self.window is None:
            return DEFAULT_GRACE_MS
        return window_grace(self.window, self.plan.emit_final)

    def _late(self, end: int, stream_time: int) -> bool:
        """Whether a window ending at ``end`` has closed at ``stream_time``: a time
        window once its end plus the grace is at or before the stream time, a session
        once its end plus the gap and the grace is before it (Kafka Streams' rules; a
        session's end is its last record's time)."""
        window = self.window
        if window is None:
            return False
        if window.kind == "SESSION":
            return end + window.size_ms + self._grace() < stream_time
        return end + self._grace() <= stream_time

    def aggregate(
        self,
        state: dict[Any, Any],
        group: tuple[Any, ...],
        row: dict[str, Any],
        stream_time: int,
        sign: int = 1,
    ) -> list[Change]:
        """``row`` added to (or undone from) ``state`` (the group's windows, changed in
        place); the rows EMIT CHANGES gives."""
        timestamp = int(row.get("ROWTIME") or 0)
        if self.window is not None and self.window.kind == "SESSION":
            return self._session(state, group, row, timestamp, stream_time)
        changes: list[Change] = []
        for start, end in self._windows(timestamp):
            if self._late(end, stream_time):
                continue
            slot = state.get(start)
            if slot is None:
                slot = {"end": end, "acc": [f.initial() for f in self.functions], "ts": timestamp}
                state[start] = slot
            accumulators = slot["acc"]
            for index, function in enumerate(self.functions):
                values = self._values(index, row)
                if sign > 0:
                    accumulators[index] = function.add(accumulators[index], *values)
                else:
                    accumulators[index] = function.undo(accumulators[index], *values)
            slot["ts"] = max(slot["ts"], timestamp)
            if not self.plan.emit_final and sign != UNDO_QUIETLY:
                changes.extend(self._result(group, start, slot))
        return changes

    def _session(
        self,
        state: dict[Any, Any],
        group: tuple[Any, ...],
        row: dict[str, Any],
        timestamp: int,
        stream_time: int,
    ) -> list[Change]:
        assert self.window is not None
        gap = self.window.size_ms
        merged = [  # those closed are gone from ksqlDB's session store (its retention)
            start
            for start, slot in state.items()
            if slot["end"] + gap >= timestamp
            and start - gap <= timestamp
            and not self._late(slot["end"], stream_time)
        ]
        # late when the session it makes (merged with those within the gap) has closed
        if self._late(max([timestamp, *(state[s]["end"] for s in merged)]), stream_time):
            return []
        accumulators = [f.initial() for f in self.functions]
        start, end, latest = timestamp, timestamp, timestamp
        changes: list[Change] = []
        for old in sorted(merged):
            slot = state.pop(old)
            accumulators = [
                f.merge(a, b)
                for f, a, b in zip(self.functions, accumulators, slot["acc"], strict=True)
            ]
            if not self.plan.emit_final:
                changes.extend(self._removed(group, old, slot))
            start, end = min(start, old), max(end, slot["end"])
            latest = max(latest, slot["ts"])
        for index, function in enumerate(self.functions):
            accumulators[index] = function.add(accumulators[index], *self._values(index, row))
        slot = {"end": end, "acc": accumulators, "ts": latest}
        state[start] = slot
        if not self.plan.emit_final:
            changes.extend(self._result(group, start, slot))
        return changes

    def _aggregate_row(
        self, group: tuple[Any, ...], start: int, slot: dict[str, Any]
    ) -> dict[str, Any]:
        aggregation = self.plan.aggregation
        assert aggregation is not None
        row: dict[str, Any] = dict(zip(aggregation.group_columns, group, strict=True))
        for call, function, accumulator in zip(
            aggregation.calls, self.functions, slot["acc"], strict=True
        ):
            row[call.column] = function.result(accumulator)
        row["ROWTIME"] = slot["ts"]
        if self.window is not None:
            row["WINDOWSTART"], row["WINDOWEND"] = start, slot["end"]
        return row

    def _result(self, group: tuple[Any, ...], start: int, slot: dict[str, Any]) -> list[Change]:
        """The window's row; when HAVING fails, a tombstone if its last row passed (the
        slot's ``passed``), else none (ksqlDB filters the table's old and new rows)."""
        row = self._aggregate_row(group, start, slot)
        window = (start, slot["end"]) if self.window is not None else None
        if self.having is not None:
            if self._evaluate(self.having, row) is not True:
                return [self._tombstone(row, window)] if slot.pop("passed", False) else []
            slot["passed"] = True
        change = self.project(row, slot["ts"], window)
        return [] if change.dropped else [change]

    def _removed(self, group: tuple[Any, ...], start: int, slot: dict[str, Any]) -> list[Change]:
        """A session merged into another: its tombstone (if its last row passed HAVING)."""
        if self.having is not None and not slot.get("passed"):
            return []
        row = self._aggregate_row(group, start, slot)
        return [self._tombstone(row, (start, slot["end"]))]

    def close_windows(
        self,
        state: dict[Any, Any],
        group: tuple[Any, ...],
        stream_time: int,
        before: int | None = None,
        steps: tuple[tuple[int, int], ...] = (),
    ) -> list[Change]:
        """Windows whose grace has passed leave ``state``, in the order of their starts;
        with EMIT FINAL each gives its one row, unless Kafka Streams' window store had
        let it go by then (``_expired``; ``before``: the stream time before the record
        that brought ``stream_time``, None when not known; ``steps``: earlier moves of
        the stream time, from and to, that could close a window unwritten)."""
        if self.window is None:
            return []
        closed = sorted(s for s, slot in state.items() if self._late(slot["end"], stream_time))
        changes = []
        for start in closed:
            slot = state.pop(start)
            if self.plan.emit_final and not self._expired(
                start, slot["end"], stream_time, before, steps
            ):
                changes.extend(self._result(group, start, slot))
        return changes

    def _retention(self) -> int:
        window = self.window
        assert window is not None
        if window.retention_ms is not None:
            return window.retention_ms
        return window.size_ms + self._grace()

    def _latest_start(self, stream_time: int) -> int:
        """The start of the latest time window holding ``stream_time``."""
        window = self.window
        assert window is not None
        advance = window.advance_ms if window.kind == "HOPPING" else window.size_ms
        return stream_time - stream_time % advance

    def _expired(
        self,
        start: int,
        end: int,
        stream_time: int,
        before: int | None,
        steps: tuple[tuple[int, int], ...] = (),
    ) -> bool:
        """Whether a time window was out of Kafka Streams' window store when EMIT FINAL
        looked for it: ksqlDB's EMIT FINAL (``EmitStrategy.onWindowClose``) fetches the
        windows a record closed from a store that holds none whose start is more than
        its retention (RETENTION, else size plus grace) before the latest window start
        put in it, the start of the stream time's own window; a record that moves the
        stream time further than that closes such windows unwritten. The move that
        closed the window: the record bringing ``stream_time`` (from ``before``), else
        the one of ``steps`` that passed its end and grace; none known (``before``
        None, or past its end and grace with no step found), it is taken as written.
        A session store's search keeps closed sessions."""
        window = self.window
        assert window is not None
        if window.kind == "SESSION" or before is None:
            return False
        if self._late(end, before):  # an earlier record closed it
            closing = end + self._grace()
            found = [b for a, b in steps if a < closing <= b]
            if not found:
                return False
            stream_time = found[0]
        return start < self._latest_start(stream_time) - self._retention()

    def expiring(self, before: int, stream_time: int) -> bool:
        """Whether moving the stream time from ``before`` to ``stream_time`` closes some
        time window that EMIT FINAL would then find out of the store (``_expired``): the
        earliest window it closes, the one most behind, tells."""
        window = self.window
        if window is None or window.kind == "SESSION" or not self.plan.emit_final:
            return False
        advance = window.advance_ms if window.kind == "HOPPING" else window.size_ms
        reach = window.size_ms + self._grace()  # a window's start to its closing time
        first = max(0, before + 1 - reach)  # the earliest closing after ``before``
        start = first + (-first) % advance
        return start + reach <= stream_time and start < (
            self._latest_start(stream_time) - self._retention()
        )

    def next_close(self, state: dict[Any, Any]) -> int | None:
        """The stream time at which the next window of ``state`` closes."""
        if self.window is None or not state:
            return None
        after = 1 if self.window.kind == "SESSION" else 0  # a session closes after it
        return int(min(slot["end"] for slot in state.values())) + self._grace() + after


# The signs of ``Operators.aggregate``'s rows: added, undone, or undone without a row of
# its own (an update staying in its group: the add right after gives the one row)
ADD = 1
UNDO = -1
UNDO_QUIETLY = -2


class TableRegrouping:
    """For an aggregation over a table: each source key's last grouped row, so that an
    update undoes the old row in its group before the new row is added (ksqlDB's
    table GROUP BY). An update whose group stays the same gives one row, the group's
    after both (Kafka Streams hands the old and new row to the aggregation together
    when their group is the same: ksqlDB's cases write no row between the undo and the
    add); one that moves gives a row in each group. ``state`` maps a source key to
    (group, row)."""

    def __init__(self, operators: Operators) -> None:
        self.operators = operators
        self.key_names = [c.name for c in operators.plan.source.key_columns]

    def source_key(self, row: Row) -> tuple[Any, ...]:
        return tuple(row.columns.get(name) for name in self.key_names)

    def changes(
        self, previous: tuple[tuple[Any, ...], dict[str, Any]] | None, row: Row
    ) -> tuple[
        list[tuple[tuple[Any, ...], dict[str, Any], int]],
        tuple[tuple[Any, ...], dict[str, Any]] | None,
    ]:
        """The (group, row, sign) steps the update gives, and what to keep for the key."""
        steps: list[tuple[tuple[Any, ...], dict[str, Any], int]] = []
        if previous is not None:
            old_group, old_row = previous
            steps.append((old_group, {**old_row, "ROWTIME": row.timestamp}, UNDO))
        if row.tombstone:
            return steps, None
        grouped = self.operators.group(row)
        if grouped is None:
            return steps, None
        if steps and steps[0][0] == grouped[0]:  # the same group: one row, after the add
            steps[0] = (steps[0][0], steps[0][1], UNDO_QUIETLY)
        steps.append((grouped[0], grouped[1], ADD))
        return steps, grouped
