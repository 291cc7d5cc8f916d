"""Client quota administration: DescribeClientQuotas (48) v0-1, AlterClientQuotas (49) v0-1.

On the client listeners: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster and
is answered from this node's metadata image: the entities the filter selects (exact
name, default, any name per entity type; ``strict`` leaves out entities with other
types) with their quota values; a filter naming a type twice, an unknown match type or
an exact match without a name is INVALID_REQUEST. AlterClientQuotas needs ALTER_CONFIGS
on the cluster and is forwarded as it came to the active controller, then answered once
this node's metadata shows the change (bounded, as ACL changes are).

On the controller listener, once the sender may (CLUSTER_ACTION, a forwarding
broker's, or ALTER_CONFIGS on the cluster; else CLUSTER_AUTHORIZATION_FAILED for every
entry): AlterClientQuotas checks each entry as Kafka's
ClientQuotaControlManager does (``strom.security.quotas.validate_*``: user and
client-id entities with a name or the default, the four quota keys, whole numbers for
the byte rates; an entity twice or a key twice is refused) and, unless
``validate_only``, writes a ClientQuotaRecord for each value that changes (a removal
only for a value that is set). Errors are per entry, with Kafka's messages.

Does not own quota semantics (``strom.security.quotas``) or enforcement
(``client_quotas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.cluster.controller_api import ControllerError, ControllerResult
from strom.cluster.quorum_controller import QuorumController
from strom.cluster.records import ClientQuotaRecord, EntityData
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.security.quotas import (
    InvalidQuota,
    QuotaEntity,
    filter_matches,
    validate_entity,
    validate_filter,
    validate_value,
)

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

FORWARD_WAIT_S = 5.0
CLUSTER_DENIED = "Cluster authorization failed."


@handles(48, 0, 1)
def handle_describe_client_quotas(
    ctx: RequestContext, request: req.DescribeClientQuotas
) -> resp.DescribeClientQuotas:
    response_type: type[resp.DescribeClientQuotas] = ctx.response_type

    def failed(code: ErrorCode, message: str) -> resp.DescribeClientQuotas:
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            entries=None,
        )

    if not authz.cluster_allowed(ctx, authz.Op.DESCRIBE_CONFIGS):
        return failed(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        validate_filter(components)
    except InvalidQuota as exc:
        return failed(ErrorCode.invalid_request, str(exc))
    entry_type = nested(response_type, "EntryData")
    entity_type = nested(response_type, "EntityData")
    value_type = nested(response_type, "ValueData")
    quotas = ctx.broker.state.image.client_quotas
    entries = tuple(
        build(
            entry_type,
            entity=tuple(build(entity_type, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(build(value_type, key=key, value=values[key]) for key in sorted(values)),
        )
        for entity, values in sorted(quotas.items(), key=lambda kv: repr(kv[0]))
        if filter_matches(entity, components, request.strict)
    )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=entries,
    )


def _entity_parts(entry: Any) -> list[tuple[str, str | None]]:
    return [(e.entity_type, e.entity_name) for e in entry.entity]


def _alter_response(
    ctx: RequestContext,
    request: req.AlterClientQuotas,
    errors: Sequence[tuple[ErrorCode, str | None]],
) -> resp.AlterClientQuotas:
    response_type: type[resp.AlterClientQuotas] = ctx.response_type
    entry_type = nested(response_type, "EntryData")
    entity_type = nested(response_type, "EntityData")
    entries = tuple(
        build(
            entry_type,
            error_code=code,
            error_message=message,
            entity=tuple(
                build(entity_type, entity_type=t, entity_name=n) for t, n in _entity_parts(entry)
            ),
        )
        for entry, (code, message) in zip(request.entries, errors, strict=True)
    )
    return build(response_type, throttle_time=NO_THROTTLE, entries=entries)


@handles(49, 0, 1)
async def handle_alter_client_quotas(
    ctx: RequestContext, request: req.AlterClientQuotas
) -> resp.AlterClientQuotas:
    if not authz.cluster_allowed(ctx, authz.Op.ALTER_CONFIGS):
        every = [(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)] * len(request.entries)
        return _alter_response(ctx, request, every)
    state = ctx.broker.state

    def visible(response: Any) -> bool:
        if request.validate_only:
            return True
        quotas = state.image.client_quotas
        answered = iter(response.entries)
        for entry in request.entries:
            result = next(answered, None)
            if result is None:
                break
            if result.error_code != ErrorCode.none:
                continue
            try:
                values = quotas.get(validate_entity(_entity_parts(entry)), {})
            except InvalidQuota:
                continue
            for op in entry.ops:
                if (op.key in values) if op.remove else (values.get(op.key) != op.value):
                    return False
        return True

    try:
        response: resp.AlterClientQuotas = await ctx.broker.controller_channel.forward(ctx, request)
    except ControllerUnavailable:
        every = [(ErrorCode.request_timed_out, "No active controller answered in time.")]
        return _alter_response(ctx, request, every * len(request.entries))
    await ctx.broker.wait_for_metadata(lambda: visible(response), FORWARD_WAIT_S)
    return response


def _checked(entry: Any, seen: set[QuotaEntity]) -> tuple[QuotaEntity, dict[str, float | None]]:
    """The entry's entity and its changes (None: remove), or InvalidQuota."""
    entity = validate_entity(_entity_parts(entry))
    if entity in seen:
        raise InvalidQuota(f"Ignoring duplicate entity {dict(entity)}")
    seen.add(entity)
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise InvalidQuota(
                f"Duplicate quota key {op.key} not updating quota for this entity {dict(entity)}"
            )
        if not op.remove:
            validate_value(op.key, op.value)
        changes[op.key] = None if op.remove else op.value
    return entity, changes


@handles_controller(49, 0, 1)
async def controller_alter_client_quotas(
    ctx: RequestContext, request: req.AlterClientQuotas
) -> resp.AlterClientQuotas:
    errors: list[tuple[ErrorCode, str | None]] = []
    wanted: list[tuple[QuotaEntity, dict[str, float | None]]] = []
    seen: set[QuotaEntity] = set()
    for entry in request.entries:
        try:
            wanted.append(_checked(entry, seen))
        except InvalidQuota as exc:
            errors.append((ErrorCode.invalid_request, str(exc)))
            continue
        errors.append((ErrorCode.none, None))

    def decide(controller: QuorumController) -> ControllerResult[None]:
        stored = controller.image.client_quotas
        records = []
        for entity, changes in wanted:
            current = stored.get(entity, {})
            data = tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity)
            for key, value in changes.items():
                if value is None:
                    if key in current:
                        records.append(
                            ClientQuotaRecord(entity=data, key=key, value=0.0, remove=True)
                        )
                elif current.get(key) != value:
                    records.append(ClientQuotaRecord(entity=data, key=key, value=value))
        return controller.propose(records)

    service = ctx.broker.controller_service
    try:
        if not authz.controller_admin_allowed(ctx, authz.Op.ALTER_CONFIGS):
            raise ControllerError(
                ErrorCode.cluster_authorization_failed,
                f"{ctx.principal} may not ALTER_CONFIGS on the cluster (change client quotas)",
            )
        if service is None or service.controller is None:
            raise ControllerError(
                ErrorCode.not_controller, "This node is not the active controller."
            )
        if wanted and not request.validate_only:
            await service.run(decide)
    except ControllerError as exc:
        errors = [(exc.code, str(exc)) for _ in errors]
    return _alter_response(ctx, request, errors)
