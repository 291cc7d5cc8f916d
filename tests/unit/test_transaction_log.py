"""``__transaction_state`` records in Kafka's formats: keys, values v0 written and read,
v1 (flexible, tagged fields) read, partition placement, malformed bytes refused."""

from __future__ import annotations

import struct

import pytest

from strom.coordinator.transaction_log import (
    STATE_BY_LABEL,
    TransactionLogError,
    TxnRecord,
    TxnState,
    decode_key,
    decode_value,
    transaction_partition_for,
    txn_key,
    txn_value,
)


def test_key_is_version_0_and_a_short_string() -> None:
    key = txn_key("my-txn")
    assert key == b"\x00\x00\x00\x06my-txn"
    assert decode_key(key) == "my-txn"
    assert decode_key(b"\x00\x01\x00\x01a") is None  # another key version: not ours


def test_value_v0_round_trips_with_kafka_layout() -> None:
    record = TxnRecord(
        producer_id=4000,
        producer_epoch=3,
        timeout_ms=60000,
        state=TxnState.ONGOING,
        partitions={"orders": {2, 0}, "__consumer_offsets": {17}},
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    data = txn_value(record)
    # version, producer id, epoch, timeout, status, then the partitions array.
    assert struct.unpack_from(">hqhib", data) == (0, 4000, 3, 60000, 1)
    assert struct.unpack_from(">i", data, 17)[0] == 2
    back = decode_value(data)
    assert back.partitions == {"orders": {0, 2}, "__consumer_offsets": {17}}
    assert (back.producer_id, back.producer_epoch, back.timeout_ms, back.state) == (
        4000,
        3,
        60000,
        TxnState.ONGOING,
    )
    assert (back.last_update_ms, back.start_ms) == (1_700_000_000_123, 1_700_000_000_000)


def test_value_without_partitions_writes_a_null_array() -> None:
    data = txn_value(TxnRecord(7, 0, 1000, TxnState.EMPTY))
    assert struct.unpack_from(">i", data, 17)[0] == -1
    assert decode_value(data).partitions == {}


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_value_v1_with_tagged_fields_is_read() -> None:
    topic = b"t"
    body = bytearray(struct.pack(">hqhib", 1, 55, 9, 30000, 4))
    body += _uvarint(2)  # one topic (compact array: n + 1)
    body += _uvarint(len(topic) + 1) + topic
    body += _uvarint(3) + struct.pack(">ii", 1, 5)  # two partition ids
    body += _uvarint(0)  # the topic entry's tagged fields
    body += struct.pack(">qq", 111, 100)
    tags = [(0, struct.pack(">q", 54)), (2, struct.pack(">h", 2))]
    body += _uvarint(len(tags))
    for tag, value in tags:
        body += _uvarint(tag) + _uvarint(len(value)) + value
    record = decode_value(bytes(body))
    assert record.state == TxnState.COMPLETE_COMMIT
    assert record.partitions == {"t": {1, 5}}
    assert (record.previous_producer_id, record.next_producer_id) == (54, -1)
    assert record.client_transaction_version == 2


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x05" + b"\x00" * 40, struct.pack(">hqhib", 0, 1, 1, 1, 9) + b"\xff" * 4],
)
def test_malformed_values_are_refused(data: bytes) -> None:
    with pytest.raises(TransactionLogError):
        decode_value(data)


def test_states_carry_kafka_ids_and_names() -> None:
    assert [s.value for s in TxnState] == list(range(8))
    assert TxnState.PREPARE_EPOCH_FENCE.label == "PrepareEpochFence"
    assert STATE_BY_LABEL["CompleteAbort"] is TxnState.COMPLETE_ABORT


def test_placement_is_kafkas_hash() -> None:
    # abs("hello".hashCode()) % 50, as Kafka places transactional ids.
    assert transaction_partition_for("hello", 50) == 99162322 % 50
