"""A small asyncio HTTP/1.1 server: GET and HEAD, keep-alive, TLS, basic auth.

The daemon serves a handful of read-only endpoints; this avoids a web
framework while still handling what scrapers do (keep-alive, HEAD, Accept).
Requests larger than ``MAX_HEADER_BYTES`` or slower than ``READ_TIMEOUT_S``
are cut off so a slow client cannot hold the server.  Every answer, the 400s
and 431s of malformed requests included, is reported to ``on_request``
(``netio_http_requests_total``).  Basic auth is checked off the event loop
(:mod:`netio.daemon.auth`); when all bcrypt slots are busy the answer is 429
with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from netio.daemon.auth import AuthResult, BasicAuth

MAX_HEADER_BYTES = 16384
READ_TIMEOUT_S = 30.0
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 429: "Too Many Requests",
            431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = field(default=())


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    def __init__(self, routes: dict[str, Handler], *, auth: BasicAuth | None = None,
                 on_request: Callable[[str, int], None] | None = None) -> None:
        self.routes = routes
        self.auth = auth
        self.on_request = on_request
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, ssl=ssl_context,
                                                  reuse_address=True, backlog=512)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError,
                asyncio.LimitOverrunError):
            pass
        finally:
            if task is not None:
                self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            await self._answer(writer, "other", Response(431, b"header too large\n"), False,
                               "GET")
            return False
        except asyncio.IncompleteReadError:
            return False
        if len(head) > MAX_HEADER_BYTES:
            await self._answer(writer, "other", Response(431, b"header too large\n"), False,
                               "GET")
            return False
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._answer(writer, "other", Response(400, b"bad request line\n"), False,
                               "GET")
            return False
        method, target, version = parts
        path, _, query = target.partition("?")
        route = path if path in self.routes else "other"
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            k, sep, v = line.partition(":")
            if not sep:
                await self._answer(writer, route, Response(400, b"bad header\n"), False, method)
                return False
            headers[k.strip().lower()] = v.strip()
        conn = headers.get("connection", "").lower()
        keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        if headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers:
            keep = False  # a body we do not read: do not reuse the connection
        auth = AuthResult.OK if self.auth is None or method not in ("GET", "HEAD") \
            else await self.auth.check(headers.get("authorization"))
        if method not in ("GET", "HEAD"):
            resp = Response(405, b"only GET and HEAD\n", headers=(("Allow", "GET, HEAD"),))
        elif auth is AuthResult.BUSY:
            resp = Response(429, b"too many authentication attempts in progress\n",
                            headers=(("Retry-After", "1"),))
        elif auth is not AuthResult.OK:
            resp = Response(401, b"unauthorized\n",
                            headers=(("WWW-Authenticate", 'Basic realm="netio-daemon"'),))
        else:
            handler = self.routes.get(path)
            if handler is None:
                resp = Response(404, b"not found\n")
            else:
                try:
                    resp = await handler(Request(method, path, query, headers))
                except Exception as e:  # the server keeps serving; the fault is reported
                    resp = Response(500, f"internal error: {type(e).__name__}: {e}\n".encode())
        await self._answer(writer, route, resp, keep, method)
        return keep

    async def _answer(self, writer: asyncio.StreamWriter, route: str, resp: Response,
                      keep: bool, method: str) -> None:
        """Count the answer, then send it."""
        if self.on_request is not None:
            self.on_request(route, resp.status)
        await self._send(writer, resp, keep, method)

    async def _send(self, writer: asyncio.StreamWriter, resp: Response, keep: bool,
                    method: str) -> None:
        head = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, 'Status')}",
                f"Content-Type: {resp.content_type}", f"Content-Length: {len(resp.body)}",
                f"Connection: {'keep-alive' if keep else 'close'}"]
        head += [f"{k}: {v}" for k, v in resp.headers]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if method != "HEAD":
            writer.write(resp.body)
        await writer.drain()
