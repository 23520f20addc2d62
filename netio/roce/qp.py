"""Queue pair states, attributes and the IBTA-legal state transitions.

Rule (after h11 ``_state.py``): every QP state change goes through
``QueuePair.modify`` (verbs) or ``QueuePair.enter_error`` (transport errors), and the
legal verbs transitions live in ``LEGAL_TRANSITIONS`` below (IBTA vol 1 §10.3.1,
figure 124 "QP/EE state diagram"; the kernel's ``ib_modify_qp_is_ok`` table).
"""

from __future__ import annotations

import enum
import ipaddress
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from netio.api.types import Access
from netio.api.types import QpType as QpType  # re-exported: the engine's users name it here
from netio.errors import RoceError
from netio.roce.memory import ProtectionDomain
from netio.roce.psn import PSN_MASK
from netio.roce.verbs import (
    Completion,
    IpAddress,
    RecvWr,
    SendWr,
    WcOpcode,
    WcStatus,
    WrOpcode,
)

if TYPE_CHECKING:
    from netio.roce.engine import CompletionQueue, RoceEngine, SharedReceiveQueue
    from netio.roce.requester import Requester
    from netio.roce.responder import Responder

ROCE_UDP_SPORT_MIN = 0xC000  # IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
_FLOW_LABEL_MASK = 0xFFFFF
_GOLDEN_RATIO_32 = 0x61C88647
VALID_MTUS_BYTES = (256, 512, 1024, 2048, 4096)


class QpState(enum.IntEnum):
    """``enum ibv_qp_state``."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


# IBTA §10.3.1: from-state -> states a verbs modify may move to. Anything else is illegal.
# Any state may go to RESET or ERR; SQE -> RTS is only legal for UC/UD (checked in modify).
LEGAL_TRANSITIONS: dict[QpState, frozenset[QpState]] = {
    QpState.RESET: frozenset({QpState.RESET, QpState.INIT, QpState.ERR}),
    QpState.INIT: frozenset({QpState.RESET, QpState.INIT, QpState.RTR, QpState.ERR}),
    QpState.RTR: frozenset({QpState.RESET, QpState.RTS, QpState.ERR}),
    QpState.RTS: frozenset({QpState.RESET, QpState.RTS, QpState.SQD, QpState.ERR}),
    QpState.SQD: frozenset({QpState.RESET, QpState.RTS, QpState.SQD, QpState.ERR}),
    QpState.SQE: frozenset({QpState.RESET, QpState.RTS, QpState.ERR}),
    QpState.ERR: frozenset({QpState.RESET, QpState.ERR}),
}

# States in which the receive side accepts packets and the send side may transmit.
RECEIVE_STATES = frozenset({QpState.RTR, QpState.RTS, QpState.SQD, QpState.SQE})
SEND_STATES = frozenset({QpState.RTS, QpState.SQD})


def rdma_flow_label(local_qpn: int, remote_qpn: int) -> int:
    """The symmetric 20-bit flow label of a connection (kernel ``rdma_calc_flow_label``)."""
    v = (local_qpn * remote_qpn) & 0xFFFF_FFFF_FFFF_FFFF
    v ^= v >> 20
    v ^= v >> 40
    return v & _FLOW_LABEL_MASK


def udp_source_port(local_qpn: int, remote_qpn: int, flow_label: int = 0) -> int:
    """RoCEv2 UDP source port as Linux rxe picks it for a connected QP.

    rxe (``rxe_modify_qp`` with an address vector) calls ``rdma_get_udp_sport``:
    flow label (or one computed from both QPNs), folded to 14 bits, OR 0xC000.
    """
    fl = flow_label & _FLOW_LABEL_MASK or rdma_flow_label(local_qpn, remote_qpn)
    low = (fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)
    return low | ROCE_UDP_SPORT_MIN


def default_udp_source_port(qpn: int) -> int:
    """rxe's source port before any address vector (UD QPs): hash_32(qpn, 14) + 0xC000."""
    return ROCE_UDP_SPORT_MIN + ((((qpn * _GOLDEN_RATIO_32) & 0xFFFFFFFF) >> 18) & 0x3FFF)


def ack_timeout_ns(timeout: int) -> int | None:
    """Local ACK timeout 4.096 µs * 2**timeout (IBTA §9.7.6.1.3); 0 means no timer."""
    if timeout == 0:
        return None
    return 4096 << timeout


@dataclass(frozen=True, slots=True)
class QpAttributes:
    """The modifiable QP attributes (``struct ibv_qp_attr``, the parts RoCE uses).

    ``timeout`` is the IBTA exponent of the local ACK timeout, ``min_rnr_timer`` the
    5-bit RNR timer code advertised in RNR NAKs (IBTA table 45), ``retry_cnt`` and
    ``rnr_retry`` 3-bit counts (``rnr_retry == 7`` retries for ever). ``access`` are the
    remote operations the responder accepts (``qp_access_flags``).
    """

    dest_qp_num: int = 0
    sq_psn: int = 0
    rq_psn: int = 0
    path_mtu_bytes: int = 1024
    timeout: int = 14
    retry_cnt: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12
    max_rd_atomic: int = 16
    max_dest_rd_atomic: int = 16
    qkey: int = 0
    pkey: int = 0xFFFF
    remote_ip: IpAddress | None = None
    dscp: int = 0
    ecn: int = 0
    flow_label: int = 0
    udp_src_port: int | None = None
    access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | (
        Access.REMOTE_ATOMIC
    )
    max_unacked_psns: int = 128

    def __post_init__(self) -> None:
        checks: list[tuple[str, int, int]] = [
            ("dest_qp_num", 0, 0xFFFFFF), ("sq_psn", 0, PSN_MASK), ("rq_psn", 0, PSN_MASK),
            ("timeout", 0, 31), ("retry_cnt", 0, 7), ("rnr_retry", 0, 7),
            ("min_rnr_timer", 0, 31), ("max_rd_atomic", 0, 255), ("max_dest_rd_atomic", 0, 255),
            ("qkey", 0, 0xFFFFFFFF), ("pkey", 0, 0xFFFF), ("dscp", 0, 63), ("ecn", 0, 3),
            ("flow_label", 0, _FLOW_LABEL_MASK), ("max_unacked_psns", 1, 1 << 22),
        ]
        for name, lo, hi in checks:
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise RoceError(f"QP attribute {name}={value} outside [{lo}, {hi}]")
        if self.path_mtu_bytes not in VALID_MTUS_BYTES:
            raise RoceError(f"path_mtu_bytes must be one of {VALID_MTUS_BYTES}")
        if self.udp_src_port is not None and not 0 <= self.udp_src_port <= 0xFFFF:
            raise RoceError("udp_src_port does not fit 16 bits")
        if self.remote_ip is not None and not isinstance(
            self.remote_ip, ipaddress.IPv4Address | ipaddress.IPv6Address
        ):
            raise RoceError("remote_ip must be an IPv4Address or IPv6Address")


@dataclass(slots=True)
class QueuePair:
    """One queue pair of a ``RoceEngine``; create it with ``RoceEngine.create_qp``."""

    engine: RoceEngine = field(repr=False)
    qp_num: int
    qp_type: QpType
    pd: ProtectionDomain = field(repr=False)
    send_cq: CompletionQueue = field(repr=False)
    recv_cq: CompletionQueue = field(repr=False)
    srq: SharedReceiveQueue | None = field(default=None, repr=False)
    sq_sig_all: bool = False
    state: QpState = QpState.RESET
    attrs: QpAttributes = field(default_factory=QpAttributes)
    udp_src_port: int = 0
    rq: deque[RecvWr] = field(default_factory=deque, repr=False)
    requester: Requester = field(init=False, repr=False)
    responder: Responder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from netio.roce.requester import Requester
        from netio.roce.responder import Responder

        self.requester = Requester(self)
        self.responder = Responder(self)
        self.udp_src_port = default_udp_source_port(self.qp_num)

    # -- verbs -----------------------------------------------------------------------------

    def modify(self, state: QpState, attrs: QpAttributes | None = None) -> None:
        """Move to ``state`` (``ibv_modify_qp``); ``attrs`` replaces the attributes if given.

        Raises RoceError for a transition IBTA §10.3.1 does not allow or for missing
        attributes (RC/UC need ``remote_ip`` and ``dest_qp_num`` to reach RTR).
        """
        state = QpState(state)
        if state not in LEGAL_TRANSITIONS[self.state]:
            raise RoceError(f"QP {self.qp_num:#x}: illegal transition {self.state.name} -> "
                            f"{state.name}")
        if self.state is QpState.SQE and state is QpState.RTS and self.qp_type is QpType.RC:
            raise RoceError("SQE -> RTS is only legal for UC and UD QPs")
        new_attrs = self.attrs if attrs is None else attrs
        if (
            state is QpState.RTR
            and self.qp_type is not QpType.UD
            and new_attrs.remote_ip is None
        ):
            raise RoceError("RTR on a connected QP needs remote_ip (the peer's address)")
        old = self.state
        self.attrs = new_attrs
        if state is QpState.RESET:
            self.state = state
            self.rq.clear()
            self.requester.reset()
            self.responder.reset()
            self.engine.qp_changed(self)
            return
        if state is QpState.ERR:
            self.enter_error()
            return
        self.state = state
        if state is QpState.RTR and old is not QpState.RTR:
            self.responder.reset(new_attrs.rq_psn)
            if self.qp_type is not QpType.UD:
                self.udp_src_port = new_attrs.udp_src_port or udp_source_port(
                    self.qp_num, new_attrs.dest_qp_num, new_attrs.flow_label
                )
        if state is QpState.RTS and old is QpState.RTR:
            self.requester.reset(new_attrs.sq_psn)
        self.engine.qp_changed(self)

    def post_send(self, wr: SendWr) -> None:
        """Queue a send work request (``ibv_post_send``); raises RoceError if invalid."""
        if self.state in (QpState.RESET, QpState.INIT, QpState.RTR):
            raise RoceError(f"post_send on QP {self.qp_num:#x} in state {self.state.name}")
        self._check_send_wr(wr)
        if self.state is QpState.ERR:
            self._complete_send(wr, WcStatus.WR_FLUSH_ERR, force=True)
            return
        self.requester.post(wr)
        self.engine.qp_changed(self)

    def post_recv(self, wr: RecvWr) -> None:
        """Queue a receive work request (``ibv_post_recv``)."""
        if self.srq is not None:
            raise RoceError("this QP takes its receives from its SRQ")
        if self.state is QpState.RESET:
            raise RoceError(f"post_recv on QP {self.qp_num:#x} in state RESET")
        check_recv_wr(wr)
        if self.state is QpState.ERR:
            self.recv_cq.push(Completion(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                         self.qp_num))
            return
        self.rq.append(wr)

    # -- used by the transport modules -----------------------------------------------------

    def enter_error(self) -> None:
        """Move to ERR and flush every outstanding work request (IBTA §10.3.1.2 / C10-26)."""
        self.state = QpState.ERR
        self.requester.flush()
        self.responder.flush()
        while self.rq:
            wr = self.rq.popleft()
            self.recv_cq.push(Completion(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                         self.qp_num))
        self.engine.qp_changed(self)

    def take_recv(self) -> RecvWr | None:
        """The next posted receive (from the SRQ if the QP has one), or None."""
        if self.srq is not None:
            return self.srq.take()
        return self.rq.popleft() if self.rq else None

    def return_recv(self, wr: RecvWr) -> None:
        """Give back a receive taken for a message that was abandoned (UC loss)."""
        if self.srq is not None:
            self.srq.give_back(wr)
        else:
            self.rq.appendleft(wr)

    def _complete_send(self, wr: SendWr, status: WcStatus, *, force: bool = False) -> None:
        from netio.roce.verbs import SEND_WC_OPCODE

        if force or status is not WcStatus.SUCCESS or wr.signaled or self.sq_sig_all:
            byte_len = wr.length_bytes if status is WcStatus.SUCCESS else 0
            self.send_cq.push(Completion(wr.wr_id, status, SEND_WC_OPCODE[wr.opcode],
                                         self.qp_num, byte_len))

    def _check_send_wr(self, wr: SendWr) -> None:
        op = wr.opcode
        if self.qp_type is QpType.UD:
            if op not in (WrOpcode.SEND, WrOpcode.SEND_WITH_IMM):
                raise RoceError(f"{op.name} is not supported on UD")
            if wr.ud is None:
                raise RoceError("a UD send needs its destination (SendWr.ud)")
            if wr.length_bytes > self.attrs.path_mtu_bytes:
                raise RoceError(f"UD message of {wr.length_bytes} bytes exceeds the path MTU")
        elif self.qp_type is QpType.UC and op not in (
            WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE,
            WrOpcode.RDMA_WRITE_WITH_IMM,
        ):
            raise RoceError(f"{op.name} is not supported on UC")
        for sge in wr.sg_list:
            if sge.mr.pd is not self.pd or not sge.mr.registered:
                raise RoceError(f"SGE lkey {sge.mr.lkey:#x} is not registered in the QP's PD")
            if (op is WrOpcode.RDMA_READ or op in (
                WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD
            )) and not sge.mr.access & Access.LOCAL_WRITE:
                raise RoceError(f"{op.name} target lkey {sge.mr.lkey:#x} lacks LOCAL_WRITE")


def check_recv_wr(wr: RecvWr) -> None:
    """Receive buffers must be registered with LOCAL_WRITE."""
    for sge in wr.sg_list:
        if not sge.mr.registered:
            raise RoceError(f"receive SGE lkey {sge.mr.lkey:#x} is not registered")
        if not sge.mr.access & Access.LOCAL_WRITE:
            raise RoceError(f"receive SGE lkey {sge.mr.lkey:#x} lacks LOCAL_WRITE")
