"""``strom share-groups``: list, describe, reset and delete share groups
(kafka-share-groups.sh, KIP-932).

Owns the tool's arguments and what it prints. librdkafka's admin client has no share
group calls, so the requests go on the Kafka wire (``ClusterAccess.send``): ListGroups
(type ``share``) to every broker, FindCoordinator, then ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and
DeleteGroups to the group's coordinator; partitions and their offsets come from
confluent-kafka's AdminClient. Works against Kafka 4.1+ as against Strom.

- ``--list [--state [S,S2]]``: group names; with ``--state`` their states too.
- ``--describe --group G``: per share-partition the start offset (the first record not
  yet finished with) and the lag; ``--members``: the members and their assignments;
  ``--state``: state, coordinator, assignor, group epoch and member count.
- ``--reset-offsets --group G (--topic T[:P,P2] | --all-topics)`` with
  ``--to-earliest``, ``--to-latest``, ``--to-offset N`` or ``--to-datetime
  YYYY-MM-DDTHH:mm:SS.sss``: the plan is printed; ``--dry-run`` (the default) changes
  nothing, ``--execute`` alters the start offsets (the group must have no members).
- ``--delete-offsets --group G --topic T``: forgets the group's state for a topic.
- ``--delete --group G``: deletes empty share groups.

Does not own the wire connection (``strom.cli.wire``) or the output forms
(``strom.cli.output``).
"""

from __future__ import annotations

import argparse
import builtins  # annotations in _Tool, whose method ``list`` hides the builtin there
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0.request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from strom.cli.common import ToolError, add_bootstrap, check_reachable, describe_error, wire_int
from strom.cli.groups import parse_datetime, parse_topic
from strom.cli.output import Listing, add_output_option, note, show
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.cli.wire import endpoint, error_name
from strom.protocol.errors import ErrorCode

REQUEST_TIMEOUT_S = 15.0
COORDINATOR_RETRIES = 10
STATES = ("Empty", "Stable", "Dead", "Unknown")
SCENARIOS = ("to_earliest", "to_latest", "to_offset", "to_datetime")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "share-groups",
        help="list, describe, reset offsets of, delete share groups (like kafka-share-groups.sh)",
        description="List, describe and delete share groups; reset or delete their "
        "share-partition start offsets.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list share groups")
    action.add_argument(
        "--describe", action="store_true", help="start offsets and lag, members or state"
    )
    action.add_argument(
        "--reset-offsets",
        action="store_true",
        help="plan (--dry-run) or make (--execute) new start offsets",
    )
    action.add_argument("--delete", action="store_true", help="delete share groups")
    action.add_argument(
        "--delete-offsets", action="store_true", help="delete a share group's state of --topic"
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    add_output_option(parser)
    parser.add_argument("--group", action="append", metavar="G", help="share group (repeatable)")
    parser.add_argument(
        "--all-groups", action="store_true", help="every share group (--describe, --delete)"
    )
    parser.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P2]",
        help="topic, optionally its partitions (--reset-offsets, --delete-offsets)",
    )
    parser.add_argument(
        "--all-topics",
        action="store_true",
        help="with --reset-offsets: every topic the group has state for",
    )
    parser.add_argument("--members", action="store_true", help="with --describe: the members")
    parser.add_argument(
        "--offsets", action="store_true", help="with --describe: start offsets and lag (default)"
    )
    parser.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="S,S2",
        help="with --list: show states, keep only these (e.g. Stable,Empty); "
        "with --describe: the group's state",
    )
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    scenario.add_argument("--to-latest", action="store_true", help="reset to the log end")
    scenario.add_argument(
        "--to-offset", type=wire_int("int64"), metavar="N", help="reset to offset N"
    )
    scenario.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset at or after this time",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="with --reset-offsets: only print the plan"
    )
    mode.add_argument(
        "--execute", action="store_true", help="with --reset-offsets: alter the start offsets"
    )
    parser.set_defaults(run=run, parser=parser)


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    groups = args.group or []
    chosen = [name for name in SCENARIOS if getattr(args, name) not in (None, False)]
    if args.list and (groups or args.all_groups):
        parser.error("--list takes no --group")
    if args.all_groups and groups:
        parser.error("use either --group or --all-groups")
    if args.all_groups and not (args.describe or args.delete):
        parser.error("--all-groups goes with --describe or --delete")
    if (args.describe or args.delete) and not (groups or args.all_groups):
        parser.error("--group (or --all-groups) is required")
    if (args.reset_offsets or args.delete_offsets) and len(groups) != 1:
        parser.error("--reset-offsets and --delete-offsets need exactly one --group")
    if args.topic and not (args.reset_offsets or args.delete_offsets):
        parser.error("--topic goes with --reset-offsets or --delete-offsets")
    if args.delete_offsets and not args.topic:
        parser.error("--delete-offsets needs --topic")
    if args.all_topics and not args.reset_offsets:
        parser.error("--all-topics goes with --reset-offsets")
    views = [v for v in ("members", "offsets") if getattr(args, v)]
    if views and not args.describe:
        parser.error(f"--{views[0]} goes with --describe")
    if args.state is not None:
        if not (args.list or args.describe):
            parser.error("--state goes with --list or --describe")
        if args.describe and args.state:
            parser.error("--state takes no value with --describe")
    if args.describe and len(views) + (args.state is not None) > 1:
        parser.error("use one of --members, --offsets, --state")
    if chosen and not args.reset_offsets:
        parser.error(f"--{chosen[0].replace('_', '-')} goes with --reset-offsets")
    if (args.dry_run or args.execute) and not args.reset_offsets:
        parser.error("--dry-run and --execute go with --reset-offsets")
    if args.reset_offsets:
        if bool(args.topic) == args.all_topics:
            parser.error("--reset-offsets needs either --topic or --all-topics")
        if not chosen:
            parser.error(
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
                "--to-datetime"
            )
        if args.to_offset is not None and args.to_offset < 0:
            parser.error("--to-offset must be 0 or more")


def _states(parser: argparse.ArgumentParser, text: str) -> set[str]:
    wanted = set()
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        match = next((s for s in STATES if s.lower() == item.lower()), None)
        if match is None:
            parser.error(f"unknown share group state {item!r} (one of {', '.join(STATES)})")
        wanted.add(match)
    return wanted


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    _check_arguments(parser, args)
    topics = [parse_topic(parser, t) for t in args.topic or []]
    timestamp = parse_datetime(parser, args.to_datetime) if args.to_datetime else None
    states = _states(parser, args.state) if args.list and args.state else set()
    access = cluster_access(args)
    admin = AdminClient(access.client_config())
    check_reachable(admin, access.bootstrap)
    tool = _Tool(access, admin, args)
    if args.list:
        return tool.list(args.state is not None, states)
    groups = tool.all_groups() if args.all_groups else list(dict.fromkeys(args.group))
    if args.describe:
        return tool.describe(groups)
    if args.delete:
        return tool.delete(groups)
    if args.delete_offsets:
        return tool.delete_offsets(groups[0], [t.topic for t in topics])
    return tool.reset(groups[0], topics, timestamp)


@dataclass
class _Tool:
    access: ClusterAccess
    admin: AdminClient
    args: argparse.Namespace

    # The wire ---------------------------------------------------------------------

    def coordinator(self, group: str) -> str:
        """The address of the group's coordinator (FindCoordinator, retried while none)."""
        what = f"find the coordinator of share group {group!r}"
        for _ in range(COORDINATOR_RETRIES):
            response = self.access.send(FindCoordinatorRequest(key=group, key_type=i8(0)), what)
            if response.error_code == ErrorCode.none:
                return endpoint(response.host, response.port)
            if response.error_code not in (
                ErrorCode.coordinator_not_available,
                ErrorCode.coordinator_load_in_progress,
                ErrorCode.not_coordinator,
            ):
                raise ToolError(f"cannot {what}: {error_name(ErrorCode(response.error_code))}")
            time.sleep(0.2)
        raise ToolError(f"cannot {what}: no coordinator is available")

    def brokers(self) -> list[str]:
        response = self.access.send(
            DescribeClusterRequest(include_cluster_authorized_operations=False),
            "describe the cluster",
        )
        if response.error_code != ErrorCode.none:
            reason = error_name(ErrorCode(response.error_code))
            raise ToolError(f"cannot describe the cluster: {reason}")
        return [endpoint(b.host, b.port) for b in response.brokers]

    def listed(self) -> list[tuple[str, str]]:
        """(group, state) of every share group, from every broker."""
        found: dict[str, str] = {}
        for address in self.brokers():
            response = self.access.send(
                ListGroupsRequest(types_filter=("share",)), "list share groups", address
            )
            if response.error_code != ErrorCode.none:
                reason = error_name(ErrorCode(response.error_code))
                raise ToolError(f"cannot list share groups at {address}: {reason}")
            for group in response.groups:
                found[group.group_id] = group.group_state
        return sorted(found.items())

    def all_groups(self) -> list[str]:
        return [group for group, _ in self.listed()]

    def described(self, group: str) -> Any:
        response = self.access.send(
            ShareGroupDescribeRequest(
                group_ids=(GroupId(group),), include_authorized_operations=False
            ),
            f"describe share group {group!r}",
            self.coordinator(group),
        )
        described = response.groups[0]
        if described.error_code != ErrorCode.none:
            raise ToolError(_group_error(group, described.error_code, described.error_message))
        return described

    def offsets(self, group: str, topics: list[str] | None) -> list[tuple[str, int, int, int]]:
        """(topic, partition, start offset, lag) of the group's share-partitions."""
        request = DescribeShareGroupOffsetsRequest(
            groups=(
                DescribeShareGroupOffsetsRequestGroup(
                    group_id=GroupId(group),
                    topics=None
                    if topics is None
                    else tuple(
                        DescribeShareGroupOffsetsRequestTopic(
                            topic_name=TopicName(t),
                            partitions=tuple(i32(p) for p in self.partitions(t)),
                        )
                        for t in topics
                    ),
                ),
            )
        )
        response = self.access.send(
            request, f"describe the offsets of share group {group!r}", self.coordinator(group)
        )
        described = response.groups[0]
        if described.error_code != ErrorCode.none:
            raise ToolError(_group_error(group, described.error_code, described.error_message))
        rows = []
        for topic in described.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.none:
                    reason = error_name(ErrorCode(p.error_code))
                    raise ToolError(f"{topic.topic_name}-{p.partition_index}: {reason}")
                rows.append((topic.topic_name, p.partition_index, p.start_offset, p.lag))
        return sorted(rows)

    def partitions(self, topic: str) -> list[int]:
        try:
            metadata = self.admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ToolError(
                f"cannot read the partitions of {topic!r}: {describe_error(exc)}"
            ) from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise ToolError(f"topic {topic!r} does not exist")
        return sorted(found.partitions)

    def log_offsets(self, wanted: dict[TopicPartition, Any]) -> dict[tuple[str, int], int]:
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
        out = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(future.result(REQUEST_TIMEOUT_S + 5).offset)
            except KafkaException as exc:
                raise ToolError(
                    f"cannot list the offsets of {tp.topic}-{tp.partition}: {describe_error(exc)}"
                ) from None
        return out

    # The actions -----------------------------------------------------------------

    def list(self, with_states: bool, states: set[str]) -> int:
        rows = [(g, s) for g, s in self.listed() if not states or s in states]
        if not with_states and self.args.output is None:
            for group, _ in rows:
                print(group)
            return 0
        listing = Listing("GROUP", "STATE") if with_states else Listing("GROUP")
        for group, state in rows:
            listing.add_row(*((group, state) if with_states else (group,)))
        show(self.args, listing)
        return 0

    def describe(self, groups: builtins.list[str]) -> int:
        for group in groups:
            if self.args.members:
                self._members(group)
            elif self.args.state is not None:
                self._state(group)
            else:
                self._offsets(group)
        return 0

    def _offsets(self, group: str) -> None:
        listing = Listing(
            "GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG",
            numeric=("PARTITION", "START-OFFSET", "LAG"),
        )  # fmt: skip
        for topic, partition, start, lag in self.offsets(group, None):
            listing.add_row(group, topic, partition, _text(start), _text(lag))
        if not listing.rows:
            note(self.args, f"Share group '{group}' has no share-partition state.")
            return
        show(self.args, listing)

    def _members(self, group: str) -> None:
        described = self.described(group)
        listing = Listing(
            "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT",
            numeric=("#PARTITIONS",),
        )  # fmt: skip
        for member in described.members:
            assigned = [
                f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}"
                for tp in sorted(member.assignment.topic_partitions, key=lambda t: t.topic_name)
            ]
            count = sum(len(tp.partitions) for tp in member.assignment.topic_partitions)
            listing.add_row(
                group,
                member.member_id,
                member.client_host,
                member.client_id,
                count,
                ";".join(assigned) or "-",
            )
        if not listing.rows:
            note(self.args, f"Share group '{group}' has no active members.")
            return
        show(self.args, listing)

    def _state(self, group: str) -> None:
        described = self.described(group)
        listing = Listing(
            "GROUP", "COORDINATOR (ID)", "STATE", "ASSIGNOR", "GROUP-EPOCH", "#MEMBERS",
            numeric=("GROUP-EPOCH", "#MEMBERS"),
        )  # fmt: skip
        coordinator = self.coordinator(group)
        listing.add_row(
            group,
            coordinator,
            described.group_state,
            described.assignor_name,
            described.group_epoch,
            len(described.members),
        )
        show(self.args, listing)

    def reset(self, group: str, topics: builtins.list[Any], timestamp: int | None) -> int:
        args = self.args
        if args.all_topics:
            wanted = sorted({(t, p) for t, p, _, _ in self.offsets(group, None)})
            if not wanted:
                raise ToolError(f"share group {group!r} has no share-partition state to reset")
        else:
            wanted = []
            for spec in topics:
                known = self.partitions(spec.topic)
                chosen = known if spec.partitions is None else list(spec.partitions)
                missing = sorted(set(chosen) - set(known))
                if missing:
                    raise ToolError(f"topic {spec.topic!r} has no partition {missing[0]}")
                wanted += [(spec.topic, p) for p in chosen]
        earliest = self.log_offsets(
            {TopicPartition(t, p): OffsetSpec.earliest() for t, p in wanted}
        )
        latest = self.log_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted})
        if args.to_earliest:
            target = earliest
        elif args.to_latest:
            target = latest
        elif timestamp is not None:
            found = self.log_offsets(
                {TopicPartition(t, p): OffsetSpec.for_timestamp(timestamp) for t, p in wanted}
            )
            target = {tp: latest[tp] if o < 0 else o for tp, o in found.items()}
        else:
            target = {tp: int(args.to_offset) for tp in wanted}
        plan = {tp: max(earliest[tp], min(target[tp], latest[tp])) for tp in wanted}
        listing = Listing(
            "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", numeric=("PARTITION", "NEW-OFFSET")
        )
        for (topic, partition), offset in sorted(plan.items()):
            listing.add_row(group, topic, partition, offset)
        if args.execute:
            self._alter(group, plan)
        show(args, listing)
        if not args.execute:
            note(args, "Dry run: nothing was changed (--execute to alter the start offsets).")
        return 0

    def _alter(self, group: str, plan: dict[tuple[str, int], int]) -> None:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(plan.items()):
            by_topic.setdefault(topic, []).append((partition, offset))
        request = AlterShareGroupOffsetsRequest(
            group_id=GroupId(group),
            topics=tuple(
                AlterShareGroupOffsetsRequestTopic(
                    topic_name=TopicName(topic),
                    partitions=tuple(
                        AlterShareGroupOffsetsRequestPartition(
                            partition_index=i32(p), start_offset=i64(o)
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )
        what = f"reset the offsets of share group {group!r}"
        response = self.access.send(request, what, self.coordinator(group))
        if response.error_code != ErrorCode.none:
            raise ToolError(
                f"cannot {what}: {_group_error(group, response.error_code, response.error_message)}"
            )
        for topic in response.responses:
            for p in topic.partitions:
                if p.error_code != ErrorCode.none:
                    reason = error_name(ErrorCode(p.error_code))
                    raise ToolError(
                        f"cannot {what}: {topic.topic_name}-{p.partition_index}: {reason}"
                    )

    def delete_offsets(self, group: str, topics: builtins.list[str]) -> int:
        request = DeleteShareGroupOffsetsRequest(
            group_id=GroupId(group),
            topics=tuple(
                DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t))
                for t in dict.fromkeys(topics)
            ),
        )
        what = f"delete the offsets of share group {group!r}"
        response = self.access.send(request, what, self.coordinator(group))
        if response.error_code != ErrorCode.none:
            raise ToolError(
                f"cannot {what}: {_group_error(group, response.error_code, response.error_message)}"
            )
        listing = Listing("TOPIC", "STATUS")
        failed = False
        for topic in response.responses:
            ok = topic.error_code == ErrorCode.none
            failed |= not ok
            listing.add_row(topic.topic_name, "Successful" if ok else _status(topic.error_code))
        show(self.args, listing)
        return 1 if failed else 0

    def delete(self, groups: builtins.list[str]) -> int:
        failed = False
        listing = Listing("GROUP", "STATUS")
        for group in groups:
            response = self.access.send(
                DeleteGroupsRequest(groups_names=(GroupId(group),)),
                f"delete share group {group!r}",
                self.coordinator(group),
            )
            result = response.results[0]
            ok = result.error_code == ErrorCode.none
            failed |= not ok
            listing.add_row(group, "Deleted" if ok else _status(result.error_code))
        show(self.args, listing)
        return 1 if failed else 0


def _status(code: int) -> str:
    return f"Error: {error_name(ErrorCode(code))}"


def _group_error(group: str, code: int, message: str | None) -> str:
    error = ErrorCode(code)
    if error == ErrorCode.group_id_not_found:
        return f"share group {group!r} does not exist"
    if error == ErrorCode.non_empty_group:
        return f"share group {group!r} has active members: stop them first"
    text = error_name(error)
    return f"{text}: {message}" if message else text


def _text(value: int) -> str:
    return "-" if value < 0 else str(value)
