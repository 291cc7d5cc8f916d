"""The cluster as clients are told of it: live brokers, their endpoints, the controller.

Owns the answers Metadata, DescribeCluster and FindCoordinator share: the brokers a
client sees (registered and unfenced, with the endpoint of the listener the client
uses and their rack), where a given broker is reached, and which node to name as the
controller (the quorum's leader when it is a broker; clients cannot talk to a
controller-only node, so otherwise a live broker, as Kafka does), and the new leader a
NOT_LEADER_OR_FOLLOWER answer names (KIP-951: ``leader_hints``).

Does not own the metadata itself (``strom.cluster.node_state``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.node import LocalNode
    from strom.cluster.image import BrokerRegistration


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool = False


def _listener_name(broker: LocalNode, listener: str | None) -> str | None:
    """The listener whose endpoints a client is told: the one it came in on."""
    if listener:
        return listener
    listeners = broker.advertised_client_listeners()
    return listeners[0].name if listeners else None


def _endpoint_of(
    broker: LocalNode, registration: BrokerRegistration, listener: str | None = None
) -> BrokerEndpoint | None:
    if registration.broker_id == broker.node_id and broker.is_broker:
        host, port = broker.advertised_endpoint(listener)
        return BrokerEndpoint(broker.node_id, host, port, registration.rack, registration.fenced)
    name = _listener_name(broker, listener)
    endpoint = registration.endpoint(name) if name else None
    if endpoint is None and registration.endpoints:
        endpoint = registration.endpoints[0]
    if endpoint is None:
        return None
    return BrokerEndpoint(
        registration.broker_id, endpoint.host, endpoint.port, registration.rack, registration.fenced
    )


def live_brokers(
    broker: LocalNode, *, include_fenced: bool = False, listener: str | None = None
) -> list[BrokerEndpoint]:
    """Registered brokers clients may use (unfenced, unless asked), by id, with their
    endpoints on ``listener`` (the client's; by default the first advertised one)."""
    image = broker.state.image
    out = []
    for broker_id in sorted(image.brokers):
        registration = image.brokers[broker_id]
        if registration.fenced and not include_fenced:
            continue
        endpoint = _endpoint_of(broker, registration, listener)
        if endpoint is not None:
            out.append(endpoint)
    return out


def broker_endpoint(
    broker: LocalNode, broker_id: int, listener: str | None = None
) -> BrokerEndpoint | None:
    registration = broker.state.image.brokers.get(broker_id)
    if registration is None or registration.fenced:
        return None
    return _endpoint_of(broker, registration, listener)


def controller_id(broker: LocalNode) -> int:
    """The node named as controller to clients (see the module docstring)."""
    leader = broker.quorum.leader_id
    image = broker.state.image
    if image.is_unfenced(leader):
        return leader
    live = image.live_brokers()
    return live[0].broker_id if live else -1


def inter_broker_endpoint(broker: LocalNode, broker_id: int) -> BrokerEndpoint | None:
    """Where this broker reaches another one: its ``inter.broker.listener.name``
    endpoint (the first one it registered when it has none of that name)."""
    registration = broker.state.image.brokers.get(broker_id)
    if registration is None:
        return None
    name = broker.config.inter_broker_listener_name
    endpoint = registration.endpoint(name) if name else None
    if endpoint is None and registration.endpoints:
        endpoint = registration.endpoints[0]
    if endpoint is None:
        return None
    return BrokerEndpoint(
        broker_id, endpoint.host, endpoint.port, registration.rack, registration.fenced
    )


def leader_hints(
    broker: LocalNode, partitions: list[tuple[str, int]], listener: str | None = None
) -> tuple[dict[tuple[str, int], tuple[int, int]], list[BrokerEndpoint]]:
    """KIP-951: for partitions this broker does not lead, the current (leader id, leader
    epoch) by the local metadata, and the endpoints of those leaders."""
    leaders: dict[tuple[str, int], tuple[int, int]] = {}
    endpoints: dict[int, BrokerEndpoint] = {}
    for topic, partition in partitions:
        view = broker.state.topics.get(topic)
        state = view.states.get(partition) if view is not None else None
        if state is None:
            continue
        leaders[(topic, partition)] = (state.leader, state.leader_epoch)
        if state.leader >= 0 and state.leader not in endpoints:
            endpoint = broker_endpoint(broker, state.leader, listener)
            if endpoint is not None:
                endpoints[state.leader] = endpoint
    return leaders, list(endpoints.values())
