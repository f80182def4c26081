"""The read path's transport: the event loop (uvloop), READ data sent from the segment
files (``os.sendfile``), and lake shares answering cheap calls on the loop."""

from __future__ import annotations

import sys

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.server import NfsServer


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop does not run on Windows")
def test_the_server_runs_on_uvloop() -> None:
    import uvloop

    with NfsServer(MemoryFs(), 0) as server:
        assert isinstance(server._loop, uvloop.Loop)
