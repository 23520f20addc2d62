"""The sans-I/O RoCEv2 engine: one per local IP address (GID), holding QPs, CQs, SRQs.

Modelled on aioquic's connection API: no sockets, no clocks. A driver feeds received
UDP payloads with ``receive_datagram`` (or whole IP packets with ``receive_ip_packet``),
sends what ``datagrams_to_send`` returns, and calls ``handle_timer`` at the deadline that
``get_timer`` gives. Time is always passed in as integer nanoseconds.

ICRC (IBTA Annex A17.3.3). Outgoing packets carry an ICRC computed for the IPv4 header a
Linux UDP socket with ``IP_PMTUDISC_DO`` emits: IP ID 0, DF set (TOS/TTL/checksums are
masked out of the ICRC). On receive, ``receive_ip_packet`` verifies the ICRC over the IP
packet as received. ``receive_datagram`` cannot see the IP header: it verifies the ICRC
against a reconstructed header when the caller passes ``src_port`` and the IP ID (``ip_id``,
0 by default, which holds between netio endpoints); with ``ip_id=None`` (a peer such as
kernel rxe that sends non-zero IP IDs, seen through a UDP socket) the ICRC is not checked
and the UDP checksum is what protects the packet. Packets failing the check are dropped.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from netio import native as _native
from netio.errors import DecodeError, EncodeError, RoceError
from netio.roce.attributes import RECEIVE_STATES, SEND_STATES
from netio.roce.completer import Completer
from netio.roce.memory import ProtectionDomain
from netio.roce.native_path import RxPath, RxRing, TxRun, TxScratch, build_run, small_run
from netio.roce.ports import QpPort
from netio.roce.psn import psn_add, psn_diff
from netio.roce.qp import QpAttributes, QpState, QpType, QueuePair
from netio.roce.queues import CompletionQueue, SharedReceiveQueue
from netio.roce.verbs import Completion, IpAddress, SendWr
from netio.wire.bth import Bth, Opcode, Operation, Transport
from netio.wire.ext import CREDITS_INVALID, Aeth, AtomicAckEth, AtomicEth, Deth, ImmDt, Reth
from netio.wire.icrc import compute_icrc, verify_icrc
from netio.wire.ip import Ecn, IpProto, Ipv4, Ipv6
from netio.wire.packet import RoceHeaders, build_roce_udp_payload, decode_roce
from netio.wire.udp import ROCEV2_UDP_PORT, Udp

FIRST_QPN = 0x11  # rxe hands out QPNs from RXE_MIN_QP_INDEX + 1; QP0/QP1 are special
_QPN_LIMIT = 0xFFFFFF


@dataclass(frozen=True, slots=True)
class OutgoingDatagram:
    """One UDP datagram to send to ``dst_ip``:4791 from ``src_udp_port``.

    ``payload`` is BTH .. ICRC; ``dscp``/``ecn`` go into the IP header (per QP).
    """

    dst_ip: IpAddress
    src_udp_port: int
    dscp: int
    ecn: int
    payload: bytes


@dataclass(frozen=True, slots=True, eq=False)
class OutgoingRun:
    """Consecutive packets of one message to ``dst_ip``:4791 from ``src_udp_port``,
    built by the native path as iovecs into registered memory (``run``)."""

    dst_ip: IpAddress
    src_udp_port: int
    dscp: int
    ecn: int
    run: TxRun

    def datagrams(self) -> list[OutgoingDatagram]:
        return [OutgoingDatagram(self.dst_ip, self.src_udp_port, self.dscp, self.ecn, p)
                for p in self.run.packets()]


@dataclass(slots=True)
class EngineStats:
    """Counters (cumulative since the engine was created).

    ``*_payload_bytes``/``*_user_copy_bytes``: payload bytes sent/received and the bytes
    netio copied in user space doing so, on top of the kernel's one copy (so copies per
    payload byte = 1 + user copy bytes / payload bytes). The pure-Python path counts its
    known copies (gather, packet assembly; receive buffer, decode, placement) as a lower
    bound; the native path has none on send and one (ring slot to registered buffer) on
    receive. ``*_native_packets``: packets the C path built, or took on receive (placed a
    payload, completed a receive, or passed a plain ACK to the completer)."""

    datagrams_sent: int = 0
    datagrams_received: int = 0
    dropped_icrc: int = 0
    dropped_malformed: int = 0
    dropped_unknown_qp: int = 0
    dropped_state: int = 0
    dropped_response: int = 0
    tx_payload_bytes: int = 0
    tx_user_copy_bytes: int = 0
    rx_payload_bytes: int = 0
    rx_user_copy_bytes: int = 0
    tx_native_packets: int = 0
    rx_native_packets: int = 0


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a closed RC QP's responder still answers for a while (TCP's TIME_WAIT for
    RoCE): a duplicate of an executed SEND/WRITE gets the ACK again (IBTA C9-105), so
    that a peer whose last ACK was lost completes instead of exhausting its retries."""

    qp_num: int
    remote_ip: IpAddress
    pkey: int
    dest_qp_num: int
    src_udp_port: int
    dscp: int
    ecn: int
    expected_psn: int
    msn: int
    until_ns: int


#: The longest a closed QP keeps answering duplicates (its peer's retries with a zero,
#: i.e. infinite, ACK timeout are capped at this).
MAX_LINGER_NS = 2_000_000_000


def linger_ns(attrs: QpAttributes) -> int:
    """How long a peer with the same retry settings keeps retransmitting its last request:
    (retry_cnt + 1) ACK timeouts of 4.096 us * 2**timeout (IBTA §9.7.6.1.3)."""
    if attrs.timeout == 0:
        return MAX_LINGER_NS
    return min(MAX_LINGER_NS, (attrs.retry_cnt + 1) * (4096 << attrs.timeout))


def _ip(value: IpAddress | str) -> IpAddress:
    return value if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address) else (
        ipaddress.ip_address(value))


class RoceEngine:
    """All QPs of one local address. See the module docstring for the driver contract."""

    def __init__(self, local_ip: IpAddress | str, *, verify_icrc: bool = True,
                 native: bool | None = None, coalesce_acks: bool | None = None) -> None:
        """``native``: use the C data path (``netio.roce.native_path``) for the common
        case; None (default) uses it when the compiled module is loaded.
        ``coalesce_acks``: a responder holds the ACKs it owes for the packets of a receive
        batch (:meth:`receive_ring`) and sends only the newest when the driver next
        collects output (:meth:`output_to_send`/:meth:`datagrams_to_send`): IBTA
        §9.7.5.1.1, one ACK covers every earlier PSN. A driver that lets the application
        answer a completion before it collects output sends the ACK together with the
        answer. On by default (None) with the native path; a held ACK is released before
        any other response of its QP, and before the QP leaves the receive states
        (close), so that no executed request goes unacknowledged."""
        self.local_ip = _ip(local_ip)
        self.verify_icrc = verify_icrc
        self.native = _native.AVAILABLE if native is None else bool(native and _native.AVAILABLE)
        self.stats = EngineStats()
        self._qps: dict[int, QueuePair] = {}
        self._completers: dict[int, Completer] = {}
        self._qpn_counter = itertools.count(FIRST_QPN)
        self._outbox: list[OutgoingDatagram | OutgoingRun] = []
        self._outbox_pkts = 0
        self.coalesce_acks = (coalesce_acks is None or bool(coalesce_acks)) and self.native
        self._coalescing = False
        self._held: list[QpPort] = []
        self._rx_path = (RxPath(self.local_ip) if self.native
                         and isinstance(self.local_ip, ipaddress.IPv4Address) else None)
        self._ready: dict[int, QueuePair] = {}  # QPs that may have packets to generate
        self._tombstones: dict[int, Tombstone] = {}
        self._tx_scratch: TxScratch | None = None

    # -- verbs objects -------------------------------------------------------------------

    def alloc_pd(self) -> ProtectionDomain:
        return ProtectionDomain()

    def create_cq(self) -> CompletionQueue:
        return CompletionQueue()

    def create_srq(self, pd: ProtectionDomain) -> SharedReceiveQueue:
        return SharedReceiveQueue(pd)

    def create_qp(self, pd: ProtectionDomain, qp_type: QpType, send_cq: CompletionQueue,
                  recv_cq: CompletionQueue | None = None, *,
                  srq: SharedReceiveQueue | None = None, qp_num: int | None = None,
                  sq_sig_all: bool = False) -> QueuePair:
        """Create a QP in RESET; ``qp_num`` defaults to the next free number from 0x11."""
        if qp_num is None:
            qp_num = next(self._qpn_counter)
            while qp_num in self._qps:
                qp_num = next(self._qpn_counter)
        if not 2 <= qp_num <= _QPN_LIMIT or qp_num in self._qps:
            raise RoceError(f"QP number {qp_num:#x} is reserved, out of range or in use")
        qp = QueuePair(self, qp_num, QpType(qp_type), pd, send_cq,
                       recv_cq if recv_cq is not None else send_cq, srq, sq_sig_all)
        self._qps[qp_num] = qp
        self._completers[qp_num] = Completer(qp.requester)
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        if self._qps.get(qp.qp_num) is not qp:
            raise RoceError(f"QP {qp.qp_num:#x} does not belong to this engine")
        qp.responder.release_ack()  # its executed requests are acknowledged first
        del self._qps[qp.qp_num]
        del self._completers[qp.qp_num]
        self._ready.pop(qp.qp_num, None)
        if self._rx_path is not None:
            self._rx_path.forget(qp.qp_num)

    def linger(self, qp: QueuePair, until_ns: int) -> None:
        """Keep answering duplicates of ``qp``'s executed requests until ``until_ns``
        after it is destroyed (see :class:`Tombstone`); call before closing an RC QP that
        is still connected. Nothing for other QPs."""
        if qp.qp_type is not QpType.RC or qp.state not in (QpState.RTS, QpState.SQD):
            return
        a = qp.attrs
        if a.remote_ip is None:
            return
        r = qp.responder
        r.release_ack()
        self._tombstones[qp.qp_num] = Tombstone(qp.qp_num, a.remote_ip, a.pkey, a.dest_qp_num,
                                                qp.udp_src_port, a.dscp, a.ecn, r.expected_psn,
                                                r.msn, until_ns)

    def lingering_until_ns(self, now_ns: int) -> int | None:
        """When the last tombstone expires (None: none left after ``now_ns``)."""
        self._tombstones = {n: t for n, t in self._tombstones.items() if t.until_ns > now_ns}
        return max((t.until_ns for t in self._tombstones.values()), default=None)

    def _answer_tombstone(self, tomb: Tombstone, hdrs: RoceHeaders, src: IpAddress,
                          now_ns: int) -> bool:
        """A request for a closed QP: re-ACK it when it duplicates an executed SEND/WRITE."""
        if now_ns >= tomb.until_ns:
            del self._tombstones[tomb.qp_num]
            return False
        bth = hdrs.bth
        info = bth.info
        if (info.transport is not Transport.RC or info.is_response or src != tomb.remote_ip
                or bth.pkey != tomb.pkey or psn_diff(bth.psn, tomb.expected_psn) >= 0
                or info.operation not in (Operation.SEND, Operation.RDMA_WRITE)):
            return False
        psn = psn_add(tomb.expected_psn, -1)
        ack = Bth(Opcode.RC_ACKNOWLEDGE, False, False, 0, 0, tomb.pkey, False, False,
                  tomb.dest_qp_num, False, psn)
        data = build_roce_udp_payload(src_ip=self.local_ip, dst_ip=tomb.remote_ip,
                                      src_port=tomb.src_udp_port, bth=ack,
                                      aeth=Aeth.ack(tomb.msn), payload=b"")
        self._outbox.append(OutgoingDatagram(tomb.remote_ip, tomb.src_udp_port, tomb.dscp,
                                             tomb.ecn, data))
        self._outbox_pkts += 1
        return True

    def qp(self, qp_num: int) -> QueuePair | None:
        return self._qps.get(qp_num)

    def poll_cq(self, cq: CompletionQueue, max_entries: int = 16) -> list[Completion]:
        return cq.poll(max_entries)

    def qp_changed(self, qp: QpPort) -> None:
        """A QP may have new packets to send (new WR, window opened, retry)."""
        mine = self._qps.get(qp.qp_num)
        if mine is not None:
            self._ready[qp.qp_num] = mine

    # -- output --------------------------------------------------------------------------

    def transmit(self, qp: QpPort, dst_ip: IpAddress | None, bth: Bth, payload: bytes, *,
                 reth: Reth | None = None, aeth: Aeth | None = None,
                 atomic_eth: AtomicEth | None = None, atomic_ack_eth: AtomicAckEth | None = None,
                 imm_dt: ImmDt | None = None, deth: Deth | None = None) -> None:
        """Encode one packet (with its ICRC) for ``qp`` and queue it."""
        if dst_ip is None:
            return
        src_port = qp.udp_src_port
        data = build_roce_udp_payload(src_ip=self.local_ip, dst_ip=dst_ip, src_port=src_port,
                                      bth=bth, reth=reth, aeth=aeth, atomic_eth=atomic_eth,
                                      atomic_ack_eth=atomic_ack_eth, imm_dt=imm_dt, deth=deth,
                                      payload=payload)
        self._outbox_pkts += 1
        if not payload and self.native and isinstance(dst_ip, ipaddress.IPv4Address):
            # An ACK: into the native run of its QP's socket (one sendmmsg with the
            # requests around it, e.g. a ping-pong's answer).
            attrs = qp.attrs
            last = self._outbox[-1] if self._outbox else None
            if (isinstance(last, OutgoingRun) and last.dst_ip == dst_ip
                    and last.src_udp_port == src_port and last.dscp == attrs.dscp
                    and last.ecn == attrs.ecn and last.run.append_packet(data)):
                return
            run = small_run()
            if run.append_packet(data):
                self._outbox.append(OutgoingRun(dst_ip, src_port, attrs.dscp, attrs.ecn, run))
                return
        self._outbox.append(OutgoingDatagram(dst_ip, src_port, qp.attrs.dscp, qp.attrs.ecn,
                                             data))
        if payload:
            # gather() copied the payload out of the registered memory, and the packet
            # assembly copied it again (at least once) into the datagram.
            self.stats.tx_payload_bytes += len(payload)
            self.stats.tx_user_copy_bytes += 2 * len(payload)

    def transmit_ack(self, qp: QpPort, psn: int, msn: int) -> None:
        """Queue an RC ACKNOWLEDGE of ``psn`` (AETH: ACK, credits invalid, ``msn``), built
        in C into the native run of its socket when the native path applies."""
        attrs = qp.attrs
        dst_ip = attrs.remote_ip
        if dst_ip is None:
            return
        src_port = qp.udp_src_port
        local = self.local_ip
        if self.native and isinstance(dst_ip, ipaddress.IPv4Address) and isinstance(
                local, ipaddress.IPv4Address):
            aeth = (CREDITS_INVALID << 24) | (msn & 0xFFFFFF)
            args = (int(local), int(dst_ip), src_port, attrs.pkey, attrs.dest_qp_num, psn, aeth)
            last = self._outbox[-1] if self._outbox else None
            if (isinstance(last, OutgoingRun) and last.dst_ip == dst_ip
                    and last.src_udp_port == src_port and last.dscp == attrs.dscp
                    and last.ecn == attrs.ecn and last.run.append_ack(*args)):
                self._outbox_pkts += 1
                return
            run = small_run()
            if run.append_ack(*args):
                self._outbox.append(OutgoingRun(dst_ip, src_port, attrs.dscp, attrs.ecn, run))
                self._outbox_pkts += 1
                return
        bth = Bth(Opcode.RC_ACKNOWLEDGE, False, False, 0, 0, attrs.pkey, False, False,
                  attrs.dest_qp_num, False, psn)
        self.transmit(qp, dst_ip, bth, b"", aeth=Aeth.ack(msn))

    def transmit_run(self, qp: QpPort, wr: SendWr, length: int, npkts: int, k0: int,
                     psn0: int, count: int, noack_pkts: int) -> int | None:
        """Queue packets ``k0 .. k0+count-1`` of SEND/WRITE ``wr`` built by the native path;
        return the new AckReq counter, or None when the native path does not apply (the
        requester then builds them one by one with :meth:`transmit`)."""
        if not self.native:
            return None
        attrs = qp.attrs
        if attrs.remote_ip is None:
            return None
        last = self._outbox[-1] if self._outbox else None
        into = last.run if (isinstance(last, OutgoingRun) and last.dst_ip == attrs.remote_ip
                            and last.src_udp_port == qp.udp_src_port
                            and last.dscp == attrs.dscp and last.ecn == attrs.ecn) else None
        if self._tx_scratch is None:
            self._tx_scratch = TxScratch()
        built = build_run(qp, wr, length, npkts, k0, psn0, count, noack_pkts, into,
                          self._tx_scratch)
        if built is None:
            return None
        run, noack, payload_bytes = built
        if run is not into:
            self._outbox.append(OutgoingRun(attrs.remote_ip, qp.udp_src_port, attrs.dscp,
                                            attrs.ecn, run))
        self._outbox_pkts += count
        self.stats.tx_native_packets += count
        self.stats.tx_payload_bytes += payload_bytes  # no user-space copy: iovecs
        return noack

    @property
    def coalescing_acks(self) -> bool:
        """True while a receive batch is being processed with ACK coalescing on."""
        return self._coalescing

    def hold_ack(self, qp: QpPort) -> None:
        """``qp``'s responder holds an ACK until the driver next collects output."""
        self._held.append(qp)

    @property
    def acks_held(self) -> int:
        """How many QPs hold an ACK (sent at the next output collection)."""
        return len(self._held)

    def _release_acks(self) -> None:
        held, self._held = self._held, []
        for qp in held:
            qp.responder.release_ack()  # type: ignore[attr-defined]

    def _generate(self, now_ns: int, budget: int) -> None:
        if self._ready:
            for qpn, qp in list(self._ready.items()):
                room = budget - self._outbox_pkts
                if room <= 0:
                    break
                if qp.state in SEND_STATES:
                    sent = qp.requester.generate(now_ns, room)
                    if sent >= room:
                        continue  # more may follow; keep it ready
                del self._ready[qpn]

    def output_to_send(self, now_ns: int) -> list[OutgoingDatagram | OutgoingRun]:
        """Like :meth:`datagrams_to_send` without a limit, with the native path's runs of
        packets kept whole (a driver sends a run with one ``sendmmsg``)."""
        if self._held:
            self._release_acks()
        self._generate(now_ns, 1 << 30)
        out, self._outbox = self._outbox, []
        self.stats.datagrams_sent += self._outbox_pkts
        self._outbox_pkts = 0
        return out

    def datagrams_to_send(self, now_ns: int,
                          max_datagrams: int | None = None) -> list[OutgoingDatagram]:
        """Everything ready to go now: responses first, then new and retransmitted requests."""
        if self._held:
            self._release_acks()
        self._generate(now_ns, 1 << 30 if max_datagrams is None else max_datagrams)
        flat: list[OutgoingDatagram] = []
        for item in self._outbox:
            if isinstance(item, OutgoingRun):
                flat.extend(item.datagrams())
            else:
                flat.append(item)
        if max_datagrams is None or len(flat) <= max_datagrams:
            out, rest = flat, []
        else:
            out, rest = flat[:max_datagrams], flat[max_datagrams:]
        self._outbox = list(rest)
        self._outbox_pkts = len(rest)
        self.stats.datagrams_sent += len(out)
        return out

    # -- timers --------------------------------------------------------------------------

    def get_timer(self) -> int | None:
        """The earliest deadline (ns) at which ``handle_timer`` must be called, or None."""
        best: int | None = None
        for qp in self._qps.values():
            if qp.qp_type is QpType.RC and qp.state in SEND_STATES:
                d = qp.requester.recovery.deadline_ns()
                if d is not None and (best is None or d < best):
                    best = d
        return best

    def handle_timer(self, now_ns: int) -> None:
        for qp in list(self._qps.values()):
            if qp.qp_type is QpType.RC and qp.state in SEND_STATES:
                recovery = qp.requester.recovery
                d = recovery.deadline_ns()
                if d is not None and d <= now_ns:
                    recovery.on_timer(now_ns)

    # -- input ---------------------------------------------------------------------------

    def receive_ip_packet(self, ip_packet: bytes | bytearray | memoryview, now_ns: int) -> None:
        """Receive a whole IPv4/IPv6 packet (AF_PACKET/raw drivers): ICRC verified as sent."""
        data = bytes(ip_packet)
        try:
            if data[0] >> 4 == 4:
                ip4 = Ipv4.decode(data)
                ip_bytes = ip4.header_bytes
                src: IpAddress = ip4.src_ip
                end = min(len(data), ip4.total_length)
            else:
                ip6 = Ipv6.decode(data)
                ip_bytes = 40
                src = ip6.src_ip
                end = min(len(data), 40 + ip6.payload_length)
            udp = Udp.decode(data, ip_bytes)
        except (DecodeError, EncodeError, IndexError):
            self.stats.dropped_malformed += 1
            return
        if udp.dst_port != ROCEV2_UDP_PORT:
            self.stats.dropped_malformed += 1
            return
        if self.verify_icrc and (end - ip_bytes < 8 + 16 or not verify_icrc(data[:end])):
            self.stats.dropped_icrc += 1
            return
        self._dispatch(data[ip_bytes + 8 : end], src, now_ns)

    def receive_datagram(self, udp_payload: bytes | bytearray | memoryview,
                         src_ip: IpAddress | str, now_ns: int, src_port: int | None = None, *,
                         ip_id: int | None = 0, dont_fragment: bool = True) -> None:
        """Receive one UDP payload (BTH .. ICRC) that arrived from ``src_ip``:``src_port``."""
        data = bytes(udp_payload)
        src = _ip(src_ip)
        if (self.verify_icrc and src_port is not None and ip_id is not None
                and not udp_payload_icrc_ok(data, src, self.local_ip, src_port, ip_id,
                                            dont_fragment)):
            self.stats.dropped_icrc += 1
            return
        self._dispatch(data, src, now_ns)

    def receive_ring(self, ring: RxRing, now_ns: int, slow: Callable[[int], None]) -> None:
        """Receive every datagram in ``ring``: runs of in-order MIDDLE packets of a SEND or
        WRITE in progress are placed by the native path; ``slow(i)`` hands datagram ``i``
        to the reference path (``receive_datagram``/``receive_ip_packet``, as the driver
        would without a ring). The result is the one the reference path gives for the
        same datagrams in the same order."""
        rx = self._rx_path
        count = ring.count
        if rx is None:
            for i in range(count):
                slow(i)
            return
        self._coalescing = self.coalesce_acks
        try:
            self._receive_ring(rx, ring, count, now_ns, slow)
        finally:
            self._coalescing = False

    def _receive_ring(self, rx: RxPath, ring: RxRing, count: int, now_ns: int,
                      slow: Callable[[int], None]) -> None:
        def on_ack(qp: QueuePair, psn: int) -> None:
            # what _dispatch does with a plain ACK of an RC QP in a send state
            if not self._completers[qp.qp_num].on_plain_ack(psn, now_ns):
                self.stats.dropped_response += 1

        rx.refresh_all()
        i = 0
        while i < count:
            j, placed, owed = rx.run(ring, i, self.verify_icrc, self._coalescing, on_ack)
            if placed:
                self.stats.datagrams_received += placed
                self.stats.rx_native_packets += placed
                self._sync_copies(rx)
                for owner, psn in owed:
                    owner.responder.acknowledge(psn)
                i = j
                continue
            slow(i)
            qp = self._qps.get(ring.dest_qp(i))
            if qp is not None:
                rx.refresh(qp)
            i += 1

    def _sync_copies(self, rx: RxPath) -> None:
        c = rx.copies
        self.stats.rx_payload_bytes += c.rx_payload_bytes
        self.stats.rx_user_copy_bytes += c.rx_user_copy_bytes
        c.rx_payload_bytes = c.rx_user_copy_bytes = 0

    def _dispatch(self, data: bytes, src: IpAddress, now_ns: int) -> None:
        self.stats.datagrams_received += 1
        try:
            hdrs, payload, _icrc = decode_roce(data)
        except (DecodeError, EncodeError):
            self.stats.dropped_malformed += 1
            return
        if payload:
            # bytes() of the received datagram and decode's payload slice, then the
            # placement into the registered buffer (a lower bound: nothing else counted).
            self.stats.rx_payload_bytes += len(payload)
            self.stats.rx_user_copy_bytes += 3 * len(payload)
        bth = hdrs.bth
        qp = self._qps.get(bth.dest_qp)
        if qp is None:
            tomb = self._tombstones.get(bth.dest_qp) if self._tombstones else None
            if tomb is None or not self._answer_tombstone(tomb, hdrs, src, now_ns):
                self.stats.dropped_unknown_qp += 1
            return
        info = bth.info
        transport = info.transport
        if transport is Transport.CNP:
            return  # congestion notifications: no rate control in the soft engine
        if int(transport) != _TRANSPORT_OF[qp.qp_type] or qp.state not in RECEIVE_STATES:
            self.stats.dropped_state += 1
            return
        if qp.qp_type is not QpType.UD and (
            src != qp.attrs.remote_ip or bth.pkey != qp.attrs.pkey
        ):
            # rxe accepts a connected QP's packets only from its remote GID.
            self.stats.dropped_state += 1
            return
        if info.is_response:
            if qp.qp_type is not QpType.RC or qp.state not in SEND_STATES:
                self.stats.dropped_state += 1
                return
            original = hdrs.atomic_ack_eth.original_remote_data if (
                hdrs.atomic_ack_eth is not None) else None
            if not self._completers[qp.qp_num].on_response(bth, hdrs.aeth, payload, original,
                                                           now_ns):
                self.stats.dropped_response += 1
            return
        qp.responder.on_request(hdrs, payload, src)


def udp_payload_icrc_ok(data: bytes, src_ip: IpAddress, dst_ip: IpAddress, src_port: int,
                        ip_id: int = 0, dont_fragment: bool = True) -> bool:
    """Check the ICRC of a RoCEv2 UDP payload against the IP/UDP headers it must have had.

    The IPv4 ID and DF flag are covered by the ICRC (TOS, TTL and checksums are masked), so
    they must be what the sender used; IPv6 headers have no such field.
    """
    if len(data) < 16:
        return False
    udp_len = 8 + len(data)
    udp = Udp(src_port, ROCEV2_UDP_PORT, udp_len, 0).encode()
    try:
        if isinstance(src_ip, ipaddress.IPv4Address) and isinstance(dst_ip,
                                                                    ipaddress.IPv4Address):
            hdr = Ipv4(src_ip, dst_ip, IpProto.UDP, total_length=20 + udp_len,
                       identification=ip_id, dont_fragment=dont_fragment, checksum=0).encode()
        elif isinstance(src_ip, ipaddress.IPv6Address) and isinstance(dst_ip,
                                                                      ipaddress.IPv6Address):
            hdr = Ipv6(src_ip, dst_ip, IpProto.UDP, 0, Ecn.NOT_ECT, 0, udp_len, 64).encode()
        else:
            return False
    except EncodeError:
        return False
    packet = hdr + udp + data
    return compute_icrc(memoryview(packet)[:-4]) == int.from_bytes(data[-4:], "little")


_TRANSPORT_OF = {QpType.RC: int(Transport.RC), QpType.UC: int(Transport.UC),
                 QpType.UD: int(Transport.UD)}

__all__ = [
    "CompletionQueue",
    "EngineStats",
    "OutgoingDatagram",
    "OutgoingRun",
    "RoceEngine",
    "SharedReceiveQueue",
    "Tombstone",
    "linger_ns",
    "udp_payload_icrc_ok",
]
