"""``strom groups``: list, describe, reset, delete consumer groups (kafka-consumer-groups.sh).

Built on confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, OffsetCommit through alter_consumer_group_offsets, DeleteGroups);
OffsetDelete, which the Python binding lacks, goes through ``strom.cli.wire``.
Everything works against any Kafka cluster.

- ``--list [--state [S,S2]]``: group names; with ``--state`` a table of groups
  and states, filtered to the states named.
- ``--describe --group G``: the members (id, client id, host, assigned
  partitions) and per partition the committed offset, log end offset, lag (log
  end offset minus committed offset) and the member consuming it; ``--members``
  shows only the members, ``--state`` only the group's state, coordinator and
  assignor.
- ``--reset-offsets --group G (--topic T[:P,P2] ... | --all-topics)`` with one of
  ``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--to-datetime
  YYYY-MM-DDTHH:mm:SS.sss`` (local time unless an offset such as ``Z`` follows),
  ``--shift-by N``; new offsets are clamped to [log start, log end]. The plan is
  printed; ``--dry-run`` (the default) changes nothing, ``--execute`` commits it
  and is refused while the group has active members. ``--all-topics`` means the
  partitions the group has committed offsets for. As in Kafka, a group that
  does not exist yet may be given offsets.
  ``--by-duration PnDTnHnMnS`` (now minus an ISO-8601 duration, as a time) and
  ``--from-file CSV`` (``topic,partition,offset`` lines, or ``group,topic,...``; taken
  as they are, not clamped, as Kafka does) are the other scenarios; ``--export``
  prints the plan as that CSV instead of the table.
- ``--delete --group G [--group G2]``, ``--delete-offsets --group G --topic T[:P]``.

``--group`` may be repeated, or replaced by ``--all-groups``, for
``--describe``, ``--reset-offsets`` and ``--delete``. Not covered:
``--to-current`` and ``--verbose``. A KIP-848 group in a state librdkafka does not name
(Assigning, Reconciling) shows as ``Unknown``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from strom.cli import wire
from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    wire_int,
)
from strom.cli.durations import parse_duration_ms
from strom.cli.output import Listing, add_output_option, note, show
from strom.cli.properties_file import (
    add_config_file_option,
    client_security,
    config_file_properties,
)

REQUEST_TIMEOUT_S = 15.0
STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
STATES_BY_NAME = {name.lower(): state for state, name in STATE_NAMES.items()}
INACTIVE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}
SCENARIOS = (
    "to_earliest",
    "to_latest",
    "to_offset",
    "to_datetime",
    "by_duration",
    "shift_by",
    "from_file",
)

Partition = tuple[str, int]


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "groups",
        help="list, describe, reset offsets of, delete consumer groups "
        "(like kafka-consumer-groups.sh)",
        description="List, describe and delete consumer groups; reset or delete their "
        "committed offsets.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list groups")
    action.add_argument(
        "--describe",
        action="store_true",
        help="members, committed offsets, log end offsets and lag",
    )
    action.add_argument(
        "--reset-offsets",
        action="store_true",
        help="plan (--dry-run) or commit (--execute) new offsets",
    )
    action.add_argument("--delete", action="store_true", help="delete groups")
    action.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete a group's committed offsets of --topic",
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    add_output_option(parser)
    parser.add_argument(
        "--group",
        action="append",
        metavar="G",
        help="group id (repeatable, except for --delete-offsets)",
    )
    parser.add_argument(
        "--all-groups",
        action="store_true",
        help="every group (--describe, --reset-offsets, --delete)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P2]",
        help="topic, optionally its partitions (repeatable; --reset-offsets, --delete-offsets)",
    )
    parser.add_argument(
        "--all-topics",
        action="store_true",
        help="with --reset-offsets: every partition the group committed",
    )
    parser.add_argument("--members", action="store_true", help="with --describe: only the members")
    parser.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="S,S2",
        help="with --list: show states, keep only these (e.g. Stable,Empty); "
        "with --describe: only the group's state",
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
    scenario.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="reset to the first offset at or after now minus this ISO-8601 duration",
    )
    scenario.add_argument(
        "--shift-by",
        type=wire_int("int64"),
        metavar="N",
        help="move the committed offset by N (negative: back)",
    )
    scenario.add_argument(
        "--from-file",
        metavar="CSV",
        help="reset to the offsets of a CSV file of topic,partition,offset lines "
        "(or group,topic,partition,offset, as --export writes for several groups)",
    )
    parser.add_argument(
        "--export",
        action="store_true",
        help="with --reset-offsets: print the plan as CSV (input for --from-file)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="with --reset-offsets: only print the plan (the default)",
    )
    mode.add_argument(
        "--execute", action="store_true", help="with --reset-offsets: commit the new offsets"
    )
    parser.set_defaults(run=run, parser=parser)


@dataclass(frozen=True)
class TopicSpec:
    topic: str
    partitions: tuple[int, ...] | None  # None: every partition


def parse_topic(parser: argparse.ArgumentParser, text: str) -> TopicSpec:
    """``T`` or ``T:0,2`` (Kafka topic names cannot hold a colon)."""
    topic, sep, rest = text.partition(":")
    if not topic:
        parser.error(f"--topic expects T or T:P,P2, got {text!r}")
    if not sep:
        return TopicSpec(topic, None)
    items = [p.strip() for p in rest.split(",")]
    if not items or not all(p.isdigit() for p in items):
        parser.error(f"--topic {text!r}: partitions must be numbers, e.g. {topic}:0,1")
    return TopicSpec(topic, tuple(sorted({int(p) for p in items})))


def parse_datetime(parser: argparse.ArgumentParser, text: str) -> int:
    """Milliseconds since the epoch; a time without an offset is local time, as in Kafka."""
    if "T" not in text:
        parser.error(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss, got {text!r}")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        parser.error(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss, got {text!r}")
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time zone
    return int(moment.timestamp() * 1000)


def parse_offsets_csv(text: str) -> list[tuple[str | None, str, int, int]]:
    """``topic,partition,offset`` or ``group,topic,partition,offset`` lines (Kafka's
    --export CSV) as (group or None, topic, partition, offset); ValueError naming the line."""
    rows: list[tuple[str | None, str, int, int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) not in (3, 4) or not all(cells):
            raise ValueError(
                f"line {number}: expected topic,partition,offset "
                f"(or group,topic,partition,offset), got {line.strip()!r}"
            )
        group = cells[0] if len(cells) == 4 else None
        topic, partition, offset = cells[-3:]
        if not partition.isdigit() or not offset.isdigit():
            raise ValueError(f"line {number}: partition and offset must be numbers: {line!r}")
        rows.append((group, topic, int(partition), int(offset)))
    if not rows:
        raise ValueError("no offsets in the file")
    return rows


def _read_offsets_file(
    parser: argparse.ArgumentParser, path: str
) -> list[tuple[str | None, str, int, int]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_offsets_csv(handle.read())
    except OSError as exc:
        parser.error(f"--from-file: cannot read {path}: {exc.strerror or exc}")
    except (ValueError, UnicodeDecodeError) as exc:
        parser.error(f"--from-file {path}: {exc}")


def _file_offsets_of(
    rows: list[tuple[str | None, str, int, int]], group: str
) -> dict[Partition, int]:
    """The file's offsets for ``group``: its own rows, or every group-less row."""
    return {
        (topic, partition): offset
        for row_group, topic, partition, offset in rows
        if row_group in (group, None)
    }


def parse_states(parser: argparse.ArgumentParser, text: str) -> set[ConsumerGroupState]:
    states: set[ConsumerGroupState] = set()
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        state = STATES_BY_NAME.get(item.lower())
        if state is None or state == ConsumerGroupState.UNKNOWN:
            known = ", ".join(n for s, n in STATE_NAMES.items() if s != ConsumerGroupState.UNKNOWN)
            parser.error(f"unknown group state {item!r} (one of {known})")
        states.add(state)
    return states


def _check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    chosen = [name for name in SCENARIOS if getattr(args, name) not in (None, False)]
    groups = args.group or []
    if args.list and (groups or args.all_groups):
        parser.error("--list takes no --group")
    if args.all_groups and groups:
        parser.error("use either --group or --all-groups")
    if (args.describe or args.reset_offsets or args.delete) and not (groups or args.all_groups):
        parser.error("--group (or --all-groups) is required")
    if args.delete_offsets:
        if len(groups) != 1 or args.all_groups:
            parser.error("--delete-offsets needs exactly one --group")
        if not args.topic:
            parser.error("--delete-offsets needs --topic")
    if args.topic and not (args.reset_offsets or args.delete_offsets):
        parser.error("--topic goes with --reset-offsets or --delete-offsets")
    if args.all_topics and not args.reset_offsets:
        parser.error("--all-topics goes with --reset-offsets")
    if args.members and not args.describe:
        parser.error("--members goes with --describe")
    if args.state is not None:
        if not (args.list or args.describe):
            parser.error("--state goes with --list or --describe")
        if args.describe and args.state:
            parser.error("--state takes no value with --describe")
        if args.describe and args.members:
            parser.error("use either --members or --state")
    if chosen and not args.reset_offsets:
        parser.error(f"--{chosen[0].replace('_', '-')} goes with --reset-offsets")
    if (args.dry_run or args.execute) and not args.reset_offsets:
        parser.error("--dry-run and --execute go with --reset-offsets")
    if args.export and not args.reset_offsets:
        parser.error("--export goes with --reset-offsets")
    if args.reset_offsets:
        if args.from_file is not None:
            if args.topic or args.all_topics:
                parser.error("--from-file names its partitions: no --topic or --all-topics")
        elif bool(args.topic) == args.all_topics:
            parser.error("--reset-offsets needs either --topic or --all-topics")
        if not chosen:
            parser.error(
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, "
                "--to-datetime, --by-duration, --shift-by, --from-file"
            )
        if args.to_offset is not None and args.to_offset < 0:
            parser.error("--to-offset must be 0 or more")


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    _check_arguments(parser, args)
    topics = [parse_topic(parser, t) for t in args.topic or []]
    timestamp = parse_datetime(parser, args.to_datetime) if args.to_datetime else None
    if args.by_duration is not None:
        try:
            timestamp = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        except ValueError as exc:
            parser.error(f"--by-duration: {exc}")
    from_file = _read_offsets_file(parser, args.from_file) if args.from_file else None
    states = parse_states(parser, args.state) if args.list and args.state else set()

    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    metadata = check_reachable(admin, args.bootstrap_server)
    if args.list:
        return _list(admin, args.state is not None, states, args)
    groups = _all_groups(admin) if args.all_groups else list(dict.fromkeys(args.group))
    if args.describe:
        return _describe(admin, groups, args)
    if args.reset_offsets:
        for group in groups:
            if from_file is not None:
                wanted = _file_offsets_of(from_file, group)
                if not wanted:
                    raise ToolError(f"{args.from_file} has no offsets for group {group!r}")
            else:
                wanted = None
            _reset(admin, metadata, group, topics, args, timestamp, wanted, len(groups) > 1)
        return 0
    if args.delete:
        return _delete(admin, groups)
    return _delete_offsets(admin, metadata, groups[0], topics, args)


# Helpers ------------------------------------------------------------------------


def _table(*columns: str, numeric: Iterable[str] = ()) -> Listing:
    return Listing(*columns, numeric=numeric)


def _add_row(table: Listing, *cells: str) -> None:
    table.add_row(*cells)


def _result(future: Any, what: str) -> Any:
    try:
        return future.result(timeout=REQUEST_TIMEOUT_S + 5)
    except KafkaException as exc:
        raise ToolError(f"{what}: {describe_error(exc)}") from None


def _state_name(state: Any) -> str:
    return STATE_NAMES.get(state, str(state))


def _all_groups(admin: AdminClient) -> list[str]:
    listed = _result(
        admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "cannot list groups"
    )
    return sorted(g.group_id for g in listed.valid)


def _describe_group(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    futures = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
    description: ConsumerGroupDescription = _result(
        futures[group], f"cannot describe group {group!r}"
    )
    return description


def _committed(admin: AdminClient, group: str) -> dict[Partition, int]:
    """The group's committed offsets (partitions without one are left out)."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=REQUEST_TIMEOUT_S
    )
    result = _result(futures[group], f"cannot fetch the offsets of group {group!r}")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def _log_offsets(
    admin: AdminClient, partitions: Iterable[Partition], spec: OffsetSpec, strict: bool = True
) -> dict[Partition, int | None]:
    """ListOffsets for each partition; a failed partition is a ToolError (None if not strict)."""
    request = {TopicPartition(t, p): spec for t, p in partitions}
    if not request:
        return {}
    futures = admin.list_offsets(request, request_timeout=REQUEST_TIMEOUT_S)
    result: dict[Partition, int | None] = {}
    for tp, future in futures.items():
        try:
            result[(tp.topic, tp.partition)] = future.result(timeout=REQUEST_TIMEOUT_S + 5).offset
        except KafkaException as exc:
            if strict:
                raise ToolError(
                    f"cannot list offsets of {tp.topic}:{tp.partition}: {describe_error(exc)}"
                ) from None
            result[(tp.topic, tp.partition)] = None
    return result


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


# --list ---------------------------------------------------------------------------


def _list(
    admin: AdminClient,
    with_state: bool,
    states: set[ConsumerGroupState],
    args: argparse.Namespace,
) -> int:
    options: dict[str, Any] = {"request_timeout": REQUEST_TIMEOUT_S}
    if states:
        options["states"] = states
    listed = _result(admin.list_consumer_groups(**options), "cannot list groups")
    for error in listed.errors:
        print(
            f"strom groups: a broker did not list its groups: {describe_error(error)}",
            file=sys.stderr,
        )
    groups = sorted(listed.valid, key=lambda g: g.group_id)
    if not with_state and args.output is None:  # Kafka's form: one id a line
        for group in groups:
            print(group.group_id)
        return 0
    table = _table("GROUP", "STATE")
    for group in groups:
        _add_row(table, group.group_id, _state_name(group.state))
    show(args, table)
    return 0


# --describe -------------------------------------------------------------------------


def _describe(admin: AdminClient, groups: list[str], args: argparse.Namespace) -> int:
    descriptions = {}
    for group in groups:
        desc = _describe_group(admin, group)
        if desc.state == ConsumerGroupState.DEAD:
            if args.all_groups:
                continue  # deleted since it was listed
            raise ToolError(f"consumer group {group!r} does not exist")
        descriptions[group] = desc
    for group, desc in descriptions.items():
        if args.state is not None:
            show(args, _state_table(desc))
            continue
        if not desc.members:
            note(args, f"Consumer group '{group}' has no active members.")
        elif args.members or args.output != "json":
            show(args, _members_table(desc))
        if not args.members:
            show(args, _offsets_table(admin, desc))
    return 0


def _state_table(desc: ConsumerGroupDescription) -> Listing:
    table = _table(
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "#MEMBERS",
        numeric=["#MEMBERS"],
    )
    node = desc.coordinator
    coordinator = f"{node.host}:{node.port} ({node.id})" if node is not None else "-"
    _add_row(
        table,
        desc.group_id,
        coordinator,
        desc.partition_assignor or "-",
        _state_name(desc.state),
        str(len(desc.members)),
    )
    return table


def _assignment(member: Any) -> list[Partition]:
    assignment = member.assignment
    parts = assignment.topic_partitions if assignment is not None else []
    return sorted((tp.topic, tp.partition) for tp in parts)


def _members_table(desc: ConsumerGroupDescription) -> Listing:
    table = _table(
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
        numeric=["#PARTITIONS"],
    )
    for member in sorted(desc.members, key=lambda m: m.member_id):
        assigned = _assignment(member)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in assigned:
            by_topic.setdefault(topic, []).append(partition)
        text = " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items())
        _add_row(
            table,
            desc.group_id,
            member.member_id,
            member.host,
            member.client_id,
            str(len(assigned)),
            text or "-",
        )
    return table


def _offsets_table(admin: AdminClient, desc: ConsumerGroupDescription) -> Listing:
    owners = {tp: member for member in desc.members for tp in _assignment(member)}
    committed = _committed(admin, desc.group_id)
    partitions = sorted(set(owners) | set(committed))
    log_end = _log_offsets(admin, partitions, OffsetSpec.latest(), strict=False)
    table = _table(
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        numeric=["PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"],
    )
    for topic, partition in partitions:
        current = committed.get((topic, partition))
        end = log_end.get((topic, partition))
        lag = end - current if current is not None and end is not None else None
        owner = owners.get((topic, partition))
        _add_row(
            table,
            desc.group_id,
            topic,
            str(partition),
            _text(current),
            _text(end),
            _text(lag),
            owner.member_id if owner else "-",
            owner.host if owner else "-",
            owner.client_id if owner else "-",
        )
    return table


# --reset-offsets ----------------------------------------------------------------------


def _partitions_to_reset(
    metadata: Any,
    group: str,
    topics: list[TopicSpec],
    committed: dict[Partition, int],
) -> list[Partition]:
    if not topics:  # --all-topics
        if not committed:
            raise ToolError(
                f"group {group!r} has no committed offsets; name partitions with --topic"
            )
        return sorted(committed)
    result: set[Partition] = set()
    for spec in topics:
        topic = metadata.topics.get(spec.topic)
        if topic is None or (topic.error is not None and not topic.partitions):
            raise ToolError(f"topic {spec.topic!r} does not exist")
        wanted = spec.partitions if spec.partitions is not None else sorted(topic.partitions)
        for partition in wanted:
            if partition not in topic.partitions:
                raise ToolError(f"topic {spec.topic!r} has no partition {partition}")
            result.add((spec.topic, partition))
    return sorted(result)


def _reset(
    admin: AdminClient,
    metadata: Any,
    group: str,
    topics: list[TopicSpec],
    args: argparse.Namespace,
    timestamp: int | None,
    from_file: dict[Partition, int] | None = None,
    several_groups: bool = False,
) -> None:
    desc = _describe_group(admin, group)
    if args.execute and desc.state not in INACTIVE:
        raise ToolError(
            f"cannot reset the offsets of group {group!r}: it has active members "
            f"(state {_state_name(desc.state)}); stop its consumers first"
        )
    committed = _committed(admin, group)
    if args.all_groups and not topics and not committed and from_file is None:
        return  # --all-groups --all-topics: nothing of this group to reset
    if from_file is not None:  # the file's partitions, checked against the cluster
        topics = [TopicSpec(t, (p,)) for t, p in from_file]
    partitions = _partitions_to_reset(metadata, group, topics, committed)
    start = _log_offsets(admin, partitions, OffsetSpec.earliest())
    end = _log_offsets(admin, partitions, OffsetSpec.latest())
    at_time = (
        _log_offsets(admin, partitions, OffsetSpec.for_timestamp(timestamp))
        if timestamp is not None
        else {}
    )
    plan: list[tuple[str, int, int | None, int]] = []
    for tp in partitions:
        low, high = start[tp], end[tp]
        assert low is not None and high is not None  # strict lookups
        current = committed.get(tp)
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif timestamp is not None:
            found = at_time.get(tp)
            target = found if found is not None and found >= 0 else high
        elif from_file is not None:
            target = from_file[tp]
        else:
            if current is None:
                raise ToolError(
                    f"cannot shift the offset of {tp[0]}:{tp[1]} in group "
                    f"{group!r}: it has no committed offset"
                )
            target = current + args.shift_by
        # As in Kafka, offsets from a file are taken as they are; others are clamped.
        new = target if from_file is not None else min(max(target, low), high)
        plan.append((tp[0], tp[1], current, new))

    if args.execute:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, new) for t, p, _current, new in plan]
        )
        futures = admin.alter_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)
        done = _result(futures[group], f"cannot reset the offsets of group {group!r}")
        for tp in done.topic_partitions:
            if tp.error is not None:
                raise ToolError(
                    f"cannot reset the offset of {tp.topic}:{tp.partition} in group "
                    f"{group!r}: {describe_error(tp.error)}"
                )
    if args.export:  # Kafka's CSV: what --from-file reads back
        for topic, partition, _current, new in plan:
            print(
                f"{group},{topic},{partition},{new}"
                if several_groups
                else f"{topic},{partition},{new}"
            )
    table = _table(
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "NEW-OFFSET",
        numeric=["PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
    )
    for topic, partition, current, new in plan:
        _add_row(table, group, topic, str(partition), _text(current), str(new))
    if not args.export:
        show(args, table)
    if not args.execute:
        print(
            f"Dry run: the offsets of group '{group}' were not changed; "
            "add --execute to commit them.",
            file=sys.stderr,
        )


# --delete, --delete-offsets ------------------------------------------------------------


def _delete(admin: AdminClient, groups: list[str]) -> int:
    if not groups:
        print("No consumer groups to delete.")
        return 0
    futures = admin.delete_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
    failures: list[str] = []
    for group in groups:
        try:
            futures[group].result(timeout=REQUEST_TIMEOUT_S + 5)
        except KafkaException as exc:
            failures.append(f"cannot delete group {group!r}: {describe_error(exc)}")
            continue
        print(f"Deleted consumer group '{group}'.")
    if failures:
        raise ToolError("; ".join(failures))
    return 0


def _delete_offsets(
    admin: AdminClient, metadata: Any, group: str, topics: list[TopicSpec], args: argparse.Namespace
) -> int:
    committed: dict[Partition, int] | None = None
    wanted: dict[str, list[int]] = {}
    for spec in topics:
        if spec.partitions is not None:
            parts = list(spec.partitions)
        elif spec.topic in metadata.topics and metadata.topics[spec.topic].partitions:
            parts = sorted(metadata.topics[spec.topic].partitions)
        else:  # a deleted topic: the partitions the group still has offsets for
            if committed is None:
                committed = _committed(admin, group)
            parts = sorted(p for t, p in committed if t == spec.topic)
            if not parts:
                raise ToolError(f"topic {spec.topic!r} does not exist")
        wanted.setdefault(spec.topic, [])
        wanted[spec.topic] = sorted(set(wanted[spec.topic]) | set(parts))
    results = wire.delete_offsets(args.bootstrap_server, group, wanted, client_security(args))
    table = _table("TOPIC", "PARTITION", "STATUS", numeric=["PARTITION"])
    failed = 0
    for (topic, partition), error in sorted(results.items()):
        status = "Successful" if error is None else f"Error: {error}"
        _add_row(table, topic, str(partition), status)
        failed += error is not None
    show(args, table)
    if failed:
        raise ToolError(f"{failed} of {len(results)} offsets of group {group!r} were not deleted")
    return 0
