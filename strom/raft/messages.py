"""The messages the Raft core takes in and gives out: KRaft's RPCs, without the wire.

Owns one frozen dataclass per request and response of KRaft's protocol (Vote with
pre-vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot), holding the fields
the consensus needs and nothing of framing, topics or partitions. The core
(``strom.raft.core``) and the deterministic simulator speak these; the broker's network
side translates them to and from Kafka's wire messages (kio). Every message names its
sender ``src`` and receiver ``dst`` by node id.

A request carries an opaque ``token`` that the core copies into its response, so the
network side can send each response back on the connection its request came on
(the simulator leaves it None).

Does not own: encoding, sockets, or what the records in a batch mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class RaftError(IntEnum):
    """The Kafka error codes the quorum answers with (values as Kafka's)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99


@dataclass(frozen=True, slots=True)
class Batch:
    """Records appended together at ``base_offset`` in ``epoch``; they take one offset
    each, so the batch ends at ``base_offset + len(records)``. A control batch
    (``control`` true) holds the leader's epoch-start marker (LeaderChangeMessage in
    Kafka); its records are opaque to the core like any others."""

    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """A snapshot holds the state of every record below ``end_offset``; ``epoch`` is the
    epoch of the last record it covers (Kafka's OffsetAndEpoch of a snapshot)."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What a voter must keep across a crash (Kafka's ``quorum-state`` file): its epoch,
    whom it voted for in that epoch, and the leader it knows for it (-1: none)."""

    epoch: int = 0
    voted_for: int = -1
    leader_id: int = -1


@dataclass(frozen=True, slots=True)
class Message:
    src: int
    dst: int


# Vote (key 52). pre_vote: KIP-996, a candidate asks before it bumps its epoch.
@dataclass(frozen=True, slots=True)
class VoteRequest(Message):
    epoch: int  # the candidate's epoch (for a pre-vote: the epoch it would take is epoch)
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False
    token: Any = None


@dataclass(frozen=True, slots=True)
class VoteResponse(Message):
    error: RaftError
    epoch: int  # the voter's current epoch
    leader_id: int  # -1 when unknown
    granted: bool
    token: Any = None
    # Whether this answers a pre-vote. Not on Kafka's wire: the network side sets it from
    # the request it matched the response to. A candidate must never count a pre-vote as
    # a vote, so this must be right.
    pre_vote: bool = False


# BeginQuorumEpoch (key 53): a new leader tells the voters.
@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest(Message):
    epoch: int
    token: Any = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse(Message):
    error: RaftError
    epoch: int
    leader_id: int
    token: Any = None


# EndQuorumEpoch (key 54): a leader steps down (shutdown) and names its successors.
@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest(Message):
    epoch: int
    preferred_successors: tuple[int, ...]
    token: Any = None


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse(Message):
    error: RaftError
    epoch: int
    leader_id: int
    token: Any = None


# Fetch (key 1) of the metadata log, from voters and observers alike.
@dataclass(frozen=True, slots=True)
class FetchRequest(Message):
    epoch: int  # the fetcher's current leader epoch
    fetch_offset: int
    last_fetched_epoch: int  # epoch of the record before fetch_offset (-1: none)
    max_wait_ms: int = 500
    max_bytes: int = 8 * 1024 * 1024
    token: Any = None


@dataclass(frozen=True, slots=True)
class FetchResponse(Message):
    error: RaftError
    epoch: int
    leader_id: int
    high_watermark: int
    log_start_offset: int
    batches: tuple[Batch, ...] = ()
    # KIP-320: the fetcher's log diverges; truncate to this epoch's end offset.
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    # The offset asked for is below the log start: fetch this snapshot first.
    snapshot_id: SnapshotId | None = None
    token: Any = None
    # The request this answers (fetch_offset, last_fetched_epoch). Not on Kafka's wire:
    # the network side sets them from the request it matched the response to, so the
    # fetcher can tell an answer about its current log from a stale one (-1: unknown,
    # then the fetcher trusts only the answer to its latest request).
    fetch_offset: int = -1
    last_fetched_epoch: int = -1


# FetchSnapshot (key 59): a follower far behind copies the leader's snapshot in chunks.
@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest(Message):
    epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = 1024 * 1024
    token: Any = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse(Message):
    error: RaftError
    epoch: int
    leader_id: int
    snapshot_id: SnapshotId | None
    size: int  # the whole snapshot's size
    position: int
    data: bytes
    token: Any = None


REQUESTS = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)
