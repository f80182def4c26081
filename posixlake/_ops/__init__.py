"""The parts of the :class:`~posixlake.database.DatabaseOps` facade, one module each.

``core``         Table (log, engine, authorizer, counters; permission check, write
                 scope, commit metadata) and TableCore (a handle's state, shared steps)
``writes``       insert, merge, update, delete, truncate, replace rows, schema changes
``buffered``     buffered inserts, flush, write-ahead replay, close
``reads``        queries, time travel, history, change feed, metrics, health
``maintenance``  ``db.optimize`` (compaction, Z-order), vacuum
``users``        ``db.users`` and the flat user methods
``backups``      ``db.backups``, the flat backup methods, restore and inspection
``create``       tables created from CSV / Parquet files; the storage check
``args``         argument forms and SQL literals

The operation parts are mixins on ``TableCore``; :class:`~posixlake._compat.OriginalNames`
(the original project's names) is built on them and ``DatabaseOps``
(``posixlake/database.py``) on it. The groups ``db.users``, ``db.backups`` and
``db.optimize`` are separate objects that hold the handle's ``Table``.
"""

__all__: list[str] = []
