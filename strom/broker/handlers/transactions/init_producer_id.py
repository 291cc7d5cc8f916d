"""InitProducerId (key 22), versions 0-5.

Gives an idempotent producer a fresh producer id (epoch 0) from the
active controller's id blocks (producer_ids.py), so ids are never reused across restarts; a
producer that presents its current id and epoch gets the epoch bumped (KIP-360).
A request with a transactional id goes to the transaction coordinator
(strom/coordinator/transactions.py): a new id or a bumped epoch for the
transactional id, fencing its older producer; PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH before version 4. The ids it hands out are what Produce then checks per
partition (see produce.py): a bumped epoch fences the older one
(INVALID_PRODUCER_EPOCH) and must restart at sequence 0; retried batches are
recognised as duplicates; sequence gaps get OUT_OF_ORDER_SEQUENCE_NUMBER.

Authorization: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED), as Kafka allows.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.producer_ids import ProducerIdBlocks, ProducerIdsUnavailable
from strom.broker.handlers.transactions.transactions import fenced_for
from strom.broker.network.router import RequestContext, handles
from strom.coordinator.transactions import ProducerIdAndEpoch
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

MAX_EPOCH = 32767


def _response_type(ctx: RequestContext) -> type[resp.InitProducerId]:
    return ctx.response_type


@handles(22, 0, 5)
def handle_init_producer_id(
    ctx: RequestContext, request: req.InitProducerId
) -> resp.InitProducerId | Awaitable[resp.InitProducerId]:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not authz.allowed(ctx, authz.Op.WRITE, authz.TRANSACTIONAL_ID, transactional_id):
            return _refused(ctx, ErrorCode.transactional_id_authorization_failed)
        return _transactional(ctx, request, transactional_id)
    if not authz.cluster_allowed(ctx, authz.Op.IDEMPOTENT_WRITE) and not authz.allowed_any(
        ctx, authz.Op.WRITE, authz.TOPIC
    ):
        return _refused(ctx, ErrorCode.cluster_authorization_failed)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return _answer(ctx, producer_id, epoch + 1)
    blocks = ctx.broker.producer_ids
    producer_id = blocks.take_now()
    if producer_id is not None:
        return _answer(ctx, producer_id, 0)
    return _from_new_block(ctx, blocks)


async def _transactional(
    ctx: RequestContext, request: req.InitProducerId, transactional_id: str
) -> resp.InitProducerId:
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    try:
        result = await ctx.broker.transactions.init_producer_id(
            transactional_id,
            timeout_ms,
            getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1),
        )
    except ProducerIdsUnavailable:
        result = ProducerIdAndEpoch(ErrorCode.coordinator_load_in_progress)
    return build(
        _response_type(ctx),
        throttle_time=NO_THROTTLE,
        error_code=fenced_for(result.error, ctx.api_version, 4),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


async def _from_new_block(ctx: RequestContext, blocks: ProducerIdBlocks) -> resp.InitProducerId:
    try:
        producer_id = await blocks.take()
    except ProducerIdsUnavailable:
        return build(
            _response_type(ctx),
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.coordinator_load_in_progress,
            producer_id=-1,
            producer_epoch=-1,
        )
    return _answer(ctx, producer_id, 0)


def _refused(ctx: RequestContext, error: ErrorCode) -> resp.InitProducerId:
    return build(
        _response_type(ctx),
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=-1,
        producer_epoch=-1,
    )


def _answer(ctx: RequestContext, producer_id: int, epoch: int) -> resp.InitProducerId:
    return build(
        _response_type(ctx),
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
