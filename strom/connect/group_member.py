"""A Connect worker's membership of its group through Kafka's group protocol: which
worker leads and which tasks each worker runs, so that the workers of one ``group.id``
share the work and take it over from a worker that leaves or dies.

The member's thread finds the group's coordinator (FindCoordinator through the bootstrap
brokers), joins the group (JoinGroup, protocol type ``connect``, this worker's REST URL
and the tasks it runs in its metadata), and, when the coordinator makes it the leader,
plans the work (``assign``). The leader sends every member the whole plan (SyncGroup), so
each worker knows who runs what and where to forward a request. Then it heartbeats until
the group rebalances: a worker joined or left, one stopped heartbeating for the session
timeout, or the leader asked for a new plan because the work changed (``request_rejoin``).

Incremental and cooperative, as Kafka Connect's ``sessioned`` protocol: a member keeps
running its tasks while the group rebalances. The plan keeps each task with the member
that runs it; a task nobody runs (new, or its worker gone) goes to the least loaded
member; a member above its share gives the excess up, to nobody in this plan, and the
plan asks for a second round once those tasks have stopped, in which they are given
out. A task is therefore only given to a member while no member of the group says it
runs it, and ``on_assignment`` returns once the member runs what its plan says: no task
runs on two workers. A member put out of the group (UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION) or that loses its coordinator gives up all its work at once
(``on_assignment(None)``), since the others may be given it.

The metadata and the plan are JSON under Strom's own protocol name: Kafka Connect's Java
workers speak their binary ``default``/``compatible``/``sessioned`` formats, so Strom
workers and Java workers cannot share a group.

Does not own what the herder runs (``herder``) or how the work is counted.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i32Timedelta

from strom.client_security import ClientSecurity
from strom.protocol.errors import ErrorCode
from strom.wire_client import WireConnection, split_bootstrap

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "connect"
PROTOCOL = "strom-cooperative-1"
CONNECT_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 0.5

TaskId = tuple[str, int]

_MEMBER_GONE = {ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id}


def _millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


class GroupError(Exception):
    """The coordinator refused this member for a reason a new attempt may mend."""


@dataclass(frozen=True)
class GroupAssignment:
    """One generation's plan, the same for every member: who leads, each member's URL
    and tasks."""

    generation: int
    member_id: str
    leader_id: str
    urls: dict[str, str]
    tasks: dict[str, list[TaskId]] = field(default_factory=dict)
    second_round: bool = False  # tasks were given up to move: join again once stopped

    @property
    def leader_url(self) -> str:
        return self.urls[self.leader_id]

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader_id

    def mine(self) -> frozenset[TaskId]:
        return frozenset(self.tasks.get(self.member_id, ()))

    def owner_url(self, task: TaskId) -> str | None:
        """The URL of the worker this plan gives ``task`` to."""
        for member, tasks in self.tasks.items():
            if task in tasks:
                return self.urls[member]
        return None

    def encode(self) -> bytes:
        tasks = {member: [list(task) for task in ts] for member, ts in self.tasks.items()}
        plan = {
            "leader": self.leader_id,
            "urls": self.urls,
            "tasks": tasks,
            "second_round": self.second_round,
        }
        return json.dumps(plan).encode()

    @classmethod
    def decode(cls, data: bytes, generation: int, member_id: str) -> GroupAssignment:
        plan = json.loads(data)
        tasks = {m: [(str(c), int(n)) for c, n in ts] for m, ts in plan["tasks"].items()}
        return cls(
            generation,
            member_id,
            plan["leader"],
            dict(plan["urls"]),
            tasks,
            bool(plan.get("second_round")),
        )


def assign(
    running: dict[str, frozenset[TaskId]], work: list[TaskId]
) -> tuple[dict[str, list[TaskId]], bool]:
    """The plan for ``work`` among the members (member id -> the tasks it runs now), and
    whether a second round is needed. Each member's share is the work divided evenly
    (the members running the most take the shares one larger, so that the fewest tasks
    move); a member keeps what it runs up to its share, and what it runs beyond goes to
    nobody now: a second round gives it out once stopped. Every other task goes to a
    member below its share. The same group and work give the same plan."""
    wanted = set(work)
    base, extra = divmod(len(wanted), len(running))
    by_load = sorted(running, key=lambda member: (-len(running[member] & wanted), member))
    share = {member: base + (index < extra) for index, member in enumerate(by_load)}
    plan: dict[str, list[TaskId]] = {member: [] for member in sorted(running)}
    kept: set[TaskId] = set()
    for member in by_load:
        for task in sorted(running[member] & wanted - kept):
            if len(plan[member]) < share[member]:
                plan[member].append(task)
                kept.add(task)
    given_up = {task for member in running for task in running[member] & wanted} - kept
    for task in sorted(wanted - kept - given_up):
        least = min(plan, key=lambda member: (len(plan[member]) - share[member], member))
        plan[least].append(task)
    return plan, bool(given_up)


class GroupMember:
    """This worker in its group; ``on_assignment`` gets each generation's plan, or None
    when the worker must give up its work (it returns once the work has stopped)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        url: str,
        work: Callable[[], list[TaskId]],
        on_assignment: Callable[[GroupAssignment | None], None],
        security: ClientSecurity | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 60_000,
        client_id: str = "strom-connect",
    ) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.url = url
        self.work = work
        self.on_assignment = on_assignment
        self.security = security
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        self.member_id = ""
        self.assignment: GroupAssignment | None = None
        self._conn: WireConnection | None = None
        self._stopped = threading.Event()
        self._rejoin = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="connect-group")

    def start(self) -> None:
        self._thread.start()

    def request_rejoin(self) -> None:
        """Ask for a new plan (the leader, when the work changed)."""
        self._rejoin.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Give up the work, leave the group (so the others take over at once) and stop."""
        self._stopped.set()
        self._rejoin.set()
        self._thread.join(self.heartbeat_interval_s + 1)
        if self._thread.is_alive() and self._conn is not None:
            self._conn.close()  # a JoinGroup held by the coordinator: let it go
        self._thread.join(timeout_s)

    # The member's thread.

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    self._conn = self._coordinator()
                    while not self._stopped.is_set():
                        self._join_and_sync()
                        self._heartbeat_until_rebalance()
                except Exception as exc:  # nothing may end the membership but close()
                    if not self._stopped.is_set():
                        log.warning("group %s: %s; joining again", self.group, exc)
                    self._give_up_work()
                    self._close_connection()
                    self._stopped.wait(RETRY_BACKOFF_S)
        finally:
            self._give_up_work()
            self._leave()
            self._close_connection()

    def _connect(self, host: str, port: int) -> WireConnection:
        return WireConnection(
            host,
            port,
            self.client_id,
            connect_timeout_s=CONNECT_TIMEOUT_S,
            # a JoinGroup is held until the group's rebalance is done
            request_timeout_s=self.rebalance_timeout_ms / 1000 + CONNECT_TIMEOUT_S,
            security=self.security,
        )

    def _coordinator(self) -> WireConnection:
        last: Exception | None = None
        for host, port in split_bootstrap(self.bootstrap):
            try:
                conn = self._connect(host, port)
            except OSError as exc:
                last = exc
                continue
            try:
                found = conn.request(FindCoordinatorRequest(key=self.group, key_type=i8(0)))
            finally:
                conn.close()
            if found.error_code != ErrorCode.none:
                raise GroupError(f"no coordinator yet ({found.error_code.name})")
            return self._connect(found.host, found.port)
        raise OSError(f"cannot reach a broker at {self.bootstrap}: {last}")

    def _join_and_sync(self) -> None:
        assert self._conn is not None
        mine = sorted(self.assignment.mine()) if self.assignment is not None else []
        metadata = json.dumps({"url": self.url, "running": mine}).encode()
        while True:
            joined = self._conn.request(
                JoinGroupRequest(
                    group_id=GroupId(self.group),
                    session_timeout=_millis(self.session_timeout_ms),
                    rebalance_timeout=_millis(self.rebalance_timeout_ms),
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type=PROTOCOL_TYPE,
                    protocols=(JoinGroupRequestProtocol(name=PROTOCOL, metadata=metadata),),
                )
            )
            if joined.error_code == ErrorCode.member_id_required:
                self.member_id = joined.member_id
                continue
            self._check(joined.error_code, "JoinGroup")
            break
        self.member_id = joined.member_id
        plans: tuple[SyncGroupRequestAssignment, ...] = ()
        if joined.leader == self.member_id:
            said = {m.member_id: json.loads(m.metadata) for m in joined.members}
            urls = {member: meta["url"] for member, meta in said.items()}
            running = {
                member: frozenset((str(c), int(n)) for c, n in meta.get("running", []))
                for member, meta in said.items()
            }
            tasks, second_round = assign(running, self.work())
            plan = GroupAssignment(
                joined.generation_id, self.member_id, self.member_id, urls, tasks, second_round
            ).encode()
            plans = tuple(SyncGroupRequestAssignment(member_id=m, assignment=plan) for m in urls)
        synced = self._conn.request(
            SyncGroupRequest(
                group_id=GroupId(self.group),
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=None,
                assignments=plans,
            )
        )
        if synced.error_code == ErrorCode.rebalance_in_progress:
            self._rejoin.set()  # join again at once, still running what it runs
            return
        self._check(synced.error_code, "SyncGroup")
        before = self.assignment.mine() if self.assignment is not None else frozenset()
        self.assignment = GroupAssignment.decode(
            synced.assignment, joined.generation_id, self.member_id
        )
        if self.assignment.second_round and before - self.assignment.mine():
            self._rejoin.set()  # once what it gave up has stopped (on_assignment below)
        log.info(
            "group %s generation %d: %s leads, %d task(s) here",
            self.group,
            joined.generation_id,
            self.assignment.leader_url,
            len(self.assignment.mine()),
        )
        self.on_assignment(self.assignment)

    def _heartbeat_until_rebalance(self) -> None:
        assert self._conn is not None
        while not self._stopped.is_set():
            if self._rejoin.wait(self.heartbeat_interval_s):
                self._rejoin.clear()
                return  # a JoinGroup from a member of the group starts a rebalance
            if self.assignment is None:
                return
            answered = self._conn.request(
                HeartbeatRequest(
                    group_id=GroupId(self.group),
                    generation_id=i32(self.assignment.generation),
                    member_id=self.member_id,
                    group_instance_id=None,
                )
            )
            if answered.error_code == ErrorCode.rebalance_in_progress:
                return  # join again, still running what it runs
            self._check(answered.error_code, "Heartbeat")

    def _check(self, code: ErrorCode, request: str) -> None:
        """GroupError for an error: the caller gives up the work (the others may be given
        it); a member id the coordinator no longer knows is forgotten."""
        if code == ErrorCode.none:
            return
        if code in _MEMBER_GONE:
            self.member_id = ""
        raise GroupError(f"{request}: {code.name}")

    def _give_up_work(self) -> None:
        if self.assignment is not None:
            self.assignment = None
            self.on_assignment(None)

    def _leave(self) -> None:
        if not self.member_id:
            return
        try:
            if self._conn is None or self._conn.sock.fileno() < 0:
                self._conn = self._coordinator()
            self._conn.request(
                LeaveGroupRequest(
                    group_id=GroupId(self.group),
                    members=(MemberIdentity(member_id=self.member_id, group_instance_id=None),),
                )
            )
        except (OSError, GroupError) as exc:
            log.info("group %s: leaving: %s", self.group, exc)
        self.member_id = ""

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
