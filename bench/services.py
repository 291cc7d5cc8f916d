"""Schema registry and REST proxy figures: registry lookups of a schema by id per
second, through confluent-kafka's SchemaRegistryClient (cached: its cache answers) and
over HTTP (uncached: every lookup a request); and REST proxy produce throughput, 10
concurrent HTTP clients each posting batches of 100 JSON records (v2), counted from
the offsets the proxy answers.

    .venv/bin/python bench/services.py [--lookups N] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess, free_port  # noqa: E402


def start(*args: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "strom.cli.main", *args], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    process.stdout.readline()
    return process


async def uncached_lookups(url: str, schema_id: int, seconds: float) -> float:
    count = 0
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            async with session.get(f"{url}/schemas/ids/{schema_id}") as response:
                await response.read()
                assert response.status == 200
            count += 1
        return count / (time.perf_counter() - started)


async def rest_produce(url: str, topic: str, seconds: float, clients: int = 10) -> float:
    body = json.dumps(
        {"records": [{"key": f"k{i}", "value": {"n": i, "text": "x" * 60}} for i in range(100)]}
    )
    headers = {"Content-Type": "application/vnd.kafka.json.v2+json"}
    acknowledged = 0

    async def client(session: aiohttp.ClientSession, deadline: float) -> None:
        nonlocal acknowledged
        while time.perf_counter() < deadline:
            async with session.post(f"{url}/topics/{topic}", data=body, headers=headers) as r:
                answer = await r.json(content_type=None)
                assert r.status == 200, answer
                acknowledged += sum(1 for o in answer["offsets"] if o["error_code"] is None)

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session, started + seconds) for _ in range(clients)))
        return acknowledged / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lookups", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        registry_url = f"http://127.0.0.1:{free_port()}"
        proxy_url = f"http://127.0.0.1:{free_port()}"
        registry = start("schema-registry", "--bootstrap-server", broker.bootstrap,
                         "--listener", registry_url)  # fmt: skip
        proxy = start("rest-proxy", "--bootstrap-server", broker.bootstrap,
                      "--listener", proxy_url)  # fmt: skip
        try:
            client = SchemaRegistryClient({"url": registry_url})
            schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
            schema_id = client.register_schema("bench-value", Schema(json.dumps(schema), "AVRO"))
            started = time.perf_counter()
            for _ in range(args.lookups):
                client.get_schema(schema_id)
            cached = args.lookups / (time.perf_counter() - started)
            uncached = asyncio.run(uncached_lookups(registry_url, schema_id, args.seconds))
            print(f"registry lookups by id: {cached:,.0f}/s cached in the client, "
                  f"{uncached:,.0f}/s over HTTP (one client, sequential)")  # fmt: skip
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("rest-bench", 1, 1)])["rest-bench"].result(30)
            rate = asyncio.run(rest_produce(proxy_url, "rest-bench", args.seconds))
            print(f"REST proxy produce: {rate:,.0f} records/s acknowledged "
                  "(10 HTTP clients, batches of 100 JSON records, v2)")  # fmt: skip
        finally:
            for process in (registry, proxy):
                process.terminate()
                process.wait(30)
            broker.stop()


if __name__ == "__main__":
    main()
