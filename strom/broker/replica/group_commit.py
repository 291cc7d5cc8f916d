"""Group commit: produce responses that wait for an fsync share the fsyncs.

When a topic's flush policy asks for a flush on (nearly) every append
(``flush.messages=1``), the produce handler does not fsync on the event loop.
It asks ``GroupCommit.durable(log)`` for a future that completes once the log is
on disk up to its current end. The fsync runs on a worker thread (fsync releases
the GIL) while the loop goes on accepting and appending; appends that arrive
during an fsync are covered together by the next one. The connection loop keeps
responses in request order, so a producer with several requests in flight gets
them all answered, each only after its data is durable.

The time-based flush (``flush.ms``, and ``flush.messages`` checked by the periodic
duty) takes the same way, as do the checkpoint files' writes (``in_background``): one
thread does every fsync of the node's logs, in the order they were asked for, so that a
later flush of a log never finishes before an earlier one, and the event loop never
waits on the disk.

Owns the per-log queue of waiters and the fsync thread; the storage owns what a
flush writes (PartitionLog.begin_flush / PendingFlush.sync / end_flush).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor

from strom.storage.partition_log import PartitionLog, PendingFlush

log = logging.getLogger(__name__)


def _forget(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()  # retrieved: _end logged it


class _LogQueue:
    __slots__ = ("waiters", "syncing")

    def __init__(self) -> None:
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.syncing = False


class GroupCommit:
    """fsyncs on one worker thread, each covering every append made before it began."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="strom-fsync")
        self._queues: dict[int, _LogQueue] = {}

    def durable(self, partition_log: PartitionLog) -> asyncio.Future[None]:
        """A future done when ``partition_log`` is fsynced up to its current end."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        queue = self._queues.setdefault(id(partition_log), _LogQueue())
        queue.waiters.append((partition_log.log_end_offset, done))
        if not queue.syncing:
            self._begin(partition_log, queue, loop)
        return done

    def _begin(
        self, partition_log: PartitionLog, queue: _LogQueue, loop: asyncio.AbstractEventLoop
    ) -> None:
        pending = partition_log.begin_flush()
        queue.syncing = True
        work = self._executor.submit(pending.sync)
        work.add_done_callback(
            lambda result: loop.call_soon_threadsafe(
                self._end, partition_log, queue, pending, result, loop
            )
        )

    def _end(
        self,
        partition_log: PartitionLog,
        queue: _LogQueue,
        pending: PendingFlush,
        result: ThreadFuture[None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        queue.syncing = False
        error = result.exception()
        if error is None:
            partition_log.end_flush(pending)
        else:
            log.error("fsync of %r failed: %s", partition_log, error)
        still_waiting = []
        for offset, done in queue.waiters:
            if offset > pending.end_offset and error is None:
                still_waiting.append((offset, done))
            elif not done.done():
                if error is None:
                    done.set_result(None)
                else:
                    done.set_exception(error)
        queue.waiters = still_waiting
        if still_waiting:
            self._begin(partition_log, queue, loop)
        else:
            del self._queues[id(partition_log)]

    def flush_in_background(self, partition_log: PartitionLog) -> None:
        """Flush ``partition_log`` up to its current end on the fsync thread, as a flush
        policy asks; a failure is logged (``_end``), nobody waits for it."""
        self.durable(partition_log).add_done_callback(_forget)

    def in_background(self, work: Callable[[], None]) -> asyncio.Future[None]:
        """Run ``work`` (file writes with fsyncs) on the fsync thread, after the flushes
        asked for before it."""
        return asyncio.get_running_loop().run_in_executor(self._executor, work)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)
