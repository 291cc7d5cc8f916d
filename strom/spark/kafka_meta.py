"""The driver's view of Kafka for the ``strom`` source: which topic-partitions a query
reads, and the offsets that its positions (earliest, latest, JSON, timestamps) stand for.

Owns the confluent-kafka settings every client of the source shares
(:func:`consumer_config`), turning :class:`~strom.spark.options.Positions` into
offsets, and the data-loss rule (an offset that is no longer in the log). Reading
records is :mod:`strom.spark.reader`'s job. Talks to any Kafka-compatible cluster
through confluent-kafka; never imports broker code.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from strom.spark.options import EARLIEST, LATEST, Positions, ReaderOptions, StromOptionError

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata, TopicMetadata

log = logging.getLogger(__name__)

# {"topic": {partition: offset}}; partitions are ints here and strings in Spark's JSON.
Offsets = dict[str, dict[int, int]]
JsonOffsets = dict[str, dict[str, int]]  # the same in Spark's checkpoint JSON

METADATA_TIMEOUT_S = 15.0


class StromSourceError(RuntimeError):
    """The source cannot go on: the broker is unreachable, or data is lost with
    failOnDataLoss=true."""


def consumer_config(opts: ReaderOptions, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings: the user's kafka.* plus what the source owns.

    The source assigns partitions itself and keeps offsets in Spark's checkpoint, so it
    never joins or commits to a group; ``auto.offset.reset=error`` turns an offset that
    retention removed into an error instead of a silent jump.
    """
    config: dict[str, Any] = dict(opts.client)
    config.setdefault("group.id", f"strom-spark-{uuid.uuid4().hex[:12]}")
    config["enable.auto.commit"] = False
    config["auto.offset.reset"] = "error"
    config.update(extra)
    return config


def to_json(offsets: Offsets) -> JsonOffsets:
    return {
        t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())
    }


def from_json(offsets: JsonOffsets) -> Offsets:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


def data_loss(opts: ReaderOptions, message: str) -> None:
    """Fail the query, or warn and go on, as failOnDataLoss says."""
    if opts.fail_on_data_loss:
        raise StromSourceError(
            f"{message}. Some data may have been lost (deleted by retention, or the topic was "
            "recreated). Set failOnDataLoss=false to skip it with a warning instead."
        )
    log.warning("%s; skipping it (failOnDataLoss=false)", message)


class KafkaMeta:
    """Topic metadata and offsets, through one confluent-kafka consumer that never reads."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        try:
            self.consumer = Consumer(consumer_config(opts))
        except (KafkaException, ValueError, TypeError) as exc:
            raise StromOptionError(f"bad kafka.* option: {_describe(exc)}") from None

    def close(self) -> None:
        self.consumer.close()

    def _topics(self) -> dict[str, TopicMetadata]:
        try:
            metadata: ClusterMetadata = self.consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise StromSourceError(
                f"cannot reach Kafka at {self.opts.bootstrap}: {_describe(exc)}"
            ) from None
        return metadata.topics

    def unknown_topics(self) -> list[str]:
        """Topics named by subscribe/assign that do not exist, and assigned partitions
        that do not exist (as topic-partition)."""
        topics = self._topics()
        missing = [t for t in self.opts.named_topics() if t not in topics or topics[t].error]
        for topic, partitions in (self.opts.assign or {}).items():
            if topic in topics and not topics[topic].error:
                missing += [f"{topic}-{p}" for p in partitions if p not in topics[topic].partitions]
        return missing

    def partitions(self) -> dict[str, list[int]]:
        """The topic-partitions the query reads now (new ones appear as they are created)."""
        topics = self._topics()
        found: dict[str, list[int]] = {}
        if self.opts.assign is not None:
            for topic, wanted in self.opts.assign.items():
                if topic in topics and not topics[topic].error:
                    found[topic] = [p for p in wanted if p in topics[topic].partitions]
            return {t: ps for t, ps in found.items() if ps}
        if self.opts.subscribe is not None:
            names = [t for t in self.opts.subscribe if t in topics and not topics[t].error]
        else:
            pattern = re.compile(self.opts.pattern or "")
            names = sorted(
                t
                for t in topics
                if not t.startswith("__") and pattern.fullmatch(t) and not topics[t].error
            )
        for topic in names:
            found[topic] = sorted(topics[topic].partitions)
        return {t: ps for t, ps in found.items() if ps}

    def _list_offsets(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """ListOffsets for many partitions at once: -2 earliest, -1 latest, else a time."""
        if not wanted:
            return {}
        request = [TopicPartition(t, p, ts) for (t, p), ts in sorted(wanted.items())]
        try:
            answer = self.consumer.offsets_for_times(request, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise StromSourceError(
                f"cannot list offsets at {self.opts.bootstrap}: {_describe(exc)}"
            ) from None
        result = {}
        for tp in answer:
            if tp.error is not None:
                raise StromSourceError(
                    f"cannot list offsets of {tp.topic}-{tp.partition}: {tp.error.str()}"
                )
            result[(tp.topic, tp.partition)] = tp.offset
        return result

    def earliest(self, partitions: dict[str, list[int]]) -> Offsets:
        return self._fixed(partitions, EARLIEST)

    def latest(self, partitions: dict[str, list[int]]) -> Offsets:
        return self._fixed(partitions, LATEST)

    def _fixed(self, partitions: dict[str, list[int]], which: int) -> Offsets:
        answer = self._list_offsets({(t, p): which for t, ps in partitions.items() for p in ps})
        return _nest(answer)

    def resolve(
        self, positions: Positions, partitions: dict[str, list[int]], display: str
    ) -> Offsets:
        """Offsets that ``positions`` stand for on these partitions (-2/-1 resolved)."""
        keys = [(t, p) for t, ps in partitions.items() for p in ps]
        explicit = positions.offsets if positions.offsets is not None else positions.timestamps
        if explicit is not None:
            given = {(t, p) for t, ps in explicit.items() for p in ps}
            missing = sorted(set(keys) - given)
            extra = sorted(given - set(keys))
            if missing or extra:
                problems = []
                if missing:
                    problems.append("no position for " + _names(missing))
                if extra:
                    problems.append(_names(extra) + " not read by this query or not existing")
                raise StromOptionError(
                    f"option {display}: {'; '.join(problems)}. When it is JSON it must name "
                    "every partition read (-2 for earliest, -1 for latest)"
                )
        if positions.by_timestamp:
            if positions.timestamps is not None:
                times = {(t, p): positions.timestamps[t][p] for t, p in keys}
            else:
                times = {k: positions.default_timestamp or 0 for k in keys}
            found = self._list_offsets(times)
            unmatched = [k for k, offset in found.items() if offset < 0]
            if unmatched:
                if self.opts.timestamp_strategy == "error":
                    raise StromSourceError(
                        f"{display}: no record at or after the given timestamp in "
                        f"{_names(sorted(unmatched))}; set "
                        "startingOffsetsByTimestampStrategy=latest to start at the end instead"
                    )
                found.update(self._list_offsets({k: LATEST for k in unmatched}))
            for key, offset in found.items():
                if key not in unmatched:
                    found[key] = self._first_at_or_after(key, offset, times[key])
            return _nest(found)
        wanted = {
            (t, p): (
                positions.offsets[t][p] if positions.offsets is not None else positions.default
            )
            for t, p in keys
        }
        special = {k: v for k, v in wanted.items() if v < 0}
        resolved = dict(wanted)
        resolved.update(self._list_offsets(special))
        return _nest(resolved)

    def _first_at_or_after(self, key: tuple[str, int], offset: int, timestamp: int) -> int:
        """The offset of the first record at or after ``timestamp``, from ``offset`` on.

        Kafka answers ListOffsets with that record's offset; a broker that answers at
        batch granularity (the batch's base offset) is corrected by reading that batch.
        """
        topic, partition = key
        end = self._list_offsets({key: LATEST})[key]
        self.consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            while offset < end:
                messages = self.consumer.consume(1000, 1.0)
                for msg in messages:
                    if msg.error() is None:
                        found = msg.offset()
                        assert found is not None  # a consumed record has its offset
                        if msg.timestamp()[1] >= timestamp:
                            return found
                        offset = found + 1
                if not messages:
                    break
            return offset
        finally:
            self.consumer.unassign()


def _nest(flat: dict[tuple[str, int], int]) -> Offsets:
    nested: Offsets = {}
    for (topic, partition), offset in flat.items():
        nested.setdefault(topic, {})[partition] = offset
    return nested


def _names(keys: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in keys)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)
