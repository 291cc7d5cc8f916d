"""``strom metadata-quorum``: the KRaft quorum's state, like kafka-metadata-quorum.sh.

``describe --status`` prints the cluster id, the quorum's leader and epoch, the high
watermark of ``__cluster_metadata``, the largest follower lag (in offsets and in ms)
and the voters and observers, in the lines and the ``[{"id": 1, ...}]`` form of Kafka
4's tool (a zero directory id and an empty endpoint list are left out, as Kafka does).
``describe --replication`` is a table of every voter and observer: log end offset, lag
behind the leader, last fetch and last caught-up times (epoch ms, or ``N ms ago`` with
``--human-readable``) and Leader, Follower or Observer.

The question goes to a broker's client listener (``--bootstrap-server``) or to a
controller's listener (``--bootstrap-controller``) as one DescribeQuorum request (key
55) for partition 0 of ``__cluster_metadata``, at the highest version both sides know
(ApiVersions first); the cluster id comes from DescribeCluster (key 60) on the same
endpoint, and is ``null`` where the endpoint does not serve that (as Kafka's tool
would print an unknown id). Either endpoint over TLS and SASL as ``--command-config``
says. Not covered: ``add-controller`` and ``remove-controller``. A wrong argument is
one line and exit 2; an unreachable endpoint or an error code in the answer is one line
and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema

from strom.cli import wire
from strom.cli.common import ToolError, add_bootstrap
from strom.cli.output import Listing, add_output_option, emit_json, json_key, show, wants_json
from strom.cli.properties_file import add_config_file_option, client_security
from strom.client_security import ClientSecurity
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
BROKER_ENDPOINTS = 1  # DescribeCluster's endpoint type for the brokers
# The newest versions this tool can encode (kio's schemas).
KNOWN_VERSIONS = {DESCRIBE_QUORUM: 2, DESCRIBE_CLUSTER: 2}
UNKNOWN_CLUSTER_ID = "null"
# Answers that mean "ask again": an election is under way or the leader moved.
RETRIABLE = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.not_controller,
    ErrorCode.broker_not_available,
    ErrorCode.request_timed_out,
}
RETRIES = 15
RETRY_BACKOFF_S = 0.2


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "metadata-quorum",
        help="describe the KRaft metadata quorum (like kafka-metadata-quorum.sh)",
        description="Describe the KRaft metadata quorum's status and replication.",
    )
    add_bootstrap(parser, controller=True)
    add_config_file_option(parser, "--command-config", "admin client")
    parser.set_defaults(parser=parser)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="describe the metadata quorum")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="a short summary of the quorum")
    what.add_argument(
        "--replication", action="store_true", help="the replication state of each replica"
    )
    describe.add_argument(
        "--human-readable",
        action="store_true",
        help="with --replication: times as 'N ms ago' instead of epoch milliseconds",
    )
    add_output_option(describe)
    describe.set_defaults(run=run_describe, describe_parser=describe)


# Requests ------------------------------------------------------------------------


def endpoint_of(args: argparse.Namespace) -> str:
    endpoint: str = args.bootstrap_controller or args.bootstrap_server
    return endpoint


def usable_version(versions: dict[int, tuple[int, int]], api_key: int) -> int | None:
    """The highest version of ``api_key`` both the endpoint and this tool speak."""
    served = versions.get(api_key)
    if served is None:
        return None
    version = min(served[1], KNOWN_VERSIONS[api_key])
    return version if version >= served[0] else None


def _message_error(code: ErrorCode, message: str | None) -> str:
    name = wire.error_name(code)
    return f"{name}: {message}" if message else name


def describe_quorum(
    bootstrap: str,
    versions: dict[int, tuple[int, int]],
    security: ClientSecurity | None = None,
) -> Any:
    """The DescribeQuorum partition entry of ``__cluster_metadata-0``, once it has a
    leader; an error code that outlasts the retries is a ToolError."""
    version = usable_version(versions, DESCRIBE_QUORUM)
    if version is None:
        raise ToolError(f"the server at {bootstrap} does not serve DescribeQuorum")
    request_type = load_request_schema(DESCRIBE_QUORUM, version)
    request = build(
        request_type,
        topics=(
            build(
                nested(request_type, "TopicData"),
                topic_name=METADATA_TOPIC,
                partitions=(
                    build(
                        nested(request_type, "PartitionData"),
                        partition_index=METADATA_PARTITION,
                    ),
                ),
            ),
        ),
    )
    what = "describe the metadata quorum"
    problem = ""
    for attempt in range(RETRIES):
        if attempt:
            time.sleep(RETRY_BACKOFF_S)
        response = wire.send(bootstrap, request, what, security)
        if response.error_code != ErrorCode.none:
            problem = _message_error(response.error_code, getattr(response, "error_message", None))
            if response.error_code in RETRIABLE:
                continue
            raise ToolError(f"cannot {what}: {problem}")
        partition = _metadata_partition(response)
        if partition is None:
            raise ToolError(f"cannot {what}: no answer for {METADATA_TOPIC}-{METADATA_PARTITION}")
        if partition.error_code != ErrorCode.none:
            problem = _message_error(
                partition.error_code, getattr(partition, "error_message", None)
            )
            if partition.error_code in RETRIABLE:
                continue
            raise ToolError(f"cannot {what}: {problem}")
        if partition.leader_id < 0 or not any(
            v.replica_id == partition.leader_id for v in partition.current_voters
        ):
            problem = f"no leader (epoch {partition.leader_epoch})"
            continue
        return QuorumInfo.from_wire(partition, getattr(response, "nodes", ()))
    raise ToolError(f"cannot {what}: {problem}")


def _metadata_partition(response: Any) -> Any:
    for topic in response.topics:
        if topic.topic_name != METADATA_TOPIC:
            continue
        for partition in topic.partitions:
            if partition.partition_index == METADATA_PARTITION:
                return partition
    return None


def describe_cluster(
    bootstrap: str,
    versions: dict[int, tuple[int, int]],
    *,
    include_fenced: bool = False,
    controllers: bool = False,
    security: ClientSecurity | None = None,
) -> Any | None:
    """The DescribeCluster response, of the brokers or (``controllers``, KIP-919) of the
    controllers, or None where the endpoint lacks it."""
    version = usable_version(versions, DESCRIBE_CLUSTER)
    if version is None:
        return None
    request = build(
        load_request_schema(DESCRIBE_CLUSTER, version),
        include_cluster_authorized_operations=False,
        endpoint_type=wire.CONTROLLER_ENDPOINTS if controllers else BROKER_ENDPOINTS,
        include_fenced_brokers=include_fenced,
    )
    response = wire.send(bootstrap, request, "describe the cluster", security)
    if response.error_code != ErrorCode.none:
        problem = _message_error(response.error_code, response.error_message)
        raise ToolError(f"cannot describe the cluster: {problem}")
    return response


# The quorum as the tool shows it -------------------------------------------------


def kafka_uuid(value: uuid.UUID | None) -> str:
    """Kafka's Uuid.toString: 16 bytes in base64url without padding."""
    raw = value.bytes if value is not None else bytes(16)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _known(timestamp: int) -> int | None:
    return timestamp if timestamp >= 0 else None


@dataclass(frozen=True, slots=True)
class Replica:
    replica_id: int
    directory_id: uuid.UUID | None
    log_end_offset: int
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None

    @classmethod
    def from_wire(cls, state: Any) -> Replica:
        return cls(
            replica_id=int(state.replica_id),
            directory_id=getattr(state, "replica_directory_id", None),
            log_end_offset=int(state.log_end_offset),
            last_fetch_timestamp=_known(int(state.last_fetch_timestamp)),
            last_caught_up_timestamp=_known(int(state.last_caught_up_timestamp)),
        )


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[Replica, ...]
    observers: tuple[Replica, ...]
    endpoints: dict[int, tuple[str, ...]]  # node id -> "LISTENER://host:port" (v2)

    @classmethod
    def from_wire(cls, partition: Any, nodes: Any) -> QuorumInfo:
        endpoints = {
            int(node.node_id): tuple(
                f"{lst.name}://{f'[{lst.host}]' if ':' in lst.host else lst.host}:{lst.port}"
                for lst in node.listeners
            )
            for node in nodes
        }
        return cls(
            leader_id=int(partition.leader_id),
            leader_epoch=int(partition.leader_epoch),
            high_watermark=int(partition.high_watermark),
            voters=tuple(Replica.from_wire(v) for v in partition.current_voters),
            observers=tuple(Replica.from_wire(o) for o in partition.observers),
            endpoints=endpoints,
        )

    @property
    def leader(self) -> Replica:
        return next(v for v in self.voters if v.replica_id == self.leader_id)


def max_follower_lag(info: QuorumInfo) -> tuple[int, int]:
    """(offsets, ms) the furthest-behind voter trails the leader, as Kafka computes them."""
    leader = info.leader
    slowest = min(info.voters, key=lambda v: v.log_end_offset)
    lag = leader.log_end_offset - slowest.log_end_offset
    if slowest.log_end_offset == leader.log_end_offset:
        return lag, 0
    if leader.last_caught_up_timestamp is not None and slowest.last_caught_up_timestamp is not None:
        return lag, leader.last_caught_up_timestamp - slowest.last_caught_up_timestamp
    return lag, -1


def replica_list(info: QuorumInfo, replicas: tuple[Replica, ...]) -> str:
    """``[{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h:p"]}, ...]``."""
    parts = []
    for replica in replicas:
        text = f'{{"id": {replica.replica_id}'
        if replica.directory_id is not None and replica.directory_id.int != 0:
            text += f', "directoryId": {json.dumps(kafka_uuid(replica.directory_id))}'
        endpoints = info.endpoints.get(replica.replica_id, ())
        if endpoints:
            text += f', "endpoints": [{", ".join(json.dumps(e) for e in endpoints)}]'
        parts.append(text + "}")
    return "[" + ", ".join(parts) + "]"


def status_fields(cluster_id: str, info: QuorumInfo) -> list[tuple[str, Any]]:
    lag, lag_ms = max_follower_lag(info)
    return [
        ("ClusterId", cluster_id),
        ("LeaderId", info.leader_id),
        ("LeaderEpoch", info.leader_epoch),
        ("HighWatermark", info.high_watermark),
        ("MaxFollowerLag", lag),
        ("MaxFollowerLagTimeMs", lag_ms),
        ("CurrentVoters", replica_list(info, info.voters)),
        ("CurrentObservers", replica_list(info, info.observers)),
    ]


def status_lines(cluster_id: str, info: QuorumInfo) -> list[str]:
    return [f"{name + ':':<24}{value}" for name, value in status_fields(cluster_id, info)]


def _time(timestamp: int | None, human: bool, now_ms: int) -> str:
    if timestamp is None:
        return "-1"
    if human:
        return f"{max(0, now_ms - timestamp)} ms ago"
    return str(timestamp)


def replication_rows(info: QuorumInfo, human: bool) -> list[list[str]]:
    """Leader first, then the other voters, then the observers, as Kafka's tool."""
    leader = info.leader
    now_ms = int(time.time() * 1000)
    ordered = [(leader, "Leader")]
    ordered += [(v, "Follower") for v in info.voters if v.replica_id != info.leader_id]
    ordered += [(o, "Observer") for o in info.observers]
    return [
        [
            str(r.replica_id),
            kafka_uuid(r.directory_id),
            str(r.log_end_offset),
            str(leader.log_end_offset - r.log_end_offset),
            _time(r.last_fetch_timestamp, human, now_ms),
            _time(r.last_caught_up_timestamp, human, now_ms),
            status,
        ]
        for r, status in ordered
    ]


REPLICATION_COLUMNS = (
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
)


def table(columns: tuple[str, ...], rows: list[list[str]], numeric: Iterable[str] = ()) -> Listing:
    out = Listing(*columns, numeric=numeric)
    for row in rows:
        out.add_row(*row)
    return out


# The command ---------------------------------------------------------------------


def run_describe(args: argparse.Namespace) -> int:
    if args.human_readable and not args.replication:
        args.describe_parser.error("--human-readable is only supported with --replication")
    endpoint = endpoint_of(args)
    security = client_security(args)
    versions = wire.api_versions(endpoint, security)
    info = describe_quorum(endpoint, versions, security)
    if args.status:
        controllers = args.bootstrap_controller is not None
        cluster = describe_cluster(endpoint, versions, controllers=controllers, security=security)
        cluster_id = cluster.cluster_id if cluster is not None else UNKNOWN_CLUSTER_ID
        if wants_json(args):
            fields = status_fields(cluster_id, info)
            emit_json(args, [{json_key(name): _json_field(value) for name, value in fields}])
        else:
            print("\n".join(status_lines(cluster_id, info)))
    else:
        rows = replication_rows(info, args.human_readable)
        numeric: tuple[str, ...] = ("NodeId", "LogEndOffset", "Lag")
        if not args.human_readable:
            numeric += ("LastFetchTimestamp", "LastCaughtUpTimestamp")
        show(args, table(REPLICATION_COLUMNS, rows, numeric))
    return 0


def _json_field(value: Any) -> Any:
    """Status values as JSON: the voter and observer lists are JSON text already."""
    if isinstance(value, str) and value.startswith("["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
