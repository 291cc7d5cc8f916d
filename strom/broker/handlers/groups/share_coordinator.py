"""The share coordinator's RPCs (KIP-932): what a share-partition's leader asks the node
that keeps its state in ``__share_group_state``.

- InitializeShareGroupState (key 83), version 0: a state afresh at a start offset
  (AlterShareGroupOffsets on another node, a state epoch given).
- ReadShareGroupState (84), version 0: the state as stored (start offset -1 and no
  batches when there is none: the share-partition then starts at the group's
  share.auto.offset.reset); its leader epoch is kept: older leaders' writes are fenced.
- WriteShareGroupState (85), versions 0-1: batches replacing the states of their offsets
  and the start offset unless -1 (ShareUpdate's meaning), stored as a snapshot;
  FENCED_LEADER_EPOCH for a leader epoch older than the last one that read the state,
  FENCED_STATE_EPOCH for a state epoch older than the stored one (the state was
  initialized anew since).
- DeleteShareGroupState (86), version 0: tombstones.
- ReadShareGroupStateSummary (87), versions 0-1: start offset, epochs and how many
  offsets past the start are delivery complete.

A write (Initialize, Write) is answered once it is durable: the high watermark
of the state partition passed it (REQUEST_TIMED_OUT after
share.coordinator.write.timeout.ms, COORDINATOR_NOT_AVAILABLE when leadership moved
meanwhile or the write could not be made).

A key (group, topic id, partition) is served by the leader of its state partition
(share_state.py says which); elsewhere NOT_COORDINATOR. Nodes send these to each other:
CLUSTER_ACTION on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED). The client side
is ShareService in strom/broker/handlers/groups/share_groups.py; the storage is ShareStateStore.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from strom.broker.access import authz
from strom.broker.network.router import RequestContext, handles
from strom.coordinator.internal_log import Appended
from strom.coordinator.share_partition import StateBatch
from strom.coordinator.share_state import ShareKey, ShareState, ShareStateStore
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    import uuid

    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

    ShareStateRequest: TypeAlias = (
        req.InitializeShareGroupState
        | req.ReadShareGroupState
        | req.WriteShareGroupState
        | req.DeleteShareGroupState
        | req.ReadShareGroupStateSummary
    )


# The answer of one of the share coordinator's RPCs, which _answer builds alike.
_Answer = TypeVar("_Answer")


def _store(ctx: RequestContext) -> ShareStateStore:

    return ctx.broker.share_service.store


def _answer(
    ctx: RequestContext,
    response_type: type[_Answer],
    request: ShareStateRequest,
    result_type_name: str,
    partition_type_name: str,
    serve: Callable[[ShareKey, Any], dict[str, Any]],
) -> _Answer | Awaitable[_Answer]:
    """Each partition of the request answered by ``serve`` (its extra fields; an
    ``appended`` one is a write, answered once durable), after the checks every share
    coordinator RPC makes."""
    result_type = nested(response_type, result_type_name)
    partition_type = nested(response_type, partition_type_name)
    allowed = authz.node_request_allowed(ctx)
    store = _store(ctx)
    answers: list[tuple[Any, list[dict[str, Any]]]] = []
    writes: list[tuple[dict[str, Any], Appended]] = []
    for topic in request.topics:
        partitions: list[dict[str, Any]] = []
        for part in topic.partitions:
            # kio reads a zero topic id as None; the key takes it unchecked, as it always has.
            key = ShareKey(request.group_id, cast("uuid.UUID", topic.topic_id), part.partition)
            if not allowed:
                error, message, extra = (
                    ErrorCode.cluster_authorization_failed,
                    "Cluster authorization failed.",
                    _defaults(partition_type),
                )
            elif not store.leads(key):
                error, message, extra = (
                    ErrorCode.not_coordinator,
                    "This node is not the share coordinator of the key.",
                    _defaults(partition_type),
                )
            else:
                error, message, extra = ErrorCode.none, None, serve(key, part)
                if "error_code" in extra:
                    error = extra.pop("error_code")
                    message = extra.pop("error_message", None)
            fields = {
                "partition": part.partition,
                "error_code": error,
                "error_message": message,
                **extra,
            }
            appended = fields.pop("appended", None)
            if appended is not None and appended.replicated:
                writes.append((fields, appended))
            partitions.append(fields)
        answers.append((topic.topic_id, partitions))

    def response() -> _Answer:
        return build(
            response_type,
            results=tuple(
                build(
                    result_type,
                    topic_id=topic_id,
                    partitions=tuple(build(partition_type, **f) for f in fields),
                )
                for topic_id, fields in answers
            ),
        )

    if not writes:
        return response()
    return _after_durable(ctx, writes, response)


async def _after_durable(
    ctx: RequestContext,
    writes: list[tuple[dict[str, Any], Appended]],
    response: Callable[[], _Answer],
) -> _Answer:

    service = ctx.broker.share_service
    for fields, appended in writes:
        error = await service.wait_durable(appended)
        if error != ErrorCode.none:
            fields["error_code"] = error
            fields["error_message"] = "The share state write is not durable."
    return response()


def _defaults(partition_type: type) -> dict[str, Any]:
    fields = getattr(partition_type, "__dataclass_fields__", {})
    out: dict[str, Any] = {}
    for name, value in (
        ("state_epoch", -1),
        ("leader_epoch", -1),
        ("start_offset", -1),
        ("state_batches", ()),
        ("delivery_complete_count", -1),
    ):
        if name in fields:
            out[name] = value
    return out


def _drop_held(ctx: RequestContext, key: ShareKey) -> None:
    """The share-partition of ``key`` held on this node, if any, forgotten."""

    ctx.broker.share_service.drop(key)


def _now() -> int:
    return time.time_ns() // 1_000_000


def _write_failed() -> dict[str, Any]:
    return {
        "error_code": ErrorCode.coordinator_not_available,
        "error_message": "The share state could not be written.",
    }


@handles(83, 0, 0)
def handle_initialize_share_group_state(
    ctx: RequestContext, request: req.InitializeShareGroupState
) -> resp.InitializeShareGroupState | Awaitable[resp.InitializeShareGroupState]:
    response_type: type[resp.InitializeShareGroupState] = ctx.response_type
    store = _store(ctx)

    def serve(key: ShareKey, part: Any) -> dict[str, Any]:
        _drop_held(ctx, key)  # started anew: a copy held here is read again
        state = ShareState(part.start_offset, [], state_epoch=part.state_epoch)
        appended = store.write(key, state, _now())
        return {"appended": appended} if appended is not None else _write_failed()

    return _answer(ctx, response_type, request, "InitializeStateResult", "PartitionResult", serve)


@handles(84, 0, 0)
def handle_read_share_group_state(
    ctx: RequestContext, request: req.ReadShareGroupState
) -> resp.ReadShareGroupState | Awaitable[resp.ReadShareGroupState]:
    response_type: type[resp.ReadShareGroupState] = ctx.response_type
    store = _store(ctx)
    batch_type = nested(response_type, "StateBatch")

    def serve(key: ShareKey, part: Any) -> dict[str, Any]:
        store.claim(key, part.leader_epoch)
        state = store.read(key)
        if state is None:
            return {"state_epoch": 0, "start_offset": -1, "state_batches": ()}
        return {
            "state_epoch": state.state_epoch,
            "start_offset": state.start_offset,
            "state_batches": tuple(
                build(
                    batch_type,
                    first_offset=b.first_offset,
                    last_offset=b.last_offset,
                    delivery_state=b.state,
                    delivery_count=b.delivery_count,
                )
                for b in state.batches
            ),
        }

    return _answer(ctx, response_type, request, "ReadStateResult", "PartitionResult", serve)


@handles(85, 0, 1)
def handle_write_share_group_state(
    ctx: RequestContext, request: req.WriteShareGroupState
) -> resp.WriteShareGroupState | Awaitable[resp.WriteShareGroupState]:
    response_type: type[resp.WriteShareGroupState] = ctx.response_type
    store = _store(ctx)

    def serve(key: ShareKey, part: Any) -> dict[str, Any]:
        fenced = store.fenced(key, part.leader_epoch, part.state_epoch)
        if fenced is not None:
            return {
                "error_code": fenced,
                "error_message": "The share-partition's leader or state epoch is stale.",
            }
        batches = [
            StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in part.state_batches
        ]
        appended = store.merge(
            key, part.start_offset, batches, _now(), leader_epoch=part.leader_epoch
        )
        return {"appended": appended} if appended is not None else _write_failed()

    return _answer(ctx, response_type, request, "WriteStateResult", "PartitionResult", serve)


@handles(86, 0, 0)
def handle_delete_share_group_state(
    ctx: RequestContext, request: req.DeleteShareGroupState
) -> resp.DeleteShareGroupState | Awaitable[resp.DeleteShareGroupState]:
    response_type: type[resp.DeleteShareGroupState] = ctx.response_type
    store = _store(ctx)

    def serve(key: ShareKey, part: Any) -> dict[str, Any]:
        _drop_held(ctx, key)
        store.delete([key], _now())
        return {}

    return _answer(ctx, response_type, request, "DeleteStateResult", "PartitionResult", serve)


@handles(87, 0, 1)
def handle_read_share_group_state_summary(
    ctx: RequestContext, request: req.ReadShareGroupStateSummary
) -> resp.ReadShareGroupStateSummary | Awaitable[resp.ReadShareGroupStateSummary]:
    response_type: type[resp.ReadShareGroupStateSummary] = ctx.response_type
    store = _store(ctx)

    def serve(key: ShareKey, part: Any) -> dict[str, Any]:
        state = store.read(key)
        if state is None:
            return {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1}
        complete = sum(
            b.last_offset - b.first_offset + 1 for b in state.batches if b.state in (2, 4)
        )
        out = {
            "state_epoch": state.state_epoch,
            "leader_epoch": state.leader_epoch,
            "start_offset": state.start_offset,
        }
        if ctx.api_version >= 1:
            out["delivery_complete_count"] = complete
        return out

    return _answer(ctx, response_type, request, "ReadStateSummaryResult", "PartitionResult", serve)
