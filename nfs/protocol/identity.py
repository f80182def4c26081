"""Who an NFS caller is, as the protocol sees it: root squash and a privileged-port check.

AUTH_SYS (RFC 5531 §A.2) carries a uid and gids that the *client* asserts; the
server cannot verify them. What a server can do, and what this module does:
`IdentityPolicy` (a `nfs.protocol.rpc.CredentialPolicy`, applied by the dispatcher to
every call): squash uid 0 (and gid 0) to nobody, so a client's root gets no
special power (``root_squash``, on by default in the CLI); and refuse calls whose
source port is not privileged (below 1024, ``require_privileged_port``), so that on a
host where only root can bind such ports an unprivileged local user cannot forge
credentials with their own RPC client (they can still use the kernel client, as
themselves).

Which posixlake user a uid acts as, and that user's roles on a table's files, is the
table face's business (`nfs.table.access`). See docs/nfs-security.md for the threat
model. Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from nfs.protocol.rpc import (
    NOBODY,
    AuthError,
    AuthFlavor,
    AuthStat,
    ConnectionContext,
    Credentials,
)

__all__ = ["PRIVILEGED_PORT_LIMIT", "IdentityPolicy"]

PRIVILEGED_PORT_LIMIT: Final = 1024
"""Source ports below this are privileged (only root may bind them on Unix)."""


@dataclass(frozen=True)
class IdentityPolicy:
    """Rewrite or refuse each call's credentials (see the module docstring).

    Attributes:
        root_squash: uid 0 becomes `anon_uid`, gid 0 becomes `anon_gid` (also in
            the supplementary groups), as knfsd's ``root_squash``.
        require_privileged_port: refuse (AUTH_ERROR / AUTH_TOOWEAK) calls from a
            source port >= 1024, or from an unknown one; knfsd's ``secure``.
        anon_uid: the uid squashed callers get.
        anon_gid: the gid squashed callers get.
    """

    root_squash: bool = True
    require_privileged_port: bool = False
    anon_uid: int = NOBODY
    anon_gid: int = NOBODY

    def __call__(self, cred: Credentials, conn: ConnectionContext | None) -> Credentials:
        """Return the credentials the procedures see.

        Raises:
            AuthError: AUTH_TOOWEAK for an unprivileged source port when required.
        """
        if self.require_privileged_port:
            port = conn.peer_port if conn is not None else None
            if port is None or port >= PRIVILEGED_PORT_LIMIT:
                raise AuthError(
                    AuthStat.AUTH_TOOWEAK, f"source port {port} is not privileged (< 1024)"
                )
        squash = self.root_squash and cred.flavor == AuthFlavor.AUTH_SYS
        if squash and (cred.uid == 0 or cred.gid == 0 or 0 in cred.gids):
            return replace(
                cred,
                uid=self.anon_uid if cred.uid == 0 else cred.uid,
                gid=self.anon_gid if cred.gid == 0 else cred.gid,
                gids=tuple(g for g in cred.gids if g != 0),
            )
        return cred
