"""A Connect worker's group membership alone in a process, for the tests that kill one.

    python connect_group_member.py BOOTSTRAP GROUP URL TASKS_JSON

Joins GROUP with the work TASKS_JSON ([[connector, number], ...]) and prints, as one
JSON line each, every plan it is given and every time it gives its work up (``mine``
null), with the machine's monotonic clock: a test can then check across processes that
no task was held by two workers at once. Runs until its stdin closes (then leaves the
group) or it is killed."""

from __future__ import annotations

import json
import sys
import time

from strom.connect.group_member import GroupAssignment, GroupMember


def main() -> None:
    bootstrap, group, url, work = sys.argv[1:5]
    tasks = [(str(c), int(n)) for c, n in json.loads(work)]

    def show(plan: GroupAssignment | None) -> None:
        event = {"at": time.monotonic(), "url": url, "mine": None}
        if plan is not None:
            event |= {
                "generation": plan.generation,
                "leader": plan.leader_url,
                "mine": sorted(plan.mine()),
                "urls": sorted(plan.urls.values()),
            }
        print(json.dumps(event), flush=True)

    member = GroupMember(
        bootstrap,
        group,
        url,
        lambda: tasks,
        show,
        session_timeout_ms=1500,
        heartbeat_interval_ms=300,
        rebalance_timeout_ms=5000,
    )
    member.start()
    sys.stdin.read()
    member.close()


if __name__ == "__main__":
    main()
