"""``strom cluster``: an overview of the cluster, its brokers and its controllers.

Prints the cluster id, the active controller (the leader of the KRaft metadata
quorum) and the quorum's voters, then a table of the registered brokers: id,
``host:port``, rack, fenced or not, and whether the broker is also the active
controller or a voter (combined nodes); last, the ids of the fenced brokers.

Asks the first reachable bootstrap broker: ApiVersions, then DescribeCluster (key 60;
v2 with ``include_fenced_brokers``, KIP-1073, where the broker serves v2; an older
broker leaves fenced brokers out and the tool says it cannot tell) and DescribeQuorum
(key 55) for the controller and the voters. A broker that does not answer
DescribeQuorum gets the DescribeCluster ``controller_id`` shown instead (Kafka's
brokers name some live broker there, not the quorum's leader). A wrong argument is
one line and exit 2; an unreachable broker or an error code is one line and exit 1.

With ``--bootstrap-controller``, as ``kafka-cluster.sh`` takes it (KIP-919), the tool
asks a controller at its controller listener instead: DescribeCluster for the
controllers (which needs ALTER on the cluster there) and DescribeQuorum, and the table
lists the controllers (id, ``host:port``, active or voter) in place of the brokers.

``strom cluster --unregister ID`` removes a broker's registration for good, as
``kafka-cluster.sh unregister`` does (UnregisterBroker, forwarded to the active
controller, or sent to it with ``--bootstrap-controller``): for a broker that was
stopped after its replicas were moved off.
"""

from __future__ import annotations

import argparse
from typing import Any

from kio.schema.types import BrokerId
from kio.schema.unregister_broker.v0.request import UnregisterBrokerRequest

from strom.cli import wire
from strom.cli.common import ToolError, add_bootstrap, wire_int
from strom.cli.metadata_quorum import (
    DESCRIBE_CLUSTER,
    describe_cluster,
    describe_quorum,
    table,
    usable_version,
)
from strom.cli.output import Listing, add_output_option, show, wants_json
from strom.cli.properties_file import ClusterAccess, add_config_file_option, cluster_access
from strom.protocol.errors import ErrorCode

FENCED_LISTING_VERSION = 2
BROKER_COLUMNS = ("BrokerId", "Endpoint", "Rack", "State", "Controller")
CONTROLLER_COLUMNS = ("NodeId", "Endpoint", "Controller")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "cluster",
        help="show the cluster id, the active controller and the brokers",
        description="Show the cluster id, the active controller, the voters and the brokers.",
    )
    add_bootstrap(parser, controller=True)
    parser.add_argument(
        "--unregister",
        type=wire_int("int32"),
        metavar="ID",
        help="remove a stopped broker's registration",
    )
    add_config_file_option(parser, "--command-config", "admin client")
    add_output_option(parser)
    parser.set_defaults(run=run, parser=parser)


def _ids(ids: list[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def overview(access: ClusterAccess) -> tuple[list[str], dict[str, Any], Listing]:
    """The header lines, the same as fields for JSON, and the table of the brokers (of
    the controllers, with ``--bootstrap-controller``)."""
    bootstrap, security, controllers = access.bootstrap, access.security, access.controllers
    versions = wire.api_versions(bootstrap, security)
    version = usable_version(versions, DESCRIBE_CLUSTER)
    if version is None:
        kind = "controller" if controllers else "broker"
        raise ToolError(f"the {kind} at {bootstrap} does not serve DescribeCluster")
    lists_fenced = not controllers and version >= FENCED_LISTING_VERSION
    cluster = describe_cluster(
        bootstrap,
        versions,
        include_fenced=lists_fenced,
        controllers=controllers,
        security=security,
    )
    assert cluster is not None
    try:
        quorum = describe_quorum(bootstrap, versions, security)
    except ToolError:
        quorum = None
    if quorum is not None:
        controller = quorum.leader_id
        voters = sorted(v.replica_id for v in quorum.voters)
        voters_text = _ids(voters)
    else:
        controller = int(cluster.controller_id)
        voters = []
        voters_text = "unknown (the broker does not answer DescribeQuorum)"

    def role(node_id: int) -> str:
        return "active" if node_id == controller else "voter" if node_id in voters else ""

    nodes = sorted(cluster.brokers, key=lambda b: b.broker_id)
    lines = [
        f"{'ClusterId:':<18}{cluster.cluster_id}",
        f"{'ControllerId:':<18}{controller}",
        f"{'Voters:':<18}{voters_text}",
    ]
    fields = {
        "ClusterId": cluster.cluster_id,
        "ControllerId": controller,
        "Voters": voters if quorum is not None else None,
    }
    if controllers:
        lines.append(f"{'Controllers:':<18}{len(nodes)}")
        rows = [
            [str(n.broker_id), wire.endpoint(n.host, int(n.port)), role(int(n.broker_id))]
            for n in nodes
        ]
        return lines, fields, table(CONTROLLER_COLUMNS, rows, numeric=["NodeId"])
    fenced = [int(b.broker_id) for b in nodes if getattr(b, "is_fenced", False)]
    rows = [
        [
            str(b.broker_id),
            wire.endpoint(b.host, int(b.port)),
            b.rack if b.rack is not None else "-",
            "fenced" if int(b.broker_id) in fenced else "unfenced",
            role(int(b.broker_id)),
        ]
        for b in nodes
    ]
    fenced_text = (
        _ids(fenced) if lists_fenced else "unknown (the broker does not list fenced brokers)"
    )
    lines += [f"{'Brokers:':<18}{len(nodes)}", f"{'FencedBrokers:':<18}{fenced_text}"]
    fields["FencedBrokers"] = fenced if lists_fenced else None
    return lines, fields, table(BROKER_COLUMNS, rows, numeric=["BrokerId"])


def unregister(access: ClusterAccess, broker_id: int) -> None:
    response = access.send(
        UnregisterBrokerRequest(broker_id=BrokerId(broker_id)), f"unregister broker {broker_id}"
    )
    if response.error_code != ErrorCode.none:
        reason = wire.error_name(response.error_code)
        if response.error_message:
            reason += f": {response.error_message}"
        raise ToolError(f"cannot unregister broker {broker_id}: {reason}")


def run(args: argparse.Namespace) -> int:
    access = cluster_access(args)
    if args.unregister is not None:
        unregister(access, args.unregister)
        print(f"Broker {args.unregister} is no longer registered.")
        return 0
    lines, fields, nodes = overview(access)
    if not wants_json(args):
        print("\n".join(lines))
    show(args, nodes, fields)
    return 0
