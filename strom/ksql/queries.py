"""The server's queries: the persistent ones (CREATE ... AS SELECT, INSERT INTO ...
SELECT) that run on Spark, and the transient push queries that run in the server.

Owns the registry by query id (ksqlDB's ids: ``CSAS_<SINK>_<n>``, ``CTAS_<SINK>_<n>``,
``INSERTQUERY_<n>``, n the command's sequence number in the command topic, so a replay
names them alike; ``transient_<SOURCE>_<n>`` for push queries), which sources each
reads and writes (DROP is refused while a query uses a source, as ksqlDB refuses it),
their states (RUNNING from its creation on, as ksqlDB; ERROR with the reason only when
Spark refused to start it), and the answers of SHOW QUERIES [EXTENDED] and EXPLAIN in
ksqlDB 0.29's shapes.

Spark queries start and stop on one thread of the registry's, in order: a statement
answers once its query is recorded, not once Spark runs it (a session starts in
seconds); TERMINATE waits for the stop. Only the persistent queries this server owns
run here (``owns``, set from ``strom.ksql.ownership``); ``rebalance`` stops those it
gave up, keeping their checkpoints, and starts those it received; a server that runs
none of the service's queries starts its SparkSession once there is one (a takeover then
waits for the query's start, not for Spark's).

A query whose Spark run failed (a record it cannot get past, a Python worker that did not
start...) is retried as ksqlDB 0.29 retries one: its Kafka Streams uncaught-exception
handler adds the failure to the query's queryErrors, sleeps, and has the failed thread
replaced (REPLACE_THREAD), so the client never reaches ERROR and SHOW QUERIES keeps the
query RUNNING while its queryErrors grow, one a failure, each kept an hour (its
``ksql.query.error.max.queue.size`` bounds nothing: the size-bounded queue is only copied
into an unbounded one). The sleep doubles the previous one (from
``ksql.query.retry.backoff.initial.ms``, so the first is twice it) up to
``ksql.query.retry.backoff.max.ms``, and is never shortened again; both are read from the
query's own properties, else the server's. Strom starts the Spark query again from its
checkpoint after that wait.

PAUSE stops a persistent query's Spark query where it runs, its checkpoint kept, and
marks it PAUSED on every server (ksqlDB's statusCount and ksqlHostQueryStatus; its
``state`` stays RUNNING, ksqlDB's aggregate): no rebalance or retry starts it until
RESUME starts it again from its checkpoint, so under exactly_once_v2 it goes on from
the last micro-batch committed, nothing lost or written twice.

Does not own planning (``strom.ksql.planner``), Spark (``strom.ksql.runtime``) or the
statements (``strom.ksql.engine``).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.ksql.planner import QueryPlan

log = logging.getLogger(__name__)

PERSISTENT = "PERSISTENT"
_RETRY_CHECK_S = 1.0  # how often the registry looks for failed queries
_SETTLE_S = 60.0  # the longest wait for a started query's sources
_INITIALIZING = "Initializing sources"  # Spark's status of a query not yet reading
PUSH = "PUSH"
_ERRORS_KEPT_MS = 3_600_000  # how long a query's errors are kept (ksqlDB's hour)
_RETRY_INITIAL = "ksql.query.retry.backoff.initial.ms"
_RETRY_MAX = "ksql.query.retry.backoff.max.ms"


@dataclass
class RunningQuery:
    query_id: str
    statement: str
    plan: QueryPlan
    query_type: str = PERSISTENT
    state: str = "RUNNING"  # as ksqlDB, from its creation on (ERROR: Spark refused it)
    error: str | None = None
    started: bool = False  # Spark runs it
    properties: dict[str, Any] = field(default_factory=dict)
    stop: Callable[[], None] | None = None  # a push query's
    # ksqlDB's queryErrors: each failure's time (ms), message and type, kept an hour
    errors: list[dict[str, Any]] = field(default_factory=list)
    failing: bool = False  # its Spark run failed: it is started again after a backoff
    paused: bool = False  # PAUSE: its Spark query stopped, its checkpoint kept

    def failed(self, error: str, retried: bool = True, now_ms: int | None = None) -> None:
        """A run of the query ended with ``error``: the failure joins its errors. A
        query that is retried stays RUNNING, as ksqlDB's (its failed thread replaced);
        one Spark refused to start is ERROR."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.errors.append({"timestamp": now, "errorMessage": error, "type": error_type(error)})
        self.error = error
        if not retried:
            self.state = "ERROR"
        self.query_errors(now)

    def query_errors(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Its errors of the last hour, the oldest first (older ones forgotten)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        while self.errors and self.errors[0]["timestamp"] <= now - _ERRORS_KEPT_MS:
            del self.errors[0]
        return list(self.errors)

    @property
    def status(self) -> str:
        """ksqlDB's KsqlQueryStatus: PAUSED while paused, else its state."""
        return "PAUSED" if self.paused else self.state

    @property
    def sources(self) -> list[str]:
        return [source.name for source in self.plan.sources]

    @property
    def sinks(self) -> list[str]:
        return [self.plan.sink.name] if self.plan.sink is not None else []

    def running_json(self) -> dict[str, Any]:
        """ksqlDB's ``RunningQuery``."""
        sink = self.plan.sink
        return {
            "queryString": self.statement,
            "sinks": self.sinks,
            "sinkKafkaTopics": [sink.topic] if sink is not None else [],
            "id": self.query_id,
            "statusCount": {self.status: 1},
            "queryType": self.query_type,
            "state": "RUNNING" if self.paused else self.state,  # ksqlDB's aggregate
        }

    def description_json(self, host: str | None) -> dict[str, Any]:
        """ksqlDB's ``QueryDescription``."""
        plan = self.plan
        fields = [
            {
                "name": p.name,
                "schema": p.type.schema_json(),
                **({"type": "KEY"} if p.namespace == "KEY" else {}),
            }
            for p in plan.projection
        ]
        window = plan.aggregation.window if plan.aggregation is not None else None
        return {
            "id": self.query_id,
            "statementText": self.statement,
            "windowType": window.kind if window is not None else plan.source.window_type,
            "fields": fields,
            "sources": self.sources,
            "sinks": self.sinks,
            "topology": describe_topology(plan),
            "executionPlan": describe_topology(plan),
            "overriddenProperties": dict(self.properties),
            "ksqlHostQueryStatus": {host: self.status} if host is not None else {},
            "queryType": self.query_type,
            "queryErrors": self.query_errors(),
            "tasksMetadata": [],
            "state": "RUNNING" if self.paused else self.state,
        }


def start_error(exc: Exception) -> str:
    """Why a persistent query did not start, in one line: a server installed without
    PySpark (``pip install strom``, not ``strom[spark]``) says what to install."""
    if isinstance(exc, ImportError):
        return (
            f"{exc}: persistent queries run on Spark, which needs Strom's spark extra "
            "(pip install 'strom[spark]', or -e '.[spark]' in a checkout) and Java 17+; "
            "restart the server after installing it"
        )
    lines = str(exc).splitlines()
    first = lines[0] if lines else type(exc).__name__
    if "JAVA_GATEWAY_EXITED" in first:  # Spark's JVM did not start
        first += " (Spark needs Java 17+: java on the PATH, or JAVA_HOME)"
    return first


# the failures ksqlDB's classifiers call the user's (QueryError's type USER): a function's
# (KsqlFunctionClassifier: a DECIMAL SUM that overflows) and a row the sink cannot
# serialize (KsqlSerializationClassifier: its topic is no internal one); others UNKNOWN
_USER_ERRORS = re.compile(
    r"^Exception caught in process\. (?:.*Numeric field overflow|Unable to serialize record)"
)


def error_type(error: str) -> str:
    """A query failure's type in its queryErrors, as ksqlDB classifies it."""
    return "USER" if _USER_ERRORS.match(error) else "UNKNOWN"


def next_backoff_ms(waited_ms: int, largest_ms: int) -> int:
    """The wait before a failed query's next run, after ``waited_ms`` before its last
    (the initial backoff before the first): doubled, at most ``largest_ms``, as
    ksqlDB's RetryEvent."""
    return waited_ms * 2 if waited_ms * 2 < largest_ms else largest_ms


def describe_topology(plan: QueryPlan) -> str:
    """The query's steps, one a line (ksqlDB's ``executionPlan`` in spirit)."""
    steps = [f" > [ SOURCE ] | Schema: {plan.source.name} | topic: {plan.source.topic}"]
    if plan.join is not None:
        right = plan.join.right
        steps.append(f" > [ SOURCE ] | Schema: {right.name} | topic: {right.topic}")
        steps.append(f"\t\t > [ {plan.join.kind} JOIN ] (transformWithStateInPandas)")
    if plan.where is not None:
        steps.append("\t\t > [ FILTER ]")
    if plan.partition_by is not None:
        steps.append("\t\t > [ PARTITION BY ]")
    if plan.aggregation is not None:
        window = plan.aggregation.window
        steps.append("\t\t > [ GROUP BY ] (transformWithStateInPandas)")
        steps.append(f"\t\t > [ AGGREGATE{' ' + window.kind if window is not None else ''} ]")
    steps.append("\t\t > [ PROJECT ] (mapInArrow)")
    if plan.sink is not None:
        steps.append(f"\t\t > [ SINK ] | Schema: {plan.sink.name} | topic: {plan.sink.topic}")
    return "\n".join(steps)


class QueryRegistry:
    """The queries by id; Spark starts and stops them on the registry's thread."""

    def __init__(
        self,
        runtime_factory: Callable[[], Any],
        host: str = "",
        retry_backoff_ms: tuple[int, int] = (15_000, 900_000),
    ) -> None:
        self.queries: dict[str, RunningQuery] = {}
        self.host = host
        self._runtime_factory = runtime_factory
        self._runtime: Any = None
        # Whether this server runs a persistent query (``strom.ksql.ownership``): the
        # servers of a service id divide them; none until the server joins its group.
        self.owns: Callable[[str], bool] = lambda query_id: False
        self._specs: dict[str, Any] = {}  # the Spark spec of each persistent query
        self._starting: set[str] = set()  # starts queued, not yet run
        self._warming = False  # Spark's start asked for ahead of a query (``start``)
        # A failed query is started again (ksqlDB's ksql.query.retry.backoff.*): the
        # initial backoff and the largest; each query's next try (monotonic s) and the
        # wait before it.
        self._retry_backoff_ms = retry_backoff_ms
        self._retries: dict[str, tuple[float, int]] = {}
        self._failures = threading.Lock()  # a failed run is seen once
        # The server (REST URL) that runs each of the given persistent queries.
        self.hosts_of: Callable[[list[str]], dict[str, str]] = lambda ids: dict.fromkeys(
            ids, self.host
        )
        self._actions: queue.Queue[tuple[str, Any, threading.Event | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="ksql-queries", daemon=True)
        self._worker.start()

    @property
    def runtime(self) -> Any:
        if self._runtime is None:
            self._runtime = self._runtime_factory()
        return self._runtime

    # ---- persistent queries
    def add(self, query: RunningQuery) -> None:
        with self._lock:
            self.queries[query.query_id] = query

    def start(self, query: RunningQuery, spec: Any) -> None:
        """Starts the query on Spark (later, on the registry's thread) when this server
        owns it; restarts it with ``spec`` when it runs (CREATE OR REPLACE)."""
        with self._lock:
            self._specs[query.query_id] = spec
        if self.owns(query.query_id):
            if not query.paused:  # a paused one waits for RESUME
                self._queue_start(query, spec)
        elif not self._warming:
            # Another server runs it; this one starts its Spark now all the same, so
            # that taking a query over (its owner gone) waits for the query's start,
            # not for Spark's too (a minute on a loaded machine).
            self._warming = True
            self._actions.put(("warm", None, None))

    def _queue_start(self, query: RunningQuery, spec: Any) -> None:
        with self._lock:
            self._starting.add(query.query_id)
        self._actions.put(("start", (query, spec), None))

    def rebalance(self) -> None:
        """After the owned queries changed: the queries no longer owned stopped (their
        checkpoints kept, for their new owner), then the newly owned ones started."""
        with self._lock:
            persistent = [
                q for q in self.queries.values() if q.query_type == PERSISTENT and q.plan.sink
            ]
        released = []
        starting = self._starting
        for query in persistent:
            owned = self.owns(query.query_id)
            if not owned and (query.started or query.query_id in self._starting):
                done = threading.Event()
                self._actions.put(("release", query, done))
                released.append(done)
            elif owned and not (query.started or query.paused or query.query_id in starting):
                spec = self._specs.get(query.query_id)
                if spec is not None:
                    self._queue_start(query, spec)
        for done in released:
            done.wait()

    def terminate(self, query_id: str, delete_state: bool = True) -> None:
        """Stops the query and forgets it (and, for a persistent one, its checkpoint)."""
        with self._lock:
            query = self.queries.pop(query_id, None)
        if query is None:
            return
        if query.stop is not None:
            query.stop()
            return
        with self._lock:
            self._specs.pop(query_id, None)
        done = threading.Event()
        # The checkpoint goes with the query where it ran; elsewhere its owner deletes it.
        ran_here = query.started or (query.paused and self.owns(query_id))
        self._actions.put(("stop", (query_id, delete_state and ran_here), done))
        done.wait()

    def pause(self, query_id: str) -> None:
        """PAUSE (ksqlDB's ``PersistentQueryMetadata.pause``): the persistent query is
        PAUSED on every server; where it runs, its Spark query is stopped (waited for)
        with its checkpoint kept, and neither a rebalance nor a retry starts it until
        RESUME. A query already paused, or not known, is left as it is."""
        query = self.queries.get(query_id)
        if query is None or query.query_type != PERSISTENT or query.paused:
            return
        query.paused = True
        done = threading.Event()
        self._actions.put(("pause", query, done))
        done.wait()

    def resume(self, query_id: str) -> None:
        """RESUME: a paused persistent query runs again where it is owned, from its
        checkpoint: from the offsets after the last micro-batch it committed."""
        query = self.queries.get(query_id)
        if query is None or not query.paused:
            return
        query.paused = False
        spec = self._specs.get(query_id)
        if spec is not None and self.owns(query_id) and not query.started:
            if query_id not in self._starting:
                self._queue_start(query, spec)

    def _run(self) -> None:
        while True:
            try:
                action, argument, done = self._actions.get(timeout=_RETRY_CHECK_S)
            except queue.Empty:
                self._retry_failed()
                continue
            try:
                if action == "warm":
                    self.runtime.warm()
                elif action == "close":
                    if self._runtime is not None:
                        self._runtime.close()
                    return
                if action == "pause":
                    if self._runtime is not None and argument.query_id in self._runtime.queries:
                        self._runtime.stop(argument.query_id, False)  # its checkpoint kept
                    argument.started = False
                elif action == "release":
                    if self._runtime is not None:
                        self._runtime.stop(argument.query_id, False)
                    argument.started = False
                elif action == "start":
                    query, spec = argument
                    with self._lock:
                        self._starting.discard(query.query_id)
                    if query.query_id not in self.queries or not self.owns(query.query_id):
                        continue  # terminated, or given to another server, before it started
                    if query.paused:
                        continue  # paused before it started: RESUME starts it
                    try:
                        if query.query_id in self.runtime.queries:  # CREATE OR REPLACE
                            self.runtime.stop(query.query_id, False)  # its checkpoint kept
                        self.runtime.start(spec)
                        query.started, query.failing = True, False
                        self._settle(query.query_id)
                    except Exception as exc:  # Spark refused the query: its state says why
                        query.failed(start_error(exc), retried=False)
                        log.warning("query %s did not start: %s", query.query_id, query.error)
                elif action == "stop" and (self._runtime is not None or argument[1]):
                    query_id, delete_state = argument  # (a paused query's checkpoint too)
                    self.runtime.stop(query_id, delete_state)
            except Exception:
                log.exception("ksql query action %s failed", action)
            finally:
                if done is not None:
                    done.set()

    def _settle(self, query_id: str) -> None:
        """Waits (a bounded time) while Spark initializes the query's sources: each
        starts Python processes that must connect back to the JVM within Spark's fixed
        10 s, which several queries starting at once on a busy machine miss."""
        streaming = self.runtime.queries.get(query_id)
        deadline = time.monotonic() + _SETTLE_S
        while streaming is not None and time.monotonic() < deadline:
            if not self.owns(query_id):  # given up: the group waits for its release
                return
            try:
                if not streaming.isActive or streaming.status["message"] != _INITIALIZING:
                    return
            except Exception:  # the JVM's answer, whatever went wrong: stop waiting
                return
            time.sleep(0.1)

    def _retry_failed(self) -> None:
        """A persistent query Spark failed (a record it cannot get past, a Python worker
        that did not start in time, the cluster gone for a while...) is started again
        from its checkpoint once its backoff has passed (``_observe``)."""
        runtime = self._runtime
        if runtime is None:
            return
        for query in list(self.queries.values()):
            if query.query_type != PERSISTENT or not query.started:
                continue
            self._observe(query)
            if not query.failing:
                continue
            due, _ = self._retries[query.query_id]
            spec = self._specs.get(query.query_id)
            if time.monotonic() < due or spec is None or not self.owns(query.query_id):
                continue
            log.warning("query %s failed (%s); starting it again", query.query_id, query.error)
            try:
                runtime.stop(query.query_id, False)
                runtime.start(spec)
                with self._failures:
                    query.failing, query.error = False, None
                self._settle(query.query_id)
            except Exception as exc:  # Spark refused it again: retried after a longer wait
                with self._failures:
                    self._failed_run(query, start_error(exc))

    def _observe(self, query: RunningQuery) -> None:
        """A failed Spark run of the query, seen for the first time, joins its errors
        and has its next run scheduled."""
        runtime = self._runtime
        if runtime is None:
            return
        with self._failures:
            if query.failing:
                return
            state, error = runtime.state(query.query_id)
            if state == "ERROR":
                self._failed_run(query, error or "")

    def _failed_run(self, query: RunningQuery, error: str) -> None:
        query.failing = True
        query.failed(error)
        initial, largest = self._backoff_ms(query)
        _, waited = self._retries.get(query.query_id, (0.0, initial))
        wait = next_backoff_ms(waited, largest)
        self._retries[query.query_id] = (time.monotonic() + wait / 1000, wait)

    def _backoff_ms(self, query: RunningQuery) -> tuple[int, int]:
        """The query's ksql.query.retry.backoff.initial.ms and .max.ms: its own
        properties', else the server's."""
        backoff = []
        for name, default in zip((_RETRY_INITIAL, _RETRY_MAX), self._retry_backoff_ms, strict=True):
            try:
                value = int(str(query.properties.get(name, default)).strip())
            except ValueError:
                value = default
            backoff.append(value if value > 0 else default)
        return backoff[0], backoff[1]

    def refresh(self) -> None:
        """Takes the failures of the Spark queries (``_observe``)."""
        if self._runtime is None:
            return
        for query in list(self.queries.values()):
            if query.query_type == PERSISTENT and query.started:
                self._observe(query)

    # ---- questions
    def using(self, source: str) -> tuple[list[str], list[str]]:
        """The ids of the persistent queries that read ``source`` and that write it."""
        reads = sorted(
            q.query_id for q in self.queries.values() if source in q.sources and q.plan.sink
        )
        writes = sorted(q.query_id for q in self.queries.values() if source in q.sinks)
        return reads, writes

    def show(self, text: str, extended: bool) -> dict[str, Any]:
        self.refresh()
        listed = sorted(self.queries.values(), key=lambda q: q.query_id)
        if extended:
            hosts = self._hosts(listed)
            return {
                "@type": "query_descriptions",
                "statementText": text,
                "queryDescriptions": [q.description_json(hosts[q.query_id]) for q in listed],
                "warnings": [],
            }
        return {
            "@type": "queries",
            "statementText": text,
            "queries": [q.running_json() for q in listed],
            "warnings": [],
        }

    def explain(self, text: str, query: RunningQuery) -> dict[str, Any]:
        self.refresh()
        return {
            "@type": "queryDescription",
            "statementText": text,
            "queryDescription": query.description_json(self._hosts([query])[query.query_id]),
            "warnings": [],
        }

    def _hosts(self, queries: list[RunningQuery]) -> dict[str, str | None]:
        """Where each query runs: this server for a push query, the owner for a
        persistent one (None when no server has it)."""
        persistent = [q.query_id for q in queries if q.query_type == PERSISTENT and q.query_id]
        found = self.hosts_of(persistent) if persistent else {}
        return {q.query_id: found.get(q.query_id) if q.query_id in persistent else self.host
                for q in queries}  # fmt: skip

    def close(self) -> None:
        for query in list(self.queries.values()):
            if query.stop is not None:
                query.stop()
        done = threading.Event()
        self._actions.put(("close", None, done))
        done.wait(120)
