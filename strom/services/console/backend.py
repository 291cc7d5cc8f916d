"""What the console shows, read over the wire from any Kafka-compatible cluster.

Owns the console's blocking client calls, made with confluent-kafka's AdminClient and
Consumer (and DescribeLogDirs sent raw, for sizes: the binding has no call for it):
the cluster and its brokers; topics with partitions, leaders, replicas, ISR, start and
end offsets, sizes and configs; creating, altering and deleting topics; reading
messages from an offset, a time or the end, filtered by key or text; consumer groups
with members, assignments, committed offsets and lag; resetting a group's offsets;
share groups (KIP-932) with their members and each share-partition's start offset
and lag, asked on the wire (ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets:
the binding has no calls for them).
Offsets for many partitions are asked in one ListOffsets per broker, so a listing of
1,000 topics is a handful of requests.

Does not own HTML (``pages``), HTTP (``app``) or the history of samples (``history``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kio.schema.describe_log_dirs.v4 import request as log_dirs_request
from kio.schema.describe_share_group_offsets.v1 import request as share_offsets_request
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId
from kio.static.primitive import i8

from strom.wire_client import WireConnection

log = logging.getLogger(__name__)

TIMEOUT_S = 15.0
READ_WAIT_S = 3.0  # how long a message search waits for more once nothing comes


class ConsoleError(Exception):
    """A request the cluster refused; the message is shown to the user."""


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int = -1
    end: int = -1
    size: int | None = None


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    internal: bool = False
    configs: list[tuple[str, str | None, bool]] = field(
        default_factory=list
    )  # name, value, default

    @property
    def replication(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def messages(self) -> int:
        return sum(max(0, p.end - p.start) for p in self.partitions if p.end >= 0)

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if len(p.isr) < len(p.replicas))


@dataclass
class Message:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class GroupPartition:
    topic: str
    partition: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed) if self.committed >= 0 and self.end >= 0 else 0


@dataclass
class GroupInfo:
    group_id: str
    state: str
    kind: str
    members: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[GroupPartition] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


@dataclass
class SharePartitionInfo:
    topic: str
    partition: int
    start: int  # the first record not yet finished with (-1: unknown)
    lag: int  # records from the start to the end not yet finished with (-1: unknown)


@dataclass
class ShareGroupInfo:
    group_id: str
    state: str
    members: int = 0
    partitions: list[SharePartitionInfo] = field(default_factory=list)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag > 0)


def _raise(exc: BaseException) -> ConsoleError:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error = exc.args[0]
        return ConsoleError(f"{error.name()}: {error.str()}")
    return ConsoleError(str(exc))


class ClusterReader:
    """The console's view of one cluster."""

    def __init__(self, bootstrap: str, settings: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.settings = {"bootstrap.servers": bootstrap, **(settings or {})}
        self.admin = AdminClient(self.settings)

    # Cluster --------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        try:
            described = self.admin.describe_cluster(request_timeout=TIMEOUT_S).result()
        except Exception as exc:
            raise _raise(exc) from None
        controller = described.controller.id if described.controller is not None else -1
        brokers = sorted((node.id, node.host, node.port, node.rack) for node in described.nodes)
        return {"cluster_id": described.cluster_id, "controller": controller, "brokers": brokers}

    # Topics ---------------------------------------------------------------------------

    def _metadata(self, topic: str | None = None) -> Any:
        try:
            return self.admin.list_topics(topic=topic, timeout=TIMEOUT_S)
        except Exception as exc:
            raise _raise(exc) from None

    def offsets(self, partitions: list[TopicPartition]) -> dict[tuple[str, int], tuple[int, int]]:
        """(start, end) of each partition, in one ListOffsets per broker for each."""
        if not partitions:
            return {}
        found: dict[tuple[str, int], list[int]] = {}
        for index, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
            futures = self.admin.list_offsets(
                {tp: spec for tp in partitions}, request_timeout=TIMEOUT_S
            )
            for tp, future in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    offset = future.result().offset
                except Exception:
                    offset = -1
                found.setdefault(key, [-1, -1])[index] = offset
        return {key: (pair[0], pair[1]) for key, pair in found.items()}

    def sizes(self, metadata: Any) -> dict[tuple[str, int], int]:
        """Bytes of each partition's leader log (DescribeLogDirs to each broker; brokers
        that cannot be asked this way, e.g. over TLS, are left out)."""
        sizes: dict[tuple[str, int], int] = {}
        request = log_dirs_request.DescribeLogDirsRequest(topics=None)
        leaders = {
            (name, p.id): p.leader
            for name, topic in metadata.topics.items()
            for p in topic.partitions.values()
        }
        for broker in metadata.brokers.values():
            try:
                wire = WireConnection(
                    broker.host,
                    broker.port,
                    "strom-console",
                    connect_timeout_s=5.0,
                    request_timeout_s=TIMEOUT_S,
                )
                try:
                    response = wire.request(request)
                finally:
                    wire.close()
            except Exception as exc:
                log.debug("no log dir sizes from broker %d: %s", broker.id, exc)
                continue
            for log_dir in response.results:
                for topic in log_dir.topics:
                    for p in topic.partitions:
                        if leaders.get((topic.name, p.partition_index)) == broker.id:
                            sizes[(topic.name, p.partition_index)] = p.partition_size
        return sizes

    def topics(self, with_sizes: bool = True, only: str | None = None) -> list[TopicInfo]:
        """Every topic (or ``only`` that one) with partitions, offsets and sizes."""
        # All topics' metadata even for one: asking for one by name could create it
        # (auto.create.topics.enable), and a console only looks.
        metadata = self._metadata()
        infos = []
        wanted = []
        for name, topic in sorted(metadata.topics.items()):
            if only is not None and name != only:
                continue
            partitions = [
                PartitionInfo(p.id, p.leader, list(p.replicas), list(p.isrs))
                for p in sorted(topic.partitions.values(), key=lambda p: p.id)
            ]
            infos.append(TopicInfo(name, partitions, internal=name.startswith("__")))
            wanted += [TopicPartition(name, p.partition) for p in partitions]
        offsets = self.offsets(wanted)
        sizes = self.sizes(metadata) if with_sizes else {}
        for info in infos:
            for p in info.partitions:
                p.start, p.end = offsets.get((info.name, p.partition), (-1, -1))
                p.size = sizes.get((info.name, p.partition))
        return infos

    def topic(self, name: str) -> TopicInfo:
        found = [t for t in self.topics(only=name) if t.name == name]
        if not found:
            raise ConsoleError(f"UNKNOWN_TOPIC_OR_PARTITION: no topic {name!r}")
        info = found[0]
        resource = ConfigResource(ResourceType.TOPIC, name)
        try:
            configs = self.admin.describe_configs([resource], request_timeout=TIMEOUT_S)
            entries = configs[resource].result()
        except Exception as exc:
            raise _raise(exc) from None
        info.configs = sorted(
            (entry.name, entry.value, entry.is_default) for entry in entries.values()
        )
        return info

    def create_topic(
        self, name: str, partitions: int, replication: int, configs: dict[str, str]
    ) -> None:
        topic = NewTopic(name, partitions, replication, config=configs)
        try:
            self.admin.create_topics([topic], request_timeout=TIMEOUT_S)[name].result()
        except Exception as exc:
            raise _raise(exc) from None

    def delete_topic(self, name: str) -> None:
        try:
            self.admin.delete_topics([name], request_timeout=TIMEOUT_S)[name].result()
        except Exception as exc:
            raise _raise(exc) from None

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry(key, value or "", incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
        try:
            self.admin.incremental_alter_configs([resource])[resource].result()
        except Exception as exc:
            raise _raise(exc) from None

    # Messages -------------------------------------------------------------------------

    def messages(
        self,
        topic: str,
        partition: int | None = None,
        start: str = "end",
        position: int = 0,
        limit: int = 50,
        key: str | None = None,
        text: str | None = None,
    ) -> list[Message]:
        """Up to ``limit`` messages from ``start``: "beginning", "offset" (``position``),
        "time" (``position`` ms) or "end" (the last ``limit`` of each partition), with
        the key equal to ``key`` and ``text`` in the key or value when given."""
        metadata = self._metadata()
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise ConsoleError(f"UNKNOWN_TOPIC_OR_PARTITION: no topic {topic!r}")
        numbers = sorted(metadata.topics[topic].partitions)
        if partition is not None:
            if partition not in numbers:
                raise ConsoleError(f"topic {topic!r} has no partition {partition}")
            numbers = [partition]
        bounds = self.offsets([TopicPartition(topic, p) for p in numbers])
        consumer = Consumer(
            {
                **self.settings,
                "group.id": f"strom-console-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.queue.backoff.ms": 10,
            }
        )
        try:
            assignment = []
            for p in numbers:
                low, high = bounds.get((topic, p), (0, 0))
                if start == "beginning":
                    offset = low
                elif start == "offset":
                    offset = min(max(position, low), high)
                elif start == "time":
                    found = consumer.offsets_for_times(
                        [TopicPartition(topic, p, position)], TIMEOUT_S
                    )[0].offset
                    offset = found if found >= 0 else high
                else:
                    offset = max(low, high - limit)
                if offset < high:
                    assignment.append(TopicPartition(topic, p, offset))
            if not assignment:
                return []
            ends = {tp.partition: bounds[(topic, tp.partition)][1] for tp in assignment}
            consumer.assign(assignment)
            out: list[Message] = []
            done: set[int] = set()
            wanted_key = key.encode() if key else None
            needle = text.lower() if text else None
            deadline = time.monotonic() + TIMEOUT_S
            quiet_until = time.monotonic() + READ_WAIT_S
            while len(done) < len(ends) and len(out) < limit and time.monotonic() < deadline:
                batch = consumer.consume(500, 0.5)
                if not batch and time.monotonic() > quiet_until:
                    break
                for m in batch:
                    record_partition, record_offset = m.partition(), m.offset()
                    error = m.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            assert record_partition is not None  # the partition that ended
                            done.add(record_partition)
                        continue
                    # a consumed record has its partition and offset
                    assert record_partition is not None and record_offset is not None
                    quiet_until = time.monotonic() + READ_WAIT_S
                    if record_offset >= ends[record_partition] - 1:
                        done.add(record_partition)
                    if record_offset >= ends[record_partition]:
                        continue
                    if wanted_key is not None and m.key() != wanted_key:
                        continue
                    if needle is not None:
                        haystack = (m.key() or b"") + b"\0" + (m.value() or b"")
                        if needle not in haystack.decode("utf-8", "replace").lower():
                            continue
                    # a consumed record's headers: (name, bytes or None) pairs in a list
                    # (confluent-kafka's type also has the forms a producer may pass)
                    headers = cast("list[tuple[str, bytes | None]] | None", m.headers())
                    out.append(
                        Message(
                            record_partition,
                            record_offset,
                            m.timestamp()[1],
                            m.key(),
                            m.value(),
                            list(headers or []),
                        )
                    )
            out.sort(key=lambda m: (m.timestamp_ms, m.partition, m.offset))
            return out[:limit]
        finally:
            consumer.close()

    # Groups ---------------------------------------------------------------------------

    def group_ids(self) -> list[tuple[str, str, str]]:
        """(group id, state, type) of every group."""
        try:
            listed = self.admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
        except Exception as exc:
            raise _raise(exc) from None
        out = []
        for group in listed.valid:
            state = getattr(group.state, "name", str(group.state))
            kind = getattr(getattr(group, "type", None), "name", "CLASSIC")
            out.append((group.group_id, state, kind))
        return sorted(out)

    def _committed(self, group_id: str) -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group_id)]
        try:
            result = self.admin.list_consumer_group_offsets(request)[group_id].result()
        except Exception as exc:
            raise _raise(exc) from None
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions
            if tp.error is None and tp.offset >= 0
        }

    def groups(self) -> list[GroupInfo]:
        infos = []
        committed: dict[str, dict[tuple[str, int], int]] = {}
        for group_id, state, kind in self.group_ids():
            infos.append(GroupInfo(group_id, state, kind))
            try:
                committed[group_id] = self._committed(group_id)
            except ConsoleError:
                committed[group_id] = {}
        keys = {key for offsets in committed.values() for key in offsets}
        ends = self.offsets([TopicPartition(t, p) for t, p in sorted(keys)])
        for info in infos:
            info.partitions = [
                GroupPartition(t, p, offset, ends.get((t, p), (-1, -1))[1])
                for (t, p), offset in sorted(committed[info.group_id].items())
            ]
        return infos

    def group(self, group_id: str) -> GroupInfo:
        try:
            described = self.admin.describe_consumer_groups([group_id], request_timeout=TIMEOUT_S)[
                group_id
            ].result()
        except Exception as exc:
            raise _raise(exc) from None
        state = getattr(described.state, "name", str(described.state))
        kind = getattr(getattr(described, "type", None), "name", "CLASSIC")
        info = GroupInfo(group_id, state, kind)
        for member in described.members:
            assigned = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
            info.members.append(
                {
                    "member_id": member.member_id,
                    "client_id": member.client_id,
                    "host": member.host,
                    "instance": member.group_instance_id,
                    "assignment": assigned,
                }
            )
        committed = self._committed(group_id)
        ends = self.offsets([TopicPartition(t, p) for t, p in sorted(committed)])
        info.partitions = [
            GroupPartition(t, p, offset, ends.get((t, p), (-1, -1))[1])
            for (t, p), offset in sorted(committed.items())
        ]
        return info

    # Share groups --------------------------------------------------------------------

    def _ask(self, host: str, port: int, request: Any) -> Any:
        try:
            wire = WireConnection(
                host, port, "strom-console", connect_timeout_s=5.0, request_timeout_s=TIMEOUT_S
            )
            try:
                return wire.request(request)
            finally:
                wire.close()
        except Exception as exc:
            raise ConsoleError(f"cannot ask {host}:{port}: {exc}") from None

    def _share_coordinator(self, group_id: str, brokers: list[tuple[str, int]]) -> tuple[str, int]:
        for _ in range(10):
            found = self._ask(*brokers[0], FindCoordinatorRequest(key=group_id, key_type=i8(0)))
            if found.error_code == 0:
                return found.host, found.port
            time.sleep(0.2)
        raise ConsoleError(f"COORDINATOR_NOT_AVAILABLE: no coordinator for {group_id!r}")

    def share_groups(self) -> list[ShareGroupInfo]:
        """Every share group with its state, member count and share-partitions."""
        brokers = sorted((b.host, b.port) for b in self._metadata().brokers.values())
        if not brokers:
            return []
        states: dict[str, str] = {}
        for host, port in brokers:
            listed = self._ask(host, port, ListGroupsRequest(types_filter=("share",)))
            for group in listed.groups if listed.error_code == 0 else ():
                states[group.group_id] = group.group_state
        infos = []
        for group_id, state in sorted(states.items()):
            info = ShareGroupInfo(group_id, state)
            coordinator = self._share_coordinator(group_id, brokers)
            described = self._ask(
                *coordinator,
                ShareGroupDescribeRequest(
                    group_ids=(GroupId(group_id),), include_authorized_operations=False
                ),
            )
            if described.groups and described.groups[0].error_code == 0:
                info.members = len(described.groups[0].members)
            offsets = self._ask(
                *coordinator,
                share_offsets_request.DescribeShareGroupOffsetsRequest(
                    groups=(
                        share_offsets_request.DescribeShareGroupOffsetsRequestGroup(
                            group_id=GroupId(group_id), topics=None
                        ),
                    )
                ),
            )
            for group in offsets.groups:
                for topic in group.topics:
                    info.partitions += [
                        SharePartitionInfo(
                            topic.topic_name, p.partition_index, p.start_offset, p.lag
                        )
                        for p in topic.partitions
                        if p.error_code == 0
                    ]
            info.partitions.sort(key=lambda p: (p.topic, p.partition))
            infos.append(info)
        return infos

    def reset_offsets(self, group_id: str, topic: str, to: str, value: int = 0) -> None:
        """Move the group's committed offsets on ``topic`` to "earliest", "latest", an
        "offset" or a "time" (ms), as kafka-consumer-groups.sh --reset-offsets does; the
        cluster refuses while the group has members."""
        metadata = self._metadata()
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise ConsoleError(f"UNKNOWN_TOPIC_OR_PARTITION: no topic {topic!r}")
        numbers = sorted(metadata.topics[topic].partitions)
        bounds = self.offsets([TopicPartition(topic, p) for p in numbers])
        targets = []
        for p in numbers:
            low, high = bounds.get((topic, p), (0, 0))
            if to == "earliest":
                offset = low
            elif to == "latest":
                offset = high
            elif to == "offset":
                offset = min(max(value, low), high)
            else:
                consumer = Consumer({**self.settings, "group.id": f"strom-console-{p}"})
                try:
                    found = consumer.offsets_for_times(
                        [TopicPartition(topic, p, value)], TIMEOUT_S
                    )[0].offset
                finally:
                    consumer.close()
                offset = found if found >= 0 else high
            targets.append(TopicPartition(topic, p, offset))
        request = [ConsumerGroupTopicPartitions(group_id, targets)]
        try:
            result = self.admin.alter_consumer_group_offsets(request)[group_id].result()
        except Exception as exc:
            raise _raise(exc) from None
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise ConsoleError(f"{failed[0].error.name()}: {failed[0].error.str()}")


class RegistryDecoder:
    """Values in Confluent's wire format (a 0 byte, the schema id, the encoded value)
    decoded with the schema registry: Avro to JSON, JSON Schema's JSON as it is;
    Protobuf and anything not in the wire format are shown as hex."""

    def __init__(self, url: str, client_settings: dict[str, str] | None = None) -> None:
        """``client_settings``: SchemaRegistryClient settings beside the URL (auth, TLS)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.client = SchemaRegistryClient({**(client_settings or {}), "url": url})
        self._avro: dict[int, Any] = {}

    def decode(self, data: bytes | None) -> bytes | None:
        if data is None or len(data) < 5 or data[0] != 0:
            return data
        schema_id = int.from_bytes(data[1:5], "big")
        try:
            schema = self.client.get_schema(schema_id)
        except Exception as exc:
            return json.dumps({"schema id": schema_id, "error": str(exc)}).encode()
        body = data[5:]
        if schema.schema_type == "JSON":
            return body
        if schema.schema_type == "AVRO":
            import io

            import avro.io
            import avro.schema

            parsed = self._avro.get(schema_id)
            if parsed is None:
                assert schema.schema_str is not None  # a schema the registry holds has text
                parsed = self._avro[schema_id] = avro.schema.parse(schema.schema_str)
            value = avro.io.DatumReader(parsed).read(avro.io.BinaryDecoder(io.BytesIO(body)))
            return json.dumps(value, default=str).encode()
        return json.dumps({"schema id": schema_id, "protobuf": body.hex(" ")}).encode()


def render_value(data: bytes | None, form: str) -> str:
    """A key or value as text, pretty JSON (text when it is not JSON) or hex."""
    if data is None:
        return "null"
    if form == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", "replace")
    if form == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text
