"""The out-of-band TCP connection both tool exchanges share (ibv_*_pingpong's and
perftest's): connecting with retries, listening and accepting, reading and writing
their fixed-size messages, the source address the kernel would use, and the limits
of their common options.

Every step has a deadline, the configured timeout: a connect (each attempt and all
retries together), the wait for a client, every read and every write. A peer that
opens the connection and then sends nothing ends the step with an
:class:`ExchangeError` naming it. Every failure says what and where in one line
(``pingpong connect: no server at 127.0.0.1:18515 after 60 s: Connection refused``,
``pingpong server address: nothing received for 10 s (--timeout)``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from netio.errors import ExchangeError

#: Work requests in flight and receives posted at a time (``-t``, ``-r``): at most
#: rxe's historical ``RXE_MAX_QP_WR`` (0x4000), which the tools cannot exceed there either.
MAX_QUEUE_DEPTH = 0x4000
#: ``-n``: the pingpong examples count iterations in a C ``int``.
MAX_INT_ITERS = (1 << 31) - 1
RETRY_INTERVAL_S = 0.1
#: The commands' ``--timeout`` default: the deadline of every step.
DEFAULT_TIMEOUT_S = 60.0

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
ConnectionT = TypeVar("ConnectionT")


def _why(exc: OSError) -> str:
    """``Connection refused`` rather than asyncio's ``[Errno 111] Connect call failed (...)``."""
    if isinstance(exc, socket.gaierror):
        return exc.strerror or str(exc)
    return os.strerror(exc.errno) if exc.errno else str(exc)


def check_options(step: str, *, client: bool, port: int, timeout_s: float) -> None:
    """The options both commands share: the TCP port and the timeout."""
    low = 1 if client else 0
    if not low <= port <= 65535:
        raise ExchangeError(step, f"TCP port {port} is not in {low}..65535")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ExchangeError(step, f"timeout {timeout_s} s must be a positive number of seconds")


def check_range(step: str, what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ExchangeError(step, f"{what} {value} is not in {low}..{high}")


async def connect(host: str, port: int, *, timeout_s: float, step: str,
                  local_host: str | None = None,
                  on_waiting: Callable[[str], None] | None = None,
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the tool's server, retrying for ``timeout_s`` (the server may
    start after the client). ``on_waiting(text)`` is called once, when the first
    attempt fails, so that a person sees why nothing happens yet."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    told = False
    refused: OSError | None = None  # the last attempt's error, if one failed
    while True:
        try:
            # One attempt may itself hang (a SYN nobody answers): it gets what is left.
            return await asyncio.wait_for(asyncio.open_connection(
                host, port, local_addr=(local_host, 0) if local_host else None),
                max(deadline - loop.time(), 0.001))
        except TimeoutError:
            # An attempt cut short by the end of the budget after refusals says why the
            # earlier ones failed, not that this sliver of time went unanswered.
            why = _why(refused) if refused is not None else "the connection was not answered"
            raise ExchangeError(step, f"no server at {host}:{port} after {timeout_s:g} s: "
                                      f"{why}") from None
        except OSError as exc:
            refused = exc
            if loop.time() >= deadline:
                raise ExchangeError(step, f"no server at {host}:{port} after {timeout_s:g} s: "
                                          f"{_why(exc)}") from exc
            if on_waiting is not None and not told:
                on_waiting(f"waiting for the server at {host}:{port} ({_why(exc)}; "
                           f"retrying for up to {timeout_s:g} s)")
                told = True
            await asyncio.sleep(RETRY_INTERVAL_S)


async def listen(handler: ConnectionHandler, host: str | None, port: int,
                 step: str) -> asyncio.Server:
    """Listen like the tools (every address unless ``host``)."""
    try:
        return await asyncio.start_server(handler, host, port, reuse_address=True)
    except OSError as exc:
        where = f"{host}:{port}" if host else f"TCP port {port}"
        raise ExchangeError(step, f"cannot listen on {where}: {_why(exc)}") from exc


async def read_exact(reader: asyncio.StreamReader, nbytes: int, step: str,
                     timeout_s: float) -> bytes:
    """``nbytes`` from the peer within ``timeout_s``."""
    try:
        return await asyncio.wait_for(reader.readexactly(nbytes), timeout_s)
    except TimeoutError:
        raise ExchangeError(step, f"nothing received for {timeout_s:g} s (--timeout): the "
                                  f"peer connected but did not send its {nbytes}-byte "
                                  "message") from None
    except asyncio.IncompleteReadError as exc:
        got = len(exc.partial)
        raise ExchangeError(step, f"peer closed after {got} of {nbytes} bytes") from exc
    except OSError as exc:
        raise ExchangeError(step, f"connection lost: {_why(exc)}") from exc


async def write(writer: asyncio.StreamWriter, data: bytes, step: str, timeout_s: float) -> None:
    """Send ``data``; the peer must take it within ``timeout_s``."""
    try:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), timeout_s)
    except TimeoutError:
        raise ExchangeError(step, f"the peer took nothing for {timeout_s:g} s "
                                  "(--timeout)") from None
    except OSError as exc:
        raise ExchangeError(step, f"connection lost: {_why(exc)}") from exc


class Listener(Generic[ConnectionT]):
    """Accepts the tools' clients (the server role); each connection is wrapped by ``wrap``."""

    def __init__(self, wrap: Callable[[asyncio.StreamReader, asyncio.StreamWriter], ConnectionT],
                 step: str, default_port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._wrap = wrap
        self.timeout_s = timeout_s
        self._step = step
        self._default_port = default_port
        self._accepted: asyncio.Queue[ConnectionT] = asyncio.Queue()
        self._server: asyncio.Server | None = None

    async def listen(self, host: str | None, port: int | None = None) -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accepted.put(self._wrap(reader, writer))

        chosen = self._default_port if port is None else port
        self._server = await listen(on_client, host, chosen, self._step)

    @property
    def port(self) -> int:
        if self._server is None:
            raise ExchangeError(self._step, "not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def accept(self, timeout_s: float | None = None) -> ConnectionT:
        """The first client, within ``timeout_s`` (default: the listener's)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(self._accepted.get(), timeout_s)
        except TimeoutError:
            raise ExchangeError(self._step, f"no client connected within {timeout_s:g} s "
                                            f"(--timeout) on TCP port {self.port}") from None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


def route_source_ip(host: str, port: int, step: str) -> ipaddress.IPv4Address:
    """The source address the kernel picks for ``host`` (a connected UDP socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, port))
        except OSError as exc:
            raise ExchangeError(step, f"no route to {host}: {_why(exc)}") from exc
        return ipaddress.IPv4Address(probe.getsockname()[0])
