"""Which registry instance writes: one primary, elected through a Kafka consumer group,
as Confluent's registries elect theirs.

Every instance joins the group ``strom-schema-registry`` subscribed to ``_schemas``
(one partition), its client id carrying the URL it serves; the member the group
assigns the partition to is the primary. A secondary learns the primary's URL from
the group's description (DescribeGroups) and forwards every change to it, so ids and
versions come from one writer. When the primary goes, the group gives the partition
to another member within the session timeout.

Does not own the records (``store``), reading ``_schemas`` (``log``) or forwarding
requests (``app``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)
GROUP = "strom-schema-registry"
CLIENT_PREFIX = "strom-schema-registry "


class Election:
    def __init__(self, settings: dict[str, Any], topic: str, url: str) -> None:
        self.url = url
        self.topic = topic
        self.admin = AdminClient(settings)
        self.primary = False
        self._stopped = threading.Event()
        self.consumer = Consumer(
            {
                **settings,
                "group.id": GROUP,
                "client.id": CLIENT_PREFIX + url,
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
            log.info("this schema registry (%s) is the primary", self.url)

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self.primary = False

    def _poll_forever(self) -> None:
        while not self._stopped.is_set():
            try:
                self.consumer.poll(0.2)  # group heartbeats and rebalances; data is not read
            except Exception as exc:
                if not self._stopped.is_set():
                    log.warning("schema registry election: %s", exc)
                return

    def primary_url(self, timeout_s: float = 15.0) -> str | None:
        """The URL of the member that holds the partition (this one's own when it does);
        None while no member holds it."""
        if self.primary:
            return self.url
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                group = self.admin.describe_consumer_groups([GROUP], request_timeout=10)[
                    GROUP
                ].result()
            except Exception as exc:
                log.debug("describing %s: %s", GROUP, exc)
                group = None
            for member in getattr(group, "members", None) or []:
                if member.assignment.topic_partitions and member.client_id.startswith(
                    CLIENT_PREFIX
                ):
                    return member.client_id[len(CLIENT_PREFIX) :]
            if self.primary:
                return self.url
            time.sleep(0.2)
        return None

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self.consumer.close()
