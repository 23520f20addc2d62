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
import random
import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from netio.api.context import Context, Listener
from netio.api.endpoint import Endpoint
from netio.api.handles import Pending
from netio.api.region import LocalSlice
from netio.api.types import Access, Completion, QpType
from netio.backends.base import QpAddress, Transport, UdDest
from netio.backends.soft import RxMode
from netio.errors import ExchangeError, FlushedError, OperationError
from netio.interop import backend as tool_backend
from netio.interop import oob
from netio.roce import LinkFaults
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


async def client_exchange(
    host: str, port: int, mine: PingpongAddress, *, timeout_s: float = oob.DEFAULT_TIMEOUT_S,
    local_host: str | None = None, on_waiting: Callable[[str], None] | None = None,
) -> PingpongAddress:
    """The client side (``pp_client_exch_dest``): send ours, read theirs, send "done".

    Connection attempts are retried until ``timeout_s``, so the client may start
    before the server listens (``on_waiting`` hears about it once); every later step
    must also finish within ``timeout_s``."""
    reader, writer = await oob.connect(host, port, timeout_s=timeout_s,
                                       step="pingpong connect", local_host=local_host,
                                       on_waiting=on_waiting)
    try:
        await oob.write(writer, mine.encode(), "pingpong client address", timeout_s)
        theirs = PingpongAddress.decode(await oob.read_exact(
            reader, ADDRESS_MESSAGE_BYTES, "pingpong server address", timeout_s))
        await oob.write(writer, DONE_MESSAGE, "pingpong done", timeout_s)
    finally:
        writer.close()
    return theirs


class PingpongListener(oob.Listener["PingpongConnection"]):
    """Accepts pingpong clients (the server role; the tools listen on every address)."""

    def __init__(self, timeout_s: float = oob.DEFAULT_TIMEOUT_S) -> None:
        super().__init__(PingpongConnection, "pingpong server", DEFAULT_PORT, timeout_s)


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
        self, mine: PingpongAddress, connect: Callable[[PingpongAddress], Awaitable[None]],
        timeout_s: float = oob.DEFAULT_TIMEOUT_S,
    ) -> PingpongAddress:
        """Read the client's address, await ``connect(theirs)`` (QP to RTR/RTS),
        answer with ``mine`` and read the client's "done"; each step within ``timeout_s``."""
        try:
            theirs = PingpongAddress.decode(await oob.read_exact(
                self._reader, ADDRESS_MESSAGE_BYTES, "pingpong client address", timeout_s))
            await connect(theirs)
            await oob.write(self._writer, mine.encode(), "pingpong server address", timeout_s)
            done = await oob.read_exact(self._reader, len(DONE_MESSAGE), "pingpong done",
                                        timeout_s)
            if done != DONE_MESSAGE:
                raise ExchangeError("pingpong done", f"expected {DONE_MESSAGE!r}, got {done!r}")
        finally:
            self._writer.close()
        return theirs

    def abort(self) -> None:
        self._writer.close()


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
    address of the route to the server. ``timeout_s`` bounds every step: a client
    retries connecting to its server for that long, a server waits that long for
    its client, each message of the exchange must come within it, and the test
    gives up when no completion arrives for that long (the tools wait for ever).
    ``backend``: the netio backend (:data:`netio.interop.backend.TOOL_BACKENDS`);
    ``device``/``ib_port``/``gid_index`` (the tools' ``-d``/``-i``/``-g``) choose
    the verbs device; ``rx_mode``/``faults``/``fault_seed`` tune the soft one."""

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
    backend: str = "soft"
    device: str | None = None
    ib_port: int | None = None
    gid_index: int | None = None

    def __post_init__(self) -> None:
        step = "pingpong options"
        oob.check_options(step, client=self.server is not None, port=self.port,
                          timeout_s=self.timeout_s)
        oob.check_range(step, "message size (-s)", self.size_bytes, 1, MAX_MESSAGE_BYTES)
        oob.check_range(step, "iterations (-n)", self.iters, 1, oob.MAX_INT_ITERS)
        oob.check_range(step, "rx depth (-r)", self.rx_depth, 2, oob.MAX_QUEUE_DEPTH)
        tool_backend.check_backend(step, self.backend)
        if self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise ExchangeError("pingpong options", f"MTU {self.mtu_bytes} is not an IB MTU")
        if self.transport is QpType.UD and self.size_bytes > self.mtu_bytes:
            raise ExchangeError(
                "pingpong options",
                f"UD message of {self.size_bytes} bytes is larger than the MTU {self.mtu_bytes}",
            )
        if self.backend == "tcp" and self.transport is not QpType.RC:
            raise ExchangeError("pingpong options", "--backend tcp offers RC only (--rc)")


@dataclass(frozen=True, slots=True)
class PingpongResult:
    """What the tools print at the end (``bytes in seconds``, ``usec/iter``);
    ``counters`` are the endpoint's (:meth:`netio.Endpoint.counters`)."""

    mine: PingpongAddress
    theirs: PingpongAddress
    iters: int
    size_bytes: int
    duration_s: float
    checked_messages: int
    counters: dict[str, int] = field(default_factory=dict)

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
        raise ExchangeError(step, f"peer GID {gid} is not an IPv4-mapped RoCEv2 GID (use -g "
                                  "with the tools; a netio peer with --backend tcp sends none)")
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
    tool_port = config.port
    if config.server is None:
        if listener is None:
            listener = PingpongListener()
            await listener.listen(None, config.port)
        try:
            tool_port = listener.port
            conn = await listener.accept(config.timeout_s)
        finally:
            await listener.close()
        local_ip = config.local_ip or ipaddress.IPv4Address(conn.local_ip)
    else:
        local_ip = config.local_ip or oob.route_source_ip(config.server, config.port,
                                                          "pingpong route")
    try:
        ud = config.transport is QpType.UD
        ctx = tool_backend.open_context(
            config.backend, local_ip, timeout_s=config.timeout_s, rx_mode=config.rx_mode,
            faults=config.faults, fault_seed=config.fault_seed, device=config.device,
            port=config.ib_port, gid_index=config.gid_index, mtu=config.mtu_bytes,
            ack_timeout=RC_TIMEOUT, retry_count=RC_RETRY_CNT, rnr_retry=RC_RNR_RETRY,
            min_rnr_timer=RC_MIN_RNR_TIMER, max_rd_atomic=1,
            qkey=UD_PINGPONG_QKEY if ud else 0, qp_access=Access.NONE)
    except BaseException:
        if conn is not None:
            conn.abort()
        raise
    try:
        return await _Pingpong(config, ctx, local_ip, tool_port).run(conn, on_address,
                                                                     on_waiting)
    finally:
        if conn is not None:
            conn.abort()
        await ctx.aclose()


class _Pingpong:
    """One run on an open context: the exchange, then the test loop."""

    def __init__(self, config: PingpongConfig, ctx: Context, local_ip: ipaddress.IPv4Address,
                 tool_port: int) -> None:
        self.config = config
        self.ctx = ctx
        self.local_ip = local_ip
        self.tool_port = tool_port
        self.ud = config.transport is QpType.UD
        self.data_offset = UD_GRH_BYTES if self.ud else 0
        size = config.size_bytes
        self.buf = bytearray([FILL_BYTE]) * (size + self.data_offset)
        self.region = ctx.register(self.buf, Access.LOCAL_WRITE)
        self.send_slice: LocalSlice = self.region[self.data_offset:self.data_offset + size]
        self.ep: Endpoint | None = None
        self.ud_dest: UdDest | None = None
        self.recvs: deque[Pending[Completion]] = deque()
        self.send: Pending[Completion] | None = None
        self.tcp = ctx.transport == Transport.TCP

    async def run(self, conn: PingpongConnection | None,
                  on_address: Callable[[str, PingpongAddress], None] | None,
                  on_waiting: Callable[[str], None] | None) -> PingpongResult:
        cfg = self.config
        psn = cfg.psn if cfg.psn is not None else random.getrandbits(24)
        data_listener = None
        if self.tcp:
            # tcp: no RoCE address to exchange (the tools' exchange still runs, with a
            # zero GID, so that a kernel tool is told apart); the data connection is
            # netio's own, on the same port, listened for before the server answers.
            mine = PingpongAddress(lid=0, qpn=0, psn=0, gid=ipaddress.IPv6Address("::"))
            if conn is not None:
                data_listener = await self.ctx.listen(f"0.0.0.0:{self.tool_port}")
        else:
            self.ep = await self.ctx.endpoint(cfg.transport, peer=str(self.local_ip), psn=psn)
            address = self.ep.address
            mine = PingpongAddress(lid=0, qpn=address.qpn, psn=address.psn,
                                   gid=ipaddress.IPv6Address(address.gid))
            if self.ud:  # pp_init_ctx: a UD QP is ready at once; receives go first
                self._post_receives(cfg.rx_depth)
        if on_address is not None:
            on_address("local", mine)
        try:
            return await self._exchange_and_loop(conn, mine, data_listener, on_address,
                                                 on_waiting)
        finally:
            tool_backend.discard([*self.recvs, *([self.send] if self.send else [])])
            if data_listener is not None:
                await data_listener.aclose()

    async def _exchange_and_loop(self, conn: PingpongConnection | None, mine: PingpongAddress,
                                 data_listener: Listener | None,
                                 on_address: Callable[[str, PingpongAddress], None] | None,
                                 on_waiting: Callable[[str], None] | None) -> PingpongResult:
        cfg = self.config
        if conn is not None:
            theirs = await conn.exchange(mine, self._connect, cfg.timeout_s)
        else:
            if cfg.server is None:
                raise ExchangeError("pingpong", "a client needs a server address")
            try:
                theirs = await client_exchange(cfg.server, cfg.port, mine,
                                               timeout_s=cfg.timeout_s, on_waiting=on_waiting)
            except ExchangeError as exc:
                if not self.tcp or exc.step != "pingpong server address":
                    raise
                # a kernel tool (or a RoCE netio) closes on the zero GID tcp announces
                raise ExchangeError(exc.step, f"{exc.reason}; with --backend tcp the server "
                                              "must be netio --backend tcp (a kernel tool "
                                              "cannot use the zero GID tcp announces)") from None
            await self._connect(theirs)
        if on_address is not None:
            on_address("remote", theirs)
        if self.tcp:
            await self._tcp_endpoint(data_listener)
        return await self._loop(mine, theirs)

    async def _connect(self, theirs: PingpongAddress) -> None:
        """``pp_connect_ctx``: RC/UC to RTR and RTS towards the peer; UD keeps its address."""
        cfg = self.config
        if self.tcp:
            if theirs.has_gid:
                raise tool_backend.tcp_peer_error("pingpong connect", theirs.gid)
            return
        if cfg.backend == "soft":
            _gid_ipv4(theirs.gid, "pingpong connect")
        gid = tool_backend.gid_text(theirs.gid)
        if self.ud:
            self.ud_dest = UdDest(gid, theirs.qpn, UD_PINGPONG_QKEY)
            return
        ep = self._endpoint()
        remote = QpAddress(Transport.ROCE, gid, theirs.qpn, theirs.psn, cfg.mtu_bytes)
        await ep.connect_to(remote, mtu_bytes=cfg.mtu_bytes)
        self._post_receives(cfg.rx_depth)

    async def _tcp_endpoint(self, data_listener: Listener | None) -> None:
        cfg = self.config
        if data_listener is not None:
            self.ep = await data_listener.accept(cfg.timeout_s)
        elif cfg.server is not None:
            self.ep = await tool_backend.tcp_data_connect(
                self.ctx, cfg.server, cfg.port, cfg.timeout_s, "pingpong tcp connect")
        self._post_receives(cfg.rx_depth)

    def _endpoint(self) -> Endpoint:
        if self.ep is None:
            raise ExchangeError("pingpong", "the endpoint is not set up")
        return self.ep

    def _post_receives(self, count: int) -> None:
        ep = self._endpoint()
        for _ in range(count):
            self.recvs.append(ep.recv(self.region))

    def _post_send(self) -> Pending[Completion]:
        return self._endpoint().send(self.send_slice, dest=self.ud_dest)

    async def _complete(self, ops: list[tuple[int, Pending[Completion]]], scnt: int,
                        rcnt: int) -> list[Completion]:
        """Wait for ``ops`` ((wr_id, handle) pairs) within the timeout; the first error
        that is not a flush names the failure (a flush is what follows it)."""
        cfg = self.config
        tasks = [asyncio.ensure_future(op) for _, op in ops]
        try:
            _done, waiting = await asyncio.wait(tasks, timeout=cfg.timeout_s)
        finally:
            for t in tasks:
                t.cancel()
        failures = [(wr_id, t.exception()) for (wr_id, _), t in zip(ops, tasks, strict=True)
                    if t.done() and not t.cancelled() and t.exception() is not None]
        if failures:
            failures.sort(key=lambda f: isinstance(f[1], FlushedError))
            wr_id, exc = failures[0]
            raise self._failure(wr_id, exc, scnt, rcnt)
        if waiting:
            hint = "" if not self.ud and cfg.transport is not QpType.UC else (
                "; UC and UD do not retransmit, so one lost message stalls the test "
                "(as it does the tools)")
            raise ExchangeError(
                "pingpong", f"no completion for {cfg.timeout_s:g} s after {scnt} sends and "
                f"{rcnt} receives{hint} "
                f"({tool_backend.counters_text(self._endpoint().counters())})")
        return [t.result() for t in tasks]

    def _failure(self, wr_id: int, exc: BaseException | None, scnt: int,
                 rcnt: int) -> BaseException:
        if not isinstance(exc, OperationError):
            return exc if exc is not None else ExchangeError("pingpong", "no outcome")
        cfg = self.config
        why = exc.hint
        if exc.status_name == "REM_INV_REQ_ERR":
            why = (f"the peer refused our {cfg.size_bytes}-byte SEND as invalid: both sides "
                   f"must use the same -s and -m (here -s {cfg.size_bytes}, -m "
                   f"{cfg.mtu_bytes}); {why}")
        return ExchangeError(
            "pingpong", f"failed status {exc.status_name} ({exc.status}) for wr_id {wr_id} "
            f"after {scnt} sends and {rcnt} receives" + (f": {why}" if why else ""))

    async def _loop(self, mine: PingpongAddress, theirs: PingpongAddress) -> PingpongResult:
        """The tools' loop: each side sends its next message once its previous send and
        its next receive have both completed; the client sends first."""
        cfg = self.config
        size = cfg.size_bytes
        offset = self.data_offset
        expected = chk_pattern(size) if cfg.chk else None
        is_client = cfg.server is not None
        iters = cfg.iters
        if is_client:
            if expected is not None:
                self.buf[offset:offset + size] = expected
            self.send = self._post_send()
        scnt = rcnt = checked = 0
        loop = asyncio.get_running_loop()
        start = loop.time()
        while rcnt < iters or scnt < iters:
            ops: list[tuple[int, Pending[Completion]]] = []
            if rcnt < iters:
                ops.append((RECV_WRID, self.recvs.popleft()))
            if self.send is not None:
                ops.append((SEND_WRID, self.send))
            completions = await self._complete(ops, scnt, rcnt)
            for (wr_id, _), wc in zip(ops, completions, strict=True):
                if wr_id == SEND_WRID:
                    scnt += 1
                    continue
                if wc.byte_len != size + offset:
                    raise ExchangeError(
                        "pingpong", f"received {wc.byte_len} bytes, expected "
                        f"{size + offset} (both sides must use the same -s)")
                if expected is not None:
                    bad = first_mismatch(self.buf[offset:], expected)
                    if bad is not None:
                        raise ExchangeError(
                            "pingpong --chk", f"message {rcnt + 1}: byte {bad} is "
                            f"{self.buf[offset + bad]:#04x}, expected {expected[bad]:#04x}")
                    checked += 1
                rcnt += 1
                self._post_receives(1)  # rx_depth stay posted, as the tools keep them
            self.send = self._post_send() if scnt < iters else None
        duration_s = loop.time() - start
        return PingpongResult(mine=mine, theirs=theirs, iters=iters, size_bytes=size,
                              duration_s=duration_s, checked_messages=checked,
                              counters=self._endpoint().counters())
