"""The NFSv3 protocol library: bytes go up, results come down. It knows nothing of tables.

Layers (each imports only those before it; tests/nfs/test_layering.py holds the map):
`xdr`, `record` (pure) -> `rpcauth`, `drc`, `rpc` -> the NFSv3 wire types (`nfs3`: codec,
types, args, results) -> `vfs` (the interface a file system implements; `memfs.MemoryFs`
on `fstree` is the example one) -> the NFSv3 procedures (`nfs3.handles`, `service`,
`procedures`, `program`), `mount`, `portmap`, `identity` (root squash, privileged ports)
-> `serving` (the protocol stack over a Vfs) -> `sender` and `server` (the transport,
the only asyncio code). A file system is given to the server as a `Vfs` or a Vfs factory.
"""
