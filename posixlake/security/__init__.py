"""Users, roles and permissions of auth-enabled tables, and their audit log.

Everything lives inside the table, under ``_posixlake/``, so it travels with the table
(copies, backups, local disk, S3, Azure):

``_posixlake/users/<20-digit version>.json``
    The user database. Each change writes the next version with an atomic
    create-if-absent, so two admins changing users at once never overwrite each other:
    the loser re-reads and re-applies its change (or gets a clear error, e.g. the user
    it creates now exists). Readers take the highest version; the last
    :data:`KEEP_USER_VERSIONS` versions are kept.
``_posixlake/audit/<15-digit epoch ms>-<uuid>.json``
    One JSON object per event, never rewritten: logins (failed ones too), user
    management, permission denials, backups and restores, enabling auth. Data writes
    are not duplicated here: every Delta commit already records ``posixlake.user`` and
    ``posixlake.operation`` atomically with the write, and :func:`audit_events` merges
    both sources.

The table's Delta configuration also carries ``posixlake.auth.enabled = true``: a table
whose ``_posixlake/users`` went missing (say, a copy that skipped ``_``-folders) stays
closed instead of silently opening without auth.

Passwords are hashed with scrypt (memory-hard: N=2^15, r=8, p=1, 32 MiB, about
50-120 ms per login) and a random 16-byte salt per user, and compared with
:func:`hmac.compare_digest`. An unknown user costs the same scrypt run as a known one,
and both failures raise the same :class:`AuthenticationError`.

Roles and the permissions they grant:

=========  ====  =====  ======  =====  ======  =======
role       read  write  delete  admin  backup  restore
=========  ====  =====  ======  =====  ======  =======
read       yes
write      yes   yes    yes
admin      yes   yes    yes     yes    yes     yes
=========  ====  =====  ======  =====  ======  =======

A user may also be granted single permissions (``permissions=["backup"]``), e.g. a
writer that may insert and update but not delete: ``roles=["read"],
permissions=["write"]``. Operations and the permission they need:

- read: query, to_arrow, history, get_schema, get_data_skipping_stats, get_metrics,
  health_check, iteration (and every original-name alias of these);
- write: insert, insert_buffered, flush, merge (INSERT/UPDATE rows), update,
  optimize / compact / z_order / zorder;
- delete: delete_rows_where / delete, merge rows with ``_op = DELETE``;
- admin: vacuum, set_primary_key, create_user, delete_user, set_roles, list_users,
  change_password of another user, audit_log, enable_auth;
- backup: backup, backup_incremental;
- restore: restore, restore_to_transaction (checked against the users stored in the
  backup, for a backup of an auth-enabled table).

Changing one's own password needs only the old password. Metadata properties
(``version``, ``uri``, ``schema``, ``primary_key()``, ``commit_time``) need only a
successful login. ``verify_backup`` and ``get_backup_metadata`` read a backup's files and
need no table.

A session re-reads the user database at most every :data:`SESSION_REFRESH_SECONDS`
(one HEAD request for the next version): revoked roles take effect, and a deleted user
or a password changed elsewhere ends the session with AuthenticationError.

``create(..., auth=True)`` needs the first admin's ``credentials=(user, password)``; when
they are omitted, ``$POSIXLAKE_ADMIN_PASSWORD`` (and ``$POSIXLAKE_ADMIN_USER``, default
``admin``) are used; with neither, creation fails before anything is written. There is
no default password.

Tables made by the original posixlake keep their users in ``_metadata/users.json``
(bcrypt hashes): such a table never opens without credentials. They are checked against
those hashes; the first admin login copies every user into ``_posixlake/users`` (keeping
each hash until that user logs in, when it is replaced with scrypt), and non-admin users
logging in before that get the original's permissions (its ``write`` role may insert
but neither read nor delete). See :mod:`posixlake._original`.

Test suites may lower the scrypt cost with ``$POSIXLAKE_SCRYPT_LOG2_N`` (read once per
hash; production should never set it: a warning is logged). Verification always uses
the parameters stored with each hash, so lowering it never weakens existing hashes.
"""

from posixlake.security.audit import (
    AUDIT_KEY,
    AUDIT_PREFIX,
    UNKNOWN_USER_PREFIX,
    AuditEvent,
    AuditLog,
    unknown_user_matches,
    unknown_user_tag,
)
from posixlake.security.authorizer import (
    BOOTSTRAP_USER,
    SESSION_REFRESH_SECONDS,
    OriginalSession,
    TableAuthorizer,
    audit_events,
    manager,
    record_event,
)
from posixlake.security.passwords import (
    MIN_PASSWORD_LENGTH,
    SCRYPT_LOG2_N,
    SCRYPT_LOG2_N_ENV,
    check_password_policy,
    hash_password,
    verify_password,
)
from posixlake.security.sessions import (
    ADMIN_PASSWORD_ENV,
    ADMIN_USER_ENV,
    AUTH_PROPERTY,
    auth_required,
    enable_auth,
    initial_admin,
    login,
)
from posixlake.security.users import (
    KEEP_USER_VERSIONS,
    ROLES,
    USERS_PREFIX,
    UserDb,
    UserInfo,
    UserStore,
    check_credentials,
)

__all__ = [
    "ADMIN_PASSWORD_ENV",
    "ADMIN_USER_ENV",
    "AUDIT_KEY",
    "AUDIT_PREFIX",
    "AUTH_PROPERTY",
    "BOOTSTRAP_USER",
    "KEEP_USER_VERSIONS",
    "MIN_PASSWORD_LENGTH",
    "ROLES",
    "SCRYPT_LOG2_N",
    "SCRYPT_LOG2_N_ENV",
    "SESSION_REFRESH_SECONDS",
    "UNKNOWN_USER_PREFIX",
    "USERS_PREFIX",
    "AuditEvent",
    "AuditLog",
    "OriginalSession",
    "TableAuthorizer",
    "UserDb",
    "UserInfo",
    "UserStore",
    "audit_events",
    "auth_required",
    "check_credentials",
    "check_password_policy",
    "enable_auth",
    "hash_password",
    "initial_admin",
    "login",
    "manager",
    "record_event",
    "unknown_user_matches",
    "unknown_user_tag",
    "verify_password",
]
