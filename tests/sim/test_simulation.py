"""Deterministic simulation of the Raft core: thousands of seeded faulty runs.

Each test runs a share of the seeds of one scenario; every run checks the invariants
after every step (see ``simulator``). ``STROM_SIM_SEED=N`` runs only seed N (in every
scenario); ``STROM_SIM_SEEDS=N`` runs N seeds per scenario instead of the default.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from seeds import seed_chunks
from simulator import SIM_RAFT_CONFIG, Scenario, run_seed

SCENARIOS: dict[str, tuple[Scenario, int]] = {
    # name: (scenario, default number of seeds)
    "three_voters": (Scenario(voters=3, observers=1), 500),
    "five_voters": (Scenario(voters=5, observers=2), 350),
    "long_outage": (
        Scenario(voters=3, observers=2, long_outage=True, fault_ms=4000),
        300,
    ),
    "five_voters_lossy": (
        Scenario(
            voters=5,
            observers=1,
            loss=0.15,
            duplicate=0.1,
            max_delay_ms=80,
            partition=0.02,
            bare_wire=True,  # and the core falls back on its looser matching
        ),
        200,
    ),
    "single_voter": (Scenario(voters=1, observers=1, fault_ms=1500), 100),
    # Many crashes (also between ready() and the persist) and elections.
    "churn": (
        Scenario(
            voters=3,
            observers=1,
            crash=0.03,
            restart=0.15,
            crash_in_ready=0.01,
            crash_leader=0.6,
            partition=0.02,
            resign=0.01,
        ),
        300,
    ),
    # One batch per fetch response, leaders crashing: the Figure 8 shapes of the paper.
    "one_batch_fetches": (
        Scenario(
            voters=5,
            observers=1,
            crash=0.02,
            restart=0.1,
            crash_leader=0.8,
            config=replace(SIM_RAFT_CONFIG, fetch_max_bytes=1),
        ),
        250,
    ),
}


PARAMS = seed_chunks(SCENARIOS, 0)


@pytest.mark.parametrize(
    ("name", "first", "last"), PARAMS, ids=[f"{n}-{a}-{b}" for n, a, b in PARAMS]
)
def test_simulation(name: str, first: int, last: int) -> None:
    scenario = SCENARIOS[name][0]
    for seed in range(first, last):
        run_seed(seed, scenario)
