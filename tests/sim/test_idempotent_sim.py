"""Idempotent producers retrying through replication faults, in simulated time.

Each test runs a share of the seeds of one scenario (``idempotent_sim``): producers
with ids, epochs and sequences retry unanswered batches to whichever broker leads,
leaders deduplicate with Strom's ``ProducerStateManager``, and every step checks that
no acknowledged record is lost and no committed log holds a batch twice or a producer
epoch's sequences with a gap. ``STROM_SIM_SEED=N`` runs only seed N (in every
scenario); ``STROM_SIM_SEEDS=N`` runs N seeds per scenario instead of the default.
"""

from __future__ import annotations

import pytest
from idempotent_sim import IdempotentScenario, run_idempotent_seed
from replication_sim import SimFailure
from seeds import seed_chunks

SCENARIOS: dict[str, tuple[IdempotentScenario, int]] = {
    # name: (scenario, default number of seeds)
    "three_brokers": (IdempotentScenario(), 40),
    # Leaders killed, slow followers rejoining.
    "leaders_killed": (
        IdempotentScenario(slow=0.01, slow_end=0.005, kill=0.004, kill_leader=0.8),
        40,
    ),
    # Requests and answers lost and delayed, links cut: retries of appended batches.
    "lossy_network": (
        IdempotentScenario(loss=0.1, max_delay_ms=80, cut=0.006, heal=0.015),
        40,
    ),
    # Power losses with flush.messages=1: the producer state is rebuilt from what the
    # log kept.
    "power_loss_flushed": (
        IdempotentScenario(kill=0.004, power_loss=0.5, flush_every_append=True, kill_leader=0.6),
        40,
    ),
}

PARAMS = seed_chunks(SCENARIOS, 70_000_000)


@pytest.mark.parametrize(
    ("name", "first", "last"), PARAMS, ids=[f"{n}-{a}-{b}" for n, a, b in PARAMS]
)
def test_idempotent_retries(name: str, first: int, last: int) -> None:
    scenario = SCENARIOS[name][0]
    across_leaders = faults = acked = 0
    for seed in range(first, last):
        stats = run_idempotent_seed(seed, scenario).stats
        across_leaders += stats["duplicates_of_earlier_leaders"]
        faults += stats["kills"] + stats["pauses"]
        acked += stats["client_acked"]
    # The runs did what they are for: batches acknowledged through faults, and retries
    # of batches an earlier leader appended answered by the new one as duplicates.
    assert acked > 0 and faults > 0 and across_leaders > 0


def test_followers_that_do_not_learn_producers_duplicate_batches() -> None:
    """The checker catches a planted bug: followers that do not apply the batches they
    copy to their producer state lead without it and append retries again."""
    scenario = IdempotentScenario(followers_learn_producers=False)
    failures = []
    for seed in range(70_900_000, 70_900_010):
        try:
            run_idempotent_seed(seed, scenario)
        except SimFailure as failure:
            failures.append(str(failure).splitlines()[0])
    assert any("twice in its committed log" in f for f in failures), failures
