"""The broker's authorization checks: one place that asks the authorizer for handlers.

Owns the checks handlers call, against the node's authorizer (``node_authorizer``: None
without ``authorizer.class.name``, so a handler's cost without authorization is one
``None`` check), brought in step with the ACLs of the node's metadata image first:
``allowed`` (one operation on one resource), ``node_request_allowed`` (what nodes send
each other), ``filter_allowed`` (names of one type), ``allowed_any`` (Kafka's
authorizeByResourceType) and ``operations`` (the authorized-operations bitfield of a
response). Without an authorizer everything is allowed, as in Kafka.

Does not own the ACL rules (``strom.security.authorizer``), ACL administration
(``acls``) or which operation each API needs (each handler asks for its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.broker.common import OPERATIONS_NOT_REQUESTED
from strom.security.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    StandardAuthorizer,
    operations_bitfield,
)

if TYPE_CHECKING:
    from strom.broker.network.router import RequestContext
    from strom.broker.node import LocalNode

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def authorizer_of(broker: LocalNode) -> StandardAuthorizer | None:
    """The node's authorizer in step with its metadata, or None when none is configured."""
    node = broker.authorizer
    return None if node is None else node.sync(broker.state.image)


def allowed(ctx: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    authorizer = authorizer_of(ctx.broker)
    return authorizer is None or authorizer.authorize(
        str(ctx.principal), ctx.client_host, operation, resource_type, name
    )


def cluster_allowed(ctx: RequestContext, operation: int) -> bool:
    return allowed(ctx, operation, CLUSTER, CLUSTER_NAME)


def node_request_allowed(ctx: RequestContext, operation: int = AclOperation.CLUSTER_ACTION) -> bool:
    """Whether a request on the controller listener may be served: ``operation`` (Kafka's
    CLUSTER_ACTION for what nodes send each other) on the cluster; requests made inside
    the node (no connection) always may."""
    return ctx.session is None or cluster_allowed(ctx, operation)


def controller_admin_allowed(ctx: RequestContext, client_operation: int) -> bool:
    """Whether an admin request on the controller listener may be served: from a broker
    that forwards a client's request (CLUSTER_ACTION on the cluster: that broker has
    checked the client's own operation, forwarding carries no envelope), or from a client
    that talks to the controller itself (``client_operation`` on the cluster, Kafka's
    check for that API there: ALTER for ACLs and SCRAM credentials, ALTER_CONFIGS for
    client quotas). Requests made inside the node (no connection) always may."""
    return (
        ctx.session is None
        or cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)
        or cluster_allowed(ctx, client_operation)
    )


def filter_allowed(
    ctx: RequestContext, operation: int, resource_type: int, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` on which ``operation`` is allowed."""
    authorizer = authorizer_of(ctx.broker)
    if authorizer is None:
        return set(names)
    principal, host = str(ctx.principal), ctx.client_host
    return {n for n in names if authorizer.authorize(principal, host, operation, resource_type, n)}


def allowed_any(ctx: RequestContext, operation: int, resource_type: int) -> bool:
    """Whether ``operation`` is allowed on some resource of the type."""
    authorizer = authorizer_of(ctx.broker)
    return authorizer is None or authorizer.authorize_any(
        str(ctx.principal), ctx.client_host, operation, resource_type
    )


def operations(
    ctx: RequestContext, resource_type: int, name: str, supported: int, requested: bool
) -> int:
    """The authorized-operations field: INT32_MIN unless asked; every supported
    operation without an authorizer; else those the ACLs allow."""
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    authorizer = authorizer_of(ctx.broker)
    if authorizer is None:
        return supported
    return operations_bitfield(
        authorizer.authorized_operations(str(ctx.principal), ctx.client_host, resource_type, name)
    )
