"""Backend-neutral verbs types: access flags, work-request opcodes, completion
statuses and opcodes, and the completion itself.

Every backend (soft, verbs, tcp) reports in these types. The values equal the
libibverbs ones (``enum ibv_access_flags``, ``ibv_wr_opcode``, ``ibv_wc_status``,
``ibv_wc_opcode``, ``ibv_wc_flags``) so that a status read from a real NIC and one
produced by the soft engine are the same number.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Access(enum.IntFlag):
    """Access flags of a memory region (the ibverbs ``IBV_ACCESS_*`` values)."""

    NONE = 0
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class QpType(enum.IntEnum):
    """``enum ibv_qp_type``: the transports netio offers (reliable connected, unreliable
    connected, unreliable datagram)."""

    RC = 2
    UC = 3
    UD = 4


class WrOpcode(enum.IntEnum):
    """``enum ibv_wr_opcode``."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4
    ATOMIC_CMP_AND_SWP = 5
    ATOMIC_FETCH_AND_ADD = 6


class WcStatus(enum.IntEnum):
    """``enum ibv_wc_status``."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class WcOpcode(enum.IntEnum):
    """``enum ibv_wc_opcode``."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class WcFlags(enum.IntFlag):
    """``enum ibv_wc_flags`` (the subset the engine produces)."""

    NONE = 0
    GRH = 1
    WITH_IMM = 2


@dataclass(frozen=True, slots=True)
class Completion:
    """A work completion (``struct ibv_wc``)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm_data: int | None = None
    src_qp: int = 0
    wc_flags: WcFlags = WcFlags.NONE
