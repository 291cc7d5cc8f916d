"""``strom leader-election``: elect partition leaders, as kafka-leader-election.sh.

``--election-type PREFERRED|UNCLEAN`` with ``--all-topic-partitions``, or ``--topic T
--partition P``, or ``--path-to-json-file F`` (``{"partitions": [{"topic": "t",
"partition": 0}]}``). PREFERRED moves leadership back to each partition's first replica
where it is in sync; UNCLEAN elects a leader for a leaderless partition even from
outside the ISR (records may be lost). Sent with confluent-kafka's ElectLeaders; prints
one line per partition as Kafka's tool does (elections that were not needed are left
out when all partitions were asked for). A failed election exits 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.cli.common import (
    EXIT_ERROR,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    wire_int,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties

TYPES = {"PREFERRED": ElectionType.PREFERRED, "UNCLEAN": ElectionType.UNCLEAN}
TIMEOUT_S = 30.0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "leader-election",
        help="elect preferred or unclean partition leaders (like kafka-leader-election.sh)",
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    parser.add_argument(
        "--election-type", required=True, type=str.upper, choices=sorted(TYPES), metavar="TYPE"
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true")
    which.add_argument("--topic", metavar="NAME")
    which.add_argument("--path-to-json-file", metavar="FILE")
    parser.add_argument("--partition", type=wire_int("int32"), metavar="N")
    parser.set_defaults(run=run, parser=parser)


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    parser: argparse.ArgumentParser = args.parser
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            parser.error("--topic needs --partition")
        return [TopicPartition(args.topic, args.partition)]
    try:
        with open(args.path_to_json_file, encoding="utf-8") as file:
            data = json.load(file)
        return [TopicPartition(str(p["topic"]), int(p["partition"])) for p in data["partitions"]]
    except OSError as exc:
        parser.error(f"cannot read {args.path_to_json_file}: {exc.strerror}")
    except (ValueError, KeyError, TypeError):
        parser.error(
            f'{args.path_to_json_file} must look like {{"partitions": [{{"topic": "t", '
            f'"partition": 0}}]}}'
        )


def run(args: argparse.Namespace) -> int:
    partitions = _partitions(args)
    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    check_reachable(admin, args.bootstrap_server)
    # No timeout options: this confluent-kafka's binding refuses every keyword argument
    # of elect_leaders (its default is socket.timeout.ms).
    future = admin.elect_leaders(TYPES[args.election_type], partitions)
    try:
        results = future.result(TIMEOUT_S + 5)
    except KafkaException as exc:
        print(f"Error completing leader election: {describe_error(exc)}")
        return EXIT_ERROR
    done = sorted(f"{tp.topic}-{tp.partition}" for tp, error in results.items() if error is None)
    failed = []
    not_needed = []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        if error is None:
            continue
        text = (
            describe_error(error)
            if isinstance(error, BaseException)
            else f"{error.name()}: {error.str()}"
        )
        if text.startswith("ELECTION_NOT_NEEDED"):
            not_needed.append(f"{tp.topic}-{tp.partition}")
        else:
            failed.append((f"{tp.topic}-{tp.partition}", text))
    if done:
        kind = args.election_type.lower()
        print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if not_needed and partitions is not None:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if failed:
        print(f"Election failed for {len(failed)} partition(s):")
        for name, text in failed:
            print(f"{name}: {text}")
        return EXIT_ERROR
    return 0
