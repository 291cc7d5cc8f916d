"""Pure parts of the tools: rpk-style record formats, ISO-8601 durations, the offsets CSV of
groups --from-file/--export, and the shell completion script (run in a real bash)."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess

import pytest

from strom.cli.durations import parse_duration_ms
from strom.cli.groups import parse_offsets_csv
from strom.cli.main import _parser
from strom.cli.record_format import RecordFormat


def completion_script(shell: str) -> str:
    """What `strom completion SHELL` prints, run in this process."""
    args = _parser().parse_args(["completion", shell])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert args.run(args) == 0
    return out.getvalue()


class FakeMessage:
    def __init__(self, key: bytes | None, value: bytes | None, headers=None) -> None:
        self._key, self._value, self._headers = key, value, headers

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 41

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1700000000123)

    def headers(self):
        return self._headers


def test_record_format_directives_and_escapes() -> None:
    msg = FakeMessage(b"k", b"hello", [("a", b"1"), ("b", None)])
    fmt = RecordFormat(r"%t/%p@%o %k=%v\t%T [%h] %K %V %H 100%%\n")
    assert fmt.format(msg) == b"orders/2@41 k=hello\t1700000000123 [a:1,b:] 1 5 2 100%\n"
    assert RecordFormat("%k|%v|%K|%H").format(FakeMessage(None, None)) == b"||-1|0"
    assert RecordFormat("plain").format(msg) == b"plain"  # no newline is added


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("%x", "unknown directive %x"),
        ("%v%", "lone '%'"),
        ("\\q", "unknown escape"),
        ("a\\", "lone"),
    ],
)
def test_record_format_mistakes(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        RecordFormat(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("P1D", 86_400_000),
        ("PT6H", 21_600_000),
        ("P1DT2H30M", 95_400_000),
        ("pt0.5s", 500),
        ("PT90S", 90_000),
        ("PT1M30.25S", 90_250),
        ("P0D", 0),
    ],
)
def test_iso_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1Y", "P2W", "-PT1H", "1D", "P1DT", "PT1H30", ""])
def test_not_iso_durations(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601 duration"):
        parse_duration_ms(text)


def test_offsets_csv_with_and_without_groups() -> None:
    assert parse_offsets_csv("t,0,5\n\nt, 1 ,7\ng2,u,0,3\n") == [
        (None, "t", 0, 5),
        (None, "t", 1, 7),
        ("g2", "u", 0, 3),
    ]
    for text, reason in [
        ("t,0\n", "line 1: expected topic,partition,offset"),
        ("t,0,5\nt,x,1\n", "line 2: partition and offset must be numbers"),
        ("t,0,-1\n", "must be numbers"),
        ("\n", "no offsets"),
    ]:
        with pytest.raises(ValueError, match=reason):
            parse_offsets_csv(text)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_offers_commands_actions_options_choices_and_files(tmp_path) -> None:
    script = completion_script("bash")
    (tmp_path / "client.properties").write_text("")
    probe = r"""
t() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _strom_complete;
      echo "${COMPREPLY[*]}"; }
t strom get-o
t strom transactions --bootstrap-server h:1 de
t strom groups --reset-offsets --by
t strom topics --output ''
t strom completion ''
t strom get-offsets --command-config "$DIR/cl"
complete -p strom
"""
    result = subprocess.run(
        ["bash", "-c", script + probe],
        capture_output=True,
        text=True,
        env={"DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "get-offsets"
    assert lines[1].split() == ["describe", "describe-producers"]
    assert lines[2] == "--by-duration"
    assert lines[3].split() == ["table", "plain", "json"]
    assert lines[4].split() == ["bash", "zsh"]
    assert lines[5] == f"{tmp_path}/client.properties"
    assert lines[6] == "complete -F _strom_complete strom"


def test_zsh_script_registers_the_same_function_through_bashcompinit() -> None:
    script = completion_script("zsh")
    assert script.index("bashcompinit") < script.index("complete -F _strom_complete strom")
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-c", script], check=True)


def test_each_command_loads_only_its_own_module_and_registers_its_name() -> None:
    from strom.cli.main import TOOL_MODULES

    def commands(parser) -> list[str]:
        (action,) = [a for a in parser._actions if a.dest == "command"]
        return list(action.choices)

    for name in TOOL_MODULES:
        expected = ["broker", *TOOL_MODULES] if name == "completion" else ["broker", name]
        assert commands(_parser([name, "--help"])) == expected
    assert commands(_parser(["--version"])) == ["broker", *TOOL_MODULES]
    assert commands(_parser(["broker"])) == ["broker"]
