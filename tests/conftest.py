"""Configuration shared by the whole test suite.

Hypothesis runs under the ``posixlake`` profile (a deadline, a bounded number of
examples); ``HYPOTHESIS_PROFILE=thorough`` runs many more examples. One moto_server and
one Azurite serve every test that needs object storage (started on first use).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import settings

from tests.storage.servers import LocalServer, ServerUnavailable, start_azurite, start_moto

# The deadline is generous: CI machines have 2 cores shared with Spark, servers and VMs.
settings.register_profile("posixlake", deadline=timedelta(seconds=10), max_examples=60)
settings.register_profile("thorough", deadline=timedelta(seconds=30), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "posixlake"))


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the NFS server's state (write journals) of every test out of the home directory."""
    old = os.environ.get("POSIXLAKE_STATE_DIR")
    os.environ["POSIXLAKE_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("POSIXLAKE_STATE_DIR", None)
    else:
        os.environ["POSIXLAKE_STATE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def _segment_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the NFS server's CSV segment cache of every test out of the home directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POSIXLAKE_SEGMENT_CACHE", str(tmp_path_factory.mktemp("segments")))
        yield


@pytest.fixture(scope="session")
def moto_server() -> Iterator[LocalServer]:
    """One moto_server for the session (credentials are not checked)."""
    try:
        server = start_moto()
    except ServerUnavailable as err:
        pytest.skip(str(err))
    with server:
        yield server


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One Azurite blob server (in-memory) for the session."""
    try:
        server = start_azurite(workdir=str(tmp_path_factory.mktemp("azurite")))
    except ServerUnavailable as err:
        pytest.skip(str(err))
    with server:
        yield server
