"""What the engine's parts see of each other: small protocols instead of imports.

A QP owns its requester and responder, and they act on the QP and the engine; the
engine owns the QPs. Each side names only the narrow view it uses, defined here, so
the modules import one way (attributes <- ports <- requester/responder/recovery <- qp
<- engine) and the state each object owns stays with it.
"""

from __future__ import annotations

from typing import Protocol

from netio.api.types import QpType
from netio.roce.attributes import QpAttributes, QpState
from netio.roce.memory import ProtectionDomain
from netio.roce.verbs import Completion, IpAddress, RecvWr, SendWr, WcStatus
from netio.wire.bth import Bth
from netio.wire.ext import Aeth, AtomicAckEth, AtomicEth, Deth, ImmDt, Reth


class CompletionSink(Protocol):
    """Where completions go (a completion queue)."""

    def push(self, completion: Completion) -> None: ...


class EnginePort(Protocol):
    """The engine as a QP's requester and responder use it."""

    @property
    def local_ip(self) -> IpAddress: ...

    def transmit(self, qp: QpPort, dst_ip: IpAddress | None, bth: Bth, payload: bytes, *,
                 reth: Reth | None = None, aeth: Aeth | None = None,
                 atomic_eth: AtomicEth | None = None,
                 atomic_ack_eth: AtomicAckEth | None = None, imm_dt: ImmDt | None = None,
                 deth: Deth | None = None) -> None: ...

    def transmit_ack(self, qp: QpPort, psn: int, msn: int) -> None: ...

    def qp_changed(self, qp: QpPort) -> None: ...

    def transmit_run(self, qp: QpPort, wr: SendWr, length: int, npkts: int, k0: int,
                     psn0: int, count: int, noack_pkts: int) -> int | None: ...

    @property
    def coalescing_acks(self) -> bool: ...

    def hold_ack(self, qp: QpPort) -> None: ...


class QpPort(Protocol):
    """The queue pair as its requester and responder use it."""

    @property
    def engine(self) -> EnginePort: ...
    @property
    def qp_num(self) -> int: ...
    @property
    def qp_type(self) -> QpType: ...
    @property
    def state(self) -> QpState: ...
    @property
    def attrs(self) -> QpAttributes: ...
    @property
    def pd(self) -> ProtectionDomain: ...
    @property
    def recv_cq(self) -> CompletionSink: ...
    @property
    def udp_src_port(self) -> int: ...

    def take_recv(self) -> RecvWr | None: ...

    def return_recv(self, wr: RecvWr) -> None: ...

    def enter_error(self) -> None: ...

    def complete_send(self, wr: SendWr, status: WcStatus, *, force: bool = False) -> None: ...


class RequesterPort(Protocol):
    """The requester as its retry and timer logic (recovery) uses it."""

    @property
    def qp(self) -> QpPort: ...
    @property
    def comp_psn(self) -> int: ...
    @property
    def outstanding(self) -> bool: ...

    def fail(self, status: WcStatus) -> None: ...

    def seek(self, psn: int) -> None: ...


__all__ = ["CompletionSink", "EnginePort", "QpPort", "RequesterPort"]
