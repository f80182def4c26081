"""The NFSv4.0 state machine (nfs.protocol.nfs4.state) on an injected clock: clients, seqids and
replays, opens and stateids, leases, grace; and a Hypothesis stateful test against a model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from nfs.protocol.nfs4.state import ANONYMOUS, Nfs4State, Replay, StateError
from nfs.protocol.nfs4.types import Nfsstat4, Stateid4
from tests.nfs.conftest import FakeClock

READ, WRITE, BOTH = 1, 2, 3


def new_state(clock: FakeClock, *, grace: float = 0, lease: int = 90, boot: int = 7) -> Nfs4State:
    return Nfs4State(clock=clock, lease_seconds=lease, grace_seconds=grace, boot=boot)


def confirmed_client(state: Nfs4State, name: bytes = b"linux host") -> int:
    clientid, confirm = state.setclientid(name, b"verf0001")
    state.confirm(clientid, confirm)
    return clientid


def status_of(fn: object, *args: object, **kw: object) -> Nfsstat4:
    with pytest.raises(StateError) as err:
        fn(*args, **kw)  # type: ignore[operator]
    return err.value.status


def test_a_client_is_usable_only_once_confirmed(clock: FakeClock) -> None:
    state = new_state(clock)
    clientid, confirm = state.setclientid(b"c", b"verf0001")
    assert status_of(state.renew, clientid) == Nfsstat4.NFS4ERR_STALE_CLIENTID
    assert status_of(state.confirm, clientid, b"wrongver") == Nfsstat4.NFS4ERR_STALE_CLIENTID
    state.confirm(clientid, confirm)
    state.confirm(clientid, confirm)  # a retransmission
    state.renew(clientid)


def test_ids_of_another_boot_are_stale(clock: FakeClock) -> None:
    old = new_state(clock, boot=1)
    clientid = confirmed_client(old)
    owner = old.owner(clientid, b"o")
    st_, _ = old.open(owner, 10, READ, 0)
    new = new_state(clock, boot=2)
    assert status_of(new.renew, clientid) == Nfsstat4.NFS4ERR_STALE_CLIENTID
    assert status_of(new.owner_of, st_.stateid()) == Nfsstat4.NFS4ERR_STALE_STATEID


def test_a_rebooted_client_loses_the_opens_of_its_earlier_incarnation(clock: FakeClock) -> None:
    state = new_state(clock)
    first = confirmed_client(state)
    owner = state.owner(first, b"o")
    st_, _ = state.open(owner, 10, WRITE, 0)
    second, confirm = state.setclientid(b"linux host", b"verf0002")
    assert second != first
    assert state.confirm(second, confirm) == [st_]
    assert state.opens() == []
    assert status_of(state.renew, first) == Nfsstat4.NFS4ERR_STALE_CLIENTID


def test_the_same_verifier_keeps_the_clientid(clock: FakeClock) -> None:
    state = new_state(clock)
    clientid = confirmed_client(state)
    again, confirm = state.setclientid(b"linux host", b"verf0001")
    assert again == clientid
    state.confirm(again, confirm)


def test_seqids_advance_replay_or_are_bad(clock: FakeClock) -> None:
    state = new_state(clock)
    owner = state.owner(confirmed_client(state), b"o")
    assert state.check_seqid(owner, 41) is None  # a new owner takes any seqid
    state.done_seqid(owner, 41, Nfsstat4.NFS4_OK, "reply 41")
    assert state.check_seqid(owner, 41) == Replay("reply 41")
    assert status_of(state.check_seqid, owner, 43) == Nfsstat4.NFS4ERR_BAD_SEQID
    assert state.check_seqid(owner, 42) is None
    state.done_seqid(owner, 42, Nfsstat4.NFS4ERR_BAD_STATEID, "not cached")
    assert state.check_seqid(owner, 42) is None  # BAD_STATEID does not advance
    state.done_seqid(owner, 42, Nfsstat4.NFS4ERR_ACCESS, "reply 42")  # other errors do
    assert state.check_seqid(owner, 42) == Replay("reply 42")


def test_seqids_wrap(clock: FakeClock) -> None:
    state = new_state(clock)
    owner = state.owner(confirmed_client(state), b"o")
    state.done_seqid(owner, 0xFFFFFFFF, Nfsstat4.NFS4_OK, "r")
    assert state.check_seqid(owner, 0) is None


def test_a_new_owner_confirms_before_its_stateid_is_used(clock: FakeClock) -> None:
    state = new_state(clock)
    owner = state.owner(confirmed_client(state), b"o")
    st_, confirm = state.open(owner, 10, BOTH, 0)
    assert confirm
    assert status_of(state.for_io, st_.stateid(), 10, write=True) == (Nfsstat4.NFS4ERR_BAD_STATEID)
    confirmed = state.open_confirm(st_.stateid(), 10)
    assert confirmed.seqid == 2
    assert state.for_io(confirmed.stateid(), 10, write=True) is st_
    _, confirm = state.open(owner, 11, READ, 0)
    assert not confirm  # the owner is confirmed now


def test_an_upgrade_keeps_the_stateid_and_old_seqids_are_old(clock: FakeClock) -> None:
    state = new_state(clock)
    owner = state.owner(confirmed_client(state), b"o")
    st_, _ = state.open(owner, 10, READ, 0)
    first = state.open_confirm(st_.stateid(), 10).stateid()
    assert status_of(state.for_io, first, 10, write=True) == Nfsstat4.NFS4ERR_OPENMODE
    up, _ = state.open(owner, 10, WRITE, 0)
    assert up.other == first.other and up.access == BOTH
    assert status_of(state.for_io, first, 10, write=True) == Nfsstat4.NFS4ERR_OLD_STATEID
    assert state.for_io(up.stateid(), 10, write=True) is up
    assert status_of(state.for_io, up.stateid(), 11, write=False) == (Nfsstat4.NFS4ERR_BAD_STATEID)
    down = state.downgrade(up.stateid(), 10, READ, 0)
    assert down.access == READ
    assert status_of(state.downgrade, down.stateid(), 10, WRITE, 0) == Nfsstat4.NFS4ERR_INVAL


def test_share_deny_keeps_other_owners_out(clock: FakeClock) -> None:
    state = new_state(clock)
    clientid = confirmed_client(state)
    a, b = state.owner(clientid, b"a"), state.owner(clientid, b"b")
    state.open(a, 10, READ, WRITE)
    assert status_of(state.open, b, 10, WRITE, 0) == Nfsstat4.NFS4ERR_SHARE_DENIED
    state.open(b, 10, READ, 0)
    assert status_of(state.open, b, 10, READ, 0, reclaim=True) == Nfsstat4.NFS4ERR_NO_GRACE
    assert status_of(state.open, b, 10, 0, 0) == Nfsstat4.NFS4ERR_INVAL


def test_a_closed_stateid_is_bad_but_its_owner_is_found_for_a_replay(clock: FakeClock) -> None:
    state = new_state(clock)
    owner = state.owner(confirmed_client(state), b"o")
    st_, _ = state.open(owner, 10, BOTH, 0)
    sid = state.open_confirm(st_.stateid(), 10).stateid()
    closed = state.close(sid, 10)
    assert closed.closed and state.opens() == []
    assert status_of(state.for_io, sid, 10, write=False) == Nfsstat4.NFS4ERR_BAD_STATEID
    assert state.owner_of(sid) is owner
    assert state.for_io(ANONYMOUS, 10, write=True) is None  # a special stateid


def test_a_silent_client_expires_with_its_opens(clock: FakeClock) -> None:
    state = new_state(clock, lease=90)
    quiet = confirmed_client(state, b"quiet")
    busy = confirmed_client(state, b"busy")
    st_, _ = state.open(state.owner(quiet, b"o"), 10, WRITE, 0)
    clock.advance(60)
    state.renew(busy)
    assert state.expire() == []
    clock.advance(31)
    state.renew(busy)
    gone = state.expire()
    assert [(c.clientid, opens) for c, opens in gone] == [(quiet, [st_])]
    assert status_of(state.renew, quiet) == Nfsstat4.NFS4ERR_EXPIRED
    assert status_of(state.for_io, st_.stateid(), 10, write=True) == Nfsstat4.NFS4ERR_EXPIRED
    state.renew(busy)


def test_grace_admits_only_reclaims_then_only_new_opens(clock: FakeClock) -> None:
    state = new_state(clock, grace=90)
    owner = state.owner(confirmed_client(state), b"o")
    assert state.in_grace()
    assert status_of(state.open, owner, 10, READ, WRITE) == Nfsstat4.NFS4ERR_GRACE
    state.open(owner, 10, READ, 0, reclaim=True)
    other = state.owner(confirmed_client(state, b"new"), b"o")
    state.open(other, 12, WRITE, 0)  # denies nothing: cannot conflict with a reclaim
    assert status_of(state.open, owner, 12, READ, WRITE, reclaim=True) == (
        Nfsstat4.NFS4ERR_RECLAIM_CONFLICT
    )
    clock.advance(91)
    assert status_of(state.open, owner, 11, READ, 0, reclaim=True) == Nfsstat4.NFS4ERR_NO_GRACE
    state.open(owner, 11, READ, 0)


class StateModel(RuleBasedStateMachine):
    """Clients open, retransmit, close and go silent; the state agrees with a model."""

    clients = Bundle("clients")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.state = new_state(self.clock, lease=90)
        self.seqid: dict[int, int] = {}  # clientid -> the next seqid of its one owner
        self.last: dict[int, object] = {}  # clientid -> its last reply
        self.opens: dict[tuple[int, int], Stateid4] = {}  # (clientid, fid) -> stateid
        self.renewed: dict[int, float] = {}
        self.names = 0

    @initialize()
    def start(self) -> None:
        self.clock.advance(1)

    @rule(target=clients)
    def new_client(self) -> int:
        self.names += 1
        clientid = confirmed_client(self.state, b"client%d" % self.names)
        self.seqid[clientid] = 1
        self.renewed[clientid] = self.clock()
        return clientid

    def _alive(self, clientid: int) -> bool:
        return clientid in self.renewed

    def _seqid_op(self, clientid: int, reply: object) -> None:
        owner = self.state.owner(clientid, b"owner")
        seqid = self.seqid[clientid]
        assert self.state.check_seqid(owner, seqid) is None
        self.state.done_seqid(owner, seqid, Nfsstat4.NFS4_OK, reply)
        self.last[clientid] = reply
        self.seqid[clientid] = seqid + 1
        self.renewed[clientid] = self.clock()

    @rule(clientid=clients, fid=st.integers(1, 3), access=st.sampled_from([READ, WRITE, BOTH]))
    def open(self, clientid: int, fid: int, access: int) -> None:
        if not self._alive(clientid):
            assert status_of(self.state.owner, clientid, b"owner") in (
                Nfsstat4.NFS4ERR_EXPIRED,
                Nfsstat4.NFS4ERR_STALE_CLIENTID,
            )
            return
        owner = self.state.owner(clientid, b"owner")
        st_, confirm = self.state.open(owner, fid, access, 0)
        if confirm:
            st_ = self.state.open_confirm(st_.stateid(), fid)
        self._seqid_op(clientid, ("open", fid, st_.seqid))
        self.opens[(clientid, fid)] = st_.stateid()

    @rule(clientid=clients)
    def retransmit(self, clientid: int) -> None:
        if not self._alive(clientid) or clientid not in self.last:
            return
        owner = self.state.owner(clientid, b"owner")
        assert self.state.check_seqid(owner, self.seqid[clientid] - 1) == Replay(
            self.last[clientid]
        )
        assert status_of(self.state.check_seqid, owner, self.seqid[clientid] + 5) == (
            Nfsstat4.NFS4ERR_BAD_SEQID
        )
        self.renewed[clientid] = self.clock()

    @precondition(lambda self: bool(self.opens))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.opens)))
        sid = self.opens.pop(key)
        self.state.close(sid, key[1])
        self._seqid_op(key[0], ("close", key[1]))
        assert status_of(self.state.for_io, sid, key[1], write=False) == (
            Nfsstat4.NFS4ERR_BAD_STATEID
        )

    @rule(seconds=st.sampled_from([10, 45, 95]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)
        gone = {c.clientid for c, _ in self.state.expire()}
        expected = {c for c, t in self.renewed.items() if self.clock() - t > 90}
        assert gone == expected
        for clientid in gone:
            del self.renewed[clientid]
            for key in [k for k in self.opens if k[0] == clientid]:
                sid = self.opens.pop(key)
                assert status_of(self.state.for_io, sid, key[1], write=False) == (
                    Nfsstat4.NFS4ERR_EXPIRED
                )

    @rule(clientid=consumes(clients))
    def renew(self, clientid: int) -> None:
        if self._alive(clientid):
            self.state.renew(clientid)
            self.renewed[clientid] = self.clock()

    @invariant()
    def opens_agree(self) -> None:
        got = {(st_.owner[0], st_.fid): st_.stateid() for st_ in self.state.opens()}
        assert got == self.opens


StateModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_state_machine = StateModel.TestCase


def test_clients_with_state_are_recorded_and_only_they_reclaim_after_a_restart(
    clock: FakeClock, tmp_path: Path
) -> None:
    records = tmp_path / "nfs4-clients"
    first = Nfs4State(clock=clock, boot=1, records=records)
    assert not first.in_grace()  # nobody held state before
    owner = first.owner(confirmed_client(first, b"comes back"), b"o")
    first.open(owner, 10, WRITE, 0)
    confirmed_client(first, b"goes away")
    assert len(records.read_text().split()) == 2
    # restart: the recorded clients may reclaim for one lease
    second = Nfs4State(clock=clock, boot=2, records=records, lease_seconds=90)
    assert second.in_grace()
    back = second.owner(confirmed_client(second, b"comes back"), b"o")
    assert status_of(second.open, back, 10, WRITE, READ) == Nfsstat4.NFS4ERR_GRACE
    second.open(back, 10, WRITE, 0, reclaim=True)
    stranger = second.owner(confirmed_client(second, b"never had state"), b"o")
    assert status_of(second.open, stranger, 11, READ, 0, reclaim=True) == (
        Nfsstat4.NFS4ERR_RECLAIM_BAD
    )
    clock.advance(91)
    assert not second.in_grace()
    second.renew(stranger.key[0])
    second.open(stranger, 11, READ, 0)
    # after the grace period only clients holding state stay recorded: "goes away" never
    # came back, and "comes back" let its lease expire
    second.expire()
    assert len(records.read_text().split()) == 1
    clock.advance(91)
    second.expire()
    assert records.read_text() == ""
    assert not Nfs4State(clock=clock, boot=3, records=records).in_grace()


def test_io_with_a_lock_stateid_is_its_opens(clock: FakeClock) -> None:
    """A process holding a lock reads and writes with the lock stateid (the Linux client
    does): the I/O is the open's, under the open's access; a stale one is refused."""
    state = new_state(clock)
    clientid = confirmed_client(state)
    opener = state.owner(clientid, b"o")
    st_, _ = state.open(opener, 10, READ, 0)
    sid = state.open_confirm(st_.stateid(), 10).stateid()
    ls = state.lock_state_for(sid, 10, state.lock_owner(clientid, b"proc"))
    assert state.lock(ls, 0, 10, write=False) is None
    lsid = ls.stateid()
    found = state.for_io(lsid, 10, write=False)
    assert found is not None and found.other == sid.other and found.owner == (clientid, b"o")
    assert status_of(state.for_io, lsid, 11, write=False) == Nfsstat4.NFS4ERR_BAD_STATEID
    assert status_of(state.for_io, lsid, 10, write=True) == Nfsstat4.NFS4ERR_OPENMODE
    state.unlock(ls, 0, 10)
    assert status_of(state.for_io, lsid, 10, write=False) == Nfsstat4.NFS4ERR_OLD_STATEID
    assert state.opens_of(clientid, 10) == [found]
    assert state.opens_of(clientid + 1, 10) == state.opens_of(clientid, 11) == []


def test_byte_range_locks_conflict_split_and_go_with_their_client(clock: FakeClock) -> None:
    state = new_state(clock)
    clientid = confirmed_client(state)
    opener = state.owner(clientid, b"o")
    st_, _ = state.open(opener, 10, BOTH, 0)
    sid = state.open_confirm(st_.stateid(), 10).stateid()
    a = state.lock_state_for(sid, 10, state.lock_owner(clientid, b"proc a"))
    b = state.lock_state_for(sid, 10, state.lock_owner(clientid, b"proc b"))
    assert state.lock(a, 0, 100, write=True) is None
    found = state.lock(b, 50, 10, write=False)
    assert found is not None and (found.offset, found.length, found.write) == (0, 100, True)
    assert state.lock(b, 100, 0xFFFFFFFFFFFFFFFF, write=False) is None  # to EOF, no overlap
    state.unlock(a, 40, 20)  # splits [0, 100) into [0, 40) and [60, 100)
    assert state.test_lock(10, b.owner, 45, 10, write=True) is None
    assert state.test_lock(10, b.owner, 30, 20, write=False) is not None
    assert state.lock(a, 200, 10, write=False) is None  # reads share
    assert state.lock(a, 300, 10, write=True) is not None  # b's read lock to EOF
    assert status_of(state.lock, a, 0, 0, write=True) == Nfsstat4.NFS4ERR_INVAL
    assert status_of(state.close, sid, 10) == Nfsstat4.NFS4ERR_LOCKS_HELD
    assert status_of(state.release_lock_owner, clientid, b"proc a") == Nfsstat4.NFS4ERR_LOCKS_HELD
    old = a.stateid()
    state.unlock(a, 0, 0xFFFFFFFFFFFFFFFF)
    assert status_of(state.locks_of, old) == Nfsstat4.NFS4ERR_OLD_STATEID
    state.release_lock_owner(clientid, b"proc a")
    clock.advance(91)
    state.expire()
    assert status_of(state.locks_of, b.stateid()) == Nfsstat4.NFS4ERR_EXPIRED
