"""A node's committed metadata without a broker: a real NodeState fed by a real
QuorumController's decisions, its log kept in a list that outlives the node; and
``append_here``, the leader append a coordinator is given, for the partitions of this
single node (one replica each: the high watermark moves with the append)."""

from __future__ import annotations

import uuid

from strom.cluster.bootstrap import bootstrap_records
from strom.cluster.controller_api import ControllerConfig, NewTopic
from strom.cluster.node_state import NodeState
from strom.cluster.quorum_controller import QuorumController
from strom.cluster.records import RegisterBrokerRecord, encode_record
from strom.config import BrokerConfig
from strom.coordinator.internal_log import Appended, AppendRefused
from strom.protocol.errors import ErrorCode
from strom.protocol.records import BatchHeader
from strom.raft.messages import Batch


class MetadataNode:
    """A node's committed metadata, kept in a list that outlives the node (the log):
    changes are decided by a real QuorumController and applied as committed batches."""

    def __init__(self, config: BrokerConfig, log: list[bytes]) -> None:
        self.log = log
        self.state = NodeState(config)
        self.state.load()
        if log:
            self.state.apply_batch(Batch(0, 1, tuple(log)))
        else:
            self._commit(bootstrap_records())
            self._commit(
                [
                    RegisterBrokerRecord(
                        broker_id=1, incarnation_id=uuid.uuid4(), broker_epoch=1, fenced=False
                    )
                ]
            )

    def _commit(self, records: list[object]) -> None:
        values = tuple(encode_record(r) for r in records)  # type: ignore[arg-type]
        self.state.apply_batch(Batch(len(self.log), 1, values))
        self.log.extend(values)

    def _decide(self) -> QuorumController:
        return QuorumController(self.state.image, ControllerConfig(), next_offset=len(self.log))

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None:
        result = self._decide().create_topics([NewTopic(name, partitions, 1, None, configs or {})])
        assert result.response[0].error_code == ErrorCode.none, result.response
        self._commit(list(result.records))

    def delete_topic(self, name: str) -> None:
        self._commit(list(self._decide().delete_topics([name]).records))

    def topic(self, name: str) -> object:
        return self.state.topic(name)

    def shutdown(self) -> None:
        self.state.shutdown()

    def append_here(
        self, topic: str, partition: int, buf: bytearray, headers: list[BatchHeader]
    ) -> Appended:
        """Append as this node's only replica of ``topic``-``partition``."""
        partition_log = self.state.partition_log(topic, partition)
        view = self.state.topic(topic)
        if partition_log is None or view is None:
            raise AppendRefused(ErrorCode.not_leader_or_follower)
        epoch = view.leader_epoch_of(partition)
        partition_log.append(buf, headers, leader_epoch=epoch)
        return Appended(partition, partition_log.log_end_offset, epoch, False)
