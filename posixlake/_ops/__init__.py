"""The parts of the :class:`~posixlake.database.DatabaseOps` facade, one module each.

``core``         TableCore: the state, permission check, write scope and shared steps
``writes``       insert, merge, update, delete, truncate, replace rows, schema changes
``buffered``     buffered inserts, flush, write-ahead replay, close
``reads``        queries, time travel, history, change feed, metrics, health
``maintenance``  ``db.optimize`` (compaction, Z-order), vacuum
``users``        ``db.users`` and the flat user methods
``backups``      ``db.backups``, the flat backup methods, restore and inspection
``create``       tables created from CSV / Parquet files; the storage check
``args``         argument forms and SQL literals

DatabaseOps (``posixlake/database.py``) composes them; the original project's names are
one table in :mod:`posixlake._compat`.
"""

__all__: list[str] = []
