"""The soft engine's common case in C (``native/softpath.c``), per batch.

The pure-Python requester and responder stay the reference and keep every exception
case; this module only takes over the packets whose handling is fixed arithmetic:

* transmit (:func:`build_run`): consecutive SEND/WRITE packets of one RC/UC message
  over IPv4 (IBTA vol 1 §9.7.1-9.7.2): headers, ICRC and AckReq in C, payload iovecs
  pointing into the registered memory, so the only copy of a payload byte is the
  kernel's (``sendmmsg``); ACKs are built in C into the same run (one ``sendmmsg``
  with the requests around them);
* receive (:class:`RxPath`): a ``recvmmsg`` ring whose in-order packets are checked
  (ICRC, QP, source, P_Key, PSN, length, access as the responder does) in C: MIDDLE
  packets of an RC SEND/WRITE in progress and ONLY SEND/WRITE packets (into the posted
  receives, or the region the responder last checked for that QP's WRITEs) are copied
  straight into the registered buffer, their completions reported in a batch, and
  plain ACKs handed to the completer without decoding in Python; everything else
  (FIRST and LAST packets, NAKs, READ, atomics, errors, duplicates, gaps) goes to the
  engine.

UDP GSO and GRO are options of the soft driver (``gso``/``gro``: off, on, auto; or
``$NETIO_SOFT_GSO``/``$NETIO_SOFT_GRO``; GSO off, GRO auto by default). GSO
(:meth:`TxRun.send`): each run of equal-size packets (the MIDDLE packets of a message,
and the LAST when it is not larger; the FIRST carries a RETH and goes alone) leaves as
one ``sendmsg`` with a ``UDP_SEGMENT`` cmsg, still as iovecs into the registered memory;
the kernel cuts it back into the same datagrams, numbering their IPv4 IDs 0, 1, ... (the
ICRC covers the ID, so packet k of a send carries the ICRC for ID k; without that kernel
rxe dropped all but the first). GRO (:class:`RxRing` ``gro``; UDP receive only): the
socket has ``UDP_GRO`` on and the ring splits each coalesced buffer at the cmsg's segment
size in place (each slot a 64 KiB region, so a receive takes as many messages as without
GRO); the driver drains while a receive fills every message (:attr:`RxRing.full`: the
datagram count cannot tell, and taking a short count for an empty socket once made a
receiver fall behind a retransmitting peer). Measured (bench/bench_soft.py, loopback,
1 MiB WRITEs, UDP receive; three runs of 5, 5 and 7 rounds at load 3.7, 1.8, 2.4 at start; medians
of the per-round ratios): GSO 2.02x, 1.54x, 1.70x the sendmmsg path; GSO+GRO 1.22x,
1.00x, 1.04x GSO alone, GRO alone 1.11x, 0.96x, 0.96x (speed on a shared 2-core host is
noisy: round ranges span 0.7-1.9x); the receiver's CPU per MiB with GRO 0.84x, 0.85x,
0.81x with a GSO sender and 0.91x, 0.99x, 1.06x without; copies per payload byte
unchanged (2.016). GRO is ``auto`` by default (on with UDP receive): it changes nothing
on the wire, costs nothing measurable without coalescing, and saves the receiver CPU
where the sender (or a NIC's GRO) coalesces. GSO stays off
by default because a GSO send over loopback (or veth) reaches a *raw* socket as one
unsegmented IPv4 packet, so a peer on the same host in raw receive mode (the default as
root), and any capture there, would see super-packets; UDP sockets and the kernel's rxe
(lab interop with GSO on: 49 passed) see the segments. ``auto`` turns GSO on only where
this driver itself receives on a UDP socket. ``MSG_ZEROCOPY`` is not used: on loopback the
kernel copied every send anyway and 1 MiB messages went at 0.73x the copying send
(bench_soft ``zc``).

Copies are counted (:class:`CopyCounters`): payload bytes moved by netio in user space
on top of the kernel's one copy between socket and user memory.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netio import native
from netio.api.types import Access
from netio.roce.attributes import RECEIVE_STATES, SEND_STATES
from netio.roce.psn import psn_add
from netio.roce.verbs import Completion, RecvWr, SendWr, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.wire.bth import OPCODE_TABLE, Operation, Position, Transport

if TYPE_CHECKING:
    from netio.roce.memory import MemoryRegion
    from netio.roce.ports import QpPort
    from netio.roce.qp import QueuePair

#: Largest number of packets one transmit run holds.
MAX_RUN_PACKETS = 256
_RUN_CAPACITY = 256  # packets of a new run (more messages of the same QP are appended)
_SLOT_BYTES = 64  # NETIO_TX_SLOT_BYTES
_TRAILER_OFFSET = 48  # NETIO_TX_TRAILER_OFFSET
_OFF = 0xFFFFFFFF


def _opcodes() -> dict[tuple[int, int, bool], tuple[int, int, int, int]]:
    """(transport, operation, with_imm) -> (first, middle, last, only) opcodes."""
    by: dict[tuple[int, int, Position, bool], int] = {}
    for info in OPCODE_TABLE:
        if info is None or info.has_invalidate:
            continue
        by[(int(info.transport), int(info.operation), info.position, info.has_immediate)] = int(
            info.opcode)
    out: dict[tuple[int, int, bool], tuple[int, int, int, int]] = {}
    for transport in (Transport.RC, Transport.UC):
        for operation in (Operation.SEND, Operation.RDMA_WRITE):
            for imm in (False, True):
                t, o = int(transport), int(operation)
                out[(t, o, imm)] = (by[(t, o, Position.FIRST, False)],
                                    by[(t, o, Position.MIDDLE, False)],
                                    by[(t, o, Position.LAST, imm)],
                                    by[(t, o, Position.ONLY, imm)])
    return out


_OPCODES = _opcodes()
_WR_OP = {
    WrOpcode.SEND: (int(Operation.SEND), False),
    WrOpcode.SEND_WITH_IMM: (int(Operation.SEND), True),
    WrOpcode.RDMA_WRITE: (int(Operation.RDMA_WRITE), False),
    WrOpcode.RDMA_WRITE_WITH_IMM: (int(Operation.RDMA_WRITE), True),
}
_MIDDLE = {int(Operation.SEND): _OPCODES[(int(Transport.RC), int(Operation.SEND), False)][1],
           int(Operation.RDMA_WRITE): _OPCODES[(int(Transport.RC), int(Operation.RDMA_WRITE),
                                                False)][1]}


@dataclass(slots=True)
class CopyCounters:
    """Payload bytes netio handled and the bytes it copied in user space doing so.

    The kernel copies each byte once between the socket and user memory (the floor for
    UDP sockets); ``*_user_copy_bytes`` counts netio's own copies on top of that. Copies
    per payload byte = 1 + user copies / payload bytes."""

    tx_payload_bytes: int = 0
    tx_user_copy_bytes: int = 0
    rx_payload_bytes: int = 0
    rx_user_copy_bytes: int = 0

    def tx_copies_per_byte(self) -> float:
        return 1.0 + (self.tx_user_copy_bytes / self.tx_payload_bytes
                      if self.tx_payload_bytes else 0.0)

    def rx_copies_per_byte(self) -> float:
        return 1.0 + (self.rx_user_copy_bytes / self.rx_payload_bytes
                      if self.rx_payload_bytes else 0.0)


class TxRun:
    """Built packets of one QP (consecutive, of one or more messages), as iovecs into the
    registered memory: sent with one ``sendmmsg``."""

    __slots__ = ("_keep", "batch", "capacity")

    def __init__(self, capacity: int, max_iov: int) -> None:
        ffi = native.ffi
        hdr = ffi.new("uint8_t[]", _SLOT_BYTES * capacity)
        iov = ffi.new("netio_iov[]", max_iov)
        iovstart = ffi.new("uint32_t[]", capacity)
        iovcnt = ffi.new("uint32_t[]", capacity)
        batch = ffi.new("netio_tx_batch *")
        batch.hdr, batch.iov, batch.iovstart, batch.iovcnt = hdr, iov, iovstart, iovcnt
        batch.max_pkts, batch.max_iov = capacity, max_iov
        self.batch = batch
        self.capacity = capacity
        # header slots, iovec arrays and buffer handles must outlive the run
        self._keep: list[Any] = [hdr, iov, iovstart, iovcnt]

    @property
    def count(self) -> int:
        return int(self.batch.count)

    @property
    def payload_bytes(self) -> int:
        return int(self.batch.payload_bytes)

    def reset(self) -> None:
        """Empty again (its packets were sent: sendmmsg copied them), ready for reuse."""
        self.batch.count = 0
        self.batch.payload_bytes = 0
        del self._keep[4:]  # the registered memory the sent iovecs pointed into

    def packet(self, j: int) -> bytes:
        """Packet ``j`` as one bytes object (BTH .. ICRC), for links and tests."""
        ffi = native.ffi
        b = self.batch
        start = b.iovstart[j]
        return b"".join(ffi.buffer(b.iov[start + i].base, b.iov[start + i].len)[:]
                        for i in range(b.iovcnt[j]))

    def packets(self) -> list[bytes]:
        return [self.packet(j) for j in range(self.count)]

    def append_packet(self, packet: bytes) -> bool:
        """Append one whole packet (an ACK) copied into a header slot; False when it does
        not fit (the run is full or the packet is longer than a slot)."""
        if len(packet) > _SLOT_BYTES:
            return False
        return int(native.lib.netio_tx_append_packet(self.batch, packet, len(packet))) >= 0

    def append_ack(self, src_ip: int, dst_ip: int, src_port: int, pkey: int, dest_qp: int,
                   psn: int, aeth: int) -> bool:
        """Append an RC ACKNOWLEDGE built in C; False when the run is full."""
        return int(native.lib.netio_tx_ack(self.batch, src_ip, dst_ip, src_port, pkey,
                                           dest_qp, psn, aeth)) >= 0

    def send(self, fd: int, dst_ip: int, start: int, *, gso: bool = False) -> int:
        """sendmmsg packets ``start``..; how many went, or -errno when none did. ``gso``:
        each run of equal-size packets (then at most one shorter) goes as one UDP GSO
        datagram (``UDP_SEGMENT``), which the kernel cuts back into the same packets."""
        if gso:
            return int(native.lib.netio_tx_send_gso(fd, dst_ip, self.batch, start))
        return int(native.lib.netio_tx_send(fd, dst_ip, self.batch, start))


class TxScratch:
    """One engine's reusable C arguments for :func:`build_run` (a message description, an
    SGE array, the AckReq counter) and the host addresses of the regions it sends from:
    allocating them per message cost more than building the packets."""

    _SGES = 16

    def __init__(self) -> None:
        ffi = native.ffi
        self.msg = ffi.new("netio_tx_msg *")
        self.sge = ffi.new("netio_sge[]", self._SGES)
        self.noack = ffi.new("uint32_t *")
        self._addresses: dict[int, tuple[MemoryRegion, int]] = {}
        # what msg's per-connection fields were last set for: (QP, its attributes object,
        # operation and immediate) -- attributes are frozen and replaced on every modify,
        # so the same object means the same addresses, port, P_Key, MTU and opcodes
        self.msg_for: tuple[object, object, int, bool] | None = None

    def address(self, mr: MemoryRegion) -> int:
        """The host address of ``mr``'s buffer."""
        got = self._addresses.get(id(mr))
        if got is not None and got[0] is mr:
            return got[1]
        if len(self._addresses) >= 1024:
            self._addresses = {k: v for k, v in self._addresses.items() if v[0].registered}
        address = host_address(mr, writable=False)
        if address is None:
            raise ValueError("region buffer has no address")
        self._addresses[id(mr)] = (mr, address)
        return address


def host_address(mr: MemoryRegion, *, writable: bool) -> int | None:
    """Where ``mr``'s bytes are in this process (None: not writable when asked to be).

    No buffer handle is kept: one left in a reference cycle crashed the cyclic garbage
    collector (the memoryview it exports from cannot be cleared). The address stays valid
    while the region object lives: its memoryview holds an export of the underlying
    object, which can then be neither resized nor freed. Users keep ``mr`` alive with
    the address."""
    ffi = native.ffi
    try:
        handle = ffi.from_buffer("uint8_t[]", mr.buffer, require_writable=writable)
    except (TypeError, ValueError, BufferError):
        return None
    address = int(ffi.cast("uintptr_t", handle))
    ffi.release(handle)
    return address


def build_run(qp: QpPort, wr: SendWr, length: int, npkts: int, k0: int, psn0: int,
              count: int, noack_pkts: int, into: TxRun | None = None,
              scratch: TxScratch | None = None) -> tuple[TxRun, int, int] | None:
    """Packets ``k0 .. k0+count-1`` of ``wr`` (first PSN ``psn0``) appended to ``into`` when
    it has room, else to a new run: (the run, the new AckReq counter, the payload bytes
    added); None when the C path does not apply (no native module, not IPv4, not a
    SEND/WRITE of RC/UC): the caller then builds them in Python."""
    lib, ffi = native.lib, native.ffi
    op = _WR_OP.get(wr.opcode)
    attrs = qp.attrs
    qp_type = int(qp.qp_type)
    if op is None or lib is None or qp_type not in (2, 3) or count <= 0:
        return None
    dst = attrs.remote_ip
    local = qp.engine.local_ip
    if not isinstance(dst, ipaddress.IPv4Address) or not isinstance(
            local, ipaddress.IPv4Address):
        return None
    operation, with_imm = op
    transport = int(Transport.RC) if qp_type == 2 else int(Transport.UC)
    first, middle, last, only = _OPCODES[(transport, operation, with_imm)]
    sges = wr.sg_list
    if scratch is None or len(sges) > TxScratch._SGES:
        scratch = None
        msg = ffi.new("netio_tx_msg *")
        sge = ffi.new("netio_sge[]", max(1, len(sges)))
        noack = ffi.new("uint32_t *")
    else:
        msg, sge, noack = scratch.msg, scratch.sge, scratch.noack
    noack[0] = noack_pkts
    key = (qp, attrs, operation, with_imm)
    if scratch is None or scratch.msg_for != key:
        # per connection and operation: set once for a run of messages alike (a batch)
        msg.src_ip = int(local)
        msg.dst_ip = int(dst)
        msg.src_port = qp.udp_src_port
        msg.pkey = attrs.pkey
        msg.dest_qp = attrs.dest_qp_num
        msg.mtu = attrs.path_mtu_bytes
        msg.rc = 1 if qp_type == 2 else 0
        msg.has_reth = 1 if operation == int(Operation.RDMA_WRITE) else 0
        msg.has_imm = 1 if with_imm else 0
        msg.op_first, msg.op_middle, msg.op_last, msg.op_only = first, middle, last, only
        if scratch is not None:
            scratch.msg_for = key
    msg.npkts = npkts
    # IBTA §9.2.3 (SE): only on the last packet of a SEND or of a message with immediate.
    msg.solicited = 1 if wr.solicited and (operation == int(Operation.SEND) or with_imm) else 0
    msg.imm = wr.imm_data or 0
    msg.rkey = wr.rkey
    msg.va = wr.remote_addr
    msg.length = length
    handles: list[Any] = []
    for i, s in enumerate(sges):
        if scratch is not None:
            sge[i].ptr = ffi.cast("uint8_t *", scratch.address(s.mr) + s.offset)
            handles.append(s.mr)  # the run keeps the memory its iovecs point into
        else:
            handle = ffi.from_buffer("uint8_t[]", s.mr.buffer)
            handles.append(handle)
            sge[i].ptr = handle + s.offset
        sge[i].len = s.length
    for run in (into, None):
        if run is None:
            if into is None and count > _RUN_CAPACITY:
                run = TxRun(count, 3 * count + len(sges) + 1)
            elif len(sges) <= TxScratch._SGES:
                run = _pooled_run()
            else:
                run = TxRun(_RUN_CAPACITY, 4 * _RUN_CAPACITY + len(sges) + 1)
        if lib.netio_tx_build(msg, sge, len(sges), k0, psn0, count, noack, run.batch) >= 0:
            run._keep += handles
            mtu = attrs.path_mtu_bytes  # the payload bytes of packets k0 .. k0+count-1
            return run, int(noack[0]), min(length, (k0 + count) * mtu) - min(length, k0 * mtu)
    return None


#: a GRO receive's region (softpath.c GRO_REGION: a coalesced buffer is at most 64 KiB)
#: and the most datagrams one region holds (UDP_GRO_CNT_MAX)
_GRO_REGION_BYTES, _GRO_REGION_SEGS = 65536, 64
#: linux/udp.h
UDP_GRO = 104


class RxRing:
    """``nslots`` receive slots of ``slot_bytes`` filled by one ``recvmmsg``. ``gro``: the
    socket has ``UDP_GRO`` on; each slot is then a 64 KiB region (``slot_bytes`` is raised
    to that: a coalesced buffer may fill it) and the C side splits each coalesced buffer
    back into its datagrams in place (up to 64 a region, so ``count`` may exceed
    ``nslots``). A GRO ring offers as many messages per receive as a plain one: with fewer,
    a peer that does not coalesce would be received in smaller batches."""

    def __init__(self, nslots: int = 64, slot_bytes: int = 65536, *, raw: bool = False,
                 gro: bool = False) -> None:
        ffi = native.ffi
        if gro:
            slot_bytes = max(slot_bytes, _GRO_REGION_BYTES)
        self.nslots = nslots
        self.slot_bytes = slot_bytes
        self.raw = raw
        self.gro = gro
        cap = nslots * _GRO_REGION_SEGS if gro else nslots
        self._buf = ffi.new("uint8_t[]", nslots * slot_bytes)
        self._len = ffi.new("uint32_t[]", cap)
        self._trunc = ffi.new("uint8_t[]", cap)
        self._src_ip = ffi.new("uint32_t[]", cap)
        self._src_port = ffi.new("uint32_t[]", cap)
        self._off = ffi.new("uint32_t[]", cap)
        r = ffi.new("netio_rx_ring *")
        r.buf, r.slot_bytes, r.nslots, r.raw = self._buf, slot_bytes, nslots, int(raw)
        r.len, r.truncated, r.src_ip, r.src_port = (self._len, self._trunc, self._src_ip,
                                                    self._src_port)
        r.off, r.max_count, r.gro = self._off, cap, int(gro)
        self.ring = r
        self.view = memoryview(ffi.buffer(self._buf))

    @property
    def count(self) -> int:
        return int(self.ring.count)

    @property
    def full(self) -> bool:
        """The last :meth:`recv` filled every message ``recvmmsg`` offered: more may be
        waiting. With ``gro`` the datagram count cannot say so: a receive offers one
        message per 64 KiB region (fewer than ``nslots``) and a message may hold up to 64
        datagrams."""
        return bool(self.ring.full)

    @property
    def coalesced(self) -> int:
        """With ``gro``: the received buffers so far that held more than one datagram."""
        return int(self.ring.coalesced)

    def recv(self, fd: int) -> int:
        """Receive what is waiting (non-blocking): the count, or -errno."""
        return int(native.lib.netio_rx_recv(fd, self.ring))

    def fill(self, datagrams: list[tuple[bytes, ipaddress.IPv4Address, int]]) -> None:
        """Put datagrams in the ring as a receive would (tests, simulations)."""
        if len(datagrams) > self.nslots:
            raise ValueError("more datagrams than slots")
        for i, (data, src, port) in enumerate(datagrams):
            start = i * self.slot_bytes
            self.view[start:start + len(data)] = data
            self._off[i] = start
            self._len[i] = len(data)
            self._trunc[i] = 0
            self._src_ip[i] = int(src)
            self._src_port[i] = port
        self.ring.count = len(datagrams)

    def slot(self, i: int) -> memoryview:
        start = int(self._off[i])
        return self.view[start:start + int(self._len[i])]

    def source(self, i: int) -> tuple[ipaddress.IPv4Address, int]:
        return ipaddress.IPv4Address(int(self._src_ip[i])), int(self._src_port[i])

    def dest_qp(self, i: int) -> int:
        """The BTH destination QP of slot ``i`` (-1 when too short)."""
        data = self.slot(i)
        off = 28 if self.raw else 0
        if len(data) < off + 12:
            return -1
        return int.from_bytes(data[off + 5:off + 8], "big")


_MAX_RECVS = 64  # posted receives loaded into one context
_MAX_WC = 256  # completions of one native run
_ACK_EVENT = 3
_WC_KIND = ((WcOpcode.RECV, WcFlags.NONE), (WcOpcode.RECV, WcFlags.WITH_IMM),
            (WcOpcode.RECV_RDMA_WITH_IMM, WcFlags.WITH_IMM))


class RxPath:
    """The receive fast path of one engine: a context per RC QP, refreshed from (and
    written back to) that QP's responder. With a message in progress the C path places
    its MIDDLE packets; with none it places ONLY SEND packets into the posted receives
    loaded from the QP's receive queue and ONLY WRITE packets into the region the
    responder last checked for that QP's WRITEs (``Responder.write_cache``), and reports
    their completions; anything else goes to the engine."""

    def __init__(self, local_ip: ipaddress.IPv4Address, capacity: int = 64) -> None:
        ffi = native.ffi
        self.local_ip = int(local_ip)
        self.capacity = capacity
        self._ctx = ffi.new("netio_rx_fast[]", capacity)
        self._ack = ffi.new("uint32_t *")
        self._nwc = ffi.new("uint32_t *")
        self._wc = ffi.new("netio_rx_wc[]", _MAX_WC)
        self._qps: list[QueuePair | None] = [None] * capacity
        self._recvs: list[list[RecvWr]] = [[] for _ in range(capacity)]
        self._recv_addr = [ffi.new("uint64_t[]", _MAX_RECVS) for _ in range(capacity)]
        self._recv_room = [ffi.new("uint64_t[]", _MAX_RECVS) for _ in range(capacity)]
        for i in range(capacity):
            self._ctx[i].middle_opcode = _OFF
            self._ctx[i].recv_addr = self._recv_addr[i]
            self._ctx[i].recv_room = self._recv_room[i]
        self._index: dict[int, int] = {}
        self._addresses: dict[int, tuple[MemoryRegion, int]] = {}
        self.copies = CopyCounters()

    def forget(self, qp_num: int) -> None:
        i = self._index.pop(qp_num, None)
        if i is not None:
            c = self._ctx[i]
            c.middle_opcode = _OFF
            c.idle = 0
            c.qpn = _OFF
            self._qps[i] = None
            self._recvs[i] = []

    def _address(self, mr: MemoryRegion) -> int | None:
        """The host address of ``mr``'s buffer (None: not writable)."""
        got = self._addresses.get(id(mr))
        if got is not None and got[0] is mr:
            return got[1]
        address = host_address(mr, writable=True)
        if address is None:
            return None
        if len(self._addresses) >= 1024:
            self._addresses = {k: v for k, v in self._addresses.items() if v[0].registered}
        self._addresses[id(mr)] = (mr, address)
        return address

    def refresh(self, qp: QueuePair) -> None:
        """Load ``qp``'s responder state into its context (or turn the context off)."""
        i = self._index.get(qp.qp_num)
        attrs = qp.attrs
        if not (int(qp.qp_type) == 2 and qp.state in RECEIVE_STATES
                and isinstance(attrs.remote_ip, ipaddress.IPv4Address)):
            if i is not None:
                self.forget(qp.qp_num)
            return
        if i is None:
            free = [k for k in range(self.capacity) if self._qps[k] is None]
            if not free:
                return
            i = free[0]
            self._index[qp.qp_num] = i
            self._qps[i] = qp
        r = qp.responder
        c = self._ctx[i]
        c.qpn = qp.qp_num
        c.remote_ip = int(attrs.remote_ip)
        c.pkey = attrs.pkey
        c.expected_psn = r.expected_psn
        c.msn = r.msn
        c.mtu = attrs.path_mtu_bytes
        c.placed_packets = 0
        c.placed_bytes = 0
        c.ack_owed = 0
        c.recv_used = 0
        c.acks = 1 if qp.state in SEND_STATES else 0
        ctx = r.ctx
        c.middle_opcode = _OFF
        if ctx is None:
            c.idle = 1
            self._load_recvs(i, qp)
            self._load_write(c, qp)
            return
        c.idle = 0
        target = None
        if ctx.operation is Operation.RDMA_WRITE:
            if ctx.mr is not None and attrs.access & Access.REMOTE_WRITE:
                target = (ctx.mr, ctx.mr_offset + ctx.received_bytes,
                          ctx.dma_length - ctx.received_bytes)
        elif ctx.operation is Operation.SEND and ctx.recv is not None:
            skip = ctx.received_bytes
            for s in ctx.recv.sg_list:
                if skip < s.length:
                    target = (s.mr, s.offset + skip, s.length - skip)
                    break
                skip -= s.length
        if target is None:
            return
        mr, offset, room = target
        base = self._address(mr)
        if base is None:
            return
        c.middle_opcode = _MIDDLE[int(ctx.operation)]
        c.dst = native.ffi.cast("uint8_t *", base + offset)
        c.room = room
        c.received = ctx.received_bytes

    def _load_recvs(self, i: int, qp: QueuePair) -> None:
        """The head of ``qp``'s receive queue (single-SGE receives) into context ``i``;
        what is loaded already and still at the head is kept."""
        c = self._ctx[i]
        loaded = self._recvs[i]
        rq = qp.rq
        if qp.srq is not None:
            loaded.clear()
            c.nrecv = 0
            return
        n = len(loaded)
        if n and not (n <= len(rq) and rq[0] is loaded[0] and rq[n - 1] is loaded[-1]):
            loaded.clear()
            n = 0
        addr, room = self._recv_addr[i], self._recv_room[i]
        while n < _MAX_RECVS and n < len(rq):
            wr = rq[n]
            if len(wr.sg_list) != 1:
                break
            s = wr.sg_list[0]
            base = self._address(s.mr)
            if base is None:
                break
            addr[n] = base + s.offset
            room[n] = s.length
            loaded.append(wr)
            n += 1
        c.nrecv = n

    def _load_write(self, c: Any, qp: QueuePair) -> None:
        cache = qp.responder.write_cache
        c.write_ok = 0
        if cache is None or not qp.attrs.access & Access.REMOTE_WRITE:
            return
        rkey, mr = cache
        if mr.pd is not qp.pd or not mr.registered:
            return
        base = self._address(mr)
        if base is None:
            return
        c.wc_rkey = rkey
        c.wc_va = mr.addr
        c.wc_len = mr.length
        c.wc_addr = base
        c.write_ok = 1

    def refresh_all(self) -> None:
        for qp in list(self._qps):
            if qp is not None:
                self.refresh(qp)

    def run(self, ring: RxRing, start: int, verify_icrc: bool, coalesce: bool,
            on_ack: Callable[[QueuePair, int], None]
            ) -> tuple[int, int, list[tuple[QueuePair, int]]]:
        """Take what the C path can from slot ``start``: (next slot, packets taken, the
        QPs owed an ACK with its PSN). The responders are brought up to date as the
        engine would have left them, then, in arrival order, completions are pushed to
        the QPs' receive CQs and plain ACKs go to ``on_ack(qp, psn)`` (the completer)."""
        j = int(native.lib.netio_rx_fast_run(ring.ring, start, self.local_ip,
                                             1 if verify_icrc else 0, self._ctx,
                                             self.capacity, 1 if coalesce else 0, self._wc,
                                             _MAX_WC, self._nwc, self._ack))
        if j == start:
            return j, 0, []
        owed: list[tuple[QueuePair, int]] = []
        nbytes_all = 0
        # The events in arrival order: completions, each from the receive it consumed
        # (still loaded: the receive queues are popped below), and ACKs.
        wc = self._wc
        for k in range(int(self._nwc[0])):
            w = wc[k]
            i = int(w.ctx)
            qp = self._qps[i]
            if qp is None:
                continue
            kind = int(w.kind)
            if kind == _ACK_EVENT:
                on_ack(qp, int(w.imm))
                continue
            recv = self._recvs[i][int(w.recv)]
            opcode, flags = _WC_KIND[kind]
            qp.recv_cq.push(Completion(recv.wr_id, WcStatus.SUCCESS, opcode, qp.qp_num,
                                       int(w.byte_len), int(w.imm) if flags else None, 0,
                                       flags))
        for i in self._index.values():
            qp = self._qps[i]
            if qp is None:
                continue
            c = self._ctx[i]
            n = int(c.placed_packets)
            if not n:
                continue
            r = qp.responder
            ctx = r.ctx
            r.expected_psn = int(c.expected_psn)
            r.msn = int(c.msn)
            r.nak_sent = False
            if ctx is not None:
                ctx.received_bytes = int(c.received)
            used = int(c.recv_used)
            if used:
                loaded = self._recvs[i]
                for k in range(used):
                    if qp.take_recv() is not loaded[k]:
                        raise RuntimeError("native receive path: receive queue changed "
                                           "under a run")
                del loaded[:used]
                left = len(loaded)
                ffi = native.ffi
                ffi.memmove(self._recv_addr[i], self._recv_addr[i] + used, 8 * left)
                ffi.memmove(self._recv_room[i], self._recv_room[i] + used, 8 * left)
                c.nrecv = left
                c.recv_used = 0
            if c.ack_owed:
                owed.append((qp, int(c.ack_psn)))
                c.ack_owed = 0
            nbytes_all += int(c.placed_bytes)
            c.placed_packets = 0
            c.placed_bytes = 0
        a = int(self._ack[0])
        if a != _OFF and a < self.capacity:
            qp = self._qps[a]
            if qp is not None:
                owed.append((qp, psn_add(qp.responder.expected_psn, -1)))
        self.copies.rx_payload_bytes += nbytes_all
        self.copies.rx_user_copy_bytes += nbytes_all  # ring slot -> registered buffer
        return j, j - start, owed


SlowPath = Callable[[int], None]

#: Sent runs kept for reuse: five C allocations per run cost more than a 64-byte
#: message's build and send (one per message on a ping-pong). A list's append and pop
#: are atomic, so drivers in several threads may share it.
_free_runs: list[TxRun] = []
_FREE_RUNS_KEPT = 16
_POOLED_IOV = 4 * _RUN_CAPACITY + TxScratch._SGES + 1


def _pooled_run() -> TxRun:
    try:
        return _free_runs.pop()
    except IndexError:
        return TxRun(_RUN_CAPACITY, _POOLED_IOV)


def recycle(run: TxRun) -> None:
    """``run`` was sent (or given up) and nothing refers to it any more: keep it for reuse
    (a driver calls this; a run of another size is left to the garbage collector)."""
    if (run.capacity == _RUN_CAPACITY and int(run.batch.max_iov) == _POOLED_IOV
            and len(_free_runs) < _FREE_RUNS_KEPT):
        run.reset()
        _free_runs.append(run)


def small_run() -> TxRun:
    """An empty run for packets the engine built whole (ACKs) and what follows them."""
    return _pooled_run()


__all__ = ["MAX_RUN_PACKETS", "UDP_GRO", "CopyCounters", "RxPath", "RxRing", "TxRun", "TxScratch",
           "build_run", "recycle", "small_run"]
