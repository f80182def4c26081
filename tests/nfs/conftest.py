"""Fixtures of the NFS protocol tests: a MemoryFs, the sans-IO dispatcher, a real server.

`memfs` runs on a fake clock; `local_client` talks to the dispatcher without a
socket; `nfs_server` is a real `NfsServer` on 127.0.0.1:0 and `client` an
`RpcClient` connected to it, with the root mounted.

A Hypothesis profile with a deadline is registered here only when no other
conftest loaded one (tests/conftest.py, if it exists, owns the global profile).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import settings

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.rpc import Dispatcher
from nfs.protocol.server import NfsServer, build_dispatcher
from tests.nfs.rpcclient import RpcClient

if getattr(settings, "_current_profile", "default") == "default":
    settings.register_profile("nfs", deadline=timedelta(milliseconds=500), max_examples=100)
    settings.load_profile("nfs")


def holding(
    lock: threading.RLock, bound: float | None = None
) -> tuple[threading.Thread, threading.Event]:
    """Hold ``lock`` in another thread (as a commit does) until the returned event is
    set, or for ``bound`` seconds (None: no bound; a call that waits for the lock is not
    answered before the test lets go)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(bound)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(30)
    return t, release


class FakeClock:
    """A clock for `MemoryFs(clock=...)` that moves only when told."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock starting in November 2023."""
    return FakeClock()


@pytest.fixture
def memfs(clock: FakeClock) -> MemoryFs:
    """An empty MemoryFs on the fake clock, root mode 0777 (any uid may create)."""
    return MemoryFs(clock, root_mode=0o777)


@pytest.fixture
def dispatcher(memfs: MemoryFs) -> Dispatcher:
    """NFSv3 + MOUNT (+ portmap advertising port 2049) over `memfs`, no transport."""
    return build_dispatcher(memfs, portmap_port=lambda: 2049)


@pytest.fixture
def local_client(dispatcher: Dispatcher) -> RpcClient:
    """A root AUTH_SYS client wired into `dispatcher`, root mounted."""
    client = RpcClient.over(dispatcher)
    client.mount("/")
    return client


@pytest.fixture
def nfs_server(memfs: MemoryFs) -> Iterator[NfsServer]:
    """A real NfsServer over `memfs` on 127.0.0.1, a free port."""
    with NfsServer(memfs, 0) as server:
        yield server


@pytest.fixture
def client(nfs_server: NfsServer) -> Iterator[RpcClient]:
    """A root AUTH_SYS client connected to `nfs_server`, root mounted."""
    with RpcClient("127.0.0.1", nfs_server.port) as c:
        c.mount("/")
        yield c
