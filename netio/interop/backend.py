"""How the tool commands (``netio pingpong``, ``netio perftest``) use the IO API: the
context they open (which backend, and the options each backend takes), the data
connection of ``--backend tcp``, and what they do with handles left at the end.

The tools' peers are RoCE devices (the kernel's rxe, a NIC) or another netio:
``soft`` (netio's engine on UDP) and ``verbs`` (rdma-core) speak RoCEv2 to both;
``tcp`` carries the same operations over TCP and so talks to another netio using
``--backend tcp`` only, never to a kernel tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Iterable
from typing import Any

import netio
from netio.api.context import Context
from netio.api.endpoint import Endpoint
from netio.api.handles import Pending
from netio.backends.soft import RxMode
from netio.errors import ExchangeError, IoError
from netio.interop import oob
from netio.roce import LinkFaults

#: The backends the tool commands run over (``--backend``).
TOOL_BACKENDS = ("soft", "verbs", "tcp")


def check_backend(step: str, name: str) -> None:
    if name not in TOOL_BACKENDS:
        raise ExchangeError(step, f"backend {name!r} is not one of {', '.join(TOOL_BACKENDS)}")


def open_context(backend: str, local_ip: ipaddress.IPv4Address, *, timeout_s: float,
                 rx_mode: RxMode, faults: LinkFaults | None, fault_seed: int,
                 device: str | None = None, port: int | None = None,
                 gid_index: int | None = None, **options: Any) -> Context:
    """A context on ``backend`` whose endpoints use ``local_ip``; ``options`` are
    :func:`netio.open`'s QP options (MTU, retries, Q_Key, access). Only the soft backend
    takes the receive mode and the lossy link, only verbs the device, port and GID index."""
    if backend == "soft":
        return netio.open("soft", local_addr=str(local_ip), timeout_s=timeout_s,
                          rx_mode=rx_mode, faults=faults, fault_seed=fault_seed, **options)
    if backend == "verbs":
        return netio.open("verbs", device=device, port=port, gid=gid_index,
                          local_addr=str(local_ip), timeout_s=timeout_s, **options)
    return netio.open(backend, timeout_s=timeout_s, **options)


def tcp_peer_error(step: str, peer_gid: ipaddress.IPv6Address) -> ExchangeError:
    """The one line for a ``--backend tcp`` run whose peer announced a RoCE GID."""
    return ExchangeError(step, f"the peer announced RoCE GID {gid_text(peer_gid)}: it is a "
                               "RoCE device (a kernel tool or netio --backend soft/verbs), and "
                               "--backend tcp talks only to netio --backend tcp")


def gid_text(gid: ipaddress.IPv6Address) -> str:
    """A GID as people and the tools print it (IPv4-mapped ones in dotted form)."""
    mapped = gid.ipv4_mapped
    return f"::ffff:{mapped}" if mapped is not None else str(gid)


def discard(pendings: Iterable[Pending[Any]]) -> None:
    """Stop waiting for operations still posted at the end of a run (closing flushes
    them; nobody is to hear about it), and take the outcome of finished ones."""
    for pending in pendings:
        if pending.done():
            with contextlib.suppress(Exception):
                pending.result()
        else:
            pending.cancel()


def counters_text(counters: dict[str, int]) -> str:
    """The non-zero counters, ``name=value`` (what a stalled run's error shows)."""
    return ", ".join(f"{k}={v}" for k, v in counters.items() if v) or "all counters 0"


async def tcp_data_connect(ctx: Context, host: str, port: int, timeout_s: float,
                           step: str) -> Endpoint:
    """``--backend tcp``: the data connection (netio's own exchange, on the tool's port
    once the tool's exchange is over), retried until ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            return await ctx.connect(f"{host}:{port}",
                                     timeout_s=max(deadline - loop.time(), 0.001))
        except IoError as exc:
            if loop.time() >= deadline:
                raise ExchangeError(step, str(exc)) from None
            await asyncio.sleep(oob.RETRY_INTERVAL_S)


__all__ = ["TOOL_BACKENDS", "check_backend", "counters_text", "discard", "gid_text",
           "open_context", "tcp_data_connect", "tcp_peer_error"]
