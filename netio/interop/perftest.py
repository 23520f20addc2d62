"""perftest's out-of-band exchange (linux-rdma/perftest
``src/perftest_communication.c``), so that netio can be either side of
``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``, ``ib_atomic_bw``, ``ib_write_lat``,
``ib_send_lat`` and ``ib_read_lat`` (RC, ``-q``, ``-a``, ``-o``).

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
   sent again at every later synchronisation point (one message per QP where
   the test loops over its QPs, ``-q``);
5. the bandwidth report (``xchg_bw_reports``, WRITE/READ/ATOMIC only): message
   size and iterations (64-bit), peak and average bandwidth and message rate
   (big-endian doubles);
6. closing (``ctx_close_connection``): one more hand shake, then ``"done\\0"``.

The hand shakes of each test are in :class:`_PerftestRun` (``write_bw.c``,
``send_bw.c``, ``write_lat.c``, ``read_lat.c``, ``send_lat.c``). The exchange does
not say which test, how many QPs or which options a peer runs, so a peer in a
mode netio does not run is told apart by what it sends: keys that change between
hand shakes (another ``-q``), binary data where keys are due or keys where a
report is due (a duplex ``-b`` peer, another test), a multicast QPN or GID, an
SRQ number (XRC/DC), a version outside :data:`MIN_PEER_VERSION` ..
:data:`MAX_PEER_VERSION`, or silence where perftest answers at once
(:data:`FOLLOW_UP_S`). Each ends the run with one line saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import itertools
import math
import random
import struct
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from netio.api.context import Context, Listener
from netio.api.context import open as netio_open
from netio.api.endpoint import Endpoint, WorkRequest
from netio.api.handles import Pending
from netio.api.region import LocalSlice, RemoteRegion
from netio.api.types import Access, Completion, QpType, WcStatus
from netio.backends.base import QpAddress, Transport
from netio.backends.soft import RxMode
from netio.errors import ExchangeError, NetioError, OperationError
from netio.interop import backend as tool_backend
from netio.interop import cm_peer, oob
from netio.roce import LinkFaults
from netio.roce.verbs import MAX_MESSAGE_BYTES

T = TypeVar("T")
DEFAULT_PORT = 18515
#: What netio announces as its perftest version: the version of the perftest
#: whose exchange this module follows (Debian 12's perftest 4.5-0.17 prints 6.06).
PERFTEST_VERSION = "6.06"
VERSION_FIELD_BYTES = 16  # MAX_VERSION
#: Oldest peer version current perftest accepts (``check_version_compatibility``).
MIN_PEER_VERSION = 5.70
#: First perftest version netio does not speak: 6.28 added a negotiation of the test
#: parameters after the MTU (``negotiate_params``, perftest commit 5453511).
MAX_PEER_VERSION = 6.28
#: How long netio waits for a message that perftest sends at once after the previous
#: one (every answer to a client; a client's report after its closing hand shake).
#: A peer silent for longer follows another sequence (another test or mode).
FOLLOW_UP_S = 15.0
#: ``QPNUM_MCAST``: the QPN a multicast (``-g``) perftest peer announces.
MCAST_QPN = 0xFFFFFF
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
        self._pushback = b""  # what peer_spoke read, for the next message

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

    def _wait_s(self, prompt: bool) -> float:
        """How long to wait for the peer's message: where perftest sends it at once
        (``prompt``), a silent peer follows another sequence; otherwise the peer may be
        setting up or running its test (the timeout)."""
        return min(self.timeout_s, FOLLOW_UP_S) if prompt else self.timeout_s

    async def xchg(self, mine: bytes, step: str, *, prompt: bool = False,
                   check: Callable[[bytes], None] | None = None,
                   in_sequence: bool = False) -> bytes:
        """``ctx_xchg_data``: the client writes then reads; the server reads
        then writes. Both blobs have the same size; each within the timeout
        (:data:`FOLLOW_UP_S` where the peer sends at once: ``prompt``).
        ``check(prefix)`` sees the peer's bytes as they arrive and raises when they
        cannot begin the expected message. ``in_sequence``: a peer silent where perftest
        sends at once is named as one following another sequence."""
        strict = prompt and in_sequence
        if self.is_client:
            await oob.write(self._writer, mine, step, self.timeout_s)
            return await self._read(len(mine), step, self._wait_s(prompt), check, strict)
        theirs = await self._read(len(mine), step, self._wait_s(prompt), check, strict)
        await oob.write(self._writer, mine, step, self.timeout_s)
        return theirs

    async def _read(self, nbytes: int, step: str, wait_s: float,
                    check: Callable[[bytes], None] | None, strict: bool) -> bytes:
        got = self._pushback[:nbytes]
        self._pushback = self._pushback[nbytes:]
        if got and check is not None:
            check(got)
        while len(got) < nbytes:
            # the first bytes within wait_s; the rest of a message perftest writes at once
            chunk = await _read_some(self._reader, nbytes - len(got), step,
                                     wait_s if not got else min(wait_s, FOLLOW_UP_S),
                                     self.timeout_s if not strict else math.inf, len(got),
                                     nbytes)
            got += chunk
            if check is not None:
                check(got)
        return got

    async def exchange_versions(self, version: str = PERFTEST_VERSION) -> str:
        raw = version.encode("ascii")[: VERSION_FIELD_BYTES - 1].ljust(VERSION_FIELD_BYTES, b"\0")
        theirs = (await self.xchg(raw, "perftest version", prompt=True)).split(b"\x00", 1)[0]
        self.peer_version = theirs.decode("ascii", "replace")
        try:
            peer = float(self.peer_version)
        except ValueError:
            raise ExchangeError("perftest version", f"unparseable {self.peer_version!r}") from None
        if peer < MIN_PEER_VERSION:
            raise ExchangeError(
                "perftest version", f"peer perftest {self.peer_version} is older than 5.70"
            )
        if peer >= MAX_PEER_VERSION:
            raise ExchangeError(
                "perftest version", f"peer perftest {self.peer_version} negotiates the test "
                f"parameters (perftest >= {MAX_PEER_VERSION:.2f}), which netio does not speak; "
                f"netio follows perftest {MIN_PEER_VERSION:.2f}..6.27")
        return self.peer_version

    async def exchange_sys_data(
        self, cycle_buffer_bytes: int = DEFAULT_CYCLE_BUFFER_BYTES,
        cache_line_bytes: int = DEFAULT_CACHE_LINE_BYTES,
    ) -> tuple[int, int]:
        """Returns the agreed (larger) cycle buffer and cache line sizes."""
        (rem_cycle,) = struct.unpack(
            ">i", await self.xchg(struct.pack(">i", cycle_buffer_bytes), "perftest cycle buffer",
                                  prompt=True))
        (rem_line,) = struct.unpack(
            ">i", await self.xchg(struct.pack(">i", cache_line_bytes), "perftest cache line",
                                  prompt=True))
        return max(rem_cycle, cycle_buffer_bytes), max(rem_line, cache_line_bytes)

    async def exchange_mtu(self, mtu_bytes: int) -> int:
        """Returns the agreed (smaller) path MTU in bytes."""
        mine = mtu_to_enum(mtu_bytes)
        raw = await self.xchg(b"%d\x00" % mine, "perftest mtu", prompt=True)
        try:
            theirs = int(raw.split(b"\x00", 1)[0])
        except ValueError:
            raise ExchangeError("perftest mtu", f"unparseable {raw!r}") from None
        if 1 <= theirs <= 5 and theirs < mine:
            return enum_to_mtu(theirs)
        return mtu_bytes

    async def hand_shake(self, mine: PerftestKeys, *, prompt: bool = False,
                         what: str = "hand shake") -> PerftestKeys:
        """One ``ctx_hand_shake``; the peer's bytes must be keys as they arrive."""
        step = f"perftest {what}"
        return PerftestKeys.decode(await self.xchg(
            mine.encode(), step, prompt=prompt, check=lambda got: _check_keys_prefix(got, step),
            in_sequence=True))

    async def exchange_reports(self, mine: BwReport, *, prompt: bool = False) -> BwReport:
        """``xchg_bw_reports`` with a peer of version >= 5.33 (64-bit iterations).
        Keys text where the report is due means the peer runs another sequence."""
        fields = [
            struct.pack(">Q", mine.size_bytes),
            struct.pack(">Q", mine.iters),
            struct.pack(">d", mine.bw_peak),
            struct.pack(">d", mine.bw_avg),
            struct.pack(">d", mine.msg_rate_mpps),
        ]
        theirs = [await self.xchg(fields[0], "perftest report", prompt=prompt,
                                  check=_check_not_keys, in_sequence=True)]
        theirs += [await self.xchg(f, "perftest report", prompt=True, in_sequence=True)
                   for f in fields[1:]]
        return BwReport(
            size_bytes=struct.unpack(">Q", theirs[0])[0],
            iters=struct.unpack(">Q", theirs[1])[0],
            bw_peak=struct.unpack(">d", theirs[2])[0],
            bw_avg=struct.unpack(">d", theirs[3])[0],
            msg_rate_mpps=struct.unpack(">d", theirs[4])[0],
        )

    async def close(self, mine: PerftestKeys, *, prompt: bool = False) -> None:
        """``ctx_close_connection``: a last hand shake, then both write "done"."""
        await self.hand_shake(mine, prompt=prompt, what="closing hand shake")
        self._writer.write(DONE_MESSAGE)
        try:
            await asyncio.wait_for(self._writer.drain(), self.timeout_s)
            # The peer's "done" is not read by perftest either; take it if it comes.
            await asyncio.wait_for(self._reader.read(len(DONE_MESSAGE)), timeout=1.0)
        except (OSError, TimeoutError):
            pass
        finally:
            self._writer.close()

    async def wait_closed(self, wait_s: float) -> None:
        """Wait (at most ``wait_s``) for the peer to close the connection: ``ib_write_lat``
        ends without a closing exchange, and its last WRITE must be acknowledged before
        netio's endpoint goes."""
        try:
            await asyncio.wait_for(self._reader.read(1), wait_s)
        except (OSError, TimeoutError):
            pass
        finally:
            self._writer.close()

    async def peer_spoke(self) -> bytes:
        """Whatever the peer sends next (b"" when it closes), kept for the next read:
        during a measured run perftest sends nothing, so anything means the peer left
        the test, unless the run ended meanwhile (the peer's next hand shake)."""
        try:
            data = await self._reader.read(64)
        except OSError:
            return b""
        self._pushback += data
        return data

    def abort(self) -> None:
        self._writer.close()


#: The 108-byte keys message, byte by byte: ``h`` a hex digit, anything else itself.
_KEYS_TEMPLATE = ("hhhh:hhhh:hhhhhh:hhhhhh:hhhhhhhh:" + "h" * 16 + ":" + "hh:" * 16
                  + "hhhhhhhh:\0").encode("ascii")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _check_keys_prefix(got: bytes, step: str) -> None:
    """Raise when ``got`` cannot begin perftest's keys message (``KEY_PRINT_FMT_GID``):
    a peer sending a report or other binary data here runs another sequence."""
    for index, (byte, want) in enumerate(zip(got, _KEYS_TEMPLATE, strict=False)):
        ok = byte in _HEX if want == ord("h") else byte == want
        if not ok:
            raise ExchangeError(step, f"the peer sent {got[:16]!r}... where its 108-byte keys "
                                      f"were due (byte {index}): it follows another sequence "
                                      "(a duplex -b peer, another test, or rdma_cm/UD/XRC "
                                      "options netio does not run)")


def _check_not_keys(got: bytes) -> None:
    """Raise when the peer's first report field is the start of a keys message."""
    if len(got) == 8 and all(b in _HEX or b == ord(":") for b in got) and b":" in got:
        raise ExchangeError("perftest report", f"the peer sent keys ({got!r}...) where its "
                                               "bandwidth report was due: it runs another test "
                                               "(a latency test?) or another -q")


async def _read_some(reader: asyncio.StreamReader, most: int, step: str, wait_s: float,
                     timeout_s: float, have: int, nbytes: int) -> bytes:
    """Up to ``most`` bytes within ``wait_s``; a wait shorter than ``timeout_s`` that
    expires means the peer does not send what perftest sends at once."""
    try:
        chunk = await asyncio.wait_for(reader.read(most), wait_s)
    except TimeoutError:
        if wait_s >= timeout_s:
            raise ExchangeError(step, f"nothing received for {timeout_s:g} s (--timeout): the "
                                      f"peer connected but did not send its {nbytes}-byte "
                                      "message") from None
        raise ExchangeError(step, f"the peer sent {have} of {nbytes} bytes and then nothing for "
                                  f"{wait_s:g} s where perftest sends at once: it follows "
                                  "another sequence (another test, -q, -a or a duplex -b "
                                  "peer)") from None
    except OSError as exc:
        raise ExchangeError(step, f"connection lost: {exc}") from exc
    if not chunk:
        raise ExchangeError(step, f"peer closed after {have} of {nbytes} bytes")
    return chunk


class PerftestListener(oob.Listener[PerftestChannel]):
    """Accepts perftest clients (the server role); ``timeout_s`` bounds each step of
    their exchanges."""

    def __init__(self, timeout_s: float = oob.DEFAULT_TIMEOUT_S) -> None:
        super().__init__(lambda reader, writer: PerftestChannel(
            reader, writer, is_client=False, timeout_s=timeout_s),
            "perftest server", DEFAULT_PORT, timeout_s)


# -- the tests ---------------------------------------------------------------------------

#: QP attributes perftest sets (``ctx_modify_qp_to_rtr/rts``: DEF_QP_TIME, 7, 7, MIN_RNR_TIMER).
#:
#: Why the soft backend on a host needed ``-u 20`` against the rxe lab's guests for large
#: transfers (measured on this lab, host load ~4): as the requester of 4 MiB READs at
#: ``-u 14`` (ACK timeout 4.096 us * 2**14 = 67 ms) the first READ never completed
#: (RETRY_EXC_ERR after 0 operations, 4 s): the guest's rxe counted 30 READ requests for 10,
#: 26 of them duplicates, and sent 90,350 response packets (22 times the 4,096 of one READ).
#: 1 MiB READs at -u 14 and 4 MiB READs at -u 20 completed (4 duplicates). A 4 MiB response
#: streams for about 0.4 s from an emulated (TCG) guest at ~10 MB/s; a stall of the guest
#: longer than 67 ms in that time (its qemu process descheduled on the shared 2-core host)
#: leaves the host's ACK timer, which runs on the host's clock, without progress, so netio
#: asks again for the rest of the READ; rxe answers a duplicate READ by starting a second
#: response stream, whose packets the requester takes as out of sequence (more implied-NAK
#: retries) until retry_count is spent. perftest's requester in the other guest runs on a
#: guest clock that stalls with the guest, so it does not see those stalls as timeouts.
#: WRITEs of 4 and 8 MiB at -u 14 completed with no duplicates (ACKs every 64 packets keep
#: the timer fed). Not a defect of either end: a link whose peer stalls for longer than the
#: ACK timeout needs a longer one, which is what ``-u`` (perftest's own option) gives.
QP_TIMEOUT = 14
QP_RETRY_CNT = 7
QP_RNR_RETRY = 7
QP_MIN_RNR_TIMER = 12
#: READ/atomic responder resources netio offers by default (its ``out_reads``, ``-o``).
NETIO_OUT_READS = 16
MAX_OUT_READS = 255
MIB = 1 << 20
#: ``-a``: perftest runs sizes 2**1 .. 2**23 (``for (i = 1; i < 24; ++i)``) and sizes
#: its buffers for the largest (``MAX_SIZE``).
ALL_SIZES_BYTES = tuple(1 << i for i in range(1, 24))
#: perftest's minimum ``-n`` (``MIN_ITER``); the latency report needs it.
MIN_LAT_ITERS = 5
#: Samples the latency report drops from the slow end (``LAT_MEASURE_TAIL``).
LAT_MEASURE_TAIL = 2
#: Most QPs (``-q``): perftest's own limit is far higher; netio opens one endpoint each.
MAX_QPS = 64
DEFAULT_BW_SIZE_BYTES = 65536  # DEF_SIZE_BW
DEFAULT_LAT_SIZE_BYTES = 2  # DEF_SIZE_LAT
#: How long a latency side waits for the peer to close the connection at the end (its
#: last operation must be acknowledged before netio's endpoint goes).
LINGER_S = 3.0
#: What netio's announced buffer holds before a write_bw peer WRITEs there (perftest's
#: own buffers are zeros, ``create_single_mr``): a duplex (``-b``) write_bw peer is told
#: apart by where its WRITEs land, as its exchange is the same as a one-way peer's.
WRITE_SENTINEL = 0xA5


class AtomicType(enum.StrEnum):
    FETCH_AND_ADD = "FETCH_AND_ADD"
    CMP_AND_SWAP = "CMP_AND_SWAP"


@dataclass(frozen=True, slots=True)
class PerftestConfig:
    """One perftest run (``server`` None = the server role).

    The options mean what perftest's do (``-s``, ``-n``, ``-t`` tx depth, ``-r`` rx
    depth, ``-m`` MTU, ``-p`` port, ``-A``, ``-q`` QPs, ``-a`` all sizes, ``-o``
    outstanding READs/atomics offered, ``-u`` QP timeout); ``latency`` picks
    ``ib_<verb>_lat`` instead of ``ib_<verb>_bw``. ``mtu_bytes`` is what netio offers;
    the smaller of both sides' MTUs is used. ``timeout_s`` bounds every step:
    connecting, waiting for the client, each exchange message, and each wait for
    completions. ``backend`` is the netio backend; ``device`` and ``gid_index``
    (perftest's ``-d``, ``-x``) choose the verbs device. Both sides need the same test,
    ``-q``, ``-a`` and ``-s``."""

    verb: PerftestVerb
    server: str | None = None
    port: int = DEFAULT_PORT
    local_ip: ipaddress.IPv4Address | None = None
    size_bytes: int | None = None  # None: perftest's default (65536, latency 2; atomics 8)
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
    latency: bool = False
    qps: int = 1
    all_sizes: bool = False
    out_reads: int | None = None  # None: NETIO_OUT_READS (READ/atomic tests)
    qp_timeout: int = QP_TIMEOUT  # -u: the local ACK timeout, 4.096 us * 2**qp_timeout

    def __post_init__(self) -> None:
        step = "perftest options"
        tool_backend.check_backend(step, self.backend)
        oob.check_options(step, client=self.server is not None, port=self.port,
                          timeout_s=self.timeout_s)
        # perftest sends the iterations as a 64-bit field of its report
        low = MIN_LAT_ITERS if self.latency else 1
        oob.check_range(step, "iterations (-n)", self.iters, low, (1 << 63) - 1)
        oob.check_range(step, "tx depth (-t)", self.tx_depth, 1, oob.MAX_QUEUE_DEPTH)
        oob.check_range(step, "rx depth (-r)", self.rx_depth, 1, oob.MAX_QUEUE_DEPTH)
        oob.check_range(step, "QPs (-q)", self.qps, 1, MAX_QPS)
        oob.check_range(step, "QP timeout (-u)", self.qp_timeout, 1, 31)
        if self.out_reads is not None:
            oob.check_range(step, "outstanding reads (-o)", self.out_reads, 1, MAX_OUT_READS)
        if self.size_bytes is not None:
            oob.check_range(step, "message size (-s)", self.size_bytes, 1, MAX_MESSAGE_BYTES)
        if self.verb is PerftestVerb.ATOMIC:
            if self.size_bytes not in (None, ATOMIC_SIZE_BYTES):
                raise ExchangeError(step, "atomic operations are 8 bytes")
            if self.all_sizes:
                raise ExchangeError(step, "atomic tests have one size (8 bytes): no -a")
            if self.latency:
                raise ExchangeError(step, "netio runs atomic_bw, not atomic_lat")
        if self.latency and self.qps != 1:
            raise ExchangeError(step, "the latency tests run one QP (-q 1)")
        if self.backend == "tcp" and self.qps != 1:
            raise ExchangeError(step, "--backend tcp carries one QP (-q 1)")
        mtu_to_enum(self.mtu_bytes)

    @property
    def name(self) -> str:
        """perftest's program name without ``ib_`` (``write_bw``, ``send_lat``)."""
        return f"{self.verb.value}_{'lat' if self.latency else 'bw'}"

    @property
    def message_bytes(self) -> int:
        """The size of the run (the largest with ``-a``: what the buffers hold)."""
        if self.all_sizes:
            return ALL_SIZES_BYTES[-1]
        if self.size_bytes is not None:
            return self.size_bytes
        if self.verb is PerftestVerb.ATOMIC:
            return ATOMIC_SIZE_BYTES
        return DEFAULT_LAT_SIZE_BYTES if self.latency else DEFAULT_BW_SIZE_BYTES

    @property
    def sizes(self) -> tuple[int, ...]:
        return ALL_SIZES_BYTES if self.all_sizes else (self.message_bytes,)

    @property
    def offered_out_reads(self) -> int:
        """The ``out_reads`` netio announces: perftest's READ/atomic tests offer the
        device's (or ``-o``), the others 1."""
        if self.verb in (PerftestVerb.READ, PerftestVerb.ATOMIC):
            return self.out_reads if self.out_reads is not None else NETIO_OUT_READS
        return 1


@dataclass(frozen=True, slots=True)
class LatReport:
    """``print_report_lat``'s columns, in microseconds (one way: half the round trip
    for WRITE/SEND, the whole READ)."""

    size_bytes: int
    iters: int
    t_min_us: float
    t_max_us: float
    t_typical_us: float
    t_avg_us: float
    t_stdev_us: float
    p99_us: float
    p999_us: float


def latency_report(size_bytes: int, posted_ns: list[int], rtt_factor: int) -> LatReport:
    """perftest's latency statistics from the post times of ``iters`` operations: the
    gaps between consecutive posts, sorted, the slowest :data:`LAT_MEASURE_TAIL`
    dropped; t_typical is the median; t_stdev uses whole-unit differences, as
    perftest's ``int`` arithmetic does."""
    iters = len(posted_ns)
    deltas = sorted(b - a for a, b in itertools.pairwise(posted_ns))
    count = len(deltas) - LAT_MEASURE_TAIL
    if count < 1:
        raise ExchangeError("perftest report", f"{iters} iterations are too few for latency")
    per_us = 1000.0 * rtt_factor
    if (count - 1) % 2:
        median = (deltas[count // 2] + deltas[count // 2 - 1]) / 2
    else:
        median = deltas[count // 2]
    values = [d / per_us for d in deltas[:count]]
    average = sum(values) / count
    stdev = math.sqrt(sum(int(average - v) ** 2 for v in values) / count)
    return LatReport(size_bytes, iters, deltas[0] / per_us, deltas[count] / per_us,
                     median / per_us, average, stdev,
                     deltas[math.ceil(count * 0.99)] / per_us,
                     deltas[math.ceil(count * 0.999)] / per_us)


@dataclass(frozen=True, slots=True)
class PerftestResult:
    """The outcome on netio's side; ``report`` is netio's own measurement of the last
    size (zeros on a WRITE/READ/ATOMIC bandwidth server, which measures nothing, as
    perftest's; None on a latency server of ``read_lat``), ``reports`` every size's
    (``-a``), ``peer_report`` what the peer sent (WRITE/READ/ATOMIC bandwidth only),
    ``counters`` the first endpoint's (:meth:`netio.Endpoint.counters`)."""

    verb: PerftestVerb
    is_client: bool
    mine: PerftestKeys
    theirs: PerftestKeys
    mtu_bytes: int
    peer_version: str
    report: BwReport | LatReport | None
    peer_report: BwReport | None
    counters: dict[str, int] = field(default_factory=dict)
    reports: tuple[BwReport | LatReport, ...] = ()
    latency: bool = False
    qps: int = 1


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
    """Run one perftest test against perftest (or another netio).

    As the server, ``listener`` (listening already) may be given; otherwise one
    is opened on ``config.port``; either way it is closed once the client is
    accepted, as perftest serves one client. ``on_event(kind, value)`` reports
    progress: ``("waiting", text)`` when a client's first connection attempt
    fails and it keeps retrying, ``("local"|"remote", keys)`` (once per QP),
    ``("mtu", bytes)``, ``("header", None)`` before the first result line,
    ``("report"|"peer_report", BwReport)``, ``("latency", LatReport)``."""
    tool_port = config.port
    if config.server is None:
        if listener is None:
            listener = PerftestListener(config.timeout_s)
            await listener.listen(None, config.port)
        try:
            tool_port = listener.port
            channel = await _accept(config, listener, tool_port, on_event)
        finally:
            await listener.close()
        channel.timeout_s = config.timeout_s
        local_ip = config.local_ip or ipaddress.IPv4Address(channel.local_ip)
    else:
        local_ip = config.local_ip or oob.route_source_ip(config.server, config.port,
                                                          "perftest route")
        channel = await _connect(config, config.server, local_ip, on_event)
    try:
        return await _PerftestRun(config, channel, local_ip, tool_port, on_event).run()
    except BaseException:
        channel.abort()
        raise


def _verbs_probe_context(config: PerftestConfig, local_ip: ipaddress.IPv4Address | None
                         ) -> Context:
    """A verbs context for asking rdma_cm whether the peer runs perftest -R."""
    return netio_open("verbs", device=config.device, port=config.ib_port,
                      gid=config.gid_index, local_addr=str(local_ip) if local_ip else None,
                      timeout_s=min(config.timeout_s, cm_peer.PROBE_S))


async def _accept(config: PerftestConfig, listener: PerftestListener, port: int,
                  on_event: Callable[[str, object], None] | None) -> PerftestChannel:
    """The TCP client; with the verbs backend, an rdma_cm client on the same port (a
    perftest -R) ends the wait with one line (:mod:`netio.interop.cm_peer`)."""
    if config.backend != "verbs":  # no rdma_cm to ask
        return await listener.accept(config.timeout_s)
    try:
        ctx = _verbs_probe_context(config, config.local_ip)
    except (NetioError, OSError):
        return await listener.accept(config.timeout_s)

    def waiting(text: str) -> None:
        if on_event is not None:
            on_event("waiting", text)
    try:
        return await cm_peer.first_of(listener.accept(config.timeout_s),
                                      cm_peer.rdma_cm_client_at(ctx, port, waiting),
                                      lambda: cm_peer.cm_client_error(port))
    finally:
        await ctx.aclose()


async def _connect(config: PerftestConfig, host: str, local_ip: ipaddress.IPv4Address,
                   on_event: Callable[[str, object], None] | None) -> PerftestChannel:
    """The TCP connection to the server; once it has been refused, with the verbs
    backend, an rdma_cm listener accepting on the same port (a perftest -R) ends the
    run with one line (:mod:`netio.interop.cm_peer`)."""
    port = config.port
    refused = asyncio.Event()

    def waiting(text: str) -> None:
        refused.set()
        if on_event is not None:
            on_event("waiting", text)

    connect = PerftestChannel.connect(host, port, timeout_s=config.timeout_s,
                                      on_waiting=waiting)
    if config.backend != "verbs":  # no rdma_cm to ask
        return await connect

    async def probe() -> None:
        await refused.wait()
        ctx = _verbs_probe_context(config, local_ip)
        try:
            found = await cm_peer.rdma_cm_listener_at(ctx, host, port,
                                                      min(config.timeout_s, cm_peer.PROBE_S))
        finally:
            await ctx.aclose()
        if not found:
            raise LookupError("no rdma_cm listener")  # stop watching; TCP alone decides

    return await cm_peer.first_of(connect, probe(), lambda: cm_peer.cm_server_error(host,
                                                                                     port))


class _PeerKeys:
    """The keys the peer announced, QP by QP, and the checks that tell a peer running
    another ``-q``, another test or an unsupported connection apart."""

    def __init__(self, qps: int, name: str) -> None:
        self.qps = qps
        self.name = name
        self.keys: list[PerftestKeys] = []

    def first(self, theirs: PerftestKeys) -> None:
        """The peer's keys for its next QP (the first round of hand shakes)."""
        index = len(self.keys)
        if theirs.qpn == MCAST_QPN or theirs.gid.is_multicast:
            raise ExchangeError("perftest keys", f"the peer announced QPN {theirs.qpn:#x}, GID "
                                                 f"{theirs.gid}: a multicast (-g) peer; netio "
                                                 "runs RC")
        if theirs.srqn:
            raise ExchangeError("perftest keys", f"the peer announced SRQ number "
                                                 f"{theirs.srqn:#x}: an XRC or DC peer; netio "
                                                 "runs RC")
        for j, seen in enumerate(self.keys):
            if seen.qpn == theirs.qpn:
                raise ExchangeError(
                    "perftest keys", f"the peer announced its QP {theirs.qpn:#x} again where "
                    f"its QP #{index + 1} was due (first as #{j + 1}): it runs fewer QPs "
                    f"than netio's -q {self.qps}, or another test than {self.name}")
        self.keys.append(theirs)

    def again(self, theirs: PerftestKeys, index: int) -> PerftestKeys:
        """A later hand shake that repeats the peer's keys of QP ``index``."""
        want = self.keys[index]
        if theirs != want:
            more = ("more QPs than netio's -q " f"{self.qps}, or another test"
                    if theirs.qpn != want.qpn else "another test")
            raise ExchangeError(
                "perftest keys", f"the peer announced QP {theirs.qpn:#x} (PSN {theirs.psn:#x}) "
                f"where its QP #{index + 1} ({want.qpn:#x}, PSN {want.psn:#x}) was due: it "
                f"runs {more} than {self.name}")
        return theirs


def _take_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


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
        self.eps: list[Endpoint] = []
        self.peer = _PeerKeys(config.qps, f"ib_{config.name}")
        self.pendings: list[Pending[Any]] = []
        self.recvs: deque[tuple[int, int, Pending[Completion]]] = deque()
        self.inflight: deque[tuple[Pending[list[Completion]], list[WorkRequest]]] = deque()
        self.stride = 0  # bytes per QP buffer half (perftest's BUFF_SIZE, cache aligned)
        self.cycle_buffer = DEFAULT_CYCLE_BUFFER_BYTES
        self.cache_line = DEFAULT_CACHE_LINE_BYTES

    async def run(self) -> PerftestResult:
        cfg, ch = self.config, self.channel
        peer_version = await ch.exchange_versions()
        self.cycle_buffer, self.cache_line = await ch.exchange_sys_data()
        mtu = await ch.exchange_mtu(cfg.mtu_bytes)
        self.on_event("mtu", mtu)
        out_reads = cfg.offered_out_reads
        ctx = tool_backend.open_context(
            cfg.backend, self.local_ip, timeout_s=cfg.timeout_s, rx_mode=cfg.rx_mode,
            faults=cfg.faults, fault_seed=cfg.fault_seed, device=cfg.device,
            port=cfg.ib_port, gid_index=cfg.gid_index, mtu=mtu, ack_timeout=cfg.qp_timeout,
            retry_count=QP_RETRY_CNT, rnr_retry=QP_RNR_RETRY, min_rnr_timer=QP_MIN_RNR_TIMER,
            max_rd_atomic=max(out_reads, NETIO_OUT_READS))
        data_listener: Listener | None = None
        try:
            if ctx.transport == Transport.TCP and not ch.is_client:
                # tcp: the data connection is netio's own, on the tool's port, listened
                # for before the client can learn our keys
                data_listener = await ctx.listen(f"0.0.0.0:{self.tool_port}")
            return await self._run(ctx, peer_version, mtu, data_listener)
        finally:
            tool_backend.discard([p for _, _, p in self.recvs])
            tool_backend.discard([p for p, _ in self.inflight])
            tool_backend.discard(self.pendings)
            if data_listener is not None:
                await data_listener.aclose()
            await ctx.aclose()

    # -- set-up -------------------------------------------------------------------------

    async def _run(self, ctx: Context, peer_version: str, mtu: int,
                   data_listener: Listener | None) -> PerftestResult:
        cfg, ch = self.config, self.channel
        nq = cfg.qps
        tcp = ctx.transport == Transport.TCP
        # perftest's layout: 2 * QPs halves of BUFF_SIZE(size, cycle buffer); QP i sends
        # from half i and announces half QPs + i (``set_up_connection``)
        span = buffer_span_bytes(self.size, self.cycle_buffer)
        self.stride = -(-span // self.cache_line) * self.cache_line
        buf = bytearray(self.stride * 2 * nq)
        region = ctx.register(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE
                              | Access.REMOTE_READ | Access.REMOTE_ATOMIC)
        self.buf, self.region = buf, region
        self.watch_writes = self.verb is PerftestVerb.WRITE and not cfg.latency
        if self.watch_writes:
            buf[nq * self.stride:] = bytes([WRITE_SENTINEL]) * (nq * self.stride)
        out_reads = cfg.offered_out_reads
        mine: list[PerftestKeys] = []
        for i in range(nq):
            vaddr = region.addr + (nq + i) * self.stride
            if tcp:
                # no RoCE address: a zero GID tells a RoCE peer apart (it sends its own)
                mine.append(PerftestKeys(lid=0, out_reads=out_reads, qpn=0, psn=0,
                                         rkey=region.rkey, vaddr=vaddr,
                                         gid=ipaddress.IPv6Address("::")))
                continue
            ep = await ctx.endpoint(QpType.RC, peer=str(self.local_ip),
                                    psn=random.getrandbits(24))
            self.eps.append(ep)
            address = ep.address
            mine.append(PerftestKeys(lid=0, out_reads=out_reads, qpn=address.qpn,
                                     psn=address.psn, rkey=region.rkey, vaddr=vaddr,
                                     gid=ipaddress.IPv6Address(address.gid)))
        self.mine = mine
        for keys in mine:
            self.on_event("local", keys)
        await self._setup(ctx, mtu, data_listener)
        report, peer_report, reports = await self._measure()
        theirs = self.peer.keys[0]
        return PerftestResult(self.verb, ch.is_client, mine[0], theirs, mtu, peer_version,
                              report, peer_report, self.eps[0].counters(), tuple(reports),
                              cfg.latency, nq)

    async def _hs(self, index: int, *, repeat: bool, prompt: bool = True,
                  what: str = "hand shake") -> PerftestKeys:
        """One hand shake with the keys of QP ``index``: the peer's first keys of its
        next QP, or (``repeat``) its keys of QP ``index`` again."""
        theirs = await self.channel.hand_shake(self.mine[index], prompt=prompt, what=what)
        if repeat:
            return self.peer.again(theirs, index)
        self.peer.first(theirs)
        return theirs

    async def _first_round(self, *, lead: bool) -> None:
        """The keys of every QP (``lead``: the latency tests' hand shake of QP 0 first)."""
        nq = self.config.qps
        if lead:
            await self._hs(0, repeat=False, prompt=False)
            for i in range(nq):  # QP 0 again, then (never: -q 1) the others
                await self._hs(i, repeat=i == 0, prompt=True)
            return
        for i in range(nq):
            await self._hs(i, repeat=False, prompt=i > 0)

    async def _setup(self, ctx: Context, mtu: int, data_listener: Listener | None) -> None:
        """The hand shakes up to the measured loop, in each test's order:

        * write/read/atomic bw: keys of each QP; connect; each again; QP 0 after RTR;
        * send_bw: keys of each QP; connect; QP 0; each again (then, per size, QP 0
          once the receives are posted: :meth:`_measure`);
        * write_lat, read_lat: QP 0, keys of each QP; connect; each again; QP 0 after RTR;
        * send_lat: keys of each QP; connect; QP 0; each again (then as send_bw)."""
        cfg = self.config
        nq = cfg.qps
        lead = cfg.latency and self.verb is not PerftestVerb.SEND
        await self._first_round(lead=lead)
        await self._connect(ctx, mtu, data_listener)
        if self.verb is PerftestVerb.SEND:
            await self._hs(0, repeat=True)  # after ctx_connect
            for i in range(nq):
                self.on_event("remote", await self._hs(i, repeat=True))
        else:
            for i in range(nq):
                self.on_event("remote", await self._hs(i, repeat=True))
            await self._hs(0, repeat=True, what="hand shake after RTR")

    async def _connect(self, ctx: Context, mtu: int, data_listener: Listener | None) -> None:
        cfg = self.config
        if ctx.transport == Transport.TCP:
            if self.peer.keys[0].gid != ipaddress.IPv6Address("::"):
                raise tool_backend.tcp_peer_error("perftest keys", self.peer.keys[0].gid)
            if data_listener is not None:
                self.eps.append(await data_listener.accept(cfg.timeout_s))
            elif cfg.server is not None:
                self.eps.append(await tool_backend.tcp_data_connect(
                    ctx, cfg.server, cfg.port, cfg.timeout_s, "perftest tcp connect"))
            return
        for ep, theirs in zip(self.eps, self.peer.keys, strict=True):
            if cfg.backend == "soft":
                _ipv4_of(theirs.gid)
            remote = QpAddress(Transport.ROCE, tool_backend.gid_text(theirs.gid), theirs.qpn,
                               theirs.psn, mtu)
            await ep.connect_to(remote, mtu_bytes=mtu)

    # -- the measured part ----------------------------------------------------------------

    async def _measure(self) -> tuple[BwReport | LatReport | None, BwReport | None,
                                      list[BwReport | LatReport]]:
        cfg, ch = self.config, self.channel
        is_client = ch.is_client
        reports: list[BwReport | LatReport] = []
        peer_report: BwReport | None = None
        self.on_event("header", None)
        if cfg.latency:
            if self.verb is PerftestVerb.READ and not is_client:
                # read_lat's server closes at once and waits there for the client
                await ch.close(self.mine[0])
                return None, None, reports
            for size in cfg.sizes:
                if self.verb is PerftestVerb.SEND:
                    self._post_recvs(size)
                    await self._hs(0, repeat=True, what="hand shake after the receives")
                lat = await self._guarded(self._latency_loop(size), f"{size}-byte latency run")
                self.on_event("latency", lat)
                reports.append(lat)
            if self.verb is PerftestVerb.WRITE:
                await ch.wait_closed(min(cfg.timeout_s, LINGER_S))  # write_lat ends here
            else:
                await ch.close(self.mine[0], prompt=True)
            return reports[-1], None, reports
        if self.verb is PerftestVerb.SEND:
            for size in cfg.sizes:
                if not is_client:
                    self._post_recvs(size)
                await self._hs(0, repeat=True, what="hand shake after the receives")
                rep = await self._guarded(self._client_loop(size) if is_client
                                          else self._send_server_loop(size),
                                          f"{size}-byte run")
                self.on_event("report", rep)
                reports.append(rep)
                if cfg.all_sizes:  # send_bw -a: a hand shake after every size
                    await self._hs(0, repeat=True, what="hand shake after a size")
            await ch.close(self.mine[0], prompt=True)
            return reports[-1], None, reports
        if is_client:
            last = BwReport(0, 0, 0.0, 0.0, 0.0)
            for size in cfg.sizes:
                last = await self._guarded(self._client_loop(size), f"{size}-byte run")
                self.on_event("report", last)
                reports.append(last)
            await self._hs(0, repeat=True, what="closing hand shake")
            peer_report = await ch.exchange_reports(last, prompt=True)
            if self.watch_writes and any(self._written(qp) for qp in range(cfg.qps)):
                raise ExchangeError("perftest", "the server WROTE into netio's buffer after "
                                                "netio's run: a duplex (-b) ib_write_bw server; "
                                                "netio runs the one-way test")
        else:
            # perftest's WRITE/READ/ATOMIC server only waits, then shows the client's report
            await self._hs(0, repeat=True, prompt=False, what="hand shake at the client's end")
            silent = [qp for qp in range(cfg.qps) if self.watch_writes and not self._written(qp)]
            if silent:
                raise ExchangeError("perftest", f"the client ended its run with no WRITE in "
                                                f"netio's buffer of QP #{silent[0] + 1}: a "
                                                "duplex (-b) ib_write_bw client (it "
                                                "synchronises before its run; netio runs the "
                                                "one-way test), or another test")
            mine = BwReport(cfg.sizes[-1], cfg.iters * cfg.qps, 0.0, 0.0, 0.0)
            peer_report = await ch.exchange_reports(mine, prompt=True)
            self._check_peer_report(peer_report)
            self.on_event("peer_report", peer_report)
            reports.append(mine)
        await ch.close(self.mine[0], prompt=True)
        return reports[-1], peer_report, reports

    def _written(self, qp: int) -> bool:
        """Whether a WRITE reached the first bytes netio announced for QP ``qp``."""
        start = (self.config.qps + qp) * self.stride
        probe = min(self.config.sizes[0], 8)
        return bytes(self.buf[start:start + probe]) != bytes([WRITE_SENTINEL]) * probe

    def _check_peer_report(self, theirs: BwReport) -> None:
        want = self.config.sizes[-1]
        if theirs.size_bytes != want:
            raise ExchangeError("perftest report", f"the client reported {theirs.size_bytes}-"
                                                   f"byte messages where netio expects {want} "
                                                   "(both sides need the same -s and -a)")

    def _stalled(self, what: str, done: int) -> ExchangeError:
        return ExchangeError(
            "perftest", f"no completion for {self.config.timeout_s:g} s after {done} {what} "
            f"({tool_backend.counters_text(self.eps[0].counters())})")

    def _failed(self, exc: OperationError, what: str, done: int) -> ExchangeError:
        hint = f": {exc.hint}" if exc.hint else ""
        return ExchangeError("perftest", f"completion with error {exc.status_name} "
                                         f"({exc.status}) after {done} {what}{hint}")

    async def _guarded(self, work: Coroutine[Any, Any, T], what: str) -> T:
        """Run ``work`` (a measured loop) while watching the exchange connection, on
        which perftest sends nothing during its run: a peer that closes it or sends
        there while netio's run does not end within :data:`LINGER_S` has left the test
        (it failed, or runs another test or mode), so netio stops too."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self.channel.peer_spoke())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            said = watch.result() if watch.done() else b""
            if watch.done() and not task.done():
                # a peer that ended its run sends its next hand shake (or closes) while
                # its last operations may still be completing here; give them time
                await asyncio.wait({task}, timeout=min(self.config.timeout_s, LINGER_S))
        finally:
            # An interrupted run's failure is not news: its outcome is taken here, now or
            # when the cancelled task ends (it may end with the flush error, not the cancel).
            task.add_done_callback(_take_outcome)
            if not task.done():
                task.cancel()
            watch.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        how = f"sent {said[:16]!r} on" if said else "closed"
        raise ExchangeError("perftest", f"the peer {how} the exchange connection during the "
                                        f"{what}, where perftest sends nothing: it failed, or "
                                        f"runs another test or mode than {self.peer.name} (UD, "
                                        "duplex -b, another -a, -n or -s)")

    async def _wait(self, pending: Pending[Completion], what: str, done: int) -> Completion:
        try:
            return await asyncio.wait_for(pending, self.config.timeout_s)
        except TimeoutError:
            raise self._stalled(what, done) from None
        except OperationError as exc:
            raise self._failed(exc, what, done) from None

    def _bw_report(self, size: int, iters: int, duration_s: float) -> BwReport:
        if duration_s <= 0:
            return BwReport(size, iters, 0.0, 0.0, 0.0)
        bw = size * iters / duration_s / MIB
        return BwReport(size, iters, bw, bw, iters / duration_s / 1e6)

    def _recv_offset(self, qp: int, index: int, size: int) -> int:
        """Where receive ``index`` of QP ``qp`` lands: the QP's half of the buffer, cycling
        within the cycle buffer as perftest's ``increase_loc_addr`` does."""
        return (self.config.qps + qp) * self.stride + remote_offset(
            index, size, self.cycle_buffer, self.cache_line, PerftestVerb.SEND)

    def _post_recvs(self, size: int) -> None:
        """``ctx_set_recv_wqes``: ``rx_depth`` receives per QP (at most ``-n``)."""
        depth = min(self.config.rx_depth, self.config.iters)
        for qp, ep in enumerate(self.eps):
            for i in range(depth):
                offset = self._recv_offset(qp, i, size)
                self.recvs.append((qp, i, ep.recv(self.region[offset:offset + size])))

    async def _send_server_loop(self, size: int) -> BwReport:
        """Receives complete in the order they were posted (per QP); each is posted again
        until ``iters`` receives per QP."""
        iters, nq = self.config.iters, self.config.qps
        total = iters * nq
        posted = [min(self.config.rx_depth, iters)] * nq
        rcnt = 0
        loop = asyncio.get_running_loop()
        start: float | None = None
        while rcnt < total:
            qp, _index, pending = self.recvs.popleft()
            wc = await self._wait(pending, "receives", rcnt)
            if start is None:
                start = loop.time()
            if wc.byte_len != size:
                raise ExchangeError("perftest", f"received {wc.byte_len} bytes, expected "
                                                f"{size} (both sides need the same -s and -a)")
            rcnt += 1
            if posted[qp] < iters:
                offset = self._recv_offset(qp, posted[qp], size)
                self.recvs.append((qp, posted[qp], self.eps[qp].recv(
                    self.region[offset:offset + size])))
                posted[qp] += 1
        return self._bw_report(size, total,
                               loop.time() - (start if start is not None else loop.time()))

    def _request(self, index: int, size: int, local: LocalSlice, remote: RemoteRegion,
                 ) -> WorkRequest:
        """The ``index``-th request: unsignaled (a batch's last one is signaled, as
        perftest moderates its completions)."""
        verb = self.verb
        if verb is PerftestVerb.SEND:
            return WorkRequest.send(local, signaled=False)
        offset = remote_offset(index, size, self.cycle_buffer, self.cache_line, verb)
        target = remote[offset:offset + size]
        if verb is PerftestVerb.WRITE:
            return WorkRequest.write(local, target, signaled=False)
        if verb is PerftestVerb.READ:
            return WorkRequest.read(local, target, signaled=False)
        if self.config.atomic_type is AtomicType.FETCH_AND_ADD:
            return WorkRequest.fetch_add(local, target, ATOMIC_ADD_VALUE)
        return WorkRequest.compare_swap(local, target, 0, ATOMIC_SWAP_VALUE)

    def _remote(self, qp: int) -> RemoteRegion:
        theirs = self.peer.keys[qp]
        transport = Transport.TCP if self.config.backend == "tcp" else Transport.ROCE
        return RemoteRegion(theirs.vaddr, theirs.rkey,
                            buffer_span_bytes(self.size, self.cycle_buffer), transport)

    async def _client_loop(self, size: int) -> BwReport:
        """Every QP runs ``iters`` requests, each keeping ``tx_depth`` in flight (for READ
        and atomics at most the peer's ``out_reads``, its responder resources); the
        report counts all QPs' requests, as perftest's."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.gather(*(self._qp_loop(qp, size) for qp in range(self.config.qps)))
        return self._bw_report(size, self.config.iters * self.config.qps, loop.time() - start)

    async def _qp_loop(self, qp: int, size: int) -> None:
        cfg = self.config
        iters = cfg.iters
        window = cfg.tx_depth
        theirs = self.peer.keys[qp]
        if self.verb in (PerftestVerb.READ, PerftestVerb.ATOMIC):
            window = max(1, min(window, theirs.out_reads))
        chunk = max(1, window // 2)
        local = self.region[qp * self.stride:qp * self.stride + size]
        remote = self._remote(qp)
        ep = self.eps[qp]
        inflight: deque[tuple[Pending[list[Completion]], list[WorkRequest]]] = deque()
        outstanding = scnt = ccnt = 0
        try:
            while ccnt < iters:
                while scnt < iters and outstanding < window:
                    n = min(chunk, iters - scnt, window - outstanding)
                    batch = [self._request(scnt + k, size, local, remote) for k in range(n)]
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
        finally:
            self.inflight.extend(inflight)

    # -- latency ----------------------------------------------------------------------------

    async def _latency_loop(self, size: int) -> LatReport:
        if self.verb is PerftestVerb.WRITE:
            posted = await self._write_lat(size)
            return latency_report(size, posted, 2)
        if self.verb is PerftestVerb.SEND:
            posted = await self._send_lat(size)
            return latency_report(size, posted, 2)
        posted = await self._read_lat(size)
        return latency_report(size, posted, 1)

    async def _poll_byte(self, offset: int, value: int, done: int) -> None:
        """Wait until the peer's WRITE sets ``buf[offset]`` to ``value``, as
        ``run_iter_lat_write`` polls the last byte of its buffer."""
        buf = self.buf
        if buf[offset] == value:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.timeout_s
        spins = 0
        while buf[offset] != value:
            await asyncio.sleep(0)
            spins += 1
            if spins % 1024 == 0 and loop.time() > deadline:
                raise ExchangeError(
                    "perftest", f"no WRITE from the peer for {self.config.timeout_s:g} s after "
                    f"{done} iterations (the last byte of netio's buffer stays "
                    f"{buf[offset]:#04x}, {value:#04x} was due; "
                    f"{tool_backend.counters_text(self.eps[0].counters())})")

    async def _write_lat(self, size: int) -> list[int]:
        """``run_iter_lat_write``: each side WRITEs ``size`` bytes whose last byte counts
        the iterations, and waits for the peer's to land in its own buffer; the server
        WRITEs first."""
        iters = self.config.iters
        is_server = not self.channel.is_client
        ep = self.eps[0]
        local = self.region[0:size]
        target = self._remote(0)[0:size]
        poll_at = self.config.qps * self.stride + size - 1
        posted: list[int] = []
        scnt = rcnt = ccnt = 0
        while scnt < iters or ccnt < iters or rcnt < iters:
            pending: Pending[Completion] | None = None
            if rcnt < iters and not (scnt < 1 and is_server):
                rcnt += 1
                await self._poll_byte(poll_at, rcnt & 0xFF, rcnt - 1)
            if scnt < iters:
                posted.append(time.perf_counter_ns())
                scnt += 1
                self.buf[size - 1] = scnt & 0xFF
                pending = ep.write(local, target)
                self.pendings.append(pending)
            if ccnt < iters and pending is not None:
                await self._wait(pending, "WRITEs", ccnt)
                self.pendings.pop()
                ccnt += 1
        return posted

    async def _read_lat(self, size: int) -> list[int]:
        """``run_iter_lat``: READ ``size`` bytes from the peer, one at a time."""
        ep = self.eps[0]
        local = self.region[0:size]
        source = self._remote(0)[0:size]
        posted: list[int] = []
        for scnt in range(self.config.iters):
            posted.append(time.perf_counter_ns())
            pending = ep.read(local, source)
            self.pendings.append(pending)
            await self._wait(pending, "READs", scnt)
            self.pendings.pop()
        return posted

    async def _send_lat(self, size: int) -> list[int]:
        """``run_iter_lat_send``: the client SENDs first; each side waits for the peer's
        SEND before its next, and reposts a receive while more are due."""
        iters = self.config.iters
        is_client = self.channel.is_client
        ep = self.eps[0]
        depth = min(self.config.rx_depth, iters)
        local = self.region[0:size]
        posted: list[int] = []
        sends: list[Pending[Completion]] = []
        scnt = rcnt = 0
        while scnt < iters or rcnt < iters:
            if rcnt < iters and not (scnt < 1 and is_client):
                _qp, _index, pending = self.recvs.popleft()
                wc = await self._wait(pending, "receives", rcnt)
                if wc.byte_len != size:
                    raise ExchangeError("perftest", f"received {wc.byte_len} bytes, expected "
                                                    f"{size} (both sides need the same -s "
                                                    "and -a)")
                rcnt += 1
                if rcnt + depth <= iters:
                    index = rcnt + depth - 1
                    offset = self._recv_offset(0, index, size)
                    self.recvs.append((0, index, ep.recv(self.region[offset:offset + size])))
            if scnt < iters:
                posted.append(time.perf_counter_ns())
                scnt += 1
                send = ep.send(local)
                sends.append(send)
                self.pendings.append(send)
        for done, send in enumerate(sends):
            await self._wait(send, "SENDs", done)
        self.pendings.clear()
        return posted
