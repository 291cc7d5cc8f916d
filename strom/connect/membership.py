"""A Connect worker's place in its group: whether it leads (writes configs, decides who
runs what) and which connectors and tasks it runs.

- ``SoleMember``: a standalone worker, its own leader, running everything.
- ``ElectedLeader``: the distributed workers of one ``group.id`` elect a leader through a
  Kafka consumer group of that name subscribed to the config topic
  (``strom.group_leader``): the member given its one partition leads and runs every
  connector and task; the others run none, forward writes to the leader and take over
  within the session timeout (6 s) when it goes. Each member's client id carries its
  REST URL, so every member knows where to forward.

Next: Kafka Connect's own group protocol (protocol type ``connect``, JoinGroup and
SyncGroup over ``strom.wire_client``, the leader assigning connectors and tasks round
robin, incremental cooperative rebalancing as ``connect.protocol=sessioned`` does), so
the workers share the work; ``runs`` then answers from the assignment and the herder
stays as it is.

Does not own what the herder does with it.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from strom.group_leader import Election

log = logging.getLogger(__name__)
CLIENT_PREFIX = "strom-connect "


class Membership(ABC):
    """This worker's place in its group: leader or not, and its generation."""

    generation = 0

    @abstractmethod
    def is_leader(self) -> bool: ...

    @abstractmethod
    def leader_url(self) -> str | None: ...

    def runs_everything(self) -> bool:
        """Whether this worker runs every connector and task (else none yet)."""
        return self.is_leader()

    def start(self, on_change: Callable[[], None]) -> None:  # noqa: B027 - an optional hook
        """Join the group; ``on_change()`` when what this worker runs changes (it returns
        once the work given up has stopped)."""

    def wait_for_leader(self, timeout_s: float) -> str | None:
        """The leader's URL once one is known (None if none within ``timeout_s``)."""
        return self.leader_url()

    def close(self) -> None:  # noqa: B027 - an optional hook
        pass


class SoleMember(Membership):
    """A standalone worker: its own leader."""

    def __init__(self, url: str) -> None:
        self.url = url

    def is_leader(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return self.url


class ElectedLeader(Membership):
    """Distributed workers with one leader that runs everything (see the module's text)."""

    def __init__(
        self, settings: dict[str, Any], group_id: str, config_topic: str, url: str
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.config_topic = config_topic
        self.url = url
        self.election: Election | None = None
        self.generation = 0

    def start(self, on_change: Callable[[], None]) -> None:
        """``on_change`` is called when this worker gains or loses the leadership; on a
        loss it must return only once the worker runs nothing (the eager protocol: the
        group moves on only when the work has stopped here, so no task runs twice)."""

        def changed() -> None:
            self.generation += 1
            on_change()

        self.election = Election(
            self.settings,
            self.config_topic,
            self.url,
            group=self.group_id,
            client_prefix=CLIENT_PREFIX,
            on_change=changed,
        )

    def is_leader(self) -> bool:
        return self.election is not None and self.election.primary

    def leader_url(self) -> str | None:
        if self.election is None:
            return None
        return self.election.primary_url(timeout_s=5.0)

    def wait_for_leader(self, timeout_s: float) -> str | None:
        if self.election is None:
            return None
        return self.election.primary_url(timeout_s=timeout_s)

    def close(self) -> None:
        if self.election is not None:
            self.election.close()
