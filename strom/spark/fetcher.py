"""A small blocking Kafka client that fetches the raw record batches of one partition.

Owns the Spark source's wire protocol: Metadata v8 (through the bootstrap servers) to
find the partition's leader, Fetch v11 by topic name with large size limits, and
ListOffsets v4 for the log's bounds after OFFSET_OUT_OF_RANGE. Connections are
:class:`strom.wire_client.WireConnection`s; responses are decoded with kio, except Fetch
responses, read in place by :func:`parse_fetch_v11` so that the records are never
copied (each connection reuses one receive buffer). Plaintext connections only (no TLS, no
SASL): :mod:`strom.spark.reader` sends other setups through confluent-kafka.

One request may be in flight ahead (:meth:`PartitionFetcher.send_fetch` then
:meth:`PartitionFetcher.receive_fetch`): the reader asks for the next data before it
decodes the current one, so the broker works while the Python worker decodes.
Connection loss and leadership errors are :class:`RetriableFetchError`; the caller
calls :meth:`PartitionFetcher.reconnect` (fresh metadata) and asks again.
"""

from __future__ import annotations

import datetime
import logging
import struct
from dataclasses import dataclass

from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v4.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from strom.protocol.errors import ErrorCode
from strom.wire_client import WireConnection, split_bootstrap

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
# per request and per partition (one partition). Measured with 100-B records: 2-4 MiB
# beat 16 MiB by 15-20% in Spark and standalone (smaller working set; likely the caches).
FETCH_MAX_BYTES = 4 * 1024 * 1024
FETCH_MAX_WAIT_MS = 500
SOCKET_BUFFER = 4 * 1024 * 1024
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

# Partition errors after which fresh metadata (a new leader) may help.
RETRIABLE_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
    }
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# partition index, error code, high watermark, last stable offset, log start offset,
# aborted transaction count
_PARTITION_HEAD = struct.Struct(">ihqqqi")


class FetchError(RuntimeError):
    """A request failed in a way that asking again will not fix."""


class RetriableFetchError(FetchError):
    """The connection was lost or the partition moved: reconnect and ask again."""


@dataclass(slots=True)
class FetchedPartition:
    """One partition's part of a Fetch response."""

    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: memoryview  # into the connection's receive buffer


class _Connection(WireConnection):
    """The fetcher's connection: large receive buffer; a response out of order is a
    FetchError."""

    mismatch_error = FetchError

    def __init__(self, host: str, port: int, client_id: str) -> None:
        super().__init__(
            host,
            port,
            client_id,
            connect_timeout_s=CONNECT_TIMEOUT_S,
            request_timeout_s=REQUEST_TIMEOUT_S,
            receive_buffer=SOCKET_BUFFER,
        )


def parse_fetch_v11(frame: memoryview, topic: str, partition: int) -> FetchedPartition:
    """``partition``'s data in a Fetch v11 response frame (after the size), read in place:
    the records stay a view into ``frame``. kio would copy them; this is the hot path."""
    try:
        (error_code,) = _I16.unpack_from(frame, 8)  # after correlation id, throttle time
        if error_code:
            raise _partition_error(ErrorCode(error_code), topic, partition)
        pos = 14  # after the session id
        (topic_count,) = _I32.unpack_from(frame, pos)
        pos += 4
        for _ in range(topic_count):
            (name_size,) = _I16.unpack_from(frame, pos)
            name = bytes(frame[pos + 2 : pos + 2 + name_size]).decode()
            pos += 2 + name_size
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(partition_count):
                index, code, high_watermark, _stable, log_start, aborted = (
                    _PARTITION_HEAD.unpack_from(frame, pos)
                )
                pos += _PARTITION_HEAD.size + 16 * max(aborted, 0) + 4  # + preferred replica
                (size,) = _I32.unpack_from(frame, pos)
                pos += 4
                records = frame[pos : pos + max(size, 0)]
                pos += max(size, 0)
                if name == topic and index == partition:
                    return FetchedPartition(ErrorCode(code), high_watermark, log_start, records)
    except (struct.error, ValueError) as exc:
        raise FetchError(f"malformed fetch response: {exc}") from None
    raise FetchError(f"the fetch response has no data for {topic}-{partition}")


class PartitionFetcher:
    """Fetches one topic-partition from its leader, found through the bootstrap servers."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        *,
        client_id: str = "strom-spark",
        max_bytes: int = FETCH_MAX_BYTES,
    ) -> None:
        self.bootstrap = split_bootstrap(bootstrap)
        self.topic = topic
        self.partition = partition
        self.client_id = client_id
        self.max_bytes = max_bytes
        self.connection: _Connection | None = None

    def __enter__(self) -> PartitionFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    # -- connecting

    def reconnect(self) -> None:
        """Drop the connection (and what is in flight), find the leader, connect to it."""
        self.close()
        self.connection = self._connect_leader()

    def _connect_leader(self) -> _Connection:
        last: BaseException | None = None
        for host, port in self.bootstrap:
            try:
                conn = _Connection(host, port, self.client_id)
            except OSError as exc:
                last = exc
                continue
            try:
                leader = self._leader(conn)
            except (OSError, ConnectionError) as exc:
                conn.close()
                last = exc
                continue
            if leader == (host, port):
                return conn
            conn.close()
            try:
                return _Connection(*leader, self.client_id)
            except OSError as exc:
                raise RetriableFetchError(
                    f"cannot reach the leader of {self.topic}-{self.partition} at "
                    f"{leader[0]}:{leader[1]}: {exc}"
                ) from None
        raise RetriableFetchError(
            f"cannot reach a broker at {','.join(f'{h}:{p}' for h, p in self.bootstrap)}: {last}"
        )

    def _leader(self, conn: _Connection) -> tuple[str, int]:
        response = conn.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=TopicName(self.topic)),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        for topic in response.topics:
            if topic.name != self.topic:
                continue
            if topic.error_code != ErrorCode.none:
                raise _partition_error(topic.error_code, self.topic, self.partition)
            for part in topic.partitions:
                if part.partition_index != self.partition:
                    continue
                if part.error_code != ErrorCode.none and part.leader_id not in brokers:
                    raise _partition_error(part.error_code, self.topic, self.partition)
                if part.leader_id not in brokers:
                    raise RetriableFetchError(f"{self.topic}-{self.partition} has no leader")
                return brokers[part.leader_id]
        raise RetriableFetchError(f"no metadata for {self.topic}-{self.partition}")

    def _conn(self) -> _Connection:
        if self.connection is None:
            self.connection = self._connect_leader()
        return self.connection

    # -- requests

    def send_fetch(self, offset: int) -> None:
        request = FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=FETCH_MAX_WAIT_MS)),
            min_bytes=i32(1),
            max_bytes=i32(self.max_bytes),
            isolation_level=i8(0),
            topics=(
                FetchTopic(
                    topic=TopicName(self.topic),
                    partitions=(
                        FetchPartition(
                            partition=i32(self.partition),
                            fetch_offset=i64(offset),
                            partition_max_bytes=i32(self.max_bytes),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        try:
            self._conn().send(request)
        except OSError as exc:
            raise self._lost(exc) from None

    def receive_fetch(self) -> FetchedPartition:
        """The answer to the oldest fetch sent; partition errors are left to the caller.

        Its records are a view valid until the next request on this fetcher."""
        try:
            frame, _ = self._conn().receive_frame()
        except OSError as exc:
            raise self._lost(exc) from None
        return parse_fetch_v11(frame, self.topic, self.partition)

    def log_bounds(self) -> tuple[int, int]:
        """(log start offset, high watermark) of the partition, by ListOffsets."""
        bounds = []
        for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            request = ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(self.topic),
                        partitions=(
                            ListOffsetsPartition(
                                partition_index=i32(self.partition), timestamp=i64(timestamp)
                            ),
                        ),
                    ),
                ),
            )
            try:
                response = self._conn().request(request)
            except OSError as exc:
                raise self._lost(exc) from None
            part = response.topics[0].partitions[0]
            if part.error_code != ErrorCode.none:
                raise _partition_error(part.error_code, self.topic, self.partition)
            bounds.append(part.offset)
        return bounds[0], bounds[1]

    def _lost(self, exc: BaseException) -> RetriableFetchError:
        address = self.connection.address if self.connection else "the broker"
        self.close()
        return RetriableFetchError(f"connection to {address} lost: {exc}")


def _partition_error(code: ErrorCode, topic: str, partition: int) -> FetchError:
    kind = RetriableFetchError if code in RETRIABLE_ERRORS else FetchError
    return kind(f"{topic}-{partition}: {code.name.upper()}")
