"""Kafka Connect's parts that need no broker: the worker's properties (Kafka's names,
defaults and messages), the converters (JsonConverter's envelope as Kafka writes it,
StringConverter, ByteArrayConverter), connector validation, the plugin names, the
FileStream source's lines and offsets, and the sample files under config/."""

from __future__ import annotations

import base64
import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from strom.cli.properties_file import read_properties_file
from strom.config import ConfigError
from strom.connect import connector_config
from strom.connect.api import OffsetStorageReader, SourceTaskContext
from strom.connect.connectors.file_stream import FileStreamSourceTask, render_line
from strom.connect.converters import (
    ENVELOPE_HINT,
    ByteArrayConverter,
    JsonConverter,
    StringConverter,
    schema_from_json,
    schema_to_json,
)
from strom.connect.data import (
    BYTES,
    DATE,
    DECIMAL,
    INT8,
    INT32_SCHEMA,
    INT64,
    OPTIONAL_STRING_SCHEMA,
    STRING,
    STRING_SCHEMA,
    DataException,
    Schema,
    SchemaAndValue,
    Struct,
)
from strom.connect.errors import ConsumedMessage
from strom.connect.plugins import Plugins
from strom.connect.record_path import RecordPath
from strom.connect.stores import TopicStatus, TopicStatusStore, offset_key
from strom.connect.worker_config import DISTRIBUTED, STANDALONE, WorkerConfig

CONFIG = Path(__file__).resolve().parents[2] / "config"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
CONVERTERS = {
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
}
DISTRIBUTED_BASE = {
    **CONVERTERS,
    "group.id": "g",
    "config.storage.topic": "c",
    "offset.storage.topic": "o",
    "status.storage.topic": "s",
}


def worker(mode: str = DISTRIBUTED, **props: str) -> WorkerConfig:
    base = (
        DISTRIBUTED_BASE
        if mode == DISTRIBUTED
        else {**CONVERTERS, "offset.storage.file.filename": "/tmp/o"}
    )
    return WorkerConfig({**base, **{k.replace("_", "."): v for k, v in props.items()}}, mode)


def test_worker_defaults_are_kafkas() -> None:
    config = worker()
    assert config["bootstrap.servers"] == ["localhost:9092"]
    assert config["offset.flush.interval.ms"] == 60000
    assert config["offset.storage.partitions"] == 25 and config["status.storage.partitions"] == 5
    assert config["config.storage.replication.factor"] == 3
    assert config.listener.host == "127.0.0.1" and config.listener.port == 8083
    assert config.advertised_url(8083) == "http://127.0.0.1:8083"
    assert config["topic.tracking.enable"] is True
    assert config["topic.tracking.allow.reset"] is True


RF_RULE = "Replication factor must be positive or -1 to use the broker's default"
PARTITIONS_RULE = "Number of partitions must be positive, or -1 to use the broker's default"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"offset.flush.interval.ms": "soon"},
            "Invalid value soon for configuration offset.flush.interval.ms: "
            "Not a number of type LONG",
        ),
        (
            {"config.storage.replication.factor": "0"},
            f"Invalid value 0 for configuration config.storage.replication.factor: {RF_RULE}",
        ),
        (
            {"offset.storage.partitions": "0"},
            f"Invalid value 0 for configuration offset.storage.partitions: {PARTITIONS_RULE}",
        ),
        ({"listeners": "ftp://x:1"}, "configuration listeners"),
        (
            {"value.converter": "com.example.MadeUpConverter"},
            "Class com.example.MadeUpConverter could not be found.",
        ),
        (
            {"exactly.once.source.support": "sometimes"},
            "Invalid value sometimes for configuration exactly.once.source.support",
        ),
        ({"group.id": ""}, "Invalid value  for configuration group.id: String must be non-empty"),
        (
            {"topic.tracking.enable": "maybe"},
            "Invalid value maybe for configuration topic.tracking.enable: "
            "Expected value to be either true or false",
        ),
    ],
)
def test_worker_refuses_bad_values_in_kafkas_words(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        WorkerConfig({**DISTRIBUTED_BASE, **props}, DISTRIBUTED)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_worker_required_keys_per_mode() -> None:
    with pytest.raises(ConfigError, match='Missing required configuration "group.id"'):
        WorkerConfig(CONVERTERS, DISTRIBUTED)
    with pytest.raises(ConfigError, match='"offset.storage.file.filename"'):
        WorkerConfig(CONVERTERS, STANDALONE)
    with pytest.raises(ConfigError, match='"key.converter"'):
        WorkerConfig({"offset.storage.file.filename": "/o"}, STANDALONE)


def test_worker_client_settings_and_notes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        config = worker(
            **{
                "bootstrap.servers": "a:1, b:2",
                "plugin.path": "/opt/connectors",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f"{PLAIN_MODULE} required username=\"u\" password=\"p\";",
                "producer.linger.ms": "20",
                "rest.advertised.host.name": "connect-1",
                "no.such.setting": "x",
            }
        )  # fmt: skip
    assert "plugin.path is ignored" in caplog.text
    assert "unknown worker settings, not used: no.such.setting" in caplog.text
    producer = config.client_settings("producer")
    assert producer["bootstrap.servers"] == "a:1,b:2"
    assert producer["sasl.username"] == "u" and producer["sasl.password"] == "p"
    assert producer["linger.ms"] == "20"
    assert "linger.ms" not in config.client_settings("consumer")
    assert config.advertised_url(9000) == "http://connect-1:9000"


def test_json_converter_envelope_as_kafka_writes_it() -> None:
    converter = JsonConverter()
    converter.configure({}, is_key=False)
    schema = Schema.struct(
        [("id", INT32_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA), ("raw", Schema(BYTES))],
        name="row",
    )
    value = Struct(schema, {"id": 7, "name": None, "raw": b"\x00\x01"})
    data = converter.from_connect_data("t", schema, value)
    assert data == (
        b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},'
        b'{"type":"string","optional":true,"field":"name"},{"type":"bytes","optional":false,'
        b'"field":"raw"}],"optional":false,"name":"row"},"payload":{"id":7,"name":null,'
        b'"raw":"AAE="}}'
    )
    back_schema, back = converter.to_connect_data("t", data)
    assert back_schema == schema and back == value
    assert converter.from_connect_data("t", STRING_SCHEMA, "hi") == (
        b'{"schema":{"type":"string","optional":false},"payload":"hi"}'
    )
    assert converter.from_connect_data("t", None, None) is None
    assert converter.to_connect_data("t", None) == (None, None)


def test_json_converter_maps_arrays_and_logical_types() -> None:
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, is_key=True)
    by_number = Schema.map(INT32_SCHEMA, STRING_SCHEMA)
    data = converter.from_connect_data("t", by_number, {1: "a"})
    assert json.loads(data)["payload"] == [[1, "a"]]
    assert converter.to_connect_data("t", data) == (by_number, {1: "a"})
    decimal = Schema(BYTES, name=DECIMAL, parameters={"scale": "2"})
    encoded = json.loads(converter.from_connect_data("t", decimal, Decimal("-1.25")))
    assert base64.b64decode(encoded["payload"]) == (-125).to_bytes(1, "big", signed=True)
    assert converter.to_connect_data("t", json.dumps(encoded).encode())[1] == Decimal("-1.25")
    date = Schema("int32", name=DATE, version=1)
    assert schema_from_json(schema_to_json(date)) == date
    array = Schema.array(Schema(INT64))
    assert converter.to_connect_data("t", converter.from_connect_data("t", array, [1, 2]))[1] == [
        1,
        2,
    ]


def test_json_converter_without_schemas_and_its_errors() -> None:
    plain = JsonConverter()
    plain.configure({"schemas.enable": "false"}, is_key=False)
    assert plain.from_connect_data("t", None, {"a": [1, True]}) == b'{"a":[1,true]}'
    assert plain.to_connect_data("t", b'{"a":1}') == (None, {"a": 1})
    enveloped = JsonConverter()
    enveloped.configure({}, is_key=False)
    with pytest.raises(DataException) as caught:
        enveloped.to_connect_data("t", b'{"a":1}')
    assert str(caught.value) == ENVELOPE_HINT
    with pytest.raises(DataException, match="serialization error"):
        enveloped.to_connect_data("t", b"{nope")
    with pytest.raises(DataException, match="null value for field that is required"):
        enveloped.from_connect_data("t", STRING_SCHEMA, None)
    with pytest.raises(ConfigError, match="Expected value to be either true or false"):
        JsonConverter().configure({"schemas.enable": "maybe"}, is_key=False)


def test_string_and_byte_array_converters() -> None:
    strings = StringConverter()
    strings.configure({}, is_key=False)
    assert strings.from_connect_data("t", None, True) == b"true"
    assert strings.from_connect_data("t", STRING_SCHEMA, "é") == "é".encode()
    assert strings.to_connect_data("t", b"x") == (OPTIONAL_STRING_SCHEMA, "x")
    latin = StringConverter()
    latin.configure({"converter.encoding": "latin-1"}, is_key=True)
    assert latin.from_connect_data("t", None, "é") == b"\xe9"
    raw = ByteArrayConverter()
    raw.configure({}, is_key=False)
    assert raw.from_connect_data("t", None, b"\x00") == b"\x00"
    with pytest.raises(DataException, match="not compatible with objects of type str"):
        raw.from_connect_data("t", None, "text")
    with pytest.raises(DataException, match="Invalid schema type for ByteArrayConverter: STRING"):
        raw.from_connect_data("t", STRING_SCHEMA, b"x")


def test_plugin_names_and_aliases() -> None:
    plugins = Plugins.builtin()
    source = plugins.connector("org.apache.kafka.connect.file.FileStreamSourceConnector")
    for alias in ("FileStreamSource", "FileStreamSourceConnector", source.name):
        assert plugins.connector(alias) is source
    assert plugins.converter("Json") is plugins.converter(
        "org.apache.kafka.connect.json.JsonConverter"
    )
    assert plugins.find("FileStreamSource", ("converter",)) is None


def test_connector_validation_in_kafkas_shape() -> None:
    plugins = Plugins.builtin()
    props = {
        "name": "s",
        "connector.class": "FileStreamSink",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "perhaps",
        "errors.tolerance": "some",
        "topic.creation.default.partitions": "3",
    }
    infos = connector_config.validate(props, plugins)
    errors = {
        c["value"]["name"]: c["value"]["errors"] for c in infos["configs"] if c["value"]["errors"]
    }
    assert set(errors) == {
        "topics",
        "topics.regex",
        "value.converter.schemas.enable",
        "errors.tolerance",
        "topic.creation.default.partitions",
    }
    assert errors["topics"] == ["Must configure one of topics or topics.regex"]
    assert errors["errors.tolerance"] == [
        "Invalid value some for configuration errors.tolerance: String must be one of: none, all"
    ]
    assert infos["error_count"] == 5
    message = connector_config.invalid_config_message(infos)
    assert message.startswith(
        "Connector configuration is invalid and contains the following 5 error(s):"
    )
    with pytest.raises(connector_config.InvalidConnectorConfig, match="contains no connector type"):
        connector_config.validate({"name": "x"}, plugins)
    exactly_once = {
        "name": "s",
        "connector.class": "FileStreamSource",
        "topic": "t",
        "exactly.once.support": "required",
    }
    assert connector_config.errors_of(connector_config.validate(exactly_once, plugins)) == [
        "This worker does not have exactly-once source support enabled."
    ]
    enabled = connector_config.validate(exactly_once, plugins, exactly_once_source=True)
    assert connector_config.errors_of(enabled) == []
    jdbc = {**exactly_once, "connector.class": "JdbcSource", "connection.url": "jdbc:sqlite:x"}
    # on Spark each poll is a transaction with its offsets: the JDBC source supports it
    assert "exactly-once" not in " ".join(
        connector_config.errors_of(connector_config.validate(jdbc, plugins, True))
    )
    own_boundaries = {**exactly_once, "transaction.boundary": "connector"}
    assert connector_config.errors_of(connector_config.validate(own_boundaries, plugins, True)) == [
        "The connector does not support connector-defined transaction boundaries with the "
        "given configuration."
    ]
    interval = {**exactly_once, "transaction.boundary": "interval"}
    timed = {**interval, "transaction.boundary.interval.ms": "250"}
    assert connector_config.errors_of(connector_config.validate(timed, plugins, True)) == []
    negative = {**interval, "transaction.boundary.interval.ms": "-1"}
    assert connector_config.errors_of(connector_config.validate(negative, plugins, True)) == [
        "Invalid value -1 for configuration transaction.boundary.interval.ms: "
        "Value must be at least 0"
    ]


def test_exactly_once_source_support_needs_a_distributed_worker() -> None:
    with pytest.raises(ConfigError, match="needs a distributed worker"):
        WorkerConfig(
            {**CONVERTERS, "offset.storage.file.filename": "/tmp/x", **EXACTLY_ONCE}, STANDALONE
        )
    assert WorkerConfig({**DISTRIBUTED_BASE, **EXACTLY_ONCE}, DISTRIBUTED).exactly_once_source


EXACTLY_ONCE = {"exactly.once.source.support": "enabled"}


class _Offsets(OffsetStorageReader):
    def __init__(self, offsets: dict[str, Any]) -> None:
        self.offsets = offsets

    def offset(self, partition: Any) -> dict[str, Any] | None:
        return self.offsets.get(partition["filename"])


def test_file_source_lines_offsets_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes("a\nb\r\nc\rdé\npartial".encode())

    def task(offsets: dict[str, Any]) -> FileStreamSourceTask:
        config = {"file": str(path), "topic": "t", "batch.size": "2"}
        made = FileStreamSourceTask()
        made.initialize(SourceTaskContext(config, _Offsets(offsets)))
        made.start(config)
        return made

    reader = task({})
    first, second = reader.poll(), reader.poll()
    assert [r.value for r in first + second] == ["a", "b", "c", "dé"]
    assert [r.source_offset for r in first + second] == [
        {"position": 2}, {"position": 5}, {"position": 7}, {"position": 11},
    ]  # fmt: skip
    assert first[0].source_partition == {"filename": str(path)} and first[0].key is None
    assert reader.poll() == []  # "partial" waits for its end
    with path.open("ab") as handle:
        handle.write(b" line\n")
    assert [r.value for r in reader.poll()] == ["partial line"]
    resumed = task({str(path): {"position": 7}})
    assert [r.value for r in resumed.poll()] == ["dé", "partial line"]
    assert render_line({"a": 1}) == '{"a":1}' and render_line(None) == "null"


def test_offset_keys_are_kafkas() -> None:
    assert offset_key("src", {"filename": "/f"}) == b'["src",{"filename":"/f"}]'


def test_active_topic_records_are_kafkas() -> None:
    """KIP-558's records in the status topic, as a Kafka Connect worker writes them (its
    internal JsonConverter, no schemas): read into the connector's active topics, a
    tombstone removing one, and written back alike."""
    store = TopicStatusStore({"bootstrap.servers": "127.0.0.1:9", "log_level": 0}, "status", 1, 1)
    kafkas = b'{"topic":{"name":"foo","connector":"some-source","task":0,"discoverTimestamp":15}}'
    store._apply(b"status-topic-foo:connector-some-source", kafkas)
    store._apply(b"status-topic-bar:connector-some-source", kafkas.replace(b'"foo"', b'"bar"'))
    store._apply(b"status-topic-foo:connector-other:connector-x", kafkas)  # a name with ':'
    assert [t.topic for t in store.connector_topics("some-source")] == ["bar", "foo"]
    assert store.topic("some-source", "foo") == TopicStatus("foo", "some-source", 0, 15)
    assert store.topic("other:connector-x", "foo") is not None
    store._apply(b"status-topic-foo:connector-some-source", None)
    assert [t.topic for t in store.connector_topics("some-source")] == ["bar"]
    for bad in (b"status-topic-:connector-c", b"status-topic-foo", b"status-topic-foo:connector-"):
        store._apply(bad, kafkas)
    assert set(store.topics) == {"some-source", "other:connector-x"}
    assert json.dumps(
        TopicStatus("foo", "some-source", 0, 15).document(), separators=(",", ":")
    ) == (kafkas.decode())


def test_a_spark_sink_batch_s_topics_are_those_it_moved() -> None:
    from strom.connect.spark_runner import _moved_topics

    first = {"a": {"0": 5, "1": 0}, "b": {"0": 0}}
    assert _moved_topics(None, first) == ["a"]
    assert _moved_topics(json.dumps(first), {"a": {"0": 5, "1": 0}, "b": {"0": 2}}) == ["b"]
    assert _moved_topics(json.dumps(first), {**first, "c": {"0": 1}}) == ["c"]


def test_connect_samples_load() -> None:
    standalone = WorkerConfig(
        read_properties_file(str(CONFIG / "connect-standalone.properties")), STANDALONE
    )
    assert standalone.listener.port == 8083
    distributed = WorkerConfig(
        read_properties_file(str(CONFIG / "connect-distributed.properties")), DISTRIBUTED
    )
    assert distributed["group.id"] == "connect-cluster"
    plugins = Plugins.builtin()
    for name in ("connect-file-source.properties", "connect-file-sink.properties"):
        props = read_properties_file(str(CONFIG / name))
        assert connector_config.validate(props, plugins)["error_count"] == 0, name


def test_a_source_connectors_topic_creation_settings_are_validated_as_kafka_enriches_them() -> None:
    plugins = Plugins.builtin()
    source = {"name": "s", "connector.class": "FileStreamSource", "topic": "t"}
    assert connector_config.errors_of(connector_config.validate(source, plugins)) == []
    grouped = {
        **source,
        "topic.creation.groups": "compacted",
        "topic.creation.default.replication.factor": "-1",
        "topic.creation.default.partitions": "0",
        "topic.creation.compacted.include": "(",
        "topic.creation.compacted.cleanup.policy": "compact",
        "topic.creation.other.partitions": "2",
    }
    infos = connector_config.validate(grouped, plugins)
    assert "Topic Creation" in infos["groups"]
    errors = connector_config.errors_of(infos)
    assert len(errors) == 3
    assert errors[0].startswith(
        "Invalid value 0 for configuration topic.creation.default.partitions"
    )
    assert "topic.creation.compacted.include: not a valid regular expression" in errors[1]
    assert "the group other is not among topic.creation.groups=compacted" in errors[2]
    on_spark = {
        "name": "j",
        "connector.class": "JdbcSource",
        "connection.url": "jdbc:sqlite:x",
        "topic.prefix": "x",
        "mode": "bulk",
        "topic.creation.default.partitions": "1",
    }
    # a source on Spark creates its topics by the groups too: validated as any source's
    assert connector_config.errors_of(connector_config.validate(on_spark, plugins)) == [
        'Missing required configuration "topic.creation.default.replication.factor" which has '
        "no default value."
    ]
    missing = {**source, "topic.creation.groups": ""}
    assert connector_config.errors_of(connector_config.validate(missing, plugins)) == [
        'Missing required configuration "topic.creation.default.replication.factor" which has '
        "no default value.",
        'Missing required configuration "topic.creation.default.partitions" which has no '
        "default value.",
    ]


def test_header_converters_of_the_worker_and_the_connector() -> None:
    plugins = Plugins.builtin()
    with pytest.raises(ConfigError, match="Class Bogus could not be found: the header converters"):
        WorkerConfig({**DISTRIBUTED_BASE, "header.converter": "Bogus"}, DISTRIBUTED)
    sink = {"name": "s", "connector.class": "FileStreamSink", "topics": "t", "file": "/tmp/x"}
    refused = connector_config.validate({**sink, "header.converter": "AvroConverter"}, plugins)
    assert connector_config.errors_of(refused)[0].startswith(
        "Invalid value AvroConverter for configuration header.converter: Class AvroConverter "
        "could not be found"
    )
    consumed = ConsumedMessage(
        "t", 0, 5, None, b'{"schema":null,"payload":1}', None, "CreateTime", [("n", b'{"a":1}')]
    )
    simple = RecordPath.for_task(("s", 0), sink, CONVERTERS, plugins).sink_record(consumed)
    assert simple is not None
    assert simple.headers == [
        ("n", SchemaAndValue(Schema.map(Schema(STRING), Schema(INT8)), {"a": 1}))
    ]
    as_json = {
        **sink,
        "header.converter": "JsonConverter",
        "header.converter.schemas.enable": "false",
    }
    path = RecordPath.for_task(("s", 0), as_json, CONVERTERS, plugins)
    record = path.sink_record(consumed)
    assert record is not None and record.headers == [("n", SchemaAndValue(None, {"a": 1}))]
    assert path.written_headers("t", [("n", SchemaAndValue(None, [1])), ("raw", b"\x00")]) == [
        ("n", b"[1]"),
        ("raw", b"\x00"),  # a header already bytes passes as it is
    ]
