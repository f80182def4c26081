"""Former home of the byte-level object stores, now :mod:`posixlake.storage`.

Kept as an alias of :func:`posixlake.storage.open_store` until the last caller
(``posixlake.delta._log``) imports it from :mod:`posixlake.storage`.
"""

from posixlake.storage.files import open_store

__all__ = ["open_store"]
