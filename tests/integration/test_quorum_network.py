"""The metadata quorum over real sockets: three quorum drivers, each with its own
metadata log directory and a controller listener on a free port of 127.0.0.1, speaking
KRaft's RPCs on Kafka's wire (kio-encoded Vote, BeginQuorumEpoch, Fetch ...) through
the controller-listener handlers. The consensus rules are proven by the simulator
(tests/sim); this proves the network side carries them: a leader is elected, proposals
commit on every node, a stopped leader is replaced, and a restarted node catches up
from its own files."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest

from strom.broker import quorum_handlers  # noqa: F401 - registers the controller routes
from strom.broker.quorum import NotLeaderError, QuorumDriver
from strom.broker.router import CONTROLLER_ROUTES, RequestContext
from strom.protocol.framing import codec_for, decode_request, encode_response_chunks, peek_header
from strom.raft.core import RaftConfig
from strom.raft.messages import Batch, Snapshot
from strom.storage.metadata_log import MetadataLogStore

CLUSTER_ID = "quorum-test-cluster-id"
FAST = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=100,
    request_timeout_ms=300,
    fetch_max_wait_ms=100,
)


class Applied:
    """The state machine: every committed record in order."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        self.records = [r for r in snapshot.data.split(b"\n") if r]

    def apply_batch(self, batch: Batch) -> None:
        if not batch.control:
            self.records.extend(batch.records)

    def snapshot_data(self) -> bytes:
        return b"\n".join(self.records)


class Node:
    """A quorum driver behind a controller listener served by the real handlers."""

    def __init__(self, node_id: int, directory: Path, ports: dict[int, int]) -> None:
        self.node_id = node_id
        self.cluster_id = CLUSTER_ID
        self.directory = directory
        self.ports = ports
        self.server: asyncio.AbstractServer | None = None
        self.quorum: QuorumDriver | None = None
        self.applied = Applied()

    async def start(self) -> None:
        self.applied = Applied()
        self.quorum = QuorumDriver(
            self.node_id,
            frozenset(self.ports),
            {i: ("127.0.0.1", p) for i, p in self.ports.items() if i != self.node_id},
            FAST,
            MetadataLogStore(self.directory, voters=frozenset(self.ports)),
            CLUSTER_ID,
            self.applied,
            snapshot_every_records=50,
        )
        self.server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.ports[self.node_id], reuse_address=True
        )
        self.quorum.start()

    async def stop(self) -> None:
        assert self.server is not None and self.quorum is not None
        self.server.close()
        await self.quorum.stop(graceful=False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation = peek_header(frame)
                codec = codec_for(api_key, version)
                request = decode_request(frame, codec)
                ctx = RequestContext(
                    self, api_key, version, correlation, None, codec, "peer", CONTROLLER_ROUTES
                )  # type: ignore[arg-type]
                result: Any = CONTROLLER_ROUTES[api_key].handler(ctx, request.body)
                if asyncio.iscoroutine(result):
                    result = await result
                writer.writelines(encode_response_chunks(correlation, codec, result))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()


async def _until(predicate: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _leader(nodes: list[Node]) -> Node | None:
    for node in nodes:
        if node.quorum is not None and not node.quorum.stopped and node.quorum.leader_ready:
            return node
    return None


async def _propose(nodes: list[Node], records: list[bytes], timeout: float = 10.0) -> int:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        leader = _leader(nodes)
        if leader is not None:
            assert leader.quorum is not None
            try:
                return await asyncio.wait_for(leader.quorum.propose(records), timeout)
            except NotLeaderError:
                pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("no leader committed the proposal")
        await asyncio.sleep(0.02)


async def _scenario(tmp_path: Path) -> None:
    from broker_process import free_port

    ports = {i: free_port() for i in (1, 2, 3)}
    nodes = [Node(i, tmp_path / f"node{i}", ports) for i in (1, 2, 3)]
    for node in nodes:
        await node.start()
    try:
        await _until(lambda: _leader(nodes) is not None, 10, "a leader")
        first = _leader(nodes)
        assert first is not None
        for i in range(20):
            await _propose(nodes, [f"a{i}".encode()])
        wanted = [f"a{i}".encode() for i in range(20)]
        await _until(
            lambda: all(n.applied.records == wanted for n in nodes), 10, "all nodes to apply"
        )
        epoch = first.quorum.epoch  # type: ignore[union-attr]

        # The leader goes away: the other two elect a new one in a later epoch.
        await first.stop()
        rest = [n for n in nodes if n is not first]
        await _until(lambda: _leader(rest) is not None, 10, "a new leader")
        second = _leader(rest)
        assert second is not None and second.quorum is not None
        assert second.quorum.epoch > epoch
        for i in range(80):  # past snapshot_every_records: snapshots are taken
            await _propose(rest, [f"b{i}".encode()])
        wanted += [f"b{i}".encode() for i in range(80)]
        await _until(lambda: all(n.applied.records == wanted for n in rest), 10, "the two to apply")

        # The old leader comes back from its own files and catches up.
        await first.start()
        await _until(lambda: first.applied.records == wanted, 15, "the restarted node")
        # It was too far behind for the leader's log: it copied a snapshot (FetchSnapshot).
        assert list((first.directory / "__cluster_metadata-0").glob("*.checkpoint"))
        described = second.quorum.describe()
        assert described.leader_id == second.node_id
        assert {v.replica_id for v in described.voters} == {1, 2, 3}
    finally:
        for node in nodes:
            if node.quorum is not None and not node.quorum.stopped:
                await node.stop()


@pytest.mark.timeout(90)
def test_three_voters_elect_commit_fail_over_and_catch_up(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
