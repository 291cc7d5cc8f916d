"""Which server of a ``ksql.service.id`` runs which persistent query.

Every server of a service id replays the command topic and knows every query; each
query runs on exactly one of them at a time. The servers divide the queries through a
Kafka consumer group, the broker's own group protocol: the group
``_confluent-ksql-<service id>_query_owners`` subscribes to the topic
``_confluent-ksql-<service id>_query_slots`` (``QUERY_SLOTS`` partitions, never
written), and a query belongs to the server assigned the partition its id hashes to
(CRC-32 of the id, so every server computes the same slot). The group rebalances
incrementally (the cooperative-sticky assignor, as Kafka Streams' own rebalances are
cooperative since 2.4): when a server joins or leaves, only the slots that must move
change hands, in two rounds (the first takes them from their owners, which stop their
queries, progress kept; the second gives them to their new owners, which start them);
every other query keeps running where it runs. A server that dies stops
heartbeating; after Kafka Streams' ``session.timeout.ms``
(``ksql.streams.session.timeout.ms``, default 10 s here) the group gives its slots to
the others.

A query's progress is its Spark checkpoint (the source offsets and the state store)
under ``ksql.streams.state.dir``, which the servers of one service id share (the
same directory on one machine, a shared filesystem across machines): the checkpoint
holds what the sink's committed offsets cannot (an aggregation's state), and with
``exactly_once_v2`` the sink's transactional ids, derived from the query id and the
checkpoint's Spark query id, fence a dead owner's writes, so a query taken over writes
each record once.

Each member's ``client.id`` is its REST URL, so the group's description says which
server runs which query (``owners``; SHOW QUERIES EXTENDED and EXPLAIN report it).

Runs confluent-kafka's blocking consumer on a thread of its own. Does not own the
queries or Spark (``strom.ksql.queries``).
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.ksql.config import KsqlServerConfig
from strom.ksql.kafka_calls import TIMEOUT_S, KafkaCallError, create_topic

log = logging.getLogger(__name__)

QUERY_SLOTS = 12
FIRST_ASSIGNMENT_S = 60.0  # the longest wait for the group's first answer at start


def slot_of(query_id: str) -> int:
    """The slot (partition of the slots topic) a query belongs to."""
    return zlib.crc32(query_id.encode()) % QUERY_SLOTS


class QueryOwnership:
    """This server's membership of its service id's query group; ``on_change`` is
    called (on the group's thread) with the slots this server owns after each change,
    and must return once the queries of slots given up are stopped."""

    def __init__(
        self,
        config: KsqlServerConfig,
        admin: AdminClient,
        member_url: str,
        on_change: Callable[[frozenset[int]], None],
    ) -> None:
        self.topic = f"_confluent-ksql-{config.service_id}_query_slots"
        self.group = f"_confluent-ksql-{config.service_id}_query_owners"
        self._admin = admin
        self._config = config
        self._on_change = on_change
        self.owned: frozenset[int] = frozenset()
        self._first_assignment = threading.Event()
        self._assignments = 0  # the group's answers so far (each round gives one)
        self._stopped = threading.Event()
        session = config.session_timeout_ms
        self._consumer = Consumer(
            config.client_config(
                **{
                    "group.id": self.group,
                    "client.id": member_url,
                    "enable.auto.commit": False,
                    "session.timeout.ms": session,
                    # a member learns of a rebalance at its next heartbeat: a second
                    # at most, so a server joining or leaving moves its slots soon
                    "heartbeat.interval.ms": max(min(session // 5, 1000), 100),
                    "partition.assignment.strategy": "cooperative-sticky",
                }
            )
        )
        self._thread = threading.Thread(target=self._run, name="ksql-query-owners", daemon=True)

    def start(self, wait_s: float = FIRST_ASSIGNMENT_S) -> None:
        """Creates the slots topic when missing, joins the group and waits (up to
        ``wait_s``) for the group's first assignment: until then the servers already in
        the group still own every slot, and a query created in between would start
        there only to move here at once (a Spark start, a stop and another start, the
        group's rebalance waiting for the stop all the while)."""
        new = NewTopic(
            self.topic,
            num_partitions=QUERY_SLOTS,
            replication_factor=self._config.internal_topic_replicas,
        )
        try:
            create_topic(self._admin, new)
        except KafkaCallError as exc:
            log.warning("cannot create %s: %s", self.topic, exc)
        self._consumer.subscribe(
            [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )
        self._thread.start()
        if not self._first_assignment.wait(wait_s):
            log.warning("no query slots assigned by %s after %.0f s; serving", self.group, wait_s)

    def owns(self, query_id: str) -> bool:
        return slot_of(query_id) in self.owned

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The slots added to this server's (cooperative: only those)."""
        added = {p.partition for p in partitions}
        self._assignments += 1
        if added:
            self.owned = self.owned | added
            log.info("query slots owned: %s", sorted(self.owned))
            self._on_change(self.owned)
        # A server joining gets nothing in the round that takes its share from the
        # others, and its share in the next: it serves once it has some, or after two
        # answers (more servers than slots leave it none)
        if self.owned or self._assignments >= 2:
            self._first_assignment.set()

    def _revoked(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The slots taken from this server (cooperative: only those), or lost."""
        taken = {p.partition for p in partitions} & self.owned
        if taken:
            self.owned = self.owned - taken
            log.info("query slots given up: %s", sorted(taken))
            self._on_change(self.owned)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._consumer.poll(0.5)  # heartbeats and rebalances; nothing is written
            except (KafkaException, RuntimeError) as exc:
                log.warning("query owners group: %s", exc)
                self._stopped.wait(1.0)

    def owners(self) -> dict[int, str]:
        """Each assigned slot's member (its REST URL), from the group's description."""
        try:
            future = self._admin.describe_consumer_groups([self.group])[self.group]
            description = future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            log.warning("cannot describe %s: %s", self.group, exc)
            return {}
        found: dict[int, str] = {}
        for member in description.members:
            assignment = member.assignment
            for partition in assignment.topic_partitions if assignment is not None else []:
                if partition.topic == self.topic:
                    found[partition.partition] = member.client_id
        return found

    def close(self) -> None:
        """Leaves the group (the queries of this server's slots stopped first)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(TIMEOUT_S)
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("leaving %s: %s", self.group, exc)
