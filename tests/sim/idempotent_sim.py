"""Idempotent producers in the replication simulator: retries across leader changes.

Owns: idempotent clients (a producer id, an epoch, sequences; up to five batches in
flight, each sent again to whichever broker leads now when its request times out, is
answered with an error, or is lost with its connection; a producer whose oldest batch
goes unanswered for ``delivery_timeout_ms`` fails its batches and bumps its epoch);
each broker's producer state beside its model log; and the checker of what
idempotence promises. Does not own the replication world (``replication_sim``), whose
checks all still run.

The system under test is Strom's own ``ProducerStateManager``
(``strom/storage/producer_state.py``): a leader checks every batch with its ``check``
(a retry of one of a producer's last five batches is answered with the offset of its
first copy, acks=all once the high watermark passes that copy) and applies it with
``record``. Around it, ``PartitionLog``'s use of it is modelled (the real log is
file-backed, so it is not reachable from this sans-I/O world): a follower applies each
batch it copies; a truncation, a power loss and a restart rebuild the state by
replaying the batches left in the log; becoming leader keeps the state as it is, as
the log keeps it. Fetches return whole batches, as the real log's do.

The checker (which knows the batches clients sent, not the rules) checks at every
step that no record of a batch appears twice in any broker's committed log (below its
high watermark), that in committed order every producer epoch's sequences follow one
another without gaps, and that a retry answered as a duplicate names the offset where
its records are; ``replication_sim``'s checks see to the rest (no acknowledged record
lost). Convergence also waits for every client to have nothing in flight.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from replication_sim import (
    ModelLog,
    PendingAck,
    ReplicationSimulation,
    Scenario,
    SimBroker,
)

from strom.cluster.image import NO_LEADER
from strom.protocol.errors import ErrorCode
from strom.protocol.records import BatchHeader
from strom.storage.producer_state import (
    APPEND,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
)

TOPIC_LABEL = "events-0"
MAX_IN_FLIGHT = 5
RETRY_BACKOFF_MS = 20


@dataclass
class IdempotentScenario(Scenario):
    producers: int = 2
    delivery_timeout_ms: int = 2500
    # False plants a bug: followers do not apply the batches they copy to their
    # producer state (only a truncation or a restart rebuilds it).
    followers_learn_producers: bool = True


@dataclass(frozen=True)
class SentBatch:
    """One batch as its producer made it: every record id belongs to one batch."""

    producer_id: int
    epoch: int
    first_seq: int
    records: tuple[int, ...]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.records) - 1


@dataclass(frozen=True)
class IdempotentProduce:
    client: int
    batch: SentBatch


@dataclass(frozen=True)
class ProduceAnswer:
    batch: SentBatch
    error: ErrorCode
    base_offset: int = -1


def batch_header(batch: SentBatch, base_offset: int, leader_epoch: int) -> BatchHeader:
    count = len(batch.records)
    return BatchHeader(
        position=0,
        size=0,
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=batch.producer_id,
        producer_epoch=batch.epoch,
        base_sequence=batch.first_seq,
        record_count=count,
    )


@dataclass
class ProducerLog(ModelLog):
    """A model log with the producer state ``PartitionLog`` keeps beside its records."""

    catalog: dict[int, SentBatch] = field(default_factory=dict)  # record id -> batch
    followers_learn: bool = True
    producers: ProducerStateManager = field(
        default_factory=lambda: ProducerStateManager(TOPIC_LABEL)
    )

    def append_batch(self, epoch: int, batch: SentBatch) -> None:
        """A leader's append of a batch that ``producers.check`` let through."""
        base = self.log_end_offset
        self.append(epoch, list(batch.records))
        self.producers.record([batch_header(batch, base, epoch)])

    def append_as_follower(self, entries: list[tuple[int, int]]) -> None:
        base = self.log_end_offset
        super().append_as_follower(entries)
        if self.followers_learn:
            self._apply(base, self.log_end_offset)

    def _apply(self, start: int, end: int) -> None:
        for offset in range(start, end):
            epoch, record = self.entries[offset]
            batch = self.catalog[record]
            if record == batch.records[-1]:  # fetches copy whole batches
                first = offset - len(batch.records) + 1
                self.producers.apply_batch(batch_header(batch, first, epoch))

    def rebuild_producers(self) -> None:
        """As the log does at open and after a truncation: replay what it holds."""
        self.producers = ProducerStateManager(TOPIC_LABEL)
        self._apply(0, self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        super().truncate_to(offset)
        self.rebuild_producers()

    def lose_unflushed(self) -> None:
        super().lose_unflushed()
        self.rebuild_producers()


@dataclass
class ClientBatch:
    batch: SentBatch
    first_sent_ms: int = -1
    due_ms: int = 0  # when it is (re)sent: at once, after a timeout or an error


@dataclass
class SimProducer:
    client: int  # its address (below 0)
    producer_id: int
    epoch: int = 0
    next_seq: int = 0
    in_flight: list[ClientBatch] = field(default_factory=list)  # oldest first
    link_free_ms: dict[int, int] = field(default_factory=dict)  # broker -> last delivery


class IdempotentSimulation(ReplicationSimulation):
    sc: IdempotentScenario

    def __init__(self, seed: int, scenario: IdempotentScenario) -> None:
        super().__init__(seed, scenario)
        self.catalog: dict[int, SentBatch] = {}
        for broker in self.brokers.values():
            broker.log = ProducerLog(
                catalog=self.catalog, followers_learn=scenario.followers_learn_producers
            )
        self.producers = [
            SimProducer(client=-1 - i, producer_id=1000 + i) for i in range(scenario.producers)
        ]
        self.stats.update(
            retries=0,
            duplicates=0,
            epoch_bumps=0,
            client_acked=0,
            unknown_producer_gaps=0,
            duplicates_of_earlier_leaders=0,
        )
        # checker: broker -> (truncations cue, offsets checked, record ids seen, producer
        # ids seen, (producer, epoch) -> last sequence)
        self._committed: dict[
            int, tuple[int, int, set[int], set[int], dict[tuple[int, int], int]]
        ] = {}

    def _log(self, broker: SimBroker) -> ProducerLog:
        log = broker.log
        assert isinstance(log, ProducerLog)
        return log

    # -- the clients ------------------------------------------------------------------

    def client_produce(self) -> None:
        producer = self.rng.choice(self.producers)
        if len(producer.in_flight) >= MAX_IN_FLIGHT:
            return
        count = self.rng.randint(1, self.sc.max_batch)
        records = tuple(range(self.next_record, self.next_record + count))
        self.next_record += count
        batch = SentBatch(producer.producer_id, producer.epoch, producer.next_seq, records)
        producer.next_seq += count
        for record in records:
            self.catalog[record] = batch
        producer.in_flight.append(ClientBatch(batch))

    def clients_tick(self) -> None:
        state = self.controller.image.partition("events", 0)
        for producer in self.producers:
            oldest = producer.in_flight[0] if producer.in_flight else None
            if (
                oldest is not None
                and oldest.first_sent_ms >= 0
                and self.now - oldest.first_sent_ms > self.sc.delivery_timeout_ms
            ):
                self.note(
                    f"producer {producer.producer_id} epoch {producer.epoch}: "
                    f"{len(producer.in_flight)} batches failed; epoch bumped"
                )
                producer.in_flight.clear()
                producer.epoch += 1
                producer.next_seq = 0
                self.stats["epoch_bumps"] += 1
                continue
            if state is None or state.leader == NO_LEADER:
                continue
            self._send_due(producer, state.leader)

    def _send_due(self, producer: SimProducer, leader: int) -> None:
        """Due batches go in sequence order over one connection: a lost request breaks
        it, and the requests after it in this round go with it."""
        for pending in producer.in_flight:
            if self.now < pending.due_ms:
                continue
            if pending.first_sent_ms < 0:
                pending.first_sent_ms = self.now
            else:
                self.stats["retries"] += 1
            pending.due_ms = self.now + self.sc.request_timeout_ms
            if self.rng.random() < self.sc.loss:
                for later in producer.in_flight:
                    if later.due_ms <= self.now:
                        later.due_ms = self.now + self.sc.request_timeout_ms
                return
            at = max(
                self.now + self.rng.randint(1, self.sc.max_delay_ms),
                producer.link_free_ms.get(leader, 0),
            )
            producer.link_free_ms[leader] = at
            self._seq += 1
            message = IdempotentProduce(producer.client, pending.batch)
            heapq.heappush(self.queue, (at, self._seq, producer.client, leader, message))

    def client_receive(self, msg: Any) -> None:
        assert isinstance(msg, ProduceAnswer)
        producer = next(p for p in self.producers if p.producer_id == msg.batch.producer_id)
        for i, pending in enumerate(producer.in_flight):
            if pending.batch != msg.batch:
                continue
            if msg.error == ErrorCode.none:
                del producer.in_flight[i]
                self.stats["client_acked"] += 1
            else:
                pending.due_ms = min(pending.due_ms, self.now + RETRY_BACKOFF_MS)
            return

    def answer_client(self, broker: SimBroker, ack: PendingAck, outcome: ErrorCode) -> None:
        if ack.reply is not None:
            client, batch = ack.reply
            self.send(broker.broker_id, client, ProduceAnswer(batch, outcome, ack.first_offset))

    # -- the broker ---------------------------------------------------------------------

    def broker_receive(self, broker: SimBroker, src: int, msg: Any) -> None:
        if isinstance(msg, IdempotentProduce):
            self.produce_idempotent(broker, msg)
        else:
            super().broker_receive(broker, src, msg)

    def produce_idempotent(self, broker: SimBroker, msg: IdempotentProduce) -> None:
        """As ``broker/produce.py`` and ``ReplicaManager.append_to_leader`` for acks=all."""
        batch = msg.batch
        state = broker.partition()
        leader = broker.leading
        log = self._log(broker)
        error = ErrorCode.none
        outcome: int | None = None
        if state is None or state.leader != broker.broker_id or leader is None:
            error = ErrorCode.not_leader_or_follower
        elif not leader.may_append(self.sc.min_insync_replicas):
            self.stats["refused"] += 1
            error = ErrorCode.not_enough_replicas
        else:
            header = batch_header(batch, log.log_end_offset, leader.leader_epoch)
            try:
                outcome = log.producers.check([header])
            except InvalidProducerEpochError:
                error = ErrorCode.invalid_producer_epoch
            except OutOfOrderSequenceError:
                error = ErrorCode.out_of_order_sequence_number
        if error != ErrorCode.none:
            self.send(broker.broker_id, msg.client, ProduceAnswer(batch, error))
            return
        assert leader is not None
        count = len(batch.records)
        if outcome is not None and outcome != APPEND:
            first = outcome
            held = tuple(r for _, r in log.entries[first : first + count])
            if held != batch.records:
                self.fail(
                    f"broker {broker.broker_id} answers the retry of {batch} with offset "
                    f"{first}, which holds {held}"
                )
            self.stats["duplicates"] += 1
            if log.entries[first][0] < leader.leader_epoch:
                self.stats["duplicates_of_earlier_leaders"] += 1  # first copy: another epoch
            self.note(f"broker {broker.broker_id}: {batch} is a retry of offset {first}")
        else:
            first = log.log_end_offset
            log.append_batch(leader.leader_epoch, batch)
            if self.sc.flush_every_append:
                log.flush()
        entries = tuple(log.entries[first : first + count])
        broker.acks.append(
            PendingAck(first + count, leader, first, entries, reply=(msg.client, batch))
        )
        self.advance_high_watermark(broker)

    def fetch_entries(self, log: ModelLog, start: int) -> tuple[tuple[int, int], ...]:
        end = min(start + self.sc.fetch_max_records, log.log_end_offset)
        while end < log.log_end_offset:
            record = log.entries[end - 1][1]
            if record == self.catalog[record].records[-1]:
                break
            end += 1
        return tuple(log.entries[start:end])

    def restart(self, broker: SimBroker) -> None:
        super().restart(broker)
        self._log(broker).rebuild_producers()

    def kill(self, broker: SimBroker, *, power_loss: bool = False) -> None:
        super().kill(broker, power_loss=power_loss)
        self._log(broker).producers = ProducerStateManager(TOPIC_LABEL)  # memory gone

    # -- the checker ------------------------------------------------------------------

    def check_safety(self) -> None:
        super().check_safety()
        for broker in self.brokers.values():
            self._check_committed(broker)

    def _check_committed(self, broker: SimBroker) -> None:
        """Below its high watermark a log holds each batch once, and every producer
        epoch's sequences in order without gaps. Incremental until the log is cut."""
        log = broker.log
        cue, checked, seen, producers, last_seq = self._committed.get(
            broker.broker_id, (log.truncations, 0, set(), set(), {})
        )
        if cue != log.truncations:
            checked, seen, producers, last_seq = 0, set(), set(), {}
        for offset in range(checked, log.high_watermark):
            record = log.entries[offset][1]
            batch = self.catalog[record]
            seq = batch.first_seq + batch.records.index(record)
            key = (batch.producer_id, batch.epoch)
            if record in seen:
                self.fail(
                    f"broker {broker.broker_id}: record {record} of producer "
                    f"{batch.producer_id} epoch {batch.epoch} (sequence {seq}) is twice in "
                    f"its committed log, again at offset {offset}"
                )
            expected = last_seq.get(key, -1) + 1
            if seq != expected and batch.producer_id not in producers:
                # The first batch of a producer id the log holds: a partition accepts a
                # producer it does not know at any sequence (Kafka's rule), so a batch
                # refused or lost before it leaves a gap no broker could see.
                expected = seq
                self.stats["unknown_producer_gaps"] += 1
            if seq != expected:
                self.fail(
                    f"broker {broker.broker_id}: producer {batch.producer_id} epoch "
                    f"{batch.epoch} has sequence {seq} at offset {offset} of its committed "
                    f"log, after {expected - 1}"
                )
            seen.add(record)
            producers.add(batch.producer_id)
            last_seq[key] = seq
        self._committed[broker.broker_id] = (
            log.truncations,
            max(checked, log.high_watermark),
            seen,
            producers,
            last_seq,
        )

    def converged(self) -> bool:
        return super().converged() and not any(p.in_flight for p in self.producers)


def run_idempotent_seed(seed: int, scenario: IdempotentScenario) -> IdempotentSimulation:
    sim = IdempotentSimulation(seed, scenario)
    sim.run()
    return sim
