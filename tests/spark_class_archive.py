"""A class-data archive (AppCDS) for the Spark JVMs the tests start: the classes a
SparkSession loads to start, run jobs and a streaming query (``_workload``), parsed and
verified once and mapped by each later JVM (a local session's start and first job:
3.9-4.7 s of the JVM's CPU against 7.8-8.9 s without, at load 4-10 on 2 cores).

``./dev test`` makes it once (``python tests/spark_class_archive.py``) in the venv, beside
the PySpark whose jars it holds, named after the Java and the jars; tests/conftest.py
gives the JVMs ``@<argfile>``, a java argument file naming the archive once it exists and
nothing before. The JVM checks the archive against its class path itself: one whose class
path does not start as the archive's, or whose jars changed, loads the JDK's own archive
alone, as without it, and says nothing (-Xlog:cds*=off); a missing archive (moved away)
costs the JDK's archive too, nothing worse. Concurrent makers take a lock; the archive
and the argument file are written aside and renamed into place, so a JVM never reads
half of either."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _workload() -> None:
    """What the archive's classes are loaded by, in a child Python (``--workload``): the
    session, a job with a shuffle and an Arrow UDF, and a stateful streaming query over
    files; then the JVM's normal exit, which writes the archive, waited for. (A query from
    a Python data source through transformWithStateInPandas on RocksDB, tried, added 5%
    to the archive.)"""
    import strom.spark

    spark = strom.spark.local_session("class-archive", **{"spark.sql.shuffle.partitions": "2"})
    df = spark.range(1000).selectExpr("id % 7 AS k", "id AS v")
    df.groupBy("k").count().collect()
    df.mapInArrow(lambda batches: batches, df.schema).collect()
    with tempfile.TemporaryDirectory() as work:
        df.write.json(work + "/in")
        query = (spark.readStream.schema(df.schema).json(work + "/in").groupBy("k").count()
                 .writeStream.format("memory").queryName("counts").outputMode("complete")
                 .option("checkpointLocation", work + "/checkpoint").trigger(availableNow=True)
                 .start())  # fmt: skip
        query.awaitTermination()
    jvm = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]
    spark.stop()
    jvm.stdin.close()  # the gateway's JVM exits, writing the archive
    sys.exit(jvm.wait(240))


def _fingerprint() -> str:
    """The Java (its version line) and PySpark's jars (names, sizes, times) in a name."""
    spec = importlib.util.find_spec("pyspark")  # not imported: 0.5 s in each xdist worker
    assert spec is not None and spec.origin is not None
    version = subprocess.run(
        ["java", "-version"], capture_output=True, text=True, timeout=60
    ).stderr
    jars = Path(spec.origin).parent / "jars"
    listing = sorted(
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.glob("*.jar")
    )
    return hashlib.sha256("\n".join([version, str(jars), *listing]).encode()).hexdigest()[:16]


def _paths() -> tuple[Path, Path]:
    """The archive and the argument file naming it."""
    base = Path(sys.prefix) / "spark-class-archive" / _fingerprint()
    return base / "spark.jsa", base / "jvm.args"


def _write_aside(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as out:
        out.write(text)
    os.chmod(out.name, 0o644)
    os.replace(out.name, path)


def jvm_option() -> str:
    """``@<argfile>`` for the Spark JVMs' options: the archive once made, else nothing
    (an empty argument file); "" where the fingerprint cannot be taken."""
    try:
        archive, argfile = _paths()
        if not argfile.exists():
            argfile.parent.mkdir(parents=True, exist_ok=True)
            _write_aside(argfile, _archive_options(archive) if archive.exists() else "")
    except Exception:  # no Java, no PySpark, a read-only venv: the JVMs go without
        return ""
    return f"@{argfile}"


def _archive_options(archive: Path) -> str:
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds*=off\n"


def make(timeout: float = 300.0) -> bool:
    """Make the archive unless it is there, being made, or failed within the day (a
    machine too loaded to make it in ``timeout`` does not hold ./dev test up each run):
    True once it is there."""
    archive, argfile = _paths()
    archive.parent.mkdir(parents=True, exist_ok=True)
    failed = archive.parent / "failed"
    with open(archive.parent / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another maker is at it
        for left in archive.parent.glob("*.partial"):  # of a maker that was killed
            left.unlink(missing_ok=True)
        if not archive.exists():
            if failed.exists() and time.time() - failed.stat().st_mtime < 86_400:
                return False
            partial = archive.with_suffix(f".{os.getpid()}.partial")
            options = f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off"
            env = {**os.environ, "SPARK_SUBMIT_OPTS": options}
            try:
                with subprocess.Popen(
                    [sys.executable, __file__, "--workload"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # its JVM too: both are ended on a timeout
                ) as child:
                    try:
                        code = child.wait(timeout)
                    finally:
                        if child.poll() is None:
                            os.killpg(child.pid, signal.SIGKILL)
                            child.wait()
                if code != 0 or not partial.exists():
                    raise RuntimeError(f"the Spark run exited with {code}, no archive written")
                os.replace(partial, archive)
            except BaseException:
                failed.touch()
                raise
            finally:
                partial.unlink(missing_ok=True)
        _write_aside(argfile, _archive_options(archive))
    return True


if __name__ == "__main__" and sys.argv[1:] == ["--workload"]:
    _workload()
elif __name__ == "__main__":
    # ./dev test: a failure leaves the JVMs as they were, so it is told, not raised
    try:
        make()
    except Exception as exc:
        print(f"no Spark class archive: {exc}", file=sys.stderr)
