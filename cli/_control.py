"""The HTTP control plane of ``posixlake serve --http HOST:PORT`` (aiohttp).

Endpoints (GET only):

- ``/healthz``: 200 while the process serves HTTP (liveness);
- ``/readyz``: 200 when the NFS server accepts connections and every table answers,
  else 503 with the reason (readiness);
- ``/metrics``: Prometheus text exposition (see :mod:`cli._prom`);
- ``/api/v1/tables``: each table's name, location, version, rows, files, bytes, schema
  and last commit (of a lake: every table, with these figures for the ones open now);
- ``/api/v1/tables/{name}``: one table's, as in the list (a lake's table is opened);
- ``/api/v1/tables/{name}/history[?limit=N]``: its commits, newest first;
- ``/api/v1/tables/{name}/changes[?from_version=N][&follow=true]``: its changes as JSON
  lines, streamed a commit at a time (one object a row, as ``posixlake tail --format
  jsonl`` prints them); ``follow=true`` keeps the response open and streams each new
  commit as it lands, until the client goes away.

A lake (``serve ROOT`` of a directory of tables) names its tables by their path under the
root (``ops/events``); its tables open on first use, so the figures (``/metrics``,
``/readyz``, the list) are those of the tables open now, and a per-table request opens
its table as a first NFS call in it would, keeping it open while it runs.

The server runs on an asyncio loop of its own in one thread, apart from the NFS server's:
a slow scrape or a long change stream never delays an NFS call. Blocking table work
(history, health, reading changes) runs in worker threads.

Security: it binds to loopback unless told otherwise, and a bind to any other address
needs a bearer token (``--http-token`` or ``POSIXLAKE_HTTP_TOKEN``); with a token, every
endpoint but ``/healthz`` and ``/readyz`` needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web

from cli._common import schema_json, to_jsonable
from cli._prom import (
    CONTENT_TYPE,
    FeedBoard,
    LakeFigures,
    ServeCollector,
    build_registry,
    scrape,
)

if TYPE_CHECKING:
    from posixlake import DatabaseOps
    from posixlake.feed import ChangeFeed

__all__ = [
    "TOKEN_ENV",
    "ControlPlane",
    "FixedTables",
    "TableCatalog",
    "check_listen",
    "is_loopback",
    "parse_listen",
    "serving_plane",
    "start_plane",
    "table_name",
]

logger = logging.getLogger(__name__)

TOKEN_ENV: Final = "POSIXLAKE_HTTP_TOKEN"
_OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})


def parse_listen(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``PORT`` alone means loopback).

    Raises:
        ValueError: not HOST:PORT, or a port outside 0..65535.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{value!r} is not HOST:PORT") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not in 0..65535")
    return host, port


def is_loopback(host: str) -> bool:
    """Return whether ``host`` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TableCatalog(Protocol):
    """The tables a control plane serves: one table, or a lake's (opened on first use)."""

    def names(self) -> list[str]:
        """Every served table's name, sorted (a lake's may change between two calls)."""

    def loaded(self) -> Mapping[str, DatabaseOps]:
        """The tables open now, by name: their figures are reported without opening any."""

    def location(self, name: str) -> str:
        """The location of the table ``name`` (one of :meth:`names`)."""

    def use(self, name: str) -> AbstractContextManager[DatabaseOps]:
        """The table ``name``, open for one request (blocking: opening may load its log).

        Raises:
            KeyError: no such table.
            PosixLakeError: it cannot be opened (PermissionDenied: the server may not).
        """


class FixedTables:
    """Tables that are all open, by name (``serve`` of one table: ``{name: db}``)."""

    def __init__(self, tables: Callable[[], Mapping[str, DatabaseOps]]) -> None:
        self._tables = tables

    def names(self) -> list[str]:
        return sorted(self._tables())

    def loaded(self) -> Mapping[str, DatabaseOps]:
        return self._tables()

    def location(self, name: str) -> str:
        return self._tables()[name].uri

    def use(self, name: str) -> AbstractContextManager[DatabaseOps]:
        return nullcontext(self._tables()[name])


class ControlPlane:
    """Health, readiness, Prometheus metrics and a read-only JSON API over HTTP.

    Args:
        tables: the served tables: a `TableCatalog`, or a function returning them by
            name (called at each request), all open.
        host / port: where to listen (port 0 picks a free one, see :attr:`port`).
        token: the bearer token every request but /healthz and /readyz must carry (None:
            no token; refused for a non-loopback ``host``).
        ready: returns None when ready, else the reason (e.g. the NFS server is down);
            called in a worker thread (a lake's lists its root).
        nfs_stats: returns the NFS server's counters (``NfsServer.stats``), if one runs.
        nfs_calls: returns the NFS calls by procedure (``CallStats.snapshot`` of the
            observer on the server's dispatcher), if one runs.
        share_stats: returns the served share's counters (``TableFs.stats``), per table.
        lake_stats: returns a lake's figures (its tables, open ones), if a lake is served.

    Raises:
        ValueError: a non-loopback ``host`` without a token.
    """

    def __init__(
        self,
        tables: TableCatalog | Callable[[], Mapping[str, DatabaseOps]],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        ready: Callable[[], str | None] = lambda: None,
        nfs_stats: Callable[[], Any] | None = None,
        nfs_calls: Callable[[], Mapping[str, Any]] | None = None,
        share_stats: Callable[[], Mapping[str, Any]] | None = None,
        lake_stats: Callable[[], LakeFigures] | None = None,
    ) -> None:
        if not is_loopback(host) and not token:
            raise ValueError(
                f"listening on {host} (not loopback) needs a bearer token: "
                f"--http-token or ${TOKEN_ENV}"
            )
        self.host = host
        self._requested_port = port
        self._token = token
        self._catalog: TableCatalog = FixedTables(tables) if callable(tables) else tables
        self._ready = ready
        self.feeds = FeedBoard()
        self.registry = build_registry(
            ServeCollector(
                self._catalog.loaded,
                nfs_stats=nfs_stats,
                nfs_calls=nfs_calls,
                share_stats=share_stats,
                feeds=self.feeds,
                lake_stats=lake_stats,
            )
        )
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> ControlPlane:
        """Listen (in a thread of its own); return once bound.

        Raises:
            OSError: the address cannot be bound.
        """
        self._thread = threading.Thread(target=self._run, name="posixlake-http", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise OSError(f"the HTTP server did not start within {timeout} s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as err:  # handed to start(), which raises it (or logged)
            if self._started.is_set():
                logger.exception("the HTTP control plane on %s stopped", self.url)
            self._error = err
            self._started.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/api/v1/tables", self._list_tables)
        # a lake's table names have slashes (ops/events): one route, resolved by name
        app.router.add_get("/api/v1/tables/{rest:.+}", self._per_table)
        # a client that goes away cancels its handler: a followed change stream that
        # waits for the next commit closes its feed (and its inotify watch) at once
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            self.feeds.close_all()
            await runner.cleanup()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening, end open change streams and join the thread."""
        loop, stop = self._loop, self._stop
        self.feeds.close_all()
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- middleware ------------------------------------------------------------------

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if self._token and request.path not in _OPEN_PATHS:
            sent = request.headers.get("Authorization", "")
            scheme, _, given = sent.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self._token.encode()
            ):
                return web.json_response(
                    {"error": "a valid bearer token is required"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="posixlake"'},
                )
        return await handler(request)

    # -- handlers --------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        reason = await asyncio.to_thread(self._ready)  # a lake's may list its root
        if reason is None:
            unhealthy = await asyncio.to_thread(self._unhealthy_tables)
            if unhealthy:
                reason = "; ".join(unhealthy)
        if reason is not None:
            return web.json_response({"status": "not ready", "reason": reason}, status=503)
        return web.json_response({"status": "ready"})

    def _unhealthy_tables(self) -> list[str]:
        out = []
        for name, db in self._catalog.loaded().items():
            health = db.health_check()
            if health.status != "healthy":
                out.append(f"{name}: {health.message}")
        return out

    async def _metrics(self, request: web.Request) -> web.Response:
        body, _ = await asyncio.to_thread(scrape, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def _route(self, request: web.Request) -> tuple[str, str]:
        """Return (table name, what) of ``/api/v1/tables/{name}[/history|/changes]``.

        A table's own name wins: a lake never holds a table inside another one, so
        ``a/history`` is either the table ``a/history`` or the history of ``a``.
        """
        rest = request.match_info["rest"]
        names = set(await asyncio.to_thread(self._catalog.names))  # a lake may list its root
        if rest in names:
            return rest, ""
        name, _, what = rest.rpartition("/")
        if what in ("history", "changes") and name in names:
            return name, what
        missing = name if what in ("history", "changes") else rest
        raise web.HTTPNotFound(
            text=json.dumps({"error": f"no table named {missing!r}"}),
            content_type="application/json",
        )

    @asynccontextmanager
    async def _using(self, name: str) -> AsyncIterator[DatabaseOps]:
        """The table ``name`` for one request (opened in a worker thread if need be)."""
        from posixlake.errors import PermissionDenied, PosixLakeError

        held = self._catalog.use(name)
        try:
            db = await asyncio.to_thread(held.__enter__)
        except KeyError:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no table named {name!r}"}),
                content_type="application/json",
            ) from None
        except PermissionDenied as err:
            raise web.HTTPForbidden(
                text=json.dumps({"error": str(err)}), content_type="application/json"
            ) from err
        except PosixLakeError as err:
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": str(err)}), content_type="application/json"
            ) from err
        try:
            yield db
        finally:  # a client going away cancels the handler: the table is let go all the same
            await asyncio.shield(asyncio.to_thread(held.__exit__, None, None, None))

    async def _per_table(self, request: web.Request) -> web.StreamResponse:
        name, what = await self._route(request)
        async with self._using(name) as db:
            if what == "history":
                return await self._history(request, db)
            if what == "changes":
                return await self._changes(request, name, db)
            described = await asyncio.to_thread(_describe, name, db)
            return web.json_response(to_jsonable(described))

    async def _list_tables(self, request: web.Request) -> web.Response:
        def describe() -> list[dict[str, Any]]:
            loaded = self._catalog.loaded()
            out = []
            for name in self._catalog.names():
                db = loaded.get(name)
                if db is not None:
                    out.append(_describe(name, db))
                    continue
                # a lake's table not open now: its figures would cost opening it
                closed: dict[str, Any] = {"name": name, "location": self._catalog.location(name)}
                closed.update(dict.fromkeys(_FIGURES))
                out.append({**closed, "open": False})
            return out

        return web.json_response(to_jsonable(await asyncio.to_thread(describe)))

    async def _history(self, request: web.Request, db: DatabaseOps) -> web.Response:
        limit = _int_param(request, "limit", minimum=1)
        commits = await asyncio.to_thread(db.history, limit)
        return web.json_response(to_jsonable(commits))

    async def _changes(
        self, request: web.Request, name: str, db: DatabaseOps
    ) -> web.StreamResponse:
        from posixlake.errors import PosixLakeError

        start = _int_param(request, "from_version", minimum=0)
        follow = request.query.get("follow", "false").lower() in ("1", "true", "yes")
        try:
            if start is None:
                start = await asyncio.to_thread(lambda: db.version)
            feed = await asyncio.to_thread(db.subscribe, start)
        except PosixLakeError as err:
            raise web.HTTPBadRequest(
                text=json.dumps({"error": str(err)}), content_type="application/json"
            ) from err
        self.feeds.add(name, feed)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        try:
            # one step that never waits: an expired version is a 410 before any header
            batch = await asyncio.to_thread(feed.step)
            await response.prepare(request)
            if batch is None:
                batch = await self._next_batch(feed, follow)
            while batch is not None:
                await response.write(await asyncio.to_thread(_json_lines, batch.to_table()))
                batch = await self._next_batch(feed, follow)
        except PosixLakeError as err:  # after the headers: the last line says why
            if not response.prepared:
                raise web.HTTPGone(
                    text=json.dumps({"error": str(err)}), content_type="application/json"
                ) from err
            await response.write(json.dumps({"error": str(err)}).encode() + b"\n")
        except ConnectionResetError:
            logger.info("a change stream of %s ended: the client went away", name)
        finally:
            self.feeds.remove(feed)
            feed.close()
        if response.prepared:
            await response.write_eof()
        return response

    @staticmethod
    async def _next_batch(feed: ChangeFeed, follow: bool) -> Any:
        if not follow:
            return await asyncio.to_thread(feed.step)
        try:
            return await feed.__anext__()
        except StopAsyncIteration:
            return None


_FIGURES: Final = ("status", "version", "rows", "files", "bytes", "schema", "last_commit")
"""What the API describes of an open table besides its name and location."""


def _describe(name: str, db: DatabaseOps) -> dict[str, Any]:
    """One table of ``/api/v1/tables`` (reads its current version's figures)."""
    health = db.health_check()
    last = db.history(1)
    return {
        "name": name,
        "location": health.location,
        "status": health.status,
        "version": health.version,
        "rows": health.rows,
        "files": health.active_files,
        "bytes": health.active_bytes,
        "schema": schema_json(db.schema),
        "last_commit": to_jsonable(last[0]) if last else None,
        "open": True,
    }


def _int_param(request: web.Request, key: str, *, minimum: int) -> int | None:
    text = request.query.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"{key} must be an integer >= {minimum}, not {text!r}"}),
            content_type="application/json",
        )
    return value


def _json_lines(table: Any) -> bytes:
    import io

    from cli._tail import write_batch

    buf = io.BytesIO()
    write_batch(table, buf)
    return buf.getvalue()


def table_name(uri: str) -> str:
    """Return the name a served table has in the API: the last part of its location."""
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


def check_listen(listen: str, token: str | None) -> tuple[str, int]:
    """Validate ``--http HOST:PORT`` with ``--http-token`` (before anything starts).

    Raises:
        click.BadParameter: not HOST:PORT, or a non-loopback HOST without a token.
    """
    import click

    try:
        host, port = parse_listen(listen)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--http") from err
    if not is_loopback(host) and not token:
        raise click.BadParameter(
            f"listening on {host} (not loopback) needs a bearer token: --http-token or "
            f"${TOKEN_ENV}",
            param_hint="--http",
        )
    return host, port


def serving_plane(
    db: DatabaseOps,
    server: Any,
    listen: tuple[str, int],
    token: str | None,
    *,
    share: Any = None,
) -> ControlPlane:
    """Start the control plane of ``posixlake serve`` for one table and its NFS server
    (see :func:`start_plane`); ``share`` (the TableFs) gives the share's counters.

    Raises:
        IoError: the address cannot be bound.
    """
    name = table_name(db.uri)
    return start_plane(
        lambda: {name: db},
        server,
        listen,
        token,
        share_stats=(lambda: {name: share.stats()}) if share is not None else None,
    )


def start_plane(
    tables: TableCatalog | Callable[[], Mapping[str, DatabaseOps]],
    server: Any,
    listen: tuple[str, int],
    token: str | None,
    *,
    share_stats: Callable[[], Mapping[str, Any]] | None = None,
    lake_stats: Callable[[], LakeFigures] | None = None,
    ready: Callable[[], str | None] = lambda: None,
) -> ControlPlane:
    """Start the control plane of ``posixlake serve`` for ``tables`` and their NFS server.

    The server's dispatcher gets a call observer (``nfs.protocol.observe.CallStats``:
    calls and latency by procedure). Ready when the server accepts calls and ``ready``
    gives no reason not to be.

    Raises:
        IoError: the address cannot be bound.
    """
    from nfs.protocol.observe import CallStats
    from posixlake.errors import IoError

    calls = CallStats()
    server.dispatcher.observer = calls
    host, port = listen
    plane = ControlPlane(
        tables,
        host=host,
        port=port,
        token=token,
        ready=lambda: ready() if server.is_ready() else "the NFS server is not accepting calls",
        nfs_stats=server.stats,
        nfs_calls=calls.snapshot,
        share_stats=share_stats,
        lake_stats=lake_stats,
    )
    try:
        return plane.start()
    except OSError as err:
        raise IoError(f"cannot serve HTTP on {host}:{port}: {err.strerror or err}") from err
