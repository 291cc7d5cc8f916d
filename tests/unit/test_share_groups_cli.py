"""``strom share-groups``' arguments: a wrong combination is one readable line (exit 2)
before anything is sent."""

from __future__ import annotations

import pytest

from strom.cli.main import main


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--reset-offsets", "--group", "g", "--to-earliest"], "--topic or --all-topics"),
        (["--reset-offsets", "--group", "g", "--topic", "t"], "needs one of --to-earliest"),
        (["--describe"], "--group (or --all-groups) is required"),
        (["--describe", "--group", "g", "--members", "--state"], "one of --members"),
        (["--list", "--group", "g"], "--list takes no --group"),
        (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic"),
        (["--list", "--state", "Sleepy"], "unknown share group state 'Sleepy'"),
    ],
)
def test_bad_arguments_are_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["share-groups", *args, "--bootstrap-server", "127.0.0.1:1"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
