"""The node's ``StandardAuthorizer`` following the ACLs of its metadata image: built once
by the server when ``authorizer.class.name`` names one (``node_authorizer``), brought up
to the image's ACLs when they changed (``MetadataImage.acl_version``). The checks the
handlers make are ``authz``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.security.authorizer import AclBinding, StandardAuthorizer, parse_super_users

if TYPE_CHECKING:
    from strom.cluster.image import MetadataImage
    from strom.cluster.records import AccessControlEntryRecord
    from strom.config import BrokerConfig


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


def node_authorizer(config: BrokerConfig) -> NodeAuthorizer | None:
    """The node's authorizer, or None when ``authorizer.class.name`` names none."""
    if not config["authorizer.class.name"]:
        return None
    return NodeAuthorizer(
        parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"]
    )
