"""NFSv4.0 beside NFSv3 (RFC 7530): the COMPOUND codec, the state machine (clients, opens,
leases), and the service that runs COMPOUNDs over the same `nfs.protocol.vfs.Vfs` as NFSv3.

``types`` and ``ops`` are the wire layer, ``state`` the sans-IO state machine, ``attrs``
the fattr3 -> fattr4 translation, ``service`` the COMPOUND procedure (RPC program 100003
version 4). Everything here is sans-IO: the clock is injected.
"""

__all__: list[str] = []
