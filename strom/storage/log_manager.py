"""Every partition log under one log directory.

Owns: discovering ``{topic}-{partition}`` directories at start-up, the checkpoint
files ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (high watermarks, read back capped by each log end), the
clean shutdown marker ``.kafka_cleanshutdown`` (present: trust the files; absent:
recover above each recovery point), a ``.lock`` file so two brokers never share a
directory, creating and deleting logs, periodic flushes, the shared FileHandleCache,
and the schedule of the log lifecycle (``maintain``: retention every
log.retention.check.interval.ms, expiry of idle producer ids every
producer.id.expiration.check.interval.ms, unlinking retired segment files when their
file.delete.delay.ms has passed, and the LogCleaner of compacted logs). Files and
directories of deleted segments and partitions are removed on a background thread:
freeing a large file takes milliseconds the owner's thread (the event loop) should
spend on requests.
Does not own: which topics should exist or their configs (the cluster metadata
hands in a ``configs(topic)`` callable, and a ``producer_id_expiration_ms()`` one
read at each use, as that broker config is dynamic), the retention and producer
expiry rules themselves (partition_log.py, producer_state.py).
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.storage.checkpoint import read_checkpoint, write_checkpoint
from strom.storage.cleaner import UNLIMITED_IO, LogCleaner
from strom.storage.durable import fsync_dir, unlink_all, write_atomically
from strom.storage.errors import LogDirLockedError
from strom.storage.handles import FileHandleCache
from strom.storage.log_config import LogConfig
from strom.storage.partition_log import PartitionLog, remove_tree

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # high watermarks
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_SUFFIX = "-delete"
# A partition directory set aside because it holds another topic's data (a topic of the
# same name the metadata no longer knows): kept, never served.
STRAY_SUFFIX = "-stray"
# Which topic a partition directory belongs to, by id, as Kafka writes it (KIP-516):
# "version: 0" and "topic_id: <base64 id>" lines.
PARTITION_METADATA = "partition.metadata"
# The metadata quorum's log lives beside the partitions but is not one of them: its
# owner is strom.storage.metadata_log.
METADATA_LOG_DIR = "__cluster_metadata-0"

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def write_checkpoints(contents: list[tuple[Path, dict[tuple[str, int], int]]]) -> None:
    """Write what ``LogManager.checkpoint_contents`` took, each file atomically; safe on
    any thread."""
    for path, entries in contents:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(path, entries)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) from ``{topic}-{partition}``; topics may hold '-' and '.'."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not _LEGAL_TOPIC.match(topic):
        return None
    return topic, int(partition)


def read_partition_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id in a partition directory's ``partition.metadata``; None if it has
    none (a directory from before topic ids) or it cannot be read."""
    try:
        text = (directory / PARTITION_METADATA).read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid_from_base64(value.strip())
            except ValueError:
                return None
    return None


def write_partition_topic_id(directory: Path, topic_id: uuid.UUID, *, sync: bool = True) -> Path:
    """Write ``partition.metadata`` (fsynced unless ``sync`` is False); its path."""
    path = directory / PARTITION_METADATA
    text = f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n"
    write_atomically(path, text.encode(), sync=sync)
    return path


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of its 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_base64(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a topic id: {text!r}") from exc


class LogManager:
    """All PartitionLogs of one log directory, sharing one bounded fd cache."""

    def __init__(
        self,
        log_dir: Path,
        default_config: LogConfig,
        max_open_files: int = 512,
        *,
        retention_check_interval_ms: int = 300000,
        producer_id_expiration_ms: Callable[[], int] | None = None,
        producer_id_expiration_check_interval_ms: int = 600000,
        cleaner_enabled: bool = True,
        cleaner_backoff_ms: int = 15000,
        cleaner_max_map_entries: int = 5_000_000,
        cleaner_io_max_bytes_per_second: float = UNLIMITED_IO,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.default_config = default_config
        self.handles = FileHandleCache(max_open_files)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # The topic id each log was matched with by create_for_topic, so that the
        # partition.metadata file is read once per log, not at every metadata change.
        self._verified: dict[tuple[str, int], uuid.UUID] = {}
        self._lock_fd: int | None = None
        self.retention_check_interval_ms = retention_check_interval_ms
        self._last_retention_check_ms = 0
        # producer.id.expiration.ms as of now (None: producer ids never expire).
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._last_producer_expiration_check_ms = 0
        self._remover: ThreadPoolExecutor | None = None  # unlinks off the owner's thread
        self.cleaner = LogCleaner(
            self.log_dir,
            self.all_logs,
            enabled=cleaner_enabled,
            backoff_ms=cleaner_backoff_ms,
            max_map_entries=cleaner_max_map_entries,
            io_max_bytes_per_second=cleaner_io_max_bytes_per_second,
        )

    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"{self.log_dir} is in use by another process") from None
        self._lock_fd = fd

    def load(self, configs: Callable[[str], LogConfig] | None = None) -> None:
        """Open every partition log found in the directory (recovering if needed)."""
        self._lock()
        started = time.monotonic()
        marker = self.log_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        self.cleaner.load()
        recovery_points = read_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = read_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = read_checkpoint(self.log_dir / REPLICATION_OFFSET_CHECKPOINT)
        for entry in sorted(os.scandir(self.log_dir), key=lambda e: e.name):
            if not entry.is_dir() or entry.name == METADATA_LOG_DIR:
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                log.info("removing %s left by a topic deletion", entry.path)
                remove_tree(Path(entry.path))
                continue
            parsed = parse_partition_dir(entry.name)
            if parsed is None:
                continue
            topic, partition = parsed
            config = configs(topic) if configs is not None else self.default_config
            self._logs[parsed] = PartitionLog.open(
                Path(entry.path),
                topic,
                partition,
                config,
                self.handles,
                recovery_point=recovery_points.get(parsed, 0),
                log_start_offset=start_offsets.get(parsed, 0),
                high_watermark=high_watermarks.get(parsed),
                clean=clean,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
        if clean:
            marker.unlink()
        log.info(
            "loaded %d partition logs (%d segments, %d bytes) from %s in %.2fs after %s",
            len(self._logs),
            sum(len(p.segments()) for p in self._logs.values()),
            sum(p.size_bytes for p in self._logs.values()),
            self.log_dir,
            time.monotonic() - started,
            "a clean shutdown"
            if clean
            else ("an unclean shutdown (recovered)" if self._logs else "a fresh start"),
        )

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The log of ``topic``-``partition``, created empty if it does not exist."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            return existing
        if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
            raise ValueError(f"illegal topic name {topic!r}")
        if partition < 0:
            raise ValueError(f"illegal partition {partition}")
        self._lock()
        partition_log = PartitionLog.open(
            self.log_dir / partition_dir_name(topic, partition),
            topic,
            partition,
            config or self.default_config,
            self.handles,
            clean=True,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        self._logs[(topic, partition)] = partition_log
        return partition_log

    def create_for_topic(
        self, topic: str, partition: int, topic_id: uuid.UUID, config: LogConfig | None = None
    ) -> PartitionLog:
        """The log of ``topic``-``partition`` for the topic whose id is ``topic_id``.

        A log already here that holds another topic's id (one of the same name that the
        metadata no longer knows) is never served as this topic's: its directory is set
        aside as ``{name}.{uuid}-stray`` and a new log is created. A log without an id
        (from before topic ids) is taken over by this topic."""
        key = (topic, partition)
        if self._verified.get(key) == topic_id and key in self._logs:
            return self._logs[key]
        existing = self._logs.get(key)
        if existing is not None:
            stored = read_partition_topic_id(existing.directory)
            if stored is not None and stored != topic_id:
                self._set_aside(existing, stored, topic_id)
                existing = None
        partition_log = existing or self.create(topic, partition, config)
        if read_partition_topic_id(partition_log.directory) != topic_id:
            # made durable by the log's next flush: a new partition's leader is made on
            # the event loop, and a file lost to a power cut before any record was
            # flushed leaves a log without an id, which this topic then takes over
            path = write_partition_topic_id(partition_log.directory, topic_id, sync=False)
            partition_log.sync_with_next_flush(path)
        self._verified[key] = topic_id
        return partition_log

    def verified_topic_id(self, topic: str, partition: int) -> uuid.UUID | None:
        """The topic id this partition's log was last matched with (create_for_topic)."""
        return self._verified.get((topic, partition))

    def _set_aside(self, stray: PartitionLog, stored: uuid.UUID, wanted: uuid.UUID) -> None:
        key = (stray.topic, stray.partition)
        del self._logs[key]
        stray.close()
        target = stray.directory.with_name(
            f"{stray.directory.name}.{uuid.uuid4().hex}{STRAY_SUFFIX}"
        )
        os.rename(stray.directory, target)
        fsync_dir(self.log_dir)
        log.warning(
            "%s-%d on disk belongs to topic id %s, not %s: set aside as %s (not served; "
            "remove it once it is not needed)",
            *key,
            uuid_to_base64(stored),
            uuid_to_base64(wanted),
            target,
        )

    def delete_topic(self, topic: str) -> int:
        """Delete every partition log of ``topic``; returns how many there were."""
        doomed = [key for key in self._logs if key[0] == topic]
        for key in doomed:
            self._verified.pop(key, None)
            self._logs.pop(key).delete(self._remove_tree_later)
        if doomed:
            log.info("deleted %d partition logs of topic %s", len(doomed), topic)
        return len(doomed)

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Delete one partition's log (a replica moved away); False if there is none."""
        self._verified.pop((topic, partition), None)
        partition_log = self._logs.pop((topic, partition), None)
        if partition_log is None:
            return False
        partition_log.delete(self._remove_tree_later)
        log.info("deleted the log of %s-%d", topic, partition)
        return True

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def checkpoint(self) -> None:
        """Atomically rewrite the checkpoint files from the open logs."""
        write_checkpoints(self.checkpoint_contents())

    def checkpoint_contents(self) -> list[tuple[Path, dict[tuple[str, int], int]]]:
        """What the checkpoint files hold now (recovery points, log start offsets, high
        watermarks), taken on the logs' owner; ``write_checkpoints`` may write it on
        another thread."""
        return [
            (
                self.log_dir / RECOVERY_POINT_CHECKPOINT,
                {key: p.recovery_point for key, p in self._logs.items()},
            ),
            (
                self.log_dir / LOG_START_OFFSET_CHECKPOINT,
                {key: p.log_start_offset for key, p in self._logs.items()},
            ),
            (
                self.log_dir / REPLICATION_OFFSET_CHECKPOINT,
                {key: p.high_watermark for key, p in self._logs.items()},
            ),
        ]

    def flush_due(self, now_ms: int | None = None) -> int:
        """Apply each log's flush.ms; returns how many logs were flushed."""
        return sum(1 for p in self.logs_due_for_flush(now_ms) if p.maybe_flush(now_ms))

    def logs_due_for_flush(self, now_ms: int | None = None) -> list[PartitionLog]:
        """The logs whose flush.messages / flush.ms call for a flush now."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        return [p for p in self._logs.values() if p.flush_wanted(now_ms)]

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply every log's retention now; returns how many segments were deleted."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        deleted = 0
        for partition_log in list(self._logs.values()):
            try:
                deleted += partition_log.enforce_retention(now_ms)
            except OSError:
                log.exception("retention of %r failed", partition_log)
        return deleted

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget, in every log, the producer ids idle for producer.id.expiration.ms;
        returns how many."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        return sum(p.remove_expired_producers(now_ms) for p in list(self._logs.values()))

    def maintain(self, now_ms: int | None = None) -> None:
        """The periodic lifecycle work: retention and producer id expiry when their
        check intervals have passed, and unlinking retired files whose
        file.delete.delay.ms is over."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        if now_ms - self._last_retention_check_ms >= self.retention_check_interval_ms:
            self._last_retention_check_ms = now_ms
            self.enforce_retention(now_ms)
        if (
            self.producer_id_expiration_ms is not None
            and now_ms - self._last_producer_expiration_check_ms
            >= self.producer_id_expiration_check_interval_ms
        ):
            self._last_producer_expiration_check_ms = now_ms
            expired = self.remove_expired_producers(now_ms)
            if expired:
                log.info("%d idle producer ids expired in %s", expired, self.log_dir)
        due: list[str] = []
        for partition_log in list(self._logs.values()):
            due += partition_log.due_deletes(now_ms)
        if due:
            self._background().submit(unlink_all, due)
        self.cleaner.maintain(now_ms)

    def _background(self) -> ThreadPoolExecutor:
        if self._remover is None:
            self._remover = ThreadPoolExecutor(1, thread_name_prefix="log-remover")
        return self._remover

    def _remove_tree_later(self, directory: Path) -> None:
        self._background().submit(remove_tree, directory)

    @property
    def maintenance_interval_ms(self) -> int:
        """How often ``maintain`` wants to be called."""
        interval = min(self.retention_check_interval_ms, self.cleaner.backoff_ms)
        if self.producer_id_expiration_ms is not None:
            interval = min(interval, self.producer_id_expiration_check_interval_ms)
        return interval

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, and leave the clean shutdown marker."""
        self.cleaner.shutdown()
        if self._remover is not None:
            self._remover.shutdown(wait=True)
            self._remover = None
        for partition_log in self._logs.values():
            partition_log.close()
        self.checkpoint()
        marker = self.log_dir / CLEAN_SHUTDOWN_MARKER
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.log_dir)
        self.handles.close_all()
        self._logs.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("log manager for %s shut down cleanly", self.log_dir)
