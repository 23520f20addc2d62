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
import random
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from netio.api.context import Context, Listener
from netio.api.endpoint import Endpoint, WorkRequest
from netio.api.handles import Pending
from netio.api.region import LocalSlice, Region, RemoteRegion
from netio.api.types import Access, Completion, QpType, WcStatus
from netio.backends.base import QpAddress, Transport
from netio.backends.soft import RxMode
from netio.errors import ExchangeError, OperationError
from netio.interop import backend as tool_backend
from netio.interop import oob
from netio.roce import LinkFaults
from netio.roce.verbs import MAX_MESSAGE_BYTES

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
                 *, is_client: bool, timeout_s: float = oob.DEFAULT_TIMEOUT_S) -> None:
        self._reader = reader
        self._writer = writer
        self.is_client = is_client
        self.timeout_s = timeout_s  # the deadline of every read and write
        self.peer_version = ""

    @property
    def local_ip(self) -> str:
        """This end's address of the connection (where a server's RoCE endpoint belongs)."""
        return str(self._writer.get_extra_info("sockname")[0])

    @classmethod
    async def connect(cls, host: str, port: int = DEFAULT_PORT, *,
                      timeout_s: float = oob.DEFAULT_TIMEOUT_S,
                      on_waiting: Callable[[str], None] | None = None) -> PerftestChannel:
        """Connect as the client, retrying until the server listens."""
        reader, writer = await oob.connect(host, port, timeout_s=timeout_s,
                                           step="perftest connect", on_waiting=on_waiting)
        return cls(reader, writer, is_client=True, timeout_s=timeout_s)

    async def xchg(self, mine: bytes, step: str) -> bytes:
        """``ctx_xchg_data``: the client writes then reads; the server reads
        then writes. Both blobs have the same size; each within the timeout."""
        if self.is_client:
            await oob.write(self._writer, mine, step, self.timeout_s)
            return await oob.read_exact(self._reader, len(mine), step, self.timeout_s)
        theirs = await oob.read_exact(self._reader, len(mine), step, self.timeout_s)
        await oob.write(self._writer, mine, step, self.timeout_s)
        return theirs

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
            await asyncio.wait_for(self._writer.drain(), self.timeout_s)
            # The peer's "done" is not read by perftest either; take it if it comes.
            await asyncio.wait_for(self._reader.read(len(DONE_MESSAGE)), timeout=1.0)
        except (OSError, TimeoutError):
            pass
        finally:
            self._writer.close()

    def abort(self) -> None:
        self._writer.close()


class PerftestListener(oob.Listener[PerftestChannel]):
    """Accepts perftest clients (the server role); ``timeout_s`` bounds each step of
    their exchanges."""

    def __init__(self, timeout_s: float = oob.DEFAULT_TIMEOUT_S) -> None:
        super().__init__(lambda reader, writer: PerftestChannel(
            reader, writer, is_client=False, timeout_s=timeout_s),
            "perftest server", DEFAULT_PORT, timeout_s)


# -- the tests ---------------------------------------------------------------------------

#: QP attributes perftest sets (``ctx_modify_qp_to_rtr/rts``: DEF_QP_TIME, 7, 7, MIN_RNR_TIMER).
QP_TIMEOUT = 14
QP_RETRY_CNT = 7
QP_RNR_RETRY = 7
QP_MIN_RNR_TIMER = 12
#: READ/atomic responder resources netio offers (its ``out_reads``).
NETIO_OUT_READS = 16
MIB = 1 << 20


class AtomicType(enum.StrEnum):
    FETCH_AND_ADD = "FETCH_AND_ADD"
    CMP_AND_SWAP = "CMP_AND_SWAP"


@dataclass(frozen=True, slots=True)
class PerftestConfig:
    """One perftest bandwidth run (``server`` None = the server role).

    The options mean what perftest's do (``-s``, ``-n``, ``-t`` tx depth,
    ``-r`` rx depth, ``-m`` MTU, ``-p`` port, ``-A``). ``mtu_bytes`` is what
    netio offers; the smaller of both sides' MTUs is used. ``timeout_s`` bounds
    every step: connecting, waiting for the client, each exchange message, and
    each wait for completions. ``backend`` is the netio backend; ``device`` and
    ``gid_index`` (perftest's ``-d``, ``-x``) choose the verbs device."""

    verb: PerftestVerb
    server: str | None = None
    port: int = DEFAULT_PORT
    local_ip: ipaddress.IPv4Address | None = None
    size_bytes: int | None = None  # None: perftest's default (65536; atomics 8)
    iters: int = 1000
    tx_depth: int = 128
    rx_depth: int = 128
    mtu_bytes: int = 4096
    atomic_type: AtomicType = AtomicType.FETCH_AND_ADD
    timeout_s: float = 60.0
    rx_mode: RxMode = RxMode.AUTO
    faults: LinkFaults | None = None
    fault_seed: int = 0
    backend: str = "soft"
    device: str | None = None
    ib_port: int | None = None
    gid_index: int | None = None

    def __post_init__(self) -> None:
        step = "perftest options"
        tool_backend.check_backend(step, self.backend)
        oob.check_options(step, client=self.server is not None, port=self.port,
                          timeout_s=self.timeout_s)
        # perftest sends the iterations as a 64-bit field of its report
        oob.check_range(step, "iterations (-n)", self.iters, 1, (1 << 63) - 1)
        oob.check_range(step, "tx depth (-t)", self.tx_depth, 1, oob.MAX_QUEUE_DEPTH)
        oob.check_range(step, "rx depth (-r)", self.rx_depth, 1, oob.MAX_QUEUE_DEPTH)
        if self.size_bytes is not None:
            oob.check_range(step, "message size (-s)", self.size_bytes, 1, MAX_MESSAGE_BYTES)
        if self.verb is PerftestVerb.ATOMIC and self.size_bytes not in (None, ATOMIC_SIZE_BYTES):
            raise ExchangeError("perftest options", "atomic operations are 8 bytes")
        mtu_to_enum(self.mtu_bytes)

    @property
    def message_bytes(self) -> int:
        if self.size_bytes is not None:
            return self.size_bytes
        return ATOMIC_SIZE_BYTES if self.verb is PerftestVerb.ATOMIC else 65536


@dataclass(frozen=True, slots=True)
class PerftestResult:
    """The outcome on netio's side; ``report`` is netio's own measurement
    (zeros on a WRITE/READ/ATOMIC server, which measures nothing, as perftest's),
    ``peer_report`` what the peer sent (WRITE/READ/ATOMIC only), ``counters`` the
    endpoint's (:meth:`netio.Endpoint.counters`)."""

    verb: PerftestVerb
    is_client: bool
    mine: PerftestKeys
    theirs: PerftestKeys
    mtu_bytes: int
    peer_version: str
    report: BwReport
    peer_report: BwReport | None
    counters: dict[str, int] = field(default_factory=dict)


def remote_offset(index: int, size_bytes: int, cycle_buffer_bytes: int, cache_line_bytes: int,
                  verb: PerftestVerb) -> int:
    """Offset from the peer's address of the ``index``-th operation, as
    ``increase_rem_addr`` walks it: steps of the size rounded up to a cache
    line, wrapping at the cycle buffer, when the message is at most half of it
    (always for atomics)."""
    step = -(-size_bytes // cache_line_bytes) * cache_line_bytes
    if verb is not PerftestVerb.ATOMIC and size_bytes > cycle_buffer_bytes // 2:
        return 0
    slots = max(1, cycle_buffer_bytes // step)
    return (index % slots) * step


def _ipv4_of(gid: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    mapped = gid.ipv4_mapped
    if mapped is None:
        raise ExchangeError("perftest keys", f"peer GID {gid} is not IPv4-mapped (use -x with "
                                             "the RoCEv2 IPv4 GID index; a netio peer with "
                                             "--backend tcp sends none)")
    return mapped


async def run_perftest(config: PerftestConfig, *, listener: PerftestListener | None = None,
                       on_event: Callable[[str, object], None] | None = None,
                       ) -> PerftestResult:
    """Run one perftest bandwidth test against perftest (or another netio).

    As the server, ``listener`` (listening already) may be given; otherwise one
    is opened on ``config.port``; either way it is closed once the client is
    accepted, as perftest serves one client. ``on_event(kind, value)`` reports
    progress: ``("waiting", text)`` when a client's first connection attempt
    fails and it keeps retrying, ``("local"|"remote", keys)``, ``("mtu",
    bytes)``, ``("report"|"peer_report", BwReport)``."""
    tool_port = config.port
    if config.server is None:
        if listener is None:
            listener = PerftestListener(config.timeout_s)
            await listener.listen(None, config.port)
        try:
            tool_port = listener.port
            channel = await listener.accept(config.timeout_s)
        finally:
            await listener.close()
        channel.timeout_s = config.timeout_s
        local_ip = config.local_ip or ipaddress.IPv4Address(channel.local_ip)
    else:
        local_ip = config.local_ip or oob.route_source_ip(config.server, config.port,
                                                          "perftest route")
        waiting = None if on_event is None else (lambda text: on_event("waiting", text))
        channel = await PerftestChannel.connect(config.server, config.port,
                                                timeout_s=config.timeout_s, on_waiting=waiting)
    try:
        return await _PerftestRun(config, channel, local_ip, tool_port, on_event).run()
    except BaseException:
        channel.abort()
        raise


class _PerftestRun:
    def __init__(self, config: PerftestConfig, channel: PerftestChannel,
                 local_ip: ipaddress.IPv4Address, tool_port: int,
                 on_event: Callable[[str, object], None] | None) -> None:
        self.config = config
        self.channel = channel
        self.local_ip = local_ip
        self.tool_port = tool_port
        self.on_event = on_event or (lambda kind, value: None)
        self.verb = config.verb
        self.size = config.message_bytes
        self.ep: Endpoint | None = None
        self.recvs: deque[tuple[int, Pending[Completion]]] = deque()
        self.inflight: deque[tuple[Pending[list[Completion]], list[WorkRequest]]] = deque()

    async def run(self) -> PerftestResult:
        cfg, ch = self.config, self.channel
        peer_version = await ch.exchange_versions()
        cycle_buffer, cache_line = await ch.exchange_sys_data()
        mtu = await ch.exchange_mtu(cfg.mtu_bytes)
        self.on_event("mtu", mtu)
        ctx = tool_backend.open_context(
            cfg.backend, self.local_ip, timeout_s=cfg.timeout_s, rx_mode=cfg.rx_mode,
            faults=cfg.faults, fault_seed=cfg.fault_seed, device=cfg.device,
            port=cfg.ib_port, gid_index=cfg.gid_index, mtu=mtu, ack_timeout=QP_TIMEOUT,
            retry_count=QP_RETRY_CNT, rnr_retry=QP_RNR_RETRY, min_rnr_timer=QP_MIN_RNR_TIMER,
            max_rd_atomic=NETIO_OUT_READS)
        data_listener: Listener | None = None
        try:
            if ctx.transport == Transport.TCP and not ch.is_client:
                # tcp: the data connection is netio's own, on the tool's port, listened
                # for before the client can learn our keys
                data_listener = await ctx.listen(f"0.0.0.0:{self.tool_port}")
            return await self._run(ctx, peer_version, cycle_buffer, cache_line, mtu,
                                   data_listener)
        finally:
            tool_backend.discard([p for _, p in self.recvs])
            tool_backend.discard([p for p, _ in self.inflight])
            if data_listener is not None:
                await data_listener.aclose()
            await ctx.aclose()

    def _endpoint(self) -> Endpoint:
        if self.ep is None:
            raise ExchangeError("perftest", "the endpoint is not set up")
        return self.ep

    async def _run(self, ctx: Context, peer_version: str, cycle_buffer: int, cache_line: int,
                   mtu: int, data_listener: Listener | None) -> PerftestResult:
        cfg, ch = self.config, self.channel
        size = self.size
        span = buffer_span_bytes(size, cycle_buffer)
        slot = -(-size // cache_line) * cache_line
        is_client = ch.is_client
        tcp = ctx.transport == Transport.TCP
        if self.verb is PerftestVerb.SEND and not is_client:
            depth = min(cfg.rx_depth, cfg.iters)
            buf = bytearray(slot * depth)
        else:
            buf = bytearray(span + slot)
        region = ctx.register(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE
                              | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
        out_reads = NETIO_OUT_READS if self.verb in (PerftestVerb.READ,
                                                     PerftestVerb.ATOMIC) else 1
        if tcp:
            # no RoCE address: a zero GID tells a RoCE peer apart (it sends its own)
            mine = PerftestKeys(lid=0, out_reads=out_reads, qpn=0, psn=0, rkey=region.rkey,
                                vaddr=region.addr, gid=ipaddress.IPv6Address("::"))
        else:
            self.ep = await ctx.endpoint(QpType.RC, peer=str(self.local_ip),
                                         psn=random.getrandbits(24))
            address = self.ep.address
            mine = PerftestKeys(lid=0, out_reads=out_reads, qpn=address.qpn, psn=address.psn,
                                rkey=region.rkey, vaddr=region.addr,
                                gid=ipaddress.IPv6Address(address.gid))
        theirs = await ch.hand_shake(mine)
        self.on_event("local", mine)
        if tcp:
            if theirs.gid != ipaddress.IPv6Address("::"):
                raise tool_backend.tcp_peer_error("perftest keys", theirs.gid)
            if data_listener is not None:
                self.ep = await data_listener.accept(cfg.timeout_s)
            elif cfg.server is not None:
                self.ep = await tool_backend.tcp_data_connect(
                    ctx, cfg.server, cfg.port, cfg.timeout_s, "perftest tcp connect")
        else:
            if cfg.backend == "soft":
                _ipv4_of(theirs.gid)
            remote = QpAddress(Transport.ROCE, tool_backend.gid_text(theirs.gid), theirs.qpn,
                               theirs.psn, mtu)
            await self._endpoint().connect_to(remote, mtu_bytes=mtu)
        recvs = self.recvs
        if self.verb is PerftestVerb.SEND:
            await ch.hand_shake(mine)  # after ctx_connect
            theirs = await ch.hand_shake(mine)  # the "remote" keys print
            if not is_client:
                for i in range(min(cfg.rx_depth, cfg.iters)):
                    recvs.append((i, self._endpoint().recv(region[i * slot:i * slot + size])))
            await ch.hand_shake(mine)  # receives are posted
        else:
            theirs = await ch.hand_shake(mine)  # the "remote" keys print
            await ch.hand_shake(mine)  # after RTR
        self.on_event("remote", theirs)

        peer_report: BwReport | None = None
        if is_client:
            remote_region = RemoteRegion(theirs.vaddr, theirs.rkey, span,
                                         Transport.TCP if tcp else Transport.ROCE)
            report = await self._client_loop(region, remote_region, theirs, cycle_buffer,
                                             cache_line)
            self.on_event("report", report)
            if self.verb is not PerftestVerb.SEND:
                await ch.hand_shake(mine)
                peer_report = await ch.exchange_reports(report)
        elif self.verb is PerftestVerb.SEND:
            report = await self._send_server_loop(region, slot, recvs)
            self.on_event("report", report)
        else:
            # perftest's WRITE/READ/ATOMIC server only waits, then shows the client's report
            await ch.hand_shake(mine)
            report = BwReport(size, cfg.iters, 0.0, 0.0, 0.0)
            peer_report = await ch.exchange_reports(report)
            self.on_event("peer_report", peer_report)
        await ch.close(mine)
        return PerftestResult(self.verb, is_client, mine, theirs, mtu, peer_version, report,
                              peer_report, self._endpoint().counters())

    def _stalled(self, what: str, done: int) -> ExchangeError:
        return ExchangeError(
            "perftest", f"no completion for {self.config.timeout_s:g} s after {done} {what} "
            f"({tool_backend.counters_text(self._endpoint().counters())})")

    def _failed(self, exc: OperationError, what: str, done: int) -> ExchangeError:
        hint = f": {exc.hint}" if exc.hint else ""
        return ExchangeError("perftest", f"completion with error {exc.status_name} "
                                         f"({exc.status}) after {done} {what}{hint}")

    def _report(self, iters: int, duration_s: float) -> BwReport:
        if duration_s <= 0:
            return BwReport(self.size, iters, 0.0, 0.0, 0.0)
        bw = self.size * iters / duration_s / MIB
        return BwReport(self.size, iters, bw, bw, iters / duration_s / 1e6)

    async def _send_server_loop(self, region: Region, slot: int,
                                recvs: deque[tuple[int, Pending[Completion]]]) -> BwReport:
        """Receives complete in the order they were posted; each slot is posted again
        until ``iters`` receives in all."""
        iters = self.config.iters
        rcnt = 0
        posted = len(recvs)
        loop = asyncio.get_running_loop()
        start: float | None = None
        ep = self._endpoint()
        while rcnt < iters:
            index, pending = recvs.popleft()
            try:
                wc = await asyncio.wait_for(pending, self.config.timeout_s)
            except TimeoutError:
                raise self._stalled("receives", rcnt) from None
            except OperationError as exc:
                raise self._failed(exc, "receives", rcnt) from None
            if start is None:
                start = loop.time()
            if wc.byte_len != self.size:
                raise ExchangeError("perftest", f"received {wc.byte_len} bytes, expected "
                                                f"{self.size} (both sides need the same -s)")
            rcnt += 1
            if posted < iters:
                recvs.append((index, ep.recv(region[index * slot:index * slot + self.size])))
                posted += 1
        return self._report(iters, loop.time() - (start if start is not None else loop.time()))

    def _request(self, index: int, local: LocalSlice, remote: RemoteRegion, cycle_buffer: int,
                 cache_line: int) -> WorkRequest:
        """The ``index``-th request: unsignaled (a batch's last one is signaled, as
        perftest moderates its completions)."""
        verb, size = self.verb, self.size
        if verb is PerftestVerb.SEND:
            return WorkRequest.send(local, signaled=False)
        offset = remote_offset(index, size, cycle_buffer, cache_line, verb)
        target = remote[offset:offset + size]
        if verb is PerftestVerb.WRITE:
            return WorkRequest.write(local, target, signaled=False)
        if verb is PerftestVerb.READ:
            return WorkRequest.read(local, target, signaled=False)
        if self.config.atomic_type is AtomicType.FETCH_AND_ADD:
            return WorkRequest.fetch_add(local, target, ATOMIC_ADD_VALUE)
        return WorkRequest.compare_swap(local, target, 0, ATOMIC_SWAP_VALUE)

    async def _client_loop(self, region: Region, remote: RemoteRegion, theirs: PerftestKeys,
                           cycle_buffer: int, cache_line: int) -> BwReport:
        """Keep ``tx_depth`` requests in flight, posted in batches of half of it (for
        READ and atomics at most the peer's ``out_reads``, its responder resources)."""
        cfg = self.config
        iters = cfg.iters
        window = cfg.tx_depth
        if self.verb in (PerftestVerb.READ, PerftestVerb.ATOMIC):
            window = max(1, min(window, theirs.out_reads))
        chunk = max(1, window // 2)
        local = region[0:self.size]
        ep = self._endpoint()
        inflight = self.inflight
        outstanding = scnt = ccnt = 0
        loop = asyncio.get_running_loop()
        start = loop.time()
        while ccnt < iters:
            while scnt < iters and outstanding < window:
                n = min(chunk, iters - scnt, window - outstanding)
                batch = [self._request(scnt + k, local, remote, cycle_buffer, cache_line)
                         for k in range(n)]
                inflight.append((ep.post(batch), batch))
                scnt += n
                outstanding += n
            pending, batch = inflight.popleft()
            try:
                completions = await asyncio.wait_for(pending, cfg.timeout_s)
            except TimeoutError:
                raise self._stalled("operations", ccnt) from None
            errors = [(c, r) for r, c in zip(batch, completions, strict=True)
                      if c.status is not WcStatus.SUCCESS]
            if errors:  # the first that is not a flush is the cause; flushes follow it
                errors.sort(key=lambda e: e[0].status is WcStatus.WR_FLUSH_ERR)
                wc, request = errors[0]
                raise self._failed(ep.error_for(wc, request), "operations", ccnt)
            ccnt += len(batch)
            outstanding -= len(batch)
        return self._report(iters, loop.time() - start)
