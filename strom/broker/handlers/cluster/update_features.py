"""UpdateFeatures (key 57), versions 0-1: finalize a feature's level (KIP-584), as
``kafka-features.sh upgrade/downgrade`` and Admin.updateFeatures send it.

A broker checks ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED) and forwards the
request, as a v1 one (v0's allow_downgrade is a safe downgrade), to the active
controller; it answers once the FeatureLevelRecords have committed and this node's
metadata shows them. The controller checks each feature (``strom.cluster.features``:
a known feature every registered broker supports at that level, a downgrade only when
asked for) and writes them all or none: a refused feature answers
INVALID_UPDATE_VERSION with its reason, the others FEATURE_UPDATE_FAILED, and the
request's error is the first refusal's. ``validate_only`` checks and writes nothing.

The feature Strom lets change is ``share.version`` (share groups on at 1, off at 0
unless ``group.share.enable``); metadata.version is refused (one level is run).
Finalized levels are read back with ApiVersions (v3+: supported and finalized
features).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16

from strom.broker.access import authz
from strom.broker.common import NO_THROTTLE
from strom.broker.controller_client.channel import ControllerUnavailable
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.cluster.controller_api import ControllerError
from strom.cluster.features import (
    SAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
    check_update,
    level_record,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

FORWARD_WAIT_S = 10.0
DENIED = "Cluster authorization failed."


def _updates(request: req.UpdateFeatures) -> list[FeatureUpdate]:
    out = []
    for key in request.feature_updates:
        upgrade_type = getattr(key, "upgrade_type", None)
        if upgrade_type is None:  # v0
            upgrade_type = SAFE_DOWNGRADE if getattr(key, "allow_downgrade", False) else UPGRADE
        out.append(FeatureUpdate(key.feature, int(key.max_version_level), int(upgrade_type)))
    return out


def _response(
    ctx: RequestContext,
    results: list[tuple[str, ErrorCode, str | None]],
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
) -> resp.UpdateFeatures:
    response_type: type[resp.UpdateFeatures] = ctx.response_type
    result_type = nested(response_type, "UpdatableFeatureResult")
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        results=tuple(
            build(result_type, feature=name, error_code=code, error_message=text)
            for name, code, text in results
        ),
    )


@handles(57, 0, 1)
async def handle_update_features(
    ctx: RequestContext, request: req.UpdateFeatures
) -> resp.UpdateFeatures:
    updates = _updates(request)
    if not authz.cluster_allowed(ctx, authz.Op.ALTER):
        return _response(
            ctx,
            [(u.name, ErrorCode.cluster_authorization_failed, DENIED) for u in updates],
            ErrorCode.cluster_authorization_failed,
            DENIED,
        )
    forwarded = update_v1.UpdateFeaturesRequest(
        timeout=request.timeout,
        feature_updates=tuple(
            update_v1.FeatureUpdateKey(
                feature=u.name, max_version_level=i16(u.level), upgrade_type=i8(u.upgrade_type)
            )
            for u in updates
        ),
        validate_only=bool(getattr(request, "validate_only", False)),
    )
    broker = ctx.broker
    try:
        response = await broker.controller_channel.forward(ctx, forwarded)
    except ControllerUnavailable:
        message = "No active controller answered in time."
        return _response(
            ctx,
            [(u.name, ErrorCode.request_timed_out, message) for u in updates],
            ErrorCode.request_timed_out,
            message,
        )
    if response.error_code == ErrorCode.none and not forwarded.validate_only:
        wanted = {u.name: u.level for u in updates}

        def shown() -> bool:
            features = broker.state.image.features
            return all(features.get(name, 0) == level for name, level in wanted.items())

        await broker.wait_for_metadata(shown, FORWARD_WAIT_S)
    return _response(
        ctx,
        [(r.feature, ErrorCode(r.error_code), r.error_message) for r in response.results],
        ErrorCode(response.error_code),
        response.error_message,
    )


@handles_controller(57, 0, 1)
async def handle_update_features_on_the_controller(
    ctx: RequestContext, request: req.UpdateFeatures
) -> resp.UpdateFeatures:
    updates = _updates(request)
    if not authz.controller_admin_allowed(ctx, authz.Op.ALTER):
        message = (
            f"{ctx.principal} may not send API key 57 to the controller "
            "(CLUSTER_ACTION or ALTER on the cluster is needed)"
        )
        return _response(
            ctx,
            [(u.name, ErrorCode.cluster_authorization_failed, message) for u in updates],
            ErrorCode.cluster_authorization_failed,
            message,
        )
    service = ctx.broker.controller_service
    if service is None or service.controller is None:
        message = "This node is not the active controller."
        return _response(
            ctx,
            [(u.name, ErrorCode.not_controller, message) for u in updates],
            ErrorCode.not_controller,
            message,
        )
    image = service.controller.image
    checked = [
        (
            u,
            *check_update(
                u,
                image.features,
                [(b.broker_id, b.supported(u.name)) for b in image.brokers.values()],
            ),
        )
        for u in updates
    ]
    refused = [(u, code, text) for u, code, text in checked if code != ErrorCode.none]
    if refused:
        _, first_code, first_text = refused[0]
        return _response(
            ctx,
            [
                (u.name, code, text)
                if code != ErrorCode.none
                else (u.name, ErrorCode.feature_update_failed, "Another feature was refused.")
                for u, code, text in checked
            ],
            first_code,
            first_text,
        )
    if not getattr(request, "validate_only", False):
        records = [level_record(u) for u in updates]
        try:
            await service.run(lambda controller: controller.propose(records))
        except ControllerError as exc:
            return _response(
                ctx,
                [(u.name, exc.code, str(exc)) for u in updates],
                exc.code,
                str(exc),
            )
    return _response(ctx, [(u.name, ErrorCode.none, None) for u in updates])
