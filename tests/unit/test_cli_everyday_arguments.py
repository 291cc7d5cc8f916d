"""Bad arguments to the everyday tools: one line on stderr and exit code 2, checked before
any connection is made (so the bootstrap address here is never dialled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.cli.main import main

NOWHERE = ["--bootstrap-server", "127.0.0.1:1"]


def one_line_usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_get_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_usage_error(capsys, "get-offsets", *NOWHERE, "--time", "soon")
    assert line.startswith("strom get-offsets: error: malformed --time 'soon'")
    assert "--partitions expects" in one_line_usage_error(
        capsys, "get-offsets", *NOWHERE, "--partitions", "a,b"
    )
    assert "cannot be used with --topic" in one_line_usage_error(
        capsys, "get-offsets", *NOWHERE, "--topic", "x", "--topic-partitions", "x:0"
    )
    assert "not a regular expression" in one_line_usage_error(
        capsys, "get-offsets", *NOWHERE, "--topic", "("
    )


def test_delete_records(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"partitions": [], "version": 2}')
    line = one_line_usage_error(capsys, "delete-records", *NOWHERE, "--offset-json-file", str(plan))
    assert line.startswith(f"strom delete-records: error: {plan}: unsupported version 2")
    missing = str(tmp_path / "none.json")
    assert "No such file" in one_line_usage_error(
        capsys, "delete-records", *NOWHERE, "--offset-json-file", missing
    )
    assert "give --offset-json-file, or --topic, --partition and --offset" in (
        one_line_usage_error(capsys, "delete-records", *NOWHERE, "--topic", "t")
    )
    assert "cannot be used with" in one_line_usage_error(
        capsys, "delete-records", *NOWHERE, "--offset-json-file", str(plan), "--offset", "1"
    )


def test_dump_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "no such file" in one_line_usage_error(capsys, "dump-log", "--files", "/nope/0.log")
    other = tmp_path / "00000000000000000000.snapshot"
    other.write_bytes(b"")
    assert "not a .log, .index or .timeindex file" in one_line_usage_error(
        capsys, "dump-log", "--files", str(other)
    )
    named = tmp_path / "segment.log"
    named.write_bytes(b"")
    assert "not a segment's base offset" in one_line_usage_error(
        capsys, "dump-log", "--files", str(named)
    )


def test_config_files_topics_groups_and_consume(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text("client.id=x\njustakey\n")
    line = one_line_usage_error(
        capsys, "topics", "--list", *NOWHERE, "--command-config", str(config)
    )
    assert line.startswith(f"strom topics: error: {config} line 2: expected key=value")
    assert "cannot read" in one_line_usage_error(
        capsys, "consume", *NOWHERE, "--topic", "t", "--consumer.config", str(tmp_path / "no")
    )
    assert "--include is not a regular expression" in one_line_usage_error(
        capsys, "topics", "--list", *NOWHERE, "--include", "(("
    )
    assert "go with --list or --describe" in one_line_usage_error(
        capsys, "topics", "--delete", "--topic", "t", *NOWHERE, "--exclude-internal"
    )
    reset = ["groups", *NOWHERE, "--reset-offsets", "--group", "g", "--topic", "t"]
    assert "ISO-8601 duration" in one_line_usage_error(capsys, *reset, "--by-duration", "1h")
    csv = tmp_path / "plan.csv"
    csv.write_text("t,0,1\n")
    assert "--from-file names its partitions" in one_line_usage_error(
        capsys, *reset, "--from-file", str(csv)
    )
    csv.write_text("t,zero,1\n")
    assert "line 1: partition and offset must be numbers" in one_line_usage_error(
        capsys, "groups", *NOWHERE, "--reset-offsets", "--group", "g", "--from-file", str(csv)
    )
    assert "--export goes with --reset-offsets" in one_line_usage_error(
        capsys, "groups", *NOWHERE, "--list", "--export"
    )
    assert "unknown directive %q" in one_line_usage_error(
        capsys, "consume", *NOWHERE, "--topic", "t", "-f", "%q"
    )
    assert "use either --format or --property" in one_line_usage_error(
        capsys, "consume", *NOWHERE, "--topic", "t", "-f", "%v", "--property", "print.key=true"
    )
    assert "invalid choice: 'fish'" in one_line_usage_error(capsys, "completion", "fish")
    assert "invalid choice: 'yaml'" in one_line_usage_error(
        capsys, "cluster", *NOWHERE, "--output", "yaml"
    )


@pytest.mark.parametrize(
    ("argv", "option", "high"),
    [
        (["leader-election", "--election-type", "preferred", "--topic", "t", "--partition"],
         "--partition", 2**31 - 1),
        (["cluster", "--unregister"], "--unregister", 2**31 - 1),
        (["topics", "--create", "--topic", "x", "--partitions"], "--partitions", 2**31 - 1),
        (["topics", "--create", "--topic", "x", "--replication-factor"],
         "--replication-factor", 2**15 - 1),
        (["transactions", "describe-producers", "--topic", "t", "--partition"],
         "--partition", 2**31 - 1),
        (["delete-records", "--topic", "t", "--partition", "0", "--offset"],
         "--offset", 2**63 - 1),
        (["groups", "--reset-offsets", "--group", "g", "--topic", "t", "--to-offset"],
         "--to-offset", 2**63 - 1),
        (["transactions", "abort", "--topic", "t", "--partition", "0", "--producer-id", "1",
          "--producer-epoch", "1", "--coordinator-epoch"], "--coordinator-epoch", 2**31 - 1),
    ],
)  # fmt: skip
def test_numbers_past_their_kafka_field_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, high: int
) -> None:
    """A number that goes into a request's int16/int32/int64 field: out of its range, an
    argument error naming the option and the bound, not a traceback building the request."""
    tool, *rest = argv
    line = one_line_usage_error(capsys, tool, *NOWHERE, *rest, str(high + 1))
    assert f"argument {option}: {high + 1} is out of range: at most {high}" in line
