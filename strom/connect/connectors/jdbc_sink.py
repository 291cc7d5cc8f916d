"""Confluent's JDBC sink connector (``io.confluent.connect.jdbc.JdbcSinkConnector``) with its
keys, on Spark: ``connection.url`` / ``connection.user`` / ``connection.password``,
``insert.mode`` (insert, upsert, update), ``pk.mode`` (none, kafka, record_key,
record_value) and ``pk.fields``, ``fields.whitelist`` (or ``fields.include``),
``table.name.format`` (``${topic}``), ``auto.create``, ``auto.evolve``,
``delete.enabled`` (a tombstone deletes its key's row; needs ``pk.mode=record_key``) and
``batch.size`` (rows per statement); and Strom's ``exactly.once.delivery`` with
``offsets.table.name``.

Each micro-batch is written by the Spark tasks that read it: one per topic-partition range,
which fetches the range from Kafka and writes it in the same Python process
(``range_writer``, through the runner's ``spark_ranges``; ``write_batch`` does the same
for a micro-batch DataFrame with ``mapInArrow``). Each decodes its records with the
connector's converters, keeps the last record of each primary key (what the rows become
once the batch is applied in order), and writes them to the table in one transaction:
PostgreSQL through ``COPY`` into a staging table and one
``INSERT ... ON CONFLICT DO UPDATE`` (upsert; a plain ``INSERT`` first, undone to a
savepoint when a key is already in the table: ``insert_new_keys``) or ``COPY`` into the
table (insert),
MariaDB/MySQL (PyMySQL) and SQLite through ``executemany`` (``INSERT ... ON DUPLICATE KEY
UPDATE`` on MariaDB/MySQL). Upsert is idempotent, so a replayed micro-batch leaves the
table as one delivery does.

Into PostgreSQL, insert and upsert with ``pk.mode`` none or record_value, when a Spark
task's records are JsonConverter envelopes of one schema of primitive fields (whose JSON
payload is its Connect value as it is), nothing is decoded record by record in Python
(``jdbc_envelopes``, a column at a time): Arrow's JSON reader reads the payloads into typed
columns, an upsert keeps each key's last row, and the rows go by ``COPY`` in CSV into the
table (insert) or into a staging table and one ``INSERT ... ON CONFLICT`` (upsert). Payloads
Arrow's reader does not take as they are (a number written as a string...) go as numbered
JSON text into a staging table, and one ``INSERT ... SELECT`` reads each as a row of the
table (``json_populate_record``), ``DISTINCT ON`` the key keeping the latest. Any other
batch is decoded record by record as above.

With ``exactly.once.delivery=true`` each Spark task also stores, in the same transaction
as its rows, the next offset of each topic-partition it wrote in the table
``offsets.table.name`` (``__strom_connect_offsets``: connector, topic, partition, offset,
as Kafka Connect's offsets topic keys a source's), skipping the records below the stored
offset; the runner resumes the task from those offsets where they are ahead of the
group's (``stored_offsets``). So a batch replayed after a crash, in any insert mode, is
written once. The stored offset is updated only from the value read (another writer's
commit in between fails the Spark task, which Spark retries). One Spark task reads one
topic-partition's range of a micro-batch; the scheme relies on it.

Records need a value schema (JsonConverter with schemas, or a struct from another
converter): a schemaless value is refused with Confluent's message, as Confluent does;
column types come from the schema (Confluent's mapping, ``jdbc_dialects``).
"""

from __future__ import annotations

import codecs
import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.connect import config_def as cd
from strom.connect.api import ConnectException, SinkConnector, Task
from strom.connect.config_def import ConfigValue
from strom.connect.connectors.jdbc_dialects import (
    MYSQL,
    POSTGRESQL,
    SQLITE,
    Database,
    check_connection_url,
    connection_keys,
    parse_url,
)
from strom.connect.converters import (
    ByteArrayConverter,
    Converter,
    JsonConverter,
    StringConverter,
    schema_from_json,
)
from strom.connect.data import (
    BOOLEAN,
    BYTES,
    DATE,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    PRIMITIVE_TYPES,
    STRING,
    STRUCT,
    TIME,
    TIMESTAMP,
    Field,
    Schema,
    Struct,
)
from strom.connect.spark_ranges import freeze_worker_heap
from strom.connect.spark_tasks import SparkSinkTask

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

INSERT, UPSERT, UPDATE = "insert", "upsert", "update"
NONE, KAFKA, RECORD_KEY, RECORD_VALUE = "none", "kafka", "record_key", "record_value"
KAFKA_PK_FIELDS = ["__connect_topic", "__connect_partition", "__connect_offset"]
CREATE_RETRIES = 5
OFFSETS_TABLE = "__strom_connect_offsets"
# An upsert into PostgreSQL tries a plain INSERT first; after one meets a key already in
# the table, that table's next PLAIN_INSERT_PAUSE upserts (in this process) do not.
PLAIN_INSERT_PAUSE = 20
_UPSERTS_BEFORE_PLAIN: dict[tuple[str, str], int] = {}  # (URL, table): upserts left
_OFFSETS_TABLES_MADE: set[tuple[str, str]] = set()  # (URL, table) known to exist here
ENVELOPE_START = b'{"schema":'
PAYLOAD_KEY = b',"payload":'


class JdbcSinkConnector(SinkConnector):
    CONFIG_DEF = cd.ConfigDef(
        [
            *connection_keys(),
            cd.ConfigKey(
                "insert.mode",
                cd.STRING,
                INSERT,
                cd.HIGH,
                "The insertion mode to use: insert, upsert or update.",
                check=cd.one_of(INSERT, UPSERT, UPDATE, case_sensitive=False),
            ),
            cd.ConfigKey(
                "pk.mode",
                cd.STRING,
                NONE,
                cd.HIGH,
                "The primary key mode: none, kafka, record_key or record_value.",
                check=cd.one_of(NONE, KAFKA, RECORD_KEY, RECORD_VALUE, case_sensitive=False),
            ),
            cd.ConfigKey("pk.fields", cd.LIST, "", cd.MEDIUM, "The primary key field names."),
            cd.ConfigKey(
                "fields.whitelist",
                cd.LIST,
                "",
                cd.MEDIUM,
                "The record value fields to write (all when empty).",
            ),
            cd.ConfigKey("fields.include", cd.LIST, "", cd.MEDIUM, "As fields.whitelist."),
            cd.ConfigKey(
                "table.name.format",
                cd.STRING,
                "${topic}",
                cd.MEDIUM,
                "The destination table name; ${topic} is the record's topic.",
            ),
            cd.ConfigKey("auto.create", cd.BOOLEAN, False, cd.MEDIUM, "Create a missing table."),
            cd.ConfigKey(
                "auto.evolve", cd.BOOLEAN, False, cd.MEDIUM, "Add missing columns to the table."
            ),
            cd.ConfigKey(
                "delete.enabled",
                cd.BOOLEAN,
                False,
                cd.MEDIUM,
                "Whether to treat null record values as deletes. Requires pk.mode to be "
                "record_key.",
            ),
            cd.ConfigKey(
                "batch.size",
                cd.INT,
                3000,
                cd.MEDIUM,
                "How many records to batch together in one statement.",
                check=cd.at_least(1),
            ),
            cd.ConfigKey(
                "exactly.once.delivery",
                cd.BOOLEAN,
                False,
                cd.MEDIUM,
                "Store each topic-partition's offset in the target database in the same "
                "transaction as the rows, and resume from it: each record written once, in "
                "any insert mode.",
            ),
            cd.ConfigKey(
                "offsets.table.name",
                cd.STRING,
                OFFSETS_TABLE,
                cd.LOW,
                "The table holding the offsets of exactly.once.delivery.",
                check=cd.non_empty,
            ),
        ]
    )

    def validate(self, props: Mapping[str, str]) -> dict[str, ConfigValue]:
        results = super().validate(props)
        values = check_connection_url(results)
        pk_mode = str(values.get("pk.mode") or NONE).lower()
        if values.get("delete.enabled") is True and pk_mode != RECORD_KEY:
            results["delete.enabled"].errors.append(
                "Invalid value true for configuration delete.enabled: Primary key mode must be "
                "'record_key' when delete support is enabled"
            )
        mode = str(values.get("insert.mode") or INSERT).lower()
        if mode in (UPSERT, UPDATE) and pk_mode == NONE:
            results["pk.mode"].errors.append(
                f"Invalid value none for configuration pk.mode: writing in {mode.upper()} mode "
                "requires key field names to be known (kafka, record_key or record_value)"
            )
        return results

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type[Task]:
        return JdbcSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]

    def stop(self) -> None:
        pass


@dataclass(frozen=True)
class SinkSettings:
    database: Database
    insert_mode: str
    pk_mode: str
    pk_fields: tuple[str, ...]
    fields: tuple[str, ...]
    table_format: str
    auto_create: bool
    auto_evolve: bool
    delete_enabled: bool
    batch_size: int
    connector: str  # the connector's name, its rows' key in the offsets table
    offsets_table: str | None  # exactly.once.delivery's table, None without it

    @classmethod
    def of(cls, props: Mapping[str, str]) -> SinkSettings:
        values = JdbcSinkConnector.CONFIG_DEF.parse(props)
        return cls(
            database=parse_url(
                values["connection.url"], values["connection.user"], values["connection.password"]
            ),
            insert_mode=values["insert.mode"].lower(),
            pk_mode=values["pk.mode"].lower(),
            pk_fields=tuple(values["pk.fields"]),
            fields=tuple(values["fields.whitelist"] or values["fields.include"]),
            table_format=values["table.name.format"],
            auto_create=values["auto.create"],
            auto_evolve=values["auto.evolve"],
            delete_enabled=values["delete.enabled"],
            batch_size=values["batch.size"],
            connector=props.get("name", ""),
            offsets_table=values["offsets.table.name"] if values["exactly.once.delivery"] else None,
        )


class JdbcSinkTask(SparkSinkTask):
    def start(self, props: dict[str, str]) -> None:
        self.settings = SinkSettings.of(props)

    def write_batch(
        self, batch: DataFrame, batch_id: int, key_converter: Converter, value_converter: Converter
    ) -> int:
        writer = PartitionWriter(self.settings, key_converter, value_converter)
        columns = batch.select("key", "value", "topic", "partition", "offset")
        written = columns.mapInArrow(writer, "written long").collect()
        return sum(row["written"] for row in written)

    def range_writer(
        self, key_converter: Converter, value_converter: Converter
    ) -> Callable[[list[pa.RecordBatch]], int]:
        """Each offset range written by the Spark task that reads it."""
        return PartitionWriter(self.settings, key_converter, value_converter).write

    def stored_offsets(self, topics: list[str]) -> dict[str, dict[str, int]]:
        """With exactly.once.delivery, the next offsets stored with the rows."""
        if self.settings.offsets_table is None:
            return {}
        offsets = OffsetsTable(self.settings)
        connection = self.settings.database.connect()
        try:
            offsets.ensure(connection)
            found: dict[str, dict[str, int]] = {}
            for (topic, partition), offset in offsets.read(connection).items():
                if not topics or topic in topics:
                    found.setdefault(topic, {})[str(partition)] = offset
            connection.rollback()
            return found
        finally:
            connection.close()

    def stop(self) -> None:
        pass


class OffsetsTable:
    """exactly.once.delivery's offsets in the target database: one row per connector and
    topic-partition holding the next offset to write, read and updated in the
    transaction that writes the rows."""

    def __init__(self, settings: SinkSettings) -> None:
        self.database = settings.database
        self.connector = settings.connector
        assert settings.offsets_table is not None
        self.table = self.database.table(settings.offsets_table)
        q = self.database.quote
        self.key = f"{q('connector')} = {self.database.placeholder}"
        self.columns = (q("connector"), q("topic"), q("partition"), q("offset"))

    def ensure(self, connection: Any) -> None:
        """Create the table when missing (another task may at the same moment); once per
        process and table."""
        if (self.database.url, self.table) in _OFFSETS_TABLES_MADE:
            return
        connector, topic, partition, offset = self.columns
        text = "VARCHAR(255)"
        statement = (
            f"CREATE TABLE IF NOT EXISTS {self.table} ({connector} {text} NOT NULL, "
            f"{topic} {text} NOT NULL, {partition} INT NOT NULL, {offset} BIGINT NOT NULL, "
            f"PRIMARY KEY ({connector}, {topic}, {partition}))"
        )
        for attempt in range(CREATE_RETRIES):
            try:
                with closing(connection.cursor()) as cursor:
                    cursor.execute(statement)
                connection.commit()
                _OFFSETS_TABLES_MADE.add((self.database.url, self.table))
                return
            except Exception:
                connection.rollback()
                if attempt == CREATE_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def read(
        self, connection: Any, topic: str | None = None, partition: int | None = None
    ) -> dict[tuple[str, int], int]:
        """``{(topic, partition): next offset}`` of this connector (one partition's when
        given)."""
        _, topic_column, partition_column, offset_column = self.columns
        mark = self.database.placeholder
        sql = f"SELECT {topic_column}, {partition_column}, {offset_column} FROM {self.table} "
        sql += f"WHERE {self.key}"
        params: tuple[Any, ...] = (self.connector,)
        if topic is not None and partition is not None:
            sql += f" AND {topic_column} = {mark} AND {partition_column} = {mark}"
            params += (topic, partition)
        with closing(connection.cursor()) as cursor:
            cursor.execute(sql, params)
            return {(str(t), int(p)): int(o) for t, p, o in cursor.fetchall()}

    def store(
        self, connection: Any, topic: str, partition: int, read: int | None, offset: int
    ) -> None:
        """Move the partition's offset from ``read`` (None: no row) to ``offset``; another
        writer having moved it since is an error (the Spark task fails and is retried)."""
        connector_column, topic_column, partition_column, offset_column = self.columns
        mark = self.database.placeholder
        with closing(connection.cursor()) as cursor:
            if read is None:
                cursor.execute(
                    f"INSERT INTO {self.table} ({', '.join(self.columns)}) "
                    f"VALUES ({mark}, {mark}, {mark}, {mark})",
                    (self.connector, topic, partition, offset),
                )
                return
            cursor.execute(
                f"UPDATE {self.table} SET {offset_column} = {mark} WHERE {self.key} "
                f"AND {topic_column} = {mark} AND {partition_column} = {mark} "
                f"AND {offset_column} = {mark}",
                (offset, self.connector, topic, partition, read),
            )
            if cursor.rowcount != 1:
                raise ConnectException(
                    f"the offset of {topic}-{partition} in {self.table} moved while this task "
                    "wrote (another writer of the connector): retried"
                )


@dataclass
class _Row:
    """A record made ready for its table: primary key values and the other columns."""

    key: tuple[Any, ...]
    key_names: tuple[str, ...]  # the primary key's columns (none for pk.mode=none)
    values: dict[str, Any] | None  # None: delete (a tombstone)
    schema: Schema | None  # the columns' schema (key columns first)


@dataclass
class _Payloads:
    """A Spark partition's records whose values PostgreSQL reads itself."""

    rows: pa.Table  # topic, partition, offset, payload (JSON; null writes nothing), number
    columns: Schema  # the table's columns (the key's first, required)
    key_count: int


def _unwritten(
    rows: pa.Table,
    offsets: OffsetsTable,
    connection: Any,
    stored: dict[tuple[str, int], int | None],
    ends: dict[tuple[str, int], int],
) -> pa.Table:
    """``rows`` without those below each topic-partition's stored offset (written
    before); ``stored`` gets the offsets read, ``ends`` the next offset of each
    topic-partition with a row left."""
    import pyarrow.compute as pc

    spans = rows.group_by(["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")])
    below = None
    for span in spans.to_pylist():
        where = (str(span["topic"]), int(span["partition"]))
        stored[where] = offsets.read(connection, *where).get(where)
        floor = stored[where] or 0
        if span["offset_max"] >= floor:
            ends[where] = int(span["offset_max"]) + 1
        if span["offset_min"] < floor:
            mine = pc.and_(
                pc.and_(pc.equal(rows["topic"], where[0]), pc.equal(rows["partition"], where[1])),
                pc.less(rows["offset"], floor),
            )
            below = mine if below is None else pc.or_(below, mine)
    return rows if below is None else rows.filter(pc.invert(below))


def _arrow_schema(columns: Schema) -> pa.Schema:
    """The Arrow columns of a struct of primitive fields (no bytes)."""
    import pyarrow as pa

    kinds = {
        INT8: pa.int8(),
        INT16: pa.int16(),
        INT32: pa.int32(),
        INT64: pa.int64(),
        FLOAT32: pa.float32(),
        FLOAT64: pa.float64(),
        BOOLEAN: pa.bool_(),
        STRING: pa.string(),
    }
    return pa.schema([pa.field(f.name, kinds[f.schema.type]) for f in columns.fields])


def _last_of_each_key(rows: pa.Table, numbers: pa.ChunkedArray, keys: list[str]) -> pa.Table:
    """``rows`` (in the records' order, ``numbers`` their positions) keeping each key's
    last row only, as applying them one after the other leaves the table."""
    import pyarrow.compute as pc

    number = "__strom_record_number"
    numbered = rows.append_column(number, numbers)
    last = numbered.group_by(keys, use_threads=False).aggregate([(number, "max")])
    if last.num_rows < numbered.num_rows:
        numbered = numbered.filter(pc.is_in(numbered[number], value_set=last[f"{number}_max"]))
    return numbered.drop_columns([number])


class PartitionWriter:
    """Writes one Spark partition of a micro-batch (runs on the executors)."""

    def __init__(
        self, settings: SinkSettings, key_converter: Converter, value_converter: Converter
    ) -> None:
        self.settings = settings
        self.key_converter = key_converter
        self.value_converter = value_converter
        self.schemas: dict[bytes, Schema | None] = {}
        self.layouts: dict[tuple[int, tuple[str, ...]], tuple[Schema, Schema, list[str]]] = {}

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        written = self.write(list(batches))
        yield pa.RecordBatch.from_arrays([pa.array([written], pa.int64())], ["written"])

    def write(self, arrows: list[pa.RecordBatch]) -> int:
        """Write these records (one Spark partition's, or one offset range's); the rows
        written."""
        freeze_worker_heap()
        payloads = self.payloads_of(arrows) if self.database_reads_json else None
        if payloads is not None:
            return self.write_payloads(payloads)
        return self.write_records(arrows)

    @property
    def database_reads_json(self) -> bool:
        """Whether PostgreSQL may read the JsonConverter payloads itself: written as they
        are (insert or upsert), keyed by value fields or not at all (no deletes)."""
        settings = self.settings
        converter = self.value_converter
        return (
            settings.database.kind == POSTGRESQL
            and settings.insert_mode in (INSERT, UPSERT)
            and settings.pk_mode in (NONE, RECORD_VALUE)
            and isinstance(converter, JsonConverter)
            and converter.schemas_enabled
        )

    def payloads_of(self, arrows: list[pa.RecordBatch]) -> _Payloads | None:
        """The records as payloads for the database to read, when every value is an
        envelope of one plain struct schema (primitive fields; a null payload or value
        writes nothing); None otherwise (decoded record by record)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from strom.connect.connectors.jdbc_envelopes import split_envelopes

        if not arrows:
            return None
        records = pa.Table.from_batches(arrows)
        envelopes = split_envelopes(records["value"])
        if envelopes is None:
            return None
        value_schema = self.plain_schema(envelopes.schema_text)
        if value_schema is None:
            return None
        self.check_keys(records)
        first = int(pc.index(pc.is_valid(envelopes.payloads), True).as_py())
        if first < 0:
            first = 0
        where = (
            f"{records['topic'][first].as_py()}-{records['partition'][first].as_py()} "
            f"at offset {records['offset'][first].as_py()}"
        )
        key_columns = self.value_key_columns(value_schema, where)
        key_names = tuple(name for name, _ in key_columns)
        fields = self.chosen_fields(value_schema)
        columns, _ = self.layout(value_schema, key_names, [s for _, s in key_columns], fields)
        positions = pa.array(np.arange(len(records), dtype=np.int64))
        rows = records.select(["topic", "partition", "offset"])
        rows = rows.append_column("payload", envelopes.payloads).append_column("number", positions)
        return _Payloads(rows, columns, len(key_names))

    def check_keys(self, records: pa.Table) -> None:
        """The key converter's failures on the records' keys, as decoding each record
        meets them (the keys themselves are not written in these pk modes)."""
        import pyarrow as pa

        keys = records["key"]
        converter = self.key_converter
        if keys.null_count == len(keys) or isinstance(converter, ByteArrayConverter):
            return
        if (
            isinstance(converter, StringConverter)
            and codecs.lookup(converter.encoding).name == "utf-8"
        ):
            try:
                keys.cast(pa.string())  # checks that each key is UTF-8
                return
            except pa.ArrowInvalid:
                pass  # decoded one by one below, the failing record named
        columns = records.select(["key", "topic", "partition", "offset"]).to_pydict()
        for key, topic, partition, offset in zip(
            columns["key"], columns["topic"], columns["partition"], columns["offset"], strict=True
        ):
            if key is None:
                continue
            try:
                converter.to_connect_data(topic, key)
            except Exception as exc:
                raise ConnectException(
                    f"Conversion failed for the record of {topic}-{partition} at offset "
                    f"{offset}: {exc}"
                ) from exc

    def write_payloads(self, payloads: _Payloads) -> int:
        """Write the payloads of each topic to its table in one transaction (with their
        offsets under exactly.once.delivery), PostgreSQL reading each payload."""
        import pyarrow.compute as pc

        from strom.connect.connectors.jdbc_envelopes import copy_text, csv_text, typed_rows

        offsets = OffsetsTable(self.settings) if self.settings.offsets_table else None
        rows = payloads.rows
        if offsets is None and rows["payload"].null_count == len(rows):
            return 0  # tombstones only, and no offsets to store
        written = 0
        connection = self.settings.database.connect()
        try:
            stored: dict[tuple[str, int], int | None] = {}
            ends: dict[tuple[str, int], int] = {}
            if offsets is not None:
                offsets.ensure(connection)
                rows = _unwritten(rows, offsets, connection, stored, ends)
            by_table: dict[str, list[str]] = {}
            for topic in pc.unique(rows["topic"]).to_pylist():
                table = self.settings.table_format.replace("${topic}", topic)
                by_table.setdefault(table, []).append(topic)
            tables = TableWriter(self.settings, connection)
            columns, key_count = payloads.columns, payloads.key_count
            arrow_schema = _arrow_schema(columns)
            keys = [f.name for f in columns.fields][:key_count]
            texts: dict[str, tuple[bool, pa.Buffer]] = {}  # by table: (CSV, else JSON; text)
            for table, topics in by_table.items():
                mine = rows  # each filter copies the payloads: only where it takes some out
                if len(by_table) > 1:
                    mine = mine.filter(pc.is_in(mine["topic"], value_set=pc.unique(topics)))
                if mine["payload"].null_count:
                    mine = mine.filter(pc.is_valid(mine["payload"]))
                payload_column = mine["payload"].combine_chunks()
                typed = typed_rows(payload_column, arrow_schema)
                if typed is not None:
                    if self.settings.insert_mode == UPSERT:
                        typed = _last_of_each_key(typed, mine["number"], keys)
                    if typed.num_rows:
                        texts[table] = (True, csv_text(typed))
                elif len(mine):
                    texts[table] = (False, copy_text(payload_column, mine["number"].to_numpy()))
                if table in texts:
                    tables.ensure_table(table, columns, key_count)
            for table, (is_csv, text) in texts.items():
                if is_csv:
                    written += tables.write_csv(table, columns, key_count, text)
                else:
                    written += tables.write_payloads(table, columns, key_count, text)
            if offsets is not None:
                for (topic, partition), end in ends.items():
                    offsets.store(connection, topic, partition, stored[(topic, partition)], end)
            connection.commit()
        finally:
            connection.close()
        return written

    def write_records(self, arrows: list[pa.RecordBatch]) -> int:
        """Decode each record, keep what the insert mode needs, and write the rows of each
        table in one transaction (with their offsets under exactly.once.delivery)."""
        offsets = OffsetsTable(self.settings) if self.settings.offsets_table else None
        connection: Any = None
        stored: dict[tuple[str, int], int | None] = {}  # exactly once: the offsets read
        ends: dict[tuple[str, int], int] = {}  # and the next offsets once written
        by_table: dict[str, dict[Any, _Row]] = {}
        ordered: dict[str, list[_Row]] = {}
        for arrow in arrows:
            columns = arrow.to_pydict()
            for key, value, topic, partition, offset in zip(
                columns["key"],
                columns["value"],
                columns["topic"],
                columns["partition"],
                columns["offset"],
                strict=True,
            ):
                if offsets is not None:
                    where = (topic, partition)
                    if where not in stored:
                        if connection is None:
                            connection = self.settings.database.connect()
                            offsets.ensure(connection)
                        stored[where] = offsets.read(connection, topic, partition).get(where)
                    if offset < (stored[where] or 0):
                        continue  # written before, with its offset
                    ends[where] = max(ends.get(where, 0), offset + 1)
                row = self.row(topic, partition, offset, key, value)
                if row is None:
                    continue
                table = self.settings.table_format.replace("${topic}", topic)
                if self.keeps_last:
                    by_table.setdefault(table, {})[row.key] = row
                else:
                    ordered.setdefault(table, []).append(row)
        written = 0
        try:
            if by_table or ordered or ends:
                if connection is None:
                    connection = self.settings.database.connect()
                tables = TableWriter(self.settings, connection)
                for table, last_of_key in by_table.items():
                    tables.prepare(table, list(last_of_key.values()))
                for table, in_order in ordered.items():
                    tables.prepare(table, in_order)
                for table, last_of_key in by_table.items():
                    written += tables.write(table, list(last_of_key.values()))
                for table, in_order in ordered.items():
                    written += tables.write(table, in_order)
                if offsets is not None:
                    for (topic, partition), end in ends.items():
                        offsets.store(connection, topic, partition, stored[(topic, partition)], end)
                connection.commit()
        finally:
            if connection is not None:
                connection.close()
        return written

    def decode_value(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        """The value converter's answer; for JsonConverter's envelope, its schema parsed
        once per distinct schema text (half a record's decoding otherwise)."""
        converter = self.value_converter
        if (
            value is None
            or not isinstance(converter, JsonConverter)
            or not converter.schemas_enabled
            or not value.startswith(ENVELOPE_START)
        ):
            return converter.to_connect_data(topic, value)
        split = value.find(PAYLOAD_KEY)
        schema = self.plain_schema(value[len(ENVELOPE_START) : split])
        if schema is None or split < 0 or not value.endswith(b"}"):
            return converter.to_connect_data(topic, value)
        payload = json.loads(value[split + len(PAYLOAD_KEY) : -1])
        if not isinstance(payload, dict):
            return converter.to_connect_data(topic, value)
        return schema, Struct(schema, payload)

    def plain_schema(self, text: bytes) -> Schema | None:
        """The schema of an envelope's schema text when it is a plain struct (its payload's
        JSON values are its Connect values), else None; parsed once per text."""
        if text in self.schemas:
            return self.schemas[text]
        try:
            schema: Schema | None = schema_from_json(json.loads(text))
        except ValueError:
            schema = None
        if schema is not None and not _plain_struct(schema):
            schema = None  # logical, bytes or nested fields: the converter decodes them
        self.schemas[text] = schema
        return schema

    @property
    def keeps_last(self) -> bool:
        """Whether only each key's last record matters (upsert, update and deletes)."""
        return self.settings.pk_mode in (RECORD_KEY, RECORD_VALUE) and (
            self.settings.insert_mode != INSERT or self.settings.delete_enabled
        )

    def row(self, topic: str, partition: int, offset: int, key: Any, value: Any) -> _Row | None:
        settings = self.settings
        where = f"{topic}-{partition} at offset {offset}"
        try:
            key_schema, key_data = self.key_converter.to_connect_data(topic, key)
            value_schema, value_data = self.decode_value(topic, value)
        except Exception as exc:
            raise ConnectException(f"Conversion failed for the record of {where}: {exc}") from exc
        if value_data is None:
            if not settings.delete_enabled:
                return None  # a tombstone without delete.enabled writes nothing
            key_values = self.key_of_record_key(key_schema, key_data, where)
            return _Row(key_values, tuple(self.key_names(key_schema)), None, None)
        if (
            value_schema is None
            or value_schema.type != STRUCT
            or not isinstance(value_data, Struct)
        ):
            raise ConnectException(
                "Sink connector is configured with "
                f"'delete.enabled={str(settings.delete_enabled).lower()}' "
                f"and 'pk.mode={settings.pk_mode}' and therefore requires records with a non-null "
                f"Struct value and non-null Struct schema, but found record at {where} with a "
                f"{type(value_data).__name__} value and "
                f"{'null' if value_schema is None else value_schema.type} value schema."
            )
        fields = self.chosen_fields(value_schema)
        key_columns: list[tuple[str, Schema, Any]] = []
        if settings.pk_mode == KAFKA:
            names = list(settings.pk_fields) or KAFKA_PK_FIELDS
            if len(names) != 3:
                raise ConnectException(
                    "PK mode for kafka requires exactly three pk.fields (topic, partition, offset)"
                )
            kinds = (Schema("string"), Schema("int32"), Schema("int64"))
            key_columns = list(zip(names, kinds, (topic, partition, offset), strict=True))
        elif settings.pk_mode == RECORD_KEY:
            key_values = self.key_of_record_key(key_schema, key_data, where)
            key_columns = list(
                zip(
                    self.key_names(key_schema),
                    self.key_schemas(key_schema),
                    key_values,
                    strict=True,
                )
            )
        elif settings.pk_mode == RECORD_VALUE:
            key_columns = [
                (name, schema, value_data.values.get(name))
                for name, schema in self.value_key_columns(value_schema, where)
            ]
        key_names = tuple(name for name, _, _ in key_columns)
        schema, others = self.layout(
            value_schema, key_names, [s for _, s, _ in key_columns], fields
        )
        values = {n: v for n, _, v in key_columns}
        struct_values = value_data.values
        for name in others:
            values[name] = struct_values.get(name)
        key = tuple(v for _, _, v in key_columns) or (topic, partition, offset)
        return _Row(key, key_names, values, schema)

    def chosen_fields(self, value_schema: Schema) -> list[Field]:
        """The value's fields written: ``fields.whitelist``'s (all when empty) and the
        key's."""
        chosen = self.settings.fields
        return [
            f
            for f in value_schema.fields
            if not chosen or f.name in chosen or self.is_value_pk(f.name)
        ]

    def value_key_columns(self, value_schema: Schema, where: str) -> list[tuple[str, Schema]]:
        """The primary key's columns taken from the value (pk.mode=record_value)."""
        if self.settings.pk_mode != RECORD_VALUE:
            return []
        names = list(self.settings.pk_fields) or [f.name for f in value_schema.fields]
        columns = []
        for name in names:
            found = value_schema.field(name)
            if found is None:
                raise ConnectException(f"PK field {name} is not in the record value of {where}")
            columns.append((name, found.schema))
        return columns

    def layout(
        self,
        value_schema: Schema,
        key_names: tuple[str, ...],
        key_schemas: list[Schema],
        fields: list[Field],
    ) -> tuple[Schema, list[str]]:
        """The row's columns (the key's first, required) and its value columns, built
        once per value schema and key."""
        cache_key = (id(value_schema), key_names)
        cached = self.layouts.get(cache_key)
        if cached is not None and cached[0] is value_schema:
            return cached[1], cached[2]
        columns = [
            (n, Schema(s.type, optional=False, name=s.name, parameters=s.parameters))
            for n, s in zip(key_names, key_schemas, strict=True)
        ]
        others = [f.name for f in fields if f.name not in key_names]
        columns += [(f.name, f.schema) for f in fields if f.name not in key_names]
        schema = Schema.struct(columns)
        self.layouts[cache_key] = (value_schema, schema, others)
        return schema, others

    def is_value_pk(self, name: str) -> bool:
        return self.settings.pk_mode == RECORD_VALUE and (
            not self.settings.pk_fields or name in self.settings.pk_fields
        )

    def key_names(self, key_schema: Schema | None) -> list[str]:
        assert key_schema is not None
        if key_schema.type == STRUCT:
            return list(self.settings.pk_fields) or [f.name for f in key_schema.fields]
        if len(self.settings.pk_fields) != 1:
            raise ConnectException(
                "Need exactly one PK column defined since the key schema for records is a "
                f"primitive type, defined columns are: {list(self.settings.pk_fields)}"
            )
        return list(self.settings.pk_fields)

    def key_schemas(self, key_schema: Schema | None) -> list[Schema]:
        assert key_schema is not None
        if key_schema.type != STRUCT:
            return [key_schema]
        found: list[Field | None] = [key_schema.field(n) for n in self.key_names(key_schema)]
        return [f.schema for f in found if f is not None]

    def key_of_record_key(self, key_schema: Schema | None, key: Any, where: str) -> tuple[Any, ...]:
        if key_schema is None or key is None:
            raise ConnectException(
                "Sink connector is configured with 'pk.mode=record_key' and therefore requires "
                f"records with a non-null key and non-null key schema, but found record at {where} "
                "with a null key or key schema."
            )
        if key_schema.type != STRUCT:
            self.key_names(key_schema)
            return (key,)
        names = self.key_names(key_schema)
        missing = [n for n in names if key_schema.field(n) is None]
        if missing:
            raise ConnectException(f"PK fields {missing} are not in the record key of {where}")
        return tuple(key.values.get(n) for n in names)


class TableWriter:
    """Writes rows to tables over one connection: creates or evolves a table as allowed,
    then applies the rows (deletes, then upserts, inserts or updates)."""

    def __init__(self, settings: SinkSettings, connection: Any) -> None:
        self.settings = settings
        self.database = settings.database
        self.connection = connection
        self.columns: dict[str, set[str]] = {}

    def prepare(self, table: str, rows: list[_Row]) -> None:
        """Create or evolve the table for ``rows`` (committed on its own: DDL commits on
        MariaDB/MySQL), before any row of the transaction is written."""
        writes = [row for row in rows if row.values is not None]
        if writes:
            schema = writes[-1].schema
            assert schema is not None
            self.ensure_table(table, schema, len(writes[-1].key_names))

    def write(self, table: str, rows: list[_Row]) -> int:
        deletes = [row.key for row in rows if row.values is None]
        writes = [row for row in rows if row.values is not None]
        quoted = self.database.table(table)
        if writes:
            schema = writes[-1].schema
            assert schema is not None
            self.ensure_table(table, schema, len(writes[-1].key_names))
        elif deletes and self.existing_columns(table) is None:
            return 0  # deleting from a table that was never created: nothing there
        with closing(self.connection.cursor()) as cursor:
            if deletes:
                names = rows[0].key_names
                condition = " AND ".join(
                    f"{self.database.quote(n)} = {self.database.placeholder}" for n in names
                )
                for chunk in _chunks(deletes, self.settings.batch_size):
                    cursor.executemany(f"DELETE FROM {quoted} WHERE {condition}", chunk)
            # rows grouped by their columns (a schema change mid-batch)
            groups: dict[tuple[str, ...], list[_Row]] = {}
            for row in writes:
                assert row.values is not None
                groups.setdefault(tuple(row.values), []).append(row)
            for names, group in groups.items():
                self.write_rows(cursor, table, list(names), group)
        return len(rows)

    def write_rows(self, cursor: Any, table: str, names: list[str], rows: list[_Row]) -> None:
        schema = rows[-1].schema
        assert schema is not None
        key_count = len(rows[0].key_names)
        keys = names[:key_count]
        quoted = self.database.table(table)
        types = [f.schema for f in schema.fields]
        if all(_is_plain(s) for s in types):  # the values go to the driver as they are
            data = [tuple(map(row.values.get, names)) for row in rows if row.values is not None]
        else:
            data = [
                tuple(_db_value(s, row.values[n]) for n, s in zip(names, types, strict=True))
                for row in rows
                if row.values is not None
            ]
        mode = self.settings.insert_mode
        column_list = ", ".join(self.database.quote(n) for n in names)
        if self.database.kind == POSTGRESQL and mode in (INSERT, UPSERT):
            target = quoted
            if mode == UPSERT:
                target = self.database.quote(f"strom_stage_{abs(hash(table))}")
                cursor.execute(f"CREATE TEMP TABLE {target} (LIKE {quoted}) ON COMMIT DROP")
            with cursor.copy(f"COPY {target} ({column_list}) FROM STDIN") as copy:
                for values in data:
                    copy.write_row(values)
            if mode == UPSERT:
                insert = f"INSERT INTO {quoted} ({column_list}) SELECT {column_list} FROM {target}"
                if self.insert_new_keys(cursor, table, insert) is None:
                    cursor.execute(f"{insert} {self.on_conflict(names, keys)}")
                cursor.execute(f"DROP TABLE {target}")
            return
        if mode == UPSERT:
            statement = self.database.upsert(quoted, names, keys)
        elif mode == UPDATE:
            sets = ", ".join(
                f"{self.database.quote(n)} = {self.database.placeholder}" for n in names[key_count:]
            )
            where = " AND ".join(
                f"{self.database.quote(k)} = {self.database.placeholder}" for k in keys
            )
            statement = f"UPDATE {quoted} SET {sets} WHERE {where}"
            data = [values[key_count:] + values[:key_count] for values in data]
        else:
            marks = ", ".join([self.database.placeholder] * len(names))
            statement = f"INSERT INTO {quoted} ({column_list}) VALUES ({marks})"
        for chunk in _chunks(data, self.settings.batch_size):
            cursor.executemany(statement, chunk)

    def on_conflict(self, names: list[str], keys: list[str]) -> str:
        """PostgreSQL's upsert clause: the row of an existing key takes the new values."""
        q = self.database.quote
        updates = [n for n in names if n not in keys]
        action = (
            "DO UPDATE SET " + ", ".join(f"{q(n)}=EXCLUDED.{q(n)}" for n in updates)
            if updates
            else "DO NOTHING"
        )
        return f"ON CONFLICT ({', '.join(q(k) for k in keys)}) {action}"

    def write_csv(self, table: str, columns: Schema, key_count: int, text: pa.Buffer) -> int:
        """Insert or upsert PostgreSQL rows from CSV lines (``csv_text``, a row per key for
        an upsert): copied into the table (insert), or into a staging table of its columns
        and then one ``INSERT ... SELECT ... ON CONFLICT`` (upsert). The rows written."""
        q = self.database.quote
        quoted = self.database.table(table)
        names = [f.name for f in columns.fields]
        column_list = ", ".join(q(n) for n in names)
        with closing(self.connection.cursor()) as cursor:
            if self.settings.insert_mode != UPSERT:
                with cursor.copy(f"COPY {quoted} ({column_list}) FROM STDIN (FORMAT csv)") as copy:
                    copy.write(memoryview(text))
                return max(int(cursor.rowcount), 0)
            stage = q(f"strom_stage_{abs(hash(table))}")
            cursor.execute(
                f"CREATE TEMP TABLE {stage} ON COMMIT DROP AS SELECT {column_list} "
                f"FROM {quoted} WITH NO DATA"
            )
            with cursor.copy(f"COPY {stage} ({column_list}) FROM STDIN (FORMAT csv)") as copy:
                copy.write(memoryview(text))
            insert = f"INSERT INTO {quoted} ({column_list}) SELECT {column_list} FROM {stage}"
            written = self.insert_new_keys(cursor, table, insert)
            if written is None:
                cursor.execute(f"{insert} {self.on_conflict(names, names[:key_count])}")
                written = max(int(cursor.rowcount), 0)
            cursor.execute(f"DROP TABLE {stage}")
        return written

    def insert_new_keys(self, cursor: Any, table: str, insert: str) -> int | None:
        """An upsert's rows as a plain ``INSERT`` when none of their keys is in the table
        (PostgreSQL's ``ON CONFLICT`` costs it about 3 us a row against 1.6, for its
        speculative insertion); None when a key is there (the insert undone to a savepoint,
        the caller upserts). After such a conflict the table's next
        ``PLAIN_INSERT_PAUSE`` upserts in this process go straight to ``ON CONFLICT``."""
        import psycopg

        where = (self.database.url, table)
        if _UPSERTS_BEFORE_PLAIN.get(where, 0) > 0:
            _UPSERTS_BEFORE_PLAIN[where] -= 1
            return None
        cursor.execute("SAVEPOINT strom_new_keys")
        try:
            cursor.execute(insert)
        except psycopg.errors.UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT strom_new_keys")
            _UPSERTS_BEFORE_PLAIN[where] = PLAIN_INSERT_PAUSE
            return None
        written = max(int(cursor.rowcount), 0)
        cursor.execute("RELEASE SAVEPOINT strom_new_keys")
        return written

    def write_payloads(self, table: str, columns: Schema, key_count: int, text: pa.Buffer) -> int:
        """Insert or upsert PostgreSQL rows from JSON payloads (``copy_text``'s numbered
        lines, in the records' order): copied into a staging table, then one ``INSERT ...
        SELECT`` in which the database reads each payload as a row of the table; an upsert
        takes each key's last payload. The rows written."""
        q = self.database.quote
        quoted = self.database.table(table)
        names = [f.name for f in columns.fields]
        keys = names[:key_count]
        stage = q(f"strom_stage_{abs(hash(table))}")
        read = ", ".join(f"r.{q(n)}" for n in names)
        source = f"{stage} s, json_populate_record(NULL::{quoted}, s.payload) r"
        if self.settings.insert_mode == UPSERT:
            key_list = ", ".join(f"r.{q(k)}" for k in keys)
            select = (
                f"SELECT DISTINCT ON ({key_list}) {read} FROM {source} "
                f"ORDER BY {key_list}, s.number DESC {self.on_conflict(names, keys)}"
            )
        else:
            select = f"SELECT {read} FROM {source}"
        with closing(self.connection.cursor()) as cursor:
            cursor.execute(
                f"CREATE TEMP TABLE {stage} (number BIGINT, payload JSON) ON COMMIT DROP"
            )
            with cursor.copy(f"COPY {stage} (number, payload) FROM STDIN") as copy:
                copy.write(memoryview(text))
            cursor.execute(f"INSERT INTO {quoted} ({', '.join(q(n) for n in names)}) {select}")
            written = max(int(cursor.rowcount), 0)
            cursor.execute(f"DROP TABLE {stage}")
        return written

    def existing_columns(self, table: str) -> set[str] | None:
        """The table's columns, None when there is no such table."""
        if table in self.columns:
            return self.columns[table]
        with closing(self.connection.cursor()) as cursor:
            if self.database.kind in (POSTGRESQL, MYSQL):
                schema_name, _, name = table.rpartition(".")
                cursor.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND table_schema = COALESCE(NULLIF(%s, ''), "
                    f"{self.database.current_schema()})",
                    (name, schema_name),
                )
            else:
                cursor.execute(f"PRAGMA table_info({self.database.quote(table)})")
            found = cursor.fetchall()
        if not found:
            return None
        names = {row[1] if self.database.kind == SQLITE else row[0] for row in found}
        self.columns[table] = names
        return names

    def ensure_table(self, table: str, schema: Schema, key_count: int) -> None:
        for attempt in range(CREATE_RETRIES):
            try:
                self._ensure_table(table, schema, key_count)
                return
            except ConnectException:
                raise
            except Exception:  # another task created or altered it at the same moment
                self.connection.rollback()
                self.columns.pop(table, None)
                if attempt == CREATE_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _ensure_table(self, table: str, schema: Schema, key_count: int) -> None:
        existing = self.existing_columns(table)
        quoted = self.database.table(table)
        with closing(self.connection.cursor()) as cursor:
            if existing is None:
                if not self.settings.auto_create:
                    raise ConnectException(
                        f"Table {table} is missing and auto-creation is disabled"
                    )
                columns = [
                    f"{self.database.quote(f.name)} "
                    f"{self.database.column_type(f.schema, key=i < key_count)}"
                    + ("" if f.schema.optional else " NOT NULL")
                    for i, f in enumerate(schema.fields)
                ]
                keys = [f.name for f in schema.fields][:key_count]
                if keys:
                    columns.append(
                        "PRIMARY KEY(" + ", ".join(self.database.quote(k) for k in keys) + ")"
                    )
                cursor.execute(f"CREATE TABLE IF NOT EXISTS {quoted} ({', '.join(columns)})")
                self.connection.commit()
                log.info("created table %s", table)
                self.columns.pop(table, None)
                return
            missing = [f for f in schema.fields if f.name not in existing]
            if not missing:
                return
            if not self.settings.auto_evolve:
                names = ", ".join(f.name for f in missing)
                raise ConnectException(
                    f"Table {table} is missing fields ({names}) and auto-evolution is disabled"
                )
            for f in missing:
                if not f.schema.optional and f.schema.default is None:
                    raise ConnectException(
                        f"Cannot ALTER TABLE {table} to add missing field {f.name}, as the field "
                        "is not optional and does not have a default value"
                    )
                cursor.execute(
                    f"ALTER TABLE {quoted} ADD {self.database.quote(f.name)} "
                    f"{self.database.column_type(f.schema)}"
                )
            self.connection.commit()
            self.columns.pop(table, None)


def _plain_struct(schema: Schema) -> bool:
    """A struct of primitive fields other than bytes, with no defaults: its payload's JSON
    values are its Connect values as they are."""
    return schema.type == STRUCT and all(
        f.schema.type in PRIMITIVE_TYPES
        and f.schema.type != BYTES
        and f.schema.name is None
        and f.schema.default is None
        for f in schema.fields
    )


def _is_plain(schema: Schema) -> bool:
    """Whether the driver takes this column's Connect values as they are."""
    return schema.type in PRIMITIVE_TYPES and schema.name is None


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _db_value(schema: Schema, value: Any) -> Any:
    """A Connect value as the database driver takes it."""
    if value is None:
        return None
    if schema.name == TIMESTAMP and isinstance(value, int):
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)
    if schema.name == DATE and isinstance(value, int):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if schema.name == TIME and isinstance(value, int):
        return (dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)).time()
    if isinstance(value, Struct | dict | list):
        raise ConnectException(
            f"Unsupported source data type: {schema.type.upper()} (JDBC sink writes primitives)"
        )
    return value
