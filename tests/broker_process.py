"""A real Strom broker in a child process, on a free port, with its data in a temp dir.

Tests drive it with real Kafka clients. ``restart()``, ``stop()`` (SIGTERM) and
``kill()`` (SIGKILL) keep the same port and data directory.

A port from ``free_port()`` is free when it is picked, not when the broker binds it a
moment later: another process (another test run on the machine) may take it between the
two. The broker then exits saying which address was in use (``bind_failure``), and
``start`` tries again: a first start with a new port in place of that one (every
override naming it is changed too), a restart with the same ports, which its clients
know, until they are free again.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_ports = random.Random(os.getpid() ^ time.time_ns())


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing holds now, for a broker about to bind it.

    It is taken below the kernel's ephemeral range: the local ports of client
    connections come from that range, so one of the suite's many connections cannot take
    the port between this check and the broker's bind (a port from ``bind(0)`` could be,
    and the broker then failed to start). A port is handed out once per process.
    """
    low, high = 10000, _ephemeral_low() - 1
    for _ in range(1000):
        port = _ports.randint(low, high) if high > low else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier test
            port = s.getsockname()[1]
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


_BIND_FAILURE = re.compile(r"bind on address \('[^']*', (\d+)\)\S*: address already in use")


def bind_failure(output: str) -> int | None:
    """The port a node could not bind, from what it wrote as it exited (``strom broker:
    cannot start: [Errno 98] error while attempting to bind on address ('127.0.0.1',
    PORT): address already in use``); None when it says no such thing."""
    found = _BIND_FAILURE.findall(output)
    return int(found[-1]) if found else None


_STARTED = re.compile(r"Strom node \d+ \([^)]*\) started in")


def check_started(proc: subprocess.Popen[bytes], log_path: Path, offset: int) -> bool | int:
    """Whether a node has written its "Strom node N (roles) started in ...: listening on
    ..." line, which comes once every listener is bound and serving, in its output from
    ``offset`` on (a port that answers is no sign: another process may be listening on
    it). True once written, False not yet; the port when the node exited because that
    port was in use. Any other exit raises, with the node's output."""
    exited = proc.poll() is not None
    with open(log_path, "rb") as log:
        log.seek(offset)
        output = log.read().decode(errors="replace")
    if _STARTED.search(output):
        return True
    if exited:
        taken = bind_failure(output)
        if taken is not None:
            return taken
        raise RuntimeError(f"exited with {proc.returncode}:\n{output[-5000:]}")
    return False


def wait_started(
    proc: subprocess.Popen[bytes], log_path: Path, offset: int, deadline: float
) -> bool | int:
    """``check_started`` until it is not False or the deadline passes."""
    while True:
        started = check_started(proc, log_path, offset)
        if started is not False or time.monotonic() >= deadline:
            return started
        time.sleep(0.05)


def served_url(banner: str) -> str:
    """The URL in a service's first line ("Strom REST proxy on http://127.0.0.1:PORT/ for
    ..."): started with port 0, it names the port the service bound, which no other
    process can take between a pick and a bind."""
    found = re.search(r" on (https?://\S+?)/? for ", banner)
    assert found is not None, f"not a service's first line: {banner!r}"
    return found.group(1)


def replace_port(value: str, old: int, new: int) -> str:
    """``value`` with every ``:old`` port (``host:old``, ``//host:old``) made ``:new``."""
    return re.sub(rf"(?<=:){old}(?!\d)", str(new), value)


# Where the tests' brokers differ from a broker's defaults, unless a test says otherwise,
# as in Kafka's own test brokers: a new group's first rebalance does not wait 3 s for
# more members (a test of that delay sets its own); the group and transaction logs have 5
# partitions, not 50, each with files made (and flushed at a stop: 0.8 s against 0.3 s
# here) when a test first uses a group or a transactional id.
TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.ports = {"PLAINTEXT": free_port()}
        self.overrides = {**TEST_DEFAULTS, **(overrides or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"
        self.started = False  # once started, its ports are known to clients: kept

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) listener's port."""
        return self.ports["PLAINTEXT"]

    def extra_port(self, name: str) -> int:
        """A free port for another listener or service of this broker, by name: read it
        back from ``ports[name]`` once started (a port another process took first is
        replaced, in ``ports`` and in the overrides that name it)."""
        self.ports[name] = free_port()
        return self.ports[name]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "strom.cli.main", "broker"]
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            **self.overrides,
        }
        for key, value in props.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = 60.0) -> None:
        # A start is 2 s of CPU or so (1.2 s of it importing): on two cores shared by
        # some twenty busy processes it took over 20 s of wall time.
        deadline = time.monotonic() + timeout
        while True:
            taken = self._launch(deadline, timeout)
            if taken is None:
                self.started = True
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"port {taken} stayed in use for {timeout}s:\n{self.logs()}")
            if self.started:
                time.sleep(0.2)  # a restart keeps its ports: wait for this one to be let go
            else:
                self._replace_port(taken)

    def _launch(self, deadline: float, timeout: float) -> int | None:
        """Start the process and wait until it has started: None once it has, the port
        when it exits because that port was in use."""
        with open(self.log_path, "ab") as log:
            written = log.tell()
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log)
        try:
            started = wait_started(self.proc, self.log_path, written, deadline)
        except RuntimeError as exc:
            self._kill()
            raise RuntimeError(f"broker {exc}") from None
        if started is False:
            self._kill()  # a fixture failing in its setup never reaches its teardown
            raise RuntimeError(f"broker did not start within {timeout}s:\n{self.logs()}")
        return None if started is True else started

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def _replace_port(self, taken: int) -> None:
        names = [name for name, port in self.ports.items() if port == taken]
        if not names:
            raise RuntimeError(f"port {taken} was in use and is none of {self.ports}")
        new = free_port()
        for name in names:
            self.ports[name] = new
        for key, value in self.overrides.items():
            if isinstance(value, str):
                self.overrides[key] = replace_port(value, taken, new)

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()


def with_controller_listener(process: BrokerProcess, node_id: int = 1) -> int:
    """Make ``process`` a single node (a quorum of one) with a CONTROLLER listener of its
    own beside its client one, both PLAINTEXT, so that it serves the controller's APIs
    there; the controller listener's port (read it back from ``ports["CONTROLLER"]``
    once started). Later overrides may change the security of either."""
    controller_port = process.extra_port("CONTROLLER")
    process.overrides.update(
        {
            "node.id": str(node_id),
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{process.port},CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller_port}",
        }
    )
    return controller_port
