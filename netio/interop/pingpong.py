"""The libibverbs examples' out-of-band exchange and test loop
(``ibv_rc_pingpong``, ``ibv_uc_pingpong``, ``ibv_ud_pingpong``; rdma-core
``libibverbs/examples/{rc,uc,ud}_pingpong.c``).

The exchange, on TCP port 18515 by default:

* the client sends its address as ``"%04x:%06x:%06x:%s"`` (LID, QPN, PSN,
  32 hex digits of the GID in wire order) in a 52-byte buffer, NUL included;
* the server reads it, moves its QP to RTR/RTS (so that it is ready before
  the client's first message), then answers with its own address the same way;
* the client answers ``"done\\0"`` and both close the connection.

The test loop: both sides post ``rx_depth`` receives into the one message
buffer (UD: ``size + 40`` bytes, a GRH first). The client sends first; each
side posts its next send only when its previous send and receive have both
completed, until ``iters`` of each. With ``--chk`` the client writes 0 to the
first byte of every page (4 KiB) of its buffer before the first send, the
server echoes what it received, and the client checks those bytes at the end.
netio checks more: in either role it compares every received message with the
client's ``--chk`` pattern, byte for byte.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from netio.interop import ExchangeError

DEFAULT_PORT = 18515
#: ``sizeof "0000:000000:000000:00000000000000000000000000000000"``.
ADDRESS_MESSAGE_BYTES = 52
DONE_MESSAGE = b"done\x00"
#: The byte every pingpong buffer starts filled with (``memset(buf, 0x7b, size)``).
FILL_BYTE = 0x7B
#: Page size the guest tools use for ``--chk`` (x86-64 ``sysconf(_SC_PAGESIZE)``).
CHK_PAGE_BYTES = 4096
#: UD receives start with the 40-byte GRH (IBTA vol 1 §11.4.1.1, the GRH of a UD receive).
UD_GRH_BYTES = 40
#: The Q_Key ``ibv_ud_pingpong`` gives its QP and puts in every work request.
UD_PINGPONG_QKEY = 0x11111111

_ADDRESS_RE = re.compile(rb"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]{32})\x00")


@dataclass(frozen=True, slots=True)
class PingpongAddress:
    """One side's ``struct pingpong_dest``: LID (0 on RoCE), QPN, first PSN, GID."""

    lid: int
    qpn: int
    psn: int
    gid: ipaddress.IPv6Address

    def __post_init__(self) -> None:
        if not 0 <= self.lid <= 0xFFFF:
            raise ExchangeError("pingpong address", f"LID {self.lid:#x} does not fit 16 bits")
        if not 0 <= self.qpn <= 0xFFFFFF:
            raise ExchangeError("pingpong address", f"QPN {self.qpn:#x} does not fit 24 bits")
        if not 0 <= self.psn <= 0xFFFFFF:
            raise ExchangeError("pingpong address", f"PSN {self.psn:#x} does not fit 24 bits")

    def encode(self) -> bytes:
        """The 52-byte message, as ``sprintf(msg, "%04x:%06x:%06x:%s", ...)`` writes it.

        ``gid_to_wire_gid`` prints each 32-bit word of the GID after
        ``htobe32`` of its host-order value: on any host that is the 16 raw
        bytes in order, as hex."""
        text = f"{self.lid:04x}:{self.qpn:06x}:{self.psn:06x}:{self.gid.packed.hex()}"
        return text.encode("ascii") + b"\x00"

    @classmethod
    def decode(cls, message: bytes) -> PingpongAddress:
        """Parse a peer's 52-byte message (``sscanf(msg, "%x:%x:%x:%s", ...)``)."""
        match = _ADDRESS_RE.match(message)
        if match is None:
            raise ExchangeError(
                "pingpong address",
                f"expected LID:QPN:PSN:GID (hex), got {message[:ADDRESS_MESSAGE_BYTES]!r}",
            )
        lid, qpn, psn, gid = match.groups()
        return cls(
            lid=int(lid, 16),
            qpn=int(qpn, 16),
            psn=int(psn, 16),
            gid=ipaddress.IPv6Address(bytes.fromhex(gid.decode("ascii"))),
        )

    @property
    def has_gid(self) -> bool:
        """The tools use a GRH (and so can run on RoCE) only with a non-zero
        interface ID in the GID (``dest->gid.global.interface_id``)."""
        return self.gid.packed[8:] != bytes(8)


async def _read_exact(reader: asyncio.StreamReader, nbytes: int, step: str) -> bytes:
    try:
        return await reader.readexactly(nbytes)
    except asyncio.IncompleteReadError as exc:
        got = len(exc.partial)
        raise ExchangeError(step, f"peer closed after {got} of {nbytes} bytes") from exc


async def client_exchange(
    host: str, port: int, mine: PingpongAddress, *, connect_timeout_s: float = 30.0,
    local_host: str | None = None,
) -> PingpongAddress:
    """The client side (``pp_client_exch_dest``): send ours, read theirs, send "done".

    Connection attempts are retried until ``connect_timeout_s``, so the client
    may start before the server listens."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + connect_timeout_s
    while True:
        try:
            reader, writer = await asyncio.open_connection(
                host, port, local_addr=(local_host, 0) if local_host else None
            )
            break
        except OSError as exc:
            if loop.time() >= deadline:
                raise ExchangeError("pingpong connect", f"{host}:{port}: {exc}") from exc
            await asyncio.sleep(0.1)
    try:
        writer.write(mine.encode())
        await writer.drain()
        theirs = PingpongAddress.decode(
            await _read_exact(reader, ADDRESS_MESSAGE_BYTES, "pingpong server address")
        )
        writer.write(DONE_MESSAGE)
        await writer.drain()
    finally:
        writer.close()
    return theirs


class PingpongServer:
    """The server side (``pp_server_exch_dest``) on a listening socket.

    ``await server.exchange(mine, connect)`` accepts one client, reads its
    address, awaits ``connect(theirs)`` (move the QP to RTR/RTS), answers with
    ``mine`` and reads the client's "done"."""

    def __init__(self) -> None:
        self._accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._server: asyncio.Server | None = None

    async def listen(self, host: str | None, port: int) -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accepted.put((reader, writer))

        self._server = await asyncio.start_server(on_client, host, port, reuse_address=True)

    @property
    def port(self) -> int:
        if self._server is None:
            raise ExchangeError("pingpong server", "not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def exchange(
        self, mine: PingpongAddress, connect: Callable[[PingpongAddress], Awaitable[None]]
    ) -> PingpongAddress:
        reader, writer = await self._accepted.get()
        try:
            theirs = PingpongAddress.decode(
                await _read_exact(reader, ADDRESS_MESSAGE_BYTES, "pingpong client address")
            )
            await connect(theirs)
            writer.write(mine.encode())
            await writer.drain()
            done = await reader.read(ADDRESS_MESSAGE_BYTES)
            if done != DONE_MESSAGE:
                raise ExchangeError("pingpong done", f"expected {DONE_MESSAGE!r}, got {done!r}")
        finally:
            writer.close()
        return theirs

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


def chk_pattern(size_bytes: int) -> bytes:
    """The message the ``--chk`` client sends: the fill byte, with 0 at the
    first byte of every page (``buf[i] = i / page_size % sizeof(char)``)."""
    pattern = bytearray([FILL_BYTE]) * size_bytes
    pattern[::CHK_PAGE_BYTES] = bytes(len(range(0, size_bytes, CHK_PAGE_BYTES)))
    return bytes(pattern)


def first_mismatch(data: bytes | bytearray | memoryview, expected: bytes) -> int | None:
    """Offset of the first byte where ``data`` differs from ``expected``, or None."""
    view = bytes(data)
    if view == expected:
        return None
    for offset, (got, want) in enumerate(zip(view, expected, strict=False)):
        if got != want:
            return offset
    return min(len(view), len(expected))
