"""DescribeCluster (key 60), versions 0-2.

On the client listeners: the registered brokers (``endpoint_type`` 1), with their
racks; fenced ones too, flagged, when a v2 request asks for them
(``include_fenced_brokers``). Asked for the controllers (``endpoint_type`` 2, v1+), the
quorum's voters at their controller listeners, with the active controller as
``controller_id``; a node alone in its quorum, which has no controller listener, names
itself at its client listener. Needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED).

On the controller listener, as Kafka's controllers answer it (KIP-919) to tools given
``--bootstrap-controller``: ALTER on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED),
checked first, and only the controllers are described: a request for the brokers is
MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST at v0, which cannot ask for controllers), an
endpoint type Kafka does not know UNSUPPORTED_ENDPOINT_TYPE. ``controller_id`` is -1
while no voter leads. Either way cluster authorized operations are filled in from the
ACLs when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.broker.access import authz
from strom.broker.common import CLUSTER_OPERATIONS, NO_THROTTLE, authorized_operations
from strom.broker.network.cluster_view import controller_id, live_brokers
from strom.broker.network.router import RequestContext, handles, handles_controller
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested
from strom.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:
    from strom.protocol import request_types as req
    from strom.protocol import response_types as resp

BROKERS = 1
CONTROLLERS = 2
ENDPOINT_NAMES = {BROKERS: "BROKER", CONTROLLERS: "CONTROLLER"}


@handles(60, 0, 2)
def handle_describe_cluster(
    ctx: RequestContext, request: req.DescribeCluster
) -> resp.DescribeCluster:
    response_type: type[resp.DescribeCluster] = ctx.response_type
    if not authz.cluster_allowed(ctx, authz.Op.DESCRIBE):
        return _failed(ctx, request, ErrorCode.cluster_authorization_failed)
    if getattr(request, "endpoint_type", BROKERS) == CONTROLLERS:
        return _answer(ctx, request, _controllers(ctx), ctx.broker.quorum.leader_id)
    include_fenced = getattr(request, "include_fenced_brokers", False)
    broker = ctx.broker
    nodes = tuple(
        build(
            nested(response_type, "DescribeClusterBroker"),
            broker_id=b.node_id,
            host=b.host,
            port=b.port,
            rack=b.rack,
            is_fenced=b.fenced,
        )
        for b in live_brokers(broker, include_fenced=include_fenced, listener=ctx.listener)
    )
    return _answer(ctx, request, nodes, controller_id(broker))


@handles_controller(60, 0, 2)
def handle_controller_describe_cluster(
    ctx: RequestContext, request: req.DescribeCluster
) -> resp.DescribeCluster:
    if not authz.node_request_allowed(ctx, authz.Op.ALTER):
        return _failed(ctx, request, ErrorCode.cluster_authorization_failed)
    wanted = getattr(request, "endpoint_type", BROKERS)
    if wanted not in ENDPOINT_NAMES:
        code = ErrorCode.unsupported_endpoint_type
        message = f"Unsupported endpoint type {wanted}"
    elif wanted != CONTROLLERS:
        code = ErrorCode.mismatched_endpoint_type
        message = (
            "The request was sent to an endpoint of type CONTROLLER, but we wanted an "
            f"endpoint of type {ENDPOINT_NAMES[wanted]}"
        )
    else:
        nodes = _controllers(ctx)
        leader = ctx.broker.quorum.leader_id
        known = any(node.broker_id == leader for node in nodes)
        return _answer(ctx, request, nodes, leader if known else -1)
    if ctx.api_version == 0:
        code = ErrorCode.invalid_request
    return _failed(ctx, request, code, message)


def _controllers(ctx: RequestContext) -> tuple[Any, ...]:
    """The voters at their controller listeners (a quorum of one without a controller
    listener: this node at the listener the request came in on)."""
    broker = ctx.broker
    node_type = nested(ctx.response_type, "DescribeClusterBroker")
    addresses = broker.voters or {broker.node_id: broker.advertised_endpoint(ctx.listener)}
    return tuple(
        build(node_type, broker_id=node, host=host, port=port, rack=None, is_fenced=False)
        for node, (host, port) in sorted(addresses.items())
    )


def _answer(
    ctx: RequestContext, request: req.DescribeCluster, nodes: tuple[Any, ...], controller: int
) -> resp.DescribeCluster:
    response_type: type[resp.DescribeCluster] = ctx.response_type
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=getattr(request, "endpoint_type", BROKERS),
        cluster_id=ctx.broker.cluster_id,
        controller_id=controller,
        brokers=nodes,
        cluster_authorized_operations=authz.operations(
            ctx,
            authz.CLUSTER,
            CLUSTER_NAME,
            CLUSTER_OPERATIONS,
            request.include_cluster_authorized_operations,
        ),
    )


def _failed(
    ctx: RequestContext,
    request: req.DescribeCluster,
    code: ErrorCode,
    message: str = "Cluster authorization failed.",
) -> resp.DescribeCluster:
    response_type: type[resp.DescribeCluster] = ctx.response_type
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        endpoint_type=getattr(request, "endpoint_type", BROKERS),
        cluster_id=ctx.broker.cluster_id,
        controller_id=-1,
        brokers=(),
        cluster_authorized_operations=authorized_operations(0, False),
    )
