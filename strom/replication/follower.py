"""A follower's side of replication, sans-I/O (KIP-101, KIP-279, KIP-320).

Owns what a follower does with the leader's answer to its fetch, on any log that keeps
the ``ReplicaLog`` contract (the broker's ``PartitionLog``; the simulator's model):

- a diverging epoch (the leader's log ends epoch E at offset X, and the follower's last
  fetched epoch ends elsewhere): the follower keeps the smaller of X and its own end of
  E (or of the largest epoch it has below E), never less than its log start. The cut
  also drops the follower's leader-epoch entries at or past that offset, even when no
  record goes (the log's ``truncate_to`` does): a leader deposed before its first
  append in its epoch keeps an empty entry for that epoch, and would otherwise ask with
  it for ever;
- OFFSET_OUT_OF_RANGE: the leader's log starts past the follower's end (retention
  moved it): start over at the leader's log start; else the leader knows none of the
  follower's epochs: keep what the follower had below its high watermark;
- records: appended by the caller as they came; the high watermark becomes the
  leader's, capped by the follower's own log end.

Does not own the log or the fetching: the caller sends fetches and appends records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ReplicaLog(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, start: int) -> None: ...

    def set_high_watermark(self, offset: int) -> None: ...


@dataclass(frozen=True)
class Truncation:
    """Cut the log at ``offset``; ``start_over`` empties it and starts it there."""

    offset: int
    start_over: bool = False


def on_diverging_epoch(
    leader_epoch_end: int, ours_for_epoch: tuple[int, int], log_start_offset: int
) -> Truncation:
    """The leader's log ends the diverging epoch at ``leader_epoch_end``;
    ``ours_for_epoch`` is this log's (epoch, end offset) for that epoch, as
    ``end_offset_for_epoch`` answers ((-1, -1) if it knows nothing at or below it)."""
    _, ours_end = ours_for_epoch
    end = leader_epoch_end if ours_end < 0 else min(leader_epoch_end, ours_end)
    return Truncation(max(end, log_start_offset))


def on_out_of_range(leader_log_start: int, log_end_offset: int, high_watermark: int) -> Truncation:
    if leader_log_start > log_end_offset:
        return Truncation(leader_log_start, start_over=True)
    return Truncation(high_watermark)


def diverged(log: ReplicaLog, epoch: int, end_offset: int) -> Truncation:
    """The leader said this log diverges from its own at ``epoch`` ending at
    ``end_offset``: cut it (``on_diverging_epoch``)."""
    cut = on_diverging_epoch(end_offset, log.end_offset_for_epoch(epoch), log.log_start_offset)
    log.truncate_to(cut.offset)
    return cut


def out_of_range(log: ReplicaLog, leader_log_start: int) -> Truncation:
    """The leader has nothing at this log's end: cut it (``on_out_of_range``)."""
    cut = on_out_of_range(leader_log_start, log.log_end_offset, log.high_watermark)
    if cut.start_over:
        log.truncate_fully_and_start_at(cut.offset)
    else:
        log.truncate_to(cut.offset)
    return cut


def take_high_watermark(log: ReplicaLog, leader_high_watermark: int) -> None:
    """The leader's high watermark, capped by this log's end; never moved back."""
    high_watermark = min(leader_high_watermark, log.log_end_offset)
    if high_watermark > log.high_watermark:
        log.set_high_watermark(high_watermark)
