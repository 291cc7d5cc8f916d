"""The lake sink's parts that need no Spark session, broker or worker: path.format's
segments and their values in a time zone, the decoder fed the Arrow batches a micro-batch
hands it (columns from a schema, from schemaless JSON, a primitive's value column, time
partitions from a record field, a batch with new fields failing with the merged columns
which the task learns, a field changing type refused), the settings' one-line refusals,
the committed files read from a _spark_metadata log with a compaction, and a schema
registry converter shipped to the executors with the decoder."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import zoneinfo
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from strom.connect.connectors.lake_sink import (
    FieldTypeConflict,
    LakeConfigError,
    LakeSettings,
    LakeSinkConnector,
    LakeSinkTask,
    RecordDecoder,
    SchemaChanged,
    committed_files,
    time_columns,
)
from strom.connect.converters import JsonConverter, StringConverter
from strom.connect.data import Schema

EVENT = {"type": "struct", "name": "event", "optional": False, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "at", "type": "int64", "optional": False,
     "name": "org.apache.kafka.connect.data.Timestamp"},
]}  # fmt: skip
AT = 1767322800000  # 2026-01-02T03:00:00Z


def settings(tmp_path: Path, **keys: str) -> LakeSettings:
    values = LakeSinkConnector.CONFIG_DEF.parse({"path": str(tmp_path), **keys})
    return LakeSettings.of(values, "lake")


def json_converter(schemas: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": str(schemas).lower()}, is_key=False)
    return converter


def batch(values: list[Any], partition: int = 0) -> pa.RecordBatch:
    encoded = [v if isinstance(v, bytes) else json.dumps(v).encode() for v in values]
    return pa.RecordBatch.from_pydict({
        "value": encoded, "partition": [partition] * len(values),
        "offset": list(range(len(values))), "timestamp": [dt.datetime(2026, 1, 1)] * len(values),
    })  # fmt: skip


def rows(decoder: RecordDecoder, values: list[Any]) -> list[dict[str, Any]]:
    return [row for out in decoder([batch(values)]) for row in out.to_pylist()]


def learnt(tmp_path: Path, decoder: RecordDecoder, values: list[Any]) -> Schema:
    """The columns a failed batch carries, as the task learns them."""
    with pytest.raises(SchemaChanged) as failure:
        rows(decoder, values)
    task = LakeSinkTask()
    task.settings = decoder.settings
    task.columns = {decoder.topic: decoder.columns}
    assert task.restart_after(f"Py4JError ... {failure.value} ...")
    assert (decoder.settings.task_dir(decoder.topic) / "schema.json").exists()
    return task.columns[decoder.topic]


def test_path_format_segments_in_a_time_zone() -> None:
    columns = time_columns("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH/'min'=mm")
    assert [c.name for c in columns] == ["year", "month", "day", "hour", "min"]
    moment = dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC).astimezone(
        zoneinfo.ZoneInfo("Asia/Kolkata")
    )
    assert [c.format(moment) for c in columns] == ["2026", "01", "02", "08", "34"]
    with pytest.raises(LakeConfigError, match="'name'=pattern"):
        time_columns("YYYY/MM")
    with pytest.raises(LakeConfigError, match="pattern letter 'E' is not served"):
        time_columns("'day'=EEE")


def test_columns_from_a_schema_and_time_partitions(tmp_path: Path) -> None:
    lake = settings(
        tmp_path, **{"partitioner.class": "HourlyPartitioner", "timezone": "UTC",
                     "timestamp.extractor": "RecordField", "timestamp.field": "at"}
    )  # fmt: skip
    decoder = RecordDecoder(lake, json_converter(True), "events", Schema.struct([]))
    values = [{"schema": EVENT, "payload": {"id": n, "at": AT + n * 1_800_000}} for n in range(3)]
    columns = learnt(tmp_path, decoder, values)
    assert [(f.name, f.schema.optional) for f in columns.fields] == [("id", True), ("at", True)]
    found = rows(RecordDecoder(lake, json_converter(True), "events", columns), values)
    assert [(r["id"], r["hour"], r["day"]) for r in found] == [
        (0, "03", "02"), (1, "03", "02"), (2, "04", "02")
    ]  # fmt: skip
    assert found[1]["at"] == dt.datetime(2026, 1, 2, 3, 30, tzinfo=dt.UTC)


def test_schemaless_columns_a_new_field_and_a_changed_type(tmp_path: Path) -> None:
    lake = settings(tmp_path)
    decoder = RecordDecoder(lake, json_converter(False), "plain", Schema.struct([]))
    first = [{"id": 1, "name": "a", "tags": ["x"]}]
    columns = learnt(tmp_path, decoder, first)
    decoder = RecordDecoder(lake, json_converter(False), "plain", columns)
    assert rows(decoder, first) == [{"id": 1, "name": "a", "tags": '["x"]', "partition": 0}]
    columns = learnt(tmp_path, decoder, [{"id": 2, "vip": True}])
    assert [f.name for f in columns.fields] == ["id", "name", "tags", "vip"]
    decoder = RecordDecoder(lake, json_converter(False), "plain", columns)
    with pytest.raises(FieldTypeConflict, match="the field id of the record at plain-0"):
        rows(decoder, [{"id": "three"}])


def test_a_primitive_value_is_one_column(tmp_path: Path) -> None:
    converter = StringConverter()
    converter.configure({}, is_key=False)
    decoder = RecordDecoder(settings(tmp_path), converter, "lines", Schema.struct([]))
    columns = learnt(tmp_path, decoder, [b"one line"])
    decoder = RecordDecoder(settings(tmp_path), converter, "lines", columns)
    assert rows(decoder, [b"one line"]) == [{"value": "one line", "partition": 0}]


def test_settings_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(LakeConfigError, match="local or mounted directory"):
        settings(tmp_path, **{"store.url": "s3://bucket/x"})
    with pytest.raises(LakeConfigError, match="ParquetFormat and JsonFormat are served"):
        settings(tmp_path, **{"format.class": "io.confluent.connect.hdfs.avro.AvroFormat"})
    with pytest.raises(LakeConfigError, match="positive duration"):
        settings(tmp_path, **{"partitioner.class": "TimeBasedPartitioner",
                              "path.format": "'y'=YYYY"})  # fmt: skip
    found = settings(Path("/unused"), **{"path": "", "store.url": f"file://{tmp_path}/a%20b"})
    assert found.table_dir("t") == tmp_path / "a b" / "topics" / "t"
    assert found.task_dir("t") == tmp_path / "a b" / "logs" / "t" / "lake"


def test_committed_files_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "_spark_metadata"
    log.mkdir()

    def entry(name: str, action: str = "add") -> str:
        return json.dumps({"path": f"file://{tmp_path}/partition=0/{name}", "action": action})

    (log / "0").write_text("v1\n" + entry("old-0.parquet"))  # compacted away
    (log / "1.compact").write_text("v1\n" + entry("a.parquet") + "\n" + entry("b.parquet"))
    (log / "2").write_text("v1\n" + entry("c.parquet") + "\n" + entry("a.parquet", "delete"))
    (log / ".3.tmp").write_text("v1\n" + entry("uncommitted.parquet"))
    assert committed_files(tmp_path) == [
        tmp_path / "partition=0" / "b.parquet", tmp_path / "partition=0" / "c.parquet"
    ]  # fmt: skip
    assert committed_files(tmp_path / "absent") == []


def test_a_registry_converter_travels_to_the_executors(tmp_path: Path) -> None:
    """The AvroConverter's registry client does not pickle; the decoder Spark ships to its
    executors carries it as its settings and gets it made again there."""
    from pyspark import cloudpickle

    from strom.connect.avro_converter import AvroConverter
    from strom.connect.connector_config import make_converter
    from strom.connect.plugins import Plugins
    from strom.connect.spark_runner import shippable

    props = {"value.converter": "io.confluent.connect.avro.AvroConverter",
             "value.converter.schema.registry.url": "https://registry.invalid:8081"}  # fmt: skip
    converter = make_converter("value", props, {}, Plugins.builtin())
    with pytest.raises(TypeError):
        cloudpickle.dumps(converter)
    decoder = RecordDecoder(settings(tmp_path), shippable(converter, "value", props, {}), "t",
                            Schema.struct([]))  # fmt: skip
    shipped = pickle.loads(cloudpickle.dumps(decoder))
    assert isinstance(shipped.converter, AvroConverter)
    assert shipped.converter.settings["schema.registry.url"] == "https://registry.invalid:8081"
    assert pickle.loads(cloudpickle.dumps(shipped)).converter is not shipped.converter
