"""Direct tests of single KRaft rules of the core, on a hand-driven little network.

Each builds a few ``RaftNode``s, moves messages between them by hand (dropping some when
the rule needs it) and asserts what the nodes do and what their ``Ready`` asks for.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from strom.raft.core import RaftConfig, RaftNode, Ready, Role
from strom.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    QuorumState,
    RaftError,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

CONFIG = RaftConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=50,
    request_timeout_ms=100,
    fetch_max_wait_ms=50,
    retry_backoff_ms=10,
)


class Net:
    """Nodes and the messages between them, delivered in order when asked."""

    def __init__(
        self,
        voters: Iterable[int],
        observers: Iterable[int] = (),
        *,
        logs: dict[int, list[Batch]] | None = None,
        states: dict[int, QuorumState] | None = None,
        config: RaftConfig = CONFIG,
    ) -> None:
        self.voters = frozenset(voters)
        self.config = config
        self.now = 0
        self.inflight: list[Message] = []
        self.down: set[int] = set()
        self.readies: dict[int, list[Ready]] = {}
        self.applied: dict[int, list[tuple[int, bytes]]] = {}
        self.nodes: dict[int, RaftNode] = {}
        for node_id in sorted(self.voters | set(observers)):
            self.nodes[node_id] = RaftNode(
                node_id,
                self.voters,
                config,
                random.Random(node_id),
                0,
                quorum_state=(states or {}).get(node_id, QuorumState()),
                batches=(logs or {}).get(node_id, []),
            )
            self.readies[node_id] = []
            self.applied[node_id] = []
            self.pump(node_id)

    def pump(self, node_id: int) -> Ready:
        ready = self.nodes[node_id].ready()
        self.readies[node_id].append(ready)
        self.inflight.extend(ready.messages)
        if ready.committed_snapshot is not None:
            self.applied[node_id] = [(0, b"")] * ready.committed_snapshot.snapshot_id.end_offset
        for batch in ready.committed:
            self.applied[node_id].extend((batch.epoch, r) for r in batch.records)
        return ready

    def deliver(self, drop: Callable[[Message], bool] = lambda m: False, limit: int = 10_000):
        while self.inflight and limit > 0:
            limit -= 1
            message = self.inflight.pop(0)
            if message.dst in self.down or message.src in self.down or drop(message):
                continue
            self.nodes[message.dst].receive(message, self.now)
            self.pump(message.dst)

    def advance(self, ms: int, drop: Callable[[Message], bool] = lambda m: False) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += 10
            for node_id, node in self.nodes.items():
                if node_id not in self.down:
                    node.tick(self.now)
                    self.pump(node_id)
            self.deliver(drop)

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n.role == Role.LEADER]
        assert len(leaders) <= 1
        return leaders[0] if leaders else None

    def elect(self, node_id: int, replicate: bool = True) -> RaftNode:
        """Let ``node_id`` win: the others are slow to time out. Without ``replicate``,
        the new leader's first messages (BeginQuorumEpoch) stay undelivered."""
        node = self.nodes[node_id]
        node.tick(self.now + 10_000)
        self.pump(node_id)
        others: list[Message] = []
        while self.inflight:
            message = self.inflight.pop(0)
            if not isinstance(message, VoteRequest | VoteResponse):
                others.append(message)
            elif message.dst not in self.down:
                self.nodes[message.dst].receive(message, self.now)
                self.pump(message.dst)
        if replicate:
            self.inflight = others
            self.deliver()
        assert node.role == Role.LEADER, node.role
        return node


def test_single_voter_elects_itself_and_commits() -> None:
    node = RaftNode(1, frozenset({1}), CONFIG, random.Random(1), 0)
    ready = node.ready()
    assert node.role == Role.LEADER and node.epoch == 1
    assert ready.quorum_state == QuorumState(1, 1, 1)
    assert [b.control for b in ready.append] == [True]
    assert ready.committed == ready.append
    assert node.leader_ready and node.high_watermark == 1
    base = node.propose([b"a", b"b"], 5)
    assert base == 1
    ready = node.ready()
    assert ready.append == (Batch(1, 1, (b"a", b"b")),)
    assert ready.committed == ready.append
    assert node.high_watermark == 3


def test_single_voter_restart_takes_a_new_epoch_and_recommits() -> None:
    first = RaftNode(1, frozenset({1}), CONFIG, random.Random(1), 0)
    first.propose([b"x"], 1)
    state, log = first.quorum_state, list(first.log.batches)
    second = RaftNode(
        1, frozenset({1}), CONFIG, random.Random(2), 10, quorum_state=state, batches=log
    )
    ready = second.ready()
    assert second.role == Role.LEADER and second.epoch == 2
    assert [r for b in ready.committed for r in b.records][-1].startswith(b"leader=1 epoch=2")
    assert b"x" in [r for b in ready.committed for r in b.records]


def test_pre_vote_does_not_bump_the_epoch_or_persist() -> None:
    net = Net({1, 2, 3})
    node = net.nodes[1]
    node.tick(10_000)
    ready = net.pump(1)
    assert node.role == Role.PROSPECTIVE
    assert node.epoch == 0 and ready.quorum_state is None
    votes = [m for m in ready.messages if isinstance(m, VoteRequest)]
    assert {m.dst for m in votes} == {2, 3}
    assert all(m.pre_vote and m.epoch == 1 for m in votes)
    # The others grant the pre-vote without changing their own epoch either.
    net.inflight = [m for m in net.inflight if m.dst == 2]
    net.nodes[2].receive(votes[0] if votes[0].dst == 2 else votes[1], 0)
    answer = net.pump(2)
    assert net.nodes[2].epoch == 0 and answer.quorum_state is None
    (response,) = answer.messages
    assert isinstance(response, VoteResponse) and response.granted and response.pre_vote
    # A majority of pre-votes: now a candidate, epoch bumped and the vote persisted.
    node.receive(response, 0)
    ready = net.pump(1)
    assert node.role == Role.CANDIDATE and node.epoch == 1
    assert ready.quorum_state == QuorumState(1, 1, -1)
    assert all(isinstance(m, VoteRequest) and not m.pre_vote for m in ready.messages)


def test_a_follower_with_a_live_leader_rejects_pre_votes() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    net.advance(30)
    follower = net.nodes[2]
    assert follower.role == Role.FOLLOWER and follower.leader_id == 1
    pre_vote = VoteRequest(3, 2, leader.epoch + 1, leader.last_epoch, leader.log_end_offset, True)
    follower.receive(pre_vote, net.now)
    (response,) = net.pump(2).messages
    assert isinstance(response, VoteResponse)
    assert not response.granted and response.leader_id == 1
    assert follower.epoch == leader.epoch and follower.role == Role.FOLLOWER
    # Once the leader has been silent for the fetch timeout, the same pre-vote is granted.
    net.down.add(1)
    net.advance(CONFIG.fetch_timeout_ms + 10, drop=lambda m: m.dst != 2 or m.src != 1)
    follower.receive(pre_vote, net.now)
    (response,) = [m for m in net.pump(2).messages if isinstance(m, VoteResponse)]
    assert response.granted


def test_followers_splitting_their_votes_over_a_dead_leader_back_off_at_once() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    leader.propose([b"x"], net.now)
    net.pump(1)
    net.deliver()  # both followers fetch the record together: their fetch timers run in step
    net.down.add(1)  # killed: no EndQuorumEpoch
    a, b = net.nodes[2], net.nodes[3]
    while a.role == Role.FOLLOWER:
        assert net.now < 10_000, "no election timeout in 10 s of simulated time"
        net.advance(10)
    # Both timed out in the same tick, granted each other's pre-vote, became candidates of
    # epoch 2 and rejected each other. The dead leader left their fetches unanswered for a
    # whole fetch timeout: its vote is not waited for (an election timeout, 100 to 200 ms
    # here), the election is lost at once and both back off, Kafka's way (at most 100 ms
    # after a first loss, capped by election.backoff.max.ms).
    assert (a.role, b.role) == (Role.UNATTACHED, Role.UNATTACHED)
    assert a.epoch == b.epoch == 2 and a.voted_for == 2 and b.voted_for == 3
    split_at = net.now
    while Role.LEADER not in (a.role, b.role):
        assert net.now - split_at < 10_000, "no leader in 10 s of simulated time"
        net.advance(10)
    assert net.now - split_at < CONFIG.election_timeout_ms


def test_a_leader_that_handed_over_is_still_waited_for() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    net.advance(30)
    net.down.add(2)
    leader.resign(net.now)
    net.pump(1)
    net.deliver()
    follower = net.nodes[3]
    for _ in range(100):
        if follower.role != Role.FOLLOWER:
            break
        net.advance(10, drop=lambda m: m.dst == 1)  # 1 answers nothing from now on
    assert follower.role == Role.PROSPECTIVE
    # 2 refuses the pre-vote: 1 could still grant it. 1 said it was leaving (EndQuorumEpoch),
    # so it is alive and its answer is waited for; only a leader the fetch timeout gave up
    # on is presumed down.
    follower.receive(VoteResponse(2, 3, RaftError.NONE, follower.epoch, -1, False), net.now)
    net.pump(3)
    assert follower.role == Role.PROSPECTIVE


def test_one_vote_per_epoch_and_only_for_an_up_to_date_log() -> None:
    net = Net({1, 2, 3}, logs={1: [Batch(0, 1, (b"a",))]})
    voter = net.nodes[1]
    stale = VoteRequest(2, 1, 2, 0, 0)  # empty log: behind node 1's
    voter.receive(stale, 0)
    (response,) = net.pump(1).messages
    assert not response.granted and voter.epoch == 2
    voter.receive(VoteRequest(3, 1, 2, 1, 1), 0)
    ready = net.pump(1)
    assert ready.messages[0].granted and ready.quorum_state == QuorumState(2, 3, -1)
    voter.receive(VoteRequest(2, 1, 2, 5, 9), 0)  # a better log, but the vote is spent
    assert not net.pump(1).messages[0].granted
    voter.receive(VoteRequest(3, 1, 2, 1, 1), 0)  # the same candidate again: yes
    assert net.pump(1).messages[0].granted


def test_lower_epoch_requests_are_fenced() -> None:
    net = Net({1, 2, 3})
    net.elect(1)
    net.advance(20)
    node = net.nodes[2]
    node.receive(FetchRequest(3, 2, 0, 0, 0), net.now)
    (response,) = net.pump(2).messages
    assert isinstance(response, FetchResponse)
    assert response.error == RaftError.FENCED_LEADER_EPOCH
    assert response.epoch == node.epoch and response.leader_id == 1


def test_divergent_follower_truncates_to_the_leader_epoch_end() -> None:
    common = [Batch(0, 1, (b"a", b"b"))]
    leader_log = [*common, Batch(2, 3, (b"c",))]
    follower_log = [*common, Batch(2, 2, (b"x", b"y", b"z"))]  # never committed
    net = Net(
        {1, 2, 3},
        logs={1: leader_log, 2: follower_log},
        states={1: QuorumState(3, -1, -1), 2: QuorumState(3, -1, -1)},
    )
    net.down.add(3)
    leader = net.elect(1)
    assert leader.epoch == 4
    net.advance(60)
    follower = net.nodes[2]
    truncations = [r.truncate_to for r in net.readies[2] if r.truncate_to is not None]
    assert truncations == [2]
    assert follower.log.batches == leader.log.batches
    assert [b.epoch for b in follower.log.batches] == [1, 3, 4]
    assert follower.high_watermark == leader.high_watermark == leader.log_end_offset


def test_divergence_drops_records_of_later_epochs_too() -> None:
    # The follower's log has epochs 1 and 3 where the leader's has 1 and 2: the answer
    # names epoch 1 (or 2); nothing of epoch 3 may stay even below the leader's end.
    net = Net(
        {1, 2, 3},
        logs={
            1: [Batch(0, 1, (b"a",)), Batch(1, 2, (b"b", b"c", b"d"))],
            2: [Batch(0, 1, (b"a",)), Batch(1, 3, (b"q",))],
        },
        states={1: QuorumState(4, -1, -1), 2: QuorumState(4, -1, -1)},
    )
    net.down.add(2)  # its log ends in epoch 3 > 2: it would not vote for node 1
    leader = net.elect(1)
    net.down.discard(2)
    net.advance(100)
    follower = net.nodes[2]
    assert follower.leader_id == leader.node_id
    # The leader answers epoch 2 ending at 4; the follower's own log has nothing of
    # epoch 2, so it keeps only epoch 1 (offset 0) and refetches from 1.
    truncations = [r.truncate_to for r in net.readies[2] if r.truncate_to is not None]
    assert truncations == [1]
    assert follower.log.batches == leader.log.batches


def test_leader_does_not_commit_an_earlier_epoch_entry_by_count_alone() -> None:
    # Figure 8 of the Raft paper: node 1 holds an entry of epoch 2 that was never
    # committed. Leading epoch 4, it may count a majority holding that entry only once
    # an entry of epoch 4 (its LeaderChange batch) is held by a majority too.
    config = RaftConfig(
        election_timeout_ms=100,
        fetch_timeout_ms=200,
        request_timeout_ms=100,
        fetch_max_wait_ms=50,
        fetch_max_bytes=1,  # one batch per fetch response
    )
    net = Net(
        {1, 2, 3},
        logs={1: [Batch(0, 2, (b"old",))]},
        states={1: QuorumState(3, -1, -1)},
        config=config,
    )
    net.down.add(3)
    leader = net.elect(1, replicate=False)
    assert leader.log_end_offset == 2 and not leader.leader_ready
    # Node 2 learns of the leader, fetches from 0 and gets only the epoch 2 batch.
    follower = net.nodes[2]
    follower.receive(BeginQuorumEpochRequest(1, 2, leader.epoch), net.now)
    (fetch,) = [m for m in net.pump(2).messages if isinstance(m, FetchRequest)]
    assert fetch.fetch_offset == 0
    leader.receive(fetch, net.now)
    (response,) = net.pump(1).messages
    assert [b.epoch for b in response.batches] == [2]
    net.nodes[2].receive(response, net.now)
    (fetch,) = net.pump(2).messages
    assert isinstance(fetch, FetchRequest) and fetch.fetch_offset == 1
    # A majority (1 and 2) now holds offset 0, of epoch 2: not committed by that alone.
    leader.receive(fetch, net.now)
    ready = net.pump(1)
    assert leader.high_watermark == 0 and ready.committed == ()
    assert not leader.leader_ready
    net.inflight = list(ready.messages)
    net.deliver()  # node 2 gets the LeaderChange batch and fetches again
    assert leader.high_watermark == 2 and leader.leader_ready
    assert [b.epoch for r in net.readies[1] for b in r.committed] == [2, 4]


def test_leader_holds_an_empty_fetch_until_new_data() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    net.advance(40)
    assert not net.inflight  # both followers' fetches are held by the leader
    leader.propose([b"v"], net.now)
    responses = [m for m in net.pump(1).messages if isinstance(m, FetchResponse)]
    assert {m.dst for m in responses} == {2, 3}
    assert all(m.batches and m.batches[0].records == (b"v",) for m in responses)


def test_check_quorum_makes_an_isolated_leader_resign() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    net.advance(30)
    net.down.update({2, 3})
    net.advance(int(CONFIG.fetch_timeout_ms * 1.5) + 20)
    assert leader.role != Role.LEADER
    assert leader.epoch == 1  # resigning does not bump the epoch


def test_graceful_resign_hands_over_to_a_successor() -> None:
    net = Net({1, 2, 3})
    leader = net.elect(1)
    leader.propose([b"x"], net.now)
    net.pump(1)
    net.advance(100)
    leader.resign(net.now)
    net.pump(1)
    net.deliver()
    net.advance(60)  # far less than an election timeout: the first successor goes at once
    new = net.leader()
    assert new is not None and new.node_id != 1 and new.epoch == 2


def test_follower_far_behind_installs_the_leader_snapshot() -> None:
    config = RaftConfig(
        election_timeout_ms=100,
        fetch_timeout_ms=200,
        request_timeout_ms=100,
        fetch_max_wait_ms=50,
        fetch_snapshot_max_bytes=7,
    )
    net = Net({1, 2, 3}, config=config)
    net.down.add(3)
    leader = net.elect(1)
    for i in range(5):
        leader.propose([f"r{i}".encode()], net.now)
        net.pump(1)
        net.advance(20)
    hw = leader.high_watermark
    assert hw == 6
    snapshot = Snapshot(SnapshotId(hw, leader.epoch), b"state-of-six-records")
    leader.take_snapshot(snapshot)
    assert net.pump(1).delete_before == hw
    assert leader.log_start_offset == hw
    leader.propose([b"after"], net.now)
    net.pump(1)
    net.down.discard(3)
    net.advance(300)
    node = net.nodes[3]
    chunks = [m for r in net.readies[3] for m in r.messages if isinstance(m, FetchSnapshotRequest)]
    assert len(chunks) >= 3  # 20 bytes in chunks of 7
    installed = [r for r in net.readies[3] if r.snapshot is not None]
    assert len(installed) == 1
    assert installed[0].snapshot == snapshot and installed[0].committed_snapshot == snapshot
    assert node.log_start_offset == hw
    assert node.log.batches == leader.log.batches
    assert node.high_watermark == leader.high_watermark == hw + 1
    assert net.applied[3][-1] == (leader.epoch, b"after")


def test_observer_finds_the_leader_and_never_counts() -> None:
    net = Net({1, 2, 3}, observers={4})
    leader = net.elect(1)
    net.advance(500)
    observer = net.nodes[4]
    assert observer.role == Role.FOLLOWER and observer.leader_id == 1
    assert observer.high_watermark == 1
    net.down.update({2, 3})
    leader.propose([b"v"], net.now)
    net.pump(1)
    net.advance(100)
    assert observer.log_end_offset == leader.log_end_offset == 2
    assert leader.high_watermark == 1  # the observer holding it too does not commit it
    info = leader.describe()
    assert [o.replica_id for o in info.observers] == [4]
    assert info.observers[0].log_end_offset == leader.log_end_offset
    assert [v.replica_id for v in info.voters] == [1, 2, 3]


def test_restart_as_leader_comes_back_resigned() -> None:
    node = RaftNode(
        2, frozenset({1, 2, 3}), CONFIG, random.Random(0), 0, quorum_state=QuorumState(5, 2, 2)
    )
    assert node.role == Role.RESIGNED and node.epoch == 5 and node.leader_id == -1
    node.tick(10_000)
    ready = node.ready()
    assert node.role == Role.PROSPECTIVE and node.epoch == 5
    assert all(isinstance(m, VoteRequest) and m.epoch == 6 and m.pre_vote for m in ready.messages)


def test_responses_carry_the_request_token() -> None:
    net = Net({1, 2, 3})
    net.nodes[2].receive(VoteRequest(1, 2, 1, 0, 0, token="t-1"), 0)
    (response,) = net.pump(2).messages
    assert response.token == "t-1"
