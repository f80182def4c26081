"""The Linux kernel NFSv3 client (in the nfs-vm) against NfsServer(MemoryFs).

Proves the protocol layer with the client users have: mount (MNT, FSINFO,
PATHCONF, the NFSACL probe answered PROG_UNAVAIL), then the RPC sequences of
echo >>, sed -i (exclusive CREATE, SETATTR, RENAME), cp, mv, rm, mkdir, ls -l
(READDIRPLUS), a multi-MiB write (UNSTABLE WRITEs + COMMIT) read back after
dropping the page cache. About 5 s per VM run.
"""

from __future__ import annotations

import hashlib
import textwrap

import pytest

from nfs.protocol.memfs import MemoryFs
from nfs.protocol.server import NfsServer
from tests.nfs.vmclient import run_in_vm, vm_status

pytestmark = pytest.mark.mount


@pytest.fixture(scope="module", autouse=True)
def _vm() -> None:
    ok, reason = vm_status()
    if not ok:
        pytest.skip(f"nfs-vm unavailable: {reason}")


def kernel_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "guest kernel:" in line]


def test_coreutils_and_sed_through_the_kernel_client() -> None:
    fs = MemoryFs(root_mode=0o777)
    fs.put("/a.txt", b"alpha\nbeta\n")
    fs.put("/log.txt", b"first line\n")
    script = textwrap.dedent(
        """\
        set -eu
        cd /mnt
        cat a.txt | wc -l
        echo "second line" >> log.txt
        echo "third line" >> log.txt
        sed -i s/alpha/ALPHA/ a.txt
        cat a.txt
        echo hi > new.txt
        cp a.txt copy.txt
        mkdir -p d/e
        mv copy.txt d/e/moved.txt
        mv new.txt renamed.txt
        head -c 2500000 /dev/zero | tr '\\0' 'z' > big.bin
        md5sum big.bin | cut -d' ' -f1
        sync
        echo 3 > /proc/sys/vm/drop_caches
        md5sum big.bin | cut -d' ' -f1
        truncate -s 5 big.bin
        stat -c '%s' big.bin
        touch t && chmod 600 t && stat -c '%a' t
        rm t
        mkdir gone && rmdir gone
        ls -l d/e | tail -n +2 | awk '{print $1, $5, $9}'
        ls -a | sort | tr '\\n' ' '
        echo
        rm -rf d
        """
    )
    with NfsServer(fs, 0) as server:
        res = run_in_vm(server.port, script, timeout=180)
    assert res.returncode == 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert "preserving permissions" not in res.stderr  # NFSACL answered PROG_UNAVAIL
    assert kernel_messages(res.stderr) == []
    digest = hashlib.md5(b"z" * 2_500_000).hexdigest()
    out = res.stdout.splitlines()
    assert out[:3] == ["2", "ALPHA", "beta"]
    assert out[3:5] == [digest, digest]
    assert out[5:7] == ["5", "600"]
    assert out[7] == "-rw-r--r-- 11 moved.txt"
    assert out[8].split() == [".", "..", "a.txt", "big.bin", "d", "log.txt", "renamed.txt"]
    # and the host side sees the same
    assert fs.get("/log.txt") == b"first line\nsecond line\nthird line\n"
    assert fs.get("/a.txt") == b"ALPHA\nbeta\n"
    assert fs.get("/renamed.txt") == b"hi\n"
    assert fs.get("/big.bin") == b"zzzzz"
    assert fs.listdir(fs.root_dir()) == ["a.txt", "big.bin", "log.txt", "renamed.txt"]


def test_a_user_writes_as_itself() -> None:
    fs = MemoryFs(root_mode=0o777)
    fs.put("/root-only.txt", b"secret\n", mode=0o600)
    script = textwrap.dedent(
        """\
        cd /mnt
        id -u
        echo mine > mine.txt && stat -c '%u:%g' mine.txt
        cat root-only.txt 2>/dev/null || echo denied
        echo x >> root-only.txt 2>/dev/null || echo denied
        """
    )
    with NfsServer(fs, 0) as server:
        res = run_in_vm(server.port, script, user="1000:1000")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["1000", "1000:1000", "denied", "denied"]
    assert fs.getattr(fs.resolve("/mine.txt")).uid == 1000
    assert fs.get("/root-only.txt") == b"secret\n"


def test_mount_through_the_port_mapper() -> None:
    """With no ports given, the kernel asks PMAP v2 GETPORT on host port 111 (over TCP)."""
    fs = MemoryFs()
    fs.put("/via-portmap.txt", b"found\n")
    try:
        server = NfsServer(fs, 0, portmapper=True, portmap_port=111).start()
    except OSError as err:
        pytest.skip(f"port 111 unavailable: {err}")
    try:
        res = run_in_vm(0, "cat /mnt/via-portmap.txt", rpcbind=True)
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stderr
    assert res.stdout == "found\n"
