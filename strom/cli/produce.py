"""``strom produce``: a console producer, one record per stdin line, like kafka-console-producer.

Line parsing follows kafka-console-producer's line reader properties
(``--property``): ``parse.key`` (default false), ``key.separator`` (default TAB),
``parse.headers`` (default false), ``headers.delimiter`` (TAB, between the
headers and the rest), ``headers.separator`` (``,``, between headers),
``headers.key.separator`` (``:``, header key from value; a header with no
separator has a null value), ``null.marker`` (a key, value or header value equal
to it is sent as null) and ``ignore.error`` (a line missing a separator is sent
whole as the value instead of being rejected). A line with headers and a key
reads ``h1:v1,h2:v2<TAB>key<TAB>value``. Separators accept ``\\t`` and ``\\n``.

``--producer-property k=v`` goes to librdkafka as is. The producer flushes at EOF;
each failed record (delivery error or unparsable line) is one line on stderr and
the exit code is 1 if any failed. Not supported: ``--sync``, ``--line-reader``,
schema serializers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    error_code,
    parse_properties,
    unescape,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties

COMPRESSION = ["none", "gzip", "snappy", "lz4", "zstd"]
LINE_PROPERTIES = {
    "parse.key",
    "key.separator",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "null.marker",
    "ignore.error",
}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "produce",
        help="console producer: stdin lines to a topic (like kafka-console-producer)",
        description="Send each line of stdin as one record.",
    )
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, help="topic to produce to")
    parser.add_argument(
        "--partition",
        type=int,
        help="send every record to this partition (default: the partitioner)",
    )
    parser.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="line reader property (repeatable): " + ", ".join(sorted(LINE_PROPERTIES)),
    )
    add_config_file_option(parser, "--producer.config", "producer")
    parser.add_argument(
        "--producer-property",
        action="append",
        metavar="KEY=VALUE",
        help="librdkafka producer property (repeatable)",
    )
    parser.add_argument(
        "--compression-type",
        "--compression-codec",
        choices=COMPRESSION,
        help="compression codec (default none)",
    )
    parser.set_defaults(run=run, parser=parser)


# a line's headers, values bytes or None, in the list type Producer.produce takes
Headers = list[tuple[str, str | bytes | None]]


class LineReader:
    """Turns one stdin line (bytes, no line end) into (key, value, headers)."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        def sep(name: str, default: str) -> bytes:
            return unescape(props.get(name, default)).encode()

        self.parse_key = flag("parse.key")
        self.parse_headers = flag("parse.headers")
        self.ignore_error = flag("ignore.error")
        self.key_separator = sep("key.separator", "\t")
        self.headers_delimiter = sep("headers.delimiter", "\t")
        self.headers_separator = sep("headers.separator", ",")
        self.header_key_separator = sep("headers.key.separator", ":")
        marker = props.get("null.marker")
        self.null_marker = marker.encode() if marker is not None else None

    def _null(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def parse(self, line: bytes, number: int) -> tuple[bytes | None, bytes | None, Headers]:
        headers: Headers = []
        rest = line
        if self.parse_headers:
            head, found, tail = line.partition(self.headers_delimiter)
            if not found:
                if not self.ignore_error:
                    raise ValueError(f"no headers delimiter found on line {number}")
            else:
                rest = tail
                for item in head.split(self.headers_separator) if head else []:
                    hkey, has_value, hvalue = item.partition(self.header_key_separator)
                    headers.append(
                        (hkey.decode("utf-8", "replace"), self._null(hvalue) if has_value else None)
                    )
        key: bytes | None = None
        value = rest
        if self.parse_key:
            k, found, v = rest.partition(self.key_separator)
            if found:
                key, value = self._null(k), v
            elif not self.ignore_error:
                raise ValueError(f"no key separator found on line {number}")
        return key, self._null(value), headers


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    props = parse_properties(parser, args.property, "--property")
    unknown = sorted(set(props) - LINE_PROPERTIES)
    if unknown:
        parser.error(f"unknown --property {unknown[0]!r}")
    producer_props: dict[str, Any] = {"message.timeout.ms": 30000}
    producer_props.update(config_file_properties(args))
    producer_props.update(parse_properties(parser, args.producer_property, "--producer-property"))
    if args.compression_type:
        producer_props["compression.type"] = args.compression_type
    if args.partition is not None and args.partition < 0:
        parser.error("--partition must be 0 or more")
    reader = LineReader(props)

    failures = 0

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        nonlocal failures
        if err is not None:
            failures += 1
            print(
                f"strom produce: delivery to {msg.topic()} failed: {err.name()}: {err.str()}",
                file=sys.stderr,
            )

    try:
        producer = Producer(client_config(args.bootstrap_server, producer_props))
    except Exception as exc:  # librdkafka rejects an unknown or bad property here
        raise ToolError(f"bad producer property: {describe_error(exc)}") from None
    metadata = check_reachable(producer, args.bootstrap_server, args.topic)
    topic_meta = metadata.topics.get(args.topic)
    if topic_meta is None or (
        topic_meta.error is not None and topic_meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise ToolError(f"topic {args.topic!r} does not exist")
    if (
        args.partition is not None
        and topic_meta.error is None
        and args.partition not in topic_meta.partitions
    ):
        raise ToolError(f"topic {args.topic!r} has no partition {args.partition}")

    extra: dict[str, Any] = {"on_delivery": on_delivery}
    if args.partition is not None:
        extra["partition"] = args.partition
    try:
        for number, raw in enumerate(sys.stdin.buffer, start=1):
            line = raw.rstrip(b"\n").rstrip(b"\r")
            try:
                key, value, headers = reader.parse(line, number)
            except ValueError as exc:
                failures += 1
                print(f"strom produce: {exc}", file=sys.stderr)
                continue
            while True:
                try:
                    producer.produce(args.topic, value, key, headers=headers or None, **extra)
                    break
                except BufferError:
                    producer.poll(0.1)
                except Exception as exc:  # e.g. MSG_SIZE_TOO_LARGE, unknown partition
                    failures += 1
                    reason = describe_error(exc)
                    if error_code(exc) == KafkaError.MSG_SIZE_TOO_LARGE:
                        reason += (
                            f" ({len(value or b'') + len(key or b''):,} bytes; the producer "
                            "allows message.max.bytes, 1,000,000 unless set with "
                            "--producer-property, and the topic max.message.bytes)"
                        )
                    print(f"strom produce: line {number} not sent: {reason}", file=sys.stderr)
                    break
            producer.poll(0)
    except KeyboardInterrupt:
        pass
    remaining = producer.flush(35)
    if remaining:
        failures += remaining
        print(f"strom produce: {remaining} records not delivered in time", file=sys.stderr)
    return 1 if failures else 0
