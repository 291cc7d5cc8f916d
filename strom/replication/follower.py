"""A follower's truncation rules, sans-I/O (KIP-101, KIP-279, KIP-320).

Owns where a follower cuts its log when the leader answers a fetch with

- a diverging epoch (the leader's log ends epoch E at offset X, the follower's last
  fetched epoch ends elsewhere): the follower keeps the smaller of X and its own end of
  E (or of the largest epoch it has below E), never less than its log start. The cut
  also drops the follower's leader-epoch entries at or past that offset, even when no
  record goes: a leader deposed before its first append in its epoch keeps an empty
  entry for that epoch, and would otherwise ask with it for ever;
- OFFSET_OUT_OF_RANGE: the leader's log starts past the follower's end (retention
  moved it): start over at the leader's log start; else the leader knows none of the
  follower's epochs: keep what the follower had below its high watermark.

Does not own the log: the caller passes the log's answers and truncates.
"""

from __future__ import annotations

from dataclasses import dataclass


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
