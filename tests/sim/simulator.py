"""A deterministic simulator for the Raft core: a whole quorum in one process.

Owns the simulated world around ``strom.raft.core.RaftNode``: a clock, a network that
loses, delays, duplicates and reorders messages and can be partitioned (symmetric,
asymmetric, the leader alone) and healed, disks that keep exactly what each node's
``Ready`` asked to persist, crashes (also between ``ready()`` and the persist, which loses
that Ready) and restarts from the disk, clients proposing records to whoever leads, and
state machines that apply what commits and snapshot now and then.

Everything random comes from one ``random.Random(seed)``, so a seed replays a run exactly.
After every step it checks the invariants (see ``Simulation.check_*``); a violation raises
``SimFailure`` with the seed and the tail of the event trace.

Does not own the rules of Raft (the core) or what the tests choose to run.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import deque
from dataclasses import dataclass, field, replace

from strom.raft.core import RaftConfig, RaftNode, Ready, Role
from strom.raft.log import cut_batches
from strom.raft.messages import (
    Batch,
    FetchResponse,
    Message,
    QuorumState,
    Snapshot,
    SnapshotId,
    VoteResponse,
)

TICK_MS = 10

SIM_RAFT_CONFIG = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=100,
    request_timeout_ms=150,
    fetch_max_wait_ms=50,
    retry_backoff_ms=20,
    fetch_max_bytes=120,
    fetch_snapshot_max_bytes=150,
)


class SimFailure(AssertionError):
    pass


@dataclass
class Scenario:
    """What a run does; every probability is per tick (10 ms) unless said otherwise."""

    voters: int = 3
    observers: int = 1
    fault_ms: int = 2500  # the faulty part of the run
    liveness_ms: int = 6000  # after healing: a leader and a commit within this
    loss: float = 0.03  # per message
    duplicate: float = 0.03  # per message
    max_delay_ms: int = 25
    propose: float = 0.25
    crash: float = 0.006
    crash_in_ready: float = 0.0015  # per Ready that asks to persist something
    restart: float = 0.05  # a down node comes back
    long_outage: bool = False  # keep one node down for most of the run
    partition: float = 0.01
    heal: float = 0.03
    snapshot: float = 0.03
    snapshot_every: int = 12  # records applied since the node's last snapshot
    resign: float = 0.003
    crash_leader: float = 0.3  # share of crashes that hit the leader (if there is one)
    # Lose what Kafka's wire does not carry (VoteResponse.pre_vote, the request echo in
    # FetchResponse), as a network side that does not fill them in would.
    bare_wire: bool = False
    config: RaftConfig = SIM_RAFT_CONFIG


@dataclass
class Disk:
    quorum_state: QuorumState = field(default_factory=QuorumState)
    snapshot: Snapshot | None = None
    batches: list[Batch] = field(default_factory=list)

    def holds(self, offset: int, epoch: int) -> bool:
        """Whether the record at ``offset`` of ``epoch`` is here (a snapshot holds all
        records below its end: they were committed)."""
        if self.snapshot is not None and offset < self.snapshot.snapshot_id.end_offset:
            return True
        for batch in self.batches:
            if batch.base_offset <= offset < batch.end_offset:
                return batch.epoch == epoch
        return False


def encode_state(entries: list[tuple[int, bytes]]) -> bytes:
    return json.dumps([[e, r.decode()] for e, r in entries]).encode()


def decode_state(data: bytes) -> list[tuple[int, bytes]]:
    return [(e, r.encode()) for e, r in json.loads(data)]


@dataclass
class SimNode:
    node_id: int
    disk: Disk = field(default_factory=Disk)
    raft: RaftNode | None = None
    entries: list[tuple[int, bytes]] = field(default_factory=list)  # applied (epoch, record)
    snapshot_at: int = 0  # applied count at the last snapshot


class Simulation:
    def __init__(self, seed: int, scenario: Scenario) -> None:
        self.seed = seed
        self.sc = scenario
        self.rng = random.Random(seed)
        self.now = 0
        self.voter_ids = frozenset(range(1, scenario.voters + 1))
        self.majority = scenario.voters // 2 + 1
        self.ids = list(range(1, scenario.voters + scenario.observers + 1))
        self.nodes = {i: SimNode(i) for i in self.ids}
        self.queue: list[tuple[int, int, Message]] = []
        self.seq = 0
        self.blocked: set[tuple[int, int]] = set()
        self.trace: deque[tuple] = deque(maxlen=200)
        self.committed: list[tuple[int, bytes]] = []  # global: offset -> (epoch, record)
        self.leaders: dict[int, int] = {}  # epoch -> leader, over the whole run
        self.proposed = 0
        self.faults = True
        self.outage_node: int | None = None
        self.counts = {"snapshot_installs": 0, "crashes": 0, "elections": 0}
        for i in self.ids:
            self.start(i)

    # Failure ---------------------------------------------------------------------

    def fail(self, message: str) -> None:
        lines = [f"{t:>6} {' '.join(map(str, rest))}" for t, *rest in self.trace]
        raise SimFailure(
            f"seed={self.seed}: {message}\n"
            f"(reproduce: STROM_SIM_SEED={self.seed} pytest tests/sim)\n"
            "last events:\n" + "\n".join(lines)
        )

    def log(self, *event: object) -> None:
        self.trace.append((self.now, *event))

    # Nodes -------------------------------------------------------------------------

    def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        disk = node.disk
        node.raft = RaftNode(
            node_id,
            self.voter_ids,
            self.sc.config,
            random.Random(self.rng.getrandbits(64)),
            self.now,
            quorum_state=disk.quorum_state,
            snapshot=disk.snapshot,
            batches=list(disk.batches),
        )
        node.entries = []
        node.snapshot_at = 0
        self.log("start", node_id, disk.quorum_state, node.raft.role.value)
        self.pump(node)

    def crash(self, node: SimNode, why: str) -> None:
        node.raft = None
        self.counts["crashes"] += 1
        self.log("crash", node.node_id, why)

    def pump(self, node: SimNode) -> None:
        """The driver's contract: persist, then send, then apply."""
        raft = node.raft
        assert raft is not None
        ready = raft.ready()
        if ready.persist_needed and self.faults and self.rng.random() < self.sc.crash_in_ready:
            self.crash(node, "before persisting its Ready")
            return
        self.persist(node, ready)
        for message in ready.messages:
            self.send(message)
        self.apply(node, ready)
        if raft.role == Role.LEADER:
            known = self.leaders.get(raft.epoch)
            if known is None:
                self.leaders[raft.epoch] = node.node_id
                self.counts["elections"] += 1
                self.log("leader", node.node_id, raft.epoch)
            elif known != node.node_id:
                self.fail(f"two leaders in epoch {raft.epoch}: {known} and {node.node_id}")
        self.check_high_watermark(node)

    def persist(self, node: SimNode, ready: Ready) -> None:
        disk = node.disk
        if ready.quorum_state is not None:
            if ready.quorum_state.epoch < disk.quorum_state.epoch:
                self.fail(f"node {node.node_id} persisted an older epoch {ready.quorum_state}")
            disk.quorum_state = ready.quorum_state
        if ready.snapshot is not None:
            disk.snapshot = ready.snapshot
            disk.batches = []
            self.counts["snapshot_installs"] += 1
            self.log("installed", node.node_id, ready.snapshot.snapshot_id)
        if ready.truncate_to is not None:
            disk.batches = cut_batches(disk.batches, ready.truncate_to)
            self.log("truncate", node.node_id, ready.truncate_to)
        for batch in ready.append:
            end = disk.batches[-1].end_offset if disk.batches else self.disk_start(disk)
            if batch.base_offset != end:
                self.fail(f"node {node.node_id} appends at {batch.base_offset}, disk ends at {end}")
            disk.batches.append(batch)
        if ready.delete_before is not None:
            disk.batches = [b for b in disk.batches if b.end_offset > ready.delete_before]
        if (ready.truncate_to is not None or ready.snapshot is not None) and (
            node.node_id in self.voter_ids
        ):
            self.check_majority_holds()

    @staticmethod
    def disk_start(disk: Disk) -> int:
        return disk.snapshot.snapshot_id.end_offset if disk.snapshot is not None else 0

    def apply(self, node: SimNode, ready: Ready) -> None:
        if ready.committed_snapshot is not None:
            entries = decode_state(ready.committed_snapshot.data)
            if len(entries) != ready.committed_snapshot.snapshot_id.end_offset:
                self.fail(f"node {node.node_id}: snapshot size differs from its id")
            node.entries = entries
            node.snapshot_at = len(entries)
            self.check_prefix(node, 0)
        grew = False
        for batch in ready.committed:
            if batch.base_offset != len(node.entries):
                self.fail(
                    f"node {node.node_id} applies batch at {batch.base_offset} "
                    f"after {len(node.entries)} applied"
                )
            start = len(node.entries)
            node.entries.extend((batch.epoch, record) for record in batch.records)
            self.check_prefix(node, start)
            grew = True
        if grew:
            self.check_majority_holds()

    def check_prefix(self, node: SimNode, start: int) -> None:
        """Committed entries are never lost or changed: what ``node`` applied from
        ``start`` on agrees with every other node's (the global record)."""
        committed = self.committed
        entries = node.entries
        for offset in range(start, len(entries)):
            if offset < len(committed):
                if committed[offset] != entries[offset]:
                    self.fail(
                        f"node {node.node_id} applied {entries[offset]} at {offset}, "
                        f"committed there before: {committed[offset]}"
                    )
            else:
                committed.append(entries[offset])

    def check_majority_holds(self) -> None:
        """Every committed entry is on the disks of a majority of voters (checked for the
        last one: a disk holding it holds the prefix, by log matching)."""
        if not self.committed:
            return
        offset = len(self.committed) - 1
        epoch = self.committed[offset][0]
        holders = [v for v in self.voter_ids if self.nodes[v].disk.holds(offset, epoch)]
        if len(holders) < self.majority:
            self.fail(f"committed offset {offset} (epoch {epoch}) is durable only on {holders}")

    def check_high_watermark(self, node: SimNode) -> None:
        raft = node.raft
        if raft is None:
            return
        if raft.high_watermark > len(self.committed) or raft.applied_offset != len(node.entries):
            self.fail(
                f"node {node.node_id}: high watermark {raft.high_watermark}, applied "
                f"{raft.applied_offset}, state machine {len(node.entries)}, committed "
                f"{len(self.committed)}"
            )

    # Network -------------------------------------------------------------------------

    def send(self, message: Message) -> None:
        rng = self.rng
        if self.sc.bare_wire:
            if isinstance(message, VoteResponse):
                message = replace(message, pre_vote=False)
            elif isinstance(message, FetchResponse):
                message = replace(message, fetch_offset=-1, last_fetched_epoch=-1)
        if self.faults and rng.random() < self.sc.loss:
            return
        copies = 2 if self.faults and rng.random() < self.sc.duplicate else 1
        for _ in range(copies):
            delay = rng.randint(1, self.sc.max_delay_ms)
            self.seq += 1
            heapq.heappush(self.queue, (self.now + delay, self.seq, message))

    def deliver_due(self) -> None:
        queue = self.queue
        while queue and queue[0][0] <= self.now:
            _, _, message = heapq.heappop(queue)
            if (message.src, message.dst) in self.blocked:
                continue
            node = self.nodes[message.dst]
            if node.raft is None:
                continue
            self.log("recv", message)
            node.raft.receive(message, self.now)
            self.pump(node)

    # Faults and clients -------------------------------------------------------------------

    def leader(self) -> SimNode | None:
        for node in self.nodes.values():
            if node.raft is not None and node.raft.role == Role.LEADER:
                return node
        return None

    def random_faults(self) -> None:
        rng = self.rng
        sc = self.sc
        nodes = self.nodes
        if rng.random() < sc.crash:
            leader = self.leader()
            up = [n for n in nodes.values() if n.raft is not None]
            if leader is not None and rng.random() < sc.crash_leader:
                self.crash(leader, "crash")
            elif up:
                self.crash(rng.choice(up), "crash")
        if rng.random() < sc.restart:
            down = [n for n in nodes.values() if n.raft is None and n.node_id != self.outage_node]
            if down:
                self.start(rng.choice(down).node_id)
        if rng.random() < sc.partition:
            self.partition()
        if self.blocked and rng.random() < sc.heal:
            self.blocked = set()
            self.log("heal")
        if rng.random() < sc.resign:
            leader = self.leader()
            if leader is not None and leader.raft is not None:
                self.log("resign", leader.node_id)
                leader.raft.resign(self.now)
                self.pump(leader)

    def partition(self) -> None:
        rng = self.rng
        kind = rng.randrange(4)
        ids = self.ids
        leader = self.leader()
        target = leader.node_id if leader is not None and rng.random() < 0.6 else rng.choice(ids)
        if kind == 0:  # isolate one node
            self.blocked |= {(target, o) for o in ids} | {(o, target) for o in ids}
        elif kind == 1:  # it can send but not hear
            self.blocked |= {(o, target) for o in ids}
        elif kind == 2:  # it can hear but not send
            self.blocked |= {(target, o) for o in ids}
        else:  # split in two
            side = set(rng.sample(ids, rng.randint(1, len(ids) - 1)))
            self.blocked |= {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        self.log("partition", kind, target)

    def client(self) -> None:
        leader = self.leader()
        if leader is None or leader.raft is None:
            return
        count = self.rng.randint(1, 3)
        records = []
        for _ in range(count):
            self.proposed += 1
            records.append(f"r{self.proposed}".encode())
        base = leader.raft.propose(records, self.now)
        self.log("propose", leader.node_id, base, len(records))
        self.pump(leader)

    def snapshots(self) -> None:
        rng = self.rng
        for node in self.nodes.values():
            raft = node.raft
            if raft is None or rng.random() >= self.sc.snapshot:
                continue
            applied = len(node.entries)
            if applied - node.snapshot_at < self.sc.snapshot_every:
                continue
            snapshot = Snapshot(
                SnapshotId(applied, node.entries[-1][0]), encode_state(node.entries)
            )
            node.disk.snapshot = snapshot  # the driver saves it before telling the core
            node.snapshot_at = applied
            raft.take_snapshot(snapshot)
            self.log("snapshot", node.node_id, applied)
            self.pump(node)

    # Running --------------------------------------------------------------------------------

    def step(self) -> None:
        self.now += TICK_MS
        if self.faults:
            self.random_faults()
        if self.faults and self.rng.random() < self.sc.propose:
            self.client()
        self.deliver_due()
        for node in self.nodes.values():
            raft = node.raft
            if raft is not None:
                # A tick before the core's next timer must do nothing: the broker's
                # driver sleeps until then.
                quiet = self.now < raft.next_timer_ms() and not raft.has_ready
                before = (raft.role, raft.epoch, raft.leader_id)
                raft.tick(self.now)
                if quiet and (raft.has_ready or (raft.role, raft.epoch, raft.leader_id) != before):
                    self.fail(
                        f"node {node.node_id} acted on a tick before its next timer "
                        f"({raft.next_timer_ms()}): {before} -> "
                        f"{(raft.role, raft.epoch, raft.leader_id)}"
                    )
                self.pump(node)
        self.snapshots()

    def run(self) -> None:
        sc = self.sc
        if sc.long_outage:
            self.outage_node = self.rng.choice(self.ids)
            self.crash(self.nodes[self.outage_node], "long outage")
        outage_end = sc.fault_ms * 3 // 4
        while self.now < sc.fault_ms:
            if self.outage_node is not None and self.now >= outage_end:
                node_id, self.outage_node = self.outage_node, None
                if self.nodes[node_id].raft is None:
                    self.start(node_id)
            self.step()
        self.heal_all()
        self.check_liveness()

    def heal_all(self) -> None:
        self.faults = False
        self.blocked = set()
        self.outage_node = None
        self.log("heal all")
        for node in self.nodes.values():
            if node.raft is None:
                self.start(node.node_id)

    def check_liveness(self) -> None:
        """With the network whole and no crashes, a leader is elected and a new proposal
        commits on every node within ``liveness_ms``."""
        deadline = self.now + self.sc.liveness_ms
        marker = b"final"
        marker_epoch = -1
        while self.now < deadline:
            self.step()
            leader = self.leader()
            raft = leader.raft if leader is not None else None
            done = any(record == marker for _, record in self.committed[-3:])
            if not done and raft is not None and raft.leader_ready and raft.epoch != marker_epoch:
                marker_epoch = raft.epoch
                raft.propose([marker], self.now)
                self.log("propose final", raft.node_id)
                self.pump(self.nodes[raft.node_id])
            if done and all(len(n.entries) == len(self.committed) for n in self.nodes.values()):
                return
        marker = None if marker_epoch < 0 else marker
        states = {
            n.node_id: (n.raft.role.value, n.raft.epoch, n.raft.high_watermark, len(n.entries))
            for n in self.nodes.values()
            if n.raft is not None
        }
        self.fail(
            f"no leader and commit within {self.sc.liveness_ms} ms of healing "
            f"(marker proposed: {marker is not None}); nodes: {states}, "
            f"committed {len(self.committed)}"
        )


def run_seed(seed: int, scenario: Scenario) -> Simulation:
    sim = Simulation(seed, scenario)
    try:
        sim.run()
    except SimFailure:
        raise
    except Exception as exc:  # a crash inside the core is a failure of the run
        lines = [f"{t:>6} {' '.join(map(str, rest))}" for t, *rest in sim.trace]
        raise SimFailure(
            f"seed={seed}: {type(exc).__name__}: {exc}\n"
            f"(reproduce: STROM_SIM_SEED={seed} pytest tests/sim)\n"
            "last events:\n" + "\n".join(lines)
        ) from exc
    return sim
