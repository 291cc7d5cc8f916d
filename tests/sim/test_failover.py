"""Controller failover in simulated time: the leader dies (no hand-over) and the survivors
must elect a new leader and commit within a bound.

Each run elects a leader, commits a record (so the followers' held fetches are answered
together and they fetch in step, as they do on a real network), idles for a random part
of the leader's fetch max wait, then crashes the leader and counts the simulated
milliseconds until a new leader has committed a proposal. The network neither loses nor
reorders here; the seed picks the delays and the idle time.

The bound, with Kafka's default timeouts, is the fetch timeout (the survivors cannot
notice the crash sooner) plus half an election timeout, 2.5 s: enough for a pre-vote and a
vote round, and for survivors that timed out together and split their votes to back off
and retry, but not for waiting out a candidate's election timeout (1 to 2 s) for the dead
leader's vote, which every one of these seeds took before (3.8 s median with 3 voters, as
bench/quorum.py measured on real sockets). With timeouts ten times lower the simulator's
10 ms tick, a whole tick per hop, is too coarse for a bound that tells the two apart:
bench/quorum.py measures that setting.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from simulator import TICK_MS, Scenario, Simulation

from strom.raft.core import RaftConfig

KAFKA_DEFAULTS = RaftConfig()  # election 1000 ms, fetch 2000 ms, backoff max 1000 ms
SEEDS = 40


def _run_until(sim: Simulation, done: Callable[[], bool], limit_ms: int, what: str) -> None:
    deadline = sim.now + limit_ms
    while not done():
        if sim.now >= deadline:
            sim.fail(f"no {what} within {limit_ms} ms")
        sim.step()


def _ready_leader(sim: Simulation, but: int = -1) -> int:
    for node in sim.nodes.values():
        raft = node.raft
        if raft is not None and raft.leader_ready and node.node_id != but:
            return node.node_id
    return -1


def _commit(sim: Simulation, leader_id: int, record: bytes) -> None:
    node = sim.nodes[leader_id]
    assert node.raft is not None
    node.raft.propose([record], sim.now)
    sim.pump(node)


def failover_ms(seed: int, config: RaftConfig, voters: int) -> int:
    """Simulated ms from the leader's crash to the first proposal its successor commits."""
    sim = Simulation(seed, Scenario(voters=voters, observers=0, max_delay_ms=5, config=config))
    sim.faults = False  # no random faults or proposals: only the crash below
    _run_until(sim, lambda: _ready_leader(sim) >= 0, 30_000, "first leader")
    old = _ready_leader(sim)
    _commit(sim, old, b"before")
    _run_until(
        sim,
        lambda: (
            all(len(n.entries) == len(sim.committed) for n in sim.nodes.values())
            and any(r == b"before" for _, r in sim.committed)
        ),
        5_000,
        "commit of the first record everywhere",
    )
    for _ in range(random.Random(seed).randrange(config.fetch_max_wait_ms // TICK_MS + 1)):
        sim.step()
    sim.crash(sim.nodes[old], "leader killed, no hand-over")
    crashed_at = sim.now
    _run_until(sim, lambda: _ready_leader(sim, but=old) >= 0, 60_000, "new leader")
    _commit(sim, _ready_leader(sim, but=old), b"after")
    _run_until(
        sim, lambda: any(r == b"after" for _, r in sim.committed), 60_000, "commit after failover"
    )
    return sim.now - crashed_at


@pytest.mark.parametrize("voters", [3, 5])
def test_survivors_elect_within_bound_with_kafka_default_timeouts(voters: int) -> None:
    config = KAFKA_DEFAULTS
    bound = config.fetch_timeout_ms + config.election_timeout_ms // 2
    times = {seed: failover_ms(seed, config, voters) for seed in range(SEEDS)}
    slow = {seed: ms for seed, ms in times.items() if ms > bound}
    assert not slow, f"failover over {bound} ms (seed: simulated ms): {slow}"
