"""Transaction verification (KIP-890 part 1): a partition leader asks the coordinator.

Owns the check a leader makes before it appends the first transactional batch of a
producer's transaction to a partition: is this partition part of the producer's
ongoing transaction? Without it, a batch that arrives after its transaction ended (a
late retry, a zombie) would open a transaction no coordinator knows of, and the
partition's last stable offset would hang there for good. The coordinator is asked
directly when it is this node, else with AddPartitionsToTxn v4 ``verify_only`` over
the inter-broker listener; every partition of one produce request goes in one
question. A coordinator that cannot be reached answers NOT_COORDINATOR-like errors,
which the producer retries. With ``transaction.partition.verification.enable=false`` (a
dynamic broker config, read at each question) no one is asked and every partition
counts as verified, as in Kafka.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.add_partitions_to_txn.v4.response import AddPartitionsToTxnResponse
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from strom.broker.network.cluster_view import inter_broker_endpoint
from strom.broker.network.peer_client import PeerError, PeerPool
from strom.coordinator.transaction_log import TRANSACTION_TOPIC
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.node import LocalNode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
REQUEST_TIMEOUT_S = 5.0
_ATTRIBUTES = struct.Struct(">h")  # at byte 21 of a batch
_PRODUCER = struct.Struct(">qh")  # producer id and epoch at byte 43
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_MIN_BATCH = 61


def transactional_producer(records: Any) -> tuple[int, int] | None:
    """(producer id, epoch) when the first batch of ``records`` is transactional."""
    if records is None or len(records) < _MIN_BATCH:
        return None
    attributes = _ATTRIBUTES.unpack_from(records, 21)[0]
    if not attributes & _TRANSACTIONAL or attributes & _CONTROL:
        return None
    producer_id, epoch = _PRODUCER.unpack_from(records, 43)
    return (producer_id, epoch) if producer_id >= 0 else None


class TxnVerifier:
    def __init__(self, broker: LocalNode) -> None:
        self.broker = broker
        self.peers = PeerPool(f"strom-txn-verify-{broker.node_id}", broker.inter_broker_security)

    def close(self) -> None:
        self.peers.close()

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        broker = self.broker
        if not broker.config["transaction.partition.verification.enable"]:
            return dict.fromkeys(partitions, ErrorCode.none)
        coordinator = broker.transactions
        topic = broker.state.topic(TRANSACTION_TOPIC)
        if topic is None:
            return dict.fromkeys(partitions, ErrorCode.invalid_txn_state)
        leader = topic.leader_of(coordinator.partition_of(transactional_id))
        if leader == broker.node_id:
            return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        endpoint = inter_broker_endpoint(broker, leader)
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.not_enough_replicas)
        by_topic: dict[str, list[i32]] = {}
        for name, index in partitions:
            by_topic.setdefault(name, []).append(i32(index))
        request = add_v4.AddPartitionsToTxnRequest(
            transactions=(
                add_v4.AddPartitionsToTxnTransaction(
                    transactional_id=TransactionalId(transactional_id),
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(epoch),
                    verify_only=True,
                    topics=tuple(
                        add_v4.AddPartitionsToTxnTopic(name=TopicName(name), partitions=tuple(ids))
                        for name, ids in sorted(by_topic.items())
                    ),
                ),
            )
        )
        try:
            response: AddPartitionsToTxnResponse = await self.peers.request(
                endpoint.host, endpoint.port, request, REQUEST_TIMEOUT_S
            )
        except PeerError as exc:
            log.info("could not verify a transaction with broker %d: %s", leader, exc)
            return dict.fromkeys(partitions, ErrorCode.not_enough_replicas)
        found: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic_result in result.topic_results:
                for part in topic_result.results_by_partition:
                    found[(topic_result.name, part.partition_index)] = ErrorCode(
                        part.partition_error_code
                    )
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        return {key: found.get(key, ErrorCode.invalid_txn_state) for key in partitions}
