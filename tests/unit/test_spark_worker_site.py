"""strom.spark's worker_site: Spark's Python processes import the installed PySpark and
py4j, not Spark's zips of them, where those zips are the installed package's own; a
Spark installed elsewhere keeps its zip; another sitecustomize still runs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

import strom.spark  # noqa: E402

BUNDLED = Path(pyspark.__file__).parent / "python" / "lib"
PROBE = "import sys, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__); print(sys.path)"


def _run(path: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_installed_packages_are_imported_rather_than_sparks_zips() -> None:
    zips = sorted(str(p) for p in BUNDLED.glob("*.zip"))
    assert any(z.endswith("pyspark.zip") for z in zips) and len(zips) == 2, zips

    without = _run(zips)  # as Spark starts its Python processes
    assert ".zip" in without[0] and ".zip" in without[1]

    with_site = _run([*zips, strom.spark.WORKER_SITE])
    assert with_site[0] == pyspark.__file__
    assert ".zip" not in with_site[1]
    assert not any(z in with_site[2] for z in zips)


def test_a_zip_of_another_spark_stays_and_the_next_sitecustomize_runs(tmp_path: Path) -> None:
    lib = tmp_path / "spark-home" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w") as other:
        other.writestr("pyspark/__init__.py", "")
    user_site = tmp_path / "user-site"
    user_site.mkdir()
    marker = tmp_path / "ran"
    (user_site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")

    lines = _run([str(lib / "pyspark.zip"), strom.spark.WORKER_SITE, str(user_site)])
    assert lines[0] == str(lib / "pyspark.zip" / "pyspark" / "__init__.py")
    assert marker.exists()
