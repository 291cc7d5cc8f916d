"""Records whose timestamp is 0, written by Strom's own Produce request.

librdkafka (confluent-kafka) reads a produce timestamp of 0 as "the time of sending",
so a record stamped 0 (a ksql query's output of a record at epoch 0, an INSERT VALUES
with ROWTIME 0) cannot reach the log through it with CreateTime 0. ``ZeroTimeWriter``
writes such records itself: one magic-2 batch a partition (``strom.protocol.records``),
a Produce v9 request with acks=all to the partition's leader over a blocking
``strom.wire_client.WireConnection`` (TLS and SASL as the client properties say), and
waits for the acknowledgement. A record without a partition goes where Kafka's Java
producer puts it: murmur2 of the key, a random partition for no key. A leader that
moved (NOT_LEADER_OR_FOLLOWER and its kin) is looked up again and the partition's
batch sent again, a few times; any other error is ``ZeroTimeError`` (one line).

The caller keeps order: it flushes its own producer before these records and sends
its later records after ``send`` returned. Not transactional and not idempotent: a
batch retried after a lost response may be written twice (at-least-once). Works
against any Kafka broker; never imports broker code.

``ZeroTimeTransaction`` is the transactional kind: a whole Kafka transaction (records
stamped 0 and others, each with its own timestamp, and a group offset) written by the
transactional producer's own requests, for an exactly-once writer whose records
librdkafka would restamp.
"""

from __future__ import annotations

import datetime
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from strom.client_security import ClientSecurity
from strom.protocol.errors import ErrorCode
from strom.protocol.records import ATTR_TRANSACTIONAL, build_batch
from strom.wire_client import WireConnection, split_bootstrap

CLIENT_ID = "strom-zero-time"
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
PRODUCE_TIMEOUT_MS = 30_000
ATTEMPTS = 5
RETRY_BACKOFF_S = 0.1
# Partition errors after which fresh metadata (a new leader) may help.
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


class ZeroTimeError(RuntimeError):
    """Records that could not be written (one line: the partition and why)."""


def murmur2(data: bytes) -> int:
    """MurmurHash2 of ``data`` (seed 0x9747b28c), as a signed 32-bit int: the hash
    Kafka's Java producer places keyed records by."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for at in range(0, whole, 4):
        k = int.from_bytes(data[at : at + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition Kafka's Java producer gives ``key`` (a random one for no key)."""
    if key is None:
        return random.randrange(partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class ZeroTimeRecord:
    """A record to write with timestamp 0 (``partition`` None: by its key); in a
    ``ZeroTimeTransaction`` with ``timestamp``, 0 or not."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    partition: int | None = None
    timestamp: int = 0


@dataclass
class _Metadata:
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)


class ZeroTimeWriter:
    """Writes records with timestamp 0 to a cluster (``config``: librdkafka's names,
    ``bootstrap.servers`` and the security settings); ``close`` when done."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.bootstrap = split_bootstrap(str(config.get("bootstrap.servers", "")))
        self.security = ClientSecurity.from_properties(config)
        self.connections: dict[tuple[str, int], WireConnection] = {}
        self.metadata = _Metadata()
        self.lock = threading.Lock()  # one request at a time on the connections

    def close(self) -> None:
        with self.lock:
            for connection in self.connections.values():
                connection.close()
            self.connections.clear()

    def __enter__(self) -> ZeroTimeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self, address: tuple[str, int]) -> WireConnection:
        found = self.connections.get(address)
        if found is None:
            found = self.connections[address] = WireConnection(
                *address,
                CLIENT_ID,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                request_timeout_s=REQUEST_TIMEOUT_S,
                security=self.security,
            )
        return found

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self.connections.pop(address, None)
        if connection is not None:
            connection.close()

    def _refresh(self, topics: set[str]) -> None:
        request = MetadataRequest(
            topics=tuple(MetadataRequestTopic(name=TopicName(t)) for t in sorted(topics)),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        failure: BaseException | None = None
        for address in [*self.connections, *self.bootstrap]:
            try:
                response = self._connection(address).request(request)
            except (OSError, ConnectionError) as exc:
                self._drop(address)
                failure = exc
                continue
            metadata = self.metadata
            metadata.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            for topic in response.topics:
                if topic.error_code != ErrorCode.none:
                    continue
                metadata.partitions[topic.name] = len(topic.partitions)
                for part in topic.partitions:
                    metadata.leaders[(topic.name, part.partition_index)] = part.leader_id
            return
        raise ZeroTimeError(f"cannot reach a broker for metadata: {failure}")

    def send(self, records: Sequence[ZeroTimeRecord]) -> None:
        """Write ``records`` with timestamp 0 (each partition's in their order) and wait
        for the cluster's acknowledgements."""
        if not records:
            return
        with self.lock:
            self._send(records)

    def _send(self, records: Sequence[ZeroTimeRecord]) -> None:
        topics = {r.topic for r in records}
        if any(t not in self.metadata.partitions for t in topics):
            self._refresh(topics)
        batches: dict[tuple[str, int], list[ZeroTimeRecord]] = {}
        for record in records:
            count = self.metadata.partitions.get(record.topic)
            if count is None or count == 0:
                raise ZeroTimeError(f"topic {record.topic} is not in the cluster's metadata")
            partition = record.partition
            if partition is None:
                partition = partition_for(record.key, count)
            batches.setdefault((record.topic, partition), []).append(record)
        pending = dict(batches)
        for attempt in range(ATTEMPTS):
            retry: dict[tuple[str, int], list[ZeroTimeRecord]] = {}
            failure = ""
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for place in pending:
                leader = self.metadata.brokers.get(self.metadata.leaders.get(place, -1))
                if leader is None:
                    retry[place] = pending[place]
                    failure = f"{place[0]}-{place[1]} has no leader"
                    continue
                by_leader.setdefault(leader, []).append(place)
            for leader, places in by_leader.items():
                try:
                    errors = self._produce(leader, {p: pending[p] for p in places})
                except (OSError, ConnectionError) as exc:
                    self._drop(leader)
                    retry.update({p: pending[p] for p in places})
                    failure = f"{leader[0]}:{leader[1]}: {exc}"
                    continue
                for place, code in errors.items():
                    if code not in RETRIABLE or attempt == ATTEMPTS - 1:
                        raise ZeroTimeError(
                            f"writing to {place[0]}-{place[1]}: {code.name.upper()}"
                        )
                    retry[place] = pending[place]
                    failure = f"{place[0]}-{place[1]}: {code.name.upper()}"
            if not retry:
                return
            pending = retry
            self._refresh({topic for topic, _ in pending})
        raise ZeroTimeError(f"records not written after {ATTEMPTS} attempts: {failure}")

    def _batch(self, topic: str, partition: int, records: Sequence[ZeroTimeRecord]) -> bytes:
        """The partition's records as one batch, stamped 0."""
        return build_batch([(r.key, r.value, list(r.headers)) for r in records], base_timestamp=0)

    def _transactional_id(self) -> TransactionalId | None:
        return None

    def _produce(
        self, leader: tuple[str, int], batches: dict[tuple[str, int], list[ZeroTimeRecord]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """One Produce request to ``leader``; the partitions that failed, with why."""
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for (topic, partition), records in batches.items():
            batch = self._batch(topic, partition, records)
            by_topic.setdefault(topic, []).append(
                PartitionProduceData(index=i32(partition), records=Records(batch))
            )
        request = ProduceRequest(
            transactional_id=self._transactional_id(),
            acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=PRODUCE_TIMEOUT_MS)),
            topic_data=tuple(
                TopicProduceData(name=TopicName(topic), partition_data=tuple(parts))
                for topic, parts in by_topic.items()
            ),
        )
        response = self._connection(leader).request(request)
        errors: dict[tuple[str, int], ErrorCode] = {}
        answered: set[tuple[str, int]] = set()
        for topic in response.responses:
            for part in topic.partition_responses:
                place = (str(topic.name), int(part.index))
                answered.add(place)
                if part.error_code != ErrorCode.none:
                    errors[place] = part.error_code
        for place in batches:
            if place not in answered:
                errors[place] = ErrorCode.unknown_server_error
        return errors


class ZeroTimeTransaction(ZeroTimeWriter):
    """One Kafka transaction written by Strom's own requests, for records that
    librdkafka would restamp (those stamped 0) written atomically with others: the
    transactional producer's protocol (FindCoordinator, InitProducerId, which fences an
    earlier producer of ``transactional_id`` and aborts what it left open,
    AddPartitionsToTxn, Produce with the producer id, epoch, each partition's sequence
    and the transactional flag, AddOffsetsToTxn and TxnOffsetCommit, EndTxn). Each
    record keeps its own ``timestamp`` (CreateTime), 0 included. ``init`` once, then
    ``send`` and ``send_offsets`` any number of times, then ``commit`` or ``abort``;
    ``close`` when done. Errors are ``ZeroTimeError``."""

    def __init__(
        self, config: Mapping[str, Any], transactional_id: str, timeout_ms: int = 60_000
    ) -> None:
        super().__init__(config)
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[tuple[str, int], int] = {}
        self._added: set[tuple[str, int]] = set()
        self._open = False  # a partition or a group's offsets added: EndTxn ends it
        self._coordinators: dict[tuple[str, int], tuple[str, int]] = {}  # (key, kind)

    def _transactional_id(self) -> TransactionalId | None:
        return TransactionalId(self.transactional_id) if self.producer_id >= 0 else None

    def _batch(self, topic: str, partition: int, records: Sequence[ZeroTimeRecord]) -> bytes:
        """The partition's records as one transactional batch at the partition's next
        sequence (the same again when the batch is sent again)."""
        return build_batch(
            [(r.key, r.value, list(r.headers)) for r in records],
            timestamps=[r.timestamp for r in records],
            attributes=ATTR_TRANSACTIONAL,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self._sequences.get((topic, partition), 0),
        )

    def _coordinator(self, key: str, kind: int) -> tuple[str, int]:
        """The coordinator of ``key`` (kind 0 a group, 1 a transactional id)."""
        found = self._coordinators.get((key, kind))
        if found is not None:
            return found
        failure = ""
        for _ in range(ATTEMPTS * 4):
            for address in [*self.connections, *self.bootstrap]:
                try:
                    response = self._connection(address).request(
                        FindCoordinatorRequest(key=key, key_type=i8(kind))
                    )
                except (OSError, ConnectionError) as exc:
                    self._drop(address)
                    failure = str(exc)
                    continue
                if response.error_code == ErrorCode.none:
                    found = (str(response.host), int(response.port))
                    self._coordinators[(key, kind)] = found
                    return found
                failure = response.error_code.name.upper()
                break
            time.sleep(RETRY_BACKOFF_S)
        raise ZeroTimeError(f"no coordinator for {key}: {failure}")

    def _ask(self, key: str, kind: int, make: Callable[[], Any], what: str) -> Any:
        """A request to ``key``'s coordinator, sent again while its error is one that
        passes (a coordinator loading, moved, or a transaction still ending); the
        response, or ``ZeroTimeError``."""
        failure = ""
        for _ in range(ATTEMPTS * 20):
            address = self._coordinator(key, kind)
            try:
                response = self._connection(address).request(make())
            except (OSError, ConnectionError) as exc:
                self._drop(address)
                self._coordinators.pop((key, kind), None)
                failure = str(exc)
                time.sleep(RETRY_BACKOFF_S)
                continue
            code = _response_error(response)
            if code == ErrorCode.none:
                return response
            failure = code.name.upper()
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                self._coordinators.pop((key, kind), None)
            elif code not in _PASSING:
                break
            time.sleep(RETRY_BACKOFF_S)
        raise ZeroTimeError(f"{what} of {self.transactional_id}: {failure}")

    def init(self) -> None:
        """InitProducerId: this transactional id's producer id and a new epoch (an
        earlier producer of the id fenced, a transaction it left open aborted)."""
        response = self._ask(
            self.transactional_id,
            1,
            lambda: InitProducerIdRequest(
                transactional_id=TransactionalId(self.transactional_id),
                transaction_timeout=i32Timedelta.parse(
                    datetime.timedelta(milliseconds=self.timeout_ms)
                ),
            ),
            "InitProducerId",
        )
        self.producer_id, self.producer_epoch = (
            int(response.producer_id),
            int(response.producer_epoch),
        )

    def send(self, records: Sequence[ZeroTimeRecord]) -> None:
        """Write ``records`` in the transaction (each partition's in their order), each
        with its own timestamp; the partitions new to the transaction added first."""
        if not records:
            return
        with self.lock:
            topics = {r.topic for r in records}
            if any(t not in self.metadata.partitions for t in topics):
                self._refresh(topics)
            placed = [self._placed(r) for r in records]
            new = sorted({(r.topic, int(r.partition or 0)) for r in placed} - self._added)
            if new:
                self._add_partitions(new)
            self._send(placed)
            for record in placed:
                place = (record.topic, int(record.partition or 0))
                self._sequences[place] = self._sequences.get(place, 0) + 1

    def _placed(self, record: ZeroTimeRecord) -> ZeroTimeRecord:
        if record.partition is not None:
            return record
        count = self.metadata.partitions.get(record.topic)
        if not count:
            raise ZeroTimeError(f"topic {record.topic} is not in the cluster's metadata")
        partition = partition_for(record.key, count)
        return ZeroTimeRecord(
            record.topic, record.key, record.value, record.headers, partition, record.timestamp
        )

    def _add_partitions(self, places: list[tuple[str, int]]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in places:
            by_topic.setdefault(topic, []).append(partition)
        response = self._ask(
            self.transactional_id,
            1,
            lambda: AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TransactionalId(self.transactional_id),
                v3_and_below_producer_id=ProducerId(self.producer_id),
                v3_and_below_producer_epoch=i16(self.producer_epoch),
                v3_and_below_topics=tuple(
                    AddPartitionsToTxnTopic(
                        name=TopicName(topic), partitions=tuple(i32(p) for p in parts)
                    )
                    for topic, parts in by_topic.items()
                ),
            ),
            "AddPartitionsToTxn",
        )
        del response
        self._added.update(places)
        self._open = True

    def send_offsets(
        self, group_id: str, topic: str, partition: int, offset: int, metadata: str | None
    ) -> None:
        """Commit ``offset`` of ``topic``-``partition`` for ``group_id`` with the
        transaction (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator)."""
        self._ask(
            self.transactional_id,
            1,
            lambda: AddOffsetsToTxnRequest(
                transactional_id=TransactionalId(self.transactional_id),
                producer_id=ProducerId(self.producer_id),
                producer_epoch=i16(self.producer_epoch),
                group_id=GroupId(group_id),
            ),
            "AddOffsetsToTxn",
        )
        self._open = True
        self._ask(
            group_id,
            0,
            lambda: TxnOffsetCommitRequest(
                transactional_id=TransactionalId(self.transactional_id),
                group_id=GroupId(group_id),
                producer_id=ProducerId(self.producer_id),
                producer_epoch=i16(self.producer_epoch),
                group_instance_id=None,
                topics=(
                    TxnOffsetCommitRequestTopic(
                        name=TopicName(topic),
                        partitions=(
                            TxnOffsetCommitRequestPartition(
                                partition_index=i32(partition),
                                committed_offset=i64(offset),
                                committed_metadata=metadata,
                            ),
                        ),
                    ),
                ),
            ),
            "TxnOffsetCommit",
        )

    def commit(self) -> None:
        self._end(True)

    def abort(self) -> None:
        self._end(False)

    def _end(self, committed: bool) -> None:
        if self.producer_id < 0 or not self._open:
            return  # nothing begun on the coordinator's side: nothing to end
        self._ask(
            self.transactional_id,
            1,
            lambda: EndTxnRequest(
                transactional_id=TransactionalId(self.transactional_id),
                producer_id=ProducerId(self.producer_id),
                producer_epoch=i16(self.producer_epoch),
                committed=committed,
            ),
            "EndTxn",
        )
        self._added.clear()
        self._open = False


# Errors a coordinator answers that pass: asked again after a while.
_PASSING = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.concurrent_transactions,
        ErrorCode.request_timed_out,
    }
)


def _response_error(response: Any) -> ErrorCode:
    """A coordinator response's first error: its own, else a partition's."""
    code = getattr(response, "error_code", ErrorCode.none)
    if code != ErrorCode.none:
        return ErrorCode(code)
    topics: Any = getattr(response, "results_by_topic_v3_and_below", None)
    if topics is None:
        topics = getattr(response, "topics", ())
    for topic in topics:
        parts: Any = getattr(topic, "results_by_partition", None)
        if parts is None:
            parts = getattr(topic, "partitions", ())
        for part in parts:
            part_code: Any = getattr(part, "partition_error_code", None)
            if part_code is None:
                part_code = getattr(part, "error_code", ErrorCode.none)
            if part_code != ErrorCode.none:
                return ErrorCode(part_code)
    return ErrorCode.none
