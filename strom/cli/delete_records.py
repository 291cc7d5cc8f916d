"""``strom delete-records``: move partitions' log start offsets forward, as kafka-delete-records.sh.

Takes Kafka's offset JSON file (``--offset-json-file``)::

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}

or the shortcut ``--topic T --partition P --offset O`` for one partition. Records below
each offset are deleted (offset ``-1``: everything up to the high watermark), through
DeleteRecords with confluent-kafka's AdminClient. Prints Kafka's lines
(``partition: orders-0<TAB>low_watermark: 42``, or ``error: ...``) and exits 1 if any
partition failed. A file that is not this JSON, a partition given twice, or a missing
or mixed option is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.cli.common import (
    CONNECT_TIMEOUT_S,
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    wire_int,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties

REQUEST_TIMEOUT_S = 30.0
HIGH_WATERMARK = -1


class OffsetFileError(ValueError):
    """An offset JSON file not in Kafka's format."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "delete-records",
        help="delete records below an offset (like kafka-delete-records.sh)",
        description="Delete the records of partitions below the given offsets.",
    )
    add_bootstrap(parser)
    parser.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}',
    )
    parser.add_argument("--topic", help="with --partition and --offset: one partition")
    parser.add_argument("--partition", type=wire_int("int32"), help="partition id (with --topic)")
    parser.add_argument(
        "--offset",
        type=wire_int("int64"),
        help="delete records below this offset; -1: up to the high watermark",
    )
    add_config_file_option(parser, "--command-config", "admin client")
    parser.set_defaults(run=run, parser=parser)


def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """Kafka's offset JSON as (topic, partition, offset) triples, in file order."""
    try:
        data = json.loads(text)
    except ValueError:
        raise OffsetFileError("the offset file is not valid JSON") from None
    if not isinstance(data, dict):
        raise OffsetFileError("the offset file must hold a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise OffsetFileError(f"unsupported version {version!r} (1 is known)")
    partitions = data.get("partitions")
    if not isinstance(partitions, list):
        raise OffsetFileError("missing partitions field (a list)")
    triples: list[tuple[str, int, int]] = []
    for entry in partitions:
        if not isinstance(entry, dict):
            raise OffsetFileError(f"a partition entry must be an object, got {entry!r}")
        topic, partition, offset = (entry.get(k) for k in ("topic", "partition", "offset"))
        if not isinstance(topic, str) or not topic:
            raise OffsetFileError(f"an entry has no topic: {json.dumps(entry)}")
        if type(partition) is not int or partition < 0:
            raise OffsetFileError(f"an entry has no valid partition: {json.dumps(entry)}")
        if type(offset) is not int or offset < HIGH_WATERMARK:
            raise OffsetFileError(f"an entry has no valid offset: {json.dumps(entry)}")
        triples.append((topic, partition, offset))
    counts = Counter((topic, partition) for topic, partition, _offset in triples)
    duplicates = sorted(f"{t}-{p}" for (t, p), n in counts.items() if n > 1)
    if duplicates:
        raise OffsetFileError(
            f"offset json file contains duplicate topic partitions: {','.join(duplicates)}"
        )
    return triples


Partitions = list[tuple[str, int, int]]


def _wanted(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Partitions:
    shortcut = [args.topic, args.partition, args.offset]
    if args.offset_json_file is not None:
        if any(value is not None for value in shortcut):
            parser.error("--offset-json-file cannot be used with --topic, --partition, --offset")
        try:
            with open(args.offset_json_file, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            parser.error(f"cannot read {args.offset_json_file}: {reason}")
        try:
            return parse_offset_json(text)
        except OffsetFileError as exc:
            parser.error(f"{args.offset_json_file}: {exc}")
    if any(value is None for value in shortcut):
        parser.error("give --offset-json-file, or --topic, --partition and --offset")
    if args.partition < 0 or args.offset < HIGH_WATERMARK:
        parser.error("--partition must be at least 0 and --offset at least -1")
    return [(args.topic, args.partition, args.offset)]


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    wanted = _wanted(parser, args)
    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    check_reachable(admin, args.bootstrap_server)
    print("Executing records delete operation")
    try:
        futures = admin.delete_records(
            [TopicPartition(t, p, o) for t, p, o in wanted],
            request_timeout=REQUEST_TIMEOUT_S,
            operation_timeout=REQUEST_TIMEOUT_S,
        )
    except KafkaException as exc:
        raise ToolError(f"cannot delete records: {describe_error(exc)}") from None
    print("Records delete operation completed:")
    failed = 0
    for tp, future in sorted(futures.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        try:
            result = future.result(timeout=REQUEST_TIMEOUT_S + CONNECT_TIMEOUT_S)
        except KafkaException as exc:
            failed += 1
            print(f"partition: {name}\terror: {describe_error(exc)}")
            continue
        print(f"partition: {name}\tlow_watermark: {result.low_watermark}")
    if failed:
        raise ToolError(f"{failed} of {len(futures)} partitions failed")
    return 0
