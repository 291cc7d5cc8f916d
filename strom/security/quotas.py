"""Client quotas, sans-I/O: entities, validation, precedence, rates and throttle times.

Owns what Kafka's client quotas mean, with no sockets and no clock of its own (every
call takes ``now_ms``):

- Entities: a quota entity maps entity types ("user", "client-id") to a name, None
  being the default of that type. ``QuotaEntity`` is the sorted tuple of those pairs,
  as the metadata image keys them. ``validate_alteration`` checks an AlterClientQuotas
  entry as Kafka's controller does (known types, no duplicates, no empty names, a
  combination that takes quotas, known keys, whole numbers for the byte rates) and
  says why in the message Kafka uses. Strom also refuses values that are not
  positive, which Kafka stores but cannot enforce; "ip" entities are not served.
- Description filters: ``filter_matches`` is DescribeClientQuotas' match (exact name,
  default, any name; ``strict`` leaves out entities with other types).
- Precedence: ``resolve`` finds the quota a (user, client id) pair is held to for one
  key, the first of Kafka's eight levels that sets it (/users/u/clients/c,
  /users/u/clients/<default>, /users/u, /users/<default>/clients/c,
  /users/<default>/clients/<default>, /users/<default>, /clients/c,
  /clients/<default>), and the ``RateKey`` of the rate it is measured by: clients
  sharing a quota share a rate (every client of user u under /users/u), while a
  default gives each user or client id a rate of its own, as Kafka's default quota
  callback tags its sensors.
- Rates: ``Rate`` is Kafka's sampled ``Rate`` (``quota.window.num`` = 11 samples of
  ``quota.window.size.seconds`` = 1 s; the rate is the samples' sum over the time they
  span, at least the last 10 windows). ``Rate.record`` adds a value and answers the
  throttle time Kafka's ClientQuotaManager would: 0 within the quota, else
  ``(rate - quota) / quota * window`` ms, the delay that brings the observed rate back
  to the quota if nothing more is recorded. Request-time throttles are capped at one
  window, as Kafka caps them.
- Controller mutations (KIP-599): ``TokenBucket`` is Kafka's token bucket for
  ``controller_mutation_rate``: tokens (partitions created or deleted) refill at the
  quota's rate up to a burst of the quota times the 11 windows, a mutation takes its
  partitions and may drive the bucket below zero, and the throttle time is what refills
  it to zero. ``MutationQuotas.admit`` is Kafka's strict quota (new request versions:
  refused while the bucket is below zero) and its permissive one (old versions: always
  taken, the response throttled).

Does not own where quotas are stored (the metadata image), or measuring and muting
connections (``strom.broker.access.client_quotas``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Key -> whether its value must be a whole number (Kafka's LONG keys).
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

WINDOW_COUNT = 11  # quota.window.num
WINDOW_MS = 1000  # quota.window.size.seconds
NANOS_TO_PERCENT = 100.0 / 1e9  # a second of handler time is 100 (% of one thread)

QuotaEntity = tuple[tuple[str, str | None], ...]
# The (user, client id) a rate is measured for; "" where the level names no such part.
RateKey = tuple[str, str]

_DEFAULT = object()  # a level's part that is the default of its type


class InvalidQuota(ValueError):
    """An alteration Kafka answers INVALID_REQUEST; the message is Kafka's."""


def entity_key(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The image's key for an entity given as (type, name) pairs."""
    return tuple(sorted(parts, key=lambda part: (part[0], part[1] is None, part[1] or "")))


def describe_entity(entity: Mapping[str, str | None] | QuotaEntity) -> str:
    """``user=alice, client-id=<default>``: how tools and messages name an entity."""
    pairs = entity.items() if isinstance(entity, Mapping) else entity
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(pairs))


def validate_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity's key, or InvalidQuota saying what is wrong with it."""
    seen: dict[str, str | None] = {}
    for entity_type, name in parts:
        if entity_type in seen:
            raise InvalidQuota(
                f"Invalid empty client quota entity, duplicate entity entry {entity_type}"
            )
        if entity_type == IP:
            raise InvalidQuota("ip quota entities are not served by this broker")
        if entity_type not in (USER, CLIENT_ID):
            raise InvalidQuota(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise InvalidQuota(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise InvalidQuota("Invalid empty client quota entity")
    return entity_key(seen.items())


def validate_value(key: str, value: float) -> None:
    """InvalidQuota unless ``key`` is a user/client-id quota key and ``value`` fits it."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise InvalidQuota(f"Invalid configuration key {key}")
    if whole and abs(round(value) - value) > 1e-6:
        raise InvalidQuota(f"Configuration {key} must be a Long value")
    if not math.isfinite(value) or value <= 0:
        raise InvalidQuota(f"Configuration {key} must be a positive number, not {value}")


def filter_matches(
    entity: QuotaEntity, components: Iterable[tuple[str, int, str | None]], strict: bool
) -> bool:
    """Whether DescribeClientQuotas' filter (entity type, match type, match) selects it."""
    names = dict(entity)
    wanted: set[str] = set()
    for entity_type, match_type, match in components:
        wanted.add(entity_type)
        if entity_type not in names:
            return False
        name = names[entity_type]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_ANY and name is None:
            return False
    return not strict or set(names) <= wanted


def validate_filter(components: Iterable[tuple[str, int, str | None]]) -> None:
    """InvalidQuota for a filter Kafka refuses: unknown match types, a type twice, an
    exact match without a name."""
    seen: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type in seen:
            raise InvalidQuota(f"Duplicate filter component entity type {entity_type}")
        seen.add(entity_type)
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidQuota(f"Unknown match type {match_type}")
        if match_type == MATCH_EXACT and match is None:
            raise InvalidQuota(f"Exact match of {entity_type} needs a name")


# Kafka's eight levels, most specific first: (user part, client part), each a name
# taken from the client (True), the default of its type (_DEFAULT) or absent (None).
_LEVELS: tuple[tuple[object, object], ...] = (
    (True, True),
    (True, _DEFAULT),
    (True, None),
    (_DEFAULT, True),
    (_DEFAULT, _DEFAULT),
    (_DEFAULT, None),
    (None, True),
    (None, _DEFAULT),
)


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    limit: float
    rate_key: RateKey


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> ResolvedQuota | None:
    """The quota on ``key`` for this user and client id, or None when none applies."""
    for user_part, client_part in _LEVELS:
        parts: list[tuple[str, str | None]] = []
        if user_part is not None:
            parts.append((USER, user if user_part is True else None))
        if client_part is not None:
            parts.append((CLIENT_ID, client_id if client_part is True else None))
        values = quotas.get(entity_key(parts))
        if values is not None and key in values:
            return ResolvedQuota(
                values[key],
                (
                    user if user_part is not None else "",
                    client_id if client_part is not None else "",
                ),
            )
    return None


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


@dataclass(slots=True)
class Rate:
    """Kafka's sampled rate of one quota sensor: values per second over the windows."""

    samples: list[_Sample] = field(default_factory=list)
    current: int = 0
    window_count: int = WINDOW_COUNT
    window_ms: int = WINDOW_MS

    def _purge(self, now_ms: int) -> None:
        expire = self.window_count * self.window_ms
        for sample in self.samples:
            if now_ms - sample.start_ms >= expire:
                sample.start_ms, sample.value = now_ms, 0.0

    def add(self, value: float, now_ms: int) -> None:
        """Record ``value`` at ``now_ms`` without checking any quota."""
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window_ms:
            previous_end = sample.start_ms + self.window_ms
            self.current = (self.current + 1) % self.window_count
            # The new window follows the last one when it is recent, as Kafka aligns them.
            start = previous_end if now_ms < previous_end + self.window_ms else now_ms
            if self.current == len(self.samples):
                self.samples.append(_Sample(start))
            else:
                self.samples[self.current] = _Sample(start)
            sample = self.samples[self.current]
        sample.value += value

    def window_ms_at(self, now_ms: int) -> int:
        """The time the rate is measured over: since the oldest sample, at least
        ``window_count - 1`` windows, at least 1 ms."""
        self._purge(now_ms)
        if not self.samples:
            return (self.window_count - 1) * self.window_ms
        elapsed = now_ms - min(s.start_ms for s in self.samples)
        full_windows = elapsed // self.window_ms
        if full_windows < self.window_count - 1:
            elapsed += (self.window_count - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Values per second."""
        window = self.window_ms_at(now_ms)
        return sum(s.value for s in self.samples) * 1000.0 / window

    def record(self, value: float, limit: float, now_ms: int, cap_ms: int | None = None) -> int:
        """Add ``value`` and answer the throttle time in ms that ``limit`` asks for."""
        self.add(value, now_ms)
        return self.throttle_ms(limit, now_ms, cap_ms)

    def throttle_ms(self, limit: float, now_ms: int, cap_ms: int | None = None) -> int:
        """0 within ``limit``; else the delay that brings the rate back to it."""
        window = self.window_ms_at(now_ms)
        observed = sum(s.value for s in self.samples) * 1000.0 / window
        if observed <= limit:
            return 0
        delay = round((observed - limit) / limit * window)
        return delay if cap_ms is None else min(delay, cap_ms)


@dataclass(slots=True)
class QuotaRates:
    """The rates of one quota type (produce, fetch, request), one per ``RateKey``.

    ``record`` resolves the quota, records against its rate and answers the throttle
    time; rates not touched for an hour are dropped (Kafka expires idle sensors)."""

    key: str
    cap_ms: int | None = None
    rates: dict[RateKey, Rate] = field(default_factory=dict)
    last_used_ms: dict[RateKey, int] = field(default_factory=dict)
    idle_expiry_ms: int = 3600 * 1000

    def record(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        user: str,
        client_id: str,
        value: float,
        now_ms: int,
    ) -> int:
        resolved = resolve(quotas, self.key, user, client_id)
        if resolved is None:
            return 0
        rate = self.rates.get(resolved.rate_key)
        if rate is None:
            self._expire(now_ms)
            rate = self.rates[resolved.rate_key] = Rate()
        self.last_used_ms[resolved.rate_key] = now_ms
        return rate.record(value, resolved.limit, now_ms, self.cap_ms)

    def unrecord(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        user: str,
        client_id: str,
        value: float,
        now_ms: int,
    ) -> None:
        """Take back a value recorded for an answer that was not sent (a throttled fetch)."""
        resolved = resolve(quotas, self.key, user, client_id)
        if resolved is not None and resolved.rate_key in self.rates:
            self.rates[resolved.rate_key].add(-value, now_ms)

    def _expire(self, now_ms: int) -> None:
        idle = [k for k, t in self.last_used_ms.items() if now_ms - t > self.idle_expiry_ms]
        for rate_key in idle:
            del self.rates[rate_key], self.last_used_ms[rate_key]


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket: ``tokens`` refill at ``limit`` per second up to the burst."""

    tokens: float | None = None  # None: full (not used yet)
    last_ms: int = 0

    def _refill(self, limit: float, now_ms: int) -> float:
        burst = limit * WINDOW_COUNT * WINDOW_MS / 1000
        if self.tokens is None:
            self.tokens = burst
        else:
            elapsed = max(0, now_ms - self.last_ms)
            self.tokens = min(burst, self.tokens + limit * elapsed / 1000)
        self.last_ms = now_ms
        return self.tokens

    def throttle_ms(self, limit: float, now_ms: int) -> int:
        """0 while tokens remain; else the time until the bucket is back at zero."""
        tokens = self._refill(limit, now_ms)
        return 0 if tokens >= 0 else math.ceil(-tokens / limit * 1000)

    def take(self, permits: float, limit: float, now_ms: int) -> None:
        self._refill(limit, now_ms)
        assert self.tokens is not None
        self.tokens -= permits


@dataclass(slots=True)
class MutationQuotas:
    """The controller mutation buckets of a node's clients, one per ``RateKey``."""

    buckets: dict[RateKey, TokenBucket] = field(default_factory=dict)

    def admit(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        user: str,
        client_id: str,
        permits: float,
        now_ms: int,
        *,
        strict: bool,
    ) -> tuple[bool, int]:
        """(taken, throttle ms) for a mutation of ``permits`` partitions. Strict: refused
        while the bucket is below zero, with the time until it is not; taken otherwise,
        unthrottled. Permissive: always taken, throttled if it leaves the bucket below
        zero."""
        resolved = resolve(quotas, CONTROLLER_MUTATION_RATE, user, client_id)
        if resolved is None:
            return True, 0
        bucket = self.buckets.get(resolved.rate_key)
        if bucket is None:
            bucket = self.buckets[resolved.rate_key] = TokenBucket()
        if strict:
            wait = bucket.throttle_ms(resolved.limit, now_ms)
            if wait > 0:
                return False, wait
            bucket.take(permits, resolved.limit, now_ms)
            return True, 0
        bucket.take(permits, resolved.limit, now_ms)
        return True, bucket.throttle_ms(resolved.limit, now_ms)
