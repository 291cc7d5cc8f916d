"""Connect workers share the work through Kafka's group protocol (strom.connect.group_
member): three member processes on a real broker split seven tasks between them (the
first, alone at first, gives up its excess for the others in a second round), take over
the tasks of one that leaves and of one killed with SIGKILL while the first keeps
running its own; and, checked from what every process printed with the machine's
monotonic clock, no task was ever held by two workers at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

MEMBER = Path(__file__).resolve().parents[1] / "connect_group_member.py"
WORK = [("jdbc", n) for n in range(4)] + [("files", n) for n in range(3)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "data", {"group.min.session.timeout.ms": "500"}
    )
    process.start()
    yield process
    process.stop()


class Member:
    """One member process and the events it printed."""

    def __init__(self, broker: BrokerProcess, group: str, url: str) -> None:
        self.url = url
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER), broker.bootstrap, group, url, json.dumps(WORK)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ended_at: float | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def plan(self) -> dict[str, Any] | None:
        return self.events[-1] if self.events and self.events[-1]["mine"] is not None else None

    def leave(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(20)
        self.ended_at = time.monotonic()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(20)
        self.ended_at = time.monotonic()


def settled(members: list[Member], timeout: float = 30.0) -> list[list[tuple[str, int]]]:
    """Once every member holds a plan of one generation naming exactly them and giving
    out all the work (not a first round that only took tasks back): each one's tasks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        plans = [m.plan() for m in members]
        if all(plans):
            generations = {p["generation"] for p in plans}  # type: ignore[index]
            urls = {tuple(p["urls"]) for p in plans}  # type: ignore[index]
            split = [[tuple(t) for t in p["mine"]] for p in plans]  # type: ignore[index]
            given = sorted(t for tasks in split for t in tasks)
            if (
                len(generations) == 1
                and urls == {tuple(sorted(m.url for m in members))}
                and given == sorted(WORK)
            ):
                return split
        time.sleep(0.05)
    raise AssertionError(f"no settled plan: {[m.events[-3:] for m in members]}")


def held_at_once(members: list[Member]) -> list[str]:
    """Every moment a task was held by two members, from the events alone (a killed
    member holds its tasks until it was killed)."""
    spans: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
    for member in members:
        held: dict[tuple[str, int], float] = {}
        for event in member.events:
            mine = {tuple(t) for t in event["mine"] or []}
            for task in list(held):
                if task not in mine:
                    spans.setdefault(task, []).append((held.pop(task), event["at"], member.url))
            for task in mine:
                held.setdefault(task, event["at"])
        end = member.ended_at if member.ended_at is not None else time.monotonic()
        for task, start in held.items():
            spans.setdefault(task, []).append((start, end, member.url))
    overlaps = []
    for task, intervals in spans.items():
        intervals.sort()
        _, held_until, holder = intervals[0]
        for start, end, url in intervals[1:]:
            if start < held_until:
                overlaps.append(f"{task} held by {holder} and {url} at {start:.3f}")
            if end > held_until:
                held_until, holder = end, url
    return overlaps


def test_workers_share_tasks_and_take_over_from_one_that_leaves_or_dies(
    broker: BrokerProcess,
) -> None:
    members = [Member(broker, "connect-share", f"http://w{n}:8083") for n in (1, 2, 3)]
    try:
        split = settled(members)
        assert sorted(len(tasks) for tasks in split) == [2, 2, 3]
        assert sorted(t for tasks in split for t in tasks) == sorted(WORK)
        assert len({m.plan()["leader"] for m in members}) == 1  # type: ignore[index]
        first_kept, since = set(split[0]), len(members[0].events)

        members[2].leave()  # LeaveGroup: the others rebalance at once
        split = settled(members[:2])
        assert sorted(len(tasks) for tasks in split) == [3, 4]
        assert sorted(t for tasks in split for t in tasks) == sorted(WORK)

        members[1].kill()  # no goodbye: the session timeout (1.5 s) tells the coordinator
        (alone,) = settled(members[:1])
        assert sorted(alone) == sorted(WORK)
        assert held_at_once(members) == []
        # cooperative: through both rebalances the first member kept running its tasks
        for event in members[0].events[since:]:
            assert first_kept <= {tuple(t) for t in event["mine"] or []}, event
    finally:
        for member in members:
            if member.proc.poll() is None:
                member.kill()
