"""``strom reassign-partitions``: move partition replicas, as kafka-reassign-partitions.sh.

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: prints the current
  assignment of the topics named in F (``{"topics": [{"topic": "t"}], "version": 1}``)
  and a proposed one over the listed brokers (replicas striped round-robin, the
  replication factor kept), both in Kafka's plan format.
- ``--execute --reassignment-json-file F [--throttle BYTES_PER_S]``: starts the moves of
  the plan (``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas":
  [2, 3, 4]}]}``) with AlterPartitionReassignments, printing the current assignment
  first (to roll back). With ``--throttle``, as Kafka's tool: the brokers involved get
  ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``, and
  each topic lists its current replicas in ``leader.replication.throttled.replicas`` and
  the new ones in ``follower.replication.throttled.replicas``.
- ``--verify --reassignment-json-file F``: for each partition of the plan, whether its
  move is completed (its replicas are the plan's and none is moving) or still in
  progress; once all are completed the throttles are removed.
- ``--cancel --reassignment-json-file F``: cancels the plan's moves under way.
- ``--list``: the moves under way (ListPartitionReassignments).

Current assignments come from Metadata through confluent-kafka; the reassignment requests
go to a bootstrap broker as raw requests (strom.cli.wire), which forwards them to the
active controller. Both go over TLS and SASL as ``--command-config`` says. As Kafka's
tool, ``--cancel`` and ``--list`` take ``--bootstrap-controller`` instead: their requests
then go to the active controller itself (KIP-919). A bad plan file is one line and
exit code 2; a refused move prints its error and the tool exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.alter_partition_reassignments.v0 import request as alter_req
from kio.schema.list_partition_reassignments.v0 import request as list_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from strom.cli import wire
from strom.cli.common import (
    EXIT_ERROR,
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    check_reachable,
    describe_error,
)
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.protocol.errors import ErrorCode

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = (
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)
Assignment = dict[tuple[str, int], list[int]]


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "reassign-partitions",
        help="move partition replicas between brokers (like kafka-reassign-partitions.sh)",
    )
    add_bootstrap(parser, controller=True)
    add_config_file_option(parser, "--command-config", "admin client")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a plan")
    action.add_argument("--execute", action="store_true", help="start the plan's moves")
    action.add_argument("--verify", action="store_true", help="check the plan's moves")
    action.add_argument("--cancel", action="store_true", help="cancel the plan's moves")
    action.add_argument("--list", action="store_true", help="list the moves under way")
    parser.add_argument("--topics-to-move-json-file", metavar="FILE")
    parser.add_argument("--reassignment-json-file", metavar="FILE")
    parser.add_argument("--broker-list", metavar="IDS", help="brokers to place on, e.g. 1,2,3")
    parser.add_argument(
        "--throttle",
        type=int,
        metavar="BYTES_PER_S",
        help="with --execute: cap the moves' replication traffic per broker",
    )
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if args.bootstrap_controller is not None and not (args.list or args.cancel):
        parser.error("--bootstrap-controller goes with --cancel and --list only")
    access = cluster_access(args)
    if args.list:
        return _list(access)
    if args.generate:
        if not args.topics_to_move_json_file or not args.broker_list:
            parser.error("--generate needs --topics-to-move-json-file and --broker-list")
        topics = _read_topics(parser, args.topics_to_move_json_file)
        brokers = _parse_brokers(parser, args.broker_list)
        return _generate(access, topics, brokers)
    if not args.reassignment_json_file:
        parser.error("--reassignment-json-file is required")
    plan = _read_plan(parser, args.reassignment_json_file)
    if args.throttle is not None and (not args.execute or args.throttle <= 0):
        parser.error("--throttle goes with --execute and takes a positive rate")
    if args.execute:
        return _execute(access, plan, args.throttle)
    if args.verify:
        return _verify(access, plan)
    return _cancel(access, plan)


# Plans ------------------------------------------------------------------------------


def _load_json(parser: argparse.ArgumentParser, path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as exc:
        parser.error(f"cannot read {path}: {exc.strerror}")
    except json.JSONDecodeError as exc:
        parser.error(f"{path} is not JSON: {exc}")


def _read_topics(parser: argparse.ArgumentParser, path: str) -> list[str]:
    data = _load_json(parser, path)
    try:
        topics = [str(entry["topic"]) for entry in data["topics"]]
    except (KeyError, TypeError):
        parser.error(f'{path} must look like {{"topics": [{{"topic": "name"}}], "version": 1}}')
    if not topics:
        parser.error(f"{path} names no topic")
    return topics


def _read_plan(parser: argparse.ArgumentParser, path: str) -> Assignment:
    data = _load_json(parser, path)
    plan: Assignment = {}
    try:
        for entry in data["partitions"]:
            replicas = [int(r) for r in entry["replicas"]]
            plan[(str(entry["topic"]), int(entry["partition"]))] = replicas
    except (KeyError, TypeError, ValueError):
        parser.error(
            f'{path} must look like {{"version": 1, "partitions": '
            f'[{{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}}]}}'
        )
    if not plan:
        parser.error(f"{path} names no partition")
    return plan


def _parse_brokers(parser: argparse.ArgumentParser, text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--broker-list expects broker ids like 1,2,3, got {text!r}")
    if not brokers:
        parser.error("--broker-list names no broker")
    return brokers


def plan_json(assignment: Assignment) -> str:
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "replicas": replicas,
            "log_dirs": ["any"] * len(replicas),
        }
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions})


def _current(access: ClusterAccess, topics: set[str]) -> Assignment:
    admin = AdminClient(access.client_config())
    metadata = check_reachable(admin, access.bootstrap)
    missing = topics - set(metadata.topics)
    if missing:
        raise ToolError(f"unknown topic(s): {', '.join(sorted(missing))}")
    return {
        (name, index): list(partition.replicas)
        for name in topics
        for index, partition in metadata.topics[name].partitions.items()
    }


# Actions -----------------------------------------------------------------------------


def _generate(access: ClusterAccess, topics: list[str], brokers: list[int]) -> int:
    current = _current(access, set(topics))
    proposed: Assignment = {}
    start = 0
    for key in sorted(current):
        factor = len(current[key])
        if factor > len(brokers):
            raise ToolError(
                f"{key[0]}-{key[1]} has {factor} replicas but only {len(brokers)} brokers"
                " are listed"
            )
        proposed[key] = [brokers[(start + i) % len(brokers)] for i in range(factor)]
        start += 1
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def _alter(access: ClusterAccess, moves: dict[tuple[str, int], list[int] | None]) -> dict[Any, Any]:
    by_topic: dict[str, list[alter_req.ReassignablePartition]] = {}
    for (topic, partition), replicas in sorted(moves.items()):
        by_topic.setdefault(topic, []).append(
            alter_req.ReassignablePartition(
                partition_index=i32(partition),
                replicas=None if replicas is None else tuple(map(BrokerId, replicas)),
            )
        )
    request = alter_req.AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT,
        topics=tuple(
            alter_req.ReassignableTopic(name=TopicName(name), partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )
    response = access.send(request, "reassign partitions")
    if response.error_code != ErrorCode.none:
        raise ToolError(
            f"reassignment refused: {wire.error_name(response.error_code)}"
            + (f": {response.error_message}" if response.error_message else "")
        )
    return {
        (topic.name, p.partition_index): (p.error_code, p.error_message)
        for topic in response.responses
        for p in topic.partitions
    }


def _report(results: dict[Any, Any], done: str) -> int:
    ok = sorted(key for key, (code, _) in results.items() if code == ErrorCode.none)
    failed = sorted((key, r) for key, r in results.items() if r[0] != ErrorCode.none)
    if ok:
        print(f"{done} for {','.join(f'{t}-{p}' for t, p in ok)}")
    for (topic, partition), (code, message) in failed:
        reason = wire.error_name(code) + (f": {message}" if message else "")
        print(f"Error for {topic}-{partition}: {reason}")
    return EXIT_ERROR if failed else 0


def _alter_configs(access: ClusterAccess, resources: list[ConfigResource]) -> None:
    """IncrementalAlterConfigs of ``resources``: the topics in one call, each broker in
    its own (a broker's configs go to that broker; librdkafka sends one per call)."""
    admin = AdminClient(access.client_config())
    topics = [r for r in resources if r.restype == ResourceType.TOPIC]
    calls = ([topics] if topics else []) + [[r] for r in resources if r not in topics]
    for call in calls:
        for resource, future in admin.incremental_alter_configs(call).items():
            try:
                future.result(30)
            except KafkaException as exc:
                raise ToolError(
                    f"cannot change the throttle of {resource}: {describe_error(exc)}"
                ) from None


def _set_throttle(access: ClusterAccess, current: Assignment, plan: Assignment, rate: int) -> None:
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in plan.items():
        now = current[(topic, partition)]
        leaders.setdefault(topic, set()).update(f"{partition}:{b}" for b in now)
        followers.setdefault(topic, set()).update(
            f"{partition}:{b}" for b in target if b not in now
        )
        brokers.update(now, target)
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(
                    "leader.replication.throttled.replicas",
                    ",".join(sorted(leaders[topic])),
                    incremental_operation=AlterConfigOpType.SET,
                ),
                ConfigEntry(
                    "follower.replication.throttled.replicas",
                    ",".join(sorted(followers[topic])) or "",
                    incremental_operation=AlterConfigOpType.SET,
                ),
            ],
        )
        for topic in leaders
    ]
    resources += [
        ConfigResource(
            ResourceType.BROKER,
            str(broker),
            incremental_configs=[
                ConfigEntry(key, str(rate), incremental_operation=AlterConfigOpType.SET)
                for key in THROTTLE_RATES
            ],
        )
        for broker in sorted(brokers)
    ]
    _alter_configs(access, resources)
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def _remove_throttle(access: ClusterAccess, topics: set[str]) -> None:
    admin = AdminClient(access.client_config())
    brokers = sorted(check_reachable(admin, access.bootstrap).brokers)
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
                for key in THROTTLED_REPLICAS
            ],
        )
        for topic in sorted(topics)
    ]
    resources += [
        ConfigResource(
            ResourceType.BROKER,
            str(broker),
            incremental_configs=[
                ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
                for key in THROTTLE_RATES
            ],
        )
        for broker in brokers
    ]
    _alter_configs(access, resources)
    print("Throttle was removed.")


def _execute(access: ClusterAccess, plan: Assignment, throttle: int | None = None) -> int:
    current = _current(access, {topic for topic, _ in plan})
    unknown = sorted(key for key in plan if key not in current)
    if unknown:
        raise ToolError(f"unknown partition(s): {', '.join(f'{t}-{p}' for t, p in unknown)}")
    print("Current partition replica assignment")
    print()
    print(plan_json({key: current[key] for key in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        _set_throttle(access, current, plan, throttle)
    return _report(_alter(access, dict(plan)), "Successfully started partition reassignments")


def _cancel(access: ClusterAccess, plan: Assignment) -> int:
    results = _alter(access, {key: None for key in plan})
    return _report(results, "Successfully cancelled partition reassignments")


def _ongoing(access: ClusterAccess, keys: list[tuple[str, int]] | None) -> dict[Any, Any]:
    topics = None
    if keys is not None:
        grouped: dict[str, list[int]] = {}
        for topic, partition in keys:
            grouped.setdefault(topic, []).append(partition)
        topics = tuple(
            list_req.ListPartitionReassignmentsTopics(
                name=TopicName(name), partition_indexes=tuple(map(i32, parts))
            )
            for name, parts in grouped.items()
        )
    request = list_req.ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=topics)
    response = access.send(request, "list partition reassignments")
    if response.error_code != ErrorCode.none:
        raise ToolError(f"cannot list reassignments: {wire.error_name(response.error_code)}")
    return {
        (topic.name, p.partition_index): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for topic in response.topics
        for p in topic.partitions
    }


def _verify(access: ClusterAccess, plan: Assignment) -> int:
    ongoing = _ongoing(access, sorted(plan))
    current = _current(access, {topic for topic, _ in plan})
    print("Status of partition reassignment:")
    all_done = True
    for key in sorted(plan):
        topic, partition = key
        if key in ongoing:
            all_done = False
            print(f"Reassignment of partition {topic}-{partition} is still in progress.")
        elif current.get(key) == plan[key]:
            print(f"Reassignment of partition {topic}-{partition} is completed.")
        else:
            all_done = False
            print(
                f"There is no active reassignment of partition {topic}-{partition}, "
                f"but replica set is {current.get(key)} rather than {plan[key]}."
            )
    if all_done:
        _remove_throttle(access, {topic for topic, _ in plan})
    return 0 if all_done else EXIT_ERROR


def _list(access: ClusterAccess) -> int:
    ongoing = _ongoing(access, None)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        print(
            f"{topic}-{partition}: replicas: {','.join(map(str, replicas))}. "
            f"adding: {','.join(map(str, adding))}. removing: {','.join(map(str, removing))}."
        )
    return 0


__all__ = ["EXIT_USAGE", "add_parser", "plan_json", "run"]
