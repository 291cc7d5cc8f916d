"""``strom perf-test produce|consume``: throughput and latency, like Kafka's perf-test tools.

``produce`` sends ``--num-records`` records of ``--record-size`` bytes (one
preallocated payload of random uppercase letters) at ``--throughput`` records/s
(-1: as fast as it can), and reports records/s, MB/s and the produce latency
avg/p50/p95/p99/p99.9/max, where a record's latency is the time from its
``produce()`` call to its delivery report (librdkafka's ``Message.latency()``).
``consume`` assigns every partition of the topic from the log start and reads
``--messages`` records, reporting records/s and MB/s. MB is 1024*1024 bytes, as
in Kafka's tools.

The hot loops do as little Python per record as they can: one shared delivery
callback, ``poll(0)`` once per chunk of records, throttling and the progress bar
checked once per chunk. The throttle waits in ``poll()``, so that delivery reports
are served (and their latency taken) as they arrive, not after the wait. The
progress bar (rich) goes to stderr and is off when stderr is not a terminal or with
``--no-progress``. ``--json`` prints one JSON object on stdout instead of the human
summary.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from array import array
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from strom.cli.common import (
    ToolError,
    add_bootstrap,
    check_reachable,
    client_config,
    describe_error,
    parse_properties,
)
from strom.cli.properties_file import add_config_file_option, config_file_properties

MB = 1024 * 1024
CHUNK = 1024
PROGRESS_EVERY_S = 0.25
# consume() waits until it has a whole batch (or its timeout): batches of about this
# many bytes keep large records from waiting while the client's prefetch queue is full.
CONSUME_BATCH_BYTES = 8 * MB


def consume_batch_size(records: int, nbytes: int, most: int) -> int:
    """How many records to ask consume() for, after ``records`` of ``nbytes`` in all:
    about CONSUME_BATCH_BYTES at their average size, between 1 and ``most``."""
    if not nbytes:
        return most
    return max(1, min(most, CONSUME_BATCH_BYTES * records // nbytes))


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "perf-test",
        help="measure produce or consume throughput and latency",
        description="Producer and consumer performance tests.",
    )
    modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")

    produce = modes.add_parser(
        "produce",
        help="like kafka-producer-perf-test",
        description="Send records as fast as asked and report throughput and latency.",
    )
    add_bootstrap(produce)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True, metavar="N")
    produce.add_argument("--record-size", type=int, required=True, metavar="BYTES")
    produce.add_argument(
        "--throughput",
        type=float,
        default=-1,
        metavar="RECORDS_PER_S",
        help="target records/s; -1 (default) for no limit",
    )
    produce.add_argument(
        "--producer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka producer properties, e.g. acks=1 linger.ms=5",
    )
    add_config_file_option(produce, "--producer.config", "producer")
    _common_flags(produce)
    produce.set_defaults(run=run_produce, parser=produce)

    consume = modes.add_parser(
        "consume",
        help="like kafka-consumer-perf-test",
        description="Read records from the log start of every partition and report throughput.",
    )
    add_bootstrap(consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, metavar="N", help="records to read")
    consume.add_argument(
        "--timeout",
        type=int,
        default=10000,
        metavar="MS",
        help="give up after this long without a record (default 10000)",
    )
    consume.add_argument(
        "--consumer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka consumer properties",
    )
    add_config_file_option(consume, "--consumer.config", "consumer")
    _common_flags(consume)
    consume.set_defaults(run=run_consume, parser=consume)


def _common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _progress(args: argparse.Namespace, total: int, label: str) -> Progress | None:
    if args.no_progress or not sys.stderr.isatty():
        return None
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        auto_refresh=False,
        transient=True,
    )
    progress.add_task(label, total=total, rate="")
    return progress


def _tick(progress: Progress | None, done: int, start: float) -> None:
    if progress is None:
        return
    elapsed = time.monotonic() - start
    rate = f"{done / elapsed:,.0f} rec/s" if elapsed > 0 else ""
    progress.update(progress.task_ids[0], completed=done, rate=rate)
    progress.refresh()


def percentile(ordered: list[float], p: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def run_produce(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if args.num_records < 1:
        parser.error("--num-records must be at least 1")
    if args.record_size < 0:
        parser.error("--record-size must be 0 or more")
    if args.throughput == 0:
        parser.error("--throughput must be positive, or -1 for no limit")
    props: dict[str, Any] = config_file_properties(args)
    props.update(parse_properties(parser, args.producer_props, "--producer-props"))

    latencies = array("d")
    record_latency = latencies.append
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            latency = msg.latency()
            assert latency is not None  # a delivered message has its latency
            record_latency(latency)
        else:
            errors.append(f"{err.name()}: {err.str()}")

    props["on_delivery"] = on_delivery
    try:
        producer = Producer(client_config(args.bootstrap_server, props))
    except Exception as exc:
        raise ToolError(f"bad producer property: {describe_error(exc)}") from None
    metadata = check_reachable(producer, args.bootstrap_server, args.topic)
    topic_meta = metadata.topics.get(args.topic)
    if topic_meta is None or (
        topic_meta.error is not None and topic_meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise ToolError(f"topic {args.topic!r} does not exist")

    payload = bytes(random.choices(range(65, 91), k=args.record_size))
    total = args.num_records
    throughput = args.throughput if args.throughput > 0 else 0.0
    chunk = CHUNK if not throughput else max(1, min(CHUNK, int(throughput / 100)))
    topic = args.topic
    produce = producer.produce
    poll = producer.poll
    progress = _progress(args, total, "produce")
    if progress is not None:
        progress.start()
    sent = 0
    start = time.monotonic()
    next_tick = start + PROGRESS_EVERY_S
    try:
        while sent < total:
            n = min(chunk, total - sent)
            i = 0
            while i < n:
                try:
                    produce(topic, payload)
                    i += 1
                except BufferError:
                    poll(0.001)
            sent += n
            poll(0)
            now = time.monotonic()
            if throughput:
                # Wait by polling, not sleeping: librdkafka stamps a record's latency
                # when poll() serves its delivery report, so a sleep would count in it.
                due = start + sent / throughput
                while now < due:
                    poll(due - now)
                    now = time.monotonic()
            if now >= next_tick:
                _tick(progress, sent, start)
                next_tick = now + PROGRESS_EVERY_S
        while producer.flush(0.25) > 0:
            _tick(progress, sent, start)
    except KeyboardInterrupt:
        producer.flush(5)
    finally:
        if progress is not None:
            progress.stop()
    elapsed = time.monotonic() - start

    delivered = len(latencies)
    ordered = sorted(latencies)
    ms = 1000.0
    summary = {
        "records_sent": sent,
        "records_delivered": delivered,
        "errors": len(errors),
        "record_size": args.record_size,
        "elapsed_s": elapsed,
        "records_per_sec": delivered / elapsed if elapsed > 0 else 0.0,
        "mb_per_sec": delivered * args.record_size / MB / elapsed if elapsed > 0 else 0.0,
        "latency_ms": {
            "avg": (sum(ordered) / delivered * ms) if delivered else 0.0,
            "p50": percentile(ordered, 0.50) * ms,
            "p95": percentile(ordered, 0.95) * ms,
            "p99": percentile(ordered, 0.99) * ms,
            "p99.9": percentile(ordered, 0.999) * ms,
            "max": (ordered[-1] * ms) if ordered else 0.0,
        },
    }
    if errors:
        print(f"strom perf-test: {len(errors)} records failed, first: {errors[0]}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    else:
        lat = summary["latency_ms"]
        print(
            f"{delivered} records sent, {summary['records_per_sec']:.1f} records/sec "
            f"({summary['mb_per_sec']:.2f} MB/sec), {lat['avg']:.2f} ms avg latency, "
            f"{lat['max']:.2f} ms max latency, {lat['p50']:.2f} ms 50th, "
            f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p99.9']:.2f} ms 99.9th."
        )
    return 1 if errors or delivered < total else 0


def run_consume(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    if args.timeout < 0:
        parser.error("--timeout must be 0 or more")
    props: dict[str, Any] = {
        "group.id": "strom-perf-consumer",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # librdkafka waits a whole second (its default) before fetching again once its
        # prefetch queue is full, which leaves a fast consumer idle.
        "fetch.queue.backoff.ms": 10,
    }
    props.update(config_file_properties(args))
    props.update(parse_properties(parser, args.consumer_props, "--consumer-props"))
    try:
        consumer = Consumer(client_config(args.bootstrap_server, props))
    except Exception as exc:
        raise ToolError(f"bad consumer property: {describe_error(exc)}") from None
    try:
        return _consume(consumer, args)
    finally:
        try:
            consumer.close()
        except Exception:  # noqa: S110 - closing is best effort
            pass


def _consume(consumer: Consumer, args: argparse.Namespace) -> int:
    metadata = check_reachable(consumer, args.bootstrap_server, args.topic)
    topic = metadata.topics.get(args.topic)
    if topic is None or (topic.error is not None and not topic.partitions):
        raise ToolError(f"topic {args.topic!r} does not exist")
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in topic.partitions])

    wanted = args.messages
    timeout_s = args.timeout / 1000
    consume = consumer.consume
    error_of = Message.error
    count = 0
    nbytes = 0
    progress = _progress(args, wanted, "consume")
    if progress is not None:
        progress.start()
    # Each Message is tracked by the cyclic GC; batches of thousands set off collections
    # that walk them all again (a fifth of a 100-B consume). The loop makes no cycles.
    gc.disable()
    start = time.monotonic()
    first: float | None = None
    last = start
    next_tick = start + PROGRESS_EVERY_S
    failure: str | None = None
    try:
        while count < wanted:
            size = consume_batch_size(count, nbytes, 10000)
            batch = consume(min(size, wanted - count), 0.1)
            now = time.monotonic()
            if not batch:
                if now - last >= timeout_s:
                    break
                continue
            bad = [e for e in map(error_of, batch) if e is not None]
            if bad:
                real = [e for e in bad if e.code() != KafkaError._PARTITION_EOF]
                if real:
                    failure = f"{real[0].name()}: {real[0].str()}"
                    if any(e.fatal() for e in real):
                        break
                batch = [m for m in batch if m.error() is None]
            if first is None and batch:
                first = now
            last = now
            count += len(batch)
            nbytes += sum(map(len, batch))
            if now >= next_tick:
                _tick(progress, count, start)
                next_tick = now + PROGRESS_EVERY_S
    except KeyboardInterrupt:
        pass
    finally:
        gc.enable()
        if progress is not None:
            progress.stop()
    end = time.monotonic()
    elapsed = end - start
    fetch_elapsed = end - first if first is not None else 0.0
    summary = {
        "records": count,
        "bytes": nbytes,
        "elapsed_s": elapsed,
        "records_per_sec": count / elapsed if elapsed > 0 else 0.0,
        "mb_per_sec": nbytes / MB / elapsed if elapsed > 0 else 0.0,
        "fetch_elapsed_s": fetch_elapsed,
        "fetch_records_per_sec": count / fetch_elapsed if fetch_elapsed > 0 else 0.0,
        "fetch_mb_per_sec": nbytes / MB / fetch_elapsed if fetch_elapsed > 0 else 0.0,
    }
    if failure:
        print(f"strom perf-test: consumer error: {failure}", file=sys.stderr)
    if count < wanted:
        print(
            f"strom perf-test: only {count} of {wanted} records before the "
            f"{args.timeout} ms timeout",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{count} records consumed, {summary['records_per_sec']:.1f} records/sec "
            f"({nbytes / MB:.2f} MB, {summary['mb_per_sec']:.2f} MB/sec) in {elapsed:.2f} s; "
            f"from the first record: {summary['fetch_records_per_sec']:.1f} records/sec "
            f"({summary['fetch_mb_per_sec']:.2f} MB/sec)"
        )
    return 0 if count >= wanted else 1
