"""Where long-polling fetches wait for data to arrive on the partitions they read.

Owns the map from (topic, partition) to the futures of waiting fetches. The
produce path calls ``notify`` after every append; with nobody waiting that is
one dict lookup. Delayed produce (acks=all with followers) joins this when
replication arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[PartitionKey, set[asyncio.Future[bool]]] = {}

    def notify(self, topic: str, partition: int) -> None:
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(True)

    def waiting(self) -> int:
        """How many waits are under way (a wait on many partitions counts once)."""
        return len({id(f) for waiters in self._waiters.values() for f in waiters})

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.notify(*key)

    async def wait(self, keys: Iterable[PartitionKey], timeout_s: float) -> bool:
        """Wait until one of ``keys`` gets data or the timeout passes; True if woken."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(future)
        timer = loop.call_later(timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[key]


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
