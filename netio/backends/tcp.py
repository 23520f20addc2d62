"""The tcp backend: RC semantics over a TCP stream when there is no RDMA at all.

The exchange's TCP connection becomes the QP. Every request travels as one frame
(:data:`_FRAME` header + payload); the target's netio carries out one-sided operations
with the same checks a RoCE responder makes (rkey, bounds, access flags, 8-byte
atomic alignment; IBTA §9.7.4.1.4) and answers each request in order, so completions
come in posting order as on RC. Errors follow RC too: a refused access is NAKed
(``REM_ACCESS_ERR`` at the requester), a SEND with no receive posted is NAKed
receiver-not-ready and resent after the RNR timer up to ``rnr_retry`` times (7: for
ever) with go-back-N, a SEND larger than the receive is an invalid request; each error
moves both QPs to the error state, which flushes what is outstanding. A peer that
closes the connection fails the oldest outstanding request with ``RETRY_EXC_ERR`` (what
a RoCE requester reports once its retries run out) and flushes the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import socket
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from netio.api.types import Access, Completion, QpType, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.backends.base import (
    Description,
    Notify,
    QpAddress,
    QpOptions,
    RecvRequest,
    Segment,
    SendRequest,
    Transport,
)
from netio.errors import RegistrationError, RoceError
from netio.wire.ext import rnr_timer_ns

#: kind, flags, status, imm, seq, remote_addr, rkey, length, compare_add, swap
_FRAME = struct.Struct("!BBHIQQIIQQ")
_HAS_IMM = 1
_ADDR_BASE = 0x0000_7F00_0000_0000
_PAGE = 4096
#: A frame's payload is at most one RC message (IBTA §9.4: 2**31 bytes).
_MAX_PAYLOAD_BYTES = 1 << 31
TCP_MTU_BYTES = 4096  # what the exchange reports; TCP itself does not segment by it


class _Kind(enum.IntEnum):
    SEND = 1
    WRITE = 2
    READ = 3
    FETCH_ADD = 4
    COMPARE_SWAP = 5
    ACK = 6  # success; READ data or the atomic's original value follow
    NAK = 7  # ``status`` holds the requester's WcStatus
    RNR = 8


_KIND_OF = {
    WrOpcode.SEND: _Kind.SEND, WrOpcode.SEND_WITH_IMM: _Kind.SEND,
    WrOpcode.RDMA_WRITE: _Kind.WRITE, WrOpcode.RDMA_WRITE_WITH_IMM: _Kind.WRITE,
    WrOpcode.RDMA_READ: _Kind.READ, WrOpcode.ATOMIC_FETCH_AND_ADD: _Kind.FETCH_ADD,
    WrOpcode.ATOMIC_CMP_AND_SWP: _Kind.COMPARE_SWAP,
}
_WC_OPCODE = {
    WrOpcode.SEND: WcOpcode.SEND, WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
    WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WrOpcode.RDMA_READ: WcOpcode.RDMA_READ, WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
    WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
}
_NEEDED_ACCESS = {_Kind.WRITE: Access.REMOTE_WRITE, _Kind.READ: Access.REMOTE_READ,
                  _Kind.FETCH_ADD: Access.REMOTE_ATOMIC, _Kind.COMPARE_SWAP: Access.REMOTE_ATOMIC}


@dataclass(frozen=True, slots=True, eq=False)
class TcpRegion:
    """A registered buffer: its keys and the caller's bytes (a zero-copy view)."""

    lkey: int
    rkey: int
    addr: int
    length: int
    access: Access
    view: memoryview = field(repr=False)


def _gather(segments: tuple[Segment, ...]) -> bytes:
    return b"".join(_view(s) for s in segments)


def _view(s: Segment) -> memoryview:
    region = s.region
    if not isinstance(region, TcpRegion):
        raise RoceError("segment is not a region of this tcp context")
    return region.view[s.offset:s.offset + s.length]


def _scatter(segments: tuple[Segment, ...], data: bytes | memoryview) -> None:
    pos = 0
    for s in segments:
        take = min(s.length, len(data) - pos)
        if take <= 0:
            break
        _view(s)[:take] = data[pos:pos + take]
        pos += take


@dataclass(slots=True)
class _Outstanding:
    seq: int
    request: SendRequest
    rnr_left: int


class TcpQp:
    """One TCP connection acting as an RC QP; see :class:`netio.backends.base.BackendQp`."""

    _qpns = itertools.count(0x100)

    def __init__(self, backend: TcpBackend, local_ip: str, options: QpOptions,
                 notify: Notify) -> None:
        self._backend = backend
        self._local_ip = local_ip
        self._options = options
        self._notify = notify
        self._qpn = next(self._qpns) & 0xFFFFFF
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._seq = itertools.count(1)
        self._outstanding: deque[_Outstanding] = deque()
        self._recvs: deque[RecvRequest] = deque()
        self._cq: deque[Completion] = deque()
        self._error = False
        self._gone_unreported = False
        self.peer_gone = False  # the connection ended (read by Endpoint.peer_closed)
        self._rnr_skip_until: int | None = None  # responder: drop requests after an RNR NAK
        self._retry_handle: asyncio.TimerHandle | None = None
        self._closed = False
        self.last_error = ""
        self.counters_: dict[str, int] = {"frames_sent": 0, "frames_received": 0,
                                          "rnr_naks_sent": 0, "rnr_retries": 0,
                                          "naks_sent": 0}

    @property
    def qpn(self) -> int:
        return self._qpn

    def address(self) -> QpAddress:
        return QpAddress(Transport.TCP, "::", self._qpn, 0, TCP_MTU_BYTES, 0, "tcp", "tcp",
                         "")

    async def connect(self, remote: QpAddress, mtu_bytes: int,
                      stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
                      ) -> None:
        if stream is None:
            raise RoceError("a tcp endpoint connects through netio's exchange (ctx.connect "
                            "or ctx.listen): it carries its data on that connection")
        self._reader, self._writer = stream
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            _tune_socket(sock, self._options)
        self._task = asyncio.get_running_loop().create_task(self._receive_loop())

    # -- requester ---------------------------------------------------------------------

    def post_send(self, requests: Sequence[SendRequest]) -> None:
        for r in requests:
            self._check(r)
        for r in requests:
            if self._error:
                # The first request after the peer left fails as a RoCE requester's would
                # once its retries ran out; the rest are flushed.
                status = WcStatus.RETRY_EXC_ERR if self._gone_unreported else (
                    WcStatus.WR_FLUSH_ERR)
                self._gone_unreported = False
                self._complete(r, status, force=True)
                continue
            item = _Outstanding(next(self._seq), r, self._options.rnr_retry)
            self._outstanding.append(item)
            if self._rnr_pending():
                continue  # go-back-N: sent when the retry after the RNR NAK goes out
            self._transmit(item)
        self._notify()

    def _check(self, r: SendRequest) -> None:
        if r.opcode not in _KIND_OF:
            raise RoceError(f"opcode {r.opcode!r} is not supported on the tcp backend")
        for s in r.segments:
            region = s.region
            if not isinstance(region, TcpRegion) or (
                    self._backend.lookup(region.lkey) is not region):
                raise RoceError(f"segment lkey {region.lkey:#x} is not registered here")
            if s.offset < 0 or s.length < 0 or s.offset + s.length > region.length:
                raise RegistrationError(f"segment [{s.offset}, {s.offset + s.length}) outside "
                                        f"the region of {region.length} bytes")
            if r.opcode in (WrOpcode.RDMA_READ, WrOpcode.ATOMIC_FETCH_AND_ADD,
                            WrOpcode.ATOMIC_CMP_AND_SWP) and not (
                    region.access & Access.LOCAL_WRITE):
                raise RoceError(f"{r.opcode.name} target lkey {region.lkey:#x} lacks "
                                "LOCAL_WRITE")
        if r.opcode in (WrOpcode.ATOMIC_FETCH_AND_ADD, WrOpcode.ATOMIC_CMP_AND_SWP) and (
                r.length_bytes != 8):
            raise RoceError(f"{r.opcode.name}: the local buffer must be exactly 8 bytes")
        if r.length_bytes > _MAX_PAYLOAD_BYTES:
            raise RoceError(f"message of {r.length_bytes} bytes exceeds 2**31")

    def _rnr_pending(self) -> bool:
        return self._retry_handle is not None

    def _transmit(self, item: _Outstanding) -> None:
        r = item.request
        kind = _KIND_OF[r.opcode]
        payload = _gather(r.segments) if kind in (_Kind.SEND, _Kind.WRITE) else b""
        length = r.length_bytes
        flags = _HAS_IMM if r.imm_data is not None else 0
        header = _FRAME.pack(kind, flags, 0, r.imm_data or 0, item.seq, r.remote_addr, r.rkey,
                             length if kind is not _Kind.FETCH_ADD else 8, r.compare_add,
                             r.swap)
        self._write(header + payload if len(payload) < 65536 else header, payload)

    def _write(self, first: bytes, payload: bytes) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        writer.write(first)
        if len(first) == _FRAME.size and payload:
            writer.write(payload)
        self.counters_["frames_sent"] += 1

    def _complete(self, r: SendRequest, status: WcStatus, *, force: bool = False) -> None:
        if force or status is not WcStatus.SUCCESS or r.signaled:
            byte_len = r.length_bytes if status is WcStatus.SUCCESS else 0
            self._cq.append(Completion(r.wr_id, status, _WC_OPCODE[r.opcode], self._qpn,
                                       byte_len))

    def _on_response(self, kind: int, status: int, seq: int, data: bytes) -> None:
        if not self._outstanding or self._outstanding[0].seq != seq:
            return  # a response to something already flushed
        item = self._outstanding[0]
        r = item.request
        if kind == _Kind.RNR:
            if item.rnr_left == 0:
                self._outstanding.popleft()
                self._complete(r, WcStatus.RNR_RETRY_EXC_ERR)
                self._enter_error()
                return
            if item.rnr_left != 7:
                item.rnr_left -= 1
            self.counters_["rnr_retries"] += 1
            delay_s = (rnr_timer_ns(status) or 10_000) / 1e9
            self._retry_handle = asyncio.get_running_loop().call_later(delay_s, self._resend)
            return
        self._outstanding.popleft()
        if kind == _Kind.NAK:
            self._complete(r, WcStatus(status))
            self._enter_error()
            return
        if r.opcode is WrOpcode.RDMA_READ:
            _scatter(r.segments, data)
        elif r.opcode in (WrOpcode.ATOMIC_FETCH_AND_ADD, WrOpcode.ATOMIC_CMP_AND_SWP):
            _scatter(r.segments, data[:8])
        self._complete(r, WcStatus.SUCCESS)

    def _resend(self) -> None:
        self._retry_handle = None
        if self._error:
            return
        for item in self._outstanding:  # go-back-N from the NAKed request
            self._transmit(item)

    # -- responder ---------------------------------------------------------------------

    def post_recv(self, requests: Sequence[RecvRequest]) -> None:
        for r in requests:
            for s in r.segments:
                region = s.region
                if not isinstance(region, TcpRegion) or not region.access & Access.LOCAL_WRITE:
                    raise RoceError("receive segments need a region with LOCAL_WRITE")
        for r in requests:
            if self._error:
                self._cq.append(Completion(r.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                           self._qpn))
            else:
                self._recvs.append(r)
        self._notify()

    async def _receive_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                header = await reader.readexactly(_FRAME.size)
                kind, flags, status, imm, seq, addr, rkey, length, cmp_add, swap = (
                    _FRAME.unpack(header))
                self.counters_["frames_received"] += 1
                data = b""
                if kind in (_Kind.SEND, _Kind.WRITE) or (
                        kind == _Kind.ACK and length):
                    if length > _MAX_PAYLOAD_BYTES:
                        raise ConnectionError("frame length exceeds 2**31")
                    data = await reader.readexactly(length)
                if kind >= _Kind.ACK:
                    self._on_response(kind, status, seq, data)
                else:
                    self._on_request(_Kind(kind), flags, imm, seq, addr, rkey, length,
                                     cmp_add, swap, data)
                self._notify()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
            self._peer_gone()
        except asyncio.CancelledError:
            raise

    def _respond(self, kind: _Kind, seq: int, status: int = 0, data: bytes = b"") -> None:
        self._write(_FRAME.pack(kind, 0, status, 0, seq, 0, 0, len(data), 0, 0) + data, b"")

    def _on_request(self, kind: _Kind, flags: int, imm: int, seq: int, addr: int, rkey: int,
                    length: int, cmp_add: int, swap: int, data: bytes) -> None:
        if self._error:
            return
        if self._rnr_skip_until is not None:
            if seq != self._rnr_skip_until:
                return  # after an RNR NAK, everything up to the resent request is dropped
            self._rnr_skip_until = None
        with_imm = bool(flags & _HAS_IMM)
        recv: RecvRequest | None = None
        if kind is _Kind.SEND or (kind is _Kind.WRITE and with_imm):
            if not self._recvs:
                self._rnr_skip_until = seq
                self.counters_["rnr_naks_sent"] += 1
                self._respond(_Kind.RNR, seq, self._options.min_rnr_timer)
                return
            recv = self._recvs[0]
        if kind is _Kind.SEND:
            assert recv is not None
            capacity = sum(s.length for s in recv.segments)
            self._recvs.popleft()
            if len(data) > capacity:
                self._nak(seq, WcStatus.REM_INV_REQ_ERR,
                          f"SEND of {len(data)} bytes into a receive of {capacity} bytes")
                self._cq.append(Completion(recv.wr_id, WcStatus.LOC_LEN_ERR, WcOpcode.RECV,
                                           self._qpn))
                self._enter_error()
                return
            _scatter(recv.segments, data)
            self._cq.append(Completion(recv.wr_id, WcStatus.SUCCESS, WcOpcode.RECV, self._qpn,
                                       len(data), imm if with_imm else None, 0,
                                       WcFlags.WITH_IMM if with_imm else WcFlags.NONE))
            self._respond(_Kind.ACK, seq)
            return
        target = self._backend.check_remote(rkey, addr, length, _NEEDED_ACCESS[kind])
        if target is None:
            self._nak(seq, WcStatus.REM_ACCESS_ERR, f"{kind.name} of {length} bytes at "
                      f"{addr:#x} with rkey {rkey:#x} refused (key, bounds or access)")
            self._enter_error()
            return
        if kind in (_Kind.FETCH_ADD, _Kind.COMPARE_SWAP) and addr % 8:
            self._nak(seq, WcStatus.REM_INV_REQ_ERR,
                      f"atomic at address {addr:#x} is not 8-byte aligned")
            self._enter_error()
            return
        if kind is _Kind.WRITE:
            target[:] = data
            if recv is not None:
                self._recvs.popleft()
                self._cq.append(Completion(recv.wr_id, WcStatus.SUCCESS,
                                           WcOpcode.RECV_RDMA_WITH_IMM, self._qpn, length, imm,
                                           0, WcFlags.WITH_IMM))
            self._respond(_Kind.ACK, seq)
        elif kind is _Kind.READ:
            self._respond(_Kind.ACK, seq, 0, bytes(target))
        else:
            original = int.from_bytes(target, "little")
            if kind is _Kind.FETCH_ADD:
                new = (original + cmp_add) & 0xFFFF_FFFF_FFFF_FFFF
            else:
                new = swap if original == cmp_add else original
            target[:] = new.to_bytes(8, "little")
            self._respond(_Kind.ACK, seq, 0, original.to_bytes(8, "little"))

    def _nak(self, seq: int, status: WcStatus, why: str) -> None:
        self.counters_["naks_sent"] += 1
        self.last_error = why
        self._respond(_Kind.NAK, seq, int(status))

    def diagnosis(self) -> str:
        return self.last_error

    # -- errors and closing --------------------------------------------------------------

    def _enter_error(self) -> None:
        """The error state: every outstanding request and receive completes flushed."""
        if self._error:
            return
        self._error = True
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None
        while self._outstanding:
            self._complete(self._outstanding.popleft().request, WcStatus.WR_FLUSH_ERR,
                           force=True)
        while self._recvs:
            r = self._recvs.popleft()
            self._cq.append(Completion(r.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                       self._qpn))
        self._notify()

    def _peer_gone(self) -> None:
        self.peer_gone = True
        if self._error:
            return
        if self._outstanding:
            self._complete(self._outstanding.popleft().request, WcStatus.RETRY_EXC_ERR)
        else:
            self._gone_unreported = True
        self._enter_error()

    def poll(self, max_entries: int) -> list[Completion]:
        out: list[Completion] = []
        cq = self._cq
        while cq and len(out) < max_entries:
            out.append(cq.popleft())
        return out

    def counters(self) -> dict[str, int]:
        return dict(self.counters_)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._enter_error()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 1.0)
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)


def _tune_socket(sock: socket.socket, options: QpOptions) -> None:
    """No Nagle (requests are whole frames), and a dead peer noticed in about the time a
    RoCE requester's retries would take (4.096 µs x 2**timeout x (retry_count + 1)),
    at least 1 s."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        budget_ms = (4096 << options.timeout) * (options.retry_count + 1) // 1_000_000
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1000, budget_ms))


class TcpBackend:
    """RC semantics over TCP; see :class:`netio.backends.base.Backend`."""

    name = "tcp"
    transport = Transport.TCP

    def __init__(self) -> None:
        self._regions: dict[int, TcpRegion] = {}
        self._next_index = 1
        self._next_addr = _ADDR_BASE
        self._local_ips: set[str] = set()

    def register(self, view: memoryview, access: Access) -> TcpRegion:
        index = self._next_index
        self._next_index += 1
        key = ((index << 8) | (index * 0x5B & 0xFF)) & 0xFFFFFFFF
        addr = self._next_addr
        self._next_addr += ((view.nbytes + _PAGE - 1) // _PAGE + 1) * _PAGE
        region = TcpRegion(key, key, addr, view.nbytes, Access(access), view)
        self._regions[key] = region
        return region

    def deregister(self, region: object) -> None:
        if not isinstance(region, TcpRegion) or self._regions.get(region.lkey) is not region:
            raise RoceError("not a registered region of this tcp context")
        del self._regions[region.lkey]

    def lookup(self, key: int) -> TcpRegion | None:
        return self._regions.get(key)

    def check_remote(self, rkey: int, addr: int, length: int,
                     access: Access) -> memoryview | None:
        """The bytes a remote access may touch, or None when it must be refused."""
        region = self._regions.get(rkey)
        if region is None or (region.access & access) != access:
            return None
        offset = addr - region.addr
        if offset < 0 or length < 0 or offset + length > region.length:
            return None
        return region.view[offset:offset + length]

    async def create_qp(self, local_ip: str, options: QpOptions, notify: Notify,
                        qp_type: QpType = QpType.RC, psn: int | None = None) -> TcpQp:
        if qp_type is not QpType.RC:
            raise RoceError(f"the tcp backend offers reliable connected (RC) endpoints only, "
                            f"not {QpType(qp_type).name}")
        self._local_ips.add(local_ip)
        return TcpQp(self, local_ip, options, notify)

    def describe(self) -> Description:
        ips = sorted(self._local_ips)
        return Description(
            backend="tcp", transport=Transport.TCP, local_ip=ips[0] if ips else "",
            notes=("the tcp backend carries RC semantics over TCP: the target's netio "
                   "performs one-sided operations with the same rkey, bounds and access "
                   "checks; no RDMA device is used",))

    async def close(self) -> None:
        self._regions.clear()


__all__ = ["TCP_MTU_BYTES", "TcpBackend", "TcpQp", "TcpRegion"]
