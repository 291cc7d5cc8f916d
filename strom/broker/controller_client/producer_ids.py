"""Producer ids for idempotent producers, from blocks the active controller hands out.

Owns this broker's current block of producer ids: when it runs out, a new block is
asked of the active controller (AllocateProducerIds, with this broker's id and epoch),
whose ProducerIdsRecord is committed before the reply, so an id is never handed out
twice, across restarts and brokers alike. Concurrent callers share one request.

Does not own the id counter (``strom.cluster.quorum_controller``) or forwarding
(``controller_channel``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.allocate_producer_ids.v0.response import AllocateProducerIdsResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.node import RegisteredNode

ALLOCATE_TIMEOUT_S = 10.0


class ProducerIdsUnavailable(Exception):
    """No block could be had from the controller."""


class ProducerIdBlocks:
    def __init__(self, broker: RegisteredNode) -> None:
        self.broker = broker
        self._next = 0
        self._end = 0
        self._asking: asyncio.Future[None] | None = None

    def take_now(self) -> int | None:
        """An id from the current block, or None when it is used up."""
        if self._next < self._end:
            producer_id = self._next
            self._next += 1
            return producer_id
        return None

    async def take(self) -> int:
        while True:
            producer_id = self.take_now()
            if producer_id is not None:
                return producer_id
            if self._asking is None:
                self._asking = asyncio.get_running_loop().create_future()
                try:
                    await self._allocate()
                finally:
                    asking, self._asking = self._asking, None
                    asking.set_result(None)
            else:
                await asyncio.shield(self._asking)

    async def _allocate(self) -> None:
        lifecycle = self.broker.lifecycle
        epoch = lifecycle.broker_epoch if lifecycle is not None else -1
        request = AllocateProducerIdsRequest(
            broker_id=BrokerId(self.broker.node_id), broker_epoch=i64(epoch)
        )
        try:
            response: AllocateProducerIdsResponse = await self.broker.controller_channel.call(
                request, ALLOCATE_TIMEOUT_S
            )
        except Exception as exc:
            raise ProducerIdsUnavailable(str(exc)) from None
        if response.error_code != ErrorCode.none:
            raise ProducerIdsUnavailable(response.error_code.name)
        self._next = response.producer_id_start
        self._end = response.producer_id_start + response.producer_id_len
