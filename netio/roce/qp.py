"""A queue pair of the soft engine: verbs entry points and state changes.

Its states, attributes and legal transitions are data in :mod:`netio.roce.attributes`;
the send and receive sides are :class:`Requester` and :class:`Responder`, which see
the QP only through :class:`netio.roce.ports.QpPort`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from netio.api.types import Access
from netio.api.types import QpType as QpType  # re-exported: the engine's users name it here
from netio.errors import RoceError
from netio.roce.attributes import (
    LEGAL_TRANSITIONS,
    RECEIVE_STATES,
    ROCE_UDP_SPORT_MIN,
    SEND_STATES,
    VALID_MTUS_BYTES,
    QpAttributes,
    QpState,
    ack_timeout_ns,
    default_udp_source_port,
    rdma_flow_label,
    udp_source_port,
)
from netio.roce.memory import ProtectionDomain
from netio.roce.ports import EnginePort
from netio.roce.queues import CompletionQueue, SharedReceiveQueue, check_recv_wr
from netio.roce.requester import Requester
from netio.roce.responder import Responder
from netio.roce.verbs import (
    READ_OR_ATOMIC,
    SEND_WC_OPCODE,
    Completion,
    RecvWr,
    SendWr,
    WcOpcode,
    WcStatus,
    WrOpcode,
)


@dataclass(slots=True)
class QueuePair:
    """One queue pair of a ``RoceEngine``; create it with ``RoceEngine.create_qp``."""

    engine: EnginePort = field(repr=False)
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
            self.complete_send(wr, WcStatus.WR_FLUSH_ERR, force=True)
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
        # An ACK held for coalescing acknowledges requests already executed (and completed
        # here): it goes before the QP stops answering, or the peer would retry them.
        self.responder.release_ack()
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

    def complete_send(self, wr: SendWr, status: WcStatus, *, force: bool = False) -> None:
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
            if op in READ_OR_ATOMIC and not sge.mr.access & Access.LOCAL_WRITE:
                raise RoceError(f"{op.name} target lkey {sge.mr.lkey:#x} lacks LOCAL_WRITE")


__all__ = [
    "LEGAL_TRANSITIONS",
    "RECEIVE_STATES",
    "ROCE_UDP_SPORT_MIN",
    "SEND_STATES",
    "VALID_MTUS_BYTES",
    "QpAttributes",
    "QpState",
    "QpType",
    "QueuePair",
    "ack_timeout_ns",
    "check_recv_wr",
    "default_udp_source_port",
    "rdma_flow_label",
    "udp_source_port",
]
