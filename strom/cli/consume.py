"""``strom consume``: a console consumer printing records as lines, like kafka-console-consumer.

With ``--group G`` the consumer subscribes through the group coordinator: the
group's members share the topic's partitions, each starts at the group's
committed offset, and the offsets of exactly the records printed are committed
(each record's offset is stored once its line is written, ``enable.auto.offset.store``
off; ``enable.auto.commit`` every 5 s and on exit, as kafka-console-consumer does), so
the next run in the group continues after the last line this one printed, however it
was stopped. A partition
without a committed offset starts at the log end, or at the log start with
``--from-beginning`` (``auto.offset.reset``). Without ``--group``, or with
``--partition P`` / ``--offset``, partitions are assigned by hand (every
partition, or ``--partition P``), start at the log end, at the log start with
``--from-beginning``, or at ``--offset earliest|latest|N`` for one partition, and
no offsets are committed.

Output follows kafka-console-consumer's formatter properties (``--property``):
``print.timestamp`` (``CreateTime:<ms>``), ``print.partition`` (``Partition:<p>``),
``print.offset`` (``Offset:<o>``), ``print.headers`` (``k:v`` pairs or
``NO_HEADERS``), ``print.key``, ``print.value`` (default true), in that order,
joined by ``key.separator`` (TAB); ``headers.separator`` (``,``),
``line.separator`` (newline) and ``null.literal`` (``null``). Separators accept
``\\t`` and ``\\n``. Values are written as they are, one record a line.

``-f/--format`` takes an rpk-style format string instead (``strom.cli.record_format``:
``%t %p %o %k %v %T %h``...). ``--consumer.config FILE`` reads consumer configs from a
properties file; ``--consumer-property`` overrides them.

Stops after ``--max-messages``, after ``--timeout-ms`` without a record, or on
Ctrl-C or SIGTERM (exit 0, no traceback: the signal ends the loop between two records,
never in the middle of a line); "Processed a total of N messages" goes to stderr. An
error the tool cannot get past (a fatal client error, TOPIC_AUTHORIZATION_FAILED or
GROUP_AUTHORIZATION_FAILED) ends it with one line and exit code 1, and a topic the
principal may not describe is named as such, not as a missing topic.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import uuid
from typing import Any, BinaryIO, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    parse_properties,
    unescape,
    wire_int,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties
from strom.cli.record_format import RecordFormat

FORMAT_PROPERTIES = {
    "print.timestamp",
    "print.key",
    "print.value",
    "print.partition",
    "print.offset",
    "print.headers",
    "key.separator",
    "line.separator",
    "headers.separator",
    "null.literal",
}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "consume",
        help="console consumer: print a topic's records (like kafka-console-consumer)",
        description="Print the records of a topic, one a line.",
    )
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, help="topic to read")
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log start (default: only new records); with "
        "--group, only where the group has no committed offset",
    )
    parser.add_argument("--partition", type=wire_int("int32"), help="read only this partition")
    parser.add_argument(
        "--offset", metavar="earliest|latest|N", help="start offset in --partition (default latest)"
    )
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    parser.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        help="exit when no record arrived for MS milliseconds",
    )
    parser.add_argument(
        "--group",
        metavar="G",
        help="consume as a member of group G: partitions shared with the group's other "
        "members, start at its committed offsets, offsets committed (auto-commit; "
        "not with --partition/--offset, which assign by hand)",
    )
    parser.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="formatter property (repeatable): " + ", ".join(sorted(FORMAT_PROPERTIES)),
    )
    parser.add_argument(
        "-f",
        "--format",
        metavar="FORMAT",
        help="format each record, rpk-style: %%t topic, %%p partition, %%o offset, %%k key, "
        "%%v value, %%T timestamp, %%h headers, %%K/%%V sizes, %%H header count, \\n \\t "
        "escapes (no newline added); not with --property",
    )
    add_config_file_option(parser, "--consumer.config", "consumer")
    parser.add_argument(
        "--consumer-property",
        action="append",
        metavar="KEY=VALUE",
        help="librdkafka consumer property (repeatable)",
    )
    parser.set_defaults(run=run, parser=parser)


class Formatter:
    """Writes one record as a line, field order as kafka-console-consumer's."""

    def __init__(self, props: dict[str, str]) -> None:
        def flag(name: str, default: str = "false") -> bool:
            return props.get(name, default).strip().lower() == "true"

        self.timestamp = flag("print.timestamp")
        self.partition = flag("print.partition")
        self.offset = flag("print.offset")
        self.headers = flag("print.headers")
        self.key = flag("print.key")
        self.value = flag("print.value", "true")
        self.separator = unescape(props.get("key.separator", "\t")).encode()
        self.line_end = unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = unescape(props.get("headers.separator", ",")).encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, msg: Message) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind, ts = msg.timestamp()
            if kind == TIMESTAMP_CREATE_TIME:
                fields.append(b"CreateTime:%d" % ts)
            elif kind == TIMESTAMP_LOG_APPEND_TIME:
                fields.append(b"LogAppendTime:%d" % ts)
            else:
                fields.append(b"NO_TIMESTAMP")
        if self.partition:
            partition = msg.partition()
            assert partition is not None  # a consumed record has its partition and offset
            fields.append(b"Partition:%d" % partition)
        if self.offset:
            offset = msg.offset()
            assert offset is not None
            fields.append(b"Offset:%d" % offset)
        if self.headers:
            headers = _consumed_headers(msg)
            fields.append(
                self.headers_separator.join(
                    k.encode() + b":" + (self.null if v is None else v) for k, v in headers
                )
                if headers
                else b"NO_HEADERS"
            )
        if self.key:
            key = msg.key()
            fields.append(self.null if key is None else key)
        if self.value:
            value = msg.value()
            fields.append(self.null if value is None else value)
        return self.separator.join(fields) + self.line_end


def _consumed_headers(msg: Message) -> list[tuple[str, bytes | None]] | None:
    """A consumed record's headers: librdkafka gives (name, bytes or None) pairs, in a
    list (confluent-kafka's type also has the dict and str forms a producer may pass)."""
    return cast("list[tuple[str, bytes | None]] | None", msg.headers())


def _start_offset(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    if args.partition is None:
        parser.error("--offset needs --partition")
    if args.from_beginning:
        parser.error("use either --offset or --from-beginning")
    text = args.offset.strip().lower()
    if text == "earliest":
        return OFFSET_BEGINNING
    if text == "latest":
        return OFFSET_END
    if not text.isdigit():
        parser.error("--offset must be earliest, latest or a non-negative number")
    return int(text)


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    props = parse_properties(parser, args.property, "--property")
    unknown = sorted(set(props) - FORMAT_PROPERTIES)
    if unknown:
        parser.error(f"unknown --property {unknown[0]!r}")
    start = _start_offset(args, parser)
    if args.max_messages is not None and args.max_messages < 1:
        parser.error("--max-messages must be at least 1")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        parser.error("--timeout-ms must be 0 or more")
    if args.partition is not None and args.partition < 0:
        parser.error("--partition must be 0 or more")
    formatter: Formatter | RecordFormat = Formatter(props)
    if args.format is not None:
        if props:
            parser.error("use either --format or --property")
        try:
            formatter = RecordFormat(args.format)
        except ValueError as exc:
            parser.error(f"--format: {exc}")
    subscribe = args.group is not None and args.partition is None
    if subscribe:
        # Each record's offset is stored once its line is written, so a commit (every
        # 5 s and on close) covers exactly the records printed, not the rest of the
        # batch consume() handed over.
        consumer_props: dict[str, Any] = {
            "group.id": args.group,
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        }
    else:
        consumer_props = {
            "group.id": args.group or f"strom-console-consumer-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) whenever its
    # prefetch queue is full, which leaves a fast reader idle for most of each second;
    # the tool keeps it fed (docs/clients-and-tools.md). The user's settings win.
    consumer_props["fetch.queue.backoff.ms"] = 10
    consumer_props.update(config_file_properties(args))
    consumer_props.update(parse_properties(parser, args.consumer_property, "--consumer-property"))
    try:
        consumer = Consumer(client_config(args.bootstrap_server, consumer_props))
    except Exception as exc:  # librdkafka rejects an unknown or bad property here
        raise ToolError(f"bad consumer property: {describe_error(exc)}") from None
    try:
        return _consume(consumer, args, start, formatter, subscribe)
    except KeyboardInterrupt:  # Ctrl-C before the first poll: still a clean exit
        return 0
    finally:
        with contextlib.suppress(Exception, KeyboardInterrupt):
            consumer.close()


def _consume(
    consumer: Consumer,
    args: argparse.Namespace,
    start: int,
    formatter: Formatter | RecordFormat,
    subscribe: bool,
) -> int:
    metadata = check_reachable(consumer, args.bootstrap_server, args.topic)
    topic = metadata.topics.get(args.topic)
    if topic is not None and topic.error is not None and not topic.partitions:
        if topic.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise ToolError(
                f"not authorized to read topic {args.topic!r} (TOPIC_AUTHORIZATION_FAILED)"
            )
    if topic is None or topic.error is not None and not topic.partitions:
        raise ToolError(f"topic {args.topic!r} does not exist")
    partitions = sorted(topic.partitions)
    if args.partition is not None:
        if args.partition not in topic.partitions:
            raise ToolError(f"topic {args.topic!r} has no partition {args.partition}")
        partitions = [args.partition]
    if subscribe:
        consumer.subscribe([args.topic])
    else:
        consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])

    out: BinaryIO = sys.stdout.buffer
    count = 0
    limit = args.max_messages
    timeout_s = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    last = time.monotonic()
    status = 0
    stop = _StopOnSignal()
    try:
        while (limit is None or count < limit) and not stop.requested:
            wait = 0.5
            if timeout_s is not None:
                wait = max(0.0, min(wait, last + timeout_s - time.monotonic()))
            want = 500 if limit is None else min(500, limit - count)
            batch = consumer.consume(num_messages=want, timeout=wait)
            now = time.monotonic()
            if not batch:
                if timeout_s is not None and now - last >= timeout_s:
                    break
                continue
            last = now
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    print(f"strom consume: {err.name()}: {err.str()}", file=sys.stderr)
                    if err.fatal() or err.code() in _CANNOT_GO_ON:
                        status = 1
                        limit = count
                        break
                    continue
                out.write(formatter.format(msg))
                count += 1
                if subscribe:
                    consumer.store_offsets(msg)
                if (limit is not None and count >= limit) or stop.requested:
                    break
            out.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        stop.restore()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return status


# Errors after which polling on would only print them again: the tool ends with exit 1.
_CANNOT_GO_ON = frozenset(
    {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
)


class _StopOnSignal:
    """While consuming, Ctrl-C and SIGTERM ask the loop to stop between two records (a
    flag), instead of raising in the middle of writing a line: every record counted and
    committed is a line printed whole. A second one stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = {
            sig: signal.signal(sig, self._request) for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def _request(self, signum: int, frame: object) -> None:
        if self.requested:  # asked twice (output stuck behind a reader that stopped)
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
