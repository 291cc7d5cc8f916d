"""The local runtime statistics of the persistent queries a server runs, as ksqlDB 0.29's
``DESCRIBE <source> EXTENDED`` reports them: per Kafka topic, the consumer side
(``consumer-messages-per-sec``, ``consumer-total-messages``) summed over the queries
reading the topic and the producer side (``messages-per-sec``, ``total-messages``) of
the query writing it, with the time of the last message; formatted as ksqlDB's
``MetricCollectors.format`` (the ``statistics`` field) and as its ``clusterStatistics``
entries; and each query's consumed offsets (``queryOffsetSummaries``).

Fed from Spark's Structured Streaming progress (one report per finished micro-batch, the
JSON of ``StreamingQueryProgress``): a query reads all its topics through one source,
whose ``numInputRows`` is the records the batch read; they are shared out between its
topics by how far each topic's offsets moved in the batch (exact whenever offsets and
records agree, as they do without transactions or compaction); the records written to
the query's sink topic are its output's rows less the processing-log entries among
them, both observed on the output (Spark's observed metrics, ``OBSERVED``). A batch is
reported after its output is written, so the consumed offsets given here are processed
records, their output in Kafka.

Differs from ksqlDB's: ``consumer-total-bytes`` is not given (Spark's progress counts
rows, not bytes), nor the error statistics (``consumer-failed-messages``); a query's
figures go when it stops, as ksqlDB's collectors close with their query, and so start
again from zero when a failed query is started again. The rates follow Kafka's
``Rate``: the records of the last 60 s over the time they span, at least 30 s.

Pure Python, no Spark: :mod:`strom.ksql.runtime` feeds it, the engine reads it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

CONSUMER_RATE = "consumer-messages-per-sec"
CONSUMER_TOTAL = "consumer-total-messages"
PRODUCER_RATE = "messages-per-sec"
PRODUCER_TOTAL = "total-messages"
# The name of the observed metrics a query's output reports in its progress: the rows
# written ("written") and the processing-log entries among them ("logged").
OBSERVED = "ksql_written"
_RATE_WINDOW_MS = 60_000  # Kafka's Rate: two samples of 30 s
_RATE_MIN_SPAN_MS = 30_000

Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset


@dataclass
class Stat:
    """ksqlDB's ``TopicSensors.Stat``: a figure and the time (ms, 0 if never) of the
    last event it counted."""

    name: str
    value: float
    timestamp: int

    def formatted(self) -> str:
        if self.value == round(self.value):
            return f"{self.name:>16}:{self.value:10.0f}"
        return f"{self.name:>16}:{self.value:10.2f}"


def iso_time(ms: int) -> str:
    """Java's ``ISO_OFFSET_DATE_TIME`` of an epoch-ms instant in UTC; ``n/a`` for 0."""
    if ms == 0:
        return "n/a"
    at = datetime.fromtimestamp(ms / 1000, UTC)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{ms % 1000:03d}".rstrip("0")
    return f"{text}{'.' + fraction if fraction else ''}Z"


def format_stats(stats: list[Stat], last_label: str) -> str:
    """ksqlDB's ``MetricCollectors.format``: each stat and a space, then the last
    event's time under ``last_label`` (``last-message``); "" without stats."""
    text = "".join(stat.formatted() + " " for stat in stats)
    if stats:
        text += f"{last_label:>16}: " + f"{iso_time(stats[0].timestamp):>9}"
    return text


@dataclass
class _Counter:
    """One query's count of one topic: its total and the recent (ms, count) events."""

    total: int = 0
    last_ms: int = 0
    recent: deque[tuple[int, int]] = field(default_factory=deque)

    def add(self, count: int, now_ms: int) -> None:
        self.total += count
        self.last_ms = now_ms
        self.recent.append((now_ms, count))
        self._trim(now_ms)

    def _trim(self, now_ms: int) -> None:
        while self.recent and self.recent[0][0] <= now_ms - _RATE_WINDOW_MS:
            self.recent.popleft()

    def rate(self, now_ms: int) -> float:
        self._trim(now_ms)
        if not self.recent:
            return 0.0
        span = max(now_ms - self.recent[0][0], _RATE_MIN_SPAN_MS)
        return sum(count for _, count in self.recent) * 1000.0 / span


@dataclass
class _Query:
    sink_topic: str | None
    consumed: dict[str, _Counter] = field(default_factory=dict)
    produced: _Counter = field(default_factory=_Counter)
    offsets: Offsets = field(default_factory=dict)  # the next offset of each partition


def _offsets(text: Any) -> Offsets:
    """A source's offsets as Spark's Kafka JSON ``{"topic": {"0": 42}}`` gives them."""
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except ValueError:
            return {}
    if not isinstance(text, dict):
        return {}
    return {
        topic: {int(p): int(o) for p, o in partitions.items()}
        for topic, partitions in text.items()
        if isinstance(partitions, dict)
    }


def _written(report: dict[str, Any]) -> int:
    """The records a batch wrote to its sink topic: by the output's observed metrics
    (``OBSERVED``: rows written, processing-log entries among them), else the sink's
    rows."""
    observed = (report.get("observedMetrics") or {}).get(OBSERVED)
    if isinstance(observed, dict):
        return int(observed.get("written") or 0) - int(observed.get("logged") or 0)
    sink = report.get("sink") or {}
    return max(0, int(sink.get("numOutputRows") or 0))


def share_out(total: int, moved: dict[str, int]) -> dict[str, int]:
    """``total`` records shared between topics in proportion to how far each one's
    offsets ``moved`` (largest remainders); all to the one topic when only one moved."""
    weights = {t: m for t, m in moved.items() if m > 0}
    if total <= 0 or not weights:
        return {}
    whole = sum(weights.values())
    if whole == total:
        return weights
    exact = {t: total * m / whole for t, m in weights.items()}
    shares = {t: int(v) for t, v in exact.items()}
    left = total - sum(shares.values())
    for topic in sorted(exact, key=lambda t: shares[t] - exact[t])[:left]:
        shares[topic] += 1
    return {t: n for t, n in shares.items() if n}


class RuntimeStats:
    """The figures of the queries running here, by query id; thread-safe (Spark
    reports progress on its listener thread, requests read on theirs)."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._queries: dict[str, _Query] = {}
        self._lock = threading.Lock()

    def started(self, query_id: str, sink_topic: str | None) -> None:
        """A query starts (again) from zero, writing to ``sink_topic``."""
        with self._lock:
            self._queries[query_id] = _Query(sink_topic)

    def stopped(self, query_id: str) -> None:
        with self._lock:
            self._queries.pop(query_id, None)

    def progress(self, query_id: str, report: dict[str, Any]) -> None:
        """One finished micro-batch of ``query_id``: Spark's progress JSON."""
        now = self._clock_ms()
        with self._lock:
            query = self._queries.get(query_id)
            if query is None:
                return
            for source in report.get("sources") or []:
                end = _offsets(source.get("endOffset"))
                start = _offsets(source.get("startOffset"))
                moved: dict[str, int] = {}
                for topic, partitions in end.items():
                    before = {**start.get(topic, {}), **query.offsets.get(topic, {})}
                    moved[topic] = sum(max(0, o - before.get(p, 0)) for p, o in partitions.items())
                    query.offsets.setdefault(topic, {}).update(partitions)
                count = int(source.get("numInputRows") or 0)
                for topic, n in share_out(count, moved).items():
                    query.consumed.setdefault(topic, _Counter()).add(n, now)
            written = _written(report)
            if written > 0 and query.sink_topic is not None:
                query.produced.add(written, now)

    def topic_stats(self, topic: str) -> list[Stat]:
        """The stats of ``topic``, summed over the queries: the consumer side if any
        query read it, then the producer side if one wrote it (ksqlDB's
        ``MetricCollectors.getStatsFor``)."""
        now = self._clock_ms()
        key = topic.lower()
        with self._lock:
            consumed = [
                c for q in self._queries.values() for t, c in q.consumed.items() if t.lower() == key
            ]
            produced = [
                q.produced
                for q in self._queries.values()
                if q.sink_topic is not None and q.sink_topic.lower() == key and q.produced.total
            ]
            stats: list[Stat] = []
            for counters, rate_name, total_name in (
                (consumed, CONSUMER_RATE, CONSUMER_TOTAL),
                (produced, PRODUCER_RATE, PRODUCER_TOTAL),
            ):
                if counters:
                    last = max(c.last_ms for c in counters)
                    rate = sum(c.rate(now) for c in counters)
                    stats.append(Stat(rate_name, rate, last))
                    stats.append(Stat(total_name, float(sum(c.total for c in counters)), last))
            return stats

    def statistics(self, topic: str) -> str:
        """The ``statistics`` field of ``DESCRIBE <source> EXTENDED``."""
        return format_stats(self.topic_stats(topic), "last-message")

    def host_stats(self, topic: str, host: str) -> list[dict[str, Any]]:
        """The ``clusterStatistics`` entries of this server (ksqlDB's ``QueryHostStat``)."""
        return [
            {"name": s.name, "host": host, "value": s.value, "timestamp": s.timestamp}
            for s in self.topic_stats(topic)
        ]

    def consumed_offsets(self, query_id: str) -> Offsets:
        """The next offset the query will read of each of its topics' partitions, all
        before it processed and written: {} before its first micro-batch."""
        with self._lock:
            query = self._queries.get(query_id)
            if query is None:
                return {}
            return {t: dict(ps) for t, ps in query.offsets.items()}
