"""A real Strom cluster: several node processes on free ports of 127.0.0.1.

Each ``ClusterNode`` is a ``strom broker`` process with a controller listener beside
its client one (combined nodes), a controller listener only (``roles="controller"``)
or a client listener only (``roles="broker"``), configured with Kafka's property
names and nothing else: the nodes format themselves and agree on a cluster id.
``start_all`` launches every process at once (a quorum needs a majority before any
broker opens its client port) and waits for each to listen. Quorum and heartbeat
timeouts are lowered (``FAST``) so that elections and fencing take a fraction of a
second, unless a test passes its own.

A test may put something in front of each listener (``front``: a fault-injecting
proxy, say): the node still listens on its own port, but the address it advertises and
the one in ``controller.quorum.voters`` are the port ``front`` gives, so every
connection *to* the node goes through it. By default nothing is in front.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_process import free_port

FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "600",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1500",
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
        voters: str,
        controller_port: int | None,
        overrides: dict[str, str],
        front: Front | None = None,
    ) -> None:
        self.node_id = node_id
        self.roles = roles
        self.data_dir = root / f"node{node_id}"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = root / f"node{node_id}.log"
        self.port = free_port() if "broker" in roles else None
        self.controller_port = controller_port
        listeners = []
        if self.port is not None:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.port}")
        if controller_port is not None:
            listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
        self.properties = {
            "process.roles": roles,
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
        }
        # The port other nodes and clients are told to use for the client listener.
        self.advertised_port = self.port
        if front is not None and self.port is not None:
            self.advertised_port = front(node_id, "PLAINTEXT", self.port)
            self.properties["advertised.listeners"] = (
                f"PLAINTEXT://127.0.0.1:{self.advertised_port}"
            )
        self.properties.update(overrides)
        self.proc: subprocess.Popen[bytes] | None = None

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
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log)

    def wait_listening(self, timeout: float = 30.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"node {self.node_id} exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.listen_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"node {self.node_id} did not start within {timeout}s:\n{self.logs()}")

    def start(self, timeout: float = 30.0) -> None:
        self.launch()
        self.wait_listening(timeout)

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

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
        controller_ports = {s.node_id: free_port() for s in specs if "controller" in s.roles}
        shown = {
            i: front(i, "CONTROLLER", p) if front is not None else p
            for i, p in controller_ports.items()
        }
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(shown.items()))
        settings = {**FAST, **(overrides or {})}
        self.nodes = {
            s.node_id: ClusterNode(
                root, s.node_id, s.roles, voters, controller_ports.get(s.node_id), settings, front
            )
            for s in specs
        }

    @classmethod
    def combined(cls, root: Path, count: int = 3, **kwargs: Any) -> Cluster:
        return cls(root, [NodeSpec(i, "broker,controller") for i in range(1, count + 1)], **kwargs)

    @property
    def brokers(self) -> list[ClusterNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers if n.alive())

    def start_all(self, timeout: float = 40.0) -> None:
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            node.wait_listening(timeout)

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
