"""The lake sink: a topic's records as Parquet or JSON files under a directory, partitioned
by Kafka partition, by fields or by time, each file committed exactly once. It takes the
keys of Confluent's HDFS sinks (``io.confluent.connect.hdfs3.Hdfs3SinkConnector``,
``io.confluent.connect.hdfs.HdfsSinkConnector``) where they make sense for a local or
mounted directory, and is Strom's ``LakeSinkConnector`` (``LakeSink``, with ``path``):

- where: ``store.url`` / ``hdfs.url`` / ``path`` (a ``file://`` URL or a directory),
  ``topics.dir`` (``topics``) and ``logs.dir`` (``logs``). A topic's files go under
  ``<dir>/<topics.dir>/<topic>/<partition path>/``; its query's Spark checkpoint under
  ``<dir>/<logs.dir>/<topic>/<connector>/``.
- how: ``format.class`` (``...ParquetFormat``, the default, or ``...JsonFormat``: JSON
  lines), ``flush.size`` (records per file at most), ``rotate.interval.ms`` (how often a
  micro-batch commits files; 10 s when unset), ``behavior.on.null.values`` (``ignore``
  a tombstone, or ``fail``).
- partitions (``partitioner.class``): ``DefaultPartitioner`` (``partition=<n>``),
  ``FieldPartitioner`` (``<field>=<value>`` for each of ``partition.field.name``),
  ``TimeBasedPartitioner`` (``path.format``, ``partition.duration.ms``, ``timezone``,
  ``locale``, ``timestamp.extractor`` Wallclock / Record / RecordField with
  ``timestamp.field``), ``HourlyPartitioner`` and ``DailyPartitioner``. Each
  ``path.format`` segment is ``'name'=pattern`` (Joda's letters y M d H m s S D), as
  Hive-style directories are, which is how Spark's partitioned writer lays them out.

Each topic is one Structured Streaming query over the ``strom`` source whose Python
decoder (``mapInArrow``, on the executors) turns records into rows with the connector's
value converter (a struct with a schema, from JsonConverter with schemas or the
AvroConverter: its fields as columns; schemaless JSON objects: columns inferred; any
other value: one ``value`` column), and whose sink is Spark's file sink: a micro-batch's
files are listed in the directory's ``_spark_metadata`` log once the batch commits, and a
batch replayed after a crash is committed once. So the committed files hold each record
exactly once; files a killed worker left half written are on disk but not in the log, so
a reader reads through Spark (``spark.read.parquet(dir)``) or the log
(``committed_files``). The columns are the union of the record schemas seen: a batch
meeting a new field fails its query on purpose, with the merged columns, which the task
keeps (``schema.json`` beside the checkpoint) and starts the query again with.

Does not own the stream, its group offsets or the task's states (``spark_runner``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import re
import time
import urllib.parse
import zoneinfo
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from strom.connect import config_def as cd
from strom.connect.api import ConnectException, SinkConnector, Task
from strom.connect.config_def import ConfigValue
from strom.connect.converters import Converter, JsonConverter, schema_from_json, schema_to_json
from strom.connect.data import (
    ARRAY,
    BOOLEAN,
    BYTES,
    DATE,
    DECIMAL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    MAP,
    STRING,
    STRUCT,
    TIME,
    TIMESTAMP,
    Field,
    Schema,
    Struct,
)
from strom.connect.spark_tasks import SparkSinkTask, StreamOpener

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger(__name__)

PARQUET, JSON = "parquet", "json"
DEFAULT, FIELD, TIME_BASED = "DefaultPartitioner", "FieldPartitioner", "TimeBasedPartitioner"
HOURLY, DAILY = "HourlyPartitioner", "DailyPartitioner"
PARTITIONERS = (DEFAULT, FIELD, TIME_BASED, HOURLY, DAILY)
HOURLY_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH"
DAILY_FORMAT = "'year'=YYYY/'month'=MM/'day'=dd"
WALLCLOCK, RECORD, RECORD_FIELD = "Wallclock", "Record", "RecordField"
DEFAULT_ROTATE_MS = 10_000
SCHEMA_MARK = re.compile(r"\[strom-lake-schema ([^ \]]+) ([A-Za-z0-9+/=]+)\]")
VALUE_COLUMN = "value"
PARQUET_TIMESTAMPS = "spark.sql.parquet.outputTimestampType"
ENVELOPE_START = b'{"schema":'
PAYLOAD_KEY = b',"payload":'
DIRECT_LOGICAL = (None, TIMESTAMP, DATE, TIME)  # a field's JSON value is its Connect value
PLACEHOLDER_COLUMN = "__strom_no_columns_yet"  # Spark takes no query whose columns all partition


class LakeSinkConnector(SinkConnector):
    CONFIG_DEF = cd.ConfigDef(
        [
            cd.ConfigKey("path", cd.STRING, "", cd.HIGH, "The directory to write under."),
            cd.ConfigKey(
                "store.url", cd.STRING, "", cd.HIGH, "As path: a file:// URL or a directory."
            ),
            cd.ConfigKey("hdfs.url", cd.STRING, "", cd.HIGH, "As store.url (deprecated)."),
            cd.ConfigKey(
                "topics.dir", cd.STRING, "topics", cd.HIGH, "The directory of the topics' files."
            ),
            cd.ConfigKey(
                "logs.dir", cd.STRING, "logs", cd.HIGH, "The directory of the queries' checkpoints."
            ),
            cd.ConfigKey(
                "format.class",
                cd.STRING,
                "io.confluent.connect.hdfs.parquet.ParquetFormat",
                cd.HIGH,
                "The file format: ...ParquetFormat or ...JsonFormat.",
            ),
            cd.ConfigKey(
                "partitioner.class",
                cd.STRING,
                "io.confluent.connect.storage.partitioner.DefaultPartitioner",
                cd.HIGH,
                "The partitioner: Default, Field, TimeBased, Hourly or Daily.",
            ),
            cd.ConfigKey(
                "partition.field.name",
                cd.LIST,
                "",
                cd.MEDIUM,
                "The record fields FieldPartitioner partitions by.",
            ),
            cd.ConfigKey(
                "path.format", cd.STRING, "", cd.MEDIUM, "TimeBasedPartitioner's directories."
            ),
            cd.ConfigKey(
                "partition.duration.ms",
                cd.LONG,
                -1,
                cd.MEDIUM,
                "The duration of a time-based partition, in milliseconds.",
            ),
            cd.ConfigKey("locale", cd.STRING, "", cd.MEDIUM, "The locale of path.format."),
            cd.ConfigKey("timezone", cd.STRING, "", cd.MEDIUM, "The timezone of path.format."),
            cd.ConfigKey(
                "timestamp.extractor",
                cd.STRING,
                WALLCLOCK,
                cd.MEDIUM,
                "The record's time: Wallclock, Record or RecordField.",
                check=cd.one_of(WALLCLOCK, RECORD, RECORD_FIELD),
            ),
            cd.ConfigKey(
                "timestamp.field",
                cd.STRING,
                "timestamp",
                cd.MEDIUM,
                "The record field holding its time, for RecordField.",
            ),
            cd.ConfigKey(
                "flush.size",
                cd.INT,
                -1,
                cd.HIGH,
                "Records per file at most (-1: no limit).",
            ),
            cd.ConfigKey(
                "rotate.interval.ms",
                cd.LONG,
                -1,
                cd.HIGH,
                "How often files are committed (a micro-batch), in milliseconds.",
            ),
            cd.ConfigKey(
                "behavior.on.null.values",
                cd.STRING,
                "ignore",
                cd.LOW,
                "What a tombstone does: ignore or fail.",
                check=cd.one_of("ignore", "fail", case_sensitive=False),
            ),
        ]
    )

    def validate(self, props: Mapping[str, str]) -> dict[str, ConfigValue]:
        results = super().validate(props)
        if any(result.errors for result in results.values()):
            return results
        values = {name: result.value for name, result in results.items()}
        regex = props.get("topics.regex", "").strip()
        if regex and not props.get("topics", "").strip():
            results["topics.regex"] = ConfigValue(
                "topics.regex",
                regex,
                [
                    f"Invalid value {regex} for configuration topics.regex: the lake sink "
                    "writes a directory per topic: list them in topics"
                ],
            )
        try:
            LakeSettings.of(values, props.get("name", ""))
        except LakeConfigError as exc:
            results[exc.key].errors.append(str(exc))
        return results

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type[Task]:
        return LakeSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        topics = [t.strip() for t in self.props.get("topics", "").split(",") if t.strip()]
        count = max(1, min(max_tasks, len(topics)))
        return [{**self.props, "topics": ",".join(topics[i::count])} for i in range(count)]

    def stop(self) -> None:
        pass


class Hdfs3SinkConnector(LakeSinkConnector):
    """Confluent's HDFS 3 sink's class name: the lake sink on a local directory."""


class HdfsSinkConnector(LakeSinkConnector):
    """Confluent's HDFS 2 sink's class name: the lake sink on a local directory."""


class LakeConfigError(ValueError):
    """A setting the lake sink cannot use; ``key`` names it, the message says why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# Joda's pattern letters served in path.format, and how each is written.
_LETTERS = "yYMdHmsSD"


@dataclass(frozen=True)
class TimeColumn:
    """One ``'name'=pattern`` segment of path.format: a column and its value's pattern."""

    name: str
    tokens: tuple[tuple[str, str], ...]  # ("text", literal) or ("field", letters)

    def format(self, moment: dt.datetime) -> str:
        out = []
        for kind, text in self.tokens:
            if kind == "text":
                out.append(text)
                continue
            letter, width = text[0], len(text)
            if letter in "yY":
                year = moment.year
                out.append(f"{year % 100:02d}" if width == 2 else f"{year:0{width}d}")
            elif letter == "M":
                out.append(f"{moment.month:0{width}d}")
            elif letter == "d":
                out.append(f"{moment.day:0{width}d}")
            elif letter == "H":
                out.append(f"{moment.hour:0{width}d}")
            elif letter == "m":
                out.append(f"{moment.minute:0{width}d}")
            elif letter == "s":
                out.append(f"{moment.second:0{width}d}")
            elif letter == "S":
                out.append(f"{moment.microsecond // 1000:03d}"[:width].ljust(width, "0"))
            else:  # D
                out.append(f"{moment.timetuple().tm_yday:0{width}d}")
        return "".join(out)


def _pattern_tokens(pattern: str) -> list[tuple[str, str]]:
    """Joda's pattern as literal text and runs of one letter; '' is a quote."""
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise LakeConfigError("path.format", f"unclosed quote in path.format {pattern!r}")
            tokens.append(("text", pattern[i + 1 : end] if end > i + 1 else "'"))
            i = end + 1
        elif char.isalpha():
            if char not in _LETTERS:
                raise LakeConfigError(
                    "path.format",
                    f"Invalid value {pattern} for configuration path.format: the pattern letter "
                    f"{char!r} is not served (y Y M d H m s S D are)",
                )
            run = i
            while i < len(pattern) and pattern[i] == char:
                i += 1
            tokens.append(("field", pattern[run:i]))
        else:
            tokens.append(("text", char))
            i += 1
    merged: list[tuple[str, str]] = []
    for kind, text in tokens:
        if merged and kind == "text" and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def time_columns(path_format: str) -> list[TimeColumn]:
    """path.format's segments as columns: each must be ``'name'=pattern``."""
    columns = []
    for segment in path_format.strip("/").split("/"):
        tokens = _pattern_tokens(segment)
        if not tokens or tokens[0][0] != "text" or "=" not in tokens[0][1]:
            raise LakeConfigError(
                "path.format",
                f"Invalid value {path_format} for configuration path.format: each segment is "
                f"'name'=pattern (as 'year'=YYYY), which {segment!r} is not",
            )
        name, _, rest = tokens[0][1].partition("=")
        value = ([("text", rest)] if rest else []) + tokens[1:]
        if not name or not value:
            raise LakeConfigError(
                "path.format", f"Invalid value {path_format} for configuration path.format"
            )
        columns.append(TimeColumn(name, tuple(value)))
    return columns


def _class_kind(value: str, choices: Iterable[str]) -> str | None:
    simple = value.strip().rsplit(".", 1)[-1]
    return next((choice for choice in choices if simple == choice), None)


def local_directory(url: str, key: str = "store.url") -> Path:
    """The directory of a ``file://`` URL or a path; a URL of another scheme is refused."""
    if "://" not in url:
        return Path(url)
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "file":
        raise LakeConfigError(
            key,
            f"Invalid value {url} for configuration {key}: the lake sink writes to a local "
            "or mounted directory (file:///path or /path), not to " + parsed.scheme,
        )
    return Path(urllib.parse.unquote(parsed.path))


@dataclass(frozen=True)
class LakeSettings:
    connector: str
    root: Path
    topics_dir: str
    logs_dir: str
    format: str
    partitioner: str
    fields: tuple[str, ...]
    time_columns: tuple[TimeColumn, ...]
    duration_ms: int
    timezone: str
    extractor: str
    timestamp_field: str
    flush_size: int
    rotate_ms: int
    fail_on_null: bool

    @classmethod
    def of(cls, values: Mapping[str, Any], connector: str) -> LakeSettings:
        given = [(k, str(values[k])) for k in ("path", "store.url", "hdfs.url") if values.get(k)]
        if not given:
            raise LakeConfigError(
                "path", "Missing configuration path (or store.url): the directory to write under"
            )
        root = [local_directory(url, key) for key, url in given][0]
        format_class = str(values.get("format.class") or "")
        file_format = {"ParquetFormat": PARQUET, "JsonFormat": JSON, "parquet": PARQUET,
                       "json": JSON}.get(format_class.rsplit(".", 1)[-1])  # fmt: skip
        if file_format is None:
            raise LakeConfigError(
                "format.class",
                f"Invalid value {format_class} for configuration format.class: ParquetFormat "
                "and JsonFormat are served",
            )
        partitioner_class = str(values.get("partitioner.class") or "")
        partitioner = _class_kind(partitioner_class, PARTITIONERS)
        if partitioner is None:
            raise LakeConfigError(
                "partitioner.class",
                f"Invalid value {partitioner_class} for configuration partitioner.class: "
                f"{', '.join(PARTITIONERS)} are served",
            )
        fields = tuple(values.get("partition.field.name") or ())
        if partitioner == FIELD and not fields:
            raise LakeConfigError(
                "partition.field.name",
                "Missing configuration partition.field.name, required by FieldPartitioner",
            )
        path_format = str(values.get("path.format") or "")
        duration = int(values.get("partition.duration.ms", -1))
        if partitioner == HOURLY:
            path_format, duration = HOURLY_FORMAT, 3_600_000
        elif partitioner == DAILY:
            path_format, duration = DAILY_FORMAT, 86_400_000
        columns: list[TimeColumn] = []
        timezone = str(values.get("timezone") or "UTC")
        if partitioner in (TIME_BASED, HOURLY, DAILY):
            if not path_format:
                raise LakeConfigError(
                    "path.format", "Missing configuration path.format, required by " + partitioner
                )
            if duration <= 0:
                raise LakeConfigError(
                    "partition.duration.ms",
                    f"Invalid value {duration} for configuration partition.duration.ms: "
                    f"{partitioner} needs a positive duration",
                )
            columns = time_columns(path_format)
            try:
                zoneinfo.ZoneInfo(timezone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise LakeConfigError(
                    "timezone",
                    f"Invalid value {timezone} for configuration timezone: not a time zone",
                ) from None
        rotate_ms = int(values.get("rotate.interval.ms", -1))
        return cls(
            connector=connector,
            root=root,
            topics_dir=str(values.get("topics.dir") or "topics"),
            logs_dir=str(values.get("logs.dir") or "logs"),
            format=file_format,
            partitioner=partitioner,
            fields=fields,
            time_columns=tuple(columns),
            duration_ms=duration,
            timezone=timezone,
            extractor=str(values.get("timestamp.extractor") or WALLCLOCK),
            timestamp_field=str(values.get("timestamp.field") or "timestamp"),
            flush_size=int(values.get("flush.size", -1)),
            rotate_ms=rotate_ms if rotate_ms > 0 else DEFAULT_ROTATE_MS,
            fail_on_null=str(values.get("behavior.on.null.values", "ignore")).lower() == "fail",
        )

    def table_dir(self, topic: str) -> Path:
        return self.root / self.topics_dir / topic

    def task_dir(self, topic: str) -> Path:
        return self.root / self.logs_dir / topic / (self.connector or "lake")

    def partition_columns(self) -> list[str]:
        if self.partitioner == DEFAULT:
            return ["partition"]
        if self.partitioner == FIELD:
            return list(self.fields)
        return [c.name for c in self.time_columns]


class LakeSinkTask(SparkSinkTask):
    def start(self, props: dict[str, str]) -> None:
        values = LakeSinkConnector.CONFIG_DEF.parse(props)
        self.settings = LakeSettings.of(values, props.get("name", ""))
        self.topics = [t.strip() for t in props.get("topics", "").split(",") if t.strip()]
        self.columns: dict[str, Schema] = {}  # by topic: the columns written so far

    def start_streams(
        self, open_stream: StreamOpener, key_converter: Converter, value_converter: Converter
    ) -> list[StreamingQuery]:
        if not self.topics:
            raise ConnectException("the lake sink writes a directory per topic: list them")
        if not self.spark.sparkContext.getConf().contains(PARQUET_TIMESTAMPS):
            # Parquet's own timestamp type (UTC micros), which any reader knows, rather
            # than Spark's default INT96, which pyarrow and others read as naive nanos
            self.spark.conf.set(PARQUET_TIMESTAMPS, "TIMESTAMP_MICROS")
        return [self.start_topic(topic, open_stream, value_converter) for topic in self.topics]

    def start_topic(
        self, topic: str, open_stream: StreamOpener, value_converter: Converter
    ) -> StreamingQuery:
        settings = self.settings
        table = settings.table_dir(topic)
        task_dir = settings.task_dir(topic)
        checkpoint = task_dir / "checkpoint"
        if committed_batches(table) and not (checkpoint / "commits").is_dir():
            raise ConnectException(
                f"{table} holds committed files but the checkpoint {checkpoint} is gone: "
                "restore it, or move the directory aside to write it anew"
            )
        columns = self.columns.get(topic) or read_schema(task_dir / "schema.json")
        self.columns[topic] = columns
        decoder = RecordDecoder(settings, value_converter, topic, columns)
        spark_schema = decoder.spark_schema()
        stream = open_stream([topic]).select("value", "partition", "offset", "timestamp")
        rows = stream.mapInArrow(decoder, spark_schema)
        writer = (
            rows.writeStream.format(settings.format)
            .option("path", str(table))
            .option("checkpointLocation", str(checkpoint))
            .partitionBy(*settings.partition_columns())
            .trigger(processingTime=f"{settings.rotate_ms} milliseconds")
            .queryName(f"connect-{settings.connector}-{topic}")
        )
        if settings.flush_size > 0:
            writer = writer.option("maxRecordsPerFile", str(settings.flush_size))
        return writer.start()

    def restart_after(self, failure: str) -> bool:
        """A query that met new fields: keep the merged columns and start again."""
        learnt = False
        for topic, encoded in SCHEMA_MARK.findall(failure):
            if topic not in self.columns:
                continue
            columns = schema_from_json(json.loads(base64.b64decode(encoded)))
            if columns == self.columns[topic]:
                continue
            self.columns[topic] = columns
            task_dir = self.settings.task_dir(topic)
            task_dir.mkdir(parents=True, exist_ok=True)
            (task_dir / "schema.json").write_text(json.dumps(schema_to_json(columns)))
            log.info(
                "lake sink %s: %s has the columns %s now; its query starts again",
                self.settings.connector,
                topic,
                ", ".join(f.name for f in columns.fields),
            )
            learnt = True
        return learnt

    def stop(self) -> None:
        pass


def read_schema(path: Path) -> Schema:
    """The columns a topic's query learnt before (none at first)."""
    try:
        return schema_from_json(json.loads(path.read_text()))
    except (OSError, ValueError):
        return Schema.struct([])


class SchemaChanged(ConnectException):
    """Records with fields the query's columns lack: the message carries the union."""


class FieldTypeConflict(ConnectException):
    """A field whose type differs from its column's: the task fails."""


@dataclass
class RecordDecoder:
    """Records to rows of the query's columns (runs on the executors, in ``mapInArrow``)."""

    settings: LakeSettings
    converter: Converter
    topic: str
    columns: Schema
    _known: dict[Any, bool] = field(default_factory=dict, repr=False)
    _schemas: dict[bytes, Schema | None] = field(default_factory=dict, repr=False)
    _fits: dict[int, tuple[Schema, bool]] = field(default_factory=dict, repr=False)
    _plain: dict[int, tuple[Schema, list[str] | None]] = field(default_factory=dict, repr=False)

    def spark_schema(self) -> StructType:
        from pyspark.sql.types import IntegerType, StringType, StructField, StructType

        fields = [StructField(f.name, spark_type(f.schema), True) for f in self.columns.fields]
        if not fields:  # none learnt yet: the first record fails the batch with its own
            fields.append(StructField(PLACEHOLDER_COLUMN, StringType(), True))
        names = {f.name for f in self.columns.fields}
        if self.settings.partitioner == DEFAULT:
            fields.append(StructField("partition", IntegerType(), True))
        elif self.settings.partitioner == FIELD:
            for name in self.settings.fields:
                if name not in names:  # not seen yet: a string column until it is
                    fields.append(StructField(name, StringType(), True))
        else:
            fields += [StructField(c.name, StringType(), True) for c in self.settings.time_columns]
        return StructType(fields)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.spark_schema(), timezone="UTC")
        partition_names = set(self.settings.partition_columns())
        for arrow in batches:
            columns = arrow.to_pydict()
            rows: list[dict[str, Any]] = []
            for value, partition, offset, timestamp in zip(
                columns["value"],
                columns["partition"],
                columns["offset"],
                columns["timestamp"],
                strict=True,
            ):
                where = f"{self.topic}-{partition} at offset {offset}"
                schema, data = self.decode(value, where)
                if schema is None:
                    continue
                if not self.fits(schema):  # at once: a backlog is not decoded twice
                    self.schema_changed(merge_columns(self.columns, schema, where))
                row = self.row(schema, data)
                for name in partition_names & set(row):
                    if self.settings.partitioner != FIELD:
                        raise ConnectException(
                            f"the record at {where} has a field {name}, which is also a "
                            "partition column of the lake sink's partitioner"
                        )
                self.add_partitions(row, partition, timestamp, where)
                rows.append(row)
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)

    def schema_changed(self, merged: Schema) -> NoReturn:
        """Fail the batch, carrying the columns it needs (``restart_after`` reads them)."""
        encoded = base64.b64encode(json.dumps(schema_to_json(merged)).encode()).decode()
        raise SchemaChanged(
            f"records of {self.topic} have new fields [strom-lake-schema {self.topic} {encoded}]"
        )

    def decode(self, value: bytes | None, where: str) -> tuple[Schema | None, Any]:
        """The record's columns' schema and its values (None, None: skipped)."""
        if value is None:
            if self.settings.fail_on_null:
                raise ConnectException(
                    f"the record at {where} has a null value and behavior.on.null.values=fail"
                )
            return None, None
        direct = self.decode_envelope(value)
        if direct is not None:
            return direct
        try:
            schema, data = self.converter.to_connect_data(self.topic, value)
        except Exception as exc:
            raise ConnectException(f"Conversion failed for the record at {where}: {exc}") from exc
        if data is None:
            return None, None
        if schema is not None and schema.type == STRUCT and isinstance(data, Struct):
            return schema, data.values
        if schema is None and isinstance(data, dict):
            inferred = Schema.struct([(str(k), _inferred(v)) for k, v in data.items()])
            return inferred, {str(k): _schemaless_value(v) for k, v in data.items()}
        if schema is None:
            schema = _inferred(data)
            data = _schemaless_value(data)
        return Schema.struct([(VALUE_COLUMN, schema)]), {VALUE_COLUMN: data}

    def decode_envelope(self, value: bytes) -> tuple[Schema, Any] | None:
        """JsonConverter's envelope read directly where its schema's values are its JSON's
        (primitive fields, Timestamp, Date, Time): the schema parsed once per distinct
        text, which is most of a record's decoding otherwise. None: the converter's."""
        converter = self.converter
        if (
            not isinstance(converter, JsonConverter)
            or not converter.schemas_enabled
            or not value.startswith(ENVELOPE_START)
            or not value.endswith(b"}")
        ):
            return None
        split = value.find(PAYLOAD_KEY)
        if split < 0:
            return None
        head = value[len(ENVELOPE_START) : split]
        if head in self._schemas:
            schema = self._schemas[head]
        else:
            try:
                schema = schema_from_json(json.loads(head))
            except ValueError:
                schema = None
            if schema is not None and not _direct_struct(schema):
                schema = None
            self._schemas[head] = schema
        if schema is None:
            return None
        payload = json.loads(value[split + len(PAYLOAD_KEY) : -1])
        return (schema, payload) if isinstance(payload, dict) else None

    def fits(self, schema: Schema) -> bool:
        """Whether the record's fields are the query's columns, of their types: cached by
        the schema object where ``decode_envelope`` keeps it, else by its layout."""
        cached = self._fits.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        key = _layout_key(schema)
        known = self._known.get(key)
        if known is None:
            known = all(
                (column := self.columns.field(f.name)) is not None
                and spark_type(column.schema) == spark_type(f.schema)
                for f in schema.fields
            )
            self._known[key] = known
        if any(kept is schema for kept in self._schemas.values()):
            self._fits[id(schema)] = (schema, known)
        return known

    def row(self, schema: Schema, data: Mapping[str, Any]) -> dict[str, Any]:
        cached = self._plain.get(id(schema))
        if cached is not None and cached[0] is schema:
            names = cached[1]
            if names is not None:  # every value as Arrow takes it
                return {name: data.get(name) for name in names}
        elif any(kept is schema for kept in self._schemas.values()):
            plain = all(f.schema.name is None for f in schema.fields)
            self._plain[id(schema)] = (schema, [f.name for f in schema.fields] if plain else None)
        return {f.name: arrow_value(f.schema, data.get(f.name)) for f in schema.fields}

    def add_partitions(
        self, row: dict[str, Any], partition: int, timestamp: Any, where: str
    ) -> None:
        settings = self.settings
        if settings.partitioner == DEFAULT:
            row["partition"] = partition
            return
        if settings.partitioner == FIELD:
            for name in settings.fields:
                if name not in row:
                    raise ConnectException(
                        f"partition.field.name {name} is not a field of the record at {where}"
                    )
                if self.columns.field(name) is None:
                    row[name] = None if row[name] is None else str(row[name])
            return
        millis = self.record_millis(row, timestamp, where)
        bucket = millis - millis % settings.duration_ms
        moment = dt.datetime.fromtimestamp(bucket / 1000, zoneinfo.ZoneInfo(settings.timezone))
        for column in settings.time_columns:
            row[column.name] = column.format(moment)

    def record_millis(self, row: Mapping[str, Any], timestamp: Any, where: str) -> int:
        extractor = self.settings.extractor
        if extractor == WALLCLOCK:
            return int(time.time() * 1000)
        if extractor == RECORD:
            value = timestamp
        else:
            name = self.settings.timestamp_field
            if name not in row or row[name] is None:
                raise ConnectException(
                    f"timestamp.field {name} is missing or null in the record at {where}"
                )
            value = row[name]
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value)
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=dt.UTC)
                return int(parsed.timestamp() * 1000)
        raise ConnectException(f"the record at {where} has no time the partitioner can read")


def _direct_struct(schema: Schema) -> bool:
    """A struct whose fields' JSON values are their Connect values as they are: primitive
    but bytes, plain or Timestamp, Date, Time, without defaults."""
    return schema.type == STRUCT and all(
        f.schema.type in (INT8, INT16, INT32, INT64, FLOAT32, FLOAT64, BOOLEAN, STRING)
        and f.schema.name in DIRECT_LOGICAL
        and f.schema.default is None
        for f in schema.fields
    )


def _layout_key(schema: Schema | None) -> Any:
    """What decides a schema's columns' types, hashable (a cache key)."""
    if schema is None:
        return None
    return (
        schema.type,
        schema.name,
        tuple(sorted((schema.parameters or {}).items())),
        _layout_key(schema.key_schema),
        _layout_key(schema.value_schema),
        tuple((f.name, _layout_key(f.schema)) for f in schema.fields),
    )


def merge_columns(columns: Schema, schema: Schema, where: str) -> Schema:
    """The union of the columns and a record's fields (all optional); a field whose
    type differs from its column's is an error."""
    merged = list(columns.fields)
    for f in schema.fields:
        existing = columns.field(f.name)
        if existing is None:
            merged.append(Field(f.name, len(merged), _optional(f.schema)))
        elif spark_type(existing.schema) != spark_type(f.schema):
            raise FieldTypeConflict(
                f"the field {f.name} of the record at {where} is {_type_name(f.schema)}, its "
                f"column {_type_name(existing.schema)}: the lake sink writes one type per column"
            )
    return Schema.struct([(f.name, f.schema) for f in merged])


def _optional(schema: Schema) -> Schema:
    return Schema(
        schema.type,
        optional=True,
        name=schema.name,
        parameters=schema.parameters,
        fields=schema.fields,
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
    )


def _type_name(schema: Schema) -> str:
    return (schema.name or schema.type).rsplit(".", 1)[-1].lower()


def _inferred(value: Any) -> Schema:
    """A schemaless JSON value's column: booleans, integers (int64), numbers (float64);
    strings, and objects and arrays as JSON text."""
    if isinstance(value, bool):
        return Schema(BOOLEAN, optional=True)
    if isinstance(value, int):
        return Schema(INT64, optional=True)
    if isinstance(value, float):
        return Schema(FLOAT64, optional=True)
    return Schema(STRING, optional=True)


def _schemaless_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return json.dumps(value, separators=(",", ":"), default=str)


def spark_type(schema: Schema) -> DataType:
    """The Spark column type of a Connect schema."""
    from pyspark.sql import types as T

    if schema.name == DECIMAL:
        parameters = schema.parameters or {}
        scale = int(parameters.get("scale", "0"))
        precision = int(parameters.get("connect.decimal.precision", "38"))
        return T.DecimalType(min(38, max(precision, scale, 1)), min(scale, 38))
    if schema.name == TIMESTAMP:
        return T.TimestampType()
    if schema.name == DATE:
        return T.DateType()
    if schema.name == TIME:
        return T.IntegerType()  # milliseconds of the day, as Connect holds a Time
    simple: dict[str, DataType] = {
        INT8: T.ByteType(),
        INT16: T.ShortType(),
        INT32: T.IntegerType(),
        INT64: T.LongType(),
        FLOAT32: T.FloatType(),
        FLOAT64: T.DoubleType(),
        BOOLEAN: T.BooleanType(),
        STRING: T.StringType(),
        BYTES: T.BinaryType(),
    }
    if schema.type in simple:
        return simple[schema.type]
    if schema.type == ARRAY and schema.value_schema is not None:
        return T.ArrayType(spark_type(schema.value_schema), True)
    if schema.type == MAP and schema.key_schema is not None and schema.value_schema is not None:
        return T.MapType(spark_type(schema.key_schema), spark_type(schema.value_schema), True)
    if schema.type == STRUCT:
        return T.StructType(
            [T.StructField(f.name, spark_type(f.schema), True) for f in schema.fields]
        )
    raise ConnectException(f"the lake sink has no column type for the Connect type {schema.type}")


def arrow_value(schema: Schema, value: Any) -> Any:
    """A Connect value as its Arrow column takes it (Timestamp and Date from numbers,
    structs as dicts)."""
    if value is None:
        return None
    if schema.name == TIMESTAMP and isinstance(value, int | float):
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=value)
    if schema.name == DATE and isinstance(value, int):
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if schema.type == STRUCT:
        values = value.values if isinstance(value, Struct) else value
        return {f.name: arrow_value(f.schema, values.get(f.name)) for f in schema.fields}
    if schema.type == ARRAY and schema.value_schema is not None:
        return [arrow_value(schema.value_schema, item) for item in value]
    if schema.type == MAP and schema.value_schema is not None:
        element = schema.value_schema
        return [(k, arrow_value(element, v)) for k, v in dict(value).items()]
    return value


def committed_batches(table: Path) -> list[int]:
    """The batch ids in a directory's ``_spark_metadata`` log."""
    log_dir = table / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    found = []
    for entry in log_dir.iterdir():
        name = entry.name.removesuffix(".compact")
        if name.isdigit():
            found.append(int(name))
    return sorted(found)


def committed_files(table: Path) -> list[Path]:
    """The files of a lake sink directory that committed batches hold, read from its
    ``_spark_metadata`` log as Spark's reader reads it (the last compaction, then each
    batch after it): what a reader without Spark should read, and nothing else."""
    log_dir = table / "_spark_metadata"
    batches = committed_batches(table)
    if not batches:
        return []
    compacted = [b for b in batches if (log_dir / f"{b}.compact").exists()]
    start = max(compacted) if compacted else batches[0]
    names = [f"{start}.compact" if start in compacted else str(start)]
    names += [str(b) for b in batches if b > start and not (log_dir / f"{b}.compact").exists()]
    files: dict[str, bool] = {}
    for name in names:
        lines = (log_dir / name).read_text().splitlines()
        for line in lines[1:]:  # after the version line, v1
            if not line.strip():
                continue
            entry = json.loads(line)
            path = urllib.parse.unquote(urllib.parse.urlsplit(entry["path"]).path)
            files[path] = entry.get("action", "add") != "delete"
    return [Path(path) for path, kept in files.items() if kept]
