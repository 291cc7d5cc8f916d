"""Deterministic simulation of partition replication: thousands of seeded faulty runs.

Each test runs a share of the seeds of one scenario; every run checks the invariants
after every step (see ``replication_sim``). ``STROM_SIM_SEED=N`` runs only seed N (in
every scenario); ``STROM_SIM_SEEDS=N`` runs N seeds per scenario instead of the default.
"""

from __future__ import annotations

import pytest
from replication_sim import Scenario, run_seed
from seeds import seed_chunks

SCENARIOS: dict[str, tuple[Scenario, int]] = {
    # name: (scenario, default number of seeds)
    "three_brokers": (Scenario(), 600),
    # Slow followers (stopped 80 ms of every 100 ms) rejoining, leaders killed.
    "slow_followers": (
        Scenario(slow=0.01, slow_end=0.005, kill=0.003, kill_leader=0.8),
        450,
    ),
    # Followers paused together under acks=all; the leader keeps taking writes.
    "paused_followers": (
        Scenario(pause=0.01, resume=0.015, kill_leader=0.1, kill=0.001),
        200,
    ),
    "lossy_network": (
        Scenario(loss=0.1, max_delay_ms=80, cut=0.006, heal=0.015),
        200,
    ),
    # Power losses with flush.messages=1 (each append flushed before it counts): every
    # invariant holds as for kill -9.
    "power_loss_flushed": (
        Scenario(kill=0.004, power_loss=0.5, flush_every_append=True, kill_leader=0.6),
        200,
    ),
    # Power losses without flush settings (the page cache flushed now and then): an
    # acknowledged record may be lost only by the power loss of the broker that then
    # leads without it (the checker counts those); nothing else loses one.
    "power_loss_unflushed": (
        Scenario(kill=0.004, power_loss=0.5, flush=0.01),
        200,
    ),
    # Replicas on three of five brokers; min.insync.replicas=1.
    "five_brokers": (
        Scenario(brokers=5, min_insync_replicas=1, kill=0.004, restart=0.02),
        150,
    ),
}


PARAMS = seed_chunks(SCENARIOS, 50_000_000)


@pytest.mark.parametrize(
    ("name", "first", "last"), PARAMS, ids=[f"{n}-{a}-{b}" for n, a, b in PARAMS]
)
def test_replication_simulation(name: str, first: int, last: int) -> None:
    scenario = SCENARIOS[name][0]
    acked = faults = 0
    for seed in range(first, last):
        stats = run_seed(seed, scenario).stats
        acked += stats["acked"]
        faults += stats["kills"] + stats["pauses"]
    # The runs did what they are for: writes acknowledged through faults.
    assert acked > 0 and faults > 0
