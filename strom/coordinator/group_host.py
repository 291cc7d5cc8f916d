"""What a group of any kind reads of the coordinator that holds it, as a Protocol: the
clock, the broker's settings and the metadata. Each kind adds what it writes back
(``classic.ClassicGroupHost``, ``consumer_group.ConsumerGroupHost``,
``share_group.ShareGroupHost``); ``coordinator.GroupCoordinator`` is all of them, and
no group module imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig


class GroupHost(Protocol):
    """The coordinator as a group sees it."""

    @property
    def controller(self) -> NodeState: ...

    @property
    def config(self) -> BrokerConfig: ...

    def now_ms(self) -> int: ...


class RecordsHost(GroupHost, Protocol):
    """A coordinator a group's changed records are written through."""

    def store_consumer_group(
        self, group_id: str, records: list[tuple[bytes, bytes | None]]
    ) -> None: ...
