"""How late the node's event loop runs what is due: its lag, measured all the time.

Owns ``LoopLagProbe``: a callback the loop is asked to run every ``INTERVAL_S``; how
much later than asked it ran is the loop's lag at that moment (a handler that computes,
a blocking call, a garbage collection). Kept as a cumulative histogram in seconds with
Prometheus's bucket layout, plus the worst lag since start, for ``/metrics``
(``strom_event_loop_lag_seconds``, ``strom_event_loop_lag_max_seconds``). Costs one
timer callback every 10 ms.

Does not own the metrics text (``strom.broker.metrics``) or anything that causes lag.
"""

from __future__ import annotations

import asyncio
import bisect
import time

INTERVAL_S = 0.010
# Upper bounds (s) of the lag buckets; the last bucket (+Inf) is open.
LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class LoopLagProbe:
    """Asks the loop to run it every ``INTERVAL_S`` and records how late it ran."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LAG_BUCKETS_S) + 1)  # per bucket, not cumulative
        self.total = 0
        self.sum_s = 0.0
        self.max_s = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        assert self._loop is not None
        # Two clocks on purpose: the loop's schedules the callback, time.monotonic()
        # measures it (uvloop's loop.time() is read once per iteration, in whole
        # milliseconds: a callback behind a slow one would see the time it started at).
        self._due = time.monotonic() + INTERVAL_S
        self._handle = self._loop.call_at(self._loop.time() + INTERVAL_S, self._ran)

    def _ran(self) -> None:
        self.record(max(0.0, time.monotonic() - self._due))
        self._schedule()

    def record(self, lag_s: float) -> None:
        self.counts[bisect.bisect_left(LAG_BUCKETS_S, lag_s)] += 1
        self.total += 1
        self.sum_s += lag_s
        if lag_s > self.max_s:
            self.max_s = lag_s

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of lags at most le) per bucket, ``+Inf`` last: Prometheus's form."""
        buckets = []
        seen = 0
        for bound, count in zip(LAG_BUCKETS_S, self.counts, strict=False):
            seen += count
            buckets.append((repr(bound), seen))
        buckets.append(("+Inf", self.total))
        return buckets
