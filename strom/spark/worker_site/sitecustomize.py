"""Run by Python as each of Spark's Python processes starts, in sessions that
``strom.spark.local_session`` makes: this directory leads their PYTHONPATH.

Spark puts its own copy of PySpark first on its Python processes' path:
``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip. Imported from a zip, PySpark is
compiled from source in every process that imports it: about 1 s of CPU, against 0.3 s
with the installed package's cached bytecode. A streaming query's start waits for several
such processes in turn (the data source looked up, created, its read planned, its writer
made, the tasks' worker daemon), so a query on a busy machine waited tens of seconds.

Where the zips are those inside the installed pyspark package (the same files, so the same
version), they are dropped from the path and the installed packages are imported instead.
The zips of a Spark installed elsewhere (a SPARK_HOME of its own) stay. A
``sitecustomize`` further along the path is run after this one, as it would have been.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _bundled_zips() -> list[str]:
    """The path's entries that are zips in the ``python/lib`` of the installed pyspark."""
    bundled = []
    for entry in sys.path:
        if not entry.endswith(".zip"):
            continue
        lib = os.path.dirname(os.path.abspath(entry))
        package = os.path.dirname(os.path.dirname(lib))
        if os.path.basename(package) == "pyspark" and os.path.isfile(
            os.path.join(package, "__init__.py")
        ):
            if os.path.dirname(package) in sys.path:
                bundled.append(entry)
    return bundled


def _import_from_installed_packages() -> None:
    bundled = _bundled_zips()
    if not bundled:
        return
    rest = [entry for entry in sys.path if entry not in bundled]
    finder = importlib.machinery.PathFinder
    if all(finder.find_spec(name, rest) is not None for name in ("pyspark", "py4j")):
        sys.path[:] = rest


def _run_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    after = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_import_from_installed_packages()
_run_the_next_sitecustomize()
