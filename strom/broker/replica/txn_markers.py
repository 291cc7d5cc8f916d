"""Transaction markers: writing them into this broker's partitions, sending them to others.

Owns both ends of KIP-98's marker traffic:

- ``write_markers_here``: append a commit or abort control batch to each partition this
  broker leads, through the leader's one append path (``append_marker_as_leader``:
  NOT_ENOUGH_REPLICAS below ``min.insync.replicas``; PartitionLog.append_marker checks
  the producer and coordinator epochs), tell the group coordinator when the partition
  is one of ``__consumer_offsets`` (the offsets committed in the transaction become
  visible or are dropped), and wait, as an acks=all write does, until the marker is
  acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum,
  NOT_LEADER_OR_FOLLOWER when the leadership moved, REQUEST_TIMED_OUT).
  WriteTxnMarkers (key 27) answers with it, and the local coordinator calls it
  directly.
- ``TxnMarkerSender.send``: the coordinator's side. The markers of one transaction are
  grouped by partition leader; those led here are written in place, the others go out
  as WriteTxnMarkers requests to the leaders' inter-broker listeners. Partitions whose
  write failed (no leader yet, leader moved, a broker down) are retried with backoff
  until every marker is written, the partition's topic is deleted (its marker is
  needless then), or this node stops coordinating the transaction.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as markers_v1
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32

from strom.broker.network.cluster_view import inter_broker_endpoint
from strom.broker.network.peer_client import PeerError, PeerPool
from strom.broker.replica.manager import LeaderAppend, ReplicaHolder
from strom.cluster.image import NO_LEADER
from strom.coordinator.internal_log import AppendRefused
from strom.coordinator.offsets_topic import OFFSETS_TOPIC
from strom.coordinator.transactions import MarkerBatch
from strom.protocol.errors import ErrorCode
from strom.storage.errors import StorageError
from strom.storage.producer_state import (
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
)

log = logging.getLogger(__name__)


TopicPartition = tuple[str, int]
MARKER_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
_BACKOFF_S = (0.02, 1.0)


async def write_markers_here(
    broker: ReplicaHolder,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: list[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """Append the marker to each of ``partitions`` led here; an error code for each."""
    results: dict[TopicPartition, ErrorCode] = {}
    waits: list[tuple[TopicPartition, LeaderAppend]] = []
    replicas = broker.replicas
    for key in partitions:
        topic_name, index = key
        try:
            appended = replicas.append_marker_as_leader(
                topic_name, index, producer_id, producer_epoch, coordinator_epoch, commit
            )
        except AppendRefused as exc:
            results[key] = exc.error_code
            continue
        except InvalidProducerEpochError:
            results[key] = ErrorCode.invalid_producer_epoch
            continue
        except TransactionCoordinatorFencedError:
            results[key] = ErrorCode.transaction_coordinator_fenced
            continue
        except (StorageError, OSError) as exc:
            log.error("could not write a transaction marker to %s-%d: %s", *key, exc)
            results[key] = ErrorCode.kafka_storage_error
            continue
        if topic_name == OFFSETS_TOPIC:
            broker.coordinator.complete_transaction(producer_id, commit, index)
        waits.append((key, appended))
    for key, appended in waits:
        results[key] = await replicas.wait_acknowledged(appended, MARKER_TIMEOUT_S)
    return results


class TxnMarkerSender:
    """Delivers the markers of the transactions this node coordinates."""

    def __init__(self, broker: ReplicaHolder) -> None:
        self.broker = broker
        self.peers = PeerPool(f"strom-txn-markers-{broker.node_id}", broker.inter_broker_security)

    def close(self) -> None:
        self.peers.close()

    async def send(self, batch: MarkerBatch) -> bool:
        """Write every marker of ``batch``; False once this node no longer coordinates
        the transaction (its successor finishes it)."""
        broker = self.broker
        coordinator = broker.transactions
        state_partition = coordinator.partition_of(batch.transactional_id)
        remaining = set(batch.partitions)
        backoff = _BACKOFF_S[0]
        while remaining:
            if coordinator.loaded.get(state_partition) != batch.coordinator_epoch:
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for key in sorted(remaining):
                topic = broker.state.topic(key[0])
                if topic is None or key[1] not in topic.states:
                    remaining.discard(key)  # deleted: nothing left to mark
                    continue
                leader = topic.leader_of(key[1])
                if leader != NO_LEADER:
                    by_leader.setdefault(leader, []).append(key)
            outcomes = await asyncio.gather(
                *(self._send_to(leader, batch, keys) for leader, keys in by_leader.items())
            )
            for results in outcomes:
                for key, error in results.items():
                    if error in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                        remaining.discard(key)
                    elif error == ErrorCode.transaction_coordinator_fenced:
                        log.warning(
                            "markers of %s refused: a newer coordinator wrote to %s-%d",
                            batch.transactional_id,
                            *key,
                        )
                        return False
                    elif error == ErrorCode.invalid_producer_epoch:
                        # The partition has seen a newer epoch of this producer: a later
                        # marker has ended this transaction there already.
                        remaining.discard(key)
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_S[1])
        return True

    async def _send_to(
        self, leader: int, batch: MarkerBatch, keys: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        broker = self.broker
        if leader == broker.node_id:
            return await write_markers_here(
                broker,
                batch.producer_id,
                batch.producer_epoch,
                batch.commit,
                batch.coordinator_epoch,
                keys,
            )
        endpoint = inter_broker_endpoint(broker, leader)
        failed = dict.fromkeys(keys, ErrorCode.not_leader_or_follower)
        if endpoint is None:
            return failed
        by_topic: dict[str, list[i32]] = {}
        for topic, index in keys:
            by_topic.setdefault(topic, []).append(i32(index))
        request = markers_v1.WriteTxnMarkersRequest(
            markers=(
                markers_v1.WritableTxnMarker(
                    producer_id=ProducerId(batch.producer_id),
                    producer_epoch=i16(batch.producer_epoch),
                    transaction_result=batch.commit,
                    topics=tuple(
                        markers_v1.WritableTxnMarkerTopic(
                            name=TopicName(t), partition_indexes=tuple(ps)
                        )
                        for t, ps in sorted(by_topic.items())
                    ),
                    coordinator_epoch=i32(batch.coordinator_epoch),
                ),
            )
        )
        try:
            response: WriteTxnMarkersResponse = await self.peers.request(
                endpoint.host, endpoint.port, request, REQUEST_TIMEOUT_S
            )
        except PeerError as exc:
            log.info("markers of %s to broker %d: %s", batch.transactional_id, leader, exc)
            return failed
        results: dict[TopicPartition, ErrorCode] = {}
        for marker in response.markers:
            for topic_result in marker.topics:
                for part in topic_result.partitions:
                    key = (topic_result.name, part.partition_index)
                    results[key] = ErrorCode(part.error_code)
        return {key: results.get(key, ErrorCode.not_leader_or_follower) for key in keys}
