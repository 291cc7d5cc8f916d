"""``strom.zero_time``'s placement of keyed records: murmur2 as Kafka's Java producer
computes it (the values Kafka's own tests hold), the partition its positive part modulo
the count, a random one for no key. No broker (the writer against a broker:
tests/integration/test_ksql.py, INSERT VALUES with ROWTIME 0)."""

from __future__ import annotations

from strom.zero_time import murmur2, partition_for


def test_murmur2_as_kafkas_java_producer_hashes() -> None:
    assert [murmur2(k) for k in (b"21", b"foobar", b"abc", b"a-little-bit-long-string")] == [
        -973932308, -790332482, 479470107, -985981536
    ]  # fmt: skip


def test_partition_for_a_key_and_for_none() -> None:
    assert partition_for(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert {partition_for(None, 3) for _ in range(200)} == {0, 1, 2}
