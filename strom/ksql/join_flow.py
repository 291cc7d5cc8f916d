"""A query over joins as a flow of keyed stages, the same for every host: a persistent
query runs each stage as one keyed stateful step on Spark (``strom.ksql.runtime``), and
``JoinFlow.process`` runs them all in one process (the unit tests, any in-memory host).

The stages of a plan (``stages(plan)``), in order:

- per join of the chain (left-deep: ``a JOIN b ... JOIN c ...`` joins c to the result
  of a and b): a ``join`` stage keyed by the join key (its state: a table's row, a
  stream's records within the window, both tables' rows), or, for a foreign-key
  table-table join, a ``fk-route`` stage keyed by the left table's primary key (its
  state: the foreign key the row had) then a ``fk-join`` stage keyed by the foreign key
  (its state: the right row, the left rows that refer to it); when that join is the
  query's last and nothing is aggregated, an ``order`` stage keyed by the result's key
  (the left primary key) after it, without state: a left row whose foreign key changed
  within a micro-batch has its results from several ``fk-join`` keys, which a host
  running each key apart may give in any order, and the result's key needs them in
  the order of the records that made them (its last one the newest, as ksqlDB's);
- over a join with GROUP BY: ``regroup`` (a table result: each joined key's last group,
  for the undo of its old row) keyed by the join's key, then ``aggregate`` keyed by the
  group.

A ``Message`` is a row on its way to a stage: the stage's index, the key, what the stage
takes, its timestamp and a tie order (``tie_order``: a table's change before a stream
record of the same time; of two tables joined on their keys, the left one's change
first). ``JoinFlow.step`` runs one message in its key's state and gives the messages
for the next stages and, from the last one, the output ``Change``s.

Does not own the operators' semantics (``strom.ksql.operators``), reading or writing
records, or the hosts' state stores and threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.ksql.operators import Change, Joined, Operators, TableRegrouping
from strom.ksql.planner import QueryPlan
from strom.ksql.readers import Row

JOIN = "join"
FK_ROUTE = "fk-route"
FK_JOIN = "fk-join"
ORDER = "order"
REGROUP = "regroup"
AGGREGATE = "aggregate"


@dataclass(frozen=True)
class Stage:
    kind: str  # JOIN, FK_ROUTE, FK_JOIN, ORDER, REGROUP or AGGREGATE
    step: int  # the join of the chain it serves (-1: after the joins)


@dataclass
class Message:
    """A row on its way to a stage: ``payload`` is (side, row) for a join stage, a row
    for ``fk-route`` and ``regroup``, ``("right", row)`` or a routed left message for
    ``fk-join``, a ``Joined`` for ``order``, (columns, sign) for ``aggregate``."""

    stage: int
    key: Any
    payload: Any
    timestamp: int
    order: int = 1  # 0: served first at a tie (``tie_order``)


def tie_order(plan: QueryPlan, step: int, side: str) -> int:
    """A join's row's place at a tie of timestamps (0 first, 1 second): a table's change
    before a stream record it serves; of a table-table join on the keys, and of a
    stream-stream join, the left side's record before the right one's, as ksqlDB's test
    driver takes records in the order they were written and its cases write the left
    side's first (``sum int left join of table``: each left row joins, then the right rows
    change the sums; ``stream-stream value-to-key - key format mismatch``: a left join's
    left record at 0 is written padded with nulls, then joined with the right one at 0)."""
    join = plan.joins[step]
    left_first = join.shape in ("table-table", "stream-stream") and not join.foreign_key
    return int(side == "right") if left_first else int(side == "left")


def flowing(plan: QueryPlan) -> bool:
    """Whether a join runs as a flow of stages: a chain of joins, a foreign-key join,
    an aggregation over a join, or sources sharing a topic (a join of two sources on
    their keys runs as one keyed step)."""
    topics = [s.topic for s in plan.sources]
    return plan.join is not None and (len(stages(plan)) > 1 or len(set(topics)) < len(topics))


def stages(plan: QueryPlan) -> tuple[Stage, ...]:
    found: list[Stage] = []
    for step, join in enumerate(plan.joins):
        if join.foreign_key:
            found += [Stage(FK_ROUTE, step), Stage(FK_JOIN, step)]
        else:
            found.append(Stage(JOIN, step))
    if plan.joins and plan.joins[-1].foreign_key and plan.aggregation is None:
        found.append(Stage(ORDER, len(plan.joins) - 1))
    if plan.aggregation is not None:
        if plan.joins[-1].shape == "table-table":
            found.append(Stage(REGROUP, -1))
        found.append(Stage(AGGREGATE, -1))
    return tuple(found)


class JoinFlow:
    """The stages of one plan over its operators."""

    def __init__(self, operators: Operators) -> None:
        self.operators = operators
        self.plan = operators.plan
        self.stages = stages(self.plan)
        self.regrouping = TableRegrouping(operators)
        self._join_stage = {
            s.step: index for index, s in enumerate(self.stages) if s.kind in (JOIN, FK_JOIN)
        }
        # the stages whose state a moving stream time closes (stream-stream joins), and
        # the stream time ``process`` last closed them at
        self._windowed = [
            index
            for index, s in enumerate(self.stages)
            if s.kind == JOIN and self.plan.joins[s.step].shape == "stream-stream"
        ]
        self._closed_at: int | None = None
        # the largest time each side of a stream-stream join stage has seen (its window
        # stores' time, across keys), by stage index
        self._observed: dict[int, dict[str, int]] = {}

    @property
    def _regrouped(self) -> bool:
        return any(s.kind == REGROUP for s in self.stages)

    def entries(self, source: int, row: Row) -> list[Message]:
        """A row read from the plan's ``source``-th source (0: the left-most) as the
        message for its first stage (none when its join key is null: it joins nothing;
        a foreign-key join's left row with a null key still gives its result)."""
        operators = self.operators
        if source == 0:
            first = self.stages[0]
            if first.kind == FK_ROUTE:
                return [Message(0, operators.left_primary_key(row), row, row.timestamp)]
            key = operators.key_of("left", row, 0)
            if key is None:
                return []
            order = tie_order(self.plan, 0, "left")
            return [Message(0, key, ("left", row), row.timestamp, order)]
        step = source - 1
        stage = self._join_stage[step]
        key = operators.key_of("right", row, step)
        if key is None:
            return []
        payload = ("right", row)
        return [Message(stage, key, payload, row.timestamp, tie_order(self.plan, step, "right"))]

    def step(
        self,
        message: Message,
        state: dict[Any, Any],
        stream_time: int,
        observed: dict[str, int] | None = None,
    ) -> tuple[list[Message], list[Change]]:
        """``message`` run in its key's ``state`` (changed in place): the messages for
        the following stages, and the output changes. ``observed``: a stream-stream
        join's sides' times as far as the host knows them (``Operators.join_rows``)."""
        stage = self.stages[message.stage]
        operators = self.operators
        if stage.kind == JOIN:
            side, row = message.payload
            joined = operators.join_rows(
                state, side, row, stream_time, stage.step, message.key, observed
            )
            return self._onward(message.stage, stage.step, joined)
        if stage.kind == FK_ROUTE:
            routed = operators.foreign_key_route(state, message.payload, stage.step)
            return [
                Message(message.stage + 1, fk, payload, message.timestamp) for fk, payload in routed
            ], []
        if stage.kind == FK_JOIN:
            joined = operators.foreign_key_join(state, message.payload, stage.step)
            return self._onward(message.stage, stage.step, joined)
        if stage.kind == ORDER:
            return [], operators.finish(message.payload)
        if stage.kind == REGROUP:
            row = message.payload
            steps, kept = self.regrouping.changes(state.get("previous"), row)
            state.clear()
            if kept is not None:
                state["previous"] = kept
            return [
                Message(message.stage + 1, group, (columns, sign), row.timestamp)
                for group, columns, sign in steps
            ], []
        columns, sign = message.payload
        windows = state.setdefault("windows", {})
        changes = operators.aggregate(windows, message.key, columns, stream_time, sign)
        changes += operators.close_windows(windows, message.key, stream_time)
        return [], changes

    def close(
        self,
        stage_index: int,
        key: Any,
        state: dict[Any, Any],
        stream_time: int,
        observed: dict[str, int] | None = None,
    ) -> tuple[list[Message], list[Change]]:
        """Stream-stream: the records of a join stage's ``state`` whose window has passed
        (an outer join's unmatched ones give their rows)."""
        stage = self.stages[stage_index]
        if stage.kind != JOIN:
            return [], []
        joined = self.operators.close_join_rows(state, stream_time, stage.step, key, observed)
        return self._onward(stage_index, stage.step, joined)

    def _onward(
        self, index: int, step: int, joined: list[Joined]
    ) -> tuple[list[Message], list[Change]]:
        """A join's rows: to the next join (keyed by its left key: the same key for a
        table's), to the aggregation, or projected as the output."""
        operators = self.operators
        last = step == len(self.plan.joins) - 1
        messages: list[Message] = []
        changes: list[Change] = []
        for item in joined:
            row = item.row
            if not last:
                following = self.plan.joins[step + 1]
                key = item.key  # a foreign-key join's is the left primary key, a tuple
                if following.shape != "table-table" or key is None or isinstance(key, tuple):
                    key = operators.key_of("left", row, step + 1)
                if key is not None:
                    order = tie_order(self.plan, step + 1, "left")
                    messages.append(Message(index + 1, key, ("left", row), row.timestamp, order))
            elif self.plan.aggregation is None:
                if self.stages[-1].kind == ORDER:
                    messages.append(Message(index + 1, item.key, item, row.timestamp))
                else:
                    changes += operators.finish(item)
            elif self._regrouped:
                messages.append(Message(index + 1, item.key, row, row.timestamp))
            else:
                grouped = operators.group(row)
                if grouped is not None:
                    group, columns = grouped
                    messages.append(Message(index + 1, group, (columns, 1), row.timestamp))
        return messages, changes

    def process(
        self, source: int, row: Row, states: dict[tuple[int, Any], dict[Any, Any]], stream_time: int
    ) -> list[Change]:
        """A row of a source through every stage in one process (``states`` by stage
        and key, changed in place); the output changes. As Kafka Streams' stream-stream
        joins, a row that moves the stream time on first closes every key's windows it
        has passed (an outer join's unmatched records give their rows), then joins."""
        changes: list[Change] = []
        if self._windowed and self._closed_at != stream_time:
            self._closed_at = stream_time
            for stage_index in self._windowed:
                for (index, key), state in list(states.items()):
                    if index != stage_index:
                        continue
                    observed = self._observed.get(index)
                    onward, out = self.close(index, key, state, stream_time, observed)
                    changes += out + self._run(onward, states, stream_time)
        return changes + self._run(self.entries(source, row), states, stream_time)

    def _run(
        self,
        pending: list[Message],
        states: dict[tuple[int, Any], dict[Any, Any]],
        stream_time: int,
    ) -> list[Change]:
        """Messages through their stages, each one's onward messages first."""
        changes: list[Change] = []
        while pending:
            message = pending.pop(0)
            state = states.setdefault((message.stage, message.key), {})
            observed = None
            if message.stage in self._windowed:
                side = message.payload[0]
                observed = self._observed.setdefault(message.stage, {"left": -1, "right": -1})
                observed[side] = max(observed[side], message.timestamp)
            onward, out = self.step(message, state, stream_time, observed)
            pending = onward + pending
            changes += out
        return changes
