"""``tail -f /mnt/changes.csv`` through the Linux kernel NFS client (nfs-vm) sees new commits.

The guest mounts with the options docs/nfs-writes.md gives for following changes.csv
(``actimeo=1``: attributes revalidated every second, so tail's ``fstat`` sees the size
grow) and follows the file with GNU tail (which polls, every 0.2 s here, on a remote file
system). It reads tail's output line by line from a FIFO (bash's ``read`` takes a pipe
byte by byte, so no line is lost) and waits, at most 20 s a line, for:

- the header and the commit the server started at,
- a row it appends itself with ``echo >> data.csv`` (an NFS edit),
- a row delta-rs appends from outside posixlake, which the host writes while the guest
  creates ``/mnt/append-outside`` (so both sides act in a known order, without waiting).

No side sleeps: each wait is on a line arriving, with a bound. The guest reports how long
each commit took to reach tail (printed, not asserted: no timings in tests).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.vmclient import require_vm, run_in_vm

pytestmark = pytest.mark.mount

FOLLOW_OPTS = "noacl,actimeo=1"
"""The mount options docs/nfs-writes.md gives for ``tail -f changes.csv``."""


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    require_vm()  # skips when the harness is absent, fails when it is broken


class OutsideOnCue(TableFs):
    """A TableFs that lets delta-rs append a row from outside posixlake while a client
    creates a file named ``append-outside``."""

    def create(self, dir_id: Any, name: str, attrs: Any, ctx: Any, *, guarded: bool) -> Any:
        if name == "append-outside":
            write_deltalake(self._db.uri, pa.table({"id": [4], "name": ["outside"]}), mode="append")
        return super().create(dir_id, name, attrs, ctx, guarded=guarded)


FOLLOW = r"""
set -u
now() { date +%s.%N; }
mkfifo /tmp/lines
tail -n +1 -f -s 0.2 /mnt/changes.csv > /tmp/lines 2> /tmp/tail.err &
tailpid=$!
exec 3< /tmp/lines
# read tail's lines until one contains $1 (at most 20 s for each line)
wait_for() {
    while IFS= read -r -t 20 line <&3; do
        echo "LINE $line"
        case "$line" in *"$1"*) return 0 ;; esac
    done
    echo "TAIL_ERR $(cat /tmp/tail.err)"
    return 1
}
wait_for ",insert,2,b" || { echo "MISSED start"; exit 3; }
t0=$(now)
echo "3,from nfs" >> /mnt/data/data.csv || { echo "APPEND failed"; exit 4; }
wait_for ",insert,3,from nfs" || { echo "MISSED nfs"; exit 5; }
t1=$(now)
touch /mnt/append-outside   # the host appends with delta-rs from outside, now
wait_for ",insert,4,outside" || { echo "MISSED outside"; exit 6; }
t2=$(now)
kill $tailpid
echo "$t0 $t1 $t2" | awk '{ printf "SECONDS nfs=%.2f outside=%.2f\n", $2 - $1, $3 - $2 }'
"""


def test_tail_f_of_changes_csv_prints_each_commit(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    fs = OutsideOnCue(db, state_dir=tmp_path / "state", segment_cache=tmp_path / "segments")
    with NfsServer(fs) as srv:
        res = run_in_vm(srv.port, textwrap.dedent(FOLLOW), timeout=180, opts=FOLLOW_OPTS)
    report = f"stdout:\n{res.stdout}\nstderr:\n{res.stderr[-3000:]}"
    assert res.returncode == 0, report
    lines = [ln.removeprefix("LINE ") for ln in res.stdout.splitlines() if ln.startswith("LINE ")]
    assert lines[0] == "_commit_version,_commit_timestamp,_change_type,id,name", report
    rows = [re.sub(r"^(\d+),[^,]+,", r"\1,T,", ln) for ln in lines[1:]]
    assert rows == [
        "1,T,insert,1,a",
        "1,T,insert,2,b",
        "2,T,insert,3,from nfs",
        "3,T,insert,4,outside",
    ], report
    seconds = re.search(r"^SECONDS (.*)$", res.stdout, re.M)
    print(f"commit -> tail -f over the kernel client: {seconds[1] if seconds else '?'}")
