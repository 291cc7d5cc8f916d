"""Kafka Connect's single message transforms, predicates and error handling, without a
broker: every transform on schemaful (Struct) and schemaless (dict) records with Kafka's
documented examples and messages, the predicates and a chain with ``predicate`` and
``negate``, ``/config/validate`` of transform and predicate keys, retries with backoff
and tolerance, the log reporter's line, the dead letter queue's context headers, and
the record path of a sink and a source task.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from strom.config import ConfigError
from strom.connect import connector_config
from strom.connect import errors as errs
from strom.connect.api import ConnectException, RetriableException, SinkRecord, SourceRecord
from strom.connect.converters import JsonConverter, SimpleHeaderConverter, StringConverter
from strom.connect.data import (
    DATE,
    INT8,
    INT32,
    INT64,
    OPTIONAL_STRING_SCHEMA,
    STRING,
    STRING_SCHEMA,
    TIMESTAMP,
    DataException,
    Schema,
    SchemaAndValue,
    Struct,
)
from strom.connect.plugins import Plugins
from strom.connect.record_path import RecordPath
from strom.connect.transforms import casts, fields, predicates, routing
from strom.connect.transforms.base import Transformation
from strom.connect.transforms.chain import apply_all, build_stages
from strom.connect.transforms.java_dates import JavaDateFormat

PLUGINS = Plugins.builtin()
PERSON = Schema.struct(
    [("name", STRING_SCHEMA), ("age", Schema(INT32)), ("city", OPTIONAL_STRING_SCHEMA)],
    name="person",
)


def sink(value: Any, schema: Schema | None = None, **extra: Any) -> SinkRecord:
    base: dict[str, Any] = {
        "topic": "orders",
        "kafka_partition": 2,
        "key_schema": None,
        "key": None,
        "value_schema": schema,
        "value": value,
        "kafka_offset": 7,
        "timestamp": 1_700_000_000_123,
    }
    return SinkRecord(**(base | extra))


def source(value: Any, schema: Schema | None = None, **extra: Any) -> SourceRecord:
    base: dict[str, Any] = {"topic": "orders", "value_schema": schema, "value": value}
    return SourceRecord(None, None, **(base | extra))


def made(cls: type[Transformation], **props: str) -> Transformation:
    transformation = cls()
    transformation.configure(props)
    return transformation


def person(name: str = "Ada", age: int = 36, city: str | None = "London") -> Struct:
    return Struct(PERSON, {"name": name, "age": age, "city": city})


def out(transformation: Transformation, record: Any) -> Any:
    result = transformation.apply(record)
    assert result is not None
    return result


# InsertField


def test_insert_field_schemaless_and_schemaful() -> None:
    insert = made(
        fields.InsertFieldValue,
        **{
            "static.field": "MessageSource",
            "static.value": "Kafka Connect framework",
            "topic.field": "topic!",
            "partition.field": "partition",
            "offset.field": "offset",
            "timestamp.field": "ts",
        },
    )
    plain = out(insert, sink({"id": 1})).value
    assert plain == {
        "id": 1,
        "MessageSource": "Kafka Connect framework",
        "topic": "orders",
        "partition": 2,
        "offset": 7,
        "ts": 1_700_000_000_123,
    }
    record = out(insert, sink(person(), PERSON))
    schema = record.value_schema
    assert schema.name == "person"
    assert [f.name for f in schema.fields][-5:] == [
        "topic",
        "partition",
        "offset",
        "ts",
        "MessageSource",
    ]
    assert schema.field("topic").schema.optional is False  # "topic!"
    assert schema.field("partition").schema == Schema(INT32, optional=True)
    assert schema.field("ts").schema.name == TIMESTAMP
    assert record.value.get("offset") == 7 and record.value.get("name") == "Ada"
    assert insert.apply(sink(None)) == sink(None)  # a tombstone passes


def test_insert_field_messages() -> None:
    with pytest.raises(ConfigError, match="^No field insertion configured$"):
        made(fields.InsertFieldValue)
    with pytest.raises(ConfigError, match="No value specified for static field: source"):
        made(fields.InsertFieldValue, **{"static.field": "source"})
    insert = made(fields.InsertFieldValue, **{"offset.field": "offset"})
    with pytest.raises(DataException, match=r"Only SinkRecord supported for \[field insertion\]"):
        insert.apply(source({"a": 1}))
    with pytest.raises(DataException, match=r"Only Map objects supported in absence of schema"):
        insert.apply(sink("text"))
    key = made(fields.InsertFieldKey, **{"topic.field": "t"})
    assert out(key, sink(1, key_schema=None, key={"k": 1})).key == {"k": 1, "t": "orders"}


# ReplaceField


def test_replace_field_include_exclude_renames() -> None:
    value = {"name": "Ada", "age": 36, "city": "London"}
    exclude = made(fields.ReplaceFieldValue, exclude="city", renames="name:full_name,age:years")
    assert out(exclude, sink(value)).value == {"full_name": "Ada", "years": 36}
    include = made(fields.ReplaceFieldValue, include="name,city")
    assert out(include, sink(value)).value == {"name": "Ada", "city": "London"}
    record = out(exclude, sink(person(), PERSON))
    assert [f.name for f in record.value_schema.fields] == ["full_name", "years"]
    assert record.value.values == {"full_name": "Ada", "years": 36}
    with pytest.raises(ConfigError, match="Invalid rename mapping: broken"):
        made(fields.ReplaceFieldValue, renames="a:b,broken")


# MaskField


def test_mask_field() -> None:
    mask = made(fields.MaskFieldValue, fields="name,age,tags,ok")
    masked = out(mask, sink({"name": "Ada", "age": 36, "tags": ["a"], "ok": True, "x": 1})).value
    assert masked == {"name": "", "age": 0, "tags": [], "ok": False, "x": 1}
    record = out(mask, sink(person(), PERSON))
    assert record.value.values == {"name": "", "age": 0, "city": "London"}
    replaced = made(fields.MaskFieldValue, fields="age", replacement="99")
    assert out(replaced, sink({"age": 36})).value == {"age": 99}
    with pytest.raises(DataException, match="Unable to convert x"):
        made(fields.MaskFieldValue, fields="age", replacement="x").apply(sink({"age": 1}))
    with pytest.raises(
        ConfigError, match=r"Invalid value \[\] for configuration fields: Empty list"
    ):
        made(fields.MaskFieldValue, fields="")


# ValueToKey, ExtractField, HoistField


def test_value_to_key_then_extract_field() -> None:
    value_to_key = made(fields.ValueToKey, fields="name,age")
    keyed = out(value_to_key, sink({"name": "Ada", "age": 36, "city": "London"}))
    assert keyed.key == {"name": "Ada", "age": 36} and keyed.key_schema is None
    schemaful = out(value_to_key, sink(person(), PERSON))
    assert [f.name for f in schemaful.key_schema.fields] == ["name", "age"]
    assert schemaful.key.values == {"name": "Ada", "age": 36}
    with pytest.raises(DataException, match="Field does not exist: nope"):
        made(fields.ValueToKey, fields="nope").apply(sink(person(), PERSON))
    extract = made(fields.ExtractFieldKey, field="name")
    assert out(extract, keyed).key == "Ada"
    extracted = out(extract, schemaful)
    assert extracted.key == "Ada" and extracted.key_schema == STRING_SCHEMA
    with pytest.raises(ValueError, match="Unknown field: nope"):
        made(fields.ExtractFieldValue, field="nope").apply(sink(person(), PERSON))


def test_extract_field_nested_v2() -> None:
    value = {"a.b": {"c": 1}, "a": {"b": 2}}
    v2 = made(fields.ExtractFieldValue, field="`a.b`.c", **{"field.syntax.version": "v2"})
    assert out(v2, sink(value)).value == 1
    assert out(made(fields.ExtractFieldValue, field="a.b"), sink(value)).value == {"c": 1}
    nested = made(fields.ExtractFieldValue, field="a.b", **{"field.syntax.version": "V2"})
    assert out(nested, sink(value)).value == 2
    assert out(nested, sink(None)).value is None


def test_hoist_field() -> None:
    hoist = made(fields.HoistFieldValue, field="line")
    assert out(hoist, sink(42)).value == {"line": 42}
    record = out(hoist, sink("hello", STRING_SCHEMA))
    assert record.value_schema == Schema.struct([("line", STRING_SCHEMA)])
    assert record.value.get("line") == "hello"


# Flatten


def test_flatten_schemaless_and_schemaful() -> None:
    nested = {"content": {"id": 42, "name": {"first": "David", "middle": None, "last": "Wong"}}}
    flat = out(made(fields.FlattenValue), sink(nested)).value
    assert flat == {
        "content.id": 42,
        "content.name.first": "David",
        "content.name.middle": None,
        "content.name.last": "Wong",
    }
    inner = Schema.struct([("first", STRING_SCHEMA)], optional=True)
    outer = Schema.struct(
        [("id", Schema(INT64)), ("name", inner), ("tags", Schema.array(STRING_SCHEMA))]
    )
    value = Struct(outer, {"id": 1, "name": Struct(inner, {"first": "D"}), "tags": ["x"]})
    record = out(made(fields.FlattenValue, delimiter="_"), sink(value, outer))
    assert [f.name for f in record.value_schema.fields] == ["id", "name_first", "tags"]
    assert record.value_schema.field("name_first").schema.optional  # its parent is
    assert record.value.values == {"id": 1, "name_first": "D", "tags": ["x"]}
    with_map = Schema.struct([("m", Schema.map(STRING_SCHEMA, STRING_SCHEMA))])
    with pytest.raises(
        DataException, match=r"does not support MAP for record with schemas \(for field m\)"
    ):
        made(fields.FlattenValue).apply(sink(Struct(with_map, {"m": {}}), with_map))


# HeaderFrom, DropHeaders


def written(headers: list[tuple[str, Any]]) -> list[tuple[str, bytes | None]]:
    """Headers as Kafka's default header converter (SimpleHeaderConverter) writes them."""
    simple = SimpleHeaderConverter()
    return [
        (key, simple.from_connect_header("t", key, value.schema, value.value))
        if isinstance(value, SchemaAndValue)
        else (key, value)
        for key, value in headers
    ]


def test_header_from_move_and_copy() -> None:
    move = made(fields.HeaderFromValue, fields="age,name", headers="years,who", operation="move")
    moved = out(move, sink({"name": "Ada", "age": 36, "city": "London"}, headers=[("h", b"1")]))
    assert moved.value == {"city": "London"}
    assert written(moved.headers) == [("h", b"1"), ("years", b"36"), ("who", b"Ada")]
    record = out(move, sink(person(), PERSON))
    assert [f.name for f in record.value_schema.fields] == ["city"]
    assert record.headers[0] == ("years", SchemaAndValue(Schema(INT32), 36))
    assert written(record.headers) == [("years", b"36"), ("who", b"Ada")]
    copy = made(fields.HeaderFromValue, fields="name", headers="who", operation="copy")
    copied = out(copy, sink(person(), PERSON))
    assert copied.value == person() and written(copied.headers) == [("who", b"Ada")]
    with pytest.raises(ConfigError, match="'fields' config must have the same number"):
        made(fields.HeaderFromValue, fields="a,b", headers="x", operation="copy")
    with pytest.raises(ConfigError, match="String must be one of: move, copy"):
        made(fields.HeaderFromValue, fields="a", headers="x", operation="cut")


def test_insert_header_and_set_schema_metadata() -> None:
    insert = made(routing.InsertHeader, header="source", **{"value.literal": "orders-db"})
    assert written(out(insert, sink({}, headers=[("a", None)])).headers) == [
        ("a", None),
        ("source", b"orders-db"),
    ]
    number = made(routing.InsertHeader, header="n", **{"value.literal": "42"})
    assert out(number, sink({})).headers == [("n", SchemaAndValue(Schema(INT8), 42))]
    metadata = made(fields.SetSchemaMetadataValue, **{"schema.name": "com.example.Person"})
    record = out(metadata, sink(person(), PERSON))
    assert record.value_schema.name == "com.example.Person"
    assert record.value.schema is record.value_schema and record.value.get("age") == 36
    assert metadata.apply(sink(None)) == sink(None)
    with pytest.raises(DataException, match=r"Schema required for \[updating schema metadata\]"):
        metadata.apply(sink({"a": 1}))
    with pytest.raises(ConfigError, match="Neither schema name nor version configured"):
        made(fields.SetSchemaMetadataKey)


def test_drop_headers() -> None:
    drop = made(routing.DropHeaders, headers="source,type")
    record = sink({}, headers=[("source", b"a"), ("keep", b"b"), ("type", None)])
    assert out(drop, record).headers == [("keep", b"b")]


# Cast


def test_cast_fields_and_whole_value() -> None:
    cast = made(casts.CastValue, spec="age:string,score:float32,ok:boolean,small:int8")
    value = {"age": 36, "score": "1.5", "ok": "TRUE", "small": 300, "other": "x"}
    assert out(cast, sink(value)).value == {
        "age": "36",
        "score": 1.5,
        "ok": True,
        "small": 44,  # Java's (byte) 300
        "other": "x",
    }
    record = out(made(casts.CastValue, spec="age:int64"), sink(person(), PERSON))
    assert record.value_schema.field("age").schema.type == INT64
    assert record.value.get("age") == 36
    whole = out(made(casts.CastKey, spec="int32"), sink(None, key_schema=STRING_SCHEMA, key="42"))
    assert whole.key == 42 and whole.key_schema.type == INT32
    assert out(made(casts.CastValue, spec="string"), sink(b"\x00\x01")).value == "AAE="
    with pytest.raises(DataException, match=r"Value \(99999\) was out of range"):
        made(casts.CastValue, spec="int8").apply(sink("99999"))
    with pytest.raises(ConfigError, match="Invalid type found in casting spec: tiny"):
        made(casts.CastValue, spec="a:tiny")
    with pytest.raises(ConfigError, match="does not support casting to BYTES"):
        made(casts.CastValue, spec="a:bytes")
    with pytest.raises(ConfigError, match="may ony specify a single cast"):
        made(casts.CastValue, spec="int8,a:int16")
    with pytest.raises(DataException, match="does not support casting from ARRAY"):
        made(casts.CastValue, spec="int8").apply(sink([1]))


# TimestampConverter


def test_timestamp_converter() -> None:
    ms = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z
    to_string = made(
        casts.TimestampConverterValue,
        field="at",
        **{"target.type": "string", "format": "yyyy-MM-dd HH:mm:ss.SSS"},
    )
    assert out(to_string, sink({"at": ms})).value == {"at": "2023-11-14 22:13:20.123"}
    back = made(
        casts.TimestampConverterValue,
        field="at",
        **{"target.type": "unix", "format": "yyyy-MM-dd HH:mm:ss.SSS"},
    )
    assert out(back, sink({"at": "2023-11-14 22:13:20.123"})).value == {"at": ms}
    seconds = made(
        casts.TimestampConverterValue, **{"target.type": "unix", "unix.precision": "seconds"}
    )
    timestamp = Schema(INT64, name=TIMESTAMP, version=1)
    assert out(seconds, sink(ms, timestamp)).value == ms // 1000
    from_seconds = made(
        casts.TimestampConverterValue, **{"target.type": "Timestamp", "unix.precision": "seconds"}
    )
    assert out(from_seconds, sink(1_700_000_000)).value == 1_700_000_000_000
    schema = Schema.struct([("at", Schema(INT64, name=TIMESTAMP, version=1))])
    to_date = made(casts.TimestampConverterValue, field="at", **{"target.type": "Date"})
    record = out(to_date, sink(Struct(schema, {"at": ms}), schema))
    assert record.value_schema.field("at").schema.name == DATE
    assert record.value.get("at") == ms // 86_400_000
    whole = made(casts.TimestampConverterValue, **{"target.type": "Timestamp"})
    converted = out(whole, sink(datetime(2023, 11, 14, tzinfo=UTC)))
    assert converted.value == 1_699_920_000_000
    assert out(whole, sink(ms, Schema(INT64))).value_schema.name == TIMESTAMP
    with pytest.raises(ConfigError, match="requires format option to be specified"):
        made(casts.TimestampConverterValue, **{"target.type": "string"})
    with pytest.raises(ConfigError, match="SimpleDateFormat-compatible pattern"):
        made(casts.TimestampConverterValue, **{"target.type": "string", "format": "qq"})
    with pytest.raises(DataException, match=r"Could not parse timestamp: value \(soon\)"):
        back.apply(sink({"at": "soon"}))
    with pytest.raises(ConfigError, match="String must be one of: string, unix, Date"):
        made(casts.TimestampConverterValue, **{"target.type": "date"})


def test_java_date_formats() -> None:
    ms = 1_700_000_000_123
    assert JavaDateFormat("yyyyMMdd").format(ms) == "20231114"
    assert (
        JavaDateFormat("EEE, d MMM yy h:mm a 'UTC'''").format(ms) == "Tue, 14 Nov 23 10:13 PM UTC'"
    )
    iso = JavaDateFormat("yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
    assert iso.format(ms) == "2023-11-14T22:13:20.123Z"
    assert iso.parse("2023-11-14T23:13:20.123+01:00") == ms
    assert JavaDateFormat("dd MMM yyyy").parse("14 Nov 2023") == 1_699_920_000_000


# RegexRouter, TimestampRouter, Filter


def test_routers() -> None:
    router = made(routing.RegexRouter, regex=r"([^.]+)\.([^.]+)\.([^.]+)", replacement="$3")
    assert out(router, sink({}, topic="db.public.orders")).topic == "orders"
    assert out(router, sink({}, topic="plain")).topic == "plain"
    named = made(routing.RegexRouter, regex=r"(?P<base>.*)-raw", replacement="${base}-clean\\$")
    assert out(named, sink({}, topic="clicks-raw")).topic == "clicks-clean$"
    with pytest.raises(
        ConfigError, match="Invalid value \\( for configuration regex: Invalid regex"
    ):
        made(routing.RegexRouter, regex="(", replacement="x")
    stamped = made(
        routing.TimestampRouter,
        **{"topic.format": "foo-${topic}-${timestamp}", "timestamp.format": "YYYYMM"},
    )
    assert out(stamped, sink({})).topic == "foo-orders-202311"
    assert out(made(routing.TimestampRouter), sink({})).topic == "orders-20231114"
    with pytest.raises(DataException, match="Timestamp missing on record"):
        made(routing.TimestampRouter).apply(sink({}, timestamp=None))
    assert made(routing.Filter).apply(sink({})) is None


# Predicates and the chain


def test_predicates() -> None:
    topic = predicates.TopicNameMatches()
    topic.configure({"pattern": "ord.*"})
    assert topic.test(sink({})) and not topic.test(sink({}, topic="xorders"))
    header = predicates.HasHeaderKey()
    header.configure({"name": "trace"})
    assert header.test(sink({}, headers=[("trace", None)])) and not header.test(sink({}))
    tombstone = predicates.RecordIsTombstone()
    assert tombstone.test(sink(None)) and not tombstone.test(sink({}))
    with pytest.raises(ConfigError, match="String must be non-empty"):
        predicates.HasHeaderKey().configure({"name": ""})


def test_chain_in_order_with_predicate_and_negate() -> None:
    props = {
        "transforms": "hoist,insert,dropOthers,route",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "line",
        "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.insert.static.field": "origin",
        "transforms.insert.static.value": "file",
        "transforms.dropOthers.type": "Filter",
        "transforms.dropOthers.predicate": "isOrders",
        "transforms.dropOthers.negate": "true",
        "transforms.route.type": "RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.route.replacement": "$1-enriched",
        "predicates": "isOrders",
        "predicates.isOrders.type": "TopicNameMatches",
        "predicates.isOrders.pattern": "orders",
    }
    stages = build_stages(props, PLUGINS)
    assert [s.class_name.rsplit(".", 1)[-1] for s in stages] == [
        "HoistField$Value",
        "InsertField$Value",
        "Filter",
        "RegexRouter",
    ]
    result = apply_all(stages, source("one", STRING_SCHEMA))
    assert result is not None and result.topic == "orders-enriched"
    assert result.value.values == {"line": "one", "origin": "file"}
    assert apply_all(stages, source("two", STRING_SCHEMA, topic="other")) is None
    with pytest.raises(ConfigError, match="transforms.route.regex"):
        build_stages(props | {"transforms.route.regex": "("}, PLUGINS)
    with pytest.raises(ConfigError, match="was provided but there is no config"):
        build_stages(
            {"transforms": "f", "transforms.f.type": "Filter", "transforms.f.negate": "true"},
            PLUGINS,
        )


# Validation


def _errors(props: dict[str, str]) -> dict[str, list[str]]:
    infos = connector_config.validate(props, PLUGINS)
    assert infos["error_count"] == sum(len(c["value"]["errors"]) for c in infos["configs"])
    return {
        c["value"]["name"]: c["value"]["errors"] for c in infos["configs"] if c["value"]["errors"]
    }


def test_validation_of_transforms_and_predicates() -> None:
    base = {"name": "s", "connector.class": "FileStreamSource", "topic": "t"}
    good = base | {
        "transforms": "route",
        "transforms.route.type": "RegexRouter",
        "transforms.route.regex": "t",
        "transforms.route.replacement": "u",
    }
    assert _errors(good) == {}
    infos = connector_config.validate(good, PLUGINS)
    assert "Transforms: route" in infos["groups"]
    names = [c["definition"]["name"] for c in infos["configs"]]
    assert {"transforms.route.type", "transforms.route.regex", "transforms.route.predicate"} <= set(
        names
    )
    assert _errors(
        base
        | {
            "transforms": "a,a,b,c",
            "transforms.a.type": "NoSuch",
            "transforms.b.type": "InsertField$Value",
            "transforms.c.type": "MaskField$Value",
            "transforms.c.predicate": "p",
            "predicates": "q",
            "predicates.q.type": "HasHeaderKey",
        }
    ) == {
        "transforms": [
            "Invalid value [a, a, b, c] for configuration transforms: Duplicate alias provided."
        ],
        "transforms.a.type": [
            "Invalid value NoSuch for configuration transforms.a.type: "
            "Class NoSuch could not be found."
        ],
        "transforms.b.type": ["No field insertion configured"],
        "transforms.c.fields": [
            'Missing required configuration "transforms.c.fields" which has no default value.'
        ],
        "transforms.c.predicate": [
            "Invalid value p for configuration transforms.c.predicate: "
            "the predicate is not among predicates=q"
        ],
        "predicates.q.name": [
            'Missing required configuration "predicates.q.name" which has no default value.'
        ],
    }
    sink_props = {"name": "k", "connector.class": "FileStreamSink", "topics": "a,dlq"}
    assert _errors(
        sink_props | {"errors.deadletterqueue.topic.name": "dlq", "errors.tolerance": "all"}
    ) == {
        "topics": [
            "The DLQ topic 'dlq' may not be included in the list of topics "
            "('topics=[a, dlq]') consumed by the connector"
        ]
    }


def test_plugins_listing_and_config() -> None:
    listed = {p["class"]: p["type"] for p in PLUGINS.listing(connectors_only=False)}
    assert listed["org.apache.kafka.connect.transforms.Cast$Value"] == "transformation"
    assert listed["org.apache.kafka.connect.transforms.predicates.HasHeaderKey"] == "predicate"
    assert "org.apache.kafka.connect.transforms.Filter" not in {
        p["class"] for p in PLUGINS.listing()
    }
    plugin = PLUGINS.find("org.apache.kafka.connect.transforms.RegexRouter", ("transformation",))
    assert plugin is not None and set(plugin.config_def().keys) == {"regex", "replacement"}


# Error handling


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.contexts: list[errs.ErrorContext] = []
        self.flushed = 0

    def report(self, context: errs.ErrorContext) -> None:
        self.contexts.append(context)

    def flush(self) -> None:
        self.flushed += 1

    def close(self) -> None:
        pass


def test_retries_with_backoff_until_the_timeout() -> None:
    clock = FakeClock()
    handler = errs.ErrorHandler(
        ("c", 0), retry_timeout_ms=2000, retry_delay_max_ms=1000, clock=clock
    )
    waits: list[float] = []

    def wait(timeout: float | None = None) -> bool:
        assert timeout is not None
        waits.append(timeout)
        clock.now += timeout
        return False

    handler.stopping.wait = wait  # type: ignore[method-assign,assignment]
    attempts = []

    def flaky() -> str:
        attempts.append(clock.now)
        if len(attempts) < 3:
            raise RetriableException("not yet")
        return "done"

    assert handler.run(errs.TRANSFORMATION, "X", flaky, None) == "done"
    assert waits == [0.3, 0.6]
    always: list[int] = []

    def failing() -> None:
        always.append(1)
        raise RetriableException("down")

    with pytest.raises(ConnectException, match="Tolerance exceeded in error handler"):
        handler.run(errs.TASK_PUT, "X", failing, None)
    assert sum(waits[2:]) == pytest.approx(2.0)  # never past the deadline


def test_tolerance_none_all_and_unhandled() -> None:
    recorder = Recorder()
    strict = errs.ErrorHandler(("c", 1), reporters=[recorder])

    def broken() -> None:
        raise DataException("bad bytes")

    with pytest.raises(ConnectException, match="Tolerance exceeded") as failure:
        strict.run(errs.VALUE_CONVERTER, "JsonConverter", broken, None)
    assert isinstance(failure.value.__cause__, DataException)
    assert recorder.contexts[0].stage == "VALUE_CONVERTER"  # reported before failing
    lenient = errs.ErrorHandler(("c", 1), tolerate_all=True, reporters=[recorder])
    assert lenient.run(errs.TRANSFORMATION, "X", broken, None) is errs.SKIPPED
    with pytest.raises(ConnectException, match="Unhandled exception in error handler"):
        lenient.run(errs.TASK_PUT, "X", broken, None)


def test_log_reporter_and_context_headers(caplog: pytest.LogCaptureFixture) -> None:
    message = errs.ConsumedMessage("orders", 0, 5, b"k", b"v", 1000, "CreateTime")
    try:
        raise DataException("not JSON")
    except DataException as exc:
        context = errs.ErrorContext(
            ("sink", 3),
            "VALUE_CONVERTER",
            "org.apache.kafka.connect.json.JsonConverter",
            exc,
            message,
        )
    with caplog.at_level(logging.ERROR, logger="strom.connect.errors"):
        errs.LogReporter(include_messages=True).report(context)
    assert caplog.records[0].getMessage() == (
        "Error encountered in task sink-3. Executing stage 'VALUE_CONVERTER' with class "
        "'org.apache.kafka.connect.json.JsonConverter', where consumed record is "
        "{topic='orders', partition=0, offset=5, timestamp=1000, timestampType=CreateTime}."
    )
    headers = dict(errs.context_headers(context))
    assert headers["__connect.errors.topic"] == b"orders"
    assert headers["__connect.errors.partition"] == b"0"
    assert headers["__connect.errors.offset"] == b"5"
    assert headers["__connect.errors.connector.name"] == b"sink"
    assert headers["__connect.errors.task.id"] == b"3"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.exception.class.name"] == b"strom.connect.data.DataException"
    assert headers["__connect.errors.exception.message"] == b"not JSON"
    assert b"raise DataException" in (headers["__connect.errors.exception.stacktrace"] or b"")


# The record path


def _path(stages: dict[str, str], tolerate: bool, recorder: Recorder) -> RecordPath:
    json_converter = JsonConverter()
    json_converter.configure({"schemas.enable": "false"}, is_key=False)
    string_converter = StringConverter()
    string_converter.configure({}, is_key=True)
    handler = errs.ErrorHandler(("sink", 0), tolerate_all=tolerate, reporters=[recorder])
    return RecordPath(string_converter, json_converter, build_stages(stages, PLUGINS), handler)


def test_sink_record_path_skips_and_reports() -> None:
    recorder = Recorder()
    stages = {
        "transforms": "route",
        "transforms.route.type": "RegexRouter",
        "transforms.route.regex": "orders",
        "transforms.route.replacement": "renamed",
    }
    path = _path(stages, True, recorder)
    good = errs.ConsumedMessage("orders", 1, 10, b"k", b'{"a": 1}')
    record = path.sink_record(good)
    assert record is not None and record.topic == "renamed" and record.value == {"a": 1}
    assert (
        record.original_topic,
        record.original_kafka_partition,
        record.original_kafka_offset,
    ) == ("orders", 1, 10)
    bad = errs.ConsumedMessage("orders", 1, 11, b"k", b"not json")
    assert path.sink_record(bad) is None
    assert (
        recorder.contexts[-1].original is bad and recorder.contexts[-1].stage == "VALUE_CONVERTER"
    )
    reporter = path.errant_reporter({("orders", 1, 10): good})
    assert reporter is not None
    reporter(record, ValueError("database refused it"))
    assert recorder.contexts[-1].original is good and recorder.contexts[-1].stage == "TASK_PUT"
    made_by_task = dataclasses.replace(record, original_topic=None, value={"b": 2})
    reporter(made_by_task, ValueError("no"))
    original = recorder.contexts[-1].original
    assert isinstance(original, errs.ConsumedMessage) and original.value == b'{"b":2}'
    strict = _path(stages, False, Recorder())
    with pytest.raises(ConnectException, match="Tolerance exceeded"):
        strict.sink_record(bad)
    strict_reporter = strict.errant_reporter({})
    assert strict_reporter is not None
    with pytest.raises(ConnectException, match="Tolerance exceeded"):
        strict_reporter(record, ValueError("no"))
    silent = RecordPath(
        strict.key_converter, strict.value_converter, [], errs.ErrorHandler(("s", 0))
    )
    assert silent.errant_reporter({}) is None  # no log, no queue: none, as in Kafka


def test_source_record_path_transforms_then_converts() -> None:
    recorder = Recorder()
    stages = {
        "transforms": "hoist",
        "transforms.hoist.type": "HoistField$Value",
        "transforms.hoist.field": "line",
    }
    path = _path(stages, True, recorder)
    produced = path.produced_message(source("hi", STRING_SCHEMA, timestamp=5))
    assert produced is not None and produced.value == b'{"line":"hi"}' and produced.timestamp == 5
    cast = {"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "int8"}
    assert _path(cast, True, recorder).produced_message(source("x", Schema(STRING))) is None
    assert recorder.contexts[-1].stage == "TRANSFORMATION"
    assert recorder.contexts[-1].executing_class == "org.apache.kafka.connect.transforms.Cast$Value"


def test_records_keep_their_type() -> None:
    record = out(made(fields.HoistFieldValue, field="f"), source("x"))
    assert isinstance(record, SourceRecord)
    assert dataclasses.replace(record).value == {"f": "x"}
