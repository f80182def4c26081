"""The ``posixlake`` command: one click group, one module per family of commands.

Exit codes: 0 on success; 1 with a one-line ``Error: ...`` on stderr when an operation
fails (a :class:`~posixlake.errors.PosixLakeError`; ``--verbose`` adds the traceback);
2 on a usage error (unknown option, bad value, missing argument).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from cli import _backup, _data, _maintenance, _migrate, _mount, _serve, _table, _users
from cli._common import Options
from cli._errors import cli_words
from posixlake import __version__
from posixlake.errors import PosixLakeError

__all__ = ["cli", "main"]

logger = logging.getLogger(__name__)

EPILOG = """\
\b
Examples:
  posixlake create /data/sales --schema 'id:Int64, item:String, qty:Int32' --primary-key id
  posixlake insert /data/sales rows.csv
  posixlake query /data/sales 'SELECT item, sum(qty) FROM data GROUP BY item'
  posixlake serve /data/sales --port 2049

\b
Every command takes --help. The SQL table name is `data`.
Environment: POSIXLAKE_ENGINE (local|spark), POSIXLAKE_USER, POSIXLAKE_PASSWORD,
AWS_* for S3 and AZURE_STORAGE_* for Azure.
Exit codes: 0 success, 1 operation error, 2 usage error.

\b
Shell completion (add one line to your shell's startup file):
  bash  eval "$(_POSIXLAKE_COMPLETE=bash_source posixlake)"        # ~/.bashrc
  zsh   eval "$(_POSIXLAKE_COMPLETE=zsh_source posixlake)"         # ~/.zshrc
  fish  _POSIXLAKE_COMPLETE=fish_source posixlake | source          # ~/.config/fish/config.fish
"""


def _one_line(text: str) -> str:
    """Collapse a message onto one line."""
    return " ".join(text.split()) or "operation failed"


class PosixLakeGroup(click.Group):
    """A click group that lists commands by section and turns operation errors into exit 1."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections: dict[str, list[str]] = {}

    def add_section(self, title: str, commands: Sequence[click.Command]) -> None:
        """Add ``commands`` under a heading of ``--help``."""
        for command in commands:
            self.add_command(command)
            self.sections.setdefault(title, []).append(command.name or "")

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Return the commands in section order."""
        ordered = [name for names in self.sections.values() for name in names]
        return ordered + sorted(set(self.commands) - set(ordered))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write one block of commands per section."""
        width = formatter.width - 6 - max((len(n) for n in self.commands), default=0)
        for title, names in self.sections.items():
            rows = []
            for name in names:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit=max(width, 30))))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a PosixLakeError becomes a one-line error and exit 1."""
        try:
            return super().invoke(ctx)
        except PosixLakeError as err:
            logger.debug("%s failed", ctx.invoked_subcommand, exc_info=True)
            raise click.ClickException(cli_words(_one_line(str(err)))) from err
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception:
            # Not an operation error: log it while -vv's handler is still there; main()
            # prints the one-line message.
            logger.debug("%s crashed", ctx.invoked_subcommand, exc_info=True)
            raise


class _StderrHandler(logging.Handler):
    """Log records to the current stderr (so click's test runner captures them)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except (OSError, ValueError):
            self.handleError(record)


@click.group(
    name="posixlake",
    cls=PosixLakeGroup,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="posixlake")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what happens (-v: info, -vv: debug with tracebacks) on stderr.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Delta Lake tables from the shell: create, load, query, maintain, back up and serve over NFS.

    TABLE is a directory, s3://bucket/prefix or az://container/prefix.
    """
    opts = ctx.ensure_object(Options)
    opts.verbose = verbose
    if verbose:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        previous = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)

        def restore() -> None:
            root.removeHandler(handler)
            root.setLevel(previous)

        ctx.call_on_close(restore)


cli_group: PosixLakeGroup = cli
cli_group.add_section("Tables", _table.COMMANDS)
cli_group.add_section("Data", _data.COMMANDS)
cli_group.add_section("Maintenance", _maintenance.COMMANDS)
cli_group.add_section("Backup", _backup.COMMANDS)
cli_group.add_section("Users", [*_users.COMMANDS, *_migrate.COMMANDS])
cli_group.add_section("Server", [*_serve.COMMANDS, *_mount.COMMANDS])


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``posixlake`` command (the console-script entry point)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="posixlake")
    except Exception as err:  # noqa: BLE001 - the CLI boundary (docs/design.md, "The command line")
        click.echo(
            f"Error: unexpected {type(err).__name__}: {_one_line(str(err))} "
            "(this is a bug; run with -vv for the traceback)",
            err=True,
        )
        sys.exit(1)
