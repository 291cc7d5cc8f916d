"""A standalone Spark cluster for the tests: one master and one worker, real child processes
started with the ``spark-class`` script that the pip ``pyspark`` package ships (its
``sbin/`` has no ``start-master.sh``), on free ports of 127.0.0.1.

``start()`` returns once the worker has registered with the master, as the master's web UI
reports it (``/json/``); ``stop()`` ends both processes, and the executors the worker
started, within a bounded time. Sessions on the cluster are the caller's business
(``master_url``). This module does not start the broker or any SparkSession.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from broker_process import free_port


def spark_home() -> Path:
    """The Spark distribution inside the installed ``pyspark`` package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkDaemon:
    """One ``spark-class <main class> <args>`` JVM in its own process group, logging to a file."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        self._log = open(self.log_path, "ab")
        command = [str(spark_home() / "bin" / "spark-class"), *self.args]
        # A session (and process group) of its own: the executors the worker forks stay in
        # it, so that a last-resort kill reaches them too.
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Spark's shutdown hooks stop a worker's executors), then SIGKILL to the
        process group if it has not ended within ``timeout`` seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # the JVM has ended or will not: take what it started down with it
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None


class StandaloneCluster:
    """A Spark standalone master and one worker (``cores`` cores, ``memory`` of executor
    memory) on 127.0.0.1, with logs and the worker's directory under ``work_dir``."""

    def __init__(self, work_dir: Path, cores: int = 2, memory: str = "1g") -> None:
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_webui_port = free_port()
        worker_dir = work_dir / "worker"
        master_options = {"host": "127.0.0.1", "port": self.port, "webui-port": self.webui_port}
        worker_options = {
            "host": "127.0.0.1",
            "cores": cores,
            "memory": memory,
            "webui-port": self.worker_webui_port,
            "work-dir": worker_dir,
        }
        self.master = SparkDaemon(
            "master",
            ["org.apache.spark.deploy.master.Master", *_flags(master_options)],
            work_dir / "master.log",
        )
        self.worker = SparkDaemon(
            "worker",
            ["org.apache.spark.deploy.worker.Worker", self.master_url, *_flags(worker_options)],
            work_dir / "worker.log",
        )

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home())
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        # spark-class finds nothing else to run Python with; executors get spark.pyspark.python.
        env["PYSPARK_PYTHON"] = sys.executable
        env.pop("SPARK_CONF_DIR", None)
        return env

    def start(self, timeout: float = 90.0) -> None:
        """Start the master, then the worker; return once the worker is ALIVE at the master."""
        (self.work_dir / "worker").mkdir(parents=True, exist_ok=True)
        env = self.environment()
        deadline = time.monotonic() + timeout
        try:
            self.master.start(env)
            self._wait(deadline, lambda state: state is not None, "the master's web UI to answer")
            self.worker.start(env)
            self._wait(deadline, lambda state: alive_workers(state) >= 1, "the worker to register")
        except BaseException:
            self.stop()
            raise

    def state(self) -> dict[str, Any] | None:
        """The master's state as its web UI gives it as JSON, or None if it does not answer."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.load(response)
        except (OSError, ValueError):
            return None

    def _wait(self, deadline: float, ready: Any, what: str) -> None:
        while True:
            for daemon in (self.master, self.worker):
                if daemon.proc is not None and not daemon.alive():
                    raise RuntimeError(
                        f"spark {daemon.name} exited with {daemon.proc.returncode} while waiting"
                        f" for {what}:\n{self.logs()}"
                    )
            state = self.state()
            if ready(state):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out waiting for {what} (master state: {state}):\n{self.logs()}"
                )
            time.sleep(0.25)

    def logs(self) -> str:
        daemons = (self.master, self.worker)
        return "\n".join(f"--- {d.name} ({d.log_path}), last lines:\n{d.logs()}" for d in daemons)

    def stop(self) -> None:
        """Stop the worker (and with it its executors), then the master."""
        self.worker.stop()
        self.master.stop()


def alive_workers(state: dict[str, Any] | None) -> int:
    """How many workers the master's ``/json/`` state lists as ALIVE."""
    if not state:
        return 0
    listed = sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")
    return max(listed, int(state.get("aliveworkers", 0)))


def _flags(options: dict[str, object]) -> list[str]:
    """``{"port": 7077}`` as ``["--port", "7077"]``."""
    return [item for name, value in options.items() for item in (f"--{name}", str(value))]
