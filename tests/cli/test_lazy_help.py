"""`posixlake --help` imports no command module (nor pyarrow, deltalake or PySpark); the
table it lists commands from matches the commands."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from cli.main import LAZY_COMMANDS, cli
from tests.cli._subprocess import ROOT

HEAVY = ("pyarrow", "deltalake", "pyspark", "pandas", "posixlake", "nfs")


def test_help_imports_no_command_module_and_no_engine() -> None:
    probe = (
        "import sys, json\n"
        "from cli.main import main\n"
        "sys.argv = ['posixlake', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}"
        " or m.startswith('cli._') and m != 'cli._common')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert "Tables:" in done.stdout and "  spark " in done.stdout
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_the_lazy_table_lists_every_command_with_its_short_help() -> None:
    found = []
    for module in dict.fromkeys(module for _, module, _, _ in LAZY_COMMANDS):
        for command in importlib.import_module(module).COMMANDS:
            found.append((module, command.name, command.get_short_help_str(limit=1000)))
    assert [(m, n, h) for _, m, n, h in LAZY_COMMANDS] == found
    assert sorted(cli.commands) == sorted(name for _, _, name, _ in LAZY_COMMANDS)
