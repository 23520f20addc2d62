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
import dataclasses
import ipaddress
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from netio.backends.soft import DriverStats, RxMode, SoftRoceDriver
from netio.errors import ExchangeError
from netio.interop import tcp
from netio.roce import (
    Access,
    LinkFaults,
    QpAttributes,
    QpState,
    QpType,
    RecvWr,
    SendWr,
    UdAddress,
    WcStatus,
    WrOpcode,
)
from netio.roce.verbs import MAX_MESSAGE_BYTES

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
    local_host: str | None = None, on_waiting: Callable[[str], None] | None = None,
) -> PingpongAddress:
    """The client side (``pp_client_exch_dest``): send ours, read theirs, send "done".

    Connection attempts are retried until ``connect_timeout_s``, so the client
    may start before the server listens (``on_waiting`` hears about it once)."""
    reader, writer = await tcp.connect(host, port, timeout_s=connect_timeout_s,
                                       step="pingpong connect", local_host=local_host,
                                       on_waiting=on_waiting)
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


class PingpongListener(tcp.Listener["PingpongConnection"]):
    """Accepts pingpong clients (the server role; the tools listen on every address)."""

    def __init__(self) -> None:
        super().__init__(PingpongConnection, "pingpong server", DEFAULT_PORT)


class PingpongConnection:
    """One accepted client connection (``pp_server_exch_dest``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @property
    def local_ip(self) -> str:
        """The address the client reached us at (where the RoCE endpoint belongs)."""
        return str(self._writer.get_extra_info("sockname")[0])

    async def exchange(
        self, mine: PingpongAddress, connect: Callable[[PingpongAddress], Awaitable[None]]
    ) -> PingpongAddress:
        """Read the client's address, await ``connect(theirs)`` (QP to RTR/RTS),
        answer with ``mine`` and read the client's "done"."""
        try:
            theirs = PingpongAddress.decode(
                await _read_exact(self._reader, ADDRESS_MESSAGE_BYTES, "pingpong client address")
            )
            await connect(theirs)
            self._writer.write(mine.encode())
            await self._writer.drain()
            done = await self._reader.read(ADDRESS_MESSAGE_BYTES)
            if done != DONE_MESSAGE:
                raise ExchangeError("pingpong done", f"expected {DONE_MESSAGE!r}, got {done!r}")
        finally:
            self._writer.close()
        return theirs


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


# -- the test loop -----------------------------------------------------------------------

RECV_WRID = 1  # PINGPONG_RECV_WRID
SEND_WRID = 2  # PINGPONG_SEND_WRID
#: RC attributes the tools set in ``pp_connect_ctx`` (timeout 14, retries 7 = infinite RNR).
RC_TIMEOUT = 14
RC_RETRY_CNT = 7
RC_RNR_RETRY = 7
RC_MIN_RNR_TIMER = 12


@dataclass(frozen=True, slots=True)
class PingpongConfig:
    """One run of a pingpong test (the tools' options; ``server`` None = server role).

    ``local_ip``: the RoCE address (GID ``::ffff:local_ip``); None takes, as a
    server, the address the client connected to, and as a client the source
    address of the route to the server. ``timeout_s``: give up when no
    completion arrives for this long (the tools wait for ever), and a client
    retries connecting to its server for this long."""

    transport: QpType
    server: str | None = None
    port: int = DEFAULT_PORT
    local_ip: ipaddress.IPv4Address | None = None
    size_bytes: int = 4096
    iters: int = 1000
    mtu_bytes: int = 1024
    rx_depth: int = 500
    chk: bool = False
    timeout_s: float = 60.0
    rx_mode: RxMode = RxMode.AUTO
    faults: LinkFaults | None = None
    fault_seed: int = 0
    psn: int | None = None

    def __post_init__(self) -> None:
        step = "pingpong options"
        tcp.check_options(step, client=self.server is not None, port=self.port,
                          timeout_s=self.timeout_s)
        tcp.check_range(step, "message size (-s)", self.size_bytes, 1, MAX_MESSAGE_BYTES)
        tcp.check_range(step, "iterations (-n)", self.iters, 1, tcp.MAX_INT_ITERS)
        tcp.check_range(step, "rx depth (-r)", self.rx_depth, 2, tcp.MAX_QUEUE_DEPTH)
        if self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise ExchangeError("pingpong options", f"MTU {self.mtu_bytes} is not an IB MTU")
        if self.transport is QpType.UD and self.size_bytes > self.mtu_bytes:
            raise ExchangeError(
                "pingpong options",
                f"UD message of {self.size_bytes} bytes is larger than the MTU {self.mtu_bytes}",
            )


@dataclass(frozen=True, slots=True)
class PingpongResult:
    """What the tools print at the end (``bytes in seconds``, ``usec/iter``)."""

    mine: PingpongAddress
    theirs: PingpongAddress
    iters: int
    size_bytes: int
    duration_s: float
    checked_messages: int
    driver: DriverStats

    @property
    def bytes_total(self) -> int:
        return self.size_bytes * self.iters * 2

    @property
    def mbit_per_s(self) -> float:
        return self.bytes_total * 8 / self.duration_s / 1e6 if self.duration_s > 0 else 0.0

    @property
    def usec_per_iter(self) -> float:
        return self.duration_s * 1e6 / self.iters


def _gid_ipv4(gid: ipaddress.IPv6Address, step: str) -> ipaddress.IPv4Address:
    mapped = gid.ipv4_mapped
    if mapped is None:
        raise ExchangeError(step, f"peer GID {gid} is not an IPv4-mapped RoCEv2 GID (use -g)")
    return mapped


async def run_pingpong(config: PingpongConfig, *,
                       listener: PingpongListener | None = None,
                       on_address: Callable[[str, PingpongAddress], None] | None = None,
                       on_waiting: Callable[[str], None] | None = None,
                       ) -> PingpongResult:
    """Run one pingpong test against a libibverbs example (or another netio).

    As the server, ``listener`` (listening already) may be given; otherwise
    one is opened on ``config.port``. Either way it is closed once the client
    is accepted: the tools serve one client. ``on_address("local"|"remote",
    addr)`` is called as the tools print their addresses, ``on_waiting(text)``
    when a client's first connection attempt fails and it keeps retrying."""
    conn: PingpongConnection | None = None
    if config.server is None:
        if listener is None:
            listener = PingpongListener()
            await listener.listen(None, config.port)
        try:
            conn = await listener.accept()
        finally:
            await listener.close()
        local_ip = config.local_ip or ipaddress.IPv4Address(conn.local_ip)
    else:
        local_ip = config.local_ip or tcp.route_source_ip(config.server, config.port,
                                                          "pingpong route")

    driver = await SoftRoceDriver.open(local_ip, rx_mode=config.rx_mode, faults=config.faults,
                                       fault_seed=config.fault_seed)
    try:
        return await _run(config, driver, conn, on_address, on_waiting)
    finally:
        await driver.close()


async def _run(config: PingpongConfig, driver: SoftRoceDriver,
               conn: PingpongConnection | None,
               on_address: Callable[[str, PingpongAddress], None] | None,
               on_waiting: Callable[[str], None] | None) -> PingpongResult:
    engine = driver.engine
    ud = config.transport is QpType.UD
    data_offset = UD_GRH_BYTES if ud else 0
    size = config.size_bytes
    buf = bytearray([FILL_BYTE]) * (size + data_offset)
    pd = engine.alloc_pd()
    cq = engine.create_cq()
    qp = engine.create_qp(pd, config.transport, cq, cq)
    mr = pd.register(buf, Access.LOCAL_WRITE)
    recv_wr = RecvWr(RECV_WRID, (mr.sge(0, size + data_offset),))
    send_sge = mr.sge(data_offset, size)
    psn = config.psn if config.psn is not None else random.getrandbits(24)
    base = QpAttributes(
        path_mtu_bytes=config.mtu_bytes, timeout=RC_TIMEOUT, retry_cnt=RC_RETRY_CNT,
        rnr_retry=RC_RNR_RETRY, min_rnr_timer=RC_MIN_RNR_TIMER, max_rd_atomic=1,
        max_dest_rd_atomic=1, qkey=UD_PINGPONG_QKEY if ud else 0, sq_psn=psn,
        access=Access.NONE,
    )
    qp.modify(QpState.INIT, base)
    if ud:  # pp_init_ctx/pp_connect_ctx: a UD QP needs no peer to reach RTS
        qp.modify(QpState.RTR)
        qp.modify(QpState.RTS)
    for _ in range(config.rx_depth):
        qp.post_recv(recv_wr)
    routs = config.rx_depth

    local_ip = engine.local_ip
    mine = PingpongAddress(lid=0, qpn=qp.qp_num, psn=psn,
                           gid=ipaddress.IPv6Address(f"::ffff:{local_ip}"))
    if on_address is not None:
        on_address("local", mine)
    ud_dest: UdAddress | None = None

    async def connect(theirs: PingpongAddress) -> None:
        nonlocal ud_dest
        remote_ip = _gid_ipv4(theirs.gid, "pingpong connect")
        if ud:
            ud_dest = UdAddress(remote_ip, theirs.qpn, UD_PINGPONG_QKEY)
            return
        attrs = dataclasses.replace(base, dest_qp_num=theirs.qpn, rq_psn=theirs.psn,
                                    remote_ip=remote_ip)
        qp.modify(QpState.RTR, attrs)
        qp.modify(QpState.RTS)

    if conn is not None:
        theirs = await conn.exchange(mine, connect)
    else:
        if config.server is None:
            raise ExchangeError("pingpong", "a client needs a server address")
        theirs = await client_exchange(config.server, config.port, mine,
                                       connect_timeout_s=config.timeout_s,
                                       on_waiting=on_waiting)
        await connect(theirs)
    if on_address is not None:
        on_address("remote", theirs)

    def post_send() -> None:
        wr = SendWr(SEND_WRID, WrOpcode.SEND, (send_sge,), ud=ud_dest)
        driver.post_send(qp, wr)

    expected = chk_pattern(size) if config.chk else None
    is_client = config.server is not None
    pending = RECV_WRID
    if is_client:
        if expected is not None:
            buf[data_offset : data_offset + size] = expected
        post_send()
        pending |= SEND_WRID
    scnt = rcnt = checked = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    iters = config.iters
    while rcnt < iters or scnt < iters:
        try:
            completions = await driver.wait_cq(cq, 2, timeout_s=config.timeout_s)
        except TimeoutError:
            hint = "" if not ud and config.transport is not QpType.UC else (
                "; UC and UD do not retransmit, so one lost message stalls the test "
                "(as it does the tools)")
            raise ExchangeError(
                "pingpong", f"no completion for {config.timeout_s:g} s after {scnt} sends and "
                f"{rcnt} receives{hint} ({engine.stats}, {driver.stats})") from None
        for wc in completions:
            if wc.status is not WcStatus.SUCCESS:
                raise ExchangeError(
                    "pingpong", f"failed status {wc.status.name} ({int(wc.status)}) for wr_id "
                    f"{wc.wr_id} after {scnt} sends and {rcnt} receives")
            if wc.wr_id == SEND_WRID:
                scnt += 1
            elif wc.wr_id == RECV_WRID:
                if wc.byte_len != size + data_offset:
                    raise ExchangeError(
                        "pingpong", f"received {wc.byte_len} bytes, expected "
                        f"{size + data_offset} (both sides must use the same -s)")
                if expected is not None:
                    bad = first_mismatch(buf[data_offset:], expected)
                    if bad is not None:
                        raise ExchangeError(
                            "pingpong --chk", f"message {rcnt + 1}: byte {bad} is "
                            f"{buf[data_offset + bad]:#04x}, expected {expected[bad]:#04x}")
                    checked += 1
                routs -= 1
                if routs <= 1:
                    for _ in range(config.rx_depth - routs):
                        qp.post_recv(recv_wr)
                    routs = config.rx_depth
                rcnt += 1
            else:
                raise ExchangeError("pingpong", f"completion for unknown wr_id {wc.wr_id}")
            pending &= ~wc.wr_id
            if scnt < iters and not pending:
                post_send()
                pending = RECV_WRID | SEND_WRID
    duration_s = loop.time() - start
    return PingpongResult(mine=mine, theirs=theirs, iters=iters, size_bytes=size,
                          duration_s=duration_s, checked_messages=checked, driver=driver.stats)
