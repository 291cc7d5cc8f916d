"""Client quotas without a broker: Kafka's sampled rate, the throttle time formula,
precedence of the eight entity levels, validation and DescribeClientQuotas filters, and the
handler time a request quota counts."""

from __future__ import annotations

import asyncio
import time

import pytest

from strom.broker.access.client_quotas import _Timed
from strom.security.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    InvalidQuota,
    MutationQuotas,
    QuotaRates,
    Rate,
    TokenBucket,
    entity_key,
    filter_matches,
    resolve,
    validate_entity,
    validate_filter,
    validate_value,
)

MB = 1024 * 1024


def test_rate_spans_at_least_ten_windows() -> None:
    rate = Rate()
    rate.add(10 * MB, 0)
    # One sample 0 ms old: the rate is measured over 10 windows, not 1 ms.
    assert rate.window_ms_at(0) == 10_000
    assert rate.measure(0) == pytest.approx(MB)
    assert rate.window_ms_at(10_500) == 10_500
    # 11 windows on, the sample has expired.
    assert rate.measure(11_000) == 0


def test_throttle_time_is_kafkas_formula() -> None:
    rate = Rate()
    # 20 MB in the first window against 1 MB/s: observed 2 MB/s over 10 s, so the delay
    # that brings it back is (2 - 1) / 1 * 10 s.
    assert rate.record(20 * MB, MB, 0) == 10_000
    # Within the quota: no throttle.
    assert Rate().record(5 * MB, MB, 0) == 0
    # A quarter over: 2.5 s; and the request quota's cap of one window.
    assert Rate().record(12.5 * MB, MB, 500) == 2_500
    assert Rate().record(12.5 * MB, MB, 500, cap_ms=1_000) == 1_000


def test_rate_held_at_quota_by_the_throttle() -> None:
    """A client that waits out every throttle time sends at about its quota."""
    rate = Rate()
    now, sent, chunk, quota = 0, 0, 100_000, 1_000_000
    while now < 60_000:
        delay = rate.record(chunk, quota, now)
        sent += chunk
        now += max(delay, 10)
    # The first 10 s may carry a burst of 10 windows' worth; after it, the quota holds.
    assert sent <= quota * 60 + quota * 10 + chunk
    assert sent >= quota * 60 * 0.9


def test_windows_advance_and_samples_are_reused() -> None:
    rate = Rate()
    for second in range(30):
        rate.add(1000, second * 1000)
    assert len(rate.samples) == 11
    assert rate.measure(29_999) == pytest.approx(11_000 * 1000 / 10_999, rel=0.01)


def test_unrecord_takes_a_value_back() -> None:
    quotas = {entity_key([("client-id", "c")]): {CONSUMER_BYTE_RATE: 1000.0}}
    rates = QuotaRates(CONSUMER_BYTE_RATE)
    assert rates.record(quotas, "u", "c", 50_000, 0) > 0
    rates.unrecord(quotas, "u", "c", 50_000, 0)
    assert rates.record(quotas, "u", "c", 1000, 0) == 0


def _quotas(*levels: tuple[list[tuple[str, str | None]], float]):
    return {entity_key(parts): {PRODUCER_BYTE_RATE: value} for parts, value in levels}


LEVELS = [
    ([("user", "u"), ("client-id", "c")], 1.0),
    ([("user", "u"), ("client-id", None)], 2.0),
    ([("user", "u")], 3.0),
    ([("user", None), ("client-id", "c")], 4.0),
    ([("user", None), ("client-id", None)], 5.0),
    ([("user", None)], 6.0),
    ([("client-id", "c")], 7.0),
    ([("client-id", None)], 8.0),
]
RATE_KEYS = [
    ("u", "c"),
    ("u", "c"),
    ("u", ""),
    ("u", "c"),
    ("u", "c"),
    ("u", ""),
    ("", "c"),
    ("", "c"),
]


@pytest.mark.parametrize("level", range(8))
def test_precedence_is_kafkas_order(level: int) -> None:
    """With every level from ``level`` on set, the most specific of them wins."""
    quotas = _quotas(*LEVELS[level:])
    resolved = resolve(quotas, PRODUCER_BYTE_RATE, "u", "c")
    assert resolved is not None
    assert resolved.limit == LEVELS[level][1]
    assert resolved.rate_key == RATE_KEYS[level]


def test_resolution_is_per_key_and_per_client() -> None:
    quotas = {
        entity_key([("user", "u")]): {CONSUMER_BYTE_RATE: 10.0},
        entity_key([("client-id", None)]): {PRODUCER_BYTE_RATE: 20.0},
    }
    assert resolve(quotas, PRODUCER_BYTE_RATE, "u", "c").limit == 20.0
    assert resolve(quotas, CONSUMER_BYTE_RATE, "u", "c").limit == 10.0
    assert resolve(quotas, CONSUMER_BYTE_RATE, "v", "c") is None
    assert resolve(quotas, REQUEST_PERCENTAGE, "u", "c") is None
    # A default quota gives each client id a rate of its own; a user quota is shared.
    assert resolve(quotas, PRODUCER_BYTE_RATE, "u", "d").rate_key == ("", "d")
    assert resolve(quotas, CONSUMER_BYTE_RATE, "u", "d").rate_key == ("u", "")


def test_clients_of_one_user_share_its_rate() -> None:
    quotas = {entity_key([("user", "u")]): {PRODUCER_BYTE_RATE: 1000.0}}
    rates = QuotaRates(PRODUCER_BYTE_RATE)
    assert rates.record(quotas, "u", "a", 10_000, 0) == 0
    assert rates.record(quotas, "u", "b", 10_000, 0) > 0
    assert rates.record(quotas, "v", "b", 10_000, 0) == 0


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([("user", "")], "Empty user not supported"),
        ([("ip", "1.2.3.4")], "ip quota entities are not served"),
    ],
)
def test_invalid_entities(parts, message: str) -> None:
    with pytest.raises(InvalidQuota, match=message):
        validate_entity(parts)


def test_entities_are_keyed_in_one_order() -> None:
    assert validate_entity([("user", "u"), ("client-id", None)]) == validate_entity(
        [("client-id", None), ("user", "u")]
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("bogus", 1.0, "Invalid configuration key bogus"),
        (PRODUCER_BYTE_RATE, 1.5, "must be a Long value"),
        (CONSUMER_BYTE_RATE, -5.0, "must be a positive number"),
        (REQUEST_PERCENTAGE, 0.0, "must be a positive number"),
    ],
)
def test_invalid_values(key: str, value: float, message: str) -> None:
    with pytest.raises(InvalidQuota, match=message):
        validate_value(key, value)


def test_valid_values() -> None:
    validate_value(PRODUCER_BYTE_RATE, 1048576.0)
    validate_value(REQUEST_PERCENTAGE, 12.5)
    validate_value("controller_mutation_rate", 0.5)


def test_describe_filters() -> None:
    alice_c1 = entity_key([("user", "alice"), ("client-id", "c1")])
    alice = entity_key([("user", "alice")])
    default_user = entity_key([("user", None)])
    clients = entity_key([("client-id", None)])
    every = [alice_c1, alice, default_user, clients]

    def selected(components, strict=False):
        return [e for e in every if filter_matches(e, components, strict)]

    assert selected([("user", MATCH_EXACT, "alice")]) == [alice_c1, alice]
    assert selected([("user", MATCH_EXACT, "alice")], strict=True) == [alice]
    assert selected([("user", MATCH_DEFAULT, None)]) == [default_user]
    assert selected([("user", MATCH_ANY, None)]) == [alice_c1, alice]
    assert selected([("client-id", MATCH_ANY, None)]) == [alice_c1]
    assert selected([]) == every
    assert selected([], strict=True) == []
    with pytest.raises(InvalidQuota):
        validate_filter([("user", MATCH_EXACT, None)])
    with pytest.raises(InvalidQuota):
        validate_filter([("user", 7, None)])
    with pytest.raises(InvalidQuota):
        validate_filter([("user", MATCH_ANY, None), ("user", MATCH_ANY, None)])


def test_handler_time_leaves_out_waiting() -> None:
    """The request quota counts the time an awaiting handler runs, not the time it waits."""

    async def handler() -> str:
        time.sleep(0.02)  # runs
        await asyncio.sleep(0.2)  # waits
        time.sleep(0.02)  # runs
        return "done"

    async def measure() -> tuple[str, int]:
        timed = _Timed(handler())
        return await timed, timed.spent_ns

    result, spent_ns = asyncio.run(measure())
    assert result == "done"
    assert 0.04 <= spent_ns / 1e9 < 0.2


def test_token_bucket_burst_refill_and_throttle() -> None:
    bucket = TokenBucket()
    assert bucket.throttle_ms(2.0, 0) == 0  # full: 2/s x 11 windows = 22 tokens
    bucket.take(30, 2.0, 0)  # may go below zero: -8
    assert bucket.throttle_ms(2.0, 0) == 4000  # 8 tokens at 2 a second
    assert bucket.throttle_ms(2.0, 3000) == 1000
    assert bucket.throttle_ms(2.0, 4000) == 0
    assert bucket.throttle_ms(2.0, 100_000) == 0 and bucket.tokens == 22  # capped at the burst


def test_mutation_quotas_strict_and_permissive() -> None:
    quotas = {((CLIENT_ID, "admin"),): {CONTROLLER_MUTATION_RATE: 1.0}}
    strict = MutationQuotas()
    assert strict.admit(quotas, "u", "admin", 10, 0, strict=True) == (True, 0)
    assert strict.admit(quotas, "u", "admin", 5, 0, strict=True) == (True, 0)  # 1 left: taken
    assert strict.admit(quotas, "u", "admin", 1, 0, strict=True) == (False, 4000)
    assert strict.admit(quotas, "u", "admin", 1, 4000, strict=True) == (True, 0)
    assert strict.admit(quotas, "u", "other", 100, 0, strict=True) == (True, 0)  # no quota
    permissive = MutationQuotas()
    assert permissive.admit(quotas, "u", "admin", 11, 0, strict=False) == (True, 0)
    assert permissive.admit(quotas, "u", "admin", 3, 0, strict=False) == (True, 3000)
    assert permissive.admit(quotas, "u", "admin", 3, 0, strict=False) == (True, 6000)
