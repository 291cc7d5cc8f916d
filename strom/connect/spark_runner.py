"""The Spark runner: connectors' tasks as Spark jobs on a SparkSession this worker owns,
behind ``runtime.TaskRunner``; and ``RunnerByTask``, which hands each task to the runner
its class asks for (a ``spark_tasks`` task to Spark, any other to the in-worker runner).

The worker is the Spark driver. Its session starts with the first Spark task (a JVM: a few
seconds), on ``spark.master`` (default ``local[*]``) with every ``spark.*`` worker
property as a Spark setting, and Debian's JDBC driver jars (PostgreSQL, MariaDB, SQLite)
on its class path when they are installed. Checkpoints live under
``spark.sql.streaming.checkpointLocation`` (default ``<temp dir>/strom-connect/<group>``),
one directory per task.

- A sink task is a Structured Streaming query over the ``strom`` source (the connector's
  ``topics`` or ``topics.regex``) whose ``foreachBatch`` calls the task's ``write_batch``.
  After each micro-batch the offsets it ended at are committed in the group
  ``connect-<name>``, where Kafka users see Kafka Connect's sink offsets. The group is the
  truth: a task starts from its checkpoint only when the checkpoint's last batch ended
  where the group's offsets are, and otherwise from the group's offsets (altered or reset
  through the REST API, or a batch written but not yet committed there: replayed), or
  from the offsets the task stored with its writes where those are ahead (exactly once).
  A task may instead start queries of its own on streams the runner opens (the lake
  sink: Spark's file sink, whose checkpoint is the truth); the group's offsets follow
  their progress all the same. A task with a ``range_writer`` (the JDBC sink) has no
  query: each micro-batch is a Spark job of one task per topic-partition range that
  fetches the range and writes it in one Python process (``spark_ranges``), its ends
  committed in the group after it, which is the only record of where the task is.
- A source task is a loop on a driver thread: ``poll_batches``, each batch's rows turned
  into records with the value converter (JsonConverter: from the rows' Arrow columns in
  Spark's Python workers where ``spark_envelopes`` takes the schema, else in Spark SQL;
  any other converter in Python on the executors), written with the ``strom`` batch
  writer (which fails unless every record is acknowledged), then the batch's source
  offset stored through the worker's offset store. A missing topic is created first, by
  the connector's ``topic.creation.*`` groups when it has them. With exactly-once source support the
  records are brought to the driver and written by one transactional producer instead,
  each transaction (``transaction.boundary`` poll or interval) with its offsets.
- KIP-558's active topics: a source's topic once a batch is written to it (each record
  acknowledged, with transactions), a sink's once a micro-batch or range read from it.

Pause stops a sink's query (resumed from its checkpoint) or a source's loop between
batches; a task that raises, or whose query dies, is FAILED with the trace, except a
sink's queries failed because Spark's Python process for a streaming source did not
connect back in time on a busy machine: started again (``TransientRestarts``). Does not
own what a task reads or writes (the connectors).
"""

from __future__ import annotations

import copyreg
import functools
import json
import logging
import pickle
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.connect.api import ConnectException, OffsetStorageReader, SourcePartition
from strom.connect.connector_config import make_converter
from strom.connect.converters import Converter, JsonConverter, schema_to_json
from strom.connect.data import BYTES, DATE, DECIMAL, STRUCT, TIME, TIMESTAMP, Schema, Struct
from strom.connect.runtime import (
    INTERVAL_BOUNDARY,
    POLL_BOUNDARY,
    RUNNING,
    InWorkerRunner,
    TaskId,
    TaskRunner,
    TaskSpec,
    _StoreReader,
    _TaskThread,
    task_name,
)
from strom.connect.spark_tasks import SourceBatch, SparkSinkTask, SparkSourceTask
from strom.connect.stores import compact_json, offset_key
from strom.connect.topic_creation import TopicCreator
from strom.connect.worker_config import WorkerConfig

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
CHECKPOINT_KEY = "spark.sql.streaming.checkpointLocation"
JDBC_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/mariadb-java-client.jar",
    "/usr/share/java/sqlite-jdbc.jar",
)
SINK_TRIGGER = "200 milliseconds"
RANGE_BATCH_INTERVAL_S = 0.2  # a range-reading sink's look for new records when idle
WATCH_S = 1  # seconds between looks at a query (its offsets commit then)
# Spark starts a streaming query's Python source runner as a fresh process (not forked
# from its daemon, as executors' workers are) and gives it 10 s, fixed in Spark's
# ``PythonWorkerFactory.createSimpleWorker``, to connect back; a machine at a load of 20
# on 2 cores misses that for minutes on end. Such a failure restarts the task's queries
# after a pause that grows (``RESTART_PAUSES_S``), for as long as
# ``TRANSIENT_PATIENCE_S`` passes without a micro-batch done; a batch done forgets the
# failures before it.
TRANSIENT_FAILURES = ("Python worker failed to connect back",)
RESTART_PAUSES_S = (1.0, 2.0, 5.0, 10.0)
TRANSIENT_PATIENCE_S = 600.0


class SparkSessionHolder:
    """The worker's one SparkSession, started when the first Spark task needs it."""

    def __init__(self, worker_config: WorkerConfig) -> None:
        props = worker_config.props
        self.settings = {"spark.ui.showConsoleProgress": "false"}
        self.settings.update({k: v for k, v in props.items() if k.startswith("spark.")})
        self.master = self.settings.pop("spark.master", DEFAULT_MASTER)
        group = props.get("group.id") or "standalone"
        default_root = Path(tempfile.gettempdir()) / "strom-connect" / group
        self.checkpoint_root = Path(self.settings.pop(CHECKPOINT_KEY, str(default_root)))
        jars = [j for j in JDBC_JARS if Path(j).exists()]
        if self.settings.get("spark.jars"):
            jars.insert(0, self.settings["spark.jars"])
        if jars:
            self.settings["spark.jars"] = ",".join(jars)
        self.session: SparkSession | None = None
        self._lock = threading.Lock()

    def get(self) -> SparkSession:
        with self._lock:
            if self.session is None:
                import strom.spark

                log.info("starting the worker's SparkSession on %s", self.master)
                self.session = strom.spark.local_session(
                    "strom-connect", master=self.master, **self.settings
                )
                self.session.sparkContext.setLogLevel("WARN")
            return self.session

    def stop(self) -> None:
        with self._lock:
            if self.session is not None:
                self.session.stop()
                self.session = None


class _SparkTaskThread(_TaskThread):
    """A Spark task's driver thread (states, target state and stop as the in-worker
    runner's threads): its Spark jobs run in its job group."""

    runner: SparkRunner

    def __init__(self, spec: TaskSpec, target_state: str, runner: SparkRunner) -> None:
        super().__init__(spec, target_state, runner, runner.generation)
        self.name = f"spark task {task_name(spec.task_id)}"
        self.job_group = f"connect-{task_name(spec.task_id)}"
        self.restarts = TransientRestarts()

    def execute(self) -> None:
        config = self.spec.connector_config
        unserved = [
            key
            for key, idle in (("transforms", ""), ("errors.tolerance", "none"))
            if config.get(key, idle).strip() not in ("", idle)
        ]
        if unserved:  # the record path's transforms and error handling are the in-worker runner's
            raise ConnectException(
                f"{', '.join(unserved)}: not applied to tasks on the Spark runner yet; "
                "remove the setting"
            )
        spark = self.runner.sessions.get()
        # A Python data source (``strom``) is found through the JVM thread's active
        # session, which a thread other than the session's first one does not have.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]
        spark.sparkContext.setJobGroup(self.job_group, self.job_group, True)
        self.run_on(spark)

    def run_on(self, spark: SparkSession) -> None:
        raise NotImplementedError

    def converter(self, side: str) -> Converter:
        """The connector's ``side`` ("key" or "value") converter, else the worker's, made
        to travel to the executors (``shippable``)."""
        props = self.runner.worker_config.props
        converter = make_converter(side, self.spec.connector_config, props, self.runner.plugins)
        return shippable(converter, side, self.spec.connector_config, props)

    def request_stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()

    def cancel_jobs(self) -> None:
        session = self.runner.sessions.session
        if session is not None:
            session.sparkContext.cancelJobGroup(self.job_group)


def shippable(
    converter: Converter,
    side: str,
    connector_props: Mapping[str, str],
    worker_props: Mapping[str, str],
) -> Converter:
    """``converter``, picklable for Spark's executors: a converter holding what does not
    pickle (the schema registry client's SSL context, in the Avro, Protobuf and JSON Schema
    converters) is made again from its settings where it is unpickled."""
    try:
        pickle.dumps(converter)
        return converter
    except Exception:
        pass
    converter.__dict__[_RECIPE] = (side, dict(connector_props), dict(worker_props))
    copyreg.pickle(type(converter), _converter_recipe)
    return converter


_RECIPE = "_strom_converter_recipe"


def _converter_recipe(
    converter: Converter,
) -> tuple[Any, tuple[str, dict[str, str], dict[str, str]]]:
    return _make_converter_again, converter.__dict__[_RECIPE]


def _make_converter_again(
    side: str, connector_props: dict[str, str], worker_props: dict[str, str]
) -> Converter:
    from strom.connect.plugins import Plugins

    converter = make_converter(side, connector_props, worker_props, Plugins.builtin())
    converter.__dict__[_RECIPE] = (side, connector_props, worker_props)
    return converter


class _SourceThread(_SparkTaskThread):
    topics_seen: set[str]
    topic_creator: TopicCreator | None

    def run_on(self, spark: SparkSession) -> None:
        connector = self.spec.task_id[0]
        task = self.spec.task_class()
        assert isinstance(task, SparkSourceTask)
        self.task = task
        transactions = (
            _SourceTransactions(self, connector) if self.runner.exactly_once_source else None
        )
        reader: OffsetStorageReader = _StoreReader(self.runner.offset_store, connector)
        if transactions is not None:
            reader = _OpenTransactionReader(reader, transactions)
        task.initialize(spark, reader)
        task.start(dict(self.spec.task_config))
        value_converter = self.converter("value")
        self.topics_seen = set()
        self.topic_creator = TopicCreator.for_connector(
            self.config["topic.creation.enable"],
            self.spec.connector_config,
            self.client_settings("admin"),
        )
        kafka_options = kafka_writer_options(self.runner.worker_config)
        self.report(RUNNING)
        try:
            while not self.stopping.is_set():
                self.wait_while_paused(lambda: None if transactions is None else transactions.end())
                if self.stopping.is_set():
                    break
                batches = task.poll_batches(lambda: self.stopping.is_set() or self.paused)
                if transactions is not None:
                    transactions.write(batches, value_converter)
                    continue
                for batch in batches:
                    self.write(batch, value_converter, kafka_options, connector)
            if transactions is not None:
                transactions.end()
        finally:
            if transactions is not None:
                transactions.close()
            task.stop()

    def ensure_topic(self, topic: str) -> None:
        """Create a missing topic: by the connector's ``topic.creation.*`` groups when it
        uses topic creation (KIP-158, as the in-worker runner does), else with the broker's
        defaults (partitions, replication)."""
        if topic in self.topics_seen:
            return
        if self.topic_creator is not None:
            self.topic_creator.ensure(topic)
            self.topics_seen.add(topic)
            return
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.runner.worker_config.client_settings("admin"))
        if topic not in admin.list_topics(timeout=10).topics:
            future = admin.create_topics([NewTopic(topic, -1, -1)])[topic]
            try:
                future.result(timeout=30)
                log.info("created topic %s", topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        self.topics_seen.add(topic)

    def write(
        self,
        batch: SourceBatch,
        value_converter: Converter,
        kafka_options: dict[str, str],
        connector: str,
    ) -> None:
        self.ensure_topic(batch.topic)
        if _envelopes_in_arrow(batch, value_converter):
            from strom.connect.spark_envelopes import EnvelopeWriter

            assert isinstance(value_converter, JsonConverter)
            writer = EnvelopeWriter(
                batch.topic, batch.value_schema, value_converter.schemas_enabled, kafka_options
            )
            batch.rows.mapInArrow(writer, "written long").collect()
        else:
            records = record_frame(batch, value_converter)
            records.write.format("strom").options(**kafka_options).option(
                "topic", batch.topic
            ).mode("append").save()
        self.active_topic(batch.topic)  # KIP-558: its records are written
        if batch.source_offset is not None:
            partition = dict(batch.source_partition)
            key = offset_key(connector, partition)
            self.runner.offset_store.put(connector, {key: (partition, dict(batch.source_offset))})


class _SourceTransactions:
    """Exactly-once source support (KIP-618) for a task on Spark: each batch's records,
    converted by Spark, are brought to the driver and written by one transactional
    producer (``transactional.id`` ``<group.id>-<connector>-<task>``, as the in-worker
    runner's, so a task started elsewhere fences this one and aborts its open
    transaction), in one transaction with the batch's source offsets in the offsets
    topic. ``transaction.boundary`` ``poll`` ends a transaction after each poll's batches,
    ``interval`` after the first poll once ``transaction.boundary.interval.ms`` (default
    ``offset.flush.interval.ms``) has passed since it began; ``connector`` is refused at
    validation (no Spark connector defines its own)."""

    def __init__(self, thread: _SourceThread, connector: str) -> None:
        from confluent_kafka import Producer

        config = thread.config
        settings = thread.spec.connector_config
        self.thread = thread
        self.connector = connector
        boundary = (settings.get("transaction.boundary") or POLL_BOUNDARY).lower()
        if boundary not in (POLL_BOUNDARY, INTERVAL_BOUNDARY):
            raise ConnectException(
                f"transaction.boundary={boundary}: tasks on the Spark runner take poll or interval"
            )
        interval_ms = settings.get("transaction.boundary.interval.ms")
        self.interval_s = (
            (int(interval_ms) if interval_ms else config["offset.flush.interval.ms"]) / 1000
            if boundary == INTERVAL_BOUNDARY
            else 0.0
        )
        self.offsets_topic: str = config["offset.storage.topic"]
        self.timeout_s = thread.flush_timeout_s * 6
        number = thread.spec.task_id[1]
        self.producer = Producer(
            {
                **thread.client_settings("producer"),
                "transactional.id": f"{config['group.id']}-{connector}-{number}",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
            }
        )
        self.producer.init_transactions(self.timeout_s)
        self.failures: list[str] = []
        self.pending: dict[bytes, tuple[Any, Any]] = {}
        self.began: float | None = None

    def delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(f"{message.topic()}: {error}")
        elif message.topic() != self.offsets_topic:
            self.thread.active_topic(message.topic())  # KIP-558

    def write(self, batches: list[SourceBatch], value_converter: Converter) -> None:
        for batch in batches:
            self.thread.ensure_topic(batch.topic)
            if self.began is None:
                self.producer.begin_transaction()
                self.began = time.monotonic()
            for row in record_frame(batch, value_converter).toLocalIterator():
                self.produce(batch.topic, row["value"])
            if batch.source_offset is not None:
                partition = dict(batch.source_partition)
                key = offset_key(self.connector, partition)
                self.pending[key] = (partition, dict(batch.source_offset))
        if self.began is not None and time.monotonic() - self.began >= self.interval_s:
            self.end()

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None) -> None:
        from confluent_kafka import KafkaException

        while True:
            try:
                self.producer.produce(topic, value, key, on_delivery=self.delivered)
                return
            except BufferError:  # the producer's queue is full: let it drain
                self.producer.poll(0.1)
            except KafkaException:  # the transaction failed: say why (a record refused)
                self.producer.poll(0)
                if self.failures:
                    raise ConnectException(
                        f"Unrecoverable exception from producer: {self.failures[0]}"
                    ) from None
                raise

    def end(self) -> None:
        """Commit the open transaction, with the offsets of its batches."""
        from confluent_kafka import KafkaException

        if self.began is None:
            return
        for key, (_, offset) in self.pending.items():
            self.produce(self.offsets_topic, compact_json(offset), key)
        try:
            self.producer.commit_transaction(self.timeout_s)
        except KafkaException:
            self.producer.abort_transaction(self.timeout_s)
            raise
        if self.failures:
            raise ConnectException(f"Unrecoverable exception from producer: {self.failures[0]}")
        self.thread.runner.offset_store.note(self.pending)
        self.pending.clear()
        self.began = None

    def close(self) -> None:
        self.producer.flush(self.thread.flush_timeout_s)


class _OpenTransactionReader(OffsetStorageReader):
    """A source task's offsets as its open transaction will commit them, else as stored: a
    task that reads its position at each poll (the JDBC source) goes on from the batches
    written in a transaction spanning polls (``transaction.boundary=interval``)."""

    def __init__(self, stored: OffsetStorageReader, transactions: _SourceTransactions) -> None:
        self.stored = stored
        self.transactions = transactions

    def offset(self, partition: SourcePartition) -> dict[str, Any] | None:
        pending = self.transactions.pending.get(
            offset_key(self.transactions.connector, dict(partition))
        )
        return dict(pending[1]) if pending is not None else self.stored.offset(partition)


class _SinkThread(_SparkTaskThread):
    def run_on(self, spark: SparkSession) -> None:
        connector = self.spec.task_id[0]
        task = self.spec.task_class()
        assert isinstance(task, SparkSinkTask)
        self.task = task
        task.initialize(spark)
        task.start(dict(self.spec.task_config))
        key_converter, value_converter = self.converter("key"), self.converter("value")
        checkpoint = self.runner.sessions.checkpoint_root / task_name(self.spec.task_id)
        group = GroupOffsets(self.runner.worker_config, f"connect-{connector}")

        def write(batch: DataFrame, batch_id: int) -> None:
            task.write_batch(batch, batch_id, key_converter, value_converter)

        def open_stream(topics: list[str]) -> DataFrame:
            return self.stream(spark, topics, group.committed(topics))

        range_writer = task.range_writer(key_converter, value_converter)
        try:
            while not self.stopping.is_set():
                self.wait_while_paused(lambda: None)
                if self.stopping.is_set():
                    break
                queries = task.start_streams(open_stream, key_converter, value_converter)
                if queries is None and range_writer is not None:
                    self.report(RUNNING)
                    self.write_ranges(spark, task, range_writer, group)
                    continue
                if queries is None:
                    queries = [self.start_query(spark, task, checkpoint, group, write)]
                self.report(RUNNING)
                try:
                    self.watch(queries, group)
                finally:
                    for query in queries:
                        if query.isActive:
                            query.stop()
                        self.commit_progress(query, group)
                failures = [str(f) for f in (q.exception() for q in queries) if f is not None]
                if failures and self.transient(failures):
                    self.stopping.wait(self.restarts.pause_s())
                    continue
                if failures and not all(task.restart_after(f) for f in failures):
                    raise RuntimeError(f"the task's streaming query failed: {failures[0]}")
        finally:
            group.close()
            task.stop()

    def write_ranges(
        self,
        spark: SparkSession,
        task: SparkSinkTask,
        writer: Callable[[list[Any]], int],
        group: GroupOffsets,
    ) -> None:
        """Micro-batches of offset ranges, each read and written by the Spark tasks of one
        job (``spark_ranges``), its ends then committed in the group, until the task is
        stopped or paused. A topic-partition starts at the group's offsets, or the task's
        stored ahead of them, else at the earliest."""
        from strom.connect.spark_ranges import RangeBatches, write_ranges_job
        from strom.spark.kafka_meta import to_json

        options = kafka_reader_options(self.runner.worker_config)
        topics = self.topics()
        if topics:
            options["subscribe"] = ",".join(topics)
        else:
            options["subscribePattern"] = self.spec.task_config.get("topics.regex", "")
        batches = RangeBatches(
            options, lambda named: group.committed(named, task.stored_offsets(named))
        )
        try:
            while not self.stopping.is_set() and not self.paused:
                planned = batches.next()
                if planned is None:
                    self.stopping.wait(RANGE_BATCH_INTERVAL_S)
                    continue
                ranges, ends = planned
                if ranges:
                    try:
                        write_ranges_job(spark, ranges, batches.opts, writer)
                    except Exception:
                        if self.stopping.is_set():  # its jobs cancelled past the grace time
                            return
                        raise
                    for topic in sorted({r.topic for r in ranges if r.size > 0}):
                        self.active_topic(topic)  # KIP-558: consumed from
                batches.advance(ends)
                group.commit(to_json(ends))
        finally:
            batches.close()

    def transient(self, failures: list[str]) -> bool:
        """Whether the queries failed only as Spark does when a Python process starts
        too slowly on a busy machine, and are to start again (``TransientRestarts``)."""
        if not all(any(m in f for m in TRANSIENT_FAILURES) for f in failures):
            return False
        if not self.restarts.failed():
            return False
        log.warning("task %s: %s; starting its queries again (restart %d)",
                    task_name(self.spec.task_id), failures[0].splitlines()[0],
                    self.restarts.count)  # fmt: skip
        return True

    def topics(self) -> list[str]:
        config = self.spec.task_config
        return [t.strip() for t in config.get("topics", "").split(",") if t.strip()]

    def stream(
        self, spark: SparkSession, topics: list[str], starting: Mapping[str, Mapping[str, int]]
    ) -> DataFrame:
        """The ``strom`` source over ``topics`` (else the connector's ``topics.regex``)
        from ``starting`` (else the earliest) where the query has no checkpoint."""
        reader = spark.readStream.format("strom").options(
            **kafka_reader_options(self.runner.worker_config)
        )
        if topics:
            reader = reader.option("subscribe", ",".join(topics))
        else:
            reader = reader.option(
                "subscribePattern", self.spec.task_config.get("topics.regex", "")
            )
        if starting:
            reader = reader.option("startingOffsets", json.dumps(starting))
        else:
            reader = reader.option("startingOffsets", "earliest")
        return reader.option("failOnDataLoss", "false").load()

    def start_query(
        self,
        spark: SparkSession,
        task: SparkSinkTask,
        checkpoint: Path,
        group: GroupOffsets,
        write: Any,
    ) -> StreamingQuery:
        topics = self.topics()
        committed = group.committed(topics, task.stored_offsets(topics))
        if not checkpoint_agrees(checkpoint, committed):
            shutil.rmtree(checkpoint, ignore_errors=True)
        return (
            self.stream(spark, topics, committed)
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=SINK_TRIGGER)
            .queryName(f"connect-{task_name(self.spec.task_id)}")
            .start()
        )

    def watch(self, queries: list[StreamingQuery], group: GroupOffsets) -> None:
        while all(q.isActive for q in queries) and not self.stopping.is_set() and not self.paused:
            try:
                if len(queries) == 1:
                    queries[0].awaitTermination(WATCH_S)
                else:
                    self.stopping.wait(WATCH_S)
            except Exception:  # a failed query: its exception() is read once it stops
                break
            for query in queries:
                self.commit_progress(query, group)

    def commit_progress(self, query: StreamingQuery, group: GroupOffsets) -> None:
        run = str(query.runId)
        for progress in query.recentProgress:
            if progress.batchId <= group.last_batch.get(run, -1):
                continue
            group.last_batch[run] = progress.batchId
            self.restarts.progressed()
            for source in progress.sources:
                end = source.endOffset
                offsets = json.loads(end) if isinstance(end, str) else end
                if offsets:
                    group.commit(offsets)
                    for topic in _moved_topics(source.startOffset, offsets):
                        self.active_topic(topic)  # KIP-558: consumed from


def _moved_topics(start: Any, end: dict[str, Any]) -> list[str]:
    """The topics whose offsets a micro-batch's progress moved (the first batch has no
    start: the topics with an offset past 0)."""
    before = json.loads(start) if isinstance(start, str) else start
    moved = []
    for topic, ends in end.items():
        if not isinstance(ends, dict):
            continue
        if isinstance(before, dict) and topic in before:
            if ends != before[topic]:
                moved.append(topic)
        elif any(isinstance(o, int) and o > 0 for o in ends.values()):
            moved.append(topic)
    return sorted(moved)


class TransientRestarts:
    """When a sink task's queries, failed as Spark fails when a Python process is slow
    to start, are started again: each time after a longer pause (``RESTART_PAUSES_S``,
    its last repeated), until ``TRANSIENT_PATIENCE_S`` has passed since the first of the
    failures with no micro-batch done between them; a batch done starts afresh."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.count = 0  # failures since the last batch done
        self.first_at: float | None = None

    def failed(self) -> bool:
        """Note a failure; whether to start the queries again."""
        now = self.clock()
        if self.first_at is None:
            self.first_at = now
        self.count += 1
        return now - self.first_at < TRANSIENT_PATIENCE_S

    def pause_s(self) -> float:
        """How long to wait before the next start."""
        return RESTART_PAUSES_S[min(self.count, len(RESTART_PAUSES_S)) - 1]

    def progressed(self) -> None:
        self.count = 0
        self.first_at = None


class GroupOffsets:
    """A sink connector's offsets in its Kafka group (``connect-<name>``), as Kafka
    Connect keeps them: read at a task's start, committed after each micro-batch."""

    def __init__(self, worker_config: WorkerConfig, group: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                **worker_config.client_settings("consumer"),
                "group.id": group,
                "enable.auto.commit": False,
            }
        )
        self.last_batch: dict[str, int] = {}  # by query run: the last batch committed

    def committed(
        self, topics: list[str], stored: Mapping[str, Mapping[str, int]] | None = None
    ) -> dict[str, dict[str, int]]:
        """``{topic: {partition: next offset}}`` of the partitions with a commit, or with
        an offset in ``stored`` (the task's own) ahead of it."""
        from confluent_kafka import TopicPartition

        partitions = []
        for topic in topics:
            metadata = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is not None and metadata.error is None:
                partitions += [TopicPartition(topic, p) for p in metadata.partitions]
        if not partitions:
            return {}
        found: dict[str, dict[str, int]] = {}
        for tp in self.consumer.committed(partitions, timeout=10):
            if tp.offset >= 0:
                found.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
        for topic, by_partition in (stored or {}).items():
            for partition, offset in by_partition.items():
                mine = found.setdefault(topic, {})
                if offset > mine.get(str(partition), -1):
                    mine[str(partition)] = offset
        if found:  # partitions without a commit start at the beginning, as Kafka Connect's
            for tp in partitions:
                found.setdefault(tp.topic, {}).setdefault(str(tp.partition), -2)
        return found

    def commit(self, offsets: Mapping[str, Mapping[str, int]]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        chosen = [
            TopicPartition(topic, int(partition), int(offset))
            for topic, by_partition in offsets.items()
            for partition, offset in by_partition.items()
            if int(offset) >= 0
        ]
        try:
            self.consumer.commit(offsets=chosen, asynchronous=False)
        except KafkaException as exc:
            log.warning("offset commit in the sink's group failed: %s", exc)

    def close(self) -> None:
        self.consumer.close()


def checkpoint_agrees(checkpoint: Path, committed: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether the checkpoint's last committed micro-batch ended at ``committed``."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return False
    batches = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    if not batches:
        return False
    offsets_file = checkpoint / "offsets" / str(max(batches))
    try:
        ended = json.loads(offsets_file.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return False
    if isinstance(ended, str):
        ended = json.loads(ended)
    normalized = {
        topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in ended.items()
    }
    wanted = {
        topic: {p: o for p, o in parts.items() if o >= 0} for topic, parts in committed.items()
    }
    mine = {
        topic: {p: o for p, o in parts.items() if o >= 0} for topic, parts in normalized.items()
    }
    return mine == wanted


def kafka_reader_options(worker_config: WorkerConfig) -> dict[str, str]:
    """The worker's client settings as the ``strom`` source's ``kafka.*`` options."""
    settings = worker_config.client_settings("consumer")
    settings.pop("client.id", None)
    return {f"kafka.{k}": str(v) for k, v in settings.items()}


def kafka_writer_options(worker_config: WorkerConfig) -> dict[str, str]:
    settings = worker_config.client_settings("producer")
    settings.pop("client.id", None)
    return {f"kafka.{k}": str(v) for k, v in settings.items()}


# Rows to records.


def record_frame(batch: SourceBatch, converter: Converter) -> DataFrame:
    """``batch.rows`` as the ``value`` column the ``strom`` writer takes: JsonConverter's
    bytes computed by Spark SQL; any other converter's in Python."""
    if isinstance(converter, JsonConverter) and not converter.numeric_decimals:
        return _json_records(batch, converter)
    return _converted_records(batch, converter)


def _envelopes_in_arrow(batch: SourceBatch, converter: Converter) -> bool:
    """Whether the batch's JsonConverter values are built from its Arrow columns in
    Spark's Python workers, which write them (``spark_envelopes``), rather than by the
    JVM's ``to_json`` and the ``strom`` writer."""
    from strom.connect.spark_envelopes import arrow_writes

    return (
        isinstance(converter, JsonConverter)
        and not converter.numeric_decimals
        and arrow_writes(batch.value_schema)
    )


def _json_records(batch: SourceBatch, converter: JsonConverter) -> DataFrame:
    from pyspark.sql import functions as F

    payload = F.to_json(
        F.struct(*[_json_column(f.name, f.schema) for f in batch.value_schema.fields]),
        {"ignoreNullFields": "false"},
    )
    if converter.schemas_enabled:
        schema = json.dumps(schema_to_json(batch.value_schema), separators=(",", ":"))
        value = F.concat(F.lit('{"schema":' + schema + ',"payload":'), payload, F.lit("}"))
    else:
        value = payload
    return batch.rows.select(value.alias("value"))


def _json_column(name: str, schema: Schema) -> Column:
    """A column as JsonConverter writes its Connect type: Timestamp as epoch millis, Date
    as epoch days, Time as millis of the day, bytes and Decimal as base64."""
    from pyspark.sql import functions as F

    column = F.col(f"`{name}`")
    if schema.name == TIMESTAMP:
        column = F.unix_millis(column)
    elif schema.name == DATE:
        column = F.unix_date(column)
    elif schema.name == TIME:
        column = F.unix_millis(column) % F.lit(86_400_000)
    elif schema.name == DECIMAL:
        column = _decimal_base64(column, schema)
    elif schema.type == BYTES:
        column = F.base64(column)
    return column.alias(name)


def _decimal_base64(column: Column, schema: Schema) -> Column:
    """Decimal as JsonConverter's base64 of the unscaled value (Python: Spark SQL has no
    two's complement bytes of a decimal)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    encoder = JsonConverter()
    encoder.configure({"schemas.enable": "false"}, is_key=False)

    def encode(value: Any) -> str | None:
        if value is None:
            return None
        return str(json.loads(encoder.from_connect_data("", schema, value) or b"null"))

    return F.udf(encode, StringType())(column)


def _converted_records(batch: SourceBatch, converter: Converter) -> DataFrame:
    import pyarrow as pa

    schema = batch.value_schema
    topic = batch.topic

    def convert(batches: Any) -> Any:
        for arrow in batches:
            values = []
            for row in arrow.to_pylist():
                struct = Struct(
                    schema, {f.name: _connect_value(f.schema, row[f.name]) for f in schema.fields}
                )
                values.append(converter.from_connect_data(topic, schema, struct))
            yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])

    return batch.rows.mapInArrow(convert, "value binary")


def _connect_value(schema: Schema, value: Any) -> Any:
    """A Spark value as Connect's logical types hold it (Timestamp, Date, Time as numbers)."""
    import datetime as dt

    if value is None or schema.type == STRUCT:
        return value
    if schema.name == TIMESTAMP and isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    if schema.name == DATE and isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    return value


class SparkRunner(InWorkerRunner):
    """Tasks as Spark jobs, driven from threads of this worker (the Spark driver)."""

    threads: dict[TaskId, _TaskThread]

    @functools.cached_property
    def sessions(self) -> SparkSessionHolder:
        return SparkSessionHolder(self.worker_config)

    def start(self, spec: TaskSpec, target_state: str) -> None:
        kind = _SourceThread if issubclass(spec.task_class, SparkSourceTask) else _SinkThread
        thread = kind(spec, target_state, self)
        self.threads[spec.task_id] = thread
        thread.start()

    def stop(self, task_ids: list[TaskId]) -> None:
        threads = [self.threads[t] for t in task_ids if t in self.threads]
        super().stop(task_ids)
        for thread in threads:
            if thread.is_alive() and isinstance(thread, _SparkTaskThread):
                thread.cancel_jobs()  # past task.shutdown.graceful.timeout.ms

    def stop_all(self) -> None:
        super().stop_all()
        self.sessions.stop()


class RunnerByTask(TaskRunner):
    """Each task to the runner its class asks for: Spark tasks to ``spark``, others to
    ``in_worker``."""

    def __init__(self, in_worker: TaskRunner, spark: TaskRunner) -> None:
        self.in_worker = in_worker
        self.spark = spark

    def _runner(self, spec: TaskSpec) -> TaskRunner:
        if issubclass(spec.task_class, SparkSourceTask | SparkSinkTask):
            return self.spark
        return self.in_worker

    def start(self, spec: TaskSpec, target_state: str) -> None:
        self._runner(spec).start(spec, target_state)

    def set_target_state(self, task_id: TaskId, target_state: str) -> None:
        for runner in (self.in_worker, self.spark):
            if task_id in runner.tasks():
                runner.set_target_state(task_id, target_state)

    def stop(self, task_ids: list[TaskId]) -> None:
        for runner in (self.in_worker, self.spark):
            mine = [t for t in task_ids if t in runner.tasks()]
            if mine:
                runner.stop(mine)

    def tasks(self) -> dict[TaskId, TaskSpec]:
        return {**self.in_worker.tasks(), **self.spark.tasks()}

    def stop_all(self) -> None:
        self.in_worker.stop_all()
        self.spark.stop_all()
