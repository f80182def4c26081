"""ONC RPC v2 (RFC 5531): call decoding, credentials, reply stats, the fuzz invariant."""

from __future__ import annotations

import dataclasses
import logging
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfs.protocol import rpcauth
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.mount import MOUNT_PROGRAM
from nfs.protocol.nfs3 import NFS_PROGRAM
from nfs.protocol.nfs3.program import NFS3_PROCEDURES
from nfs.protocol.portmap import PMAP_PROGRAM
from nfs.protocol.rpc import (
    AUTH_NONE_BODY,
    AcceptStat,
    AuthError,
    AuthFlavor,
    AuthStat,
    AuthSysParms,
    CallContext,
    CallHeader,
    ConnectionContext,
    Credentials,
    Dispatcher,
    MsgType,
    OpaqueAuth,
    RejectStat,
    ReplyHeader,
    ReplyStat,
    RpcError,
    RpcProcedure,
    RpcProgram,
    Void,
    Xid,
    decode_call,
    decode_reply,
    encode_call,
)
from nfs.protocol.server import build_dispatcher
from nfs.protocol.xdr import Packer, Unpacker, XdrError
from tests.nfs.rpcclient import RpcClient

NFSACL_PROGRAM = 100227
SYS = AuthSysParms(1, "host", 1000, 100, (4, 24)).to_opaque()


def call_bytes(
    prog: int,
    vers: int,
    proc: int,
    args: bytes = b"",
    *,
    xid: int = 0x1234,
    cred: OpaqueAuth = SYS,
    rpcvers: int = 2,
) -> bytes:
    header = CallHeader(Xid(xid), prog, vers, proc, cred, AUTH_NONE_BODY, rpcvers)
    return encode_call(header, args).get_buffer()


def reply_of(dispatcher: Dispatcher, record: bytes) -> tuple[ReplyHeader, Unpacker]:
    reply = dispatcher.handle(record, ConnectionContext("127.0.0.1:1"))
    assert reply is not None
    return decode_reply(reply)


def test_call_header_decodes_auth_sys_credentials() -> None:
    header, args = decode_call(call_bytes(NFS_PROGRAM, 3, 1, b"\0\0\0\x07"))
    assert (header.xid, header.prog, header.vers, header.proc) == (0x1234, NFS_PROGRAM, 3, 1)
    cred = Credentials.from_auth(header.cred)
    assert cred == Credentials(AuthFlavor.AUTH_SYS, 1000, 100, (4, 24), "host")
    assert cred.in_group(24) and not cred.in_group(5)
    assert args.unpack_uint() == 7


def test_auth_sys_credentials_that_differ_in_the_stamp_alone_are_the_same_caller() -> None:
    # a client process stamps its credential (libnfs: with the time); the stamp is no part
    # of who calls, so a new process with the same identity is the same caller
    other = AuthSysParms(stamp=0xDEADBEEF, machinename="host", uid=1000, gid=100, gids=(4, 24))
    assert Credentials.from_auth(other.to_opaque()) == Credentials.from_auth(SYS)
    # ... and its first call decodes nothing: the stamp is no part of the cache's key
    misses = rpcauth._auth_sys_credentials.cache_info().misses
    again = AuthSysParms(stamp=0xFEEDFACE, machinename="host", uid=1000, gid=100, gids=(4, 24))
    Credentials.from_auth(again.to_opaque())
    assert rpcauth._auth_sys_credentials.cache_info().misses == misses
    changed = AuthSysParms(stamp=0xDEADBEEF, machinename="host", uid=1001, gid=100, gids=(4, 24))
    assert Credentials.from_auth(changed.to_opaque()).uid == 1001
    with pytest.raises(AuthError) as err:
        Credentials.from_auth(OpaqueAuth(AuthFlavor.AUTH_SYS, b"\0\0\0"))
    assert err.value.stat == AuthStat.AUTH_BADCRED


def test_auth_none_is_nobody() -> None:
    cred = Credentials.from_auth(AUTH_NONE_BODY)
    assert (cred.uid, cred.gid, cred.flavor) == (65534, 65534, AuthFlavor.AUTH_NONE)


def test_decode_call_rejects_a_reply() -> None:
    p = Packer()
    p.pack_uint(1)
    p.pack_uint(MsgType.REPLY)
    with pytest.raises(XdrError):
        decode_call(p.get_buffer())


@pytest.fixture
def d(dispatcher: Dispatcher) -> Dispatcher:
    return dispatcher


def test_nfsacl_probe_gets_prog_unavail(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFSACL_PROGRAM, 3, 0))
    assert header.reply_stat == ReplyStat.MSG_ACCEPTED
    assert header.accept_stat == AcceptStat.PROG_UNAVAIL


def test_wrong_version_gets_prog_mismatch_with_range(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 2, 0))  # v3 and v4 are served
    assert header.accept_stat == AcceptStat.PROG_MISMATCH
    assert (header.low, header.high) == (3, 4)
    header, _ = reply_of(d, call_bytes(MOUNT_PROGRAM, 1, 0))
    assert header.accept_stat == AcceptStat.PROG_MISMATCH


def test_unknown_procedure_gets_proc_unavail(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 3, 22))
    assert header.accept_stat == AcceptStat.PROC_UNAVAIL


def test_truncated_arguments_get_garbage_args(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 3, 1, b"\0\0\0\x14abc"))
    assert header.accept_stat == AcceptStat.GARBAGE_ARGS


def test_truncated_header_with_readable_xid_gets_garbage_args(d: Dispatcher) -> None:
    record = call_bytes(NFS_PROGRAM, 3, 0)[:20]
    header, _ = reply_of(d, record)
    assert header.xid == 0x1234
    assert header.accept_stat == AcceptStat.GARBAGE_ARGS


def test_unreadable_or_non_call_records_get_no_reply(d: Dispatcher) -> None:
    assert d.handle(b"") is None
    assert d.handle(b"\0\0\0\x01\0\0") is None
    assert d.handle(struct.pack(">II", 7, MsgType.REPLY) + b"\0" * 20) is None


def test_rpc_version_3_gets_rpc_mismatch(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 3, 0, rpcvers=3))
    assert header.reply_stat == ReplyStat.MSG_DENIED
    assert header.reject_stat == RejectStat.RPC_MISMATCH
    assert (header.low, header.high) == (2, 2)


@pytest.mark.parametrize(
    ("cred", "stat"),
    [
        (OpaqueAuth(AuthFlavor.RPCSEC_GSS, b"\0" * 20), AuthStat.AUTH_REJECTEDCRED),
        (OpaqueAuth(AuthFlavor.AUTH_DH, b""), AuthStat.AUTH_REJECTEDCRED),
        (OpaqueAuth(AuthFlavor.AUTH_SYS, b"\0\0\0\x01"), AuthStat.AUTH_BADCRED),
        (OpaqueAuth(AuthFlavor.AUTH_SYS, SYS.body + b"\0\0\0\0"), AuthStat.AUTH_BADCRED),
    ],
)
def test_bad_credentials_get_auth_error(d: Dispatcher, cred: OpaqueAuth, stat: AuthStat) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 3, 0, cred=cred))
    assert header.reply_stat == ReplyStat.MSG_DENIED
    assert header.reject_stat == RejectStat.AUTH_ERROR
    assert header.auth_stat == stat


def test_auth_none_calls_are_served(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(NFS_PROGRAM, 3, 0, cred=AUTH_NONE_BODY))
    assert header.accept_stat == AcceptStat.SUCCESS


def test_credentials_and_peer_reach_the_procedure() -> None:
    seen: list[CallContext] = []

    def run(args: Void, ctx: CallContext) -> Void:
        seen.append(ctx)
        return args

    d = Dispatcher([RpcProgram(400000, 1, {0: RpcProcedure("P_NULL", Void.unpack, run)})])
    header, _ = reply_of(d, call_bytes(400000, 1, 0, xid=99))
    assert header.accept_stat == AcceptStat.SUCCESS
    (ctx,) = seen
    assert (ctx.uid, ctx.gid, ctx.cred.gids, ctx.xid, ctx.peer) == (
        1000,
        100,
        (4, 24),
        99,
        "127.0.0.1:1",
    )


def test_failing_procedure_is_logged_and_gets_system_err(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def run(args: Void, ctx: CallContext) -> Void:
        raise RuntimeError("bug in a procedure")

    def refuse(args: Void, ctx: CallContext) -> Void:
        raise RpcError(AcceptStat.PROC_UNAVAIL)

    d = Dispatcher(
        [
            RpcProgram(
                400000,
                1,
                {
                    0: RpcProcedure("P_BUG", Void.unpack, run),
                    1: RpcProcedure("P_NO", Void.unpack, refuse),
                },
            )
        ]
    )
    with caplog.at_level(logging.ERROR, logger="nfs.protocol.rpc"):
        header, _ = reply_of(d, call_bytes(400000, 1, 0))
    assert header.accept_stat == AcceptStat.SYSTEM_ERR
    assert "P_BUG" in caplog.text and "bug in a procedure" in caplog.text
    header, _ = reply_of(d, call_bytes(400000, 1, 1))
    assert header.accept_stat == AcceptStat.PROC_UNAVAIL


def test_registered_versions_are_reported_in_prog_mismatch() -> None:
    proc = {0: RpcProcedure("NULL", Void.unpack, lambda a, c: a)}
    d = Dispatcher([RpcProgram(400001, 2, proc), RpcProgram(400001, 5, proc)])
    header, _ = reply_of(d, call_bytes(400001, 3, 0))
    assert (header.low, header.high) == (2, 5)


def test_portmap_is_registered_when_asked(d: Dispatcher) -> None:
    header, _ = reply_of(d, call_bytes(PMAP_PROGRAM, 2, 0))
    assert header.accept_stat == AcceptStat.SUCCESS
    plain = build_dispatcher(MemoryFs())
    header, _ = reply_of(plain, call_bytes(PMAP_PROGRAM, 2, 0))
    assert header.accept_stat == AcceptStat.PROG_UNAVAIL


# ---------------------------------------------------------------- the fuzz invariant


@settings(max_examples=300)
@given(raw=st.binary(max_size=200))
def test_any_bytes_into_the_dispatcher_give_a_reply_or_none(raw: bytes) -> None:
    d = build_dispatcher(MemoryFs(), portmap_port=lambda: 2049)
    reply = d.handle(raw)
    if reply is not None:
        header, _ = decode_reply(reply)
        assert header.xid == int.from_bytes(raw[:4], "big")


@settings(max_examples=300)
@given(
    prog_vers=st.sampled_from([(NFS_PROGRAM, 3), (MOUNT_PROGRAM, 3), (PMAP_PROGRAM, 2)]),
    proc=st.integers(0, 23),
    args=st.binary(max_size=120),
)
def test_any_arguments_give_success_or_garbage_never_system_err(
    prog_vers: tuple[int, int], proc: int, args: bytes
) -> None:
    memfs = MemoryFs()
    d = build_dispatcher(memfs, portmap_port=lambda: 2049)
    reply = d.handle(call_bytes(*prog_vers, proc, args))
    assert reply is not None
    header, _ = decode_reply(reply)
    assert header.accept_stat in (
        AcceptStat.SUCCESS,
        AcceptStat.GARBAGE_ARGS,
        AcceptStat.PROC_UNAVAIL,
    )


@settings(max_examples=200)
@given(
    proc=st.sampled_from(sorted(NFS3_PROCEDURES)),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
)
def test_corrupted_valid_calls_never_crash(proc: int, flips: list[tuple[int, int]]) -> None:
    memfs = MemoryFs()
    memfs.put("/d/f.txt", b"hello")
    d = build_dispatcher(memfs)
    client = RpcClient.over(d)
    root = client.mount("/")
    record = bytearray(call_bytes(NFS_PROGRAM, 3, proc, _sample_args(root.data)))
    for pos, xor in flips:
        record[pos % len(record)] ^= xor
    reply = d.handle(bytes(record))
    if reply is not None:
        header, _ = decode_reply(reply)
        assert header.accept_stat != AcceptStat.SYSTEM_ERR


def _sample_args(root: bytes) -> bytes:
    p = Packer()
    p.pack_opaque(root)
    p.pack_string("d")
    p.pack_uhyper(0)
    p.pack_uint(4096)
    p.pack_uint(4096)
    return p.get_buffer()


def test_a_decoded_calls_context_is_the_constructors() -> None:
    """The context a procedure gets (`CallContext.of_call`, made without ``__setattr__``)
    has every field and equals, hashes and prints as the constructor's."""
    seen: list[CallContext] = []

    def run(args: Void, ctx: CallContext) -> Void:
        seen.append(ctx)
        return args

    d = Dispatcher([RpcProgram(400000, 1, {0: RpcProcedure("P_NULL", Void.unpack, run)})])
    reply_of(d, call_bytes(400000, 1, 0, xid=99))
    (got,) = seen
    plain = CallContext(got.cred, Xid(99), 400000, 1, 0, "127.0.0.1:1", got.connection)
    assert got == plain and hash(got) == hash(plain) and repr(got) == repr(plain)
    assert set(vars(got)) == {f.name for f in dataclasses.fields(CallContext)}
    assert got.cred == Credentials.sys(1000, 100, (4, 24), "host") and got.connection > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.xid = Xid(8)  # type: ignore[misc]
