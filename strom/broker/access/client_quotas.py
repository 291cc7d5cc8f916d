"""Client quota enforcement on the client listeners: measure, throttle, mute.

Every request on a client listener goes through ``ClientQuotas.serve`` while the
metadata image holds any client quota (otherwise the handler is called as it is). For
the connection's principal and client id it records, as Kafka's quota managers do:

- Produce (0): the request's size in bytes against ``producer_byte_rate``;
- Fetch (1) from a consumer (not a follower replica): the record bytes of the response
  against ``consumer_byte_rate``. The fetch's ``max_bytes`` is first cut to what the
  quota allows in ten windows, and a fetch over its quota is answered empty (its bytes
  taken back off the rate), as Kafka does both;
- ShareFetch (78): the record bytes of the response against ``consumer_byte_rate``
  too, its ``max_bytes`` cut alike; a share fetch over its quota still carries its
  records (they are acquired for the member: emptied, they would stay locked until
  their lock expires), the throttle and the muting hold the consumer back;
- every request but ApiVersions and the SASL handshake: the time its handler ran
  (the steps of an awaiting handler, not the time it waited on the log, a long poll or
  a replica) against ``request_percentage``, 100 being one thread's whole time.

The throttle time (the larger of the bandwidth and request throttles) goes into the
response's ``throttle_time_ms``, and the connection is muted for that long (KIP-219):
the response leaves at once, the client's next requests are not read until the time
is up. Kafka delays the response itself for clients older than KIP-219 (Produce v0-5,
Fetch v0-7); Strom mutes those too.

``controller_mutation_rate`` (KIP-599) is asked by the topic admin handlers
(``admit_mutation``: partitions created or deleted, strict for new request versions,
permissive for old ones); a throttle they report in ``RequestContext.throttle_ms``
joins the others here. It is enforced by the broker the client sent the request to,
where Kafka enforces it on the controller: a client spreading its requests over N
brokers gets up to N times its quota.

Does not own the quota semantics and rate arithmetic (``strom.security.quotas``), the
quota administration APIs (``quota_admin``) or the connection loop (``server``).
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import time
from collections.abc import Callable, Generator
from typing import Any

from strom.broker.common import now_ms
from strom.broker.handlers.data.fetch import replica_id_of
from strom.broker.network.router import Handler, RequestContext
from strom.cluster.node_state import NodeState
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    NANOS_TO_PERCENT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    WINDOW_COUNT,
    WINDOW_MS,
    MutationQuotas,
    QuotaRates,
    resolve,
)

PRODUCE, FETCH, SHARE_FETCH = 0, 1, 78
# Not held to request quotas: what a client must be able to send before anything else.
REQUEST_QUOTA_EXEMPT = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


class _Timed:
    """Awaits an awaitable and adds up the time its own steps run (``spent_ns``),
    leaving out the time it is suspended."""

    __slots__ = ("awaitable", "spent_ns")

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable
        self.spent_ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self.awaitable.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                signal = steps.throw(thrown) if thrown is not None else steps.send(sent)
            except StopIteration as done:
                self.spent_ns += time.perf_counter_ns() - started
                return done.value
            self.spent_ns += time.perf_counter_ns() - started
            sent, thrown = None, None
            try:
                sent = yield signal
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:
                thrown = exc


def fetched_bytes(response: Any) -> int:
    """The record bytes a fetch response carries."""
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


class ClientQuotas:
    """The produce, fetch and request rates of this broker's clients."""

    def __init__(self, state: NodeState) -> None:
        self.state = state
        self.produce = QuotaRates(PRODUCER_BYTE_RATE)
        self.fetch = QuotaRates(CONSUMER_BYTE_RATE)
        self.request = QuotaRates(REQUEST_PERCENTAGE, cap_ms=WINDOW_MS)
        self.mutations = MutationQuotas()

    def admit_mutation(self, ctx: RequestContext, partitions: int, strict: bool) -> bool:
        """Whether a topic admin change of ``partitions`` partitions may go ahead under
        the client's ``controller_mutation_rate``; its throttle goes into ``ctx``."""
        quotas = self.state.image.client_quotas
        if not quotas:
            return True
        taken, throttle_ms = self.mutations.admit(
            quotas, ctx.principal.name, ctx.client_id or "", partitions, now_ms(), strict=strict
        )
        ctx.throttle_ms = max(ctx.throttle_ms, throttle_ms)
        return taken

    def serve(
        self,
        ctx: RequestContext,
        handler: Handler,
        body: Any,
        request_size: int,
        mute_for: Callable[[float], None],
    ) -> Any:
        """What ``handler`` answers, throttled as the client's quotas ask."""
        quotas = self.state.image.client_quotas
        if not quotas or ctx.routes is not ctx.broker.routes:
            return handler(ctx, body)
        if (ctx.api_key == FETCH and replica_id_of(body) < 0) or ctx.api_key == SHARE_FETCH:
            body = self._fetch_within_quota(quotas, ctx, body)
        started = time.perf_counter_ns()
        result = handler(ctx, body)
        spent_ns = time.perf_counter_ns() - started
        if inspect.isawaitable(result):
            return self._throttle_later(ctx, body, result, spent_ns, request_size, mute_for)
        return self._throttle(ctx, body, result, spent_ns, request_size, mute_for)

    @staticmethod
    def _fetch_within_quota(quotas: Any, ctx: RequestContext, body: Any) -> Any:
        """The fetch with its ``max_bytes`` cut to what the consumer's quota allows in
        ten windows, as Kafka cuts it (the first batch still goes out whole)."""
        quota = resolve(quotas, CONSUMER_BYTE_RATE, ctx.principal.name, ctx.client_id or "")
        if quota is None:
            return body
        most = max(1, int(quota.limit * (WINDOW_COUNT - 1) * WINDOW_MS / 1000))
        return dataclasses.replace(body, max_bytes=most) if body.max_bytes > most else body

    async def _throttle_later(
        self,
        ctx: RequestContext,
        body: Any,
        pending: Any,
        spent_ns: int,
        request_size: int,
        mute_for: Callable[[float], None],
    ) -> Any:
        timed = _Timed(pending)
        response = await timed
        return self._throttle(
            ctx, body, response, spent_ns + timed.spent_ns, request_size, mute_for
        )

    def _throttle(
        self,
        ctx: RequestContext,
        body: Any,
        response: Any,
        spent_ns: int,
        request_size: int,
        mute_for: Callable[[float], None],
    ) -> Any:
        quotas = self.state.image.client_quotas
        user, client_id = ctx.principal.name, ctx.client_id or ""
        now = now_ms()
        bandwidth_ms = 0
        fetched = 0
        if ctx.api_key == PRODUCE:
            bandwidth_ms = self.produce.record(quotas, user, client_id, request_size, now)
        elif ctx.api_key == FETCH and response is not None and replica_id_of(body) < 0:
            fetched = fetched_bytes(response)
            bandwidth_ms = self.fetch.record(quotas, user, client_id, fetched, now)
        elif ctx.api_key == SHARE_FETCH and response is not None:
            shared = fetched_bytes(response)
            bandwidth_ms = self.fetch.record(quotas, user, client_id, shared, now)
        request_ms = 0
        if ctx.api_key not in REQUEST_QUOTA_EXEMPT and not (
            ctx.api_key == FETCH and replica_id_of(body) >= 0
        ):
            percent = spent_ns * NANOS_TO_PERCENT
            request_ms = self.request.record(quotas, user, client_id, percent, now)
        throttle_ms = max(bandwidth_ms, request_ms, ctx.throttle_ms)
        if throttle_ms <= 0:
            return response
        if ctx.api_key == FETCH and fetched:
            self.fetch.unrecord(quotas, user, client_id, fetched, now)
            response = dataclasses.replace(response, responses=())
        if response is not None and hasattr(response, "throttle_time"):
            response = dataclasses.replace(
                response, throttle_time=datetime.timedelta(milliseconds=throttle_ms)
            )
        mute_for(throttle_ms / 1000)
        return response
