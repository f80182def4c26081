"""Opening a store for a URI (:func:`open_store`) and copying files between stores.

Local paths open a :class:`~posixlake.storage.local.LocalStore`; ``s3://`` / ``s3a://`` an
:class:`~posixlake.storage.s3.S3Store`; ``az://``, ``azure://``, ``abfs[s]://`` an
:class:`~posixlake.storage.azure.AzureStore`; :func:`register_scheme` adds others.
"""

from __future__ import annotations

from collections.abc import Mapping

from posixlake.errors import StorageError
from posixlake.storage.azure import AzureStore
from posixlake.storage.common import AZURE_SCHEMES, S3_SCHEMES, is_local, normalize_uri
from posixlake.storage.files import ObjectStore, StoreFactory
from posixlake.storage.local import LocalStore
from posixlake.storage.s3 import S3Store

__all__ = ["copy_file", "open_store", "register_scheme"]

_FACTORIES: dict[str, StoreFactory] = {
    **{scheme: S3Store for scheme in S3_SCHEMES},
    **{scheme: AzureStore for scheme in AZURE_SCHEMES},
}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Make :func:`open_store` use ``factory`` for ``scheme://`` URIs (replacing any)."""
    _FACTORIES[scheme.lower()] = factory


def open_store(uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """Return the store rooted at ``uri`` (a local path or an object-store URI).

    Args:
        uri: a local path, ``file://``, ``s3://``, ``s3a://``, ``az://``, ``azure://`` or
            ``abfs[s]://`` URI.
        storage_options: delta-rs style options (credentials, endpoint), as
            :func:`posixlake.storage.storage_options_for` returns them.

    Raises:
        StorageError: no store is known for the URI's scheme.
    """
    if is_local(uri):
        return LocalStore(normalize_uri(uri))
    scheme = uri.split("://", 1)[0].lower()
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise StorageError(f"no file access for {scheme}:// URIs ({uri})")
    return factory(uri, storage_options)


def copy_file(src: ObjectStore, src_key: str, dst: ObjectStore, dst_key: str) -> int:
    """Copy one file between stores; return the bytes copied.

    Within one S3 endpoint and account the copy is server-side (``CopyObject``, multipart
    for large objects): the bytes never pass through this process. Anything else streams
    in chunks (:meth:`ObjectStore.read_chunks` into :meth:`ObjectStore.write_chunks`).

    Raises:
        NotFound: ``src_key`` does not exist.
    """
    if isinstance(src, S3Store) and isinstance(dst, S3Store) and src.same_account(dst):
        return dst.copy_from(src, src_key, dst_key)
    return dst.write_chunks(dst_key, src.read_chunks(src_key))
