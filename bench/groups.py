"""Group coordinator figures: rebalance time of a 10-member group, offset commits/s.

Owns the figures of issue 5, measured against a real broker process with raw
protocol clients (asyncio sockets and kio messages), so that no client-side
timer is part of the figure:

- rebalance: nine members form a stable group; a tenth sends JoinGroup. The
  others learn of the rebalance from their next heartbeat (they heartbeat every
  ``--heartbeat-ms``, default 10 ms, instead of a client's seconds) and rejoin at
  once; the figure is the time from the tenth member's first JoinGroup to the
  moment all ten have their SyncGroup answers for the new generation
  (``group.initial.rebalance.delay.ms`` is 0). Repeated ``--rounds`` times (the
  tenth member leaves in between); median and max.
- commits: ``--connections`` connections each keep ``--pipeline`` OffsetCommit
  requests in flight (one partition each, a simple consumer's commit with
  generation -1) for ``--seconds``; commits per second, every one of which is
  appended to __consumer_offsets.

    ./dev bench groups [--members 10] [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.serial import entity_reader

from strom.protocol.errors import ErrorCode
from strom.protocol.framing import codec_for, encode_request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_common import cpu_seconds  # noqa: E402
from produce_consume import create  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

_SIZE = struct.Struct(">i")


class Connection:
    """One pipelining protocol connection: requests go out, answers come back in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, body: Any) -> None:
        self.correlation += 1
        self.writer.write(encode_request(self.correlation, "bench", body))

    async def receive(self, request_type: type) -> Any:
        size = _SIZE.unpack(await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        codec = codec_for(request_type.__api_key__, request_type.__version__)
        offset = 5 if codec.flexible_response_header else 4
        return entity_reader(codec.response_type)(frame, offset)[0]

    async def request(self, body: Any) -> Any:
        self.send(body)
        return await self.receive(type(body))

    def close(self) -> None:
        self.writer.close()


# Rebalance ----------------------------------------------------------------------------


class Member:
    def __init__(self, port: int, group: str, heartbeat_s: float) -> None:
        self.port = port
        self.group = group
        self.heartbeat_s = heartbeat_s
        self.member_id = ""
        self.generation = -1
        self.members_seen = 0
        self.synced = asyncio.Event()
        self.stopped = False

    async def run(self) -> None:
        self.conn = await Connection.open(self.port)
        await self._join_and_sync()
        while not self.stopped:
            await asyncio.sleep(self.heartbeat_s)
            if self.stopped:
                break
            response = await self.conn.request(
                HeartbeatRequest(
                    group_id=self.group,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=None,
                )
            )
            if response.error_code == ErrorCode.rebalance_in_progress:
                self.synced.clear()
                await self._join_and_sync()

    async def _join_and_sync(self) -> None:
        while True:
            joined = await self.conn.request(
                JoinGroupRequest(
                    group_id=self.group,
                    session_timeout=datetime.timedelta(seconds=30),
                    rebalance_timeout=datetime.timedelta(seconds=30),
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),),
                    reason=None,
                )
            )
            self.member_id = joined.member_id
            if joined.error_code == ErrorCode.member_id_required:
                continue
            if joined.error_code != ErrorCode.none:
                raise RuntimeError(f"JoinGroup failed: {joined.error_code!r}")
            break
        self.generation = joined.generation_id
        assignments = tuple(
            SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"a")
            for m in joined.members
        )
        synced = await self.conn.request(
            SyncGroupRequest(
                group_id=self.group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=assignments,
            )
        )
        if synced.error_code == ErrorCode.rebalance_in_progress:
            return await self._join_and_sync()
        if synced.error_code != ErrorCode.none:
            raise RuntimeError(f"SyncGroup failed: {synced.error_code!r}")
        self.synced.set()

    async def leave(self) -> None:
        self.stopped = True
        await asyncio.sleep(self.heartbeat_s * 2)
        leave_conn = await Connection.open(self.port)
        await leave_conn.request(
            LeaveGroupRequest(
                group_id=self.group,
                members=(
                    MemberIdentity(member_id=self.member_id, group_instance_id=None, reason=None),
                ),
            )
        )
        leave_conn.close()


async def measure_rebalance(
    port: int, members: int, rounds: int, heartbeat_s: float
) -> list[float]:
    group = "bench-rebalance"
    steady = [Member(port, group, heartbeat_s) for _ in range(members - 1)]
    tasks = [asyncio.create_task(m.run()) for m in steady]
    figures = []
    for _ in range(rounds):
        await _all_stable(steady, members - 1)
        last = Member(port, group, heartbeat_s)
        started = time.perf_counter()
        task = asyncio.create_task(last.run())
        everyone = [*steady, last]
        await _all_stable(everyone, members)
        figures.append(time.perf_counter() - started)
        await last.leave()
        await task
        last.conn.close()
    for member in steady:
        member.stopped = True
    await asyncio.gather(*tasks)
    return figures


async def _all_stable(members: list[Member], size: int) -> None:
    while True:
        await asyncio.gather(*(m.synced.wait() for m in members))
        generations = {m.generation for m in members}
        if len(generations) == 1 and all(m.synced.is_set() for m in members):
            return
        await asyncio.sleep(0.001)


# Commits ------------------------------------------------------------------------------


_SENTINEL = 0x0123456789ABCDEF
_CORRELATION_AT = 8  # size, api key, api version, then the correlation id


async def measure_commits(
    port: int, topic: str, connections: int, pipeline: int, seconds: float
) -> int:
    """Commits per second; requests are encoded once and patched (offset, correlation id),
    and one answer in 64 is decoded, so the Python client costs little next to the broker."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def committer(index: int) -> None:
        nonlocal done
        conn = await Connection.open(port)
        body = OffsetCommitRequest(
            group_id=f"bench-commits-{index}",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=topic,
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=index % 4,
                            committed_offset=_SENTINEL,
                            committed_leader_epoch=-1,
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
        frame = bytearray(encode_request(0, "bench", body))
        offset_at = frame.index(struct.pack(">q", _SENTINEL))
        sent = 0

        def send() -> None:
            nonlocal sent
            sent += 1
            struct.pack_into(">i", frame, _CORRELATION_AT, sent)
            struct.pack_into(">q", frame, offset_at, sent)
            conn.writer.write(bytes(frame))

        in_flight = 0
        for _ in range(pipeline):
            send()
            in_flight += 1
        received = 0
        while in_flight:
            size = _SIZE.unpack(await conn.reader.readexactly(4))[0]
            payload = await conn.reader.readexactly(size)
            in_flight -= 1
            received += 1
            if received % 64 == 0:
                codec = codec_for(OffsetCommitRequest.__api_key__, OffsetCommitRequest.__version__)
                response = entity_reader(codec.response_type)(payload, 5)[0]
                if response.topics[0].partitions[0].error_code != ErrorCode.none:
                    raise RuntimeError("commit failed")
            done += 1
            if time.perf_counter() < deadline:
                send()
                in_flight += 1
        fetched = await conn.request(
            OffsetFetchRequest(
                groups=(
                    OffsetFetchRequestGroup(
                        group_id=f"bench-commits-{index}",
                        member_id=None,
                        member_epoch=-1,
                        topics=(
                            OffsetFetchRequestTopics(name=topic, partition_indexes=(index % 4,)),
                        ),
                    ),
                ),
                require_stable=False,
            )
        )
        stored = fetched.groups[0].topics[0].partitions[0].committed_offset
        if stored != sent:
            raise RuntimeError(f"last commit {sent} but {stored} is stored")
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(committer(i) for i in range(connections)))
    return int(done / (time.perf_counter() - started))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=float, default=10)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--pipeline", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"})
        broker.start()
        try:
            create(broker.bootstrap, "bench-commits", 4)
            figures = asyncio.run(
                measure_rebalance(broker.port, args.members, args.rounds, args.heartbeat_ms / 1000)
            )
            print(
                f"rebalance to a stable group of {args.members} members after the last "
                f"JoinGroup: median {statistics.median(figures) * 1000:.1f} ms, "
                f"max {max(figures) * 1000:.1f} ms over {len(figures)} rounds "
                f"(members heartbeat every {args.heartbeat_ms:g} ms)"
            )
            assert broker.proc is not None
            cpu_before = cpu_seconds(broker.proc.pid)
            wall = time.perf_counter()
            rate = asyncio.run(
                measure_commits(
                    broker.port, "bench-commits", args.connections, args.pipeline, args.seconds
                )
            )
            busy = (cpu_seconds(broker.proc.pid) - cpu_before) / (time.perf_counter() - wall)
            print(
                f"offset commits: {rate:,} per second ({args.connections} connections, "
                f"{args.pipeline} requests in flight each, one partition per commit); "
                f"broker process busy {busy:.0%} of one core, "
                f"so {rate / max(busy, 1e-9):,.0f} commits per broker CPU-second"
            )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
