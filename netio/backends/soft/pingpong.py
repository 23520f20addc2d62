"""A SEND ping-pong on one soft-engine QP in one call into C (``native/softpingpong.c``).

sockperf's ping-pong, perftest's ``ib_send_lat`` and the verbs backend's
:meth:`~netio.backends.verbs_native.VerbsQp.pingpong` time a round trip as a C loop
that posts and busy-polls; through the IO API a soft round trip runs some 800 Python
calls per side (about 100 µs). ``netio bench send_lat`` over the soft backend uses this
instead: the engine lends the QP's sequence state (next PSN, expected PSN, MSN) to one
C call that builds the packets the engine's native path builds (a message of any size
cut at the path MTU, AckReq on its last packet and after every 64; RC ACKs, a held ACK
leaving after the next request in one ``sendmmsg``), keeps at most ``max_unacked_psns``
unacknowledged, checks ICRC, QP, source and PSN of what comes back and places it in
order straight into the receive buffer, retires its PSNs on ACKs, resends from the
oldest unacknowledged PSN on the local ACK timeout (go-back-N, ``retry_cnt`` times),
ACKs duplicates again, NAKs a gap once (PSN sequence error) and drops what follows it,
and sets aside every other datagram (another QP's, or the next message of this one)
for the engine, which takes them when the call returns. An RNR NAK waits the peer's
RNR timer and resends (``rnr_retry`` times), a PSN sequence NAK resends at once; any
other NAK, too many timeouts or a silent peer end the call with an error and the QP in
the error state, as the engine's own paths would leave it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from dataclasses import dataclass

from netio import native
from netio.backends.soft.driver import SoftRoceDriver
from netio.environment import microseconds
from netio.errors import IoError
from netio.roce.attributes import ack_timeout_ns
from netio.roce.memory import Sge
from netio.roce.native_path import host_address
from netio.roce.qp import QpState, QpType, QueuePair
from netio.wire.ext import rnr_timer_ns

#: How long the C loop busy-polls its socket before it sleeps in poll(2), as the
#: polled progress of the IO API does (``$NETIO_POLL_SPIN_US``).
POLL_SPIN_DEFAULT_US = 200
_DEFER_BYTES = 1 << 20  # datagrams set aside for the engine during one call
_STATUS = {1: "retry count exceeded (no ACK after {retries} local ACK timeouts)",
           2: "nothing from the peer for {idle_s:g} s",
           3: "the peer sent {nak}",
           4: "socket error {err}",
           5: "a message of {err} bytes or more is longer than the receive buffer",
           6: "a request out of order in its message or of the wrong length (opcode "
              "{err:#04x})",
           7: "RNR retry count exceeded ({nak})",
           8: "a message of more than 2^22 packets, or no MTU or window",
           9: "the peer sent another message (opcode {err:#04x}) in place of the answer"}


@dataclass(frozen=True, slots=True)
class PingPongRun:
    """What one call did: round-trip times (initiator) and the packet counts."""

    rtt_ns: tuple[int, ...]
    packets_sent: int
    packets_received: int
    retransmits: int
    duplicates: int
    dropped: int
    rnr_naks: int
    set_aside: int
    set_aside_lost: int  # did not fit the set-aside buffer (lost, as a full socket drops)


def _nak(aeth: int) -> str:
    """What a NAK's AETH says (IBTA vol 1 §9.7.5.2, table 44)."""
    syndrome = aeth >> 24
    kind, value = syndrome >> 5, syndrome & 0x1F
    if kind == 1:
        return f"an RNR NAK (no receive posted; RNR timer code {value})"
    names = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error",
             3: "remote operational error", 4: "invalid RD request"}
    return f"a NAK ({names.get(value, f'code {value}')})"


class SoftPingPong:
    """``count`` round trips of SENDs between ``qp`` and its peer: the initiator sends
    ``send`` and waits for the answer into ``recv``; the answerer the other way round."""

    def __init__(self, driver: SoftRoceDriver, qp: QueuePair, send: Sge, recv: Sge, *,
                 timeout_s: float) -> None:
        self.driver, self.qp = driver, qp
        self.timeout_s = timeout_s
        ffi = native.ffi
        pp = ffi.new("netio_pingpong *")
        self._defer = ffi.new("uint8_t[]", _DEFER_BYTES)
        self._keep = (send.mr, recv.mr)  # the addresses stay valid while these live
        send_addr = host_address(send.mr, writable=False)
        recv_addr = host_address(recv.mr, writable=True)
        if send_addr is None:
            raise IoError("soft ping-pong: the send buffer has no host address")
        if recv_addr is None:
            raise IoError("soft ping-pong: the receive buffer is not writable")
        pp.send_buf = ffi.cast("uint8_t *", send_addr + send.offset)
        pp.send_bytes = send.length
        pp.recv_buf = ffi.cast("uint8_t *", recv_addr + recv.offset)
        pp.recv_room = recv.length
        pp.defer_buf = self._defer
        pp.defer_cap = _DEFER_BYTES
        self._rnr_wait = ffi.new("int64_t[]", [rnr_timer_ns(code) for code in range(32)])
        self._pp = pp

    @staticmethod
    def usable(driver: SoftRoceDriver, qp: QueuePair) -> bool:
        """True when a call can take ``qp`` over now: the native path, an RC QP in RTS
        over IPv4, nothing of it in flight (every sent PSN acknowledged, no message half
        received, no receive posted)."""
        attrs = qp.attrs
        req, resp = qp.requester, qp.responder
        return (native.lib is not None and driver.engine.native
                and qp.qp_type is QpType.RC and qp.state is QpState.RTS
                and isinstance(attrs.remote_ip, ipaddress.IPv4Address)
                and not req.wqes and not req.outstanding and resp.ctx is None
                and not qp.rq and qp.srq is None)

    def run(self, count: int, *, initiator: bool, answer_first: bool = False) -> PingPongRun:
        """Run ``count`` round trips (``answer_first``: the answerer's first request
        arrived through the engine before the call; answer it at once). The QP's state
        is the engine's again afterwards; an error leaves it in ERR and raises."""
        qp, driver = self.qp, self.driver
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is None or running is not driver.loop:
            raise IoError("soft ping-pong: call it on the thread of the context's event loop "
                          "(the driver there reads the same socket)")
        if not self.usable(driver, qp):
            raise IoError("soft ping-pong: the QP has work in flight or is not an RC QP "
                          "in RTS on the native path")
        attrs = qp.attrs
        lent = driver.lend_sockets(qp.udp_src_port, (attrs.dscp << 2) | attrs.ecn)
        if lent is None:
            raise IoError("soft ping-pong: the driver cannot lend its sockets (no native "
                          "path, a lossy link, or output waiting for the socket)")
        rx_fd, tx_fd, ring = lent
        ffi = native.ffi
        pp = self._pp
        rtt = ffi.new("int64_t[]", max(1, count))
        resp = qp.responder
        pp.rx_fd, pp.tx_fd, pp.ring = rx_fd, tx_fd, ring.ring
        pp.local_ip = int(driver.config.local_ip)
        pp.remote_ip = int(attrs.remote_ip)  # type: ignore[arg-type]  # usable(): IPv4
        pp.src_port = qp.udp_src_port
        pp.pkey, pp.qpn, pp.dest_qp = attrs.pkey, qp.qp_num, attrs.dest_qp_num
        pp.mtu = attrs.path_mtu_bytes
        pp.window = attrs.max_unacked_psns
        pp.verify_icrc = 1 if driver.engine.verify_icrc else 0
        pp.sq_psn = qp.requester.psn
        pp.rq_psn, pp.msn = resp.expected_psn, resp.msn
        pp.ack_owed = 0  # lend_sockets sent every held ACK
        pp.count = count
        pp.initiator = 1 if initiator else 0
        pp.answer_first = 1 if answer_first else 0
        pp.ack_timeout_ns = ack_timeout_ns(attrs.timeout) or 0
        pp.retry_cnt = attrs.retry_cnt
        pp.rnr_retry = attrs.rnr_retry
        pp.rnr_wait_ns = self._rnr_wait
        pp.idle_timeout_ns = int(self.timeout_s * 1e9)
        pp.spin_ns = microseconds("NETIO_POLL_SPIN_US", POLL_SPIN_DEFAULT_US) * 1000
        pp.rtt_ns = rtt
        ok = native.lib.netio_pingpong_run(pp) == 0
        # the sequence state goes back to its owners whatever happened
        req = qp.requester
        req.psn = req.sent_hi = req.comp_psn = int(pp.sq_psn)
        req.noack_pkts = 0
        resp.expected_psn, resp.msn = int(pp.rq_psn), int(pp.msn)
        resp.nak_sent = False
        if pp.ack_owed:
            resp.acknowledge((int(pp.rq_psn) - 1) & 0xFFFFFF)
        aside = self._set_aside()
        self._hand_over(aside)
        done = int(pp.done)
        if not ok:
            qp.enter_error()
            why = _STATUS.get(int(pp.status), "status {status}").format(
                retries=int(pp.retry_cnt), idle_s=self.timeout_s, nak=_nak(int(pp.nak_aeth)),
                err=int(pp.err), status=int(pp.status))
            raise IoError(f"soft ping-pong on QP {qp.qp_num:#x}: {why} after {done} of "
                          f"{count} round trips")
        return PingPongRun(tuple(int(rtt[k]) for k in range(done)) if initiator else (),
                           int(pp.packets_sent), int(pp.packets_received),
                           int(pp.retransmits), int(pp.duplicates), int(pp.dropped),
                           int(pp.rnr_naks), len(aside), int(pp.defer_lost))

    def _set_aside(self) -> list[tuple[memoryview, int, int]]:
        pp = self._pp
        raw = native.ffi.buffer(self._defer, int(pp.defer_len))
        view = memoryview(bytes(raw))
        out: list[tuple[memoryview, int, int]] = []
        at = 0
        while at < len(view):
            length, src_ip, src_port = struct.unpack_from("=III", view, at)
            out.append((view[at + 12:at + 12 + length], src_ip, src_port))
            at += 12 + ((length + 3) & ~3)
        return out

    def _hand_over(self, aside: list[tuple[memoryview, int, int]]) -> None:
        """The engine takes the datagrams set aside at the next turn of the driver's loop
        (the caller may post the receive the next message needs first, as the bench
        server posts its next control receive)."""
        pp, driver = self._pp, self.driver
        sent, received = int(pp.packets_sent), int(pp.packets_received)
        driver.take_datagrams([], sent=sent, received=received)
        if aside:
            asyncio.get_running_loop().call_soon(
                lambda: driver.take_datagrams(aside, sent=0, received=0))


__all__ = ["PingPongRun", "SoftPingPong"]
