"""The ``posixlake`` command: one click group, one module per family of commands.

Exit codes: 0 on success; 1 with a one-line ``Error: ...`` on stderr when an operation
fails (a :class:`~posixlake.errors.PosixLakeError`; ``--verbose`` adds the traceback);
2 on a usage error (unknown option, bad value, missing argument).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

import click

from cli._common import Options

__all__ = ["LAZY_COMMANDS", "cli", "main"]

logger = logging.getLogger(__name__)

#: Every command: (section, module, name, short help). `posixlake --help` lists them from
#: here, and a command's module (which imports posixlake, pyarrow, deltalake...) is
#: imported when the command runs; tests/cli/test_lazy_help.py checks this table against
#: the modules' ``COMMANDS``.
LAZY_COMMANDS: Final[tuple[tuple[str, str, str, str], ...]] = (
    (
        "Tables",
        "cli._table",
        "create",
        "Create a table from a schema, or from CSV or Parquet files.",
    ),
    ("Tables", "cli._table", "info", "Show where a table is, its version, size, rows and schema."),
    ("Tables", "cli._table", "schema", "Show a table's columns, types and primary key."),
    ("Tables", "cli._table", "history", "List the commits, newest first (versions for --version)."),
    (
        "Tables",
        "cli._table",
        "rollback",
        "Roll the table back to an earlier version, in one commit.",
    ),
    ("Data", "cli._data", "insert", "Insert rows from FILE (or stdin) in one commit."),
    ("Data", "cli._data", "query", "Run a SQL query over the table, which is named `data`."),
    (
        "Data",
        "cli._data",
        "sql",
        "Run a SQL statement: SELECT, UPDATE, DELETE, INSERT or MERGE.",
    ),
    ("Data", "cli._data", "shell", "Open an interactive SQL prompt (with history)."),
    (
        "Data",
        "cli._data",
        "merge",
        "Apply INSERT/UPDATE/DELETE rows (an `_op` column) in one commit.",
    ),
    ("Data", "cli._data", "update", "Set columns on the rows matching a predicate, in one commit."),
    ("Data", "cli._data", "delete", "Delete the rows matching a predicate, in one commit."),
    (
        "Data",
        "cli._tail",
        "tail",
        "Print the rows the table's commits changed; -f follows new commits.",
    ),
    (
        "Maintenance",
        "cli._maintenance",
        "optimize",
        "Compact small files into larger ones, in one commit.",
    ),
    (
        "Maintenance",
        "cli._maintenance",
        "zorder",
        "Cluster files by a Z-order curve over COLUMNs (data skipping).",
    ),
    (
        "Maintenance",
        "cli._maintenance",
        "vacuum",
        "Delete data files that no version in the retention period needs.",
    ),
    (
        "Maintenance",
        "cli._maintenance",
        "health",
        "Check that a table can be read; exit 1 when it cannot.",
    ),
    (
        "Maintenance",
        "cli._maintenance",
        "metrics",
        "Show files, rows, data skipping and operation metrics (SLOs).",
    ),
    ("Backup", "cli._backup", "backup", "Back up the table into DEST, with a SHA-256 manifest."),
    ("Backup", "cli._backup", "restore", "Rebuild a table at DEST from BACKUP."),
    ("Backup", "cli._backup", "verify", "Check every byte of a backup and its chain."),
    (
        "Users",
        "cli._users",
        "users",
        "Manage the users of a table (log in as an admin with --user).",
    ),
    (
        "Users",
        "cli._migrate",
        "migrate",
        "Move an original posixlake table's users and key into posixlake.",
    ),
    (
        "Server",
        "cli._serve",
        "serve",
        "Serve the table over NFSv3 as CSV files, until Ctrl-C or SIGTERM.",
    ),
    ("Server", "cli._mount", "mount", "Serve TABLE and mount it at MOUNT_POINT until Ctrl-C."),
    ("Server", "cli._mount", "unmount", "Unmount a share (runs umount, through sudo unless root)."),
    ("Server", "cli._mount", "status", "Say whether MOUNT_POINT is mounted (exit 0 either way)."),
    (
        "Server",
        "cli._spark",
        "spark",
        "Start, stop or check a Spark Connect server that commands share.",
    ),
)

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
Spark: while `posixlake spark start`'s server runs, commands on the Spark engine use it
(a warm Spark); POSIXLAKE_SPARK_REMOTE / --spark-remote name another Spark Connect server,
POSIXLAKE_SPARK_MASTER / --spark-master a Spark in the command's own process.
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
    """A click group that lists commands by section, imports a command's module when it
    is used, and turns operation errors into exit 1."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loaded = False
        super().__init__(*args, **kwargs)
        self.sections: dict[str, list[str]] = {}
        self.lazy: dict[str, tuple[str, str]] = {}

    def add_lazy(self, table: Sequence[tuple[str, str, str, str]]) -> None:
        """Add commands by (section, module, name, short help), imported on first use."""
        for section, module, name, short in table:
            self.lazy[name] = (module, short)
            self.sections.setdefault(section, []).append(name)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        """Every command (importing every module: for tests and completion, not --help)."""
        if not self._loaded:
            self._loaded = True
            for name in list(self.lazy):
                self._load(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def _load(self, name: str) -> click.Command | None:
        command = self._commands.get(name)
        if command is not None or name not in self.lazy:
            return command
        module = importlib.import_module(self.lazy[name][0])
        for found in module.COMMANDS:
            self._commands.setdefault(found.name or "", found)
        return self._commands.get(name)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Return a command, importing its module."""
        return self._load(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Return the commands in section order."""
        ordered = [name for names in self.sections.values() for name in names]
        return ordered + sorted(set(self._commands) - set(ordered))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write one block of commands per section (without importing them)."""
        for title, names in self.sections.items():
            rows = [(name, self.lazy[name][1]) for name in names if name in self.lazy]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a PosixLakeError becomes a one-line error and exit 1."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as err:
            from posixlake.errors import PosixLakeError  # the failed command imported it

            if isinstance(err, PosixLakeError):
                if err.__cause__ is not None:  # -v: what the engine said, in full
                    logger.info("%s failed: %s", ctx.invoked_subcommand, err.__cause__)
                logger.debug("%s failed", ctx.invoked_subcommand, exc_info=True)
                from cli._errors import cli_words

                raise click.ClickException(cli_words(_one_line(str(err)))) from err
            # Not an operation error: log it while -vv's handler is still there; main()
            # prints the one-line message.
            logger.debug("%s crashed", ctx.invoked_subcommand, exc_info=True)
            raise


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """Print ``posixlake, version X`` (importing posixlake only then) and exit."""
    if not value or ctx.resilient_parsing:
        return
    from posixlake import __version__

    click.echo(f"posixlake, version {__version__}")
    ctx.exit()


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
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show the version and exit.",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what happens (-v: info and Spark's own log, -vv: debug with tracebacks) on stderr.",
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
cli_group.add_lazy(LAZY_COMMANDS)


def _exit_now(code: object) -> None:
    """End a process that used a Spark Connect client without tearing the client down.

    gRPC's C core takes 0.3-0.5 s to shut down at interpreter exit, time a user waits
    for nothing once the command is done: when no other thread works, the exit handlers
    run (logging, temporary files, PySpark's own), stdout and stderr are flushed, and
    the process ends at once with the command's exit status.
    """
    if "pyspark.sql.connect.client" not in sys.modules:
        return
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        return  # a message to print: the interpreter's own exit does it
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``posixlake`` command (the console-script entry point)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="posixlake")
    except SystemExit as done:
        if argv is None:  # the command line itself, not a caller in Python
            _exit_now(done.code)
        raise
    except Exception as err:  # noqa: BLE001 - the CLI boundary (docs/design.md, "The command line")
        click.echo(
            f"Error: unexpected {type(err).__name__}: {_one_line(str(err))} "
            "(this is a bug; run with -vv for the traceback)",
            err=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
