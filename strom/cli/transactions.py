"""``strom transactions``: inspect transactions and end hanging ones, like kafka-transactions.sh.

The commands and their columns are those of Kafka's tool:

- ``list [--duration-filter MS]``: ListTransactions (key 66; v1 when filtering by
  duration, else v0) sent to every broker of the cluster's Metadata at its own
  endpoint, merged: TransactionalId, Coordinator, ProducerId, TransactionState.
- ``describe --transactional-id ID``: FindCoordinator (key type 1, transactional
  ids) through the bootstrap brokers, then DescribeTransactions (65) at the
  coordinator: the producer id and epoch, state, timeout, start time and age of the
  current transaction and its partitions.
- ``describe-producers --topic T --partition P [--broker-id B]``: DescribeProducers
  (61) at the partition's leader (or at broker B): each active producer's epoch, last
  coordinator epoch, last sequence and timestamp and the first offset of its open
  transaction.
- ``abort --topic T --partition P --start-offset O``: finds the producer whose open
  transaction on the partition starts at O (DescribeProducers at the leader) and has
  the leader write an abort marker for it (WriteTxnMarkers v1, as a coordinator
  would). With ``--producer-id``, ``--producer-epoch`` and ``--coordinator-epoch``
  instead, the marker is written for that producer without the lookup. This is how
  an operator ends a hanging transaction, one whose coordinator will never send a
  marker, which holds read_committed consumers back at its first offset.
- ``find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout
  MIN]``: the open transactions (DescribeProducers) on the broker's or topic's
  partitions whose last write is older than the timeout (15 minutes by default) and
  that their coordinator does not know: no transactional id lists that producer id
  (ListTransactions on every broker), the id is not found, or its transaction does
  not hold that partition (DescribeTransactions).

It differs from Kafka's tool in two ways: ``--start-offset`` and ``--producer-id``
exclude each other (Kafka's tool ignores the latter when both are given), and an
abort that succeeds says so in one line. Not covered: ``list
--transactional-id-pattern`` (ListTransactions v2). A client over the wire (raw
requests through ``strom.cli.wire``, Metadata through confluent-kafka), both over TLS
and SASL as ``--command-config`` says (before or after the command, as
``--bootstrap-server``): it works against any Kafka cluster. DescribeTransactions
answers are read field by field with kio's readers, because kio's own reader refuses
the -1 start time Kafka sends for "no transaction under way".
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest as ListV0
from kio.schema.list_transactions.v1.request import ListTransactionsRequest as ListV1
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.serial import entity_reader
from kio.serial.readers import (
    compact_array_reader,
    read_compact_array_length,
    read_compact_string,
    read_error_code,
    read_int16,
    read_int32,
    read_int64,
    read_unsigned_varint,
)
from kio.static.primitive import i8, i16, i32, i64
from kio.static.protocol import RequestPayload

from strom.cli import wire
from strom.cli.common import DEFAULT_BOOTSTRAP, ToolError, check_reachable, wire_int
from strom.cli.output import Listing as Table
from strom.cli.output import add_output_option, show
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.protocol.errors import ErrorCode

TRANSACTION_KEY_TYPE = i8(1)
RETRIES = 25
RETRY_BACKOFF_S = 0.2
MAX_BATCH = 500  # partitions per DescribeProducers, as Kafka's tool batches them
DEFAULT_MAX_TIMEOUT_MIN = 15
NO_START = -1  # Kafka's "no transaction under way" start time and start offset

TopicPartition = tuple[str, int]
T = TypeVar("T")


# Arguments ---------------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "transactions",
        help="list, describe and abort transactions (like kafka-transactions.sh)",
        description="Analyse the transactional state of producers in the cluster; "
        "find and abort hanging transactions.",
    )
    _add_connection_options(parser, DEFAULT_BOOTSTRAP, None)
    actions = parser.add_subparsers(dest="action", required=True, metavar="COMMAND")

    listing = _command(actions, "list", "list transactions (every broker's coordinator)")
    listing.add_argument(
        "--duration-filter",
        type=int,
        metavar="MS",
        help="only transactions running longer than MS milliseconds (< 0: all)",
    )
    listing.set_defaults(run=run_list)

    describe = _command(actions, "describe", "describe the state of a transactional id")
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    describe.set_defaults(run=run_describe)

    producers = _command(
        actions, "describe-producers", "describe the active producers of a topic partition"
    )
    _add_partition(producers, required=True)
    producers.add_argument(
        "--broker-id",
        type=wire_int("int32"),
        metavar="B",
        help="ask this broker (a replica) instead of the partition's leader",
    )
    producers.set_defaults(run=run_describe_producers)

    abort = _command(actions, "abort", "abort a hanging transaction")
    _add_partition(abort, required=True)
    abort.add_argument(
        "--start-offset",
        type=wire_int("int64"),
        metavar="O",
        help="start offset of the transaction to abort",
    )
    abort.add_argument(
        "--producer-id",
        type=wire_int("int64"),
        metavar="ID",
        help="producer id (instead of --start-offset)",
    )
    abort.add_argument("--producer-epoch", type=int, metavar="E", help="with --producer-id")
    abort.add_argument(
        "--coordinator-epoch", type=wire_int("int32"), metavar="C", help="with --producer-id"
    )
    abort.set_defaults(run=run_abort)

    hanging = _command(actions, "find-hanging", "find hanging transactions")
    hanging.add_argument(
        "--broker-id", type=int, metavar="B", help="search the partitions this broker holds"
    )
    _add_partition(hanging, required=False)
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=DEFAULT_MAX_TIMEOUT_MIN,
        metavar="MIN",
        help="only transactions whose last write is older than this, in minutes "
        f"(default {DEFAULT_MAX_TIMEOUT_MIN})",
    )
    hanging.set_defaults(run=run_find_hanging)
    for command in (listing, describe, producers, hanging):
        add_output_option(command)


def _add_connection_options(
    parser: argparse.ArgumentParser, bootstrap_default: Any, config_default: Any
) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=bootstrap_default,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    add_config_file_option(parser, "--command-config", "admin client", config_default)


def _command(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    command = actions.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + "."
    )
    # Also after the command (as other strom tools take them); SUPPRESS keeps a value
    # given before the command from being overwritten by this parser's default.
    _add_connection_options(command, argparse.SUPPRESS, argparse.SUPPRESS)
    command.set_defaults(parser=command)
    return command


def _add_partition(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--topic", required=required, metavar="T", help="topic name")
    parser.add_argument("--partition", type=wire_int("int32"), required=required, metavar="P")


def _check_not_negative(parser: argparse.ArgumentParser, **values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative, got {value}")


# Wire ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What Metadata tells: each broker's endpoint, each partition's leader and replicas."""

    access: ClusterAccess
    brokers: dict[int, str]
    partitions: dict[TopicPartition, tuple[int, tuple[int, ...]]]

    def send(self, broker_id: int, request: RequestPayload, what: str) -> Any:
        """``request`` to the broker's own endpoint, its response."""
        return self.access.send(request, what, self.endpoint(broker_id))

    def endpoint(self, broker_id: int) -> str:
        address = self.brokers.get(broker_id)
        if address is None:
            raise ToolError(f"broker {broker_id} is not in the cluster")
        return address

    def check_topic(self, topic: str) -> None:
        if not any(t == topic for t, _ in self.partitions):
            raise ToolError(f"topic {topic!r} does not exist")

    def leader(self, topic: str, partition: int) -> int:
        found = self.partitions.get((topic, partition))
        if found is None:
            self.check_topic(topic)
            raise ToolError(f"topic {topic!r} has no partition {partition}")
        if found[0] < 0:
            raise ToolError(f"partition {topic}-{partition} has no leader")
        return found[0]


def _cluster(access: ClusterAccess) -> Cluster:
    admin = AdminClient(access.client_config())
    metadata = check_reachable(admin, access.bootstrap)
    return Cluster(
        access=access,
        brokers={b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()},
        partitions={
            (name, p.id): (p.leader, tuple(p.replicas))
            for name, topic in metadata.topics.items()
            for p in topic.partitions.values()
        },
    )


def _retrying(call: Callable[[], tuple[ErrorCode, T]], what: str) -> T:
    """``call()`` again while it answers a retriable error; another error is a ToolError."""
    for _ in range(RETRIES):
        error, result = call()
        if error == ErrorCode.none:
            return result
        if error not in wire.RETRIABLE:
            raise ToolError(f"cannot {what}: {wire.error_name(error)}")
        time.sleep(RETRY_BACKOFF_S)
    raise ToolError(f"cannot {what}: the coordinator is not available")


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# Requests ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


def list_transactions(
    cluster: Cluster, duration_ms: int | None = None, producer_ids: Iterable[int] = ()
) -> list[Listing]:
    """ListTransactions at every broker, merged (each answers for what it coordinates)."""
    pids = tuple(ProducerId(pid) for pid in producer_ids)
    request: ListV0 | ListV1
    if duration_ms is None:
        request = ListV0(producer_id_filters=pids)
    else:
        request = ListV1(producer_id_filters=pids, duration_filter=i64(duration_ms))
    out: list[Listing] = []
    for broker_id in sorted(cluster.brokers):
        what = f"list the transactions of broker {broker_id}"

        def ask(broker_id: int = broker_id, what: str = what) -> tuple[ErrorCode, Any]:
            response = cluster.send(broker_id, request, what)
            return response.error_code, response

        response = _retrying(ask, what)
        out.extend(
            Listing(t.transactional_id, broker_id, int(t.producer_id), t.transaction_state)
            for t in response.transaction_states
        )
    return sorted(out, key=lambda t: (t.coordinator, t.transactional_id))


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    address: str


def find_coordinator(access: ClusterAccess, transactional_id: str) -> Coordinator:
    what = f"find the coordinator of transactional id {transactional_id!r}"
    request = FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY_TYPE)

    def ask() -> tuple[ErrorCode, Coordinator]:
        response = access.send(request, what)
        return response.error_code, Coordinator(
            int(response.node_id), f"{response.host}:{response.port}"
        )

    return _retrying(ask, what)


@dataclass(frozen=True)
class Description:
    """One transactional id as DescribeTransactions v0 answers it."""

    error: ErrorCode
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int  # NO_START: no transaction under way
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


_read_topics = compact_array_reader(entity_reader(TopicData))


class _Reader:
    """A position in a response frame; kio's readers answer (value, bytes read)."""

    def __init__(self, frame: bytes, pos: int) -> None:
        self.buf = memoryview(frame)
        self.pos = pos

    def read(self, reader: Callable[[memoryview, int], tuple[Any, int]]) -> Any:
        value, size = reader(self.buf, self.pos)
        self.pos += size
        return value

    def skip_tagged_fields(self) -> None:
        for _ in range(self.read(read_unsigned_varint)):
            self.read(read_unsigned_varint)  # tag
            self.pos += self.read(read_unsigned_varint)  # size, then the value


def decode_describe_transactions(frame: bytes) -> list[Description]:
    """A DescribeTransactions v0 response frame (correlation id first), field by field."""
    r = _Reader(frame, 4)  # past the correlation id
    r.skip_tagged_fields()  # the response header's
    r.read(read_int32)  # throttle time
    out: list[Description] = []
    for _ in range(r.read(read_compact_array_length) or 0):
        error = r.read(read_error_code)
        transactional_id = r.read(read_compact_string)
        state = r.read(read_compact_string)
        timeout_ms = r.read(read_int32)
        start_ms = r.read(read_int64)
        producer_id = r.read(read_int64)
        producer_epoch = r.read(read_int16)
        topics = r.read(_read_topics)
        r.skip_tagged_fields()
        out.append(
            Description(
                error,
                transactional_id,
                state,
                timeout_ms,
                start_ms,
                producer_id,
                producer_epoch,
                tuple((t.topic, int(p)) for t in topics or () for p in t.partitions),
            )
        )
    return out


def describe_transaction(
    access: ClusterAccess, transactional_id: str
) -> tuple[Coordinator, Description | None]:
    """The coordinator of ``transactional_id`` and its description (None: not found)."""
    what = f"describe transactional id {transactional_id!r}"
    request = DescribeTransactionsRequest(transactional_ids=(TransactionalId(transactional_id),))
    found: list[Coordinator] = []

    def ask() -> tuple[ErrorCode, Description | None]:
        coordinator = find_coordinator(access, transactional_id)
        found[:] = [coordinator]
        frame = wire.send_for_frame(coordinator.address, request, what, access.security)
        answers = decode_describe_transactions(frame)
        if len(answers) != 1:
            raise ToolError(f"cannot {what}: {len(answers)} answers to one question")
        if answers[0].error == ErrorCode.transactional_id_not_found:
            return ErrorCode.none, None
        return answers[0].error, answers[0]

    description = _retrying(ask, what)
    return found[0], description


@dataclass(frozen=True)
class Producer:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int  # NO_START: no open transaction


def describe_producers(
    cluster: Cluster, broker_id: int, partitions: list[TopicPartition]
) -> dict[TopicPartition, list[Producer]]:
    """DescribeProducers for ``partitions`` at ``broker_id``; a partition's error is a
    ToolError."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    request = DescribeProducersRequest(
        topics=tuple(
            TopicRequest(name=TopicName(topic), partition_indexes=tuple(map(i32, indexes)))
            for topic, indexes in by_topic.items()
        )
    )
    what = f"describe the producers of {_partition_names(partitions)} on broker {broker_id}"
    response = cluster.send(broker_id, request, what)
    out: dict[TopicPartition, list[Producer]] = {}
    for topic in response.topics:
        for part in topic.partitions:
            key = (topic.name, int(part.partition_index))
            if part.error_code != ErrorCode.none:
                raise ToolError(
                    f"cannot describe the producers of {key[0]}-{key[1]} on broker "
                    f"{broker_id}: {wire.error_name(part.error_code)}"
                )
            out[key] = [
                Producer(
                    int(p.producer_id),
                    int(p.producer_epoch),
                    int(p.coordinator_epoch),
                    int(p.last_sequence),
                    int(p.last_timestamp),
                    int(p.current_txn_start_offset),
                )
                for p in part.active_producers
            ]
    return out


def _partition_names(partitions: list[TopicPartition]) -> str:
    if len(partitions) == 1:
        return f"{partitions[0][0]}-{partitions[0][1]}"
    return f"{len(partitions)} partitions"


def write_abort_marker(
    cluster: Cluster,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    """An abort marker for the producer on the partition, written by its leader."""
    leader = cluster.leader(topic, partition)
    request = WriteTxnMarkersRequest(
        markers=(
            WritableTxnMarker(
                producer_id=ProducerId(producer_id),
                producer_epoch=i16(producer_epoch),
                transaction_result=False,
                topics=(
                    WritableTxnMarkerTopic(
                        name=TopicName(topic), partition_indexes=(i32(partition),)
                    ),
                ),
                coordinator_epoch=i32(coordinator_epoch),
            ),
        )
    )
    what = f"abort the transaction of producer {producer_id} on {topic}-{partition}"
    response = cluster.send(leader, request, what)
    errors = [
        part.error_code
        for marker in response.markers
        for result in marker.topics
        for part in result.partitions
    ]
    if not errors:
        raise ToolError(f"cannot {what}: the leader answered for no partition")
    for error in errors:
        if error != ErrorCode.none:
            raise ToolError(f"cannot {what}: {wire.error_name(error)}")


# Commands ----------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    cluster = _cluster(cluster_access(args))
    listings = list_transactions(cluster, args.duration_filter)
    table = _table("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
    for t in listings:
        _add_row(table, t.transactional_id, str(t.coordinator), str(t.producer_id), t.state)
    show(args, table)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    transactional_id = args.transactional_id
    if not transactional_id:
        args.parser.error("--transactional-id must not be empty")
    coordinator, description = describe_transaction(cluster_access(args), transactional_id)
    if description is None:
        raise ToolError(
            f"cannot describe transactional id {transactional_id!r}: TRANSACTIONAL_ID_NOT_FOUND"
        )
    if description.start_ms == NO_START:
        start, duration = "None", "None"
    else:
        start = str(description.start_ms)
        duration = str(int(time.time() * 1000) - description.start_ms)
    table = _table(
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    )
    _add_row(
        table,
        str(coordinator.node_id),
        transactional_id,
        str(description.producer_id),
        str(description.producer_epoch),
        description.state,
        str(description.timeout_ms),
        start,
        duration,
        ",".join(f"{t}-{p}" for t, p in description.partitions),
    )
    show(args, table)
    return 0


def run_describe_producers(args: argparse.Namespace) -> int:
    _check_not_negative(args.parser, partition=args.partition)
    cluster = _cluster(cluster_access(args))
    key = (args.topic, args.partition)
    if args.broker_id is None:
        broker_id = cluster.leader(*key)
    else:
        if key not in cluster.partitions:
            cluster.leader(*key)  # names the missing topic or partition
        broker_id = args.broker_id
    producers = describe_producers(cluster, broker_id, [key]).get(key, [])
    table = _table(
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    )
    for p in producers:
        _add_row(
            table,
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch),
            str(p.last_sequence),
            str(p.last_timestamp),
            "None" if p.txn_start_offset == NO_START else str(p.txn_start_offset),
        )
    show(args, table)
    return 0


def run_abort(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    _check_not_negative(
        parser,
        partition=args.partition,
        start_offset=args.start_offset,
        producer_id=args.producer_id,
        producer_epoch=args.producer_epoch,
    )
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is None and args.producer_id is None:
        parser.error(
            "name the transaction to abort with --start-offset, or with --producer-id, "
            "--producer-epoch and --coordinator-epoch"
        )
    if args.start_offset is not None and any(v is not None for v in by_producer):
        parser.error("--start-offset excludes --producer-id, --producer-epoch, --coordinator-epoch")
    if args.start_offset is None and args.producer_epoch is None:
        parser.error("--producer-id needs --producer-epoch and --coordinator-epoch")
    if args.start_offset is None and args.coordinator_epoch is None:
        parser.error("--producer-id needs --producer-epoch and --coordinator-epoch")
    if args.producer_epoch is not None and args.producer_epoch > 32767:
        parser.error(f"--producer-epoch must be at most 32767, got {args.producer_epoch}")
    cluster = _cluster(cluster_access(args))
    topic, partition = args.topic, args.partition
    if args.start_offset is None:
        producer_id, producer_epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = args.coordinator_epoch
        where = ""
    else:
        leader = cluster.leader(topic, partition)
        producers = describe_producers(cluster, leader, [(topic, partition)])
        found = [
            p
            for p in producers.get((topic, partition), [])
            if p.txn_start_offset == args.start_offset
        ]
        if not found:
            raise ToolError(
                f"no open transaction starts at offset {args.start_offset} "
                f"on partition {topic}-{partition}"
            )
        producer_id, producer_epoch = found[0].producer_id, found[0].producer_epoch
        coordinator_epoch = found[0].coordinator_epoch
        where = f" starting at offset {args.start_offset}"
    # A producer whose first transaction hangs has no coordinator epoch yet (-1); 0 is
    # at most any epoch a coordinator could have written, as Kafka's tool reasons.
    coordinator_epoch = max(coordinator_epoch, 0)
    write_abort_marker(cluster, topic, partition, producer_id, producer_epoch, coordinator_epoch)
    print(
        f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}, "
        f"coordinator epoch {coordinator_epoch}) on {topic}-{partition}{where}."
    )
    return 0


def run_find_hanging(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    _check_not_negative(
        parser,
        broker_id=args.broker_id,
        partition=args.partition,
        max_transaction_timeout=args.max_transaction_timeout,
    )
    if args.topic is None and args.broker_id is None:
        parser.error("give --broker-id or --topic to limit the search")
    if args.partition is not None and args.topic is None:
        parser.error("--partition needs --topic")
    cluster = _cluster(cluster_access(args))
    if args.broker_id is not None:
        cluster.endpoint(args.broker_id)  # a broker of the cluster
    partitions = _partitions_to_search(cluster, args.topic, args.partition, args.broker_id)
    max_ms = args.max_transaction_timeout * 60_000
    now_ms = int(time.time() * 1000)
    # Open transactions whose last write is older than the longest timeout allowed.
    candidates: list[tuple[TopicPartition, Producer]] = []
    by_broker: dict[int, list[TopicPartition]] = {}
    for key in partitions:
        broker_id = args.broker_id if args.broker_id is not None else cluster.leader(*key)
        by_broker.setdefault(broker_id, []).append(key)
    for broker_id, keys in sorted(by_broker.items()):
        for batch in _batches(keys, MAX_BATCH):
            for key, producers in describe_producers(cluster, broker_id, batch).items():
                candidates.extend(
                    (key, p)
                    for p in producers
                    if p.txn_start_offset != NO_START and now_ms - p.last_timestamp > max_ms
                )
    hanging = _hanging(cluster, candidates)
    table = _table(
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    )
    for (topic, index), p in hanging:
        _add_row(
            table,
            topic,
            str(index),
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch),
            str(p.txn_start_offset),
            str(p.last_timestamp),
            str((now_ms - p.last_timestamp) // 60_000),
        )
    show(args, table)
    return 0


def _partitions_to_search(
    cluster: Cluster, topic: str | None, partition: int | None, broker_id: int | None
) -> list[TopicPartition]:
    if topic is not None and partition is not None:
        cluster.leader(topic, partition)  # exists, and has a leader to ask
        return [(topic, partition)]
    if topic is not None:
        cluster.check_topic(topic)
    return sorted(
        key
        for key, (_, replicas) in cluster.partitions.items()
        if (topic is None or key[0] == topic) and (broker_id is None or broker_id in replicas)
    )


def _hanging(
    cluster: Cluster, candidates: list[tuple[TopicPartition, Producer]]
) -> list[tuple[TopicPartition, Producer]]:
    """The candidates whose coordinator does not know their transaction on that partition."""
    if not candidates:
        return []
    producer_ids = sorted({p.producer_id for _, p in candidates})
    transactional_ids = {
        t.producer_id: t.transactional_id
        for t in list_transactions(cluster, producer_ids=producer_ids)
        if t.producer_id in producer_ids
    }
    partitions_of: dict[int, set[TopicPartition]] = {}
    for producer_id, transactional_id in transactional_ids.items():
        _, description = describe_transaction(cluster.access, transactional_id)
        if description is not None:
            partitions_of[producer_id] = set(description.partitions)
    return [(key, p) for key, p in candidates if key not in partitions_of.get(p.producer_id, set())]


# Output ------------------------------------------------------------------------------

NUMERIC = {
    "Coordinator",
    "CoordinatorId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
    "Partition",
    "CoordinatorEpoch",
    "StartOffset",
    "Duration(min)",
}


def _table(*columns: str) -> Table:
    return Table(*columns, numeric=[c for c in columns if c in NUMERIC])


def _add_row(table: Table, *cells: str) -> None:
    table.add_row(*cells)
