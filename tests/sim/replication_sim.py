"""A deterministic simulator for partition replication: brokers, a controller, a network.

Owns the simulated world around Strom's replication rules: brokers whose leaders run
``strom.replication.leader.PartitionLeader`` and whose followers apply
``strom.replication.follower``, the real ``QuorumController`` deciding registrations,
fencing, elections and ISR changes (the metadata quorum under it is proven by the Raft
simulator; here it commits at once), each broker's own lagging view of the committed
metadata (``MetadataImage``; a started broker acts on it once the controller has
unfenced it, as the broker's start waits to), a network that loses, delays and
reorders messages and can cut links, a client producing acks=all records to whoever it
thinks leads, and faults: kill -9 (the page cache survives: logs are kept, memory is
not), power losses (what was not flushed goes too; truncations and the epoch cache are
written with fsync, as the storage does), pauses (SIGSTOP), slow brokers (stopped most
of every 100 ms), cut links.

The broker's network side is modelled on ``strom.broker``: fetch handling as
``broker/fetch.py`` does it (leadership and leader-epoch checks, the diverging epoch,
out of range, follower progress), the fetcher as ``ReplicaFetcher``, AlterPartition
sent until settled as ``ReplicaManager._alter_isr``, acks=all answered by
``acks_outcome``. The log is a model of ``PartitionLog``'s replication contract (the
storage's own tests check the real one against the same rules).

Everything random comes from one ``random.Random(seed)``. After every step the checker,
which knows nothing of the rules above, checks the invariants:

- an acks=all success was on at least ``min.insync.replicas`` logs when it was given;
- every acknowledged record is in the log of every member of the controller's ISR (so
  it survives any failures that leave one ISR member, which is all an election takes),
  and in the log of every leader once it leads;
- no two logs disagree below the smaller of their high watermarks, and no high
  watermark is past its log's end;
- after the faults end, within ``liveness_ms``: a leader, every replica back in the
  ISR, every log equal to the leader's, the high watermark at the log end, every
  acknowledged record there.

With power losses and no flush settings (``flush_every_append`` off) the guarantee is
weaker, and so is the check: a record counts as held by a follower that reported it
and lost it in a power loss since; an ISR member may lack what its power loss took; a
leader may lead without acknowledged records only if its own power loss took them
(counted in ``stats["lost_to_power_loss"]`` and no longer checked); logs may disagree
below high watermarks. With ``flush_every_append`` (flush.messages=1) every invariant
holds as for kill -9.

A violation raises ``SimFailure`` with the seed and the tail of the history.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from strom.cluster.controller_api import (
    AlterPartitionEntry,
    ControllerConfig,
    ControllerError,
    IsrMember,
    NewTopic,
)
from strom.cluster.image import NO_LEADER, Endpoint, MetadataImage, PartitionState
from strom.cluster.partition_change import LEADER_RECOVERING
from strom.cluster.quorum_controller import QuorumController, bootstrap_records
from strom.protocol.errors import ErrorCode
from strom.replication import follower
from strom.replication.leader import IsrChange, PartitionLeader, diverging_epoch

TICK_MS = 10
CONTROLLER = 0
TOPIC = "events"
MV = 25
FEATURES = {"metadata.version": (7, 25)}
LISTENERS = [Endpoint("PLAINTEXT", "127.0.0.1", 9092, 0)]


class SimFailure(AssertionError):
    pass


@dataclass
class Scenario:
    """What a run does; every probability is per tick (10 ms) unless said otherwise."""

    brokers: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    fault_ms: int = 6000
    liveness_ms: int = 8000
    loss: float = 0.02  # per message
    max_delay_ms: int = 30
    metadata_delay_max_ms: int = 60
    produce: float = 0.6
    max_batch: int = 3
    kill: float = 0.002
    # Share of kills that are power losses: the page cache goes too, each log keeps
    # what was flushed (and truncations, which are durable).
    power_loss: float = 0.0
    flush: float = 0.0  # per broker and tick: its logs are flushed (log.flush.*)
    flush_every_append: bool = False  # flush.messages=1: nothing unflushed is reported
    restart: float = 0.03
    pause: float = 0.003
    resume: float = 0.03
    slow: float = 0.003  # a broker becomes slow: stopped 80 ms of every 100 ms
    slow_end: float = 0.01
    cut: float = 0.002  # links between one broker and the others (and the controller)
    cut_controller: float = 0.3  # share of cuts that also cut it off from the controller
    heal: float = 0.02
    kill_leader: float = 0.5  # share of kills and pauses that hit the partition's leader
    lag_time_max_ms: int = 400
    session_timeout_ms: int = 600
    heartbeat_ms: int = 50
    fetch_max_wait_ms: int = 40
    fetch_max_records: int = 8
    request_timeout_ms: int = 300
    checkpoint: float = 0.02  # the high watermark checkpoint is written


# -- the log ------------------------------------------------------------------------


@dataclass
class ModelLog:
    """``PartitionLog``'s replication contract over (leader epoch, record id) entries:
    the epoch cache (KIP-279 answers), truncation that also drops epoch entries at or
    past the cut, the high watermark within the log."""

    entries: list[tuple[int, int]] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start offset)
    high_watermark: int = 0
    log_start_offset: int = 0
    truncations: int = 0  # how many times records were cut (the checker's cue)
    flushed: int = 0  # entries on disk; the rest is in the page cache

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def assign_epoch(self, epoch: int, start: int) -> None:
        if epoch <= self.latest_epoch:
            return
        while self.epochs and self.epochs[-1][1] >= start:
            self.epochs.pop()
        self.epochs.append((epoch, start))

    def append(self, epoch: int, records: list[int]) -> None:
        self.assign_epoch(epoch, self.log_end_offset)
        self.entries.extend((epoch, r) for r in records)

    def append_as_follower(self, entries: list[tuple[int, int]]) -> None:
        for epoch, record in entries:
            self.assign_epoch(epoch, self.log_end_offset)
            self.entries.append((epoch, record))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if epoch < 0 or not self.epochs:
            return -1, -1
        if epoch == self.epochs[-1][0]:
            return epoch, self.log_end_offset
        above = [i for i, (e, _) in enumerate(self.epochs) if e > epoch]
        if not above:
            return -1, -1
        first_above = above[0]
        if first_above == 0:
            return epoch, self.epochs[0][1]
        return self.epochs[first_above - 1][0], self.epochs[first_above][1]

    def truncate_to(self, offset: int) -> None:
        if offset < self.log_end_offset:
            del self.entries[offset:]
            self.high_watermark = min(self.high_watermark, offset)
            self.truncations += 1
            self.flushed = min(self.flushed, offset)  # the cut is fsynced
        self.epochs = [(e, s) for e, s in self.epochs if s < offset]

    def truncate_fully_and_start_at(self, start: int) -> None:
        raise AssertionError("the model log never moves its start")

    def set_high_watermark(self, offset: int) -> None:
        self.high_watermark = min(max(offset, 0), self.log_end_offset)

    def flush(self) -> None:
        self.flushed = self.log_end_offset

    def lose_unflushed(self) -> None:
        """Power loss: what was not flushed is gone. At the next open the epoch cache
        (written with fsync when an epoch begins) drops entries past the log end."""
        if self.flushed < self.log_end_offset:
            del self.entries[self.flushed :]
            self.truncations += 1
            self.high_watermark = min(self.high_watermark, self.flushed)
        self.epochs = [(e, s) for e, s in self.epochs if s < self.log_end_offset]


# -- messages -----------------------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    follower: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    broker_epoch: int


@dataclass(frozen=True)
class FetchAnswer:
    leader_epoch: int  # the follower's view when it asked
    error: ErrorCode
    entries: tuple[tuple[int, int], ...] = ()
    base_offset: int = -1
    high_watermark: int = -1
    diverging: tuple[int, int] | None = None


@dataclass(frozen=True)
class Produce:
    records: tuple[int, ...]


@dataclass(frozen=True)
class Heartbeat:
    incarnation: uuid.UUID
    broker_epoch: int
    metadata_offset: int


@dataclass(frozen=True)
class HeartbeatAnswer:
    incarnation: uuid.UUID
    broker_epoch: int  # -1: registration or heartbeat refused
    fenced: bool = True
    asked_epoch: int = -1  # the broker epoch the heartbeat carried


@dataclass(frozen=True)
class AlterPartition:
    change: IsrChange
    leader_epoch: int
    broker_epoch: int
    recovery_state: int


@dataclass(frozen=True)
class AlterPartitionAnswer:
    change: IsrChange
    error: ErrorCode
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


# -- a broker -------------------------------------------------------------------------


@dataclass
class PendingAck:
    end_offset: int
    leader: PartitionLeader
    first_offset: int
    entries: tuple[tuple[int, int], ...]
    reply: Any = None  # what a client that waits for the answer needs to match it


@dataclass
class SimBroker:
    broker_id: int
    log: ModelLog = field(default_factory=ModelLog)
    up: bool = True
    paused: bool = False
    slow_until_ms: int = -1
    incarnation: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    broker_epoch: int = -1
    image: MetadataImage | None = None
    applied: int = 0  # metadata records applied
    ready: bool = False  # unfenced once since it started: it acts on its metadata
    metadata_offset: int = -1  # of the last one
    role: tuple[int, int] | None = None  # (leader, leader epoch) acted on
    leading: PartitionLeader | None = None
    fetch_in_flight_until: int = -1
    next_fetch_ms: int = 0
    next_heartbeat_ms: int = 0
    acks: list[PendingAck] = field(default_factory=list)
    # AlterPartitions to send: change -> (when, whether an earlier send went unanswered then)
    alters: dict[IsrChange, tuple[int, bool]] = field(default_factory=dict)
    checkpointed_hw: int = 0
    # (offset, entry) its log lost in power losses: the page cache it was in went
    lost_to_power: set[tuple[int, tuple[int, int]]] = field(default_factory=set)

    def running(self, now_ms: int) -> bool:
        if not self.up or self.paused:
            return False
        return not (now_ms < self.slow_until_ms and now_ms % 100 < 80)

    def partition(self) -> PartitionState | None:
        if self.image is None:
            return None
        topic = self.image.topics.get(TOPIC)
        return topic.partitions.get(0) if topic is not None else None


class ReplicationSimulation:
    def __init__(self, seed: int, scenario: Scenario) -> None:
        self.seed = seed
        self.sc = scenario
        self.rng = random.Random(seed)
        self.now = 0
        self.history: deque[str] = deque(maxlen=120)
        image = MetadataImage()
        image.apply_all(bootstrap_records(MV), 0)
        self.base_image = image.copy()
        self.controller = QuorumController(
            image,
            ControllerConfig(
                cluster_id="sim",
                broker_session_timeout_ms=scenario.session_timeout_ms,
                min_insync_replicas=scenario.min_insync_replicas,
                default_replication_factor=scenario.replication_factor,
            ),
            rng=random.Random(seed),
            now_ms=0,
        )
        # (commit time, offset, record): what the controller committed after bootstrap
        self.records: list[tuple[int, int, Any]] = []
        self.brokers = {i: SimBroker(i) for i in range(1, scenario.brokers + 1)}
        for broker in self.brokers.values():
            broker.incarnation = self._new_incarnation()
        self.queue: list[tuple[int, int, int, int, Any]] = []  # (at, seq, src, dst, msg)
        self._seq = 0
        self.cut_links: set[tuple[int, int]] = set()
        self.next_record = 1
        self.acknowledged: dict[int, tuple[int, int]] = {}  # offset -> (epoch, record)
        self.stats = {
            "acked": 0,
            "refused": 0,
            "kills": 0,
            "power_losses": 0,
            "lost_to_power_loss": 0,
            "pauses": 0,
            "elections": 0,
        }
        self.topic_created = False
        # the checker's memory of what it checked already
        self._ack_order: list[int] = []  # acknowledged offsets, in acknowledgement order
        self._verified: dict[int, tuple[int, int]] = {}  # broker -> (its cuts, acks seen)
        self._agreed: dict[tuple[int, int], tuple[int, tuple[int, int]]] = {}
        self._leader_checked: tuple[int, int] | None = None

    # -- plumbing ----------------------------------------------------------------------

    def _new_incarnation(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128))

    def note(self, text: str) -> None:
        self.history.append(f"{self.now:>6} ms  {text}")

    def fail(self, text: str) -> None:
        tail = "\n".join(self.history)
        raise SimFailure(f"seed {self.seed}: {text}\n--- last events ---\n{tail}")

    def send(self, src: int, dst: int, msg: Any) -> None:
        if (src, dst) in self.cut_links or self.rng.random() < self.sc.loss:
            return
        at = self.now + self.rng.randint(1, self.sc.max_delay_ms)
        self._seq += 1
        heapq.heappush(self.queue, (at, self._seq, src, dst, msg))

    def commit(self, records: tuple[Any, ...]) -> None:
        first = self.controller.next_offset - len(records)
        for i, record in enumerate(records):
            self.records.append((self.now, first + i, record))

    # -- the run -----------------------------------------------------------------------

    def run(self) -> None:
        sc = self.sc
        end = sc.fault_ms + sc.liveness_ms
        while self.now <= end:
            faulty = self.now < sc.fault_ms
            if faulty:
                self.inject_faults()
            elif self.now == sc.fault_ms:
                self.heal_everything()
            self.deliver()
            self.clients_tick()
            self.controller_tick()
            for broker in self.brokers.values():
                if broker.running(self.now):
                    self.broker_tick(broker)
            quiet = self.now >= sc.fault_ms + sc.liveness_ms // 4  # let it converge
            if self.topic_created and not quiet and self.rng.random() < sc.produce:
                self.client_produce()
            self.check_safety()
            if not faulty and self.converged():
                self.check_converged()
                return
            self.now += TICK_MS
        self.fail(f"not converged {sc.liveness_ms} ms after the faults ended: {self.summary()}")

    def summary(self) -> str:
        state = self.controller.image.partition(TOPIC, 0)
        parts = [f"controller: {state}"]
        for b in self.brokers.values():
            parts.append(
                f"broker {b.broker_id}: up={b.up} paused={b.paused} epoch={b.broker_epoch} "
                f"leo={b.log.log_end_offset} hw={b.log.high_watermark} role={b.role} "
                f"epochs={b.log.epochs[-3:]} pending={b.leading.pending if b.leading else None}"
            )
        return "\n".join(parts)

    # -- faults -------------------------------------------------------------------------

    def _victim(self) -> SimBroker:
        state = self.controller.image.partition(TOPIC, 0)
        if (
            state is not None
            and state.leader in self.brokers
            and self.rng.random() < self.sc.kill_leader
        ):
            return self.brokers[state.leader]
        return self.brokers[self.rng.choice(sorted(self.brokers))]

    def inject_faults(self) -> None:
        sc, rng = self.sc, self.rng
        down = [b for b in self.brokers.values() if not b.up or b.paused]
        if rng.random() < sc.kill and len(down) < len(self.brokers) - 1:
            victim = self._victim()
            if victim.up:
                self.kill(victim, power_loss=rng.random() < sc.power_loss)
        if rng.random() < sc.pause and len(down) < len(self.brokers) - 1:
            victim = self._victim()
            if victim.up and not victim.paused:
                victim.paused = True
                self.stats["pauses"] += 1
                self.note(f"pause broker {victim.broker_id}")
        if rng.random() < sc.slow:
            victim = self._victim()
            victim.slow_until_ms = self.now + rng.randint(500, 3000)
            self.note(f"broker {victim.broker_id} slow until {victim.slow_until_ms}")
        for broker in self.brokers.values():
            if not broker.up and rng.random() < sc.restart:
                self.restart(broker)
            elif broker.paused and rng.random() < sc.resume:
                broker.paused = False
                self.note(f"resume broker {broker.broker_id}")
            elif broker.slow_until_ms > self.now and rng.random() < sc.slow_end:
                broker.slow_until_ms = -1
        if rng.random() < sc.cut:
            victim = rng.choice(sorted(self.brokers))
            others = [b for b in self.brokers if b != victim]
            if rng.random() < sc.cut_controller:
                others.append(CONTROLLER)
            one_way = rng.random() < 0.3
            for other in others:
                self.cut_links.add((victim, other))
                if not one_way:
                    self.cut_links.add((other, victim))
            self.note(f"cut broker {victim} off from {others} (one way: {one_way})")
        if self.cut_links and rng.random() < sc.heal:
            self.cut_links.clear()
            self.note("links healed")

    def kill(self, broker: SimBroker, *, power_loss: bool = False) -> None:
        """kill -9: the process and its memory go; the files (page cache) stay. A power
        loss takes what was not flushed too."""
        if power_loss:
            log = broker.log
            lost = log.log_end_offset - log.flushed
            broker.lost_to_power.update(
                (offset, log.entries[offset]) for offset in range(log.flushed, log.log_end_offset)
            )
            log.lose_unflushed()
            self.stats["power_losses"] += 1
            self.note(f"power loss of broker {broker.broker_id}: {lost} unflushed records gone")
        broker.up = False
        broker.paused = False
        broker.image = None
        broker.applied = 0
        broker.ready = False
        broker.metadata_offset = -1
        broker.role = None
        broker.leading = None
        broker.acks.clear()
        broker.alters.clear()
        broker.broker_epoch = -1
        broker.fetch_in_flight_until = -1
        self.stats["kills"] += 1
        self.note(f"kill -9 broker {broker.broker_id}")

    def restart(self, broker: SimBroker) -> None:
        broker.up = True
        broker.incarnation = self._new_incarnation()
        broker.log.high_watermark = min(broker.checkpointed_hw, broker.log.log_end_offset)
        broker.next_heartbeat_ms = self.now
        self.note(
            f"restart broker {broker.broker_id} (leo {broker.log.log_end_offset}, "
            f"hw {broker.log.high_watermark})"
        )

    def heal_everything(self) -> None:
        self.cut_links.clear()
        for broker in self.brokers.values():
            if not broker.up:
                self.restart(broker)
            broker.paused = False
            broker.slow_until_ms = -1
        self.note("faults end: everything healed")

    # -- the network --------------------------------------------------------------------

    def deliver(self) -> None:
        held = []
        while self.queue and self.queue[0][0] <= self.now:
            item = heapq.heappop(self.queue)
            _, _, src, dst, msg = item
            if dst < 0:
                self.client_receive(msg)
                continue
            if dst == CONTROLLER:
                self.controller_receive(src, msg)
                continue
            broker = self.brokers[dst]
            if not broker.up:
                continue
            if not broker.running(self.now):
                held.append(item)  # waits in the socket until the process runs
                continue
            self.broker_receive(broker, src, msg)
        for _at, seq, src, dst, msg in held:
            heapq.heappush(self.queue, (self.now + TICK_MS, seq, src, dst, msg))

    # -- the controller -------------------------------------------------------------------

    def controller_tick(self) -> None:
        result = self.controller.fence_expired(self.now)
        if result.response:
            self.note(f"controller fences {result.response}")
        self.commit(result.records)
        self._log_partition_change(result.records)

    def _log_partition_change(self, records: tuple[Any, ...]) -> None:
        if any(type(r).__name__ == "PartitionChangeRecord" for r in records):
            state = self.controller.image.partition(TOPIC, 0)
            self.note(f"controller: partition now {state}")

    def controller_receive(self, src: int, msg: Any) -> None:
        qc = self.controller
        if isinstance(msg, Heartbeat):
            epoch = msg.broker_epoch
            fenced = True
            try:
                if epoch < 0:
                    result = qc.register_broker(
                        src,
                        msg.incarnation,
                        listeners=LISTENERS,
                        features=FEATURES,
                        cluster_id="sim",
                        now_ms=self.now,
                    )
                    self.commit(result.records)
                    epoch = result.response
                    self.note(f"broker {src} registered at epoch {epoch}")
                else:
                    beat = qc.broker_heartbeat(src, epoch, msg.metadata_offset, now_ms=self.now)
                    self.commit(beat.records)
                    self._log_partition_change(beat.records)
                    if beat.records:
                        self.note(f"heartbeat of broker {src}: {beat.response}")
                    fenced = beat.response.is_fenced
            except ControllerError as exc:
                self.note(f"controller refuses broker {src}: {exc}")
                epoch = -1
            self.send(
                CONTROLLER,
                src,
                HeartbeatAnswer(msg.incarnation, epoch, fenced, msg.broker_epoch),
            )
            self.maybe_create_topic()
        elif isinstance(msg, AlterPartition):
            topic = qc.image.topics[TOPIC]
            entry = AlterPartitionEntry(
                topic.topic_id,
                0,
                msg.leader_epoch,
                msg.change.partition_epoch,
                tuple(IsrMember(b, e) for b, e in msg.change.members),
                0 if msg.change.recovered else msg.recovery_state,
            )
            try:
                result = qc.alter_partition(src, msg.broker_epoch, [entry])
            except ControllerError as exc:
                self.send(CONTROLLER, src, AlterPartitionAnswer(msg.change, exc.code))
                return
            self.commit(result.records)
            self._log_partition_change(result.records)
            answer = result.response[0]
            self.send(
                CONTROLLER,
                src,
                AlterPartitionAnswer(
                    msg.change,
                    answer.error_code,
                    tuple(answer.isr),
                    answer.partition_epoch,
                ),
            )

    def maybe_create_topic(self) -> None:
        if self.topic_created:
            return
        if len(self.controller.image.live_brokers()) < self.sc.brokers:
            return
        unfenced = [b for b in self.controller.image.live_brokers() if not b.fenced]
        if len(unfenced) < self.sc.brokers:
            return
        result = self.controller.create_topics(
            [
                NewTopic(
                    TOPIC,
                    1,
                    self.sc.replication_factor,
                    configs={"min.insync.replicas": str(self.sc.min_insync_replicas)},
                )
            ]
        )
        self.commit(result.records)
        self.topic_created = True
        self.note(f"topic created: {self.controller.image.partition(TOPIC, 0)}")

    # -- a broker -------------------------------------------------------------------------

    def broker_tick(self, broker: SimBroker) -> None:
        self.apply_metadata(broker)
        if self.now >= broker.next_heartbeat_ms:
            broker.next_heartbeat_ms = self.now + self.sc.heartbeat_ms
            self.send(
                broker.broker_id,
                CONTROLLER,
                Heartbeat(broker.incarnation, broker.broker_epoch, broker.metadata_offset),
            )
        if self.rng.random() < self.sc.checkpoint:
            broker.checkpointed_hw = broker.log.high_watermark
        if self.rng.random() < self.sc.flush:
            broker.log.flush()
        if broker.leading is not None:
            self.leader_tick(broker)
        elif broker.role is not None and broker.role[0] not in (NO_LEADER, broker.broker_id):
            self.follower_tick(broker)

    def apply_metadata(self, broker: SimBroker) -> None:
        if broker.broker_epoch < 0:
            return  # not registered yet: a broker replays its metadata log first anyway
        if broker.image is None:
            broker.image = self.base_image.copy()
        delay = self.rng.randint(0, self.sc.metadata_delay_max_ms)
        changed = False
        while broker.applied < len(self.records) and self.records[broker.applied][0] <= (
            self.now - delay
        ):
            _, offset, record = self.records[broker.applied]
            broker.image.apply(record, offset)
            broker.metadata_offset = offset
            broker.applied += 1
            changed = True
        if changed and broker.ready:
            self.roles_changed(broker)

    def roles_changed(self, broker: SimBroker) -> None:
        """As ``ReplicaManager.metadata_changed``."""
        state = broker.partition()
        if state is None or broker.broker_id not in state.replicas:
            return
        role = (state.leader, state.leader_epoch)
        if broker.role == role:
            if broker.leading is not None and broker.leading.committed(
                state.replicas,
                state.isr,
                state.partition_epoch,
                recovering=state.leader_recovery_state == LEADER_RECOVERING,
            ):
                self.advance_high_watermark(broker)
            return
        broker.role = role
        broker.acks.clear()  # their answers: NOT_LEADER_OR_FOLLOWER
        broker.alters.clear()
        broker.fetch_in_flight_until = -1
        if state.leader == broker.broker_id:
            broker.log.assign_epoch(state.leader_epoch, broker.log.log_end_offset)
            broker.leading = PartitionLeader.elected(
                broker.broker_id,
                state.leader_epoch,
                state.replicas,
                state.isr,
                state.partition_epoch,
                broker.log.log_end_offset,
                self.now,
                self.sc.lag_time_max_ms,
                recovering=state.leader_recovery_state == LEADER_RECOVERING,
            )
            self.stats["elections"] += 1
            self.note(
                f"broker {broker.broker_id} leads at epoch {state.leader_epoch} "
                f"(leo {broker.log.log_end_offset}, ISR {state.isr})"
            )
        else:
            broker.leading = None
            broker.next_fetch_ms = self.now
            self.note(
                f"broker {broker.broker_id} follows {state.leader} at epoch {state.leader_epoch}"
            )

    def eligible(self, broker: SimBroker) -> Any:
        image = broker.image

        def check(broker_id: int, fetched_epoch: int) -> bool:
            registration = image.brokers.get(broker_id) if image is not None else None
            if registration is None or not registration.active:
                return False
            return fetched_epoch < 0 or fetched_epoch == registration.epoch

        return check

    def advance_high_watermark(self, broker: SimBroker) -> None:
        leader = broker.leading
        assert leader is not None
        candidate = leader.high_watermark(
            broker.log.log_end_offset, self.now, self.eligible(broker)
        )
        if candidate > broker.log.high_watermark:
            broker.log.set_high_watermark(candidate)

    def leader_tick(self, broker: SimBroker) -> None:
        leader = broker.leading
        assert leader is not None
        self.advance_high_watermark(broker)
        change = leader.next_isr_change(
            broker.log.log_end_offset,
            broker.log.high_watermark,
            self.now,
            self.eligible(broker),
            broker.broker_epoch,
        )
        if change is not None:
            self.note(f"broker {broker.broker_id} asks for ISR {change.isr} ({change})")
            broker.alters[change] = (self.now, False)
        for pending, (at, unanswered) in list(broker.alters.items()):
            if leader.pending is not pending:
                del broker.alters[pending]
                continue
            if self.now < at:
                continue
            if unanswered and not leader.refused(pending, None):
                del broker.alters[pending]
                continue
            state = broker.partition()
            recovery = state.leader_recovery_state if state is not None else 0
            self.send(
                broker.broker_id,
                CONTROLLER,
                AlterPartition(pending, leader.leader_epoch, broker.broker_epoch, recovery),
            )
            broker.alters[pending] = (self.now + self.sc.request_timeout_ms, True)
        self.answer_acks(broker)

    def answer_acks(self, broker: SimBroker) -> None:
        leader = broker.leading
        assert leader is not None
        waiting = []
        for ack in broker.acks:
            outcome = leader.acks_outcome(
                ack.end_offset, broker.log.high_watermark, self.sc.min_insync_replicas
            )
            if outcome is None:
                waiting.append(ack)
            elif outcome == ErrorCode.none:
                self.acknowledge(broker, ack)
                self.answer_client(broker, ack, outcome)
            else:
                self.stats["refused"] += 1
                self.note(
                    f"broker {broker.broker_id} answers {outcome.name} for offsets "
                    f"{ack.first_offset}..{ack.end_offset - 1}"
                )
                self.answer_client(broker, ack, outcome)
        broker.acks = waiting

    def acknowledge(self, broker: SimBroker, ack: PendingAck) -> None:
        holders = 0
        for other in self.brokers.values():
            log = other.log
            if all(
                (
                    ack.first_offset + i < log.log_end_offset
                    and log.entries[ack.first_offset + i] == entry
                )
                # a follower that reported it and lost it in a power loss since: without
                # flush settings that is what acks=all promises
                or (ack.first_offset + i, entry) in other.lost_to_power
                for i, entry in enumerate(ack.entries)
            ):
                holders += 1
        if holders < self.sc.min_insync_replicas:
            self.fail(
                f"broker {broker.broker_id} acknowledged {ack.entries} at {ack.first_offset} "
                f"held by {holders} logs (min.insync.replicas {self.sc.min_insync_replicas})"
            )
        for i, entry in enumerate(ack.entries):
            self.acknowledged[ack.first_offset + i] = entry
            self._ack_order.append(ack.first_offset + i)
        self.stats["acked"] += len(ack.entries)
        self.note(
            f"broker {broker.broker_id} acknowledges offsets {ack.first_offset}.."
            f"{ack.end_offset - 1} (hw {broker.log.high_watermark}, ISR {broker.leading.isr})"
        )

    def follower_tick(self, broker: SimBroker) -> None:
        if self.now < broker.fetch_in_flight_until or self.now < broker.next_fetch_ms:
            return
        assert broker.role is not None
        leader_id, leader_epoch = broker.role
        broker.fetch_in_flight_until = self.now + self.sc.request_timeout_ms
        self.send(
            broker.broker_id,
            leader_id,
            Fetch(
                broker.broker_id,
                leader_epoch,
                broker.log.log_end_offset,
                broker.log.latest_epoch,
                broker.broker_epoch,
            ),
        )

    def broker_receive(self, broker: SimBroker, src: int, msg: Any) -> None:
        if isinstance(msg, HeartbeatAnswer):
            if msg.incarnation == broker.incarnation and msg.broker_epoch >= 0:
                broker.broker_epoch = msg.broker_epoch
                if not msg.fenced and not broker.ready:
                    # As the broker's start: roles only once the controller unfenced it,
                    # which it does once the broker's metadata reached its registration.
                    broker.ready = True
                    self.roles_changed(broker)
            elif (
                msg.incarnation == broker.incarnation
                and msg.asked_epoch >= 0
                and msg.asked_epoch == broker.broker_epoch
            ):
                # As the broker's heartbeat loop: the controller refused its epoch (a
                # later registration of this incarnation took over): register again.
                broker.broker_epoch = -1
                self.note(f"broker {broker.broker_id}: epoch {msg.asked_epoch} refused")
        elif isinstance(msg, Fetch):
            self.serve_fetch(broker, msg)
        elif isinstance(msg, FetchAnswer):
            self.fetched(broker, src, msg)
        elif isinstance(msg, Produce):
            self.produce(broker, msg)
        elif isinstance(msg, AlterPartitionAnswer):
            leader = broker.leading
            if leader is None or leader.pending is not msg.change:
                return
            if msg.error == ErrorCode.none:
                leader.answered(msg.change, msg.isr, msg.partition_epoch)
                self.note(
                    f"broker {broker.broker_id}: ISR {msg.isr} at partition epoch "
                    f"{msg.partition_epoch}"
                )
                self.advance_high_watermark(broker)
            elif leader.refused(msg.change, msg.error):
                broker.alters[msg.change] = (self.now + 20, False)
            else:
                self.note(f"broker {broker.broker_id}: ISR change refused: {msg.error.name}")

    def serve_fetch(self, broker: SimBroker, fetch: Fetch) -> None:
        """As ``broker/fetch.py`` serves a follower."""
        state = broker.partition()
        log = broker.log
        reply: FetchAnswer
        if state is None or state.leader != broker.broker_id or broker.leading is None:
            reply = FetchAnswer(fetch.leader_epoch, ErrorCode.not_leader_or_follower)
        elif fetch.leader_epoch < state.leader_epoch:
            reply = FetchAnswer(fetch.leader_epoch, ErrorCode.fenced_leader_epoch)
        elif fetch.leader_epoch > state.leader_epoch:
            reply = FetchAnswer(fetch.leader_epoch, ErrorCode.unknown_leader_epoch)
        else:
            diverging = diverging_epoch(
                fetch.last_fetched_epoch, fetch.fetch_offset, log.end_offset_for_epoch
            )
            if diverging is not None and diverging[0] < 0:
                reply = FetchAnswer(fetch.leader_epoch, ErrorCode.offset_out_of_range)
            elif diverging is not None:
                reply = FetchAnswer(fetch.leader_epoch, ErrorCode.none, diverging=diverging)
            elif fetch.fetch_offset > log.log_end_offset:
                reply = FetchAnswer(fetch.leader_epoch, ErrorCode.offset_out_of_range)
            else:
                if broker.leading.follower_fetched(
                    fetch.follower,
                    fetch.fetch_offset,
                    fetch.broker_epoch,
                    log.log_end_offset,
                    self.now,
                ):
                    self.advance_high_watermark(broker)
                start = fetch.fetch_offset
                entries = self.fetch_entries(log, start)
                reply = FetchAnswer(
                    fetch.leader_epoch,
                    ErrorCode.none,
                    entries,
                    start,
                    log.high_watermark,
                )
        self.send(broker.broker_id, fetch.follower, reply)

    def fetch_entries(self, log: ModelLog, start: int) -> tuple[tuple[int, int], ...]:
        """What one fetch from ``start`` returns (a subclass keeps batches whole)."""
        return tuple(log.entries[start : start + self.sc.fetch_max_records])

    def fetched(self, broker: SimBroker, src: int, answer: FetchAnswer) -> None:
        """As ``ReplicaFetcher._handle_partition``."""
        if broker.role != (src, answer.leader_epoch):
            return  # asked in a role this broker no longer has
        broker.fetch_in_flight_until = -1
        log = broker.log
        if answer.error == ErrorCode.offset_out_of_range:
            cut = follower.out_of_range(log, 0)
            self.note(f"broker {broker.broker_id} out of range: truncated to {cut.offset}")
            return
        if answer.error != ErrorCode.none:
            broker.next_fetch_ms = self.now + 50
            return
        if answer.diverging is not None:
            cut = follower.diverged(log, *answer.diverging)
            self.note(
                f"broker {broker.broker_id}: diverging at epoch {answer.diverging[0]} "
                f"(leader ends it at {answer.diverging[1]}): truncated to {cut.offset}"
            )
            return
        if answer.entries and answer.base_offset == log.log_end_offset:
            log.append_as_follower(list(answer.entries))
            if self.sc.flush_every_append:
                log.flush()
        follower.take_high_watermark(log, answer.high_watermark)
        if not answer.entries:
            broker.next_fetch_ms = self.now + self.sc.fetch_max_wait_ms

    # -- clients (this one sends and forgets; a subclass may wait for answers) ----------

    def clients_tick(self) -> None:
        """Every tick: clients that retry do it here."""

    def client_receive(self, msg: Any) -> None:
        """An answer reached a client (addresses below 0)."""

    def answer_client(self, broker: SimBroker, ack: PendingAck, outcome: ErrorCode) -> None:
        """A leader answers a produce that waited for acks=all."""

    def client_produce(self) -> None:
        """A producer (acks=all) sends a batch to the leader its metadata names."""
        state = self.controller.image.partition(TOPIC, 0)
        if state is None or state.leader == NO_LEADER:
            return
        count = self.rng.randint(1, self.sc.max_batch)
        records = tuple(range(self.next_record, self.next_record + count))
        self.next_record += count
        self.send(-1, state.leader, Produce(records))

    def produce(self, broker: SimBroker, msg: Produce) -> None:
        """As ``broker/produce.py`` for acks=all."""
        state = broker.partition()
        leader = broker.leading
        if state is None or state.leader != broker.broker_id or leader is None:
            return  # NOT_LEADER_OR_FOLLOWER
        if not leader.may_append(self.sc.min_insync_replicas):
            self.stats["refused"] += 1
            return  # NOT_ENOUGH_REPLICAS
        first = broker.log.log_end_offset
        broker.log.append(leader.leader_epoch, list(msg.records))
        if self.sc.flush_every_append:
            broker.log.flush()
        entries = tuple(broker.log.entries[first:])
        broker.acks.append(PendingAck(broker.log.log_end_offset, leader, first, entries))
        self.advance_high_watermark(broker)

    # -- the checker (knows the logs and the controller's ISR, not the rules) -----------

    def check_safety(self) -> None:
        """The invariants, checked incrementally: what was checked once is checked again
        only when a log was cut or the ISR changed."""
        brokers = list(self.brokers.values())
        for broker in brokers:
            if broker.log.high_watermark > broker.log.log_end_offset:
                self.fail(f"broker {broker.broker_id}: high watermark past the log end")
        for i, a in enumerate(brokers):
            for b in brokers[i + 1 :]:
                self._check_agreement(a, b)
        state = self.controller.image.partition(TOPIC, 0)
        if state is None:
            return
        for member in state.isr:
            self._check_holds_acknowledged(self.brokers[member], state)
        leader = self.brokers.get(state.leader)
        if (
            leader is not None
            and leader.leading is not None
            and leader.role == (state.leader, state.leader_epoch)
            and (leader.broker_id, state.leader_epoch) != self._leader_checked
        ):
            self._leader_checked = (leader.broker_id, state.leader_epoch)
            missing = [
                (o, e)
                for o, e in sorted(self.acknowledged.items())
                if o >= leader.log.log_end_offset or leader.log.entries[o] != e
            ]
            for offset, entry in missing:
                if (offset, entry) not in leader.lost_to_power or self.sc.flush_every_append:
                    self.fail(
                        f"broker {leader.broker_id} leads at epoch {state.leader_epoch} "
                        f"without acknowledged {entry} at offset {offset}"
                    )
            if missing:
                # Without flush settings: the new leader's own power loss took them. That
                # is the one way an acknowledged record may go (docs/replication.md).
                self.stats["lost_to_power_loss"] += len(missing)
                self.note(
                    f"broker {leader.broker_id} leads without {len(missing)} acknowledged "
                    f"records its power loss took"
                )
                for offset, _ in missing:
                    del self.acknowledged[offset]
                self._ack_order = [o for o in self._ack_order if o in self.acknowledged]
                self._verified.clear()

    def _check_holds_acknowledged(self, broker: SimBroker, state: PartitionState) -> None:
        """An ISR member holds every acknowledged record. What was verified of a log stays
        verified until the log is cut: each step looks only at what is new."""
        log = broker.log
        cut, verified = self._verified.get(broker.broker_id, (-1, 0))
        if cut != log.truncations or verified > len(self._ack_order):
            verified = 0
        entries = log.entries
        for offset in self._ack_order[verified:]:
            entry = self.acknowledged[offset]
            if offset < len(entries) and entries[offset] == entry:
                continue
            if (offset, entry) in broker.lost_to_power and not self.sc.flush_every_append:
                continue  # its power loss took what it had reported: it may stay a while
            self.fail(
                f"ISR member {broker.broker_id} (ISR {state.isr}, leader {state.leader}) "
                f"lacks acknowledged {entry} at offset {offset}"
            )
        self._verified[broker.broker_id] = (log.truncations, len(self._ack_order))

    def _check_agreement(self, a: SimBroker, b: SimBroker) -> None:
        """No two logs differ below the smaller of their high watermarks (not checked
        with power losses and no flush settings: a leader alone in the ISR that loses
        power comes back without records it had counted committed)."""
        if self.sc.power_loss and not self.sc.flush_every_append:
            return  # the last ISR member's power loss may take what others hold below it
        key = (a.broker_id, b.broker_id)
        cue = (a.log.truncations, b.log.truncations)
        checked, seen_cue = self._agreed.get(key, (0, cue))
        if seen_cue != cue:
            checked = 0
        below = min(a.log.high_watermark, b.log.high_watermark)
        for offset in range(checked, below):
            if a.log.entries[offset] != b.log.entries[offset]:
                self.fail(
                    f"brokers {a.broker_id} and {b.broker_id} disagree at offset {offset} below "
                    f"their high watermarks: {a.log.entries[offset]} / {b.log.entries[offset]}"
                )
        self._agreed[key] = (max(checked, below), cue)

    def converged(self) -> bool:
        state = self.controller.image.partition(TOPIC, 0)
        if state is None or state.leader == NO_LEADER:
            return False
        if sorted(state.isr) != sorted(state.replicas):
            return False
        leader = self.brokers[state.leader]
        if leader.log.high_watermark != leader.log.log_end_offset:
            return False
        if any(b.acks for b in self.brokers.values()):
            return False
        return all(self.brokers[r].log.entries == leader.log.entries for r in state.replicas)

    def check_converged(self) -> None:
        state = self.controller.image.partition(TOPIC, 0)
        assert state is not None
        entries = self.brokers[state.leader].log.entries
        for offset, entry in self.acknowledged.items():
            if offset >= len(entries) or entries[offset] != entry:
                self.fail(f"acknowledged {entry} at offset {offset} is gone after healing")
        self.note(f"converged: {len(entries)} records, {self.stats}")


def run_seed(seed: int, scenario: Scenario) -> ReplicationSimulation:
    sim = ReplicationSimulation(seed, scenario)
    sim.run()
    return sim
