"""Full and incremental backups of a table, their verification, and restores.

A backup is a folder (local, S3 or Azure) holding::

    posixlake-backup.json   the manifest, written last
    files/<path>            the table's files, at their paths inside the table

**Consistency.** A backup pins one table version V (one refresh under the table lock,
then writers go on) and copies exactly: the ``_delta_log`` entries up to V (commits,
checkpoints, CRCs; never a later entry, never ``_last_checkpoint``, which may point past
V), every data file that a log entry up to V adds (so the restored table can also time
travel to the older versions), and ``_posixlake/`` (users and audit log). delta-rs
publishes a commit atomically, so a log entry is never copied half-written; files that
in-flight writers are still producing are not referenced by any entry up to V and are
not copied. Data files that an earlier VACUUM removed are skipped, and the manifest
records from which version on the backup can be restored (``restorable_from``); a file
still live at V that vanishes during the copy (a concurrent VACUUM with a retention
near zero) fails the backup, naming the file. Which versions use which data file is
read by delta-rs (:mod:`posixlake.backup.log`), never by parsing the log here.

**Manifest.** Table version and id, commit timestamps, the creating user, and for each
file its size, SHA-256, kind, the version that adds it (and removes it, for data files),
and which backup of the chain holds its bytes. The manifest carries a SHA-256 of its own
canonical form, so an edited or truncated manifest is detected. (An attacker who can
rewrite both a file and the manifest can also recompute that checksum: protect backups
with storage immutability — S3 Object Lock, Azure immutable blobs — when that matters.)

**Incremental backups** copy only files that the base backup chain does not hold
(data files and log entries are immutable in Delta; ``_posixlake/`` files are compared by
hash) and list the whole snapshot, pointing each file at the backup that holds it; the
chain is found through the base's location (relative first, so a chain of folders can
be moved together) and pinned by the base manifest's SHA-256.

**Verify** re-reads and hashes every file of the chain: missing, extra (in this backup's
folder but not in its manifest) and corrupted files (any flipped byte), a manifest that
fails its checksum, a broken chain, and log entries that reference data files the
manifest does not list.

**Backups made by the original posixlake** (a copy of the table folder plus
``backup_metadata.json``, no checksums) are recognised by their layout: verify, restore
and ``get_backup_metadata`` hand them to :mod:`posixlake.backup.original`.

**Restore** checks the chain and every file's presence first, writes nothing into a
non-empty destination unless ``overwrite=True``, hashes every byte it copies and
refuses (naming the file, removing what it wrote) at the first mismatch, copies the log
last, sets local log files' modification times back to the originals (delta-rs time
travel by timestamp uses them), and opens the result with delta-rs to check its
version. ``restore(..., version=N)`` / ``as_of=`` rebuild the table as it was at that
version: its log ends at N. Restoring a backup of an auth-enabled table needs
credentials of one of the backup's users holding the ``restore`` permission.

Modules: :mod:`~posixlake.backup.manifest` (the manifest and its files),
:mod:`~posixlake.backup.results` (what the operations return),
:mod:`~posixlake.backup.chain` (opening a backup and its bases),
:mod:`~posixlake.backup.transfer` (hashing parallel copies),
:mod:`~posixlake.backup.log` (the log, read by delta-rs), :mod:`~posixlake.backup.create`,
:mod:`~posixlake.backup.verify`, :mod:`~posixlake.backup.credentials`,
:mod:`~posixlake.backup.staging` (where a restore is built) and
:mod:`~posixlake.backup.restore`.
"""

from posixlake.backup.create import create_backup
from posixlake.backup.credentials import check_backup_credentials
from posixlake.backup.manifest import FILES_DIR, MANIFEST_NAME, BackupCorrupted, BackupFile
from posixlake.backup.restore import EPOCH_MS_THRESHOLD, restore
from posixlake.backup.results import BackupMetadata, RestoreResult, VerifyReport
from posixlake.backup.staging import RESTORE_MARKER, clean_restore_leftovers, restore_in_progress
from posixlake.backup.transfer import DEFAULT_WORKERS, Progress
from posixlake.backup.verify import get_backup_metadata, verify_backup

__all__ = [
    "DEFAULT_WORKERS",
    "EPOCH_MS_THRESHOLD",
    "FILES_DIR",
    "MANIFEST_NAME",
    "RESTORE_MARKER",
    "BackupCorrupted",
    "BackupFile",
    "BackupMetadata",
    "Progress",
    "RestoreResult",
    "VerifyReport",
    "check_backup_credentials",
    "clean_restore_leftovers",
    "create_backup",
    "get_backup_metadata",
    "restore",
    "restore_in_progress",
    "verify_backup",
]
