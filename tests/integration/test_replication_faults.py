"""Replication under the faults that once lost acknowledged writes, with real processes.

The cluster is three controllers and three brokers, as docs/cluster.md shows it; a topic
of three partitions with replication factor 3, ``min.insync.replicas=2`` and unclean
election off. Two idempotent ``acks=all`` producers write and a consumer reads
throughout (``fault_workload``) while a schedule of faults runs, one after another:

1. a slow follower rejoining: a follower of one partition is stopped until it leaves the
   ISR, then kept slow (stopped 80 ms of every 100 ms, like an overloaded broker) until
   it is back in the ISR, and at that moment the partition's leader is killed (kill -9);
   the follower stays slow a little longer. The old bug: the high watermark ran past the
   joining follower's log end while its AlterPartition was in flight, so the new ISR
   member lacked acknowledged records, was elected and the others cut them away;
2. both followers of a partition paused (SIGSTOP) under acks=all for longer than
   ``replica.lag.time.max.ms``: the ISR shrinks to the leader and the waiting produces
   must not be answered with success (NOT_ENOUGH_REPLICAS_AFTER_APPEND);
3. a leader paused right after its election: the leader of a partition is killed and
   the broker elected in its place is paused at once, until it is deposed; back as a
   follower it must rejoin the ISR (the old bug: it asked with its empty epoch for ever);
4. overlapping faults: a broker slow, another paused, and a controller killed at the
   same time (the active one with the seed's luck).

The checker is independent of the code under test (``fault_workload.check``: every
acknowledged record once at its offset, in order per producer, nothing a consumer saw
vanished), and adds:

- no acks=all success with one copy: while both followers of a partition are stopped,
  no record sent to it after they stopped (plus a grace for what was already on its
  way to them) may be acknowledged before they resume;
- after healing, every replica back in the ISR of every partition, and the replicas'
  segment files byte-identical.

On a failure it prints the history around the first violation (with librdkafka's own
account of its idempotence), the end of each node's log, and each node's lines about the
topic from all its lives (a node's log is kept across restarts, each launch marked): who
led which partition when, truncations, and what each leader answered to retried or
out-of-order batches (producer id, epoch, sequences).

``STROM_FAULT_SEED`` (default 30) picks the partitions, victims and hold times; the seed
fixes the schedule, not the interleaving of the processes. Nothing is asserted on time:
the waits are bounds on liveness. A run takes about a minute and a half.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
from cluster_process import Cluster, ClusterNode, NodeSpec
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from fault_workload import Clients, History, Violation, Workload, judge
from kafka_helpers import wait_until
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from raw_client import RawClient

SEED = int(os.environ.get("STROM_FAULT_SEED", "30"))
TOPIC = "acked"
PARTITIONS = 3
WORKLOAD = Workload(TOPIC, PARTITIONS, producers=2, rate=80)
BROKERS = (4, 5, 6)
LAG_MS = 1500
SETTINGS = {
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
}
# After both followers stop, what they may still have fetched: records sent up to this
# long after the stop may be on them.
GRACE_S = 0.5


class Faults:
    """Does the faults and notes them in the history."""

    def __init__(self, cluster: Cluster, history: History, admin: AdminClient) -> None:
        self.cluster = cluster
        self.history = history
        self.admin = admin
        self.slow: dict[int, threading.Event] = {}
        # (partition, stopped at, resumed at): both followers of the partition stopped
        self.both_followers_stopped: list[tuple[int, float, float]] = []

    def partitions(self, admin: AdminClient | None = None) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, ISR), as the metadata of a broker shows it now."""
        try:
            topic = (admin or self.admin).list_topics(TOPIC, timeout=2).topics[TOPIC]
        except KafkaException:
            return {}
        return {p: (m.leader, sorted(m.isrs)) for p, m in topic.partitions.items()}

    def replicas(self, partition: int) -> list[int]:
        topic = self.admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
        return list(topic.partitions[partition].replicas)

    def view_of(self, broker: int) -> tuple[int, dict[int, tuple[int, list[int]]]]:
        """(brokers it lists, partition -> (leader, ISR)) as ``broker`` itself sees them:
        a Metadata request to it alone ((0, {}) when it does not answer)."""
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        try:
            with RawClient(self.node(broker).listen_port, timeout=2) as client:
                response = client.request(request)
        except OSError:
            return 0, {}
        partitions = {
            p.partition_index: (p.leader_id, sorted(p.isr_nodes))
            for t in response.topics
            for p in t.partitions
        }
        return len(response.brokers), partitions

    def whole(self) -> bool:
        """Every replica in the ISR of every partition, as *every* broker sees it (a broker
        just resumed from a pause still shows the ISR it knew before), and no broker
        fenced."""
        for broker in BROKERS:
            listed, state = self.view_of(broker)
            if listed != len(BROKERS) or len(state) != PARTITIONS:
                return False
            if not all(
                leader in BROKERS and isr == sorted(BROKERS) for leader, isr in state.values()
            ):
                return False
        return True

    def wait_whole(self, what: str) -> None:
        wait_until(self.whole, 60, f"every replica back in the ISR ({what})")
        self.history.note(f"whole again after {what}: {self.partitions()}")

    def leader(self, partition: int) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            leader = self.partitions().get(partition, (-1, []))[0]
            if leader in BROKERS:
                return leader
            time.sleep(0.05)
        raise AssertionError(f"no leader of partition {partition}")

    def node(self, node_id: int) -> ClusterNode:
        return self.cluster.nodes[node_id]

    def start_slow(self, node_id: int) -> None:
        """Stop ``node_id`` 80 ms of every 100 ms until ``end_slow``."""
        stop = threading.Event()
        self.slow[node_id] = stop
        node = self.node(node_id)

        def cycle() -> None:
            while not stop.is_set():
                node.pause()
                time.sleep(0.08)
                node.resume()
                time.sleep(0.02)

        threading.Thread(target=cycle, daemon=True).start()
        self.history.note(f"node {node_id} slow (stopped 80 ms of every 100 ms)")

    def end_slow(self, node_id: int) -> None:
        stop = self.slow.pop(node_id, None)
        if stop is not None:
            stop.set()
            time.sleep(0.15)
            self.node(node_id).resume()
            self.history.note(f"node {node_id} no longer slow")

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()
        self.history.note(f"kill -9 node {node_id}")

    def restart(self, node_id: int) -> None:
        self.node(node_id).start(60)
        self.history.note(f"node {node_id} restarted")

    def heal_all(self) -> None:
        for node_id in list(self.slow):
            self.end_slow(node_id)
        for node in self.cluster.nodes.values():
            if node.proc is None:
                continue
            if node.alive():
                node.resume()
            else:
                node.start(60)

    # The schedule ----------------------------------------------------------------------

    def slow_follower_rejoins_then_leader_killed(self, rng: random.Random) -> None:
        partition = rng.randrange(PARTITIONS)
        leader = self.leader(partition)
        follower = rng.choice([r for r in self.replicas(partition) if r != leader])
        self.history.note(f"1. partition {partition}: leader {leader}, slow follower {follower}")
        self.node(follower).pause()
        wait_until(
            lambda: follower not in self.partitions().get(partition, (0, [follower]))[1],
            20,
            f"follower {follower} out of the ISR of partition {partition}",
        )
        self.history.note(f"follower {follower} left the ISR: {self.partitions()}")
        self.node(follower).resume()
        self.start_slow(follower)
        deadline = time.monotonic() + 20
        rejoined = False
        while time.monotonic() < deadline:
            if follower in self.partitions().get(partition, (0, []))[1]:
                rejoined = True
                break
            time.sleep(0.02)
        self.history.note(f"follower {follower} rejoined: {rejoined}; {self.partitions()}")
        self.kill(leader)
        time.sleep(rng.uniform(1.0, 2.0))
        self.end_slow(follower)
        time.sleep(1.0)
        self.restart(leader)
        self.wait_whole("a slow follower rejoining, then the leader killed")

    def both_followers_paused(self, rng: random.Random) -> None:
        partition = rng.randrange(PARTITIONS)
        leader = self.leader(partition)
        followers = [r for r in self.replicas(partition) if r != leader]
        self.history.note(f"2. partition {partition}: leader {leader}, pausing {followers}")
        for follower in followers:
            self.node(follower).pause()
        stopped = self.history.now()
        time.sleep(LAG_MS / 1000 * 2 + rng.uniform(0.5, 1.5))
        self.history.note(f"during: {self.partitions()}")
        resumed = self.history.now()
        for follower in followers:
            self.node(follower).resume()
        self.both_followers_stopped.append((partition, stopped, resumed))
        self.history.note(f"resumed {followers}")
        self.wait_whole("both followers paused")

    def leader_paused_after_its_election(self, rng: random.Random) -> None:
        partition = rng.randrange(PARTITIONS)
        leader = self.leader(partition)
        self.history.note(f"3. partition {partition}: killing its leader {leader}")
        self.kill(leader)
        deadline = time.monotonic() + 30
        elected = -1
        while time.monotonic() < deadline:
            elected = self.partitions().get(partition, (-1, []))[0]
            if elected in BROKERS and elected != leader:
                break
            time.sleep(0.01)
        assert elected in BROKERS and elected != leader, "no new leader elected"
        self.node(elected).pause()
        self.history.note(f"paused node {elected} right after its election")
        # past the session timeout it is fenced and deposed: another broker leads, or none
        # (a broker's metadata still naming the killed leader is from before the election)
        wait_until(
            lambda: self.partitions().get(partition, (elected, []))[0] not in (elected, leader),
            30,
            f"paused node {elected} deposed from partition {partition}",
        )
        self.history.note(f"node {elected} deposed: {self.partitions()}")
        self.node(elected).resume()
        self.history.note(f"resumed node {elected}")
        self.restart(leader)
        self.wait_whole("a leader paused right after its election")

    def overlapping(self, rng: random.Random) -> None:
        slow, paused = rng.sample(BROKERS, 2)
        controller = rng.choice([1, 2, 3])
        self.history.note(f"4. slow {slow}, paused {paused}, controller {controller} killed")
        self.start_slow(slow)
        time.sleep(rng.uniform(0.2, 1.0))
        self.node(paused).pause()
        time.sleep(rng.uniform(0.2, 1.0))
        self.kill(controller)
        time.sleep(rng.uniform(1.5, 3.0))
        self.node(paused).resume()
        self.history.note(f"resumed node {paused}")
        time.sleep(rng.uniform(0.5, 1.5))
        self.end_slow(slow)
        self.restart(controller)
        self.wait_whole("overlapping faults")


def _acked_on_one_copy(history: History, faults: Faults) -> list[Violation]:
    """Records sent to a partition while both its followers were stopped (after the
    grace) and acknowledged before they resumed: only the leader could hold them."""
    violations = []
    for partition, stopped, resumed in faults.both_followers_stopped:
        for ack in history.acks:
            if ack.partition == partition and stopped + GRACE_S < ack.sent and ack.t < resumed:
                violations.append(
                    Violation(
                        ack.t,
                        partition,
                        ack.offset,
                        f"{ack.value.decode()} sent at t={ack.sent:.3f} was acknowledged at "
                        f"t={ack.t:.3f} while both followers of partition {partition} were "
                        f"stopped ({stopped:.3f}..{resumed:.3f})",
                    )
                )
    return violations


def test_acknowledged_writes_survive_slow_paused_and_killed_replicas(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"fault seed {SEED}")
    specs = [NodeSpec(i, "controller") for i in (1, 2, 3)]
    specs += [NodeSpec(i, "broker") for i in BROKERS]
    cluster = Cluster(tmp_path, specs, overrides=SETTINGS)
    history = History()
    clients: Clients | None = None
    faults: Faults | None = None
    reported = False
    try:
        cluster.start_all()
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == list(BROKERS), 30, "3 brokers"
        )
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
            TOPIC
        ].result(15)
        faults = Faults(cluster, history, admin)
        faults.wait_whole("the topic's creation")
        history.t0 = time.monotonic()
        clients = Clients(WORKLOAD, bootstrap, history)
        clients.start()
        time.sleep(1.0)
        faults.slow_follower_rejoins_then_leader_killed(rng)
        faults.both_followers_paused(rng)
        faults.leader_paused_after_its_election(rng)
        faults.overlapping(rng)
        history.note("schedule done")

        clients.flush_producers()
        history.note("producers flushed")
        faults.wait_whole("the end")
        clients.stop_consumer()
        failure = judge(
            WORKLOAD,
            bootstrap,
            history,
            {b: cluster.nodes[b].data_dir for b in BROKERS},
            f"seed {SEED} (rerun: STROM_FAULT_SEED={SEED})",
            _acked_on_one_copy(history, faults),
        )
        reported = failure is not None
        if failure is not None:
            pytest.fail(f"seed {SEED}: {failure}\n(history and logs printed above)")
        assert history.acks, f"seed {SEED}: nothing was acknowledged"
    except BaseException:
        if not reported:
            print(f"fault seed {SEED}; history:")
            for t, text in history.nemesis:
                print(f"  {t:8.3f}  {text}")
        # The end of each node's log, then its lines about the topic in all its lives
        # (roles, truncations, ISR changes, the idempotence answers it gave), which a
        # busy end may have pushed out.
        print("cluster logs:")
        print(cluster.logs())
        print(cluster.lines_about(f"{TOPIC}-", last=400))
        raise
    finally:
        if faults is not None:
            faults.heal_all()
        if clients is not None:
            clients.close()
        cluster.kill_all()
