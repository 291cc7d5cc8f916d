"""AlterPartition (56) on a real node's controller listener, with exact requests.

A single node is a quorum of one; started with a CONTROLLER listener of its own, it
serves the controller's APIs there. With one broker no ISR can grow or shrink, so this
checks the wire paths: the stale broker epoch (top-level), per-partition refusals
(unknown topic id, fenced leader epoch, invalid update version) and an ISR equal to the
current one answered with the partition's state, in v2 and v3. The broker epoch and the
partition's epochs are read back from the node's metadata log.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess, with_controller_listener
from kafka_helpers import create_topic
from kio.schema.alter_partition.v2 import request as v2
from kio.schema.alter_partition.v3 import request as v3
from raw_client import RawClient

from strom.cluster.image import MetadataImage
from strom.cluster.records import decode_record
from strom.protocol.errors import ErrorCode
from strom.protocol.records import HEADER_SIZE, parse_header
from strom.storage.metadata_log import METADATA_PARTITION_DIR, decode_batch

NODE = 1


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    process = BrokerProcess(tmp_path_factory.mktemp("alter-partition") / "data")
    with_controller_listener(process, NODE)
    process.start()
    try:
        yield process, process.ports["CONTROLLER"]
    finally:
        process.stop()


def metadata_image(data_dir: Path) -> MetadataImage:
    """The node's metadata log, replayed (its committed part and perhaps a little more)."""
    image = MetadataImage()
    for path in sorted((data_dir / METADATA_PARTITION_DIR).glob("*.log")):
        data = memoryview(path.read_bytes())
        position = 0
        while len(data) - position >= HEADER_SIZE:
            header = parse_header(data, position)
            if position + header.size > len(data):
                break
            batch = decode_batch(data, position)
            if not batch.control:
                for offset, value in enumerate(batch.records, batch.base_offset):
                    image.apply(decode_record(value), offset)
            position += header.size
    return image


def v3_request(broker_epoch: int, topic_id: uuid.UUID, **partition: object):
    fields = {"partition_index": 0, "leader_recovery_state": 0, **partition}
    return v3.AlterPartitionRequest(
        broker_id=NODE,
        broker_epoch=broker_epoch,
        topics=(v3.TopicData(topic_id=topic_id, partitions=(v3.PartitionData(**fields),)),),
    )


def test_alter_partition_over_the_controller_listener(node: tuple[BrokerProcess, int]) -> None:
    process, controller_port = node
    create_topic(process.bootstrap, "isr", 1)
    image = metadata_image(process.data_dir)
    broker = image.broker(NODE)
    topic = image.topic("isr")
    assert broker is not None and topic is not None
    state = topic.partitions[0]
    assert state.leader == NODE and state.isr == (NODE,)
    me = (v3.BrokerState(broker_id=NODE, broker_epoch=broker.epoch),)
    current = {"leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch}

    client = RawClient(controller_port)
    try:
        stale = client.request(
            v3_request(broker.epoch + 1, topic.topic_id, new_isr_with_epochs=me, **current)
        )
        assert stale.error_code == ErrorCode.stale_broker_epoch and stale.topics == ()

        def partition_answer(request):
            response = client.request(request)
            assert response.error_code == ErrorCode.none
            ((answer,),) = [t.partitions for t in response.topics]
            return response.topics[0].topic_id, answer

        _, unknown = partition_answer(
            v3_request(broker.epoch, uuid.uuid4(), new_isr_with_epochs=me, **current)
        )
        assert unknown.error_code == ErrorCode.unknown_topic_id

        _, fenced = partition_answer(
            v3_request(
                broker.epoch,
                topic.topic_id,
                new_isr_with_epochs=me,
                leader_epoch=state.leader_epoch - 1,
                partition_epoch=state.partition_epoch,
            )
        )
        assert fenced.error_code == ErrorCode.fenced_leader_epoch

        _, old = partition_answer(
            v3_request(
                broker.epoch,
                topic.topic_id,
                new_isr_with_epochs=me,
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch - 1,
            )
        )
        assert old.error_code == ErrorCode.invalid_update_version

        topic_id, same = partition_answer(
            v3_request(broker.epoch, topic.topic_id, new_isr_with_epochs=me, **current)
        )
        assert topic_id == topic.topic_id
        assert same.error_code == ErrorCode.none
        assert (same.leader_id, tuple(same.isr)) == (NODE, (NODE,))
        assert (same.leader_epoch, same.partition_epoch) == (
            state.leader_epoch,
            state.partition_epoch,
        )
        assert same.leader_recovery_state == 0

        # v2: the ISR without broker epochs.
        response = client.request(
            v2.AlterPartitionRequest(
                broker_id=NODE,
                broker_epoch=broker.epoch,
                topics=(
                    v2.TopicData(
                        topic_id=topic.topic_id,
                        partitions=(
                            v2.PartitionData(partition_index=0, new_isr=(NODE,), **current),
                        ),
                    ),
                ),
            )
        )
        assert response.error_code == ErrorCode.none
        (answer,) = response.topics[0].partitions
        assert answer.error_code == ErrorCode.none and tuple(answer.isr) == (NODE,)
    finally:
        client.close()
    # Nothing was written: the partition is as it was.
    after = metadata_image(process.data_dir).topic("isr")
    assert after is not None and after.partitions[0] == state
