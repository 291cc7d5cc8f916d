"""How fast the console's pages load with many topics and groups: a broker with N
topics and G consumer groups (each with a committed offset), the console in front of it,
and the time each main page takes to be served (median of 5 loads).

    .venv/bin/python bench/console.py [--topics 1000] [--groups 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess, free_port  # noqa: E402


def load(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        console = None
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            names = [f"topic-{i:04d}" for i in range(args.topics)]
            for start in range(0, len(names), 200):
                chunk = [NewTopic(n, 1, 1) for n in names[start : start + 200]]
                for future in admin.create_topics(chunk, request_timeout=120).values():
                    future.result(180)
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for name in names[: args.groups]:
                producer.produce(name, b"x" * 100)
            producer.flush(60)
            for i in range(args.groups):
                consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{i}"})
                consumer.commit(offsets=[TopicPartition(names[i], 0, 1)], asynchronous=False)
                consumer.close()
            port = free_port()
            console = subprocess.Popen(
                [sys.executable, "-m", "strom.cli.main", "console", "--bootstrap-server",
                 broker.bootstrap, "--listener", f"http://127.0.0.1:{port}"],
                stdout=subprocess.PIPE,
            )  # fmt: skip
            assert console.stdout is not None
            console.stdout.readline()
            base = f"http://127.0.0.1:{port}"
            for path in ("/", "/topics", "/topics/topic-0000", "/groups", "/groups/g-0"):
                timings = []
                size = 0
                for _ in range(5):
                    elapsed, size = load(base + path)
                    timings.append(elapsed)
                print(
                    f"{path:<20} {statistics.median(timings) * 1000:7.0f} ms "
                    f"({size / 1000:,.0f} kB) with {args.topics} topics, {args.groups} groups"
                )
        finally:
            if console is not None:
                console.terminate()
                console.wait(30)
            broker.stop()


if __name__ == "__main__":
    main()
