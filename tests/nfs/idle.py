"""Let the idle period pass for a served TableFs (NFSv3 has no close: an edit applies once
its writer is quiet), through the fake clock the TableFs was given: no waiting."""

from __future__ import annotations

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from tests.nfs.conftest import FakeClock

__all__ = ["FakeClock", "quiet"]


def quiet(server: NfsServer) -> None:
    """The writers are quiet for the idle period: the edits that are done apply."""
    fs = server.vfs
    assert isinstance(fs, TableFs)
    clock = fs._clock
    assert isinstance(clock, FakeClock)
    clock.advance(60)
    fs.poll()
