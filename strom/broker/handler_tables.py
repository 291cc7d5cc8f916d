"""The two route tables, filled: every handler module imported so that its ``@handles``
and ``@handles_controller`` registrations are made. The server is the only caller; a
handler module never imports another family's handlers through here."""

from __future__ import annotations

from strom.broker.access import acls, authentication, scram_credentials
from strom.broker.handlers.admin import admin_partitions, admin_topics, configs, quota_admin
from strom.broker.handlers.cluster import api_versions, describe_cluster, metadata, update_features
from strom.broker.handlers.data import (
    fetch,
    list_offsets,
    log_dirs,
    offset_for_leader_epoch,
    produce,
)
from strom.broker.handlers.groups import (
    classic_groups,
    consumer_groups,
    offsets,
    share_coordinator,
    share_groups,
)
from strom.broker.handlers.transactions import init_producer_id, transactions
from strom.broker.network.router import CONTROLLER_ROUTES, ROUTES, Route
from strom.controller import handlers as controller_handlers
from strom.controller import quorum_handlers

HANDLER_MODULES = (
    acls,
    authentication,
    scram_credentials,
    controller_handlers,
    quorum_handlers,
    admin_partitions,
    admin_topics,
    configs,
    quota_admin,
    api_versions,
    describe_cluster,
    metadata,
    update_features,
    fetch,
    list_offsets,
    log_dirs,
    offset_for_leader_epoch,
    produce,
    classic_groups,
    consumer_groups,
    offsets,
    share_coordinator,
    share_groups,
    init_producer_id,
    transactions,
)


def route_tables() -> tuple[dict[int, Route], dict[int, Route]]:
    """The client listeners' table and the controller listener's."""
    return ROUTES, CONTROLLER_ROUTES
