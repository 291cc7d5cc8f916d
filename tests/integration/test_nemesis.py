"""A fault test in the style of Jepsen: a nemesis hurts one broker after another while
producers write and a consumer reads; after healing, a checker reads everything back.

The cluster: three combined nodes, a topic of three partitions with replication factor
3 and ``min.insync.replicas=2``. Every listener of every node sits behind a
fault-injecting TCP proxy (``fault_proxy``): the nodes advertise the proxy's port and
``controller.quorum.voters`` names the proxies, so every connection *to* a node, from
the other nodes (replica fetches, Raft, heartbeats, forwarding) and from the clients,
goes through its proxy.

The nemesis, for about 28 s, sleeps 0.5-1 s, picks a broker and a fault at random, holds
it for 1-3 s and heals it, one fault at a time (so a majority of the quorum and of every
ISR is always within reach); it notes the leaders and ISRs a client sees before the
fault and just before healing it:

- ``kill``: ``kill -9``; healed by starting the node again on its data directory;
- ``pause``: SIGSTOP; healed by SIGCONT;
- ``refuse``: its proxies reset every connection to it and refuse new ones;
- ``stall``: its proxies stop moving bytes to and from it (new connections are held),
  as in a partition that drops packets; healed by letting what was held through.

A cut (``refuse``, ``stall``) is an asymmetric partition: nobody reaches the node, the
test's clients included, but its own connections to the others go through *their*
proxies and still work: a cut leader can still heartbeat to the controller and ask for
ISR changes, while its followers and producers cannot reach it.

The workload: two idempotent ``acks=all`` producers write distinct values
(``p{producer}-{seq}``, to partition ``seq % 3``), and one consumer reads every
partition from the start throughout, noting every (partition, offset, value) it is given.

The checker is independent of the code under test: it uses only what confluent-kafka
reported (delivery reports, consumed records) and what it reads back after healing, and
the replicas' segment files. After the producers have flushed and every ISR is whole
again, it reads every partition from offset 0 and checks:

1. every acknowledged value (a delivery report without error) is in its partition
   exactly once, at the offset its report gave; no value is in the log twice;
2. in each partition, the acknowledged values of each producer are in the order in
   which they were acknowledged;
3. every record the consumer was given during the faults is still at its offset (no
   consumer saw a record that later vanished);
4. the replicas of each partition hold the same segment bytes.

Delivery errors are allowed: only what was acknowledged must survive.

Every run is reproducible from a seed: ``STROM_NEMESIS_SEED`` (1122 by default) drives
every random choice of the nemesis (victim, fault, how long), from one
``random.Random(seed)``. The seed fixes the schedule of faults, not the interleaving of
the processes, so a run that found a violation finds it again often, not always. On a
violation the test prints the seed, the nemesis's history, the offsets around the
first violation (what is there now, what was acknowledged there, what the consumer was
given there, with times), the clients' events around it, and the cluster's logs. No
assertion is on time: the waits after healing are bounds on liveness only. A run takes
about a minute.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from cluster_process import Cluster, ClusterNode
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from fault_proxy import FaultProxy, ProxyHub
from fault_workload import Clients, History, Workload, judge
from kafka_helpers import wait_until

SEED = int(os.environ.get("STROM_NEMESIS_SEED", "1122"))
NEMESIS_S = 28.0  # up to a dozen faults; fewer on a loaded machine (6 at load 33)
QUIET_S = (0.5, 1.0)  # between a heal and the next fault
TOPIC = "nemesis"
PARTITIONS = 3
PRODUCERS = 2
RATE = 80  # records per second per producer
FAULTS = ("kill", "pause", "refuse", "stall")

SETTINGS = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}
WORKLOAD = Workload(TOPIC, PARTITIONS, PRODUCERS, RATE)


# The nemesis -------------------------------------------------------------------------


class Nemesis:
    def __init__(
        self, cluster: Cluster, proxies: dict[int, list[FaultProxy]], history: History
    ) -> None:
        self.cluster = cluster
        self.proxies = proxies
        self.history = history
        self.current: tuple[str, ClusterNode] | None = None

    def _leaders(self, admin: AdminClient) -> str:
        try:
            topic = admin.list_topics(TOPIC, timeout=1).topics[TOPIC]
            return " ".join(
                f"p{p}:{topic.partitions[p].leader}/isr{sorted(topic.partitions[p].isrs)}"
                for p in sorted(topic.partitions)
            )
        except Exception as exc:  # noqa: BLE001 - a note for the history only
            return f"(metadata: {exc})"

    def hurt(self, fault: str, node: ClusterNode, hold: float, admin: AdminClient) -> None:
        self.history.note(f"before: {self._leaders(admin)}")
        self.current = (fault, node)
        if fault == "kill":
            node.kill()
        elif fault == "pause":
            node.pause()
        elif fault == "refuse":
            for proxy in self.proxies[node.node_id]:
                proxy.refuse()
        else:
            for proxy in self.proxies[node.node_id]:
                proxy.stall()
        self.history.note(f"{fault} node {node.node_id} for {hold:.1f}s")

    def heal(self) -> None:
        if self.current is None:
            return
        fault, node = self.current
        self.history.note(f"heal {fault} of node {node.node_id}")
        if fault == "kill":
            node.start(60)
        elif fault == "pause":
            node.resume()
        else:
            for proxy in self.proxies[node.node_id]:
                proxy.heal()
        self.current = None
        self.history.note(f"healed node {node.node_id}")

    def run(self, rng: random.Random, seconds: float, admin: AdminClient) -> None:
        nodes = sorted(self.cluster.nodes)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(*QUIET_S))
            node = self.cluster.nodes[rng.choice(nodes)]
            fault = rng.choice(FAULTS)
            hold = rng.uniform(1.0, 3.0)
            self.hurt(fault, node, hold, admin)
            try:
                time.sleep(hold)
                self.history.note(f"during: {self._leaders(admin)}")
            finally:
                self.heal()


# The test ----------------------------------------------------------------------------


def test_nemesis_kills_pauses_and_cuts_off_brokers(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"nemesis seed {SEED}")
    hub = ProxyHub()
    proxies: dict[int, list[FaultProxy]] = {}

    def front(node_id: int, listener: str, port: int) -> int:
        proxy = hub.proxy(port)
        proxies.setdefault(node_id, []).append(proxy)
        return proxy.port

    cluster = Cluster.combined(tmp_path, overrides=SETTINGS, front=front)
    history = History()
    clients: Clients | None = None
    nemesis = Nemesis(cluster, proxies, history)
    reported = False
    try:
        cluster.start_all()  # which may have moved a port another process took
        bootstrap = ",".join(f"127.0.0.1:{n.advertised_port}" for n in cluster.brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
        wait_until(
            lambda: sorted(admin.list_topics(timeout=3).brokers) == [1, 2, 3], 20, "3 brokers"
        )
        created = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
        )
        created[TOPIC].result(15)

        def whole() -> bool:
            try:
                topic = admin.list_topics(TOPIC, timeout=3).topics[TOPIC]
            except KafkaException:
                return False
            return len(topic.partitions) == PARTITIONS and all(
                sorted(topic.partitions[p].isrs) == [1, 2, 3] and topic.partitions[p].leader > 0
                for p in range(PARTITIONS)
            )

        wait_until(whole, 20, "full ISRs")
        history.t0 = time.monotonic()
        clients = Clients(WORKLOAD, bootstrap, history)
        clients.start()
        nemesis.run(rng, NEMESIS_S, admin)
        history.note("nemesis done; everything healed")

        clients.flush_producers()
        history.note("producers flushed")
        wait_until(whole, 60, "every replica back in the ISR")
        history.note("every ISR whole")
        clients.stop_consumer()
        failure = judge(
            WORKLOAD,
            bootstrap,
            history,
            {n.node_id: n.data_dir for n in cluster.brokers},
            f"seed {SEED} (rerun: STROM_NEMESIS_SEED={SEED})",
        )
        reported = failure is not None
        if failure is not None:
            pytest.fail(f"seed {SEED}: {failure}\n(history and logs printed above)")
        assert history.acks, f"seed {SEED}: nothing was acknowledged"
    except BaseException:
        if not reported:
            print(f"nemesis seed {SEED}; history:")
            for t, text in history.nemesis:
                print(f"  {t:8.3f}  {text}")
        print("cluster logs:")
        print(cluster.logs())
        raise
    finally:
        nemesis.heal()
        if clients is not None:
            clients.close()
        cluster.kill_all()
        hub.close()
