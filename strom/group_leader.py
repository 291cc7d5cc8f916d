"""Which instance of a service writes: one primary, elected through a Kafka consumer
group, as Confluent's registries elect theirs. The schema registry elects its primary
with it (Connect workers share their work through Kafka's group protocol instead:
``strom.connect.group_member``).

Every instance joins the group (``strom-schema-registry`` for the registry) subscribed to
a one-partition topic (``_schemas``), its client id carrying the URL it serves; the
member the group assigns the partition to is the primary. A secondary learns the
primary's URL from the group's description (DescribeGroups) and forwards every change to
it, so one writer decides.
When the primary goes, the group gives the partition to another member within the
session timeout. ``on_change`` is called (on the election's thread) when this instance
becomes primary or stops being it.

Does not own the records or forwarding requests (the services).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

log = logging.getLogger(__name__)
GROUP = "strom-schema-registry"
CLIENT_PREFIX = "strom-schema-registry "


class Election:
    def __init__(
        self,
        settings: dict[str, Any],
        topic: str,
        url: str,
        group: str = GROUP,
        client_prefix: str = CLIENT_PREFIX,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.topic = topic
        self.group = group
        self.client_prefix = client_prefix
        self.on_change = on_change
        self.admin = AdminClient(settings)
        self.primary = False
        self.term = 0  # how many times this instance became primary
        self._stopped = threading.Event()
        self.consumer = Consumer(
            {
                **settings,
                "group.id": group,
                "client.id": client_prefix + url,
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe(
            [topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )
        self._thread = threading.Thread(target=self._poll_forever, daemon=True, name="election")
        self._thread.start()

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.primary = bool(partitions)
        if self.primary:
            self.term += 1
            log.info("%s is the primary of group %s", self.url, self.group)
        if self.on_change is not None:
            self.on_change()

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self.primary = False
        if self.on_change is not None:
            self.on_change()

    def _poll_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                self.consumer.poll(0.2)  # group heartbeats and rebalances; data is not read
            except Exception as exc:
                if not self._stopped.is_set():
                    log.warning("election in group %s: %s", self.group, exc)
                return

    def primary_url(self, timeout_s: float = 15.0) -> str | None:
        """The URL of the member that holds the partition (this one's own when it does);
        None while no member holds it. A description naming this instance while it does
        not hold the partition is behind (its assignment not yet called back, or lost
        since): it is asked again until this instance holds it or another does."""
        if self.primary:
            return self.url
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            group: ConsumerGroupDescription | None
            try:
                group = self.admin.describe_consumer_groups([self.group], request_timeout=10)[
                    self.group
                ].result()
            except Exception as exc:
                log.debug("describing %s: %s", self.group, exc)
                group = None
            for member in group.members if group is not None else []:
                if member.assignment.topic_partitions and member.client_id.startswith(
                    self.client_prefix
                ):
                    url = member.client_id[len(self.client_prefix) :]
                    if url != self.url:
                        return url
            if self.primary:
                return self.url
            time.sleep(0.2)
        return None

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self.consumer.close()
