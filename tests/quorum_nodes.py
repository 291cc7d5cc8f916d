"""Metadata quorum nodes in one process, over real sockets on 127.0.0.1.

Each ``QuorumNode`` is a quorum driver with its own metadata log directory behind a
controller listener on a free port, served by the real controller-listener handlers
(``strom.controller.quorum_handlers``) and Kafka's framing; its state machine keeps every
committed record in order. The quorum network test and ``bench/quorum.py`` use them.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from strom.broker.network.router import CONTROLLER_ROUTES, RequestContext
from strom.controller import quorum_handlers  # noqa: F401 - registers the controller routes
from strom.controller.quorum import NotLeaderError, QuorumDriver
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


class QuorumNode:
    """A quorum driver behind a controller listener served by the real handlers."""

    def __init__(
        self,
        node_id: int,
        directory: Path,
        ports: dict[int, int],
        config: RaftConfig = FAST,
        snapshot_every_records: int = 50,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = CLUSTER_ID
        self.directory = directory
        self.ports = ports
        self.server: asyncio.AbstractServer | None = None
        self.quorum: QuorumDriver | None = None
        self.applied = Applied()
        self.config = config
        self.snapshot_every_records = snapshot_every_records

    async def start(self) -> None:
        self.applied = Applied()
        self.quorum = QuorumDriver(
            self.node_id,
            frozenset(self.ports),
            {i: ("127.0.0.1", p) for i, p in self.ports.items() if i != self.node_id},
            self.config,
            MetadataLogStore(self.directory, voters=frozenset(self.ports)),
            CLUSTER_ID,
            self.applied,
            snapshot_every_records=self.snapshot_every_records,
        )
        if self.node_id in self.ports:  # an observer (not a voter) is never asked anything
            self.server = await asyncio.start_server(
                self._serve, "127.0.0.1", self.ports[self.node_id], reuse_address=True
            )
        self.quorum.start()

    async def stop(self) -> None:
        assert self.quorum is not None
        if self.server is not None:
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
            writer.close()  # a stopped node's driver refuses: the connection goes, as in a crash


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def leader_of(nodes: list[QuorumNode]) -> QuorumNode | None:
    for node in nodes:
        if node.quorum is not None and not node.quorum.stopped and node.quorum.leader_ready:
            return node
    return None


async def propose(nodes: list[QuorumNode], records: list[bytes], timeout: float = 10.0) -> int:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        leader = leader_of(nodes)
        if leader is not None:
            assert leader.quorum is not None
            try:
                return await asyncio.wait_for(leader.quorum.propose(records), timeout)
            except NotLeaderError:
                pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("no leader committed the proposal")
        await asyncio.sleep(0.02)
