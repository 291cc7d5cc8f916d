"""A Connect worker's place in its group: whether it leads (writes configs, decides who
runs what) and which connectors and tasks it runs.

- ``SoleMember``: a standalone worker, its own leader, running everything.
- ``SharedWork``: the distributed workers of one ``group.id`` (``strom.connect.
  group_member``, Kafka's group protocol): the leader writes the configs and runs the
  connector instances (which only compute task configs); the tasks, the work, are shared
  among all the workers evenly, and move when a worker joins, leaves or dies.
  Writes go to the leader, a task's restart to the worker that runs it.

Does not own what the herder does with it.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from strom.client_security import ClientSecurity
from strom.connect.group_member import GroupAssignment, GroupMember, TaskId

log = logging.getLogger(__name__)
CLIENT_PREFIX = "strom-connect "


class Membership(ABC):
    """This worker's place in its group: leader or not, and its generation."""

    generation = 0

    @abstractmethod
    def is_leader(self) -> bool: ...

    @abstractmethod
    def leader_url(self) -> str | None: ...

    # By default the leader runs everything and the others nothing (SoleMember).

    def holds_work(self) -> bool:
        """Whether this worker has work it may run now (else it must stop all it runs)."""
        return self.is_leader()

    def runs_connectors(self) -> bool:
        """Whether the connector instances run here (they compute the task configs)."""
        return self.is_leader()

    def runs_task(self, task: TaskId) -> bool:
        return self.is_leader()

    def task_owner_url(self, task: TaskId) -> str | None:
        """The URL of the worker that runs ``task``."""
        return self.leader_url()

    def work_changed(self, tasks: set[TaskId]) -> None:  # noqa: B027 - an optional hook
        """The leader's tasks are now ``tasks``: ask for a new plan if they differ."""

    def start(self, on_change: Callable[[], None]) -> None:  # noqa: B027 - an optional hook
        """Join the group; ``on_change()`` when what this worker runs changes (it returns
        once the work given up has stopped)."""

    def wait_for_leader(self, timeout_s: float) -> str | None:
        """The leader's URL once one is known (None if none within ``timeout_s``)."""
        return self.leader_url()

    def close(self) -> None:  # noqa: B027 - an optional hook
        pass


class SoleMember(Membership):
    """A standalone worker: its own leader."""

    def __init__(self, url: str) -> None:
        self.url = url

    def is_leader(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return self.url


class SharedWork(Membership):
    """Distributed workers sharing the tasks through Kafka's group protocol (see the
    module's text). ``work`` lists every task of the stored configs, for the leader's
    plan."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        url: str,
        security: ClientSecurity | None,
        work: Callable[[], list[TaskId]],
        timeouts_ms: dict[str, int],
    ) -> None:
        self.url = url
        self.plan: GroupAssignment | None = None
        self.generation = 0
        self._on_change: Callable[[], None] = lambda: None
        self._known = threading.Condition()
        self.member = GroupMember(
            bootstrap,
            group_id,
            url,
            work,
            self._assigned,
            security=security,
            session_timeout_ms=timeouts_ms["session.timeout.ms"],
            heartbeat_interval_ms=timeouts_ms["heartbeat.interval.ms"],
            rebalance_timeout_ms=timeouts_ms["rebalance.timeout.ms"],
            client_id=CLIENT_PREFIX.strip(),
        )

    def start(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self.member.start()

    def _assigned(self, plan: GroupAssignment | None) -> None:
        """On the member's thread: a new plan, or None to stop all work (returns once
        the herder has)."""
        with self._known:
            self.plan = plan
            if plan is not None:
                self.generation = plan.generation
            self._known.notify_all()
        self._on_change()

    def holds_work(self) -> bool:
        return self.plan is not None

    def is_leader(self) -> bool:
        plan = self.plan
        return plan is not None and plan.is_leader

    def runs_connectors(self) -> bool:
        return self.is_leader()

    def runs_task(self, task: TaskId) -> bool:
        plan = self.plan
        return plan is not None and task in plan.mine()

    def task_owner_url(self, task: TaskId) -> str | None:
        plan = self.plan
        return None if plan is None else plan.owner_url(task)

    def leader_url(self) -> str | None:
        plan = self.plan
        return None if plan is None else plan.leader_url

    def wait_for_leader(self, timeout_s: float) -> str | None:
        with self._known:
            self._known.wait_for(lambda: self.plan is not None, timeout_s)
        return self.leader_url()

    def work_changed(self, tasks: set[TaskId]) -> None:
        plan = self.plan
        if plan is not None and plan.is_leader:
            planned = {task for member_tasks in plan.tasks.values() for task in member_tasks}
            if planned != tasks:
                self.member.request_rejoin()

    def close(self) -> None:
        self.member.close()
