"""Metadata quorum figures: controller failover, commits per second, catch-up time.

Three voters (quorum drivers with their own metadata log directories, fsync on, behind
controller listeners on 127.0.0.1, speaking KRaft's RPCs on Kafka's wire) run in this
one process and event loop (tests/quorum_nodes.py). What this measures is the quorum
alone; the brokers' use of it (registration, topics through the controller) is not yet
wired in, so these are not CreateTopics figures.

- failover: the leader's listener and driver stop at once with no hand-over (the
  others see their connections reset, as after ``kill -9``); the figure is the time
  from then to the first proposal committed by the next leader. With Kafka's default
  quorum timeouts (election 1000 ms, fetch 2000 ms) and with them ten times lower.
  Its floor is the fetch timeout less the age of the followers' last fetch answer at the
  kill: 1.8 s (the 0.2 s of idling after the last commit; the leader holds a fetch up to
  500 ms), and 0.15 to 0.2 s with the lower timeouts (a held fetch is answered every 50
  ms). The two followers fetch in step, time out together and split their votes; they
  drop that election at once (the dead leader is not waited for) and retry after Kafka's
  short first backoff (up to 100 ms), and one of them wins. Before that rule they waited
  out a candidate's election timeout (1 to 2 s) for the dead leader's vote: median 3.5 s.
- commits/s: 1,000 proposals of three ~100-byte records each (about a TopicRecord and
  two PartitionRecords), one at a time (each awaited) and 64 in flight.
- catch-up: a fourth node (an observer) starts empty against a log of 100,000 records
  (batches of 100) and fetches it; the figure is the time until it has applied them.

Usage: python bench/quorum.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from broker_process import free_port  # noqa: E402
from quorum_nodes import QuorumNode, leader_of, propose, wait_until  # noqa: E402

from strom.raft.core import RaftConfig  # noqa: E402

DEFAULTS = RaftConfig()  # Kafka's: election 1000 ms, fetch 2000 ms, backoff 1000 ms
TEN_TIMES_LOWER = RaftConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=100,
    request_timeout_ms=200,
    fetch_max_wait_ms=50,
)
RECORD = b"x" * 100


async def _cluster(root: Path, config: RaftConfig, count: int = 3) -> list[QuorumNode]:
    ports = {i: free_port() for i in range(1, count + 1)}
    nodes = [
        QuorumNode(i, root / f"node{i}", ports, config, snapshot_every_records=10**9) for i in ports
    ]
    for node in nodes:
        await node.start()
    await wait_until(lambda: leader_of(nodes) is not None, 30, "a leader")
    return nodes


async def _stop(nodes: list[QuorumNode]) -> None:
    for node in nodes:
        if node.quorum is not None and not node.quorum.stopped:
            await node.stop()


async def failover(config: RaftConfig, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            nodes = await _cluster(Path(tmp), config)
            await propose(nodes, [RECORD])
            leader = leader_of(nodes)
            assert leader is not None
            await asyncio.sleep(0.2)  # followers have fetched since the last commit
            started = time.monotonic()
            await leader.stop()
            rest = [n for n in nodes if n is not leader]
            await propose(rest, [RECORD], timeout=60)
            times.append(time.monotonic() - started)
            await _stop(nodes)
    return times


async def commits(in_flight: int, total: int = 1000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        nodes = await _cluster(Path(tmp), DEFAULTS)
        records = [RECORD, RECORD, RECORD]
        started = time.monotonic()
        pending: set[asyncio.Task[int]] = set()
        for _ in range(total):
            pending.add(asyncio.ensure_future(propose(nodes, records)))
            if len(pending) >= in_flight:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(*pending)
        elapsed = time.monotonic() - started
        await _stop(nodes)
    return total / elapsed


async def catch_up(total_records: int = 100_000, per_batch: int = 100) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        nodes = await _cluster(root, DEFAULTS)
        batch = [RECORD] * per_batch
        in_flight = asyncio.Semaphore(16)

        async def one() -> None:
            async with in_flight:
                await propose(nodes, batch)

        await asyncio.gather(*(one() for _ in range(total_records // per_batch)))
        leader = leader_of(nodes)
        assert leader is not None and leader.quorum is not None
        end = leader.quorum.applied_offset
        # node 4 is not among the voters: it fetches as an observer
        observer = QuorumNode(4, root / "node4", dict(nodes[0].ports), DEFAULTS, 10**9)
        started = time.monotonic()
        await observer.start()
        await wait_until(
            lambda: observer.quorum is not None and observer.quorum.applied_offset >= end,
            300,
            "the observer to catch up",
        )
        elapsed = time.monotonic() - started
        assert len(observer.applied.records) == total_records
        await observer.stop()
        await _stop(nodes)
    return elapsed


def _summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.0f} ms, "
        f"min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f} ({len(values)} runs)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="failover runs per setting")
    args = parser.parse_args()
    print("Metadata quorum, 3 voters in one process on 127.0.0.1, fsync on")
    print(f"failover, Kafka's default timeouts: {_summary(await failover(DEFAULTS, args.runs))}")
    lower = await failover(TEN_TIMES_LOWER, args.runs)
    print(f"failover, timeouts ten times lower: {_summary(lower)}")
    print(f"commits/s, one at a time: {await commits(1):,.0f} (3 records each)")
    print(f"commits/s, 64 in flight: {await commits(64):,.0f} (3 records each)")
    print(f"catch-up of a new observer on 100,000 records: {await catch_up():.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
