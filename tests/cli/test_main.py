"""The command group: help, version, exit codes, logging, shell completion."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from cli.main import cli
from tests.cli.conftest import Cli

COMMANDS = sorted(cli.commands)
SUBCOMMANDS = sorted(
    (name, sub)
    for name, command in cli.commands.items()
    if isinstance(command, click.Group)
    for sub in command.commands
)


def test_help_lists_every_command_by_section(run: Cli) -> None:
    out = run.ok("--help").stdout
    for section in ("Tables:", "Data:", "Maintenance:", "Backup:", "Users:"):
        assert section in out
    for name in COMMANDS:
        assert f"  {name} " in out
    assert "_POSIXLAKE_COMPLETE=bash_source" in out
    assert "Exit codes" in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_an_example(run: Cli, name: str) -> None:
    out = run.ok(name, "--help").stdout
    assert f"Usage: posixlake {name}" in out
    assert "Example" in out
    assert f"posixlake {name}" in out.split("Example", 1)[1]


@pytest.mark.parametrize(("group", "name"), SUBCOMMANDS)
def test_every_subcommand_has_help_with_an_example(run: Cli, group: str, name: str) -> None:
    out = run.ok(group, name, "--help").stdout
    assert f"Usage: posixlake {group} {name}" in out
    assert "Example" in out
    assert f"posixlake {group} {name}" in out.split("Example", 1)[1]


def test_short_help_is_not_truncated(run: Cli) -> None:
    out = run.ok("--help").stdout
    listing = out.split("Tables:", 1)[1].split("Examples:", 1)[0]
    assert "..." not in listing


def test_version(run: Cli) -> None:
    from posixlake import __version__

    assert run.ok("--version").stdout.strip() == f"posixlake, version {__version__}"


def test_no_command_shows_usage(run: Cli) -> None:
    result = run("--bogus")
    assert result.exit_code == 2
    assert "No such option" in result.stderr


def test_unknown_command_is_a_usage_error(run: Cli) -> None:
    result = run("frobnicate")
    assert result.exit_code == 2
    assert "No such command" in result.stderr


def test_missing_argument_is_a_usage_error(run: Cli) -> None:
    result = run("query")
    assert result.exit_code == 2
    assert "Missing argument 'TABLE'" in result.stderr


def test_operation_error_is_one_line_and_exit_1(run: Cli, tmp_path: Path) -> None:
    result = run.fails(1, "info", str(tmp_path / "nothing"))
    assert "no table at" in result.stderr
    assert result.stdout == ""


def test_verbose_shows_the_traceback_on_stderr(run: Cli, tmp_path: Path) -> None:
    result = run("-vv", "info", str(tmp_path / "nothing"))
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("Error: no table at")


def test_multi_line_errors_are_folded_onto_one_line(run: Cli, table: str) -> None:
    result = run.fails(1, "query", table, "SELECT\n nosuch\nFROM data", "--engine", "local")
    assert "nosuch" in result.stderr


def _complete(run: Cli, words: str) -> list[str]:
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    result = run.runner.invoke(
        cli,
        [],
        prog_name="posixlake",
        env={
            "_POSIXLAKE_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": cword,
        },
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_shell_completion_of_commands_and_options(run: Cli) -> None:
    assert "query" in _complete(run, "posixlake q")
    assert _complete(run, "posixlake query /t 'x' --for") == ["--format"]
    assert set(_complete(run, "posixlake query /t 'x' --format ")) == {
        "table",
        "csv",
        "json",
        "jsonl",
        "markdown",
    }
    assert set(_complete(run, "posixlake query /t 'x' --engine ")) == {"local", "spark"}


def test_shell_completion_of_the_table_argument_is_a_directory(run: Cli) -> None:
    result = run.runner.invoke(
        cli,
        [],
        prog_name="posixlake",
        env={
            "_POSIXLAKE_COMPLETE": "bash_complete",
            "COMP_WORDS": "posixlake info /tm",
            "COMP_CWORD": "2",
        },
    )
    assert result.stdout.splitlines() == ["dir,/tm"]


def test_bash_completion_script(run: Cli) -> None:
    result = run.runner.invoke(
        cli, [], prog_name="posixlake", env={"_POSIXLAKE_COMPLETE": "bash_source"}
    )
    assert result.exit_code == 0
    assert "_posixlake_completion" in result.stdout


def test_main_exits_with_click_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["info", str(tmp_path / "none")])
    assert exc.value.code == 1
    assert capsys.readouterr().err.startswith("Error: no table at")
    with pytest.raises(SystemExit) as exc:
        main(["info"])
    assert exc.value.code == 2


def test_commands_are_click_commands() -> None:
    assert all(isinstance(c, click.Command) for c in cli.commands.values())
