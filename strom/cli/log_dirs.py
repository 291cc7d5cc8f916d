"""``strom log-dirs --describe``: what each broker keeps on disk, as kafka-log-dirs.sh.

Asks every broker (or those of ``--broker-list``) with DescribeLogDirs, sent to each
broker's own endpoint from the cluster's Metadata, for all partitions or those of the
topics in ``--topic-list``, and prints Kafka's JSON (``--output json``: only the
array of brokers, as every listing tool's JSON is an array)::

    {"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":"/data","error":null,
     "partitions":[{"partition":"orders-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from confluent_kafka.admin import AdminClient
from kio.schema.describe_log_dirs.v4 import request as log_dirs_req

from strom.cli import wire
from strom.cli.common import ToolError, add_bootstrap, check_reachable, client_config
from strom.cli.output import emit_json, note, wants_json
from strom.cli.properties_file import (
    add_config_file_option,
    client_security,
    config_file_properties,
)
from strom.protocol.errors import ErrorCode


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "log-dirs", help="describe the brokers' log directories (like kafka-log-dirs.sh)"
    )
    add_bootstrap(parser)
    add_config_file_option(parser, "--command-config", "admin client")
    parser.add_argument("--describe", action="store_true", required=True)
    parser.add_argument("--broker-list", metavar="IDS", help="brokers to ask, e.g. 1,2")
    parser.add_argument("--topic-list", metavar="TOPICS", help="topics to describe, e.g. a,b")
    parser.add_argument(
        "--output",
        choices=("plain", "json"),
        help="json: only the brokers' array (one object per broker) instead of Kafka's text",
    )
    parser.set_defaults(run=run, parser=parser)


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    wanted_brokers = None
    if args.broker_list:
        try:
            wanted_brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
        except ValueError:
            parser.error(f"--broker-list expects broker ids like 1,2, got {args.broker_list!r}")
    topics = (
        [t.strip() for t in args.topic_list.split(",") if t.strip()] if args.topic_list else None
    )
    admin = AdminClient(client_config(args.bootstrap_server, config_file_properties(args)))
    metadata = check_reachable(admin, args.bootstrap_server)
    brokers = {b.id: b for b in metadata.brokers.values()}
    ids = sorted(brokers) if wanted_brokers is None else wanted_brokers
    unknown = [b for b in ids if b not in brokers]
    if unknown:
        raise ToolError(f"unknown broker(s): {', '.join(map(str, unknown))}")
    request_topics = None
    if topics is not None:
        request_topics = tuple(
            log_dirs_req.DescribableLogDirTopic(
                topic=name,
                partitions=tuple(sorted(metadata.topics[name].partitions))
                if name in metadata.topics
                else (),
            )
            for name in topics
        )
    request = log_dirs_req.DescribeLogDirsRequest(topics=request_topics)
    note(args, "Querying brokers for log directories information")
    out = []
    security = client_security(args)
    for broker_id in ids:
        broker = brokers[broker_id]
        response = wire.send(
            f"{broker.host}:{broker.port}",
            request,
            f"describe the log dirs of broker {broker_id}",
            security,
        )
        if response.error_code != ErrorCode.none:
            raise ToolError(f"broker {broker_id} answered {wire.error_name(response.error_code)}")
        out.append(
            {
                "broker": broker_id,
                "logDirs": [
                    {
                        "logDir": result.log_dir,
                        "error": None
                        if result.error_code == ErrorCode.none
                        else wire.error_name(result.error_code),
                        "partitions": [
                            {
                                "partition": f"{topic.name}-{part.partition_index}",
                                "size": part.partition_size,
                                "offsetLag": part.offset_lag,
                                "isFuture": part.is_future_key,
                            }
                            for topic in result.topics
                            for part in topic.partitions
                        ],
                    }
                    for result in response.results
                ],
            }
        )
    if wants_json(args):
        emit_json(args, out)
        return 0
    print(f"Received log directory information from brokers {','.join(map(str, ids))}")
    print(json.dumps({"version": 1, "brokers": out}, separators=(",", ":")))
    return 0
