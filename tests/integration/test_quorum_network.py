"""The metadata quorum over real sockets: three quorum drivers, each with its own
metadata log directory and a controller listener on a free port of 127.0.0.1, speaking
KRaft's RPCs on Kafka's wire (kio-encoded Vote, BeginQuorumEpoch, Fetch ...) through
the controller-listener handlers. The consensus rules are proven by the simulator
(tests/sim); this proves the network side carries them: a leader is elected, proposals
commit on every node, a stopped leader is replaced, and a restarted node catches up
from its own files. And a real node snapshots its metadata at the snapshot interval."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from kafka_helpers import create_topic
from quorum_nodes import QuorumNode, leader_of, propose, wait_until


async def _scenario(tmp_path: Path) -> None:
    from broker_process import free_port

    ports = {i: free_port() for i in (1, 2, 3)}
    nodes = [QuorumNode(i, tmp_path / f"node{i}", ports) for i in (1, 2, 3)]
    for node in nodes:
        await node.start()
    try:
        await wait_until(lambda: leader_of(nodes) is not None, 10, "a leader")
        first = leader_of(nodes)
        assert first is not None
        for i in range(20):
            await propose(nodes, [f"a{i}".encode()])
        wanted = [f"a{i}".encode() for i in range(20)]
        await wait_until(
            lambda: all(n.applied.records == wanted for n in nodes), 10, "all nodes to apply"
        )
        epoch = first.quorum.epoch  # type: ignore[union-attr]

        # The leader goes away: the other two elect a new one in a later epoch.
        await first.stop()
        rest = [n for n in nodes if n is not first]
        await wait_until(lambda: leader_of(rest) is not None, 10, "a new leader")
        second = leader_of(rest)
        assert second is not None and second.quorum is not None
        assert second.quorum.epoch > epoch
        for i in range(80):  # past snapshot_every_records: snapshots are taken
            await propose(rest, [f"b{i}".encode()])
        wanted += [f"b{i}".encode() for i in range(80)]
        await wait_until(
            lambda: all(n.applied.records == wanted for n in rest), 10, "the two to apply"
        )

        # The old leader comes back from its own files and catches up.
        await first.start()
        await wait_until(lambda: first.applied.records == wanted, 15, "the restarted node")
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


def test_a_node_snapshots_its_metadata_at_the_snapshot_interval(tmp_path: Path) -> None:
    """metadata.log.max.snapshot.interval.ms: a node snapshots what it applied since its
    last snapshot once that long has passed, however few bytes it is (a node's start and
    one topic are far below metadata.log.max.record.bytes.between.snapshots, 20 MiB)."""
    broker = BrokerProcess(tmp_path / "data", {"metadata.log.max.snapshot.interval.ms": "500"})
    broker.start()
    try:
        create_topic(broker.bootstrap, "snapshotted", 1)
        metadata = tmp_path / "data" / "__cluster_metadata-0"
        deadline = time.monotonic() + 15
        while not list(metadata.glob("*.checkpoint")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(metadata.glob("*.checkpoint")), sorted(p.name for p in metadata.iterdir())
        assert "metadata snapshot at offset" in broker.logs()
    finally:
        broker.stop()
