"""DescribeCluster (key 60), versions 0-2.

This node is the only broker and the controller. ``endpoint_type`` 2
(controllers, v1+) is answered with the same node, which also acts as
controller. Fenced brokers (v2) do not exist on a single node. Cluster
authorized operations are filled in when asked for.
"""

from __future__ import annotations

from typing import Any

from strom.broker.common import CLUSTER_OPERATIONS, NO_THROTTLE, authorized_operations
from strom.broker.router import RequestContext, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import build, nested


@handles(60, 0, 2)
def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    response_type = ctx.response_type
    host, port = broker.advertised_endpoint()
    node = build(
        nested(response_type, "DescribeClusterBroker"),
        broker_id=broker.node_id,
        host=host,
        port=port,
        rack=None,
        is_fenced=False,
    )
    return build(
        response_type,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=getattr(request, "endpoint_type", 1),
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=(node,),
        cluster_authorized_operations=authorized_operations(
            CLUSTER_OPERATIONS, request.include_cluster_authorized_operations
        ),
    )
