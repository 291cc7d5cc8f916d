"""`strom storage` as a user runs it: random-uuid, format, info, and a broker on the result."""

from __future__ import annotations

import re
from pathlib import Path

from broker_process import BrokerProcess
from cli_helpers import ok, one_line_error, strom
from confluent_kafka.admin import AdminClient


def properties(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "server.properties"
    path.write_text(
        "\n".join(
            [
                "node.id=1",
                f"log.dirs={tmp_path}/data1,{tmp_path}/data2",
                f"metadata.log.dir={tmp_path}/meta",
                *lines,
            ]
        )
        + "\n"
    )
    return str(path)


def new_id() -> str:
    return ok(strom("storage", "random-uuid")).stdout.strip()


def test_random_uuid() -> None:
    ids = {new_id() for _ in range(3)}
    assert len(ids) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_]{22}", i) for i in ids)


def test_format_then_info(tmp_path: Path) -> None:
    props = properties(tmp_path)
    info = strom("storage", "info", "-c", props)
    assert info.returncode == 1 and "not formatted" in info.stdout
    cluster_id = new_id()
    out = ok(strom("storage", "format", "-t", cluster_id, "-c", props)).stdout
    assert out.count("Formatting") == 3
    for name in ("data1", "data2", "meta"):
        text = (tmp_path / name / "meta.properties").read_text()
        assert f"cluster.id={cluster_id}" in text and "node.id=1" in text
        assert "version=1" in text and "directory.id=" in text
    assert (tmp_path / "meta" / "bootstrap.json").exists()
    info = ok(strom("storage", "info", "-c", props)).stdout
    assert info.count("formatted") == 3 and cluster_id in info
    assert "(metadata log directory)" in info


def test_format_twice_and_ignore_formatted(tmp_path: Path) -> None:
    props = properties(tmp_path)
    cluster_id = new_id()
    ok(strom("storage", "format", "-t", cluster_id, "-c", props))
    line = one_line_error(strom("storage", "format", "-t", cluster_id, "-c", props), 1)
    assert "already formatted" in line and "--ignore-formatted" in line
    again = ok(strom("storage", "format", "-t", cluster_id, "-c", props, "--ignore-formatted"))
    assert "already formatted" in again.stdout
    other = strom("storage", "format", "-t", new_id(), "-c", props, "--ignore-formatted")
    assert cluster_id in one_line_error(other, 1)


def test_bad_arguments_and_properties_exit_2(tmp_path: Path) -> None:
    props = properties(tmp_path)
    cases = [
        (["storage", "format", "-c", props], "--cluster-id"),
        (["storage", "format", "-t", "not-a-uuid", "-c", props], "valid UUID"),
        (["storage", "format", "-t", new_id(), "-c", str(tmp_path / "nope")], "nope"),
        (
            ["storage", "format", "-t", new_id(), "-c", props, "--override", "process.roles=x"],
            "process.roles",
        ),
        (["storage", "info"], "--config"),
        (["storage", "bogus"], "invalid choice"),
    ]
    for args, needle in cases:
        assert needle in one_line_error(strom(*args), 2), args
    assert not (tmp_path / "data1").exists()


def test_override_and_standalone(tmp_path: Path) -> None:
    props = properties(tmp_path)
    result = strom(
        "storage",
        "format",
        "-t",
        new_id(),
        "-c",
        props,
        "--override",
        "node.id=7",
        "--standalone",
    )
    ok(result)
    assert "node.id=7" in (tmp_path / "meta" / "meta.properties").read_text()
    assert '"initial.voters": [\n  7\n ]' in (tmp_path / "meta" / "bootstrap.json").read_text()


def test_broker_starts_on_a_formatted_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cluster_id = new_id()
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={data}\n")
    ok(strom("storage", "format", "-t", cluster_id, "-c", str(props)))
    broker = BrokerProcess(data)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.list_topics(timeout=10).cluster_id == cluster_id
    finally:
        broker.stop()
