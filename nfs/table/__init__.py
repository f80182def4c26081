"""The table face: a posixlake table as CSV files, implementing the protocol's `Vfs`.

`tablefs.TableFs` is the Vfs; it is a thin facade over collaborators with one job each
(docs/design.md lists them and what each owns). `server.TableNfsServer` is the
original project's ``NfsServer(db, port)``. This package imports `nfs.protocol` and
posixlake's public names only; the protocol never imports it.
"""
