"""A duplicate-request cache (DRC) for non-idempotent calls, as knfsd and NFS-Ganesha keep.

An ONC RPC client retransmits a call whose reply it did not get (a connection reset, a
timeout) with the same xid and the same arguments. For an idempotent call (GETATTR,
READ, LOOKUP) running it again is harmless. For WRITE, COMMIT, SETATTR, CREATE, REMOVE,
RENAME, ... it is not: a retransmitted append would insert its row twice, a retransmitted
REMOVE of ``data.csv`` would delete what another writer inserted meanwhile. So the server
remembers, for such calls, the reply it sent, and answers a retransmission with it,
changing nothing.

The rules are those of Linux knfsd (``fs/nfsd/nfscache.c``) and NFS-Ganesha
(``src/RPCAL/nfs_dupreq.c``):

- A request is named by the client's address (host and port: the Linux client keeps its
  source port across reconnects), the xid, program, version and procedure, the length of
  its arguments and a checksum of their first 256 bytes (``RC_CSUMLEN`` in knfsd; the
  checksum tells a retransmission from a new call of a client that reused the xid, as
  after a reboot).
- Only the procedures given at construction are cached (knfsd's ``RC_REPLBUFF`` /
  Ganesha's ``CAN_BE_DUP``): the non-idempotent ones.
- A retransmission that arrives while the original call is still running is dropped (no
  reply: the client retransmits again later and then gets the cached reply). That is
  knfsd's ``RC_DROPIT`` for an ``RC_INPROG`` entry; Ganesha parks such duplicates on the
  entry and answers them when the original finishes, which a client sees the same way.
- A retransmission of a completed call gets the cached reply bytes (with its xid).
- Bounded: a completed entry is forgotten ``max_age`` seconds after its reply (knfsd's
  ``RC_EXPIRE``, 120 s), and the oldest completed entries go first when there are more
  than ``max_entries`` or their replies pass ``max_bytes``. A running call's entry is
  never evicted (there are at most as many as calls in flight).

Sans-IO and thread-safe: the clock is injected, and one lock guards the entries (the
server runs calls in worker threads).
"""

from __future__ import annotations

import enum
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "CHECKSUM_BYTES",
    "DuplicateRequestCache",
    "InProgress",
    "RequestKey",
]

CHECKSUM_BYTES: Final = 256
"""How many bytes of the arguments the checksum covers (knfsd's ``RC_CSUMLEN``)."""


class RequestKey(NamedTuple):
    """What names one request: a retransmission has the same key (a tuple: hashed in C).

    Attributes:
        peer: the client's address ("host:port"), or None for a direct caller.
        xid, prog, vers, proc: from the call header.
        length: the length of the arguments in bytes.
        checksum: CRC-32 of the first `CHECKSUM_BYTES` bytes of the arguments.
    """

    peer: str | None
    xid: int
    prog: int
    vers: int
    proc: int
    length: int
    checksum: int

    @classmethod
    def of(
        cls, peer: str | None, xid: int, prog: int, vers: int, proc: int, args: bytes | memoryview
    ) -> RequestKey:
        """Return the key of a call whose encoded arguments are ``args``."""
        return cls(peer, xid, prog, vers, proc, len(args), zlib.crc32(args[:CHECKSUM_BYTES]))


class InProgress(enum.Enum):
    """The answer of `DuplicateRequestCache.begin` for a retransmission of a running call."""

    DROP = "drop"


@dataclass(slots=True)
class _Done:
    reply: bytes
    at: float


class DuplicateRequestCache:
    """The replies of recent non-idempotent calls, for their retransmissions (thread-safe).

    Args:
        procedures: the (program, version, procedure) triples to cache.
        max_entries: completed entries kept at most.
        max_bytes: reply bytes kept at most (summed over the completed entries).
        max_age: seconds a completed entry is kept after its reply.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(
        self,
        procedures: Iterable[tuple[int, int, int]],
        *,
        max_entries: int = 8192,
        max_bytes: int = 8 << 20,
        max_age: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1 or max_age <= 0:
            raise ValueError("max_entries, max_bytes and max_age must be positive")
        self.procedures: Final = frozenset(procedures)
        """The (prog, vers, proc) of the procedures whose calls are cached."""
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._running: set[RequestKey] = set()
        self._done: OrderedDict[RequestKey, _Done] = OrderedDict()  # oldest reply first
        self._bytes = 0
        self.hits = 0
        """Retransmissions answered from the cache."""
        self.drops = 0
        """Retransmissions dropped because the original call was running."""

    def __len__(self) -> int:
        """The number of entries (running and completed)."""
        with self._lock:
            return len(self._running) + len(self._done)

    def begin(self, key: RequestKey) -> bytes | InProgress | None:
        """Look ``key`` up before running its call.

        Returns:
            None: a new request; it is now running, and the caller must run it and then
            call `finish` (or `abandon`) with the same key. `InProgress.DROP`: the same
            request is running; send no reply. Bytes: the reply the request got; send
            them and do not run it.
        """
        with self._lock:
            self._expire_locked()
            if key in self._running:
                self.drops += 1
                return InProgress.DROP
            done = self._done.get(key)
            if done is not None:
                self.hits += 1
                return done.reply
            self._running.add(key)
            return None

    def begin_new(self, key: RequestKey) -> bool:
        """`begin` for a request this cache knows nothing of: True if ``key`` is new (it
        is now running: `finish` or `abandon` it), False with no effect otherwise (the
        request is running or done: `begin` tells which)."""
        with self._lock:
            self._expire_locked()
            if key in self._running or key in self._done:
                return False
            self._running.add(key)
            return True

    def finish(self, key: RequestKey, reply: bytes) -> None:
        """Record the reply of a request `begin` let run (its retransmissions get it)."""
        with self._lock:
            self._running.discard(key)
            old = self._done.pop(key, None)
            if old is not None:
                self._bytes -= len(old.reply)
            self._done[key] = _Done(reply, self._clock())
            self._bytes += len(reply)
            self._expire_locked()

    def abandon(self, key: RequestKey) -> None:
        """Forget a request that ran without a reply to cache (a retransmission runs it)."""
        with self._lock:
            self._running.discard(key)

    def _expire_locked(self) -> None:
        """Drop completed entries past their age, then the oldest past the bounds."""
        done = self._done
        oldest = self._clock() - self._max_age
        while done:
            key, first = next(iter(done.items()))
            if (
                first.at > oldest
                and len(done) <= self._max_entries
                and self._bytes <= self._max_bytes
            ):
                return
            del done[key]
            self._bytes -= len(first.reply)
