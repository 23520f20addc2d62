"""Work requests, completions and their ibverbs-compatible enumerations.

Values equal the libibverbs ones (``enum ibv_wr_opcode``, ``ibv_wc_status``,
``ibv_wc_opcode``, ``ibv_wc_flags``) so that a verbs backend and the soft engine
report identical numbers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from netio.api.types import Completion, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.errors import RoceError
from netio.roce.memory import Sge

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_MESSAGE_BYTES = 1 << 31  # IBTA §9.4: a message is at most 2**31 bytes
ATOMIC_OPERAND_BYTES = 8
_U64_END = 1 << 64


SEND_WC_OPCODE: dict[WrOpcode, WcOpcode] = {
    WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WrOpcode.SEND: WcOpcode.SEND,
    WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
    WrOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
    WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
}

READ_OR_ATOMIC = frozenset(
    {WrOpcode.RDMA_READ, WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD}
)
ATOMICS = frozenset({WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD})


@dataclass(frozen=True, slots=True)
class UdAddress:
    """The destination of a UD send (the address handle plus remote QPN and Q_Key)."""

    ip: IpAddress
    qpn: int
    qkey: int


@dataclass(frozen=True, slots=True)
class SendWr:
    """A send work request (``struct ibv_send_wr``).

    ``sg_list`` gathers the payload (SEND/WRITE), or scatters the data (READ) or the
    8-byte original value (atomics, stored in host byte order, little-endian, as the
    kernel does). ``imm_data`` is the 32-bit immediate as carried on the wire.
    """

    wr_id: int
    opcode: WrOpcode
    sg_list: tuple[Sge, ...] = ()
    remote_addr: int = 0
    rkey: int = 0
    imm_data: int | None = None
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True
    solicited: bool = False
    fence: bool = False
    ud: UdAddress | None = None
    #: Total length of the scatter/gather list, summed once here: the QP, the requester
    #: and the completion each read it, and a sum per read cost more than the post.
    length_bytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        op = self.opcode
        if type(op) is not WrOpcode:
            op = WrOpcode(op)
        imm = self.imm_data
        with_imm = op is WrOpcode.SEND_WITH_IMM or op is WrOpcode.RDMA_WRITE_WITH_IMM
        if with_imm != (imm is not None):
            raise RoceError(f"{op.name}: imm_data must be given exactly for *_WITH_IMM")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise RoceError("imm_data does not fit 32 bits")
        if not 0 <= self.compare_add < _U64_END:
            raise RoceError("compare_add does not fit 64 bits")
        if not 0 <= self.swap < _U64_END:
            raise RoceError("swap does not fit 64 bits")
        if not 0 <= self.remote_addr < _U64_END:
            raise RoceError("remote_addr does not fit 64 bits")
        if not 0 <= self.rkey <= 0xFFFFFFFF:
            raise RoceError("rkey does not fit 32 bits")
        sg = self.sg_list
        length = sg[0].length if len(sg) == 1 else sum(s.length for s in sg)
        object.__setattr__(self, "length_bytes", length)
        if op in ATOMICS and length != ATOMIC_OPERAND_BYTES:
            raise RoceError(f"{op.name}: the local buffer must be exactly 8 bytes")
        if length > MAX_MESSAGE_BYTES:
            raise RoceError(f"message of {length} bytes exceeds 2**31")


@dataclass(frozen=True, slots=True)
class RecvWr:
    """A receive work request (``struct ibv_recv_wr``)."""

    wr_id: int
    sg_list: tuple[Sge, ...] = ()

    @property
    def length_bytes(self) -> int:
        """Capacity of the scatter list."""
        return sum(s.length for s in self.sg_list)

__all__ = [
    "ATOMICS",
    "ATOMIC_OPERAND_BYTES",
    "MAX_MESSAGE_BYTES",
    "READ_OR_ATOMIC",
    "SEND_WC_OPCODE",
    "Completion",
    "IpAddress",
    "RecvWr",
    "SendWr",
    "UdAddress",
    "WcFlags",
    "WcOpcode",
    "WcStatus",
    "WrOpcode",
]
