"""The broker's authorization checks: one place that asks the authorizer for handlers.

Owns the node's ``StandardAuthorizer`` (built when ``authorizer.class.name`` names one;
None otherwise, so a handler's cost without authorization is one ``None`` check), kept
in step with the ACLs of the node's metadata image (``MetadataImage.acl_version``), and
the checks handlers call: ``allowed`` (one operation on one resource),
``node_request_allowed`` (what nodes send each other), ``filter_allowed``
(names of one type), ``allowed_any`` (Kafka's authorizeByResourceType) and
``operations`` (the authorized-operations bitfield of a response). Without an
authorizer everything is allowed, as in Kafka.

Does not own the ACL rules (``strom.security.authorizer``), ACL administration
(``acls``) or which operation each API needs (each handler asks for its own).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.broker.common import OPERATIONS_NOT_REQUESTED
from strom.security.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    ResourceType,
    StandardAuthorizer,
    operations_bitfield,
    parse_super_users,
)

if TYPE_CHECKING:
    from strom.broker.network.router import RequestContext
    from strom.broker.node import LocalNode
    from strom.cluster.image import MetadataImage
    from strom.cluster.records import AccessControlEntryRecord

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def binding_of(record: AccessControlEntryRecord) -> AclBinding:
    return AclBinding(
        record.resource_type,
        record.resource_name,
        record.pattern_type,
        record.principal,
        record.host,
        record.operation,
        record.permission_type,
    )


class NodeAuthorizer:
    """A ``StandardAuthorizer`` following the ACLs of a metadata image."""

    def __init__(self, super_users: Iterable[str], allow_everyone: bool) -> None:
        self.authorizer = StandardAuthorizer(super_users, allow_everyone)
        self._image: MetadataImage | None = None  # held: an id() could be reused
        self._version = -1

    def sync(self, image: MetadataImage) -> StandardAuthorizer:
        """The authorizer, brought up to the image's ACLs if they changed."""
        if image.acl_version != self._version or image is not self._image:
            wanted: dict[uuid.UUID, AccessControlEntryRecord] = image.acls
            have = self.authorizer.ids()
            for acl_id in have - wanted.keys():
                self.authorizer.remove(acl_id)
            for acl_id in wanted.keys() - have:
                self.authorizer.add(acl_id, binding_of(wanted[acl_id]))
            self._image, self._version = image, image.acl_version
        return self.authorizer


_NODES: weakref.WeakKeyDictionary[LocalNode, NodeAuthorizer | None] = weakref.WeakKeyDictionary()


def authorizer_of(broker: LocalNode) -> StandardAuthorizer | None:
    """The node's authorizer in step with its metadata, or None when none is configured."""
    try:
        node = _NODES[broker]
    except KeyError:
        config = broker.config
        node = None
        if config["authorizer.class.name"]:
            node = NodeAuthorizer(
                parse_super_users(config["super.users"]),
                config["allow.everyone.if.no.acl.found"],
            )
        _NODES[broker] = node
    if node is None:
        return None
    return node.sync(broker.state.image)


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
