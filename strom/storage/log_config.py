"""Topic-level log configuration with Kafka's names (snake_cased) and defaults.

Owns: the immutable LogConfig value. Does not own: parsing broker or topic
properties (strom.config / strom.cluster turn ``segment.bytes`` and friends into a
LogConfig), nor retention (partition_log.py), compaction (cleaner.py) or broker-side
recompression (the produce handler), which only read these fields.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-topic log settings; defaults are Kafka's topic-level defaults."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms (7 days)
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10485760  # segment.index.bytes: max index size, roll when full
    flush_messages: int | None = None  # flush.messages; None = never (Kafka's Long.MAX_VALUE)
    flush_ms: int | None = None  # flush.ms; None = never
    retention_ms: int = 604800000  # retention.ms
    retention_bytes: int = -1  # retention.bytes
    max_message_bytes: int = 1048588  # max.message.bytes
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    # message.timestamp.before.max.ms / .after.max.ms: how far a CreateTime record's
    # timestamp may lie before / after the broker's clock (Kafka's LONG_MAX and 1 hour)
    message_timestamp_before_max_ms: int = 9223372036854775807
    message_timestamp_after_max_ms: int = 3600000
    cleanup_policy: str = "delete"  # cleanup.policy: "delete", "compact" or "compact,delete"
    compression_type: str = "producer"  # compression.type
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    delete_retention_ms: int = 86400000  # delete.retention.ms (tombstones)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = 9223372036854775807  # max.compaction.lag.ms

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ValueError("segment_bytes must be at least 14")
        if self.segment_ms < 1:
            raise ValueError("segment_ms must be positive")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must not be negative")
        if self.segment_index_bytes < 4:
            raise ValueError("segment_index_bytes must be at least 4")
        if self.flush_messages is not None and self.flush_messages < 1:
            raise ValueError("flush_messages must be positive or None")
        if self.flush_ms is not None and self.flush_ms < 0:
            raise ValueError("flush_ms must not be negative or None")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"unknown message_timestamp_type {self.message_timestamp_type!r}")

    @property
    def compact(self) -> bool:
        """cleanup.policy includes ``compact``: the cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy  # the policies are "delete" and "compact"

    @property
    def delete(self) -> bool:
        """cleanup.policy includes ``delete``: retention.ms / retention.bytes apply."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """How old the active segment may get before the next append rolls it: segment.ms,
        or max.compaction.lag.ms if lower on a compacted log (so that records can be
        cleaned within that lag, as Kafka does)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def max_offset_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 8)

    @property
    def max_time_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 12)
