"""The lake's cached listing: its tables, the directories leading to them, their ids.

:class:`Listing` lists the root (``discover``) at most once per ``listing_ttl`` seconds
and builds a :class:`Tree` from it: every table, every prefix directory with its
children, and a local id per directory (a hash of its path, probed in path order on a
collision). A listing that fails keeps the last one (with a warning); a first one that
fails is NFS3ERR_IO. Each listing assigns the tables' slots, lets refused tables be tried
again, marks the new tables (:mod:`nfs.lake.newtables`) another process made, and closes
the open tables that are gone. See docs/design.md, "The lake".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from nfs.lake.ids import lake_id, path_hash
from nfs.lake.state import LAKE_ROOT, TABLE_ROOT_LOCAL, LakeState, lake_attrs
from nfs.lake.tables import OpenTables
from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Nfstime3
from nfs.protocol.vfs import DirEntry, DirPage, FileId, NfsError
from posixlake.errors import PosixLakeError

__all__ = ["Listing", "Tree", "dir_page", "join", "parent"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tree:
    """The lake's tables and directories as one listing showed them."""

    at: float
    tables: frozenset[str]
    children: Mapping[str, tuple[str, ...]]
    dir_local: Mapping[str, int]
    dir_path: Mapping[int, str]
    mtime: Nfstime3
    subdirs: Mapping[str, int] = field(default_factory=dict)


def parent(path: str) -> str:
    """The directory a lake path is in ("" for the root)."""
    return path.rpartition("/")[0]


def join(path: str, name: str) -> str:
    """The lake path of ``name`` in the directory ``path``."""
    return f"{path}/{name}" if path else name


def cookie(name: str) -> int:
    """Return the READDIR cookie of a lake directory's entry ``name`` (3 .. 2^62 + 2)."""
    return 3 + path_hash("cookie", name) % (1 << 62)


def dir_page(
    names: tuple[str, ...], after: int, max_entries: int, id_of: Callable[[str], FileId]
) -> DirPage:
    """One READDIR page of a lake directory holding ``names`` (``.`` and ``..`` too).

    Cookies are "." 1, ".." 2 and, for an entry, a hash of its name (entries come in
    cookie order): a cookie stays valid, and means the same place, while tables appear
    and disappear between two pages, so a client paging through lists every entry that
    stays exactly once (a position would skip or repeat one).
    """
    if after < 0:
        raise NfsError(Nfsstat3.NFS3ERR_BAD_COOKIE)
    keyed = [(1, "."), (2, ".."), *sorted((cookie(c), c) for c in names)]
    rest = [(at, name) for at, name in keyed if at > after]
    entries = [DirEntry(id_of(name), name, at) for at, name in rest[:max_entries]]
    return DirPage(tuple(entries), len(rest) <= max_entries)


def _build(tables: list[str], at: float, mtime: Nfstime3, old: Tree | None, new: list[str]) -> Tree:
    children: dict[str, set[str]] = {"": set()}
    for path in new:  # directories made to hold a new table: empty lake directories
        children.setdefault(path, set())
        children.setdefault(parent(path), set()).add(path.rpartition("/")[2])
    for table in tables:
        parts = table.split("/")
        for i in range(len(parts)):
            here = "/".join(parts[:i])
            children.setdefault(here, set()).add(parts[i])
    dir_local: dict[str, int] = {"": LAKE_ROOT}
    dir_path: dict[int, str] = {LAKE_ROOT: ""}
    for path in sorted(children):
        if path == "":
            continue
        local = path_hash("dir", path) & ((1 << 40) - 1)
        while local in (0, LAKE_ROOT) or local in dir_path:  # a collision: probe, path order
            local = (local + 1) & ((1 << 40) - 1)
        dir_local[path] = local
        dir_path[local] = path
    listed = {p: tuple(sorted(c)) for p, c in children.items()}
    if old is not None and old.children == listed:
        mtime = old.mtime
    subdirs = {p: len(c) for p, c in listed.items()}
    return Tree(at, frozenset(tables), listed, dir_local, dir_path, mtime, subdirs)


class Listing:
    """The cached listing of a lake (see the module docstring).

    Args:
        state: the lake's shared state (slots, clocks, locks, the new tables).
        tables: the open tables (refused ones are tried again, gone ones closed).
        discover: lists the tables (paths relative to the root).
        ttl: how long a listing is trusted, in seconds.
    """

    def __init__(
        self,
        state: LakeState,
        tables: OpenTables,
        discover: Callable[[], list[str]],
        *,
        ttl: float,
    ) -> None:
        self._state = state
        self._tables = tables
        self._discover = discover
        self._ttl = ttl
        self._tree: Tree | None = None
        self.failure: str | None = None
        """Why the last listing of the root failed (None: it did not)."""

    def current(self) -> Tree:
        """Return the listing, listing the root again if it is older than the TTL."""
        st = self._state
        tree = self._tree
        if tree is not None and st.clock() - tree.at < self._ttl:
            return tree
        with st.refresh_lock:
            tree = self._tree
            if tree is not None and st.clock() - tree.at < self._ttl:
                return tree
            try:
                tables = self._discover()
                self.failure = None
            except (PosixLakeError, OSError) as err:
                self.failure = f"cannot list {st.root}: {err}"
                if tree is None:
                    raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot list {st.root}: {err}") from err
                logger.warning("cannot list %s, showing the last listing: %s", st.root, err)
                tables = sorted(tree.tables)
            st.slots.assign(tables)
            self._tables.forget_refused()  # tried again: permissions may have changed
            now = st.now()
            with st.lock:
                for path in set(tables) & st.new.keys():  # made meanwhile, elsewhere too
                    st.new.pop(path).created = True
                new = [p for p, n in st.new.items() if not n.created]
            fresh = _build(tables, st.clock(), now, tree, new)
            self._tree = fresh
        if tree is not None and tree.tables - fresh.tables:
            self._tables.close_gone(fresh.tables)
        return fresh

    def fresh(self) -> Tree | None:
        """The cached listing if it is still within the TTL (lists nothing), else None."""
        tree = self._tree
        if tree is None or self._state.clock() - tree.at >= self._ttl:
            return None
        return tree

    def last(self) -> Tree | None:
        """The cached listing, however old (None: none yet)."""
        return self._tree

    def refresh(self) -> None:
        """Forget the cached listing: the next call lists the root again."""
        self._tree = None if self._tree is None else replace(self._tree, at=-1e300)

    def rebuild(self, add: str | None = None) -> None:
        """List the lake again from the last listing after a change made here (a new
        directory, a table made: ``add``)."""
        st = self._state
        with st.refresh_lock:
            old = self.current()
            tables = set(old.tables)
            if add is not None:
                st.slots.assign([add])
                tables.add(add)
            with st.lock:
                new = [p for p, n in st.new.items() if not n.created]
            self._tree = _build(sorted(tables), old.at, st.now(), old, new)

    # ------------------------------------------------------------ names and ids

    def table_path(self, slot: int, tree: Tree) -> str:
        """The path of the table of ``slot`` (STALE: no such table any more)."""
        path = self._state.slots.table_of(slot)
        if path is None or path not in tree.tables:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "no such table (any more)")
        return path

    @staticmethod
    def dir(local: int, tree: Tree) -> str:
        """The path of the lake directory ``local`` (STALE: no such directory any more)."""
        path = tree.dir_path.get(local)
        if path is None:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "no such lake directory (any more)")
        return path

    def id_of(self, path: str, tree: Tree) -> FileId:
        """The id of a lake entry: a table's root or a prefix directory."""
        if path in tree.tables:
            slot = self._state.slots.slot_of(path)
            assert slot is not None  # assigned at listing
            return lake_id(slot, TABLE_ROOT_LOCAL)
        return lake_id(0, tree.dir_local[path])

    def dir_attrs(self, fid: FileId, tree: Tree, path: str, mode: int) -> Fattr3:
        """The attributes of a lake directory or a table's directory (none opened)."""
        return lake_attrs(
            fid, self._state.fsid, mode=mode, mtime=tree.mtime, nlink=2 + tree.subdirs.get(path, 0)
        )

    def lookup(self, tree: Tree, dir_id: FileId, path: str, name: str) -> FileId:
        """LOOKUP of ``name`` in the lake directory ``path`` (``dir_id``)."""
        if name == ".":
            return dir_id
        if name == "..":
            return self.id_of(parent(path), tree)
        if name not in tree.children.get(path, ()):
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        return self.id_of(join(path, name), tree)

    def readdir(
        self, tree: Tree, dir_id: FileId, path: str, *, after: int, max_entries: int
    ) -> DirPage:
        """READDIR of the lake directory ``path`` (``dir_id``): see :func:`dir_page`."""

        def id_of(name: str) -> FileId:
            if name == ".":
                return dir_id
            return self.id_of(parent(path) if name == ".." else join(path, name), tree)

        return dir_page(tree.children.get(path, ()), after, max_entries, id_of)
