"""What a node's parts may see of the node that holds them, as narrow Protocols.

``strom.broker.server.Broker`` assembles a node and satisfies each of these; the parts
below it (the replica manager, the controller channel and lifecycle, the transaction
markers and verification, the cluster view) are typed against the Protocol of what
they read, never against ``Broker``, so they can be built and tested alone and no
import runs back up to the server. The handlers' own view (``NodeServices``) extends
``LocalNode`` in ``strom.broker.network.router``.

Owns no state and no behaviour: only the shapes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from strom.broker.access.node_authorizer import NodeAuthorizer
    from strom.broker.network.peer_client import PeerSecurity
    from strom.broker.network.purgatory import Purgatory
    from strom.cluster.node_state import NodeState
    from strom.config import BrokerConfig, Listener
    from strom.controller.quorum import QuorumDriver
    from strom.coordinator.coordinator import GroupCoordinator
    from strom.coordinator.transactions import TransactionCoordinator
    from strom.protocol.records import BatchHeader


class Registration(Protocol):
    """A broker's registration with the active controller, as far as requests read it."""

    @property
    def broker_epoch(self) -> int: ...


class ControllerCalls(Protocol):
    """This node's channel to the active controller: a request sent and its answer."""

    async def call(self, request: Any, timeout_s: float) -> Any: ...


class ReplicationCounters(Protocol):
    """What the replica manager counts for ``/metrics``."""

    isr_shrinks: int
    isr_expands: int

    def appended(self, topic: str, headers: Iterable[BatchHeader]) -> None: ...


class RegisteredNode(Protocol):
    """What a request this node makes of the active controller reads of the node: its
    id, the broker epoch its registration holds (None: a node that is not a broker),
    and its channel to the controller."""

    @property
    def node_id(self) -> int: ...

    @property
    def lifecycle(self) -> Registration | None: ...

    @property
    def controller_channel(self) -> ControllerCalls: ...


class LocalNode(RegisteredNode, Protocol):
    """Who this node is and what it holds: its settings, the metadata it has applied,
    the quorum's driver, the coordinators, how it reaches its peers, where clients
    reach it, the purgatory where delayed answers wait, and its authorizer."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def is_broker(self) -> bool: ...

    @property
    def is_controller(self) -> bool: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def state(self) -> NodeState: ...

    @property
    def quorum(self) -> QuorumDriver: ...

    @property
    def coordinator(self) -> GroupCoordinator: ...

    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def inter_broker_security(self) -> PeerSecurity | None: ...

    @property
    def controller_security(self) -> PeerSecurity | None: ...

    @property
    def purgatory(self) -> Purgatory: ...

    @property
    def authorizer(self) -> NodeAuthorizer | None: ...

    @property
    def metrics(self) -> ReplicationCounters | None: ...

    def advertised_client_listeners(self) -> list[Listener]: ...

    def advertised_endpoint(self, listener_name: str | None = None) -> tuple[str, int]: ...

    def wait_for_metadata(self, done: Callable[[], bool], timeout_s: float) -> Awaitable[bool]: ...
