"""Former home of the byte-level object stores, now :mod:`posixlake.storage`.

Kept as an alias while callers outside the storage package move their imports.
"""

from posixlake.storage.files import (
    CHUNK_SIZE,
    TEMP_MARK,
    FileEntry,
    ObjectStore,
    StoreFactory,
    check_key,
    copy_file,
    join_uri,
    open_store,
    register_scheme,
)
from posixlake.storage.local import LocalStore

__all__ = [
    "CHUNK_SIZE",
    "TEMP_MARK",
    "FileEntry",
    "LocalStore",
    "ObjectStore",
    "StoreFactory",
    "check_key",
    "copy_file",
    "join_uri",
    "open_store",
    "register_scheme",
]
