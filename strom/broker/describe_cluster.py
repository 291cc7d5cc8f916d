"""DescribeCluster (key 60), versions 0-2.

Brokers (``endpoint_type`` 1): the registered brokers, with their racks; fenced ones
too, flagged, when a v2 request asks for them (``include_fenced_brokers``).
Controllers (``endpoint_type`` 2, v1+): the quorum's voters at their controller
listeners, with the active controller as ``controller_id``; a node alone in its
quorum, which has no controller listener, names itself at its client listener.
Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); cluster authorized
operations are filled in from the ACLs when asked for. Served on controller
listeners too, as Kafka's controllers do (KIP-919), so tools given a controller's
address (``strom metadata-quorum --bootstrap-controller``) learn the cluster id.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz
from strom.broker.cluster_view import controller_id, live_brokers
from strom.broker.common import CLUSTER_OPERATIONS, NO_THROTTLE, authorized_operations
from strom.broker.router import RequestContext, handles, handles_controller
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested

CONTROLLERS = 2


@handles_controller(60, 0, 2)  # controllers answer it too (KIP-919)
@handles(60, 0, 2)
def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    response_type = ctx.response_type
    node_type = nested(response_type, "DescribeClusterBroker")
    endpoint_type = getattr(request, "endpoint_type", 1)
    if not authz.cluster_allowed(ctx, authz.Op.DESCRIBE):
        return build(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            endpoint_type=endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=authorized_operations(0, False),
        )
    if endpoint_type == CONTROLLERS:
        leader = broker.quorum.leader_id
        voters = broker.voters
        if voters:
            nodes = tuple(
                build(node_type, broker_id=v, host=h, port=p, rack=None, is_fenced=False)
                for v, (h, p) in sorted(voters.items())
            )
        else:
            host, port = broker.advertised_endpoint(ctx.listener)
            nodes = (
                build(
                    node_type,
                    broker_id=broker.node_id,
                    host=host,
                    port=port,
                    rack=None,
                    is_fenced=False,
                ),
            )
        controller = leader
    else:
        include_fenced = getattr(request, "include_fenced_brokers", False)
        nodes = tuple(
            build(
                node_type,
                broker_id=b.node_id,
                host=b.host,
                port=b.port,
                rack=b.rack,
                is_fenced=b.fenced,
            )
            for b in live_brokers(broker, include_fenced=include_fenced, listener=ctx.listener)
        )
        controller = controller_id(broker)
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=controller,
        brokers=nodes,
        cluster_authorized_operations=authz.operations(
            ctx,
            authz.CLUSTER,
            authz.CLUSTER_NAME,
            CLUSTER_OPERATIONS,
            request.include_cluster_authorized_operations,
        ),
    )
