"""The send side of a QP: segmentation, PSN assignment, the AckReq policy, the window.

IBTA vol 1 §9.7.1-9.7.4 (requester), modelled on Linux rxe ``rxe_req.c``:

* a message is cut at the path MTU; SEND/WRITE packets take one PSN each, an RDMA READ
  request takes ``ceil(length / MTU)`` PSNs (one per response packet, at least one) and
  an atomic one;
* AckReq is set on the last packet of every message and after every 64 packets sent
  without one (rxe ``RXE_MAX_PKT_PER_ACK``);
* at most ``max_unacked_psns`` PSNs are outstanding (rxe ``RXE_MAX_UNACKED_PSNS``) and at
  most ``max_rd_atomic`` READ/atomic operations;
* go-back-N restarts transmission at any PSN, including inside a message (``seek``).

Completions, ACK handling and retries live in ``completer.py`` and ``recovery.py``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from netio.roce.memory import gather
from netio.roce.ports import QpPort
from netio.roce.psn import psn_add, psn_diff, psn_in_range
from netio.roce.recovery import Recovery
from netio.roce.verbs import ATOMICS, READ_OR_ATOMIC, SendWr, WcStatus, WrOpcode
from netio.wire.bth import OPCODE_TABLE, Bth, Opcode, Operation, Position, Transport
from netio.wire.ext import AtomicEth, Deth, ImmDt, Reth

MAX_RUN_PACKETS = 256  # packets of one message handed to the native path at once
MAX_PKTS_PER_ACK = 64  # rxe RXE_MAX_PKT_PER_ACK
QKEY_USE_QP_BIT = 0x8000_0000  # IBTA §10.2.5: a WR Q_Key with the high bit set means "use the QP's"


def _opcode_map() -> dict[tuple[Transport, Operation, Position, bool], Opcode]:
    table: dict[tuple[Transport, Operation, Position, bool], Opcode] = {}
    for info in OPCODE_TABLE:
        if info is None or info.has_invalidate:
            continue
        table[(info.transport, info.operation, info.position, info.has_immediate)] = info.opcode
    return table


OPCODES = _opcode_map()

_WR_OPERATION: dict[WrOpcode, Operation] = {
    WrOpcode.SEND: Operation.SEND,
    WrOpcode.SEND_WITH_IMM: Operation.SEND,
    WrOpcode.RDMA_WRITE: Operation.RDMA_WRITE,
    WrOpcode.RDMA_WRITE_WITH_IMM: Operation.RDMA_WRITE,
    WrOpcode.RDMA_READ: Operation.RDMA_READ_REQUEST,
    WrOpcode.ATOMIC_CMP_AND_SWP: Operation.COMPARE_SWAP,
    WrOpcode.ATOMIC_FETCH_AND_ADD: Operation.FETCH_ADD,
}


def packets_for(length_bytes: int, mtu_bytes: int) -> int:
    """PSNs a SEND/WRITE/READ of ``length_bytes`` consumes (at least one)."""
    return max(1, -(-length_bytes // mtu_bytes))


@dataclass(slots=True, eq=False)
class SendWqe:
    """A posted send WR and its transmission progress."""

    wr: SendWr
    length: int
    npkts: int
    # a READ or an atomic (counted against max_rd_atomic): set once at post, read by
    # every transmit and acknowledgement pass
    rd_atomic: bool = False
    first_psn: int = -1  # assigned when the first packet leaves; -1 before
    last_psn: int = -1
    sent_all: bool = False

    @property
    def started(self) -> bool:
        return self.first_psn >= 0


class Requester:
    """Send queue state of one QP (rxe ``qp->req``)."""

    def __init__(self, qp: QpPort) -> None:
        self.qp = qp
        self.recovery = Recovery(self)
        self.wqes: deque[SendWqe] = deque()
        self.reset(0)

    def reset(self, sq_psn: int = 0) -> None:
        """Forget all state; the next new packet takes PSN ``sq_psn``."""
        self.wqes.clear()
        self.cursor = 0  # index in wqes of the WQE holding self.psn
        self.cursor_pkt = 0  # packet index inside that WQE
        self.psn = sq_psn  # next PSN to transmit
        self.sent_hi = sq_psn  # one past the highest PSN ever transmitted
        self.comp_psn = sq_psn  # oldest PSN not yet acknowledged
        self.noack_pkts = 0
        self.rd_atomic_inflight = 0
        self.recovery.reset()

    # -- posting and flushing ----------------------------------------------------------------

    def post(self, wr: SendWr) -> None:
        length = wr.length_bytes
        op = wr.opcode
        mtu = self.qp.attrs.path_mtu_bytes
        # packets_for, inlined for the one-packet message (most of a message rate)
        npkts = 1 if length <= mtu or op in ATOMICS else packets_for(length, mtu)
        self.wqes.append(SendWqe(wr, length, npkts, op in READ_OR_ATOMIC))

    def flush(self) -> None:
        """Complete every outstanding WR with WR_FLUSH_ERR (QP entered ERR)."""
        while self.wqes:
            self.qp.complete_send(self.wqes.popleft().wr, WcStatus.WR_FLUSH_ERR, force=True)
        self.cursor = 0
        self.cursor_pkt = 0
        self.rd_atomic_inflight = 0
        self.recovery.disarm()

    @property
    def outstanding(self) -> bool:
        """True while some transmitted PSN is unacknowledged."""
        return psn_diff(self.sent_hi, self.comp_psn) > 0

    def complete_head(self, status: WcStatus) -> None:
        """Pop the oldest WQE and report it (success only when signaled)."""
        wqe = self.wqes.popleft()
        if wqe.rd_atomic and wqe.started:
            self.rd_atomic_inflight -= 1
        if self.cursor > 0:
            self.cursor -= 1
        else:
            self.cursor_pkt = 0
        self.qp.complete_send(wqe.wr, status)

    def fail(self, status: WcStatus) -> None:
        """Complete the oldest WQE with an error and move the QP to ERR (C10-26)."""
        if self.wqes:
            wqe = self.wqes.popleft()
            if wqe.rd_atomic and wqe.started:
                self.rd_atomic_inflight -= 1
            self.qp.complete_send(wqe.wr, status, force=True)
        self.qp.enter_error()

    def seek(self, psn: int) -> None:
        """Make ``psn`` the next PSN to transmit (go-back-N, or skipping acknowledged PSNs)."""
        self.noack_pkts = 0
        for index, wqe in enumerate(self.wqes):
            if not wqe.started:
                self.cursor, self.cursor_pkt, self.psn = index, 0, self.sent_hi
                return
            if psn_in_range(psn, wqe.first_psn, wqe.last_psn):
                self.cursor, self.cursor_pkt, self.psn = index, psn_diff(psn, wqe.first_psn), psn
                return
        self.cursor, self.cursor_pkt, self.psn = len(self.wqes), 0, self.sent_hi

    # -- transmission --------------------------------------------------------------------

    def generate(self, now_ns: int, budget: int) -> int:
        """Transmit up to ``budget`` packets; return how many were sent."""
        qp = self.qp
        attrs = qp.attrs
        qp_type = qp.qp_type
        rc = qp_type == 2  # QpType.RC, compared by value to keep this loop cheap
        if rc and self.recovery.paused:
            return 0
        window = attrs.max_unacked_psns
        sent = 0
        while sent < budget and self.cursor < len(self.wqes):
            wqe = self.wqes[self.cursor]
            if rc and psn_diff(self.psn, self.comp_psn) >= window:
                break
            if wqe.first_psn < 0:  # not started (the property, inlined in this loop)
                if qp.state == 4:  # SQD: finish what was started, start nothing new
                    break
                if wqe.wr.fence and self.rd_atomic_inflight:
                    break  # IBTA §10.8.3.3: a fenced WR waits for earlier READ/atomics
                if wqe.rd_atomic:
                    if self.rd_atomic_inflight >= max(1, attrs.max_rd_atomic):
                        break
                    self.rd_atomic_inflight += 1
                wqe.first_psn = self.psn
                wqe.last_psn = psn_add(self.psn, wqe.npkts - 1)
            if qp_type != 4 and wqe.wr.opcode in _RUN_OPCODES:  # not UD
                # the smallest of what is left, the budget, a run and the window (by
                # comparisons: min() was a call per message at a 64 B message rate)
                count = wqe.npkts - self.cursor_pkt
                if budget - sent < count:
                    count = budget - sent
                if count > MAX_RUN_PACKETS:
                    count = MAX_RUN_PACKETS
                if rc:
                    room = window - psn_diff(self.psn, self.comp_psn)
                    if room < count:
                        count = room
                noack = qp.engine.transmit_run(qp, wqe.wr, wqe.length, wqe.npkts,
                                               self.cursor_pkt, self.psn, count,
                                               self.noack_pkts)
                if noack is not None:
                    self._advance(wqe, count, noack)
                    sent += count
                    if psn_diff(self.psn, self.sent_hi) > 0:
                        self.sent_hi = self.psn
                    if not rc and self.cursor > 0:
                        self.complete_head(WcStatus.SUCCESS)
                        self.comp_psn = self.psn
                    continue
            self._transmit_one(wqe, qp_type)
            sent += 1
            if psn_diff(self.psn, self.sent_hi) > 0:
                self.sent_hi = self.psn
            if not rc and self.cursor > 0:
                # UC and UD complete a message once it has been sent (no acknowledgement).
                self.complete_head(WcStatus.SUCCESS)
                self.comp_psn = self.psn
        if sent and rc:
            self.recovery.on_transmit(now_ns)
        return sent

    def _advance(self, wqe: SendWqe, count: int, noack_pkts: int) -> None:
        """``count`` packets of ``wqe`` left through the native path (``transmit_run``):
        the same state changes as ``count`` calls of :meth:`_transmit_one`."""
        self.psn = psn_add(self.psn, count)
        self.noack_pkts = noack_pkts
        if self.cursor_pkt + count >= wqe.npkts:
            self.cursor += 1
            self.cursor_pkt = 0
            wqe.sent_all = True
        else:
            self.cursor_pkt += count

    def _transmit_one(self, wqe: SendWqe, qp_type: int) -> None:
        qp = self.qp
        wr = wqe.wr
        mtu = qp.attrs.path_mtu_bytes
        k = self.cursor_pkt
        psn = self.psn
        transport = Transport.RC if qp_type == 2 else Transport.UC if qp_type == 3 else (
            Transport.UD)
        operation = _WR_OPERATION[wr.opcode]
        reth = atomic_eth = imm = deth = None
        payload = b""
        dest_qp = qp.attrs.dest_qp_num
        dst_ip = qp.attrs.remote_ip
        if operation is Operation.RDMA_READ_REQUEST:
            offset = k * mtu
            reth = Reth(wr.remote_addr + offset, wr.rkey, wqe.length - offset)
            opcode = Opcode.RC_RDMA_READ_REQUEST
            ack_req = True
            self.psn = psn_add(wqe.last_psn, 1)
            self.cursor += 1
            self.cursor_pkt = 0
            wqe.sent_all = True
        elif operation in (Operation.COMPARE_SWAP, Operation.FETCH_ADD):
            if wr.opcode is WrOpcode.ATOMIC_CMP_AND_SWP:
                atomic_eth = AtomicEth(wr.remote_addr, wr.rkey, wr.swap, wr.compare_add)
                opcode = Opcode.RC_COMPARE_SWAP
            else:
                atomic_eth = AtomicEth(wr.remote_addr, wr.rkey, wr.compare_add, 0)
                opcode = Opcode.RC_FETCH_ADD
            ack_req = True
            self.psn = psn_add(psn, 1)
            self.cursor += 1
            self.cursor_pkt = 0
            wqe.sent_all = True
        else:
            offset = k * mtu
            size = min(mtu, wqe.length - offset)
            last = k == wqe.npkts - 1
            if wqe.npkts == 1:
                position = Position.ONLY
            elif k == 0:
                position = Position.FIRST
            else:
                position = Position.LAST if last else Position.MIDDLE
            with_imm = last and wr.imm_data is not None
            opcode = OPCODES[(transport, operation, position, with_imm)]
            if with_imm and wr.imm_data is not None:
                imm = ImmDt(wr.imm_data)
            if operation is Operation.RDMA_WRITE and k == 0:
                reth = Reth(wr.remote_addr, wr.rkey, wqe.length)
            if transport is Transport.UD and wr.ud is not None:
                qkey = wr.ud.qkey
                if qkey & QKEY_USE_QP_BIT:
                    qkey = qp.attrs.qkey
                deth = Deth(qkey, qp.qp_num)
                dest_qp = wr.ud.qpn
                dst_ip = wr.ud.ip
            if size > 0:
                payload = gather(wr.sg_list, offset, size)
            ack_req = last or self.noack_pkts >= MAX_PKTS_PER_ACK
            self.psn = psn_add(psn, 1)
            if last:
                self.cursor += 1
                self.cursor_pkt = 0
                wqe.sent_all = True
            else:
                self.cursor_pkt = k + 1
        if ack_req:
            self.noack_pkts = 0
        else:
            self.noack_pkts += 1
        solicited = wr.solicited and opcode in _SOLICITABLE
        bth = Bth(opcode, solicited, False, -len(payload) % 4, 0, qp.attrs.pkey, False, False,
                  dest_qp, ack_req and transport is Transport.RC, psn)
        qp.engine.transmit(qp, dst_ip, bth, payload, reth=reth, atomic_eth=atomic_eth,
                           imm_dt=imm, deth=deth)


_RUN_OPCODES = frozenset((WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE,
                          WrOpcode.RDMA_WRITE_WITH_IMM))
_SOLICITABLE = frozenset(
    op for op in Opcode
    if (info := OPCODE_TABLE[op]) is not None and info.ends_message
    and (info.operation is Operation.SEND or info.has_immediate)
)
