"""Telling apart a perftest peer that runs over rdma_cm (``-R``, ``--rdma_cm``).

With ``-R`` perftest sets its QPs up through rdma_cm and exchanges its keys over them
(perftest's "rdma_cm QPs: ON", "Data ex. method: rdma_cm"): its server listens through
rdma_cm on its port, not on TCP, and its client sends an IB CM REQ instead of opening a
TCP connection. netio's perftest peer speaks perftest's TCP exchange only, so without
this each side would wait for the other until ``--timeout``.

With the verbs backend netio asks rdma_cm itself:

* as the server, it also listens through rdma_cm on the same port (rdma_cm's TCP port
  space is not the kernel's TCP ports) while it waits for the TCP client: a connection
  request there is a ``-R`` client;
* as the client, once the TCP connection has been refused, it connects through rdma_cm
  to the same port (once): an rdma_cm listener accepting there is a ``-R`` server.

Either ends the run with one line (an :class:`ExchangeError`: exit 4, "the test
failed"). The soft and tcp backends have no rdma_cm to ask: against a ``-R`` peer they
still end at ``--timeout`` ("no server at HOST:PORT ...: Connection refused", or "no
client connected within ..."); :data:`HINT` says what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable
from typing import TypeVar

from netio.api.context import Context
from netio.errors import ExchangeError, NetioError

T = TypeVar("T")
STEP = "perftest rdma_cm"
#: How long the client's probe may take (resolve, route, REQ/REP): a plain TCP server's
#: host answers it with a REJ at once.
PROBE_S = 10.0
WATCH_INTERVAL_S = 0.1  # how often the server's watch looks at its listener's refusals
HINT = ("a perftest started with -R (--rdma_cm) connects through rdma_cm, which netio's "
        "perftest peer does not speak: run it without -R")


def cm_server_error(host: str, port: int) -> ExchangeError:
    return ExchangeError(STEP, f"{host}:{port} refuses TCP but accepts an rdma_cm "
                               f"connection: the server runs perftest -R (--rdma_cm), which "
                               f"netio's perftest peer does not speak (run it without -R)")


def cm_client_error(port: int) -> ExchangeError:
    return ExchangeError(STEP, f"a client connected through rdma_cm to port {port} instead "
                               f"of TCP: it runs perftest -R (--rdma_cm), which netio's "
                               f"perftest peer does not speak (run it without -R)")


async def rdma_cm_listener_at(ctx: Context, host: str, port: int, timeout_s: float) -> bool:
    """Whether an rdma_cm listener at ``host:port`` accepts a connection (which is closed
    at once); False when it rejects, nothing answers, or rdma_cm cannot be used."""
    try:
        ep = await asyncio.wait_for(
            ctx.connect(f"{host}:{port}", cm="rdma_cm", timeout_s=timeout_s), timeout_s + 1)
    except (NetioError, OSError, TimeoutError):
        return False
    with contextlib.suppress(NetioError, OSError):
        await ep.aclose()
    return True


async def rdma_cm_client_at(ctx: Context, port: int,
                            on_listening: Callable[[str], None] | None = None) -> None:
    """Return when an rdma_cm client asks for ``port`` at the address of the context's
    RoCEv2 GID, whether netio's listener then accepts it (closed at once) or turns it
    away (perftest's REQ need not suit it): either way the peer speaks rdma_cm. Waits for
    ever: the caller cancels it. Raises when rdma_cm cannot listen there.
    ``on_listening(text)`` is called once the rdma_cm listener is up."""
    gid = ipaddress.IPv6Address(ctx.describe().gid)
    host = str(gid.ipv4_mapped or gid)
    listener = await ctx.listen(f"{host}:{port}", cm="rdma_cm")
    if on_listening is not None:
        on_listening(f"and through rdma_cm on {host}:{port}, to name a perftest -R client")
    accept = asyncio.ensure_future(listener.accept(timeout_s=None))
    try:
        while not accept.done() and listener.rejected == 0:
            await asyncio.wait({accept}, timeout=WATCH_INTERVAL_S)
        if accept.done():
            ep = accept.result()  # a listener that failed raises: the watch stops there
            with contextlib.suppress(NetioError, OSError):
                await ep.aclose()
    finally:
        if not accept.done():
            accept.cancel()
        with contextlib.suppress(BaseException):
            await accept
        with contextlib.suppress(NetioError, OSError):
            await listener.aclose()


async def first_of(work: Awaitable[T], watch: Awaitable[None],
                   error: Callable[[], ExchangeError]) -> T:
    """``work``'s result; when ``watch`` finishes first, ``work`` is cancelled and
    ``error()`` raised. A watch that fails (rdma_cm unusable) just stops watching."""
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(watch)
    try:
        while True:
            done, _ = await asyncio.wait({work_task, watch_task},
                                         return_when=asyncio.FIRST_COMPLETED)
            if work_task in done:
                return work_task.result()
            if watch_task.exception() is None:
                work_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await work_task
                raise error()
            return await work_task  # the watch could not run: wait for the work alone
    finally:
        for task in (work_task, watch_task):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def local_ip_or_any(ip: ipaddress.IPv4Address | None) -> ipaddress.IPv4Address:
    return ip if ip is not None else ipaddress.IPv4Address("0.0.0.0")


__all__ = ["HINT", "PROBE_S", "STEP", "cm_client_error", "cm_server_error", "first_of",
           "local_ip_or_any", "rdma_cm_client_at", "rdma_cm_listener_at"]
