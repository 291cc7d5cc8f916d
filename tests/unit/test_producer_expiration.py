"""Expiry of idle producer ids (producer.id.expiration.ms), on real files: which
producers expire and when (never one with an open transaction), the expired ones left
out of later snapshots and not brought back by a restart (snapshot load, replay of
the tail, or a replay of the whole log), a dynamic change of the setting honoured, an
expired producer that sends again taken as a new one, and the log manager's schedule
and the broker config behind it. Times are passed in, never slept through."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strom.cluster.node_state import NodeState
from strom.config import BrokerConfig, ConfigError, check_dynamic_broker_config
from strom.protocol.records import ATTR_TRANSACTIONAL, build_batch, validate_batches
from strom.storage import FileHandleCache, LogConfig, PartitionLog
from strom.storage import producer_snapshot as snap
from strom.storage.log_manager import LogManager
from strom.storage.producer_snapshot import SnapshotEntry
from strom.storage.producer_state import (
    ProducerEntry,
    ProducerStateManager,
    is_expired,
)

EXPIRATION_MS = 60_000
LONG_IDLE_MS = 10 * EXPIRATION_MS  # how long before ``now`` the idle producers wrote
OLD, FRESH, TXN, OTHER = 1, 2, 3, 4  # producer ids


@pytest.fixture(name="now")
def wall_clock_now() -> int:
    """The wall clock (ms) as the test starts: batches are stamped around it, as a
    reopen and a marker read the real clock."""
    return int(time.time() * 1000)


def batch(
    pid: int, seq: int, timestamp: int, *, n: int = 2, epoch: int = 0, txn: bool = False
) -> bytearray:
    return bytearray(
        build_batch(
            [(None, b"v%d" % i) for i in range(n)],
            base_timestamp=timestamp,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            attributes=ATTR_TRANSACTIONAL if txn else 0,
        )
    )


def append(plog: PartitionLog, buf: bytearray) -> int:
    return plog.append(buf, validate_batches(buf))


def open_log(
    directory: Path,
    expiration: Callable[[], int] | None = lambda: EXPIRATION_MS,
    **kwargs,
) -> PartitionLog:
    config = LogConfig(**kwargs.pop("config", {}))
    return PartitionLog.open(
        directory,
        "t",
        0,
        config,
        FileHandleCache(16),
        producer_id_expiration_ms=expiration,
        **kwargs,
    )


def producer_ids(plog: PartitionLog) -> list[int]:
    return [state.producer_id for state in plog.producer_states()]


def snapshot_producer_ids(directory: Path, offset: int) -> list[int]:
    return sorted(entry.producer_id for entry in snap.read(directory, offset))


def entry_at(timestamp: int, txn_first_offset: int = -1) -> ProducerEntry:
    entry = ProducerEntry(0)
    entry.last_timestamp = timestamp
    entry.current_txn_first_offset = txn_first_offset
    return entry


# -- the rule ----------------------------------------------------------------------------


def test_expired_from_exactly_the_expiration_on() -> None:
    entry = entry_at(1_000)
    assert not is_expired(entry, 1_499, 500)
    assert is_expired(entry, 1_500, 500)
    assert is_expired(entry, 9_999, 500)


def test_an_open_transaction_never_expires() -> None:
    assert not is_expired(entry_at(1_000, txn_first_offset=7), 10**12, 500)


def test_remove_expired_keeps_recent_producers_and_open_transactions() -> None:
    state = ProducerStateManager("t-0")
    state.producers[OLD] = entry_at(1_000)
    state.producers[FRESH] = entry_at(5_000)
    state.producers[TXN] = entry_at(1_000, txn_first_offset=0)
    assert state.remove_expired(5_500, 1_000) == [OLD]
    assert sorted(state.producers) == [FRESH, TXN]
    assert state.remove_expired(5_500, 1_000) == []
    assert state.remove_expired(6_000, 1_000) == [FRESH]
    assert sorted(state.producers) == [TXN]


def test_load_snapshot_leaves_out_expired_entries() -> None:
    entries = [
        SnapshotEntry(OLD, 0, 5, 10, 2, 1_000, -1, -1),
        SnapshotEntry(FRESH, 0, 3, 20, 1, 5_000, -1, -1),
        SnapshotEntry(TXN, 0, 1, 30, 1, 1_000, 2, 29),
    ]
    state = ProducerStateManager("t-0")
    assert state.load_snapshot(entries, now_ms=5_500, expiration_ms=1_000) == 1
    assert sorted(state.producers) == [FRESH, TXN]
    assert state.open_transactions() == [(TXN, 0, 29)]
    # Without a time, everything is loaded (as before expiry existed).
    assert state.load_snapshot(entries) == 0
    assert sorted(state.producers) == [OLD, FRESH, TXN]


# -- a partition log -----------------------------------------------------------------------


def test_idle_producers_expire_and_recent_ones_stay(tmp_path: Path, now: int) -> None:
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))
    append(plog, batch(FRESH, 0, now))
    assert producer_ids(plog) == [OLD, FRESH]
    assert plog.remove_expired_producers(now) == 1
    assert producer_ids(plog) == [FRESH]
    assert plog.remove_expired_producers(now + EXPIRATION_MS - 1) == 0
    assert plog.remove_expired_producers(now + EXPIRATION_MS) == 1
    assert producer_ids(plog) == []
    plog.close()


def test_the_last_batch_timestamp_counts(tmp_path: Path, now: int) -> None:
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))
    append(plog, batch(OLD, 2, now))  # the same producer, active again
    assert plog.remove_expired_producers(now + EXPIRATION_MS - 1) == 0
    assert producer_ids(plog) == [OLD]
    plog.close()


def test_a_producer_with_an_open_transaction_is_kept_until_it_ends(
    tmp_path: Path, now: int
) -> None:
    plog = open_log(tmp_path / "t-0")
    first = append(plog, batch(TXN, 0, now - LONG_IDLE_MS, txn=True))
    assert plog.remove_expired_producers(now + 100 * EXPIRATION_MS) == 0
    assert plog.open_transactions() == [(TXN, 0, first)]
    plog.append_marker(TXN, 0, 0, True)  # stamped with the broker's clock
    marker_time = int(time.time() * 1000)
    assert plog.remove_expired_producers(marker_time + EXPIRATION_MS // 2) == 0  # it counts
    assert plog.remove_expired_producers(marker_time + 2 * EXPIRATION_MS) == 1
    assert producer_ids(plog) == []
    plog.close()


def test_no_setting_no_expiry(tmp_path: Path, now: int) -> None:
    plog = open_log(tmp_path / "t-0", expiration=None)
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))
    assert plog.remove_expired_producers(now) == 0
    plog.close()
    reopened = open_log(tmp_path / "t-0", expiration=None, clean=True)
    assert producer_ids(reopened) == [OLD]
    reopened.close()


def test_a_dynamic_change_of_the_setting_is_read_at_use(tmp_path: Path, now: int) -> None:
    setting = {"producer.id.expiration.ms": 10 * EXPIRATION_MS}
    plog = open_log(tmp_path / "t-0", expiration=lambda: setting["producer.id.expiration.ms"])
    append(plog, batch(OLD, 0, now - 2 * EXPIRATION_MS))
    assert plog.remove_expired_producers(now) == 0
    setting["producer.id.expiration.ms"] = EXPIRATION_MS
    assert plog.producer_id_expiration_ms == EXPIRATION_MS
    assert plog.remove_expired_producers(now) == 1
    plog.close()


def test_an_expired_producer_that_sends_again_is_a_new_producer(tmp_path: Path, now: int) -> None:
    plog = open_log(tmp_path / "t-0")
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))  # sequences 0-1
    end = plog.log_end_offset
    assert plog.remove_expired_producers(now) == 1
    # Its retry of the first batch is no longer known as a duplicate: appended again.
    assert append(plog, batch(OLD, 0, now - LONG_IDLE_MS)) == end
    assert plog.remove_expired_producers(now) == 1
    # And any sequence is taken from a producer the partition does not know.
    offset = append(plog, batch(OLD, 42, now))
    assert offset == plog.log_end_offset - 2
    (state,) = plog.producer_states()
    assert (state.producer_id, state.last_sequence, state.last_timestamp) == (OLD, 43, now)
    plog.close()


# -- snapshots and restarts -------------------------------------------------------------------


def test_snapshots_written_after_expiry_leave_the_producer_out(tmp_path: Path, now: int) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, config={"segment_bytes": 200})
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))
    append(plog, batch(FRESH, 0, now))
    rolled_at = plog.log_end_offset
    append(plog, batch(FRESH, 2, now, n=8))  # rolls: the snapshot still has OLD
    assert plog.segments()[-1] == rolled_at
    assert snapshot_producer_ids(directory, rolled_at) == [OLD, FRESH]
    assert plog.remove_expired_producers(now) == 1
    plog.close()  # the snapshot at the log end
    assert snapshot_producer_ids(directory, plog.log_end_offset) == [FRESH]


def test_a_clean_restart_does_not_load_expired_producers(tmp_path: Path, now: int) -> None:
    directory = tmp_path / "t-0"
    plog = open_log(directory, expiration=None)  # nothing expires before the restart
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS))
    append(plog, batch(FRESH, 0, now))
    first = append(plog, batch(TXN, 0, now - LONG_IDLE_MS, txn=True))
    plog.close()
    assert snapshot_producer_ids(directory, plog.log_end_offset) == [OLD, FRESH, TXN]
    reopened = open_log(directory, clean=True)
    assert reopened.replayed_batches == 0  # from the snapshot alone
    assert producer_ids(reopened) == [FRESH, TXN]  # the open transaction stays
    assert reopened.open_transactions() == [(TXN, 0, first)]
    reopened.close()


def _old_producer_then_fresh_segments(
    directory: Path, now: int, expiration: Callable[[], int] | None = None
) -> PartitionLog:
    """A log whose first segment alone holds OLD's batch; FRESH writes the later ones,
    which roll (each roll's snapshot still lists OLD: nothing expired it yet)."""
    plog = open_log(directory, expiration=expiration, config={"segment_bytes": 200})
    append(plog, batch(OLD, 0, now - LONG_IDLE_MS, n=8))
    for seq in range(0, 24, 8):
        append(plog, batch(FRESH, seq, now, n=8))
    assert len(plog.segments()) >= 3
    assert OLD in snapshot_producer_ids(directory, plog.snapshot_offsets()[-1])
    return plog


def test_a_kill_does_not_bring_back_a_producer_from_older_segments(
    tmp_path: Path, now: int
) -> None:
    directory = tmp_path / "t-0"
    plog = _old_producer_then_fresh_segments(directory, now)
    plog.flush()
    append(plog, batch(FRESH, 24, now))
    # kill -9: dropped without close; the newest snapshot is a roll's, listing OLD.
    reopened = open_log(directory, recovery_point=plog.recovery_point)
    assert reopened.log_end_offset == plog.log_end_offset
    assert reopened.replayed_batches > 0  # the tail above the snapshot
    assert producer_ids(reopened) == [FRESH]
    assert reopened.producers.get(FRESH).last_seq == 25
    reopened.close()


def test_a_replay_of_the_whole_log_does_not_bring_back_expired_producers(
    tmp_path: Path, now: int
) -> None:
    directory = tmp_path / "t-0"
    plog = _old_producer_then_fresh_segments(directory, now)
    plog.close()
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(directory / name)
    reopened = open_log(directory, recovery_point=0)
    assert reopened.replayed_batches == 4  # every batch of the log, OLD's too
    assert producer_ids(reopened) == [FRESH]
    reopened.close()


def test_truncation_reloads_without_expired_producers(tmp_path: Path, now: int) -> None:
    directory = tmp_path / "t-0"
    setting = {"ms": 100 * EXPIRATION_MS}
    plog = _old_producer_then_fresh_segments(directory, now, lambda: setting["ms"])
    setting["ms"] = EXPIRATION_MS  # OLD expired now, though no check has run yet
    plog.truncate_to(plog.log_end_offset - 1)  # a follower cutting its last batch
    assert producer_ids(plog) == [FRESH]
    plog.close()


# -- the log manager's schedule and the broker config ----------------------------------------


def test_log_manager_expires_producers_every_check_interval(tmp_path: Path, now: int) -> None:
    setting = {"ms": EXPIRATION_MS}
    manager = LogManager(
        tmp_path,
        LogConfig(),
        retention_check_interval_ms=300_000,
        producer_id_expiration_ms=lambda: setting["ms"],
        producer_id_expiration_check_interval_ms=1_000,
    )
    assert manager.maintenance_interval_ms == 1_000
    first = manager.create("t", 0)
    second = manager.create("t", 1)
    append(first, batch(OLD, 0, now - LONG_IDLE_MS))
    append(second, batch(OLD, 0, now - LONG_IDLE_MS))
    append(second, batch(FRESH, 0, now))
    manager.maintain(now)
    assert producer_ids(first) == [] and producer_ids(second) == [FRESH]
    append(first, batch(OTHER, 0, now - 2 * EXPIRATION_MS))
    manager.maintain(now + 999)  # within the check interval: no check
    assert producer_ids(first) == [OTHER]
    manager.maintain(now + 1_000)
    assert producer_ids(first) == []
    setting["ms"] = 10 * EXPIRATION_MS  # a dynamic change
    append(first, batch(OLD, 0, now - 2 * EXPIRATION_MS))
    manager.maintain(now + 2_000)
    assert producer_ids(first) == [OLD]
    manager.shutdown()

    setting["ms"] = EXPIRATION_MS
    reloaded = LogManager(tmp_path, LogConfig(), producer_id_expiration_ms=lambda: setting["ms"])
    reloaded.load()
    assert producer_ids(reloaded.get("t", 0)) == []
    assert producer_ids(reloaded.get("t", 1)) == [FRESH]
    reloaded.shutdown()


def test_log_manager_without_the_setting_never_expires(tmp_path: Path, now: int) -> None:
    manager = LogManager(tmp_path, LogConfig(), producer_id_expiration_check_interval_ms=1)
    assert manager.maintenance_interval_ms == 15_000  # log.cleaner.backoff.ms's default
    append(manager.create("t", 0), batch(OLD, 0, now - LONG_IDLE_MS))
    manager.maintain(now)
    assert producer_ids(manager.get("t", 0)) == [OLD]
    manager.shutdown()


def test_broker_configs_with_kafkas_names_and_defaults() -> None:
    config = BrokerConfig()
    assert config["producer.id.expiration.ms"] == 86_400_000
    assert config["producer.id.expiration.check.interval.ms"] == 600_000
    for key in ("producer.id.expiration.ms", "producer.id.expiration.check.interval.ms"):
        with pytest.raises(ConfigError):
            BrokerConfig({key: "0"})
    assert check_dynamic_broker_config("producer.id.expiration.ms", "1000", False) == 1000
    with pytest.raises(ConfigError, match="dynamically"):
        check_dynamic_broker_config("producer.id.expiration.check.interval.ms", "1000", False)


def test_the_node_reads_the_broker_config_at_each_use(tmp_path: Path) -> None:
    config = BrokerConfig(
        {
            "log.dir": str(tmp_path / "data"),
            "producer.id.expiration.ms": "1500",
            "producer.id.expiration.check.interval.ms": "500",
        }
    )
    logs = NodeState(config).logs
    assert logs.producer_id_expiration_check_interval_ms == 500
    assert logs.producer_id_expiration_ms is not None
    assert logs.producer_id_expiration_ms() == 1500
    config.set("producer.id.expiration.ms", "2500")  # as a dynamic broker config does
    assert logs.producer_id_expiration_ms() == 2500
