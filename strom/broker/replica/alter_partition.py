"""A partition leader's request to change its ISR: AlterPartition to the active controller.

Owns building AlterPartition (v3, KIP-497 with KIP-903's broker epochs) from an
``IsrChange`` the leader's replication state decided (the new ISR with the broker
epoch each member's fetches carried, the partition epoch the change was built on),
sending it through the controller channel, and reading the controller's answer: the
ISR and partition epoch it committed, or its error code. The change also arrives, like
every other, as a committed PartitionChangeRecord.

Does not own when to ask or what an answer means for the high watermark
(``strom.replication.leader``), or what the controller decides.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.alter_partition.v3 import request as alter
from kio.schema.alter_partition.v3.response import AlterPartitionResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i64

from strom.cluster.partition_change import LEADER_RECOVERED
from strom.protocol.errors import ErrorCode
from strom.replication.leader import IsrChange

if TYPE_CHECKING:
    from strom.broker.node import RegisteredNode


class IsrChangeRefused(Exception):
    """The controller answered AlterPartition with an error."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


@dataclass(frozen=True)
class IsrChangeMade:
    isr: tuple[int, ...]
    partition_epoch: int


async def send_alter_partition(
    broker: RegisteredNode,
    topic_id: uuid.UUID,
    partition: int,
    leader_epoch: int,
    change: IsrChange,
    leader_recovery_state: int,
    timeout_s: float,
) -> IsrChangeMade:
    """Ask for ``change``; what the controller committed, or IsrChangeRefused."""
    lifecycle = broker.lifecycle
    request = alter.AlterPartitionRequest(
        broker_id=BrokerId(broker.node_id),
        broker_epoch=i64(lifecycle.broker_epoch if lifecycle is not None else -1),
        topics=(
            alter.TopicData(
                topic_id=topic_id,
                partitions=(
                    alter.PartitionData(
                        partition_index=i32(partition),
                        leader_epoch=i32(leader_epoch),
                        new_isr_with_epochs=tuple(
                            alter.BrokerState(broker_id=BrokerId(member), broker_epoch=i64(epoch))
                            for member, epoch in change.members
                        ),
                        leader_recovery_state=i8(
                            LEADER_RECOVERED if change.recovered else leader_recovery_state
                        ),
                        partition_epoch=i32(change.partition_epoch),
                    ),
                ),
            ),
        ),
    )
    # The channel answers with the response class of the request's version.
    response: AlterPartitionResponse = await broker.controller_channel.call(request, timeout_s)
    if response.error_code != ErrorCode.none:
        raise IsrChangeRefused(response.error_code)
    for topic_result in response.topics:
        for result in topic_result.partitions:
            if result.error_code != ErrorCode.none:
                raise IsrChangeRefused(result.error_code)
            return IsrChangeMade(tuple(result.isr), result.partition_epoch)
    raise IsrChangeRefused(ErrorCode.unknown_server_error)
