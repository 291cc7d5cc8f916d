"""The transaction coordinator on real storage, without a broker: Kafka's state machine,
epoch bumps and fencing, markers written into the partitions, timeouts, expiry, and
the state replayed from ``__transaction_state`` by a restarted node, which finishes a
transaction it finds prepared."""

from __future__ import annotations

import asyncio
from pathlib import Path

from metadata_node import MetadataNode

from strom.config import BrokerConfig
from strom.coordinator.transaction_log import TRANSACTION_TOPIC, TxnState
from strom.coordinator.transactions import MarkerBatch, TransactionCoordinator
from strom.protocol.errors import ErrorCode
from strom.protocol.records import control_type, iter_headers

OK = ErrorCode.none


class Node:
    """A NodeState plus a coordinator whose markers go straight into the local logs."""

    def __init__(self, log_dir: Path, log: list[bytes], *, deliver: bool = True) -> None:
        self.config = BrokerConfig(
            {"log.dirs": str(log_dir), "transaction.state.log.num.partitions": "3"}
        )
        self.metadata = MetadataNode(self.config, log)
        self.next_id = 1000
        self.deliver = deliver
        self.sent: list[MarkerBatch] = []
        self.coordinator = TransactionCoordinator(
            self.metadata.state,
            self.config,
            new_producer_id=self._new_id,
            wait_replicated=self._never_called,
            send_markers=self._send,
            append=self.metadata.append_here,
        )
        if self.metadata.topic(TRANSACTION_TOPIC) is None:
            partitions, _, configs = self.coordinator.topic_request(1)
            self.metadata.create_topic(TRANSACTION_TOPIC, partitions, configs)
        if self.metadata.topic("data") is None:
            self.metadata.create_topic("data", 2)

    async def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    async def _never_called(self, *args: object) -> bool:
        raise AssertionError("a partition of one replica needs no replication wait")

    async def _send(self, batch: MarkerBatch) -> bool:
        self.sent.append(batch)
        if not self.deliver:
            await asyncio.Event().wait()  # stuck: the node dies before they are written
        for topic, partition in batch.partitions:
            log = self.metadata.state.partition_log(topic, partition)
            log.append_marker(
                batch.producer_id, batch.producer_epoch, batch.coordinator_epoch, batch.commit
            )
        return True

    def markers(self, partition: int) -> list[tuple[int, int, int | None]]:
        """(producer id, epoch, 0 abort / 1 commit) of the markers in data-``partition``."""
        log = self.metadata.state.partition_log("data", partition)
        data = log.read(log.log_start_offset, 1 << 20)
        return [
            (h.producer_id, h.producer_epoch, control_type(data, h))
            for h in iter_headers(data)
            if h.is_control
        ]

    def stop(self) -> None:
        self.coordinator.stop()
        self.metadata.shutdown()


async def _settle(coordinator: TransactionCoordinator, txn_id: str, state: TxnState) -> None:
    for _ in range(200):
        meta = coordinator.txns.get(txn_id)
        if meta is not None and meta.state == state and meta.pending is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{txn_id} did not reach {state}: {coordinator.txns.get(txn_id)}")


def test_commit_and_abort_write_markers_and_survive_a_restart(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def first_life() -> tuple[int, int]:
        node = Node(tmp_path, log)
        c = node.coordinator
        c.start()
        first = await c.init_producer_id("t1", 60000)
        assert (first.error, first.producer_epoch) == (OK, 0)
        again = await c.init_producer_id("t1", 60000)
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
        pid, epoch = again.producer_id, again.producer_epoch
        assert await c.end_transaction("t1", pid, epoch, True) == ErrorCode.invalid_txn_state
        assert await c.add_partitions("t1", pid, epoch, [("data", 0), ("data", 1)]) == OK
        assert c.txns["t1"].state == TxnState.ONGOING
        assert await c.add_partitions("t1", pid, epoch - 1, [("data", 0)]) == (
            ErrorCode.producer_fenced
        )
        assert await c.add_partitions("t1", pid + 7, epoch, [("data", 0)]) == (
            ErrorCode.invalid_producer_id_mapping
        )
        assert c.verify_partitions("t1", pid, epoch, [("data", 0), ("other", 0)]) == {
            ("data", 0): OK,
            ("other", 0): ErrorCode.invalid_txn_state,
        }
        assert await c.end_transaction("t1", pid, epoch, True) == OK
        await _settle(c, "t1", TxnState.COMPLETE_COMMIT)
        assert await c.end_transaction("t1", pid, epoch, True) == OK  # a retry
        assert await c.end_transaction("t1", pid, epoch, False) == ErrorCode.invalid_txn_state
        assert await c.add_partitions("t1", pid, epoch, [("data", 1)]) == OK
        assert await c.end_transaction("t1", pid, epoch, False) == OK
        await _settle(c, "t1", TxnState.COMPLETE_ABORT)
        assert node.markers(0) == [(pid, epoch, 1)]
        assert node.markers(1) == [(pid, epoch, 1), (pid, epoch, 0)]
        assert [b.coordinator_epoch for b in node.sent] == [0, 0]
        node.stop()
        return pid, epoch

    async def second_life(pid: int, epoch: int) -> None:
        node = Node(tmp_path, log)
        c = node.coordinator
        c.start()
        meta = c.txns["t1"]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (
            pid,
            epoch,
            TxnState.COMPLETE_ABORT,
        )
        assert meta.partitions == set()
        bumped = await c.init_producer_id("t1", 60000)
        assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
        node.stop()

    pid, epoch = asyncio.run(first_life())
    asyncio.run(second_life(pid, epoch))


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, [])
        c = node.coordinator
        c.start()
        old = await c.init_producer_id("t", 60000)
        assert await c.add_partitions("t", old.producer_id, old.producer_epoch, [("data", 0)]) == OK
        retry = await c.init_producer_id("t", 60000)
        assert retry.error == ErrorCode.concurrent_transactions
        await _settle(c, "t", TxnState.COMPLETE_ABORT)
        # The abort went out under a bumped epoch, which fences the old producer.
        assert node.markers(0) == [(old.producer_id, old.producer_epoch + 1, 0)]
        new = await c.init_producer_id("t", 60000)
        assert (new.error, new.producer_epoch) == (OK, old.producer_epoch + 2)
        assert await c.end_transaction("t", old.producer_id, old.producer_epoch, True) == (
            ErrorCode.producer_fenced
        )
        # KIP-360: a producer presenting its current id and epoch gets the next epoch;
        # one presenting a stale epoch is fenced.
        bumped = await c.init_producer_id("t", 60000, new.producer_id, new.producer_epoch)
        assert (bumped.error, bumped.producer_epoch) == (OK, new.producer_epoch + 1)
        stale = await c.init_producer_id("t", 60000, new.producer_id, new.producer_epoch - 5)
        assert stale.error == ErrorCode.producer_fenced
        assert (await c.init_producer_id("t", 10**9)).error == ErrorCode.invalid_transaction_timeout
        assert (await c.init_producer_id("", 1000)).error == ErrorCode.invalid_request
        node.stop()

    asyncio.run(scenario())


def test_timed_out_transactions_are_aborted_and_idle_ids_expire(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def scenario() -> None:
        node = Node(tmp_path, log)
        c = node.coordinator
        c.start()
        p = await c.init_producer_id("slow", 1000)
        assert await c.add_partitions("slow", p.producer_id, p.producer_epoch, [("data", 1)]) == OK
        start = c.txns["slow"].start_ms
        assert c.abort_timed_out(start + 500) == 0
        assert c.abort_timed_out(start + 1001) == 1
        await _settle(c, "slow", TxnState.COMPLETE_ABORT)
        assert c.txns["slow"].producer_epoch == p.producer_epoch + 1
        assert node.markers(1) == [(p.producer_id, p.producer_epoch + 1, 0)]
        listed = c.list_transactions(states=[TxnState.COMPLETE_ABORT])
        assert [m.transactional_id for m in listed] == ["slow"]
        horizon = int(node.config["transactional.id.expiration.ms"])
        assert c.expire_transactional_ids(c.txns["slow"].last_update_ms + horizon - 1) == 0
        assert c.expire_transactional_ids(c.txns["slow"].last_update_ms + horizon) == 1
        for _ in range(100):
            if "slow" not in c.txns:
                break
            await asyncio.sleep(0.01)
        assert c.describe("slow") == (ErrorCode.transactional_id_not_found, None)
        node.stop()
        node = Node(tmp_path, log)
        node.coordinator.start()
        assert "slow" not in node.coordinator.txns  # the tombstone holds after a replay
        node.stop()

    asyncio.run(scenario())


def test_a_restarted_coordinator_finishes_a_prepared_transaction(tmp_path: Path) -> None:
    log: list[bytes] = []

    async def crash_after_prepare() -> tuple[int, int]:
        node = Node(tmp_path, log, deliver=False)
        c = node.coordinator
        c.start()
        p = await c.init_producer_id("t", 60000)
        assert await c.add_partitions("t", p.producer_id, p.producer_epoch, [("data", 0)]) == OK
        assert await c.end_transaction("t", p.producer_id, p.producer_epoch, True) == OK
        deadline = asyncio.get_running_loop().time() + 30
        while not node.sent:  # the markers went out (and never arrive)
            assert asyncio.get_running_loop().time() < deadline, "no markers sent in 30 s"
            await asyncio.sleep(0.01)
        assert c.txns["t"].state == TxnState.PREPARE_COMMIT
        assert await c.end_transaction("t", p.producer_id, p.producer_epoch, True) == (
            ErrorCode.concurrent_transactions
        )
        node.stop()
        return p.producer_id, p.producer_epoch

    async def recover(pid: int, epoch: int) -> None:
        node = Node(tmp_path, log)
        c = node.coordinator
        c.start()
        await _settle(c, "t", TxnState.COMPLETE_COMMIT)
        assert node.markers(0) == [(pid, epoch, 1)]
        node.stop()

    pid, epoch = asyncio.run(crash_after_prepare())
    asyncio.run(recover(pid, epoch))
