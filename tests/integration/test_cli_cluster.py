"""`strom metadata-quorum` and `strom cluster` run as a user runs them, against real nodes.

A single node (the module's broker), three combined nodes, and three controllers with
two brokers, one of which is stopped (SIGSTOP) until the controller fences it. Each
test runs the `strom` command as a subprocess and checks its output and exit code;
timings are never asserted.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker_process import free_port
from cli_helpers import ok, one_line_error, strom, table_rows
from cluster_process import Cluster, NodeSpec
from kafka_helpers import wait_until

VOTERS = {"1", "2", "3"}
REPLICATION_HEADER = [
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
]


def fields(text: str) -> dict[str, str]:
    """``Name: value`` lines (before any table) as a dict."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.isalnum():
            out[name] = value.strip()
    return out


def status(endpoint: str, option: str = "--bootstrap-server") -> dict[str, str]:
    return fields(ok(strom("metadata-quorum", option, endpoint, "describe", "--status")).stdout)


def replication(endpoint: str, *extra: str, option: str = "--bootstrap-server") -> list[list[str]]:
    out = ok(strom("metadata-quorum", option, endpoint, "describe", "--replication", *extra))
    rows = table_rows(out.stdout)
    assert out.stdout.count("NodeId") == 1 and all(h in out.stdout for h in REPLICATION_HEADER)
    return rows


def cluster_view(bootstrap: str) -> tuple[dict[str, str], list[list[str]]]:
    out = ok(strom("cluster", "--bootstrap-server", bootstrap)).stdout
    return fields(out), table_rows(out)


def settled(bootstrap: str, voters: int, observers: int = 0) -> bool:
    """The leader knows every voter and observer and how far each has fetched."""
    result = strom("metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--replication")
    if result.returncode != 0:
        return False
    rows = table_rows(result.stdout)
    statuses = [row[6] for row in rows]
    return (
        len(rows) == voters + observers
        and statuses.count("Observer") == observers
        and all(row[2] != "-1" for row in rows)
    )


def test_single_node_status_replication_and_cluster(broker) -> None:
    info = status(broker.bootstrap)
    leader = info["LeaderId"]
    assert leader.isdigit()
    assert len(info["ClusterId"]) == 22
    assert int(info["LeaderEpoch"]) >= 1 and int(info["HighWatermark"]) >= 1
    assert info["MaxFollowerLag"] == "0" and info["MaxFollowerLagTimeMs"] == "0"
    assert info["CurrentVoters"] == f'[{{"id": {leader}}}]'
    assert info["CurrentObservers"] == "[]"

    rows = replication(broker.bootstrap)
    assert len(rows) == 1
    node_id, directory_id, end_offset, lag, *_, state = rows[0]
    assert (node_id, lag, state) == (leader, "0", "Leader")
    assert len(directory_id) == 22 and int(end_offset) >= int(info["HighWatermark"])
    human = replication(broker.bootstrap, "--human-readable")
    assert human[0][4].endswith(" ms ago") and human[0][5].endswith(" ms ago")
    # Wall-clock times on the wire: an age of minutes at most, not the epoch's.
    assert 0 <= int(human[0][4].split()[0]) < 600_000

    overview, brokers = cluster_view(broker.bootstrap)
    assert overview["ClusterId"] == info["ClusterId"]
    assert overview["ControllerId"] == leader and overview["Voters"] == f"[{leader}]"
    assert overview["FencedBrokers"] == "[]"
    assert brokers == [[leader, broker.bootstrap, "-", "unfenced", "active"]]


def test_unreachable_endpoint_and_bad_arguments() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    unreachable = [
        ("metadata-quorum", "--bootstrap-server", nowhere, "describe", "--status"),
        ("metadata-quorum", "--bootstrap-controller", nowhere, "describe", "--replication"),
        ("cluster", "--bootstrap-server", nowhere),
    ]
    bad = [
        ("metadata-quorum", "--bootstrap-server", nowhere, "describe"),
        ("metadata-quorum", "--bootstrap-server", nowhere, "describe", "--status", "--replication"),
        ("metadata-quorum", "--bootstrap-server", nowhere, "--bootstrap-controller", nowhere),
        ("metadata-quorum", "--bootstrap-server", nowhere),
        ("metadata-quorum", "--bootstrap-server", nowhere, "list"),
        ("cluster", "--bootstrap-server", nowhere, "--bogus"),
        ("configs", "--bootstrap-server", nowhere, "--bootstrap-controller", nowhere, "--describe"),
        ("reassign-partitions", "--bootstrap-controller", nowhere, "--verify"),
        ("metadata-quorum", "describe", "--status", "--human-readable"),
    ]
    with ThreadPoolExecutor(8) as pool:  # each is a process start: run them side by side
        results = list(pool.map(lambda args: strom(*args), [*unreachable, *bad]))
    for result in results[: len(unreachable)]:
        assert nowhere in one_line_error(result, 1)
    for result in results[len(unreachable) :]:
        one_line_error(result, 2)
    both, verify_at_controller = results[-3:-1]
    assert "not allowed with argument" in one_line_error(both, 2)
    assert "--cancel and --list only" in one_line_error(verify_at_controller, 2)
    assert "--human-readable" in one_line_error(results[-1], 2)
    assert "HOST:PORT" in one_line_error(strom("cluster", "--bootstrap-server", "nope"), 1)


def test_three_combined_nodes(tmp_path: Path) -> None:
    cluster = Cluster.combined(tmp_path)
    try:
        cluster.start_all()
        first = cluster.nodes[1]
        wait_until(lambda: settled(first.bootstrap, voters=3), 20, "three caught-up voters")

        info = status(first.bootstrap)
        leader = info["LeaderId"]
        assert leader in VOTERS
        assert info["CurrentVoters"] == '[{"id": 1}, {"id": 2}, {"id": 3}]'
        assert info["CurrentObservers"] == "[]"
        assert int(info["MaxFollowerLag"]) >= 0

        rows = replication(cluster.nodes[2].bootstrap)
        assert sorted(row[0] for row in rows) == ["1", "2", "3"]
        assert [row[6] for row in rows].count("Leader") == 1
        assert rows[0][0] in VOTERS and rows[0][6] == "Leader"  # the leader comes first
        assert {row[6] for row in rows[1:]} == {"Follower"}

        # A controller listener answers too (a follower's forwards to the leader), and
        # its DescribeCluster gives the same cluster id (KIP-919).
        follower = next(n for n in cluster.nodes.values() if str(n.node_id) != leader)
        controller = f"127.0.0.1:{follower.controller_port}"
        by_controller = status(controller, "--bootstrap-controller")
        assert by_controller["LeaderId"] in VOTERS  # under load, an election may intervene
        assert by_controller["ClusterId"] == info["ClusterId"] != "null"
        assert len(replication(controller, option="--bootstrap-controller")) == 3
        # The other tools given a follower find the active controller and ask it.
        with ThreadPoolExecutor(2) as pool:
            controllers, reassignments = pool.map(
                lambda args: ok(strom(*args, "--bootstrap-controller", controller)).stdout,
                [("cluster",), ("reassign-partitions", "--list")],
            )
        assert fields(controllers)["Controllers"] == "3"
        assert sorted(row[0] for row in table_rows(controllers)) == ["1", "2", "3"]
        assert reassignments.strip() == "No partition reassignments found."

        overview, brokers = cluster_view(cluster.bootstrap())
        assert overview["ClusterId"] == info["ClusterId"]
        active = overview["ControllerId"]
        assert active in VOTERS
        assert overview["Voters"] == "[1, 2, 3]" and overview["Brokers"] == "3"
        assert [row[0] for row in brokers] == ["1", "2", "3"]
        assert {row[1] for row in brokers} == {n.bootstrap for n in cluster.nodes.values()}
        assert {row[0]: row[4] for row in brokers} == {
            n: "active" if n == active else "voter" for n in VOTERS
        }
        assert {row[3] for row in brokers} == {"unfenced"}
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()


def test_three_controllers_two_brokers_and_a_fenced_broker(tmp_path: Path) -> None:
    specs = [NodeSpec(i, "controller") for i in (1, 2, 3)]
    specs += [NodeSpec(4, "broker"), NodeSpec(5, "broker")]
    cluster = Cluster(tmp_path, specs)
    cluster.nodes[4].properties["broker.rack"] = "rack-a"
    cluster.nodes[5].properties["broker.rack"] = "rack-b"
    try:
        cluster.start_all()
        four, five = cluster.nodes[4], cluster.nodes[5]
        wait_until(
            lambda: settled(four.bootstrap, voters=3, observers=2), 20, "voters and observers"
        )
        rows = replication(four.bootstrap)
        assert sorted(row[0] for row in rows if row[6] == "Observer") == ["4", "5"]
        assert [row[6] for row in rows].count("Leader") == 1
        assert rows[0][0] in VOTERS and rows[0][6] == "Leader"
        info = status(five.bootstrap)
        assert info["LeaderId"] in VOTERS
        assert info["CurrentObservers"] == '[{"id": 4}, {"id": 5}]'

        def brokers_listed() -> list[list[str]]:
            return cluster_view(four.bootstrap)[1]

        wait_until(lambda: len(brokers_listed()) == 2, 15, "both brokers registered")
        overview, brokers = cluster_view(four.bootstrap)
        assert overview["ControllerId"] in VOTERS  # a controller-only node
        assert overview["Voters"] == "[1, 2, 3]" and overview["FencedBrokers"] == "[]"
        assert brokers == [
            ["4", four.bootstrap, "rack-a", "unfenced", ""],
            ["5", five.bootstrap, "rack-b", "unfenced", ""],
        ]

        five.pause()  # no more heartbeats: fenced after broker.session.timeout.ms
        deadline = time.monotonic() + 15
        while True:
            overview, brokers = cluster_view(four.bootstrap)
            if overview["FencedBrokers"] == "[5]" or [r[0] for r in brokers] == ["4"]:
                break
            assert time.monotonic() < deadline, "broker 5 never fenced"
            time.sleep(0.2)
        assert ["4", four.bootstrap, "rack-a", "unfenced", ""] in brokers
        assert all(row[3] == "fenced" for row in brokers if row[0] == "5")
        five.resume()
        wait_until(
            lambda: cluster_view(four.bootstrap)[0]["FencedBrokers"] == "[]", 15, "5 unfenced"
        )
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.kill_all()
