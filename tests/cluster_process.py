"""A real Strom cluster: several node processes on free ports of 127.0.0.1.

Each ``ClusterNode`` is a ``strom broker`` process with a controller listener beside
its client one (combined nodes), a controller listener only (``roles="controller"``)
or a client listener only (``roles="broker"``), configured with Kafka's property
names and nothing else: the nodes format themselves and agree on a cluster id.
``start_all`` launches every process at once (a quorum needs a majority before any
broker opens its client port) and waits for each to listen. Quorum and heartbeat
timeouts are lowered (``FAST``) so that elections and fencing take a fraction of a
second, unless a test passes its own.

Ports come from ``free_port()``; a node that cannot bind one (another process took it
after it was picked) exits saying so, and is started again: at the cluster's first start
every node, with a new port in place of the one taken (the voters and the addresses
change with it, the nodes' fresh data is wiped), later with the same ports, which the
other nodes and the clients know, once they are let go.

A test may put something in front of each listener (``front``: a fault-injecting
proxy, say): the node still listens on its own port, but the address it advertises and
the one in ``controller.quorum.voters`` are the port ``front`` gives, so every
connection *to* the node goes through it. By default nothing is in front.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_process import check_started, free_port, wait_started

FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "600",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
    # A new group's first rebalance does not wait 3 s for more members, as in Kafka's own
    # test brokers; a test of the delay sets its own.
    "group.initial.rebalance.delay.ms": "0",
    # 5 partitions for the group and transaction logs, not 50 (each of 3 replicas, made
    # when a test first uses a group or a transactional id), as broker_process.py's
    # TEST_DEFAULTS have them; a test may set its own.
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}

Front = Callable[[int, str, int], int]
"""(node id, listener name, port the node listens on) -> the port everyone else is given."""


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    roles: str  # "broker,controller", "controller" or "broker"


class ClusterNode:
    def __init__(
        self,
        root: Path,
        node_id: int,
        roles: str,
        controller_port: int | None,
        overrides: dict[str, str],
        front: Front | None = None,
    ) -> None:
        self.node_id = node_id
        self.roles = roles
        self.data_dir = root / f"node{node_id}"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = root / f"node{node_id}.log"
        self.overrides = overrides
        self.front = front
        self.port = free_port() if "broker" in roles else None
        self.controller_port = controller_port
        # The ports other nodes and clients are told to use (``front``'s, when given).
        self.advertised_port = self.shown(self.port, "PLAINTEXT")
        self.shown_controller_port = self.shown(controller_port, "CONTROLLER")
        self.properties: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = False  # once started, its ports are known to the others: kept
        self._output_from = 0

    def shown(self, port: int | None, listener: str) -> int | None:
        if port is None or self.front is None:
            return port
        return self.front(self.node_id, listener, port)

    def configure(self, voters: str) -> None:
        """The node's properties for these voters and its ports (a test's own additions to
        ``properties`` stay when a port changes)."""
        listeners = []
        if self.port is not None:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.port}")
        if self.controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        addresses = {"controller.quorum.voters": voters, "listeners": ",".join(listeners)}
        if self.advertised_port != self.port:
            addresses["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.advertised_port}"
        if self.properties:
            self.properties.update({k: v for k, v in addresses.items() if k not in self.overrides})
            return
        self.properties = {
            "process.roles": self.roles,
            "node.id": str(self.node_id),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **addresses,
            **self.overrides,
        }

    @property
    def is_broker(self) -> bool:
        return self.port is not None

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, f"node {self.node_id} has no client listener"
        return f"127.0.0.1:{self.port}"

    @property
    def listen_port(self) -> int:
        port = self.port if self.port is not None else self.controller_port
        assert port is not None
        return port

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "strom.cli.main", "broker"]
        for key, value in self.properties.items():
            args += ["--override", f"{key}={value}"]
        return args

    def launch(self) -> None:
        """Start the process; its output goes on at the end of the node's log, after a
        line marking the launch (a restarted node's earlier lives stay above it)."""
        with open(self.log_path, "ab") as log:
            now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
            log.write(f"{now} === node {self.node_id} launched\n".encode())
            log.flush()
            self._output_from = log.tell()
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log)

    def check_started(self) -> bool | int:
        """True once started, False not yet, the port it exited on when that was taken."""
        assert self.proc is not None
        try:
            started = check_started(self.proc, self.log_path, self._output_from)
        except RuntimeError as exc:
            raise RuntimeError(f"node {self.node_id} {exc}") from None
        if started is True:
            self.started = True
        return started

    def wait_listening(self, timeout: float = 60.0) -> bool | int:
        """Wait until the node has started (True), or it exited because a port of its was
        taken (that port)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        started = wait_started(self.proc, self.log_path, self._output_from, deadline)
        if started is False:
            raise RuntimeError(
                f"node {self.node_id} did not start within {timeout}s:\n{self.logs()}"
            )
        if started is True:
            self.started = True
        return started

    def start(self, timeout: float = 60.0) -> None:
        """Start (or restart) the node with the ports it has, waiting for a taken one to
        be let go (a broker's client port not yet known to anyone is picked again)."""
        deadline = time.monotonic() + timeout
        while True:
            self.launch()
            taken = self.wait_listening(max(0.0, deadline - time.monotonic()))
            if taken is True:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.node_id}: port {taken} stayed in use")
            if not self.started and taken == self.port and self.front is None:
                self.port = self.advertised_port = free_port()
                self.configure(self.properties["controller.quorum.voters"])
            else:
                time.sleep(0.2)

    def logs(self) -> str:
        """The end of the node's output, to show with a failure."""
        return self.output()[-6000:]

    def output(self) -> str:
        """Everything the node wrote, to look for a line in (its end may not hold it)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def lines_about(self, *needles: str, last: int = 200) -> list[str]:
        """The last ``last`` lines of everything the node wrote, in all its lives, that
        hold one of ``needles`` or mark a launch."""
        wanted = (*needles, "=== node ")
        lines = [line for line in self.output().splitlines() if any(n in line for n in wanted)]
        return lines[-last:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


class Cluster:
    def __init__(
        self,
        root: Path,
        specs: list[NodeSpec],
        overrides: dict[str, str] | None = None,
        front: Front | None = None,
    ) -> None:
        settings = {**FAST, **(overrides or {})}
        self.nodes = {
            s.node_id: ClusterNode(
                root,
                s.node_id,
                s.roles,
                free_port() if "controller" in s.roles else None,
                settings,
                front,
            )
            for s in specs
        }
        self._configure()

    def _configure(self) -> None:
        voters = ",".join(
            f"{n.node_id}@127.0.0.1:{n.shown_controller_port}"
            for n in sorted(self.nodes.values(), key=lambda n: n.node_id)
            if n.controller_port is not None
        )
        for node in self.nodes.values():
            node.configure(voters)

    def _replace_port(self, taken: int) -> None:
        """A new port in place of ``taken`` (which a node could not bind at the first start),
        and every node's configuration with it."""
        for node in self.nodes.values():
            if node.port == taken:
                node.port = free_port()
                node.advertised_port = node.shown(node.port, "PLAINTEXT")
                break
            if node.controller_port == taken:
                node.controller_port = free_port()
                node.shown_controller_port = node.shown(node.controller_port, "CONTROLLER")
                break
        else:
            raise RuntimeError(f"port {taken} was in use and belongs to no node")
        self._configure()

    @classmethod
    def combined(cls, root: Path, count: int = 3, **kwargs: Any) -> Cluster:
        return cls(root, [NodeSpec(i, "broker,controller") for i in range(1, count + 1)], **kwargs)

    @property
    def brokers(self) -> list[ClusterNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers if n.alive())

    def start_all(self, timeout: float = 90.0) -> None:
        """Launch every node at once and wait until each has started. A node that exits
        because a port was taken is started again: at the first start with a new port in
        place of it, every node with it (killed, their fresh data wiped, launched again),
        later alone with the ports it has once that port is let go."""
        first = not any(n.started for n in self.nodes.values())
        deadline = time.monotonic() + timeout
        for node in self.nodes.values():
            node.launch()
        waiting = set(self.nodes)
        while waiting:
            for node_id in sorted(waiting):
                node = self.nodes[node_id]
                started = node.check_started()
                if started is True:
                    waiting.discard(node_id)
                elif started is not False:  # exited: the port ``started`` was taken
                    if not first:
                        time.sleep(0.2)
                        node.launch()
                        continue
                    self.kill_all()
                    self._replace_port(started)
                    for other in self.nodes.values():
                        shutil.rmtree(other.data_dir)
                        other.data_dir.mkdir()
                        other.launch()
                    waiting = set(self.nodes)
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"nodes {sorted(waiting)} did not start within {timeout}s:\n{self.logs()}"
                )
            time.sleep(0.05)

    def kill_all(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None and node.alive():
                try:
                    node.resume()
                except OSError:
                    pass
                node.kill()

    def logs(self) -> str:
        return "\n".join(f"--- node {i}\n{n.logs()}" for i, n in self.nodes.items())

    def lines_about(self, *needles: str, last: int = 200) -> str:
        """Each node's lines holding one of ``needles`` (``ClusterNode.lines_about``), to
        show with a failure that the end of the logs may not explain."""
        return "\n".join(
            f"--- node {i}: lines with {' or '.join(map(repr, needles))}\n"
            + "\n".join(n.lines_about(*needles, last=last))
            for i, n in self.nodes.items()
        )
