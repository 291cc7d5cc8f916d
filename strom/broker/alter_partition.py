"""A partition leader's request to change its ISR: AlterPartition to the active controller.

Owns building AlterPartition (v3, KIP-497 with KIP-903's broker epochs) from this
broker's view of the partition (its leader epoch and partition epoch, the new ISR with
each member's registered broker epoch) and sending it through the controller channel.
The change itself arrives, like every other, as a committed PartitionChangeRecord.

Does not own when to ask (``replication``) or what the controller decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.alter_partition.v3 import request as alter

from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.server import Broker
    from strom.cluster.image import PartitionState
    from strom.cluster.node_state import TopicView


class IsrChangeRefused(Exception):
    """The controller answered AlterPartition with an error."""


async def send_alter_partition(
    broker: Broker,
    topic: TopicView,
    partition: int,
    state: PartitionState,
    isr: list[int],
    timeout_s: float,
    *,
    leader_recovery_state: int | None = None,
) -> None:
    brokers = broker.state.image.brokers
    lifecycle = broker.lifecycle
    request = alter.AlterPartitionRequest(
        broker_id=broker.node_id,
        broker_epoch=lifecycle.broker_epoch if lifecycle is not None else -1,
        topics=(
            alter.TopicData(
                topic_id=topic.topic_id,
                partitions=(
                    alter.PartitionData(
                        partition_index=partition,
                        leader_epoch=state.leader_epoch,
                        new_isr_with_epochs=tuple(
                            alter.BrokerState(
                                broker_id=member,
                                broker_epoch=brokers[member].epoch if member in brokers else -1,
                            )
                            for member in isr
                        ),
                        leader_recovery_state=state.leader_recovery_state
                        if leader_recovery_state is None
                        else leader_recovery_state,
                        partition_epoch=state.partition_epoch,
                    ),
                ),
            ),
        ),
    )
    response = await broker.controller_channel.call(request, timeout_s)
    if response.error_code != ErrorCode.none:
        raise IsrChangeRefused(response.error_code.name)
    for topic_result in response.topics:
        for result in topic_result.partitions:
            if result.error_code != ErrorCode.none:
                raise IsrChangeRefused(result.error_code.name)
