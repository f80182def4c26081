"""The NFSv4.0 state machine (RFC 7530 §9, §16.33-34): client ids, open-owners with their
seqids, open stateids, leases and the grace period. Sans-IO: the clock is injected.

- **Clients** (§9.1.2, §16.33): SETCLIENTID makes an unconfirmed record with a new
  clientid and a confirm verifier; SETCLIENTID_CONFIRM confirms it. A client that
  confirms a new verifier (it rebooted) loses the state of its earlier incarnation.
- **Open-owners** (§9.1.7): each seqid-mutating operation (OPEN, OPEN_CONFIRM,
  OPEN_DOWNGRADE, CLOSE) carries the owner's next seqid. The last seqid again is a
  retransmission: it gets the cached reply (`Replay`); any other is NFS4ERR_BAD_SEQID. A
  new owner's first OPEN must be confirmed (OPEN_CONFIRM) before its stateid is used.
- **Open stateids** (§9.1.4): one per (owner, file); an OPEN of the same file by the same
  owner upgrades it (its seqid goes up). Share reservations of other owners conflict.
- **Leases** (§9.5): any operation naming the client renews its lease; a client not heard
  from for a lease is purged with its opens, which `expire` hands back to the caller
  (the service drops their staged edits, unapplied).
- **Grace** (§9.6.2, §9.6.3.4): the clients that held state are kept in a small file
  (``records``: a digest of each confirmed client's id string, fsynced), so a restarted
  server knows who may reclaim. If the file names any, the grace period (one lease, or
  `grace_seconds`) starts: reclaims (CLAIM_PREVIOUS) by those clients are served (others:
  NFS4ERR_RECLAIM_BAD); a new open that denies others (share_deny) is NFS4ERR_GRACE, one
  that denies nothing is served, as it cannot conflict with a reclaim (no delegations, no
  locks; §9.6.2), and a reclaim that would deny it gets NFS4ERR_RECLAIM_CONFLICT. After
  it, a reclaim is NFS4ERR_NO_GRACE. Without records (or none listed) there is no grace.

A stateid's 12 ``other`` bytes are the boot (4), the client's number (4) and the open's
number (4), so a stateid or clientid of an earlier boot is told apart (STALE_*).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nfs.protocol.nfs4.ops import OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH
from nfs.protocol.nfs4.types import Nfsstat4, Stateid4

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "NO_BUMP",
    "Client",
    "Conflict",
    "LockState",
    "Nfs4State",
    "OpenOwner",
    "OpenState",
    "Replay",
    "StateError",
]

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS: Final = 90
ANONYMOUS: Final = Stateid4(0, bytes(12))
BYPASS: Final = Stateid4(0xFFFFFFFF, b"\xff" * 12)
_OTHER: Final = struct.Struct(">III")
_ALL_ONES: Final = 0xFFFFFFFFFFFFFFFF

NO_BUMP: Final = frozenset(
    {
        Nfsstat4.NFS4ERR_STALE_CLIENTID,
        Nfsstat4.NFS4ERR_STALE_STATEID,
        Nfsstat4.NFS4ERR_BAD_STATEID,
        Nfsstat4.NFS4ERR_BAD_SEQID,
        Nfsstat4.NFS4ERR_BADXDR,
        Nfsstat4.NFS4ERR_RESOURCE,
        Nfsstat4.NFS4ERR_NOFILEHANDLE,
        Nfsstat4.NFS4ERR_MOVED,
    }
)
"""Statuses after which an owner's seqid does not advance (RFC 7530 §9.1.7)."""


def _digest(client_id: bytes) -> str:
    return hashlib.sha256(client_id).hexdigest()


class StateError(Exception):
    """A state operation failed with an NFSv4 status."""

    def __init__(self, status: Nfsstat4, message: str = "") -> None:
        super().__init__(message or status.name)
        self.status = status


@dataclass
class Client:
    """A client record (RFC 7530 §16.33): its id string, verifier and clientid."""

    id: bytes
    verifier: bytes
    clientid: int
    confirm: bytes
    confirmed: bool = False
    renewed: float = 0.0


@dataclass
class OpenState:
    """An open of one file by one open-owner (its stateid and share modes)."""

    other: bytes
    seqid: int
    fid: int
    owner: tuple[int, bytes]
    access: int
    deny: int
    closed: bool = False
    wrote: bool = False
    cred: Any = None
    """The caller that opened it (the service's writer context)."""

    def stateid(self) -> Stateid4:
        """The current stateid of this open."""
        return Stateid4(self.seqid, self.other)


@dataclass
class OpenOwner:
    """An open-owner: its last seqid, whether it is confirmed, and the last reply."""

    key: tuple[int, bytes]
    seqid: int | None = None
    confirmed: bool = False
    reply: Any = None
    opens: dict[int, OpenState] = field(default_factory=dict)


@dataclass
class LockState:
    """The byte-range locks of one lock-owner on one file (RFC 7530 §9.1.4.1): its stateid
    and its ranges ``(start, end, write)``, end exclusive (2**64: to the end of any file)."""

    other: bytes
    seqid: int
    fid: int
    owner: tuple[int, bytes]
    open_other: bytes
    ranges: list[tuple[int, int, bool]] = field(default_factory=list)

    def stateid(self) -> Stateid4:
        """The current stateid of these locks."""
        return Stateid4(self.seqid, self.other)


@dataclass(frozen=True)
class Conflict:
    """A lock that denies a request (LOCK4denied): its range, whether it is a write lock,
    and its owner."""

    offset: int
    length: int
    write: bool
    owner: tuple[int, bytes]


@dataclass(frozen=True)
class Replay:
    """A retransmitted seqid: answer with ``reply`` (the result cached for it)."""

    reply: Any


class Nfs4State:
    """Clients, open-owners, opens and leases of one server boot (thread-safe).

    Args:
        clock: monotonic seconds (injected in tests).
        lease_seconds: the lease (the ``lease_time`` attribute).
        grace_seconds: the grace period after the start (None: one lease; 0: none).
        boot: this boot's 32-bit number (random by default).
        records: the file of the clients that hold state (stable storage, see Grace in
            the module docstring); None keeps none (a reclaim without records is trusted
            during an explicit grace period, else NFS4ERR_NO_GRACE).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        grace_seconds: float | None = None,
        boot: int | None = None,
        records: str | os.PathLike[str] | None = None,
    ) -> None:
        self._clock = clock
        self.lease_seconds = lease_seconds
        self._boot = boot if boot is not None else secrets.randbits(32)
        self._records = Path(records) if records is not None else None
        self._reclaimable = self._load_records()
        self._recorded = set(self._reclaimable)
        if grace_seconds is None:
            grace_seconds = lease_seconds if self._reclaimable or records is None else 0
        self._grace_until = clock() + grace_seconds
        self._lock = threading.RLock()
        self._clients: dict[int, Client] = {}  # clientid -> confirmed or not
        self._by_id: dict[bytes, int] = {}  # id string -> confirmed clientid
        self._unconfirmed: dict[bytes, int] = {}  # id string -> unconfirmed clientid
        self._owners: dict[tuple[int, bytes], OpenOwner] = {}
        self._opens: dict[bytes, OpenState] = {}
        self._expired: set[int] = set()
        self._lock_owners: dict[tuple[int, bytes], OpenOwner] = {}
        self._locks: dict[bytes, LockState] = {}
        self._next_client = 0
        self._next_open = 0

    # ------------------------------------------------------------ stable records

    def _load_records(self) -> set[str]:
        if self._records is None:
            return set()
        try:
            text = self._records.read_text()
        except FileNotFoundError:
            return set()
        return {line for line in text.split() if len(line) == 64}

    def _save_records(self) -> None:
        """Write the confirmed clients (and those that may still reclaim) durably."""
        path = self._records
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write("".join(f"{d}\n" for d in sorted(self._recorded)))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _record(self, client_id: bytes, *, keep: bool) -> None:
        digest = _digest(client_id)
        if keep == (digest in self._recorded):
            return
        if keep:
            self._recorded.add(digest)
        else:
            self._recorded.discard(digest)
            self._reclaimable.discard(digest)
        try:
            self._save_records()
        except OSError as err:  # a lost record only costs that client its reclaim
            logger.warning("cannot record NFSv4 clients in %s: %s", self._records, err)

    # ------------------------------------------------------------ ids

    @property
    def boot(self) -> int:
        """This boot's number."""
        return self._boot

    def _new_clientid(self) -> int:
        self._next_client += 1
        return self._boot << 32 | self._next_client

    def _other(self, clientid: int) -> bytes:
        self._next_open += 1
        return _OTHER.pack(self._boot, clientid & 0xFFFFFFFF, self._next_open)

    def in_grace(self) -> bool:
        """Whether the grace period after the start is still on."""
        return self._clock() < self._grace_until

    # ------------------------------------------------------------ clients

    def setclientid(self, id: bytes, verifier: bytes) -> tuple[int, bytes]:
        """SETCLIENTID (RFC 7530 §16.33.5): record an unconfirmed client.

        Returns:
            (clientid, confirm verifier). The same verifier as the confirmed record's
            keeps its clientid (a callback update); a new one gets a new clientid.
        """
        with self._lock:
            confirmed = self._by_id.get(id)
            old = self._unconfirmed.pop(id, None)
            if old is not None:
                self._clients.pop(old, None)
            if confirmed is not None and self._clients[confirmed].verifier == verifier:
                clientid = confirmed
                rec = self._clients[confirmed]
                rec.confirm = secrets.token_bytes(8)
                rec.renewed = self._clock()
                return clientid, rec.confirm
            clientid = self._new_clientid()
            rec = Client(id, verifier, clientid, secrets.token_bytes(8), renewed=self._clock())
            self._clients[clientid] = rec
            self._unconfirmed[id] = clientid
            return clientid, rec.confirm

    def confirm(self, clientid: int, confirm: bytes) -> list[OpenState]:
        """SETCLIENTID_CONFIRM: confirm the client; return the opens of the incarnation it
        replaces (a rebooted client), which are dropped.

        Raises:
            StateError: STALE_CLIENTID (unknown, or the wrong confirm verifier).
        """
        with self._lock:
            rec = self._clients.get(clientid)
            if rec is None or rec.confirm != confirm:
                raise StateError(Nfsstat4.NFS4ERR_STALE_CLIENTID)
            rec.renewed = self._clock()
            if rec.confirmed:
                return []  # a retransmission
            dropped: list[OpenState] = []
            earlier = self._by_id.get(rec.id)
            if earlier is not None and earlier != clientid:
                dropped = self._purge(earlier)
            self._unconfirmed.pop(rec.id, None)
            rec.confirmed = True
            self._by_id[rec.id] = clientid
            self._record(rec.id, keep=True)
            return dropped

    def client(self, clientid: int) -> Client:
        """Return the confirmed client ``clientid`` and renew its lease.

        Raises:
            StateError: STALE_CLIENTID (unknown, other boot, unconfirmed), EXPIRED.
        """
        with self._lock:
            rec = self._clients.get(clientid)
            if rec is None or not rec.confirmed:
                if clientid in self._expired:
                    raise StateError(Nfsstat4.NFS4ERR_EXPIRED)
                raise StateError(Nfsstat4.NFS4ERR_STALE_CLIENTID)
            rec.renewed = self._clock()
            return rec

    def renew(self, clientid: int) -> None:
        """RENEW: renew the lease of ``clientid`` (StateError as `client`)."""
        self.client(clientid)

    def expire(self) -> list[tuple[Client, list[OpenState]]]:
        """Purge the clients whose lease ran out; return them with their opens."""
        with self._lock:
            now = self._clock()
            if self._reclaimable and not self.in_grace():
                # the grace period is over: who did not come back has nothing to reclaim
                self._reclaimable = set()
                live = {_digest(c.id) for c in self._clients.values() if c.confirmed}
                if self._recorded - live:
                    self._recorded &= live
                    try:
                        self._save_records()
                    except OSError as err:
                        logger.warning("cannot record NFSv4 clients in %s: %s", self._records, err)
            gone = [c for c in self._clients.values() if now - c.renewed > self.lease_seconds]
            out: list[tuple[Client, list[OpenState]]] = []
            for rec in gone:
                if rec.confirmed:
                    self._expired.add(rec.clientid)
                    if self._by_id.get(rec.id) == rec.clientid:
                        self._record(rec.id, keep=False)  # its state is gone: no reclaim
                out.append((rec, self._purge(rec.clientid)))
            return out

    def _purge(self, clientid: int) -> list[OpenState]:
        rec = self._clients.pop(clientid, None)
        if rec is not None:
            if self._by_id.get(rec.id) == clientid:
                del self._by_id[rec.id]
            if self._unconfirmed.get(rec.id) == clientid:
                del self._unconfirmed[rec.id]
        dropped: list[OpenState] = []
        for key in [k for k in self._owners if k[0] == clientid]:
            owner = self._owners.pop(key)
            dropped.extend(o for o in owner.opens.values() if not o.closed)
        for other in [o for o, st in self._opens.items() if st.owner[0] == clientid]:
            del self._opens[other]
        for key in [k for k in self._lock_owners if k[0] == clientid]:
            del self._lock_owners[key]
        for other in [o for o, ls in self._locks.items() if ls.owner[0] == clientid]:
            del self._locks[other]
        return dropped

    def clients(self) -> list[Client]:
        """The clients known (confirmed or not)."""
        with self._lock:
            return list(self._clients.values())

    # ------------------------------------------------------------ seqids

    def owner(self, clientid: int, owner: bytes) -> OpenOwner:
        """Return (making it) the open-owner; the client must be confirmed (StateError)."""
        with self._lock:
            self.client(clientid)
            key = (clientid, owner)
            found = self._owners.get(key)
            if found is None:
                found = self._owners[key] = OpenOwner(key)
            return found

    def check_seqid(self, owner: OpenOwner, seqid: int) -> Replay | None:
        """Check ``seqid`` for ``owner``: None to go on, a `Replay` for a retransmission.

        Raises:
            StateError: BAD_SEQID.
        """
        with self._lock:
            if owner.seqid is None:
                return None  # a new owner takes any seqid
            if seqid == owner.seqid and owner.reply is not None:
                return Replay(owner.reply)
            if seqid != (owner.seqid + 1) & 0xFFFFFFFF:
                raise StateError(Nfsstat4.NFS4ERR_BAD_SEQID)
            return None

    def done_seqid(self, owner: OpenOwner, seqid: int, status: Nfsstat4, reply: Any) -> None:
        """Record the reply of a seqid operation (the seqid advances unless `NO_BUMP`)."""
        with self._lock:
            if status in NO_BUMP:
                return
            owner.seqid = seqid
            owner.reply = reply
            for fid in [f for f, st in owner.opens.items() if st.closed]:
                self._opens.pop(owner.opens.pop(fid).other, None)

    # ------------------------------------------------------------ opens

    def open(
        self, owner: OpenOwner, fid: int, access: int, deny: int, *, reclaim: bool = False
    ) -> tuple[OpenState, bool]:
        """OPEN ``fid`` for ``owner`` (a new open or an upgrade).

        Returns:
            (the open, whether the owner must OPEN_CONFIRM it).

        Raises:
            StateError: INVAL (bad share bits), GRACE (not a reclaim during grace),
                NO_GRACE (a reclaim after it), SHARE_DENIED (a conflicting share).
        """
        if not 0 < access <= OPEN4_SHARE_ACCESS_BOTH or not 0 <= deny <= OPEN4_SHARE_DENY_BOTH:
            raise StateError(Nfsstat4.NFS4ERR_INVAL)
        with self._lock:
            grace = self.in_grace()
            if reclaim and not grace:
                raise StateError(Nfsstat4.NFS4ERR_NO_GRACE)
            if grace and not reclaim and deny:
                # a new open that denies others could conflict with a reclaim to come; one
                # that denies nothing cannot (no delegations, no locks: RFC 7530 §9.6.2), so
                # it is served (a reclaim that denies what it opened: RECLAIM_CONFLICT)
                raise StateError(Nfsstat4.NFS4ERR_GRACE)
            if reclaim and self._records is not None:
                client = self._clients.get(owner.key[0])
                if client is None or _digest(client.id) not in self._reclaimable:
                    raise StateError(Nfsstat4.NFS4ERR_RECLAIM_BAD)
            for st in self._opens.values():
                conflict = access & st.deny or deny & st.access
                if st.fid == fid and st.owner != owner.key and not st.closed and conflict:
                    raise StateError(
                        Nfsstat4.NFS4ERR_RECLAIM_CONFLICT
                        if reclaim
                        else Nfsstat4.NFS4ERR_SHARE_DENIED
                    )
            if reclaim:
                # a reclaim confirms its owner (as knfsd does): the Linux client sends its
                # reclaim without GETFH and could not OPEN_CONFIRM it
                owner.confirmed = True
            known = owner.opens.get(fid)
            if known is not None and not known.closed:
                known.access |= access
                known.deny |= deny
                known.seqid += 1
                return known, not owner.confirmed
            st = OpenState(self._other(owner.key[0]), 1, fid, owner.key, access, deny)
            owner.opens[fid] = st
            self._opens[st.other] = st
            return st, not owner.confirmed

    def _find(self, sid: Stateid4) -> OpenState:
        if len(sid.other) != 12:
            raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
        boot, client, _ = _OTHER.unpack(sid.other)
        if boot != self._boot:
            raise StateError(Nfsstat4.NFS4ERR_STALE_STATEID)
        st = self._opens.get(sid.other)
        if st is None:
            if self._boot << 32 | client in self._expired:
                raise StateError(Nfsstat4.NFS4ERR_EXPIRED)
            raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
        return st

    def owner_of(self, sid: Stateid4) -> OpenOwner:
        """The open-owner of a stateid (closed opens too: for a retransmitted CLOSE).

        Raises:
            StateError: BAD_STATEID, STALE_STATEID, EXPIRED.
        """
        with self._lock:
            st = self._find(sid)
            self.client(st.owner[0])
            return self._owners[st.owner]

    def _current(self, sid: Stateid4, fid: int | None) -> OpenState:
        st = self._find(sid)
        if st.closed:
            raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
        if fid is not None and st.fid != fid:
            raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
        if sid.seqid < st.seqid:
            raise StateError(Nfsstat4.NFS4ERR_OLD_STATEID)
        if sid.seqid > st.seqid:
            raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
        self.client(st.owner[0])
        return st

    def open_confirm(self, sid: Stateid4, fid: int) -> OpenState:
        """OPEN_CONFIRM: confirm the owner of ``sid``; the stateid's seqid goes up."""
        with self._lock:
            st = self._current(sid, fid)
            owner = self._owners[st.owner]
            if owner.confirmed:
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            owner.confirmed = True
            st.seqid += 1
            return st

    def downgrade(self, sid: Stateid4, fid: int, access: int, deny: int) -> OpenState:
        """OPEN_DOWNGRADE to modes the open already has (INVAL otherwise)."""
        with self._lock:
            st = self._current(sid, fid)
            if access & ~st.access or deny & ~st.deny or not access:
                raise StateError(Nfsstat4.NFS4ERR_INVAL)
            st.access, st.deny = access, deny
            st.seqid += 1
            return st

    def close(self, sid: Stateid4, fid: int) -> OpenState:
        """CLOSE: the open ends (kept, closed, until the owner's next seqid operation)."""
        with self._lock:
            st = self._current(sid, fid)
            if any(ls.open_other == st.other and ls.ranges for ls in self._locks.values()):
                raise StateError(Nfsstat4.NFS4ERR_LOCKS_HELD)
            for other in [o for o, ls in self._locks.items() if ls.open_other == st.other]:
                del self._locks[other]
            st.closed = True
            st.seqid += 1
            return st

    def for_io(self, sid: Stateid4, fid: int, *, write: bool) -> OpenState | None:
        """Return the open a READ / WRITE / SETATTR names (None: a special stateid); a
        lock stateid names the open its locks were taken under.

        Raises:
            StateError: BAD_STATEID, STALE_STATEID, OLD_STATEID, EXPIRED, OPENMODE (a
                WRITE on an open without write access, a READ without read access).
        """
        if sid in (ANONYMOUS, BYPASS):
            return None
        with self._lock:
            if len(sid.other) == 12 and sid.other in self._locks:
                # a lock stateid (RFC 7530 §9.1.4.1: the Linux client sends it for I/O
                # of a process holding locks): the I/O is its open's
                ls = self.locks_of(sid)
                if ls.fid != fid:
                    raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
                opened = self._opens.get(ls.open_other)
                if opened is None or opened.closed:
                    raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
                sid = opened.stateid()
            st = self._current(sid, fid)
            if not self._owners[st.owner].confirmed:
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            need = 2 if write else 1
            if not st.access & need and not (not write and sid != BYPASS and st.access & 2):
                raise StateError(Nfsstat4.NFS4ERR_OPENMODE)
            return st

    # ------------------------------------------------------------ byte-range locks

    @staticmethod
    def _range(offset: int, length: int) -> tuple[int, int]:
        """[start, end) of a lock request (RFC 7530 §16.10.4: length all ones = to EOF)."""
        if length == 0:
            raise StateError(Nfsstat4.NFS4ERR_INVAL)
        if length == _ALL_ONES:
            return offset, 1 << 64
        if offset + length > 1 << 64:
            raise StateError(Nfsstat4.NFS4ERR_INVAL)
        return offset, offset + length

    def lock_owner(self, clientid: int, owner: bytes) -> OpenOwner:
        """Return (making it) a lock-owner (its seqid kept as an open-owner's is)."""
        with self._lock:
            self.client(clientid)
            key = (clientid, owner)
            found = self._lock_owners.get(key)
            if found is None:
                found = self._lock_owners[key] = OpenOwner(key, confirmed=True)
            return found

    def locks_of(self, sid: Stateid4) -> LockState:
        """The lock state a lock stateid names (BAD / STALE / OLD stateid, EXPIRED)."""
        with self._lock:
            if len(sid.other) != 12:
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            boot, client, _ = _OTHER.unpack(sid.other)
            if boot != self._boot:
                raise StateError(Nfsstat4.NFS4ERR_STALE_STATEID)
            ls = self._locks.get(sid.other)
            if ls is None:
                if self._boot << 32 | client in self._expired:
                    raise StateError(Nfsstat4.NFS4ERR_EXPIRED)
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            if sid.seqid < ls.seqid:
                raise StateError(Nfsstat4.NFS4ERR_OLD_STATEID)
            if sid.seqid > ls.seqid:
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            self.client(ls.owner[0])
            return ls

    def lock_state_for(self, open_sid: Stateid4, fid: int, owner: OpenOwner) -> LockState:
        """The lock state of ``owner`` on the file of an open (a new lock-owner's first LOCK)."""
        with self._lock:
            st = self._current(open_sid, fid)
            if owner.key[0] != st.owner[0]:
                raise StateError(Nfsstat4.NFS4ERR_BAD_STATEID)
            for ls in self._locks.values():
                if ls.owner == owner.key and ls.fid == fid:
                    return ls
            ls = LockState(self._other(owner.key[0]), 0, fid, owner.key, st.other)
            self._locks[ls.other] = ls
            return ls

    def _conflict(
        self, fid: int, owner: tuple[int, bytes], start: int, end: int, write: bool
    ) -> Conflict | None:
        for ls in self._locks.values():
            if ls.fid != fid or ls.owner == owner:
                continue
            for lo, hi, w in ls.ranges:
                if lo < end and start < hi and (write or w):
                    length = _ALL_ONES if hi == 1 << 64 else hi - lo
                    return Conflict(lo, length, w, ls.owner)
        return None

    def lock(self, ls: LockState, offset: int, length: int, *, write: bool) -> Conflict | None:
        """Take a lock for ``ls``'s owner; the conflicting lock if another owner holds one
        (nothing taken), else None (the stateid's seqid goes up)."""
        start, end = self._range(offset, length)
        with self._lock:
            found = self._conflict(ls.fid, ls.owner, start, end, write)
            if found is not None:
                return found
            ls.ranges = [*_cut(ls.ranges, start, end), (start, end, write)]
            ls.seqid += 1
            return None

    def test_lock(
        self, fid: int, owner: tuple[int, bytes], offset: int, length: int, *, write: bool
    ) -> Conflict | None:
        """LOCKT: the lock that would deny this request, if any."""
        start, end = self._range(offset, length)
        with self._lock:
            return self._conflict(fid, owner, start, end, write)

    def unlock(self, ls: LockState, offset: int, length: int) -> None:
        """LOCKU: release the range (the stateid's seqid goes up)."""
        start, end = self._range(offset, length)
        with self._lock:
            ls.ranges = _cut(ls.ranges, start, end)
            ls.seqid += 1

    def release_lock_owner(self, clientid: int, owner: bytes) -> None:
        """RELEASE_LOCKOWNER: forget a lock-owner that holds no locks (LOCKS_HELD)."""
        with self._lock:
            self.client(clientid)
            key = (clientid, owner)
            held = [o for o, ls in self._locks.items() if ls.owner == key]
            if any(self._locks[o].ranges for o in held):
                raise StateError(Nfsstat4.NFS4ERR_LOCKS_HELD)
            for other in held:
                del self._locks[other]
            self._lock_owners.pop(key, None)

    def opens(self) -> list[OpenState]:
        """Every open not closed."""
        with self._lock:
            return [st for st in self._opens.values() if not st.closed]

    def opens_of(self, clientid: int | None, fid: int) -> list[OpenState]:
        """The opens of ``fid`` that are not closed, by the open-owners of ``clientid``
        (None: of any client)."""
        with self._lock:
            return [
                st
                for st in self._opens.values()
                if st.fid == fid and clientid in (None, st.owner[0]) and not st.closed
            ]


def _cut(ranges: list[tuple[int, int, bool]], start: int, end: int) -> list[tuple[int, int, bool]]:
    """``ranges`` without [start, end) (a range across it is split in two)."""
    out: list[tuple[int, int, bool]] = []
    for lo, hi, w in ranges:
        if hi <= start or end <= lo:
            out.append((lo, hi, w))
            continue
        if lo < start:
            out.append((lo, start, w))
        if end < hi:
            out.append((end, hi, w))
    return out
