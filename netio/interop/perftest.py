"""perftest's out-of-band exchange (linux-rdma/perftest
``src/perftest_communication.c``), so that netio can be either side of
``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw`` and ``ib_atomic_bw``.

Every step is an exchange of fixed-size binary or text blobs over one TCP
connection (port 18515 by default); the client writes first and then reads,
the server reads first and then writes (``ctx_xchg_data_ethernet``):

1. versions: ``char version[16]`` (``exchange_versions``); a peer older than
   5.70 is refused by current perftest, so netio announces :data:`PERFTEST_VERSION`;
2. system data: ``cycle_buffer`` and ``cache_line_size`` as big-endian 32-bit
   ints; both sides keep the larger (``check_sys_data``);
3. MTU: the ``enum ibv_mtu`` value as a decimal string in 2 bytes; both sides
   keep the smaller (``check_mtu``);
4. "hand shakes": each side's ``struct pingpong_dest`` as the 108-byte text
   ``KEY_PRINT_FMT_GID`` (``ctx_hand_shake``): LID, outstanding reads, QPN, PSN,
   rkey, buffer address, the GID byte by byte, SRQ number. The same keys are
   sent again at every later synchronisation point;
5. the bandwidth report (``xchg_bw_reports``, WRITE/READ/ATOMIC only): message
   size and iterations (64-bit), peak and average bandwidth and message rate
   (big-endian doubles);
6. closing (``ctx_close_connection``): one more hand shake, then ``"done\\0"``.

The sequence of synchronisation points of each test is in :data:`HANDSHAKES_BEFORE_RUN`.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import struct
from dataclasses import dataclass

from netio.interop import ExchangeError

DEFAULT_PORT = 18515
#: What netio announces as its perftest version: the version of the perftest
#: whose exchange this module follows (Debian 12's perftest 4.5-0.17 prints 6.06).
PERFTEST_VERSION = "6.06"
VERSION_FIELD_BYTES = 16  # MAX_VERSION
#: Oldest peer version current perftest accepts (``check_version_compatibility``).
MIN_PEER_VERSION = 5.70
KEY_MESSAGE_BYTES = 108  # KEY_MSG_SIZE_GID, the NUL included
DONE_MESSAGE = b"done\x00"
DEFAULT_CYCLE_BUFFER_BYTES = 4096  # DEF_PAGE_SIZE
DEFAULT_CACHE_LINE_BYTES = 64  # DEF_CACHE_LINE_SIZE
#: perftest's atomic operands (``ATOMIC_ADD_VALUE``, ``ATOMIC_SWAP_VALUE``).
ATOMIC_ADD_VALUE = 1
ATOMIC_SWAP_VALUE = 0
ATOMIC_SIZE_BYTES = 8


class PerftestVerb(enum.StrEnum):
    """The tests netio speaks (perftest's ``VerbType`` names, lower case)."""

    WRITE = "write"
    READ = "read"
    SEND = "send"
    ATOMIC = "atomic"


#: Hand shakes between the MTU exchange and the measured loop, per verb:
#: WRITE/READ/ATOMIC: keys, keys again after ``ctx_connect`` ("remote" print),
#: one more "after RTR"; SEND: keys, one after ``ctx_connect``, keys again, one
#: after the receives are posted (``send_bw.c``).
HANDSHAKES_BEFORE_RUN: dict[PerftestVerb, int] = {
    PerftestVerb.WRITE: 3,
    PerftestVerb.READ: 3,
    PerftestVerb.ATOMIC: 3,
    PerftestVerb.SEND: 4,
}

#: ``enum ibv_mtu``: 1 = 256 ... 5 = 4096.
_MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


def mtu_to_enum(mtu_bytes: int) -> int:
    try:
        return _MTU_ENUM[mtu_bytes]
    except KeyError:
        raise ExchangeError("perftest mtu", f"{mtu_bytes} is not an IB MTU") from None


def enum_to_mtu(value: int) -> int:
    for mtu_bytes, code in _MTU_ENUM.items():
        if code == value:
            return mtu_bytes
    raise ExchangeError("perftest mtu", f"{value} is not an enum ibv_mtu value (1..5)")


def buffer_span_bytes(size_bytes: int, cycle_buffer_bytes: int) -> int:
    """How far past the advertised address a peer's WRITE/READ/atomic may
    reach: ``BUFF_SIZE(size, cycle_buffer)``, the larger of the two
    (``increase_rem_addr`` cycles within ``cycle_buffer`` for small messages)."""
    return max(size_bytes, cycle_buffer_bytes)


@dataclass(frozen=True, slots=True)
class PerftestKeys:
    """perftest's ``struct pingpong_dest`` as it travels (``KEY_PRINT_FMT_GID``)."""

    lid: int
    out_reads: int
    qpn: int
    psn: int
    rkey: int
    vaddr: int
    gid: ipaddress.IPv6Address
    srqn: int = 0

    def __post_init__(self) -> None:
        limits = {"lid": 16, "out_reads": 16, "qpn": 24, "psn": 24, "rkey": 32,
                  "vaddr": 64, "srqn": 32}
        for name, bits in limits.items():
            value = getattr(self, name)
            if not 0 <= value < (1 << bits):
                raise ExchangeError("perftest keys", f"{name} {value:#x} does not fit {bits} bits")

    def encode(self) -> bytes:
        gid = ":".join(f"{b:02x}" for b in self.gid.packed)
        text = (f"{self.lid:04x}:{self.out_reads:04x}:{self.qpn:06x}:{self.psn:06x}:"
                f"{self.rkey:08x}:{self.vaddr:016x}:{gid}:{self.srqn:08x}:")
        raw = text.encode("ascii") + b"\x00"
        if len(raw) != KEY_MESSAGE_BYTES:
            raise ExchangeError("perftest keys", f"encoded to {len(raw)} bytes, not 108")
        return raw

    @classmethod
    def decode(cls, message: bytes) -> PerftestKeys:
        """Parse the 108-byte message the way ``ethernet_read_keys`` splits it:
        colon-separated hex fields; the GID as 16 one-byte fields."""
        text = message.split(b"\x00", 1)[0]
        try:
            fields = text.decode("ascii").split(":")
            lid, out_reads, qpn, psn, rkey, vaddr = (int(f, 16) for f in fields[:6])
            gid_bytes = bytes(int(f, 16) for f in fields[6:22])
            srqn = int(fields[22], 16)
        except (UnicodeDecodeError, ValueError, IndexError) as exc:
            raise ExchangeError("perftest keys", f"cannot parse {message!r}") from exc
        if len(gid_bytes) != 16:
            raise ExchangeError("perftest keys", f"GID has {len(gid_bytes)} bytes in {message!r}")
        return cls(lid=lid, out_reads=out_reads, qpn=qpn, psn=psn, rkey=rkey, vaddr=vaddr,
                   gid=ipaddress.IPv6Address(gid_bytes), srqn=srqn)


@dataclass(frozen=True, slots=True)
class BwReport:
    """``struct bw_report_data`` as ``xchg_bw_reports`` sends it (no per-port part).

    ``bw_peak``/``bw_avg`` are in the unit the run reports in (perftest's
    default: MiB/s); ``msg_rate_mpps`` in millions of messages per second."""

    size_bytes: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate_mpps: float


class PerftestChannel:
    """One perftest TCP connection, in the client or the server role."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 *, is_client: bool) -> None:
        self._reader = reader
        self._writer = writer
        self.is_client = is_client
        self.peer_version = ""

    @classmethod
    async def connect(cls, host: str, port: int = DEFAULT_PORT, *,
                      timeout_s: float = 30.0) -> PerftestChannel:
        """Connect as the client, retrying until the server listens."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                return cls(reader, writer, is_client=True)
            except OSError as exc:
                if loop.time() >= deadline:
                    raise ExchangeError("perftest connect", f"{host}:{port}: {exc}") from exc
                await asyncio.sleep(0.1)

    async def xchg(self, mine: bytes, step: str) -> bytes:
        """``ctx_xchg_data``: the client writes then reads; the server reads
        then writes. Both blobs have the same size."""
        if self.is_client:
            self._writer.write(mine)
            await self._writer.drain()
            return await self._read(len(mine), step)
        theirs = await self._read(len(mine), step)
        self._writer.write(mine)
        await self._writer.drain()
        return theirs

    async def _read(self, nbytes: int, step: str) -> bytes:
        try:
            return await self._reader.readexactly(nbytes)
        except asyncio.IncompleteReadError as exc:
            raise ExchangeError(
                step, f"peer closed after {len(exc.partial)} of {nbytes} bytes"
            ) from exc

    async def exchange_versions(self, version: str = PERFTEST_VERSION) -> str:
        raw = version.encode("ascii")[: VERSION_FIELD_BYTES - 1].ljust(VERSION_FIELD_BYTES, b"\0")
        theirs = (await self.xchg(raw, "perftest version")).split(b"\x00", 1)[0]
        self.peer_version = theirs.decode("ascii", "replace")
        try:
            peer = float(self.peer_version)
        except ValueError:
            raise ExchangeError("perftest version", f"unparseable {self.peer_version!r}") from None
        if peer < MIN_PEER_VERSION:
            raise ExchangeError(
                "perftest version", f"peer perftest {self.peer_version} is older than 5.70"
            )
        return self.peer_version

    async def exchange_sys_data(
        self, cycle_buffer_bytes: int = DEFAULT_CYCLE_BUFFER_BYTES,
        cache_line_bytes: int = DEFAULT_CACHE_LINE_BYTES,
    ) -> tuple[int, int]:
        """Returns the agreed (larger) cycle buffer and cache line sizes."""
        (rem_cycle,) = struct.unpack(
            ">i", await self.xchg(struct.pack(">i", cycle_buffer_bytes), "perftest cycle buffer")
        )
        (rem_line,) = struct.unpack(
            ">i", await self.xchg(struct.pack(">i", cache_line_bytes), "perftest cache line")
        )
        return max(rem_cycle, cycle_buffer_bytes), max(rem_line, cache_line_bytes)

    async def exchange_mtu(self, mtu_bytes: int) -> int:
        """Returns the agreed (smaller) path MTU in bytes."""
        mine = mtu_to_enum(mtu_bytes)
        raw = await self.xchg(b"%d\x00" % mine, "perftest mtu")
        try:
            theirs = int(raw.split(b"\x00", 1)[0])
        except ValueError:
            raise ExchangeError("perftest mtu", f"unparseable {raw!r}") from None
        if 1 <= theirs <= 5 and theirs < mine:
            return enum_to_mtu(theirs)
        return mtu_bytes

    async def hand_shake(self, mine: PerftestKeys) -> PerftestKeys:
        return PerftestKeys.decode(await self.xchg(mine.encode(), "perftest hand shake"))

    async def exchange_reports(self, mine: BwReport) -> BwReport:
        """``xchg_bw_reports`` with a peer of version >= 5.33 (64-bit iterations)."""
        fields = [
            struct.pack(">Q", mine.size_bytes),
            struct.pack(">Q", mine.iters),
            struct.pack(">d", mine.bw_peak),
            struct.pack(">d", mine.bw_avg),
            struct.pack(">d", mine.msg_rate_mpps),
        ]
        theirs = [await self.xchg(f, "perftest report") for f in fields]
        return BwReport(
            size_bytes=struct.unpack(">Q", theirs[0])[0],
            iters=struct.unpack(">Q", theirs[1])[0],
            bw_peak=struct.unpack(">d", theirs[2])[0],
            bw_avg=struct.unpack(">d", theirs[3])[0],
            msg_rate_mpps=struct.unpack(">d", theirs[4])[0],
        )

    async def close(self, mine: PerftestKeys) -> None:
        """``ctx_close_connection``: a last hand shake, then both write "done"."""
        await self.hand_shake(mine)
        self._writer.write(DONE_MESSAGE)
        try:
            await self._writer.drain()
            # The peer's "done" is not read by perftest either; take it if it comes.
            await asyncio.wait_for(self._reader.read(len(DONE_MESSAGE)), timeout=1.0)
        except (OSError, TimeoutError):
            pass
        finally:
            self._writer.close()

    def abort(self) -> None:
        self._writer.close()


class PerftestListener:
    """Accepts perftest clients (the server role)."""

    def __init__(self) -> None:
        self._accepted: asyncio.Queue[PerftestChannel] = asyncio.Queue()
        self._server: asyncio.Server | None = None

    async def listen(self, host: str | None, port: int = DEFAULT_PORT) -> None:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accepted.put(PerftestChannel(reader, writer, is_client=False))

        self._server = await asyncio.start_server(on_client, host, port, reuse_address=True)

    @property
    def port(self) -> int:
        if self._server is None:
            raise ExchangeError("perftest server", "not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def accept(self) -> PerftestChannel:
        return await self._accepted.get()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
