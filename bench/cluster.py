"""Cluster figures with real processes: controller failover, metadata changes per second,
a new broker's catch-up.

Every node is a ``strom broker`` process on 127.0.0.1 (tests/cluster_process.py), with
its own log directories (fsync on); the client is confluent-kafka's AdminClient in this
process. Three combined nodes (``process.roles=broker,controller``) form the quorum.
Nothing here is a test: figures are printed, never asserted.

- failover: the active controller (DescribeCluster's controller id, the same from every
  node) is killed with ``kill -9`` after the cluster has idled 1 s. From the kill, a
  CreateTopics of a new one-partition topic is sent every 100 ms (at most 15 in flight),
  each through a new AdminClient bootstrapped on one of the two survivors in turn (a
  client made before the kill goes on naming the dead node as controller), with a short
  timeout (1 s, 0.5 s with the lower timeouts); the figure is the time from the kill to
  the first success, that is the first metadata change committed by the next active
  controller. The survivors' "is the active controller" log line gives the election
  part of it. Three settings: Kafka's default quorum and heartbeat timeouts (nothing
  overridden: election 1000 ms, fetch 2000, backoff 1000, request 2000, heartbeat 2000,
  session 9000); all of them ten times lower (100, 200, 100, 200, 200, 900); and those
  with the fetch timeout at 600 ms (see below).

  The floor is the survivors noticing. A follower stands for election once it has had no
  fetch answer from the leader for ``controller.quorum.fetch.timeout.ms``. An idle leader
  holds a follower's fetch up to 500 ms (the Raft core's fetch_max_wait_ms, which no
  controller.quorum.* property changes) and answers both followers on the same events,
  so they fetch in step: at the kill their last answer is 0 to 0.5 s old, and both time
  out together 1.5 to 2.0 s after the kill with Kafka's defaults. Timing out together,
  they often split the vote (each grants the other's pre-vote, then votes for itself)
  and try again after a backoff of up to 100 ms (Kafka's first). Then come the new
  leader's first commit, the survivor broker finding it (forwarding retries every 50
  ms), and the new client's connections and Metadata (the healthy-cluster figure printed
  beside it: the same CreateTopics through a new AdminClient, no fault).

  With the timeouts ten times lower the fetch timeout (200 ms) is shorter than the
  leader's 500 ms hold: followers time out on a healthy idle leader and the quorum
  changes leader every ~0.2 s (the idle second before the kill counts those changes),
  so the figure then measures a quorum that was electing anyway, not a failover. With
  the fetch timeout at 600 ms (above the hold) the quorum is stable; the floor is 0.1 to
  0.6 s and the vote. Election timeouts of 100 to 200 ms leave little room for the
  processes' scheduling on a busy machine: a vote request that takes 100 ms to be
  handled makes the round time out, and another round begins.
- metadata changes per second: topics of one partition, replication factor 3, on a
  fresh cluster each way: one CreateTopics request naming 1,000; 1,000 single-topic
  requests issued at once through one AdminClient (librdkafka pipelines them on its
  connection to the controller); one at a time, each awaited: 200 (``--sequential``),
  as each takes tens of milliseconds and more as topics accumulate. Kafka's default
  timeouts. AdminClient sends CreateTopics to the controller id of Metadata, the active
  controller, so nothing is forwarded. Every topic is checked with list_topics after.
  Each request is answered once its records are committed and applied on the active
  controller; with replication factor 3 every node creates a partition log per topic.
- catch-up: a metadata log of ~100,000 records: 100 topics of 1,000 partitions (one
  PartitionRecord each, plus the TopicRecords), 10 topics per CreateTopics, every
  partition assigned (replica assignment) to a fourth, broker-only node that registered
  and was then stopped with SIGSTOP; ``broker.session.timeout.ms`` is raised to an hour
  so it stays unfenced and may be named. The records are those of 100,000 partitions
  placed anywhere, but no node creates 100,000 partition logs (a 1,000-partition topic
  placed on the combined nodes takes 0.8-1 s to apply here, inside each node's event
  loop, and several seconds with other work on the machine). Then a new broker-only node
  (a new node id, an empty directory) is timed from its process start to its client port
  opening. A broker opens its client port only once the controller has unfenced it, at
  the first heartbeat whose metadata offset has reached the offset of the broker's own
  registration record, written after the 100,000 records (strom/broker/server.py
  ``start``, ``heartbeat`` in strom/cluster/quorum_controller.py): the port opening
  means the whole log was fetched and applied. list_topics on that broker is then
  checked to show every topic and partition (the time to its answer is printed too). The
  same on the cluster before the build gives the figure without the log; the bare
  interpreter start (``python -c pass``, ``python -m strom.cli.main broker --help``,
  ``import strom.broker.server``) is printed for context: nothing is subtracted. The
  node's log tells whether it was sent a metadata snapshot ("metadata snapshot received
  from the leader") or fetched the log; with Kafka's default
  ``metadata.log.max.record.bytes.between.snapshots`` (20 MB) this log (~7.5 MB) has
  none.

Other work on the machine moves these figures (a combined node is one Python process
doing quorum, controller and broker work on one event loop): the load average is printed
at the start and the end, and how busy the machine was just before each cluster started;
``--wait-quiet S`` waits up to S seconds before each for it to be under 20% busy.

Usage: python bench/cluster.py [--runs N] [--quick] [--only failover,commits,catchup]
       [--sequential N] [--wait-quiet S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster_process import FAST, Cluster, ClusterNode, NodeSpec  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

KAFKA_DEFAULTS: dict[str, str] = {}  # nothing overridden: Kafka's defaults
TEN_TIMES_LOWER = {
    "controller.quorum.election.timeout.ms": "100",
    "controller.quorum.fetch.timeout.ms": "200",
    "controller.quorum.election.backoff.max.ms": "100",
    "controller.quorum.request.timeout.ms": "200",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "900",
}
# Above the 500 ms a leader holds an idle follower's fetch (see the module docstring).
LOWER_FETCH_600 = {**TEN_TIMES_LOWER, "controller.quorum.fetch.timeout.ms": "600"}
QUIET = {"log_level": 2}  # librdkafka: no connection-refused lines on stderr
ATTEMPT_EVERY_S = 0.1
ATTEMPTS_IN_FLIGHT = 15  # more than a request timeout's worth of attempts
TOPICS = 1000
SEQUENTIAL = 200  # one at a time, 1,000 would take minutes (see the module docstring)
CATCHUP_TOPICS = 100
CATCHUP_PARTITIONS = 1000
CATCHUP_PER_REQUEST = 10
HOLDER = 4  # the broker every partition of the catch-up log is assigned to
# The holder is stopped (SIGSTOP) once registered: a long session keeps it unfenced, so
# it can still be named in assignments.
CATCHUP_SETTINGS = {"broker.session.timeout.ms": "3600000"}


def _admin(bootstrap: str, **extra: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **QUIET, **extra})


def _wait(condition: Callable[[], bool], timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def _settings(node: ClusterNode, settings: dict[str, str]) -> None:
    """The node's properties with the test helper's lowered timeouts taken out again."""
    for key in FAST:
        node.properties.pop(key, None)
    node.properties.update(settings)


def _busy(seconds: float = 0.5) -> float:
    """The fraction of the machine's CPU time spent busy over ``seconds`` (Linux)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


BUSY_SEEN: list[float] = []  # the machine's busy fraction before each cluster started
WAIT_QUIET_S = 0.0  # --wait-quiet


def _quiet() -> None:
    """Wait (up to --wait-quiet seconds) for the machine to be under 20% busy."""
    deadline = time.monotonic() + WAIT_QUIET_S
    busy = _busy()
    while busy > 0.2 and time.monotonic() < deadline:
        time.sleep(2)
        busy = _busy()
    BUSY_SEEN.append(busy)


@contextmanager
def _cluster(settings: dict[str, str]) -> Iterator[tuple[Cluster, Path]]:
    _quiet()
    root = Path(tempfile.mkdtemp(prefix="strom-bench-cluster-"))
    cluster = Cluster(root, [NodeSpec(i, "broker,controller") for i in (1, 2, 3)])
    for node in cluster.nodes.values():
        _settings(node, settings)
    try:
        cluster.start_all(timeout=60)
        for node in cluster.brokers:
            _wait(lambda n=node: _controller_of(n.bootstrap, brokers=3) > 0, 30, "3 brokers")
        yield cluster, root
    except BaseException:
        print(cluster.logs()[-4000:], file=sys.stderr)
        raise
    finally:
        cluster.kill_all()
        shutil.rmtree(root, ignore_errors=True)


def _controller_of(bootstrap: str, brokers: int = 0) -> int:
    """DescribeCluster's controller id from that node (-1 if it does not see ``brokers``)."""
    admin = _admin(bootstrap)  # referenced until the future resolves
    try:
        described = admin.describe_cluster(request_timeout=3).result(5)
    except (KafkaException, TimeoutError):
        return -1
    if len(described.nodes) < brokers or described.controller is None:
        return -1
    return described.controller.id


def _create(admin: AdminClient, topics: list[NewTopic], timeout: float = 120) -> None:
    futures = admin.create_topics(topics, operation_timeout=timeout, request_timeout=timeout)
    for future in futures.values():
        future.result(timeout + 10)


def _summary(values: list[float], unit: str = "s", scale: float = 1.0, fmt: str = ".2f") -> str:
    v = [x * scale for x in values]
    text = f"{statistics.median(v):{fmt}} {unit}"
    if len(v) > 1:
        text += f" ({min(v):{fmt}}-{max(v):{fmt}}, {len(v)} runs)"
    return text


# Failover ---------------------------------------------------------------------------------


def _log_time(line: str) -> float:
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def _elections(nodes: list[ClusterNode], start: float, end: float) -> list[tuple[float, int]]:
    """(wall-clock time, node id) of each 'is the active controller' log line in [start, end)."""
    found = []
    for node in nodes:
        for line in node.log_path.read_text(errors="replace").splitlines():
            if "is the active controller" in line and start <= _log_time(line) < end:
                found.append((_log_time(line), node.node_id))
    return sorted(found)


def _one_create(bootstrap: str, name: str, timeout: float) -> tuple[AdminClient, Any, list[float]]:
    admin = _admin(
        bootstrap,
        **{
            "socket.connection.setup.timeout.ms": 1000,
            "reconnect.backoff.ms": 100,  # those sent to the dead node: no busy retrying
            "reconnect.backoff.max.ms": 500,
        },
    )
    done_at: list[float] = []
    future = admin.create_topics(
        [NewTopic(name, 1, 1)], operation_timeout=timeout, request_timeout=timeout + 0.25
    )[name]
    future.add_done_callback(lambda _f: done_at.append(time.monotonic()))
    return admin, future, done_at


def _first_create(
    bootstraps: list[str], prefix: str, timeout: float, started: float | None = None
) -> tuple[float, int, Counter[str]]:
    """Seconds from ``started`` (default now) to the first CreateTopics success, the
    attempts made, the errors seen before."""
    limit = 60
    started = time.monotonic() if started is None else started
    pending: list[tuple[AdminClient, Any, list[float]]] = []
    errors: Counter[str] = Counter()
    successes: list[float] = []
    attempt = 0
    next_at = started
    while not successes:
        now = time.monotonic()
        if now - started > limit:
            raise RuntimeError(f"no CreateTopics succeeded within {limit} s: {dict(errors)}")
        if now >= next_at and len(pending) < ATTEMPTS_IN_FLIGHT:
            name = f"{prefix}-{attempt}"
            pending.append(_one_create(bootstraps[attempt % len(bootstraps)], name, timeout))
            attempt += 1
            next_at = now + ATTEMPT_EVERY_S
        still = []
        for admin, future, done_at in pending:
            if not future.done():
                still.append((admin, future, done_at))
                continue
            error = future.exception()
            if error is None:
                successes.append(done_at[0] if done_at else time.monotonic())
            else:
                errors[_error_name(error)] += 1
        pending = still
        time.sleep(0.002)
    return min(successes) - started, attempt, errors


def _error_name(error: BaseException) -> str:
    if isinstance(error, KafkaException) and error.args:
        return str(error.args[0].name())
    return type(error).__name__


def failover(settings: dict[str, str], runs: int) -> dict[str, Any]:
    times, elections, baselines, flaps = [], [], [], []
    notes: list[str] = []
    for run in range(runs):
        with _cluster(settings) as (cluster, _root):
            nodes = cluster.brokers
            admin = _admin(nodes[0].bootstrap)
            _create(admin, [NewTopic("warm", 1, 3)], 30)
            for i in range(5):  # the same measure on a healthy cluster
                seconds, _, _ = _first_create([nodes[i % 3].bootstrap], f"healthy-{i}", 1.0)
                baselines.append(seconds)
            idle_from = time.time()
            time.sleep(1.0)  # idle: the followers' fetches are held at the leader
            controllers = {_controller_of(n.bootstrap, brokers=3) for n in nodes}
            if len(controllers) != 1 or -1 in controllers:
                raise RuntimeError(f"the nodes name different controllers: {controllers}")
            victim = cluster.nodes[controllers.pop()]
            survivors = [n for n in nodes if n is not victim]
            timeout = 1.0 if settings is KAFKA_DEFAULTS else 0.5
            wall = time.time()
            started = time.monotonic()
            victim.kill()
            seconds, attempts, errors = _first_create(
                [n.bootstrap for n in survivors], f"failover-{run}", timeout, started
            )
            times.append(seconds)
            time.sleep(0.3)  # the winner's log line is written
            idle_changes = len(_elections(nodes, idle_from, wall))
            flaps.append(idle_changes)
            after = _elections(survivors, wall, wall + 120)
            if after:
                elections.append(after[0][0] - wall)
            notes.append(
                f"run {run + 1}: killed node {victim.node_id}; "
                + (
                    f"node {after[0][1]} active controller at {(after[0][0] - wall) * 1000:.0f} "
                    "ms; "
                    if after
                    else "no new active controller logged; "
                )
                + f"first CreateTopics answered at {seconds * 1000:.0f} ms "
                f"({attempts} sent)"
                + (f" (errors before: {dict(errors)})" if errors else "")
                + f"; {idle_changes} active-controller changes in the idle second before the kill"
                + (f", {len(after)} from the kill to 0.3 s after the answer" if after[1:] else "")
            )
    return {
        "times": times,
        "elections": elections,
        "baselines": baselines,
        "notes": notes,
        "flaps": flaps,
    }


# Metadata changes per second ----------------------------------------------------------------


def _all_exist(bootstrap: str, names: list[str]) -> None:
    def present() -> bool:
        topics = _admin(bootstrap).list_topics(timeout=30).topics
        return all(n in topics and len(topics[n].partitions) == 1 for n in names)

    _wait(present, 30, f"{len(names)} topics in list_topics", every=0.5)


def commits(way: str, count: int) -> float:
    with _cluster(KAFKA_DEFAULTS) as (cluster, _root):
        bootstrap = cluster.bootstrap()
        admin = _admin(bootstrap)
        _create(admin, [NewTopic("warm", 1, 3)], 30)  # the client knows the controller
        names = [f"{way}-{i}" for i in range(count)]
        started = time.monotonic()
        if way == "one-request":
            _create(admin, [NewTopic(n, 1, 3) for n in names])
        elif way == "in-flight":
            futures = [
                admin.create_topics([NewTopic(n, 1, 3)], operation_timeout=120)[n] for n in names
            ]
            for future in futures:
                future.result(130)
        else:
            for name in names:
                _create(admin, [NewTopic(name, 1, 3)], 30)
        elapsed = time.monotonic() - started
        _all_exist(cluster.brokers[0].bootstrap, names)
    return count / elapsed


# Catch-up of a new broker ----------------------------------------------------------------


def _bare_starts() -> dict[str, float]:
    out: dict[str, float] = {}
    for label, args in {
        "python -c pass": ["-c", "pass"],
        "python -m strom.cli.main broker --help": ["-m", "strom.cli.main", "broker", "--help"],
        "python -c 'import strom.broker.server'": ["-c", "import strom.broker.server"],
    }.items():
        times = []
        for _ in range(3):
            started = time.monotonic()
            subprocess.run([sys.executable, *args], check=True, capture_output=True)
            times.append(time.monotonic() - started)
        out[label] = statistics.median(times)
    return out


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _broker_node(cluster: Cluster, root: Path, node_id: int) -> ClusterNode:
    """A broker-only node of ``cluster``, not yet started."""
    voters = next(iter(cluster.nodes.values())).properties["controller.quorum.voters"]
    node = ClusterNode(root, node_id, "broker", voters, None, {})
    _settings(node, CATCHUP_SETTINGS)
    return node


def _end(node: ClusterNode) -> None:
    if node.proc is None:
        return
    try:
        node.resume()
        node.stop(30)  # controlled shutdown: fenced at once
    except (OSError, subprocess.TimeoutExpired):
        node.kill()


def _new_broker(
    cluster: Cluster, root: Path, node_id: int, topics: int, partitions: int
) -> dict[str, Any]:
    """Start a new broker-only node; seconds to its client port and to a full Metadata."""
    node = _broker_node(cluster, root, node_id)
    started = time.monotonic()
    node.launch()
    try:
        assert node.port is not None
        while not _port_open(node.port):
            if not node.alive():
                raise RuntimeError(f"node {node_id} exited:\n{node.logs()}")
            if time.monotonic() - started > 600:
                raise RuntimeError(f"node {node_id} did not open its port:\n{node.logs()}")
            time.sleep(0.005)
        port_s = time.monotonic() - started
        admin = _admin(node.bootstrap)
        metadata = admin.list_topics(timeout=60)
        metadata_s = time.monotonic() - started
        ours = [t for n, t in metadata.topics.items() if n.startswith("many-")]
        seen = (len(ours), sum(len(t.partitions) for t in ours))
        if seen != (topics, topics * partitions):
            raise RuntimeError(f"node {node_id} lists {seen} topics/partitions once listening")
        log = node.log_path.read_text(errors="replace")
        snapshot = "metadata snapshot received from the leader" in log
        started_in = re.search(r"started in ([0-9.]+)s", log)
    finally:
        _end(node)
    return {
        "port": port_s,
        "metadata": metadata_s,
        "snapshot": snapshot,
        "started_in": float(started_in.group(1)) if started_in else float("nan"),
    }


def _metadata_log(node: ClusterNode) -> tuple[int, list[str]]:
    directory = node.data_dir / "__cluster_metadata-0"
    size = sum(f.stat().st_size for f in directory.iterdir() if f.suffix == ".log")
    snapshots = sorted(f.name for f in directory.iterdir() if f.suffix == ".checkpoint")
    return size, snapshots


def catch_up(runs: int) -> dict[str, Any]:
    with _cluster(CATCHUP_SETTINGS) as (cluster, root):
        holder = _broker_node(cluster, root, HOLDER)
        try:
            holder.start(60)
            empty = _new_broker(cluster, root, HOLDER + 1, 0, 0)
            holder.pause()  # registered and unfenced (long session), hosts nothing
            admin = _admin(cluster.bootstrap())
            started = time.monotonic()
            for first in range(0, CATCHUP_TOPICS, CATCHUP_PER_REQUEST):
                topics = [
                    NewTopic(
                        f"many-{i}",
                        CATCHUP_PARTITIONS,
                        replica_assignment=[[HOLDER]] * CATCHUP_PARTITIONS,
                    )
                    for i in range(first, first + CATCHUP_PER_REQUEST)
                ]
                _create(admin, topics, timeout=300)
            build_s = time.monotonic() - started
            leader = cluster.nodes[_controller_of(cluster.brokers[0].bootstrap)]
            log_bytes, snapshots = _metadata_log(leader)
            elections = len(_elections(list(cluster.nodes.values()), 0, float("inf")))
            results = [
                _new_broker(cluster, root, HOLDER + 2 + run, CATCHUP_TOPICS, CATCHUP_PARTITIONS)
                for run in range(runs)
            ]
        finally:
            if holder.proc is not None:
                holder.kill()
    return {
        "empty": empty,
        "results": results,
        "build_s": build_s,
        "partitions": CATCHUP_TOPICS * CATCHUP_PARTITIONS,
        "log_bytes": log_bytes,
        "snapshots": snapshots,
        "elections": elections,
    }


# Main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each figure")
    parser.add_argument("--quick", action="store_true", help="one run of each")
    parser.add_argument("--only", default="failover,commits,catchup")
    parser.add_argument(
        "--sequential", type=int, default=SEQUENTIAL, help="topics created one at a time"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="before each cluster, wait up to this many seconds for the machine to be idle",
    )
    args = parser.parse_args()
    global WAIT_QUIET_S
    WAIT_QUIET_S = args.wait_quiet
    runs = 1 if args.quick else args.runs
    only = set(args.only.split(","))
    table: list[tuple[str, str]] = []
    print(
        "Strom cluster: 3 combined nodes (broker,controller), real processes on 127.0.0.1; "
        f"load average {os.getloadavg()[0]:.1f}"
    )

    if "failover" in only:
        for label, settings in (
            ("Kafka's default timeouts", KAFKA_DEFAULTS),
            ("timeouts ten times lower", TEN_TIMES_LOWER),
            ("ten times lower, fetch timeout 600 ms", LOWER_FETCH_600),
        ):
            result = failover(settings, runs)
            for note in result["notes"]:
                print(f"  failover, {label}, {note}")
            rows = [(f"failover, {label}: kill -9 to first CreateTopics", result["times"])]
            if result["elections"]:
                rows.append(("  kill to the new active controller's log line", result["elections"]))
            rows.append(("  healthy cluster: the same CreateTopics", result["baselines"]))
            for name, values in rows:
                table.append((name, _summary(values, "ms", 1000, ".0f")))
                print(f"{name}: {table[-1][1]}", flush=True)
            if any(result["flaps"]):
                table.append(
                    (
                        "  active-controller changes in the idle second before the kill",
                        ", ".join(str(n) for n in result["flaps"]),
                    )
                )

    if "commits" in only:
        for way, count, label in (
            ("one-request", TOPICS, f"one CreateTopics of {TOPICS:,} topics"),
            ("in-flight", TOPICS, f"{TOPICS:,} single-topic CreateTopics at once"),
            ("sequential", args.sequential, f"{args.sequential:,} CreateTopics one at a time"),
        ):
            rates = [commits(way, count) for _ in range(runs)]
            figure = f"topics/s (1 partition, RF 3), {label}"
            table.append((figure, _summary(rates, "/s", 1, ",.0f")))
            print(f"{figure}: {table[-1][1]}", flush=True)

    if "catchup" in only:
        bare = _bare_starts()
        result = catch_up(runs)
        for label, seconds in bare.items():
            table.append((f"bare start: {label}", f"{seconds:.2f} s"))
        empty = result["empty"]
        table.append(
            (
                "new broker on an empty cluster: start to client port open",
                f"{empty['port']:.2f} s (node's own 'started in' {empty['started_in']:.2f} s)",
            )
        )
        records = result["partitions"] + CATCHUP_TOPICS
        print(
            f"catch-up log: {CATCHUP_TOPICS} topics x {CATCHUP_PARTITIONS} partitions, RF 1 on "
            f"broker {HOLDER} "
            f"(~{records:,} records, {result['log_bytes'] / 1e6:.1f} MB of metadata log, "
            f"snapshots: {result['snapshots'] or 'none'}), built in {result['build_s']:.1f} s "
            f"({result['partitions'] / result['build_s']:,.0f} partitions/s); "
            f"active-controller log lines (1: no change of leader): {result['elections']}"
        )
        runs_ = result["results"]
        how = {"snapshot" if r["snapshot"] else "log fetch" for r in runs_}
        table.append(
            (
                f"new broker, ~{records // 1000}k-record metadata log ({'/'.join(sorted(how))}): "
                "start to client port open (unfenced)",
                _summary([r["port"] for r in runs_]),
            )
        )
        table.append(
            (
                "  same, to its list_topics showing every partition",
                _summary([r["metadata"] for r in runs_]),
            )
        )
        table.append(
            (
                "  the node's own 'started in' (after interpreter start and imports)",
                _summary([r["started_in"] for r in runs_]),
            )
        )

    width = max(len(name) for name, _ in table)
    print(
        f"\nload average at the end {os.getloadavg()[0]:.1f} (1 min); the machine was "
        f"{min(BUSY_SEEN):.0%}-{max(BUSY_SEEN):.0%} busy before the clusters started"
    )
    for name, value in table:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
