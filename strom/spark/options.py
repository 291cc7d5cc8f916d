"""Options of the ``strom`` Spark format, parsed and checked once, named as Spark's Kafka
connector names them.

Owns: which topics a reader subscribes to (``subscribe`` / ``subscribePattern`` /
``assign``), how its starting and ending positions are written (``earliest``,
``latest``, per-partition JSON with -2/-1, timestamps), the per-trigger limits, and
the ``kafka.*`` options handed to confluent-kafka; for a writer, the topic, whether
it writes exactly once (``exactlyOnce``, ``transactionalIdPrefix``) and the topic name
of rows that fail the write (``failureTopic``, the sink's own: not Spark's). Does not talk to a
broker: turning a position into an offset is :mod:`strom.spark.kafka_meta`'s job.

Spark gives a Python data source its options in a case-insensitive dict whose keys are
lowercased, so every name below is looked up in lower case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2  # as in Spark's offsets JSON
LATEST = -1

# Options a reader takes besides kafka.*; Spark's names, lowercased.
_READER_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "groupidprefix",
    "maxrecordsperpartition",
    "path",
}

# kafka.* settings the source owns itself (Spark's Kafka source refuses them too).
_OWNED_CONSUMER_SETTINGS = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets to Kafka; it keeps them in the "
    "checkpoint",
    "key.deserializer": "keys are read as binary; cast them in the query",
    "value.deserializer": "values are read as binary; cast them in the query",
    "interceptor.classes": "not supported",
}
_OWNED_PRODUCER_SETTINGS = {
    "key.serializer": "keys are written from a string or binary column",
    "value.serializer": "values are written from a string or binary column",
    "interceptor.classes": "not supported",
    "transactional.id": "set exactlyOnce=true; the sink names its transactional ids itself "
    "(see transactionalIdPrefix)",
}
DEFAULT_TRANSACTIONAL_ID_PREFIX = "strom-eos"


class StromOptionError(ValueError):
    """A wrong option of the ``strom`` format, reported in one line before the query runs."""


# A position is either EARLIEST/LATEST for every partition, or per topic and partition.
PartitionPositions = dict[str, dict[int, int]]


@dataclass(frozen=True)
class Positions:
    """Where a read starts or ends, before it is turned into offsets.

    ``default`` applies to partitions without an entry in ``offsets``/``timestamps``.
    ``by_timestamp`` means ``timestamps`` (per partition) or ``default_timestamp`` (all
    partitions) name the first record at or after a time, in ms.
    """

    default: int = EARLIEST
    offsets: PartitionPositions | None = None
    timestamps: PartitionPositions | None = None
    default_timestamp: int | None = None

    @property
    def by_timestamp(self) -> bool:
        return self.timestamps is not None or self.default_timestamp is not None


@dataclass(frozen=True)
class ReaderOptions:
    bootstrap: str
    client: dict[str, str]  # kafka.* without the prefix
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: Positions = field(default_factory=Positions)
    ending: Positions = field(default_factory=lambda: Positions(default=LATEST))
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000

    def named_topics(self) -> list[str]:
        """Topics named outright by subscribe or assign (not by a pattern)."""
        if self.subscribe is not None:
            return list(self.subscribe)
        if self.assign is not None:
            return list(self.assign)
        return []


@dataclass(frozen=True)
class WriterOptions:
    bootstrap: str
    client: dict[str, str]
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    failure_topic: str | None = None  # a row to it fails the write (``strom.spark.sink``)


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(options: dict[str, str], name: str, display: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise StromOptionError(f"option {display} must be true or false, not {value!r}")


def _int(options: dict[str, str], name: str, display: str, minimum: int) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise StromOptionError(f"option {display} must be an integer, not {value!r}") from None
    if number < minimum:
        raise StromOptionError(f"option {display} must be at least {minimum}, not {number}")
    return number


def _client(options: dict[str, str], owned: dict[str, str]) -> tuple[str, dict[str, str]]:
    client = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    for name, why in owned.items():
        if name in client:
            raise StromOptionError(f"option kafka.{name} is not allowed: {why}")
    bootstrap = client.get("bootstrap.servers", "").strip()
    if not bootstrap:
        raise StromOptionError("option kafka.bootstrap.servers is required (host:port,...)")
    return bootstrap, client


def _json_object(text: str, display: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StromOptionError(
            f"option {display} is not valid JSON ({exc.msg} at char {exc.pos}): {text!r}; "
            f"expected e.g. {example}"
        ) from None
    if not isinstance(value, dict) or not value:
        raise StromOptionError(f"option {display} must be a JSON object like {example}: {text!r}")
    return value


def parse_partition_map(
    text: str, display: str, *, allow_earliest: bool = True, timestamps: bool = False
) -> PartitionPositions:
    """``{"topic": {"0": 23, "1": -2}}`` -> ``{"topic": {0: 23, 1: -2}}``, checked."""
    example = '{"topicA": {"0": 1700000000000}}' if timestamps else '{"topicA": {"0": 23, "1": -2}}'
    parsed = _json_object(text, display, example)
    result: PartitionPositions = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise StromOptionError(
                f"option {display}: topic {topic!r} must map partitions to "
                f"{'timestamps' if timestamps else 'offsets'}, like {example}"
            )
        result[topic] = {}
        for partition, position in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                number = -1
            if number < 0:
                raise StromOptionError(
                    f"option {display}: {partition!r} of topic {topic!r} is not a partition number"
                )
            if not isinstance(position, int) or isinstance(position, bool):
                raise StromOptionError(
                    f"option {display}: position of {topic}-{partition} must be an integer, "
                    f"not {position!r}"
                )
            if timestamps:
                if position < 0:
                    raise StromOptionError(
                        f"option {display}: timestamp of {topic}-{partition} must be >= 0"
                    )
            elif position < (EARLIEST if allow_earliest else LATEST):
                allowed = "-2 (earliest), -1 (latest)" if allow_earliest else "-1 (latest)"
                raise StromOptionError(
                    f"option {display}: offset {position} of {topic}-{partition} is not valid; "
                    f"use an offset >= 0, {allowed}"
                )
            result[topic][number] = position
    return result


def _positions(options: dict[str, str], which: str, default: int, *, streaming: bool) -> Positions:
    """startingOffsets/endingOffsets and their timestamp forms; timestamps win, as in Spark."""
    by_partition = options.get(f"{which}offsetsbytimestamp")
    if by_partition is not None:
        timestamps = parse_partition_map(
            by_partition, f"{which}OffsetsByTimestamp", timestamps=True
        )
        return Positions(default=default, timestamps=timestamps)
    one_timestamp = _int(options, f"{which}timestamp", f"{which}Timestamp", 0)
    if one_timestamp is not None:
        return Positions(default=default, default_timestamp=one_timestamp)
    text = options.get(f"{which}offsets")
    display = f"{which}Offsets"
    if text is None:
        return Positions(default=default)
    word = text.strip().lower()
    if word == "earliest":
        if which == "ending":
            raise StromOptionError("option endingOffsets cannot be earliest; use latest or JSON")
        return Positions(default=EARLIEST)
    if word == "latest":
        if which == "starting" and not streaming:
            raise StromOptionError(
                "option startingOffsets cannot be latest for a batch read; use earliest or JSON"
            )
        return Positions(default=LATEST)
    if not text.strip().startswith("{"):
        raise StromOptionError(
            f"option {display} must be earliest, latest or JSON like "
            f'{{"topicA": {{"0": 23, "1": -2}}}}, not {text!r}'
        )
    offsets = parse_partition_map(text, display, allow_earliest=which == "starting")
    return Positions(default=default, offsets=offsets)


def parse_reader_options(options: Mapping[str, Any], *, streaming: bool | None) -> ReaderOptions:
    """Check a reader's options; raise :class:`StromOptionError` with one clear line.

    ``streaming=None`` checks what batch and streaming reads share (at ``load()``, when
    Spark does not yet say which it is).
    """
    opts = _lower(options)
    unknown = sorted(k for k in opts if not k.startswith("kafka.") and k not in _READER_OPTIONS)
    if unknown:
        raise StromOptionError(
            f"unknown option{'s' if len(unknown) > 1 else ''} for the strom source: "
            f"{', '.join(unknown)}"
        )
    bootstrap, client = _client(opts, _OWNED_CONSUMER_SETTINGS)

    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        names = {
            "subscribe": "subscribe",
            "subscribepattern": "subscribePattern",
            "assign": "assign",
        }
        got = ", ".join(names[g] for g in given) if given else "none"
        raise StromOptionError(
            f"exactly one of the options subscribe, subscribePattern, assign is required "
            f"(got {got})"
        )
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise StromOptionError("option subscribe must name at least one topic")
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise StromOptionError(f"option subscribePattern is not a valid regex: {exc}") from None
        if not pattern:
            raise StromOptionError("option subscribePattern must not be empty")
    else:
        example = '{"topicA": [0, 1], "topicB": [2]}'
        parsed = _json_object(opts["assign"], "assign", example)
        assign = {}
        for topic, partitions in parsed.items():
            if (
                not isinstance(partitions, list)
                or not partitions
                or not all(
                    isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
                )
            ):
                raise StromOptionError(
                    f"option assign: topic {topic!r} must map to a list of partition numbers, "
                    f"like {example}"
                )
            assign[topic] = tuple(sorted(set(partitions)))

    starting = _positions(
        opts, "starting", LATEST if streaming else EARLIEST, streaming=streaming is not False
    )
    if streaming is None:
        ending = _positions(opts, "ending", LATEST, streaming=False)
    elif streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in opts:
                raise StromOptionError(
                    "option endingOffsets (and its timestamp forms) is for batch reads only"
                )
        ending = Positions(default=LATEST)
    else:
        ending = _positions(opts, "ending", LATEST, streaming=False)
        if "maxoffsetspertrigger" in opts:
            raise StromOptionError("option maxOffsetsPerTrigger is for streaming reads only")

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise StromOptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}"
        )
    return ReaderOptions(
        bootstrap=bootstrap,
        client=client,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", 1),
        min_partitions=_int(opts, "minpartitions", "minPartitions", 1),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs", 1)
        or 120_000,
    )


def parse_writer_options(options: Mapping[str, Any], *, streaming: bool) -> WriterOptions:
    """Check a writer's options. Others (checkpointLocation...) belong to Spark."""
    opts = _lower(options)
    bootstrap, client = _client(opts, _OWNED_PRODUCER_SETTINGS)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise StromOptionError("option topic must not be empty")
    exactly_once = _bool(opts, "exactlyonce", "exactlyOnce", False)
    prefix = opts.get("transactionalidprefix")
    if exactly_once:
        if not streaming:
            raise StromOptionError(
                "option exactlyOnce is for streaming writes (writeStream): a batch write has "
                "no micro-batch to replay, so it stays at-least-once"
            )
        _check_transactional_client(client)
    elif prefix is not None:
        raise StromOptionError("option transactionalIdPrefix needs exactlyOnce=true")
    if prefix is not None and not prefix.strip():
        raise StromOptionError("option transactionalIdPrefix must not be empty")
    failure_topic = opts.get("failuretopic")
    if failure_topic is not None and not failure_topic:
        raise StromOptionError("option failureTopic must not be empty")
    return WriterOptions(
        bootstrap=bootstrap,
        client=client,
        topic=topic.strip() if topic else None,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix.strip() if prefix else DEFAULT_TRANSACTIONAL_ID_PREFIX,
        failure_topic=failure_topic,
    )


def _check_transactional_client(client: dict[str, str]) -> None:
    """kafka.* settings a transactional producer cannot have, refused in one line."""
    if client.get("enable.idempotence", "true").strip().lower() != "true":
        raise StromOptionError(
            "option kafka.enable.idempotence=false cannot go with exactlyOnce=true "
            "(transactions need the idempotent producer)"
        )
    acks = client.get("acks", client.get("request.required.acks", "all")).strip().lower()
    if acks not in ("all", "-1"):
        raise StromOptionError(
            f"option kafka.acks={acks} cannot go with exactlyOnce=true (transactions need acks=all)"
        )
