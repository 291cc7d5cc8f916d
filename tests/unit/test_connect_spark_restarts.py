"""The Spark runner's restarts of a sink task's queries after Spark's Python process for a
streaming source failed to connect back in time (``spark_runner.TransientRestarts``): a
growing pause, patience measured from the first failure since the last micro-batch done,
and a batch done forgetting the failures before it. A clock is handed in; no Spark."""

from __future__ import annotations

from strom.connect.spark_runner import (
    RESTART_PAUSES_S,
    TRANSIENT_PATIENCE_S,
    TransientRestarts,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pauses_grow_then_stay_at_the_last() -> None:
    clock = Clock()
    restarts = TransientRestarts(clock)
    pauses = []
    for _ in range(len(RESTART_PAUSES_S) + 2):
        assert restarts.failed()
        pauses.append(restarts.pause_s())
    assert pauses == [*RESTART_PAUSES_S, RESTART_PAUSES_S[-1], RESTART_PAUSES_S[-1]]


def test_gives_up_once_patience_passed_without_a_batch() -> None:
    clock = Clock()
    restarts = TransientRestarts(clock)
    assert restarts.failed()
    clock.now += TRANSIENT_PATIENCE_S - 1
    assert restarts.failed()
    clock.now += 1
    assert not restarts.failed()


def test_a_batch_done_forgets_the_failures_before_it() -> None:
    clock = Clock()
    restarts = TransientRestarts(clock)
    for _ in range(3):
        restarts.failed()
    clock.now += TRANSIENT_PATIENCE_S - 1
    restarts.progressed()
    clock.now += 10
    assert restarts.failed()  # patience counts from this failure again
    assert restarts.count == 1 and restarts.pause_s() == RESTART_PAUSES_S[0]
    clock.now += TRANSIENT_PATIENCE_S - 1
    assert restarts.failed()
