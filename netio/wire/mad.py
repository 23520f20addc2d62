"""Management datagrams on QP1 (IBTA vol 1 §13.4): the common MAD header.

Enough to name the message: management class, method, and for the
Communication Manager class (§12.6) which CM message the attribute ID is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Self

from netio.errors import DecodeError
from netio.wire._fields import FieldSpec, out_of_range

#: Every MAD is 256 bytes (§13.4.2).
MAD_SIZE_BYTES = 256
#: QP1 is the General Services Interface QP that carries MADs (§13.5.1).
GSI_QP = 1
#: Well-known Q_Key of QP1.
GSI_QKEY = 0x80010000


class MgmtClass(IntEnum):
    SUBN_LID_ROUTED = 0x01
    SUBN_ADM = 0x03
    PERF_MGMT = 0x04
    BASEBOARD_MGMT = 0x05
    DEV_MGMT = 0x06
    CM = 0x07
    SNMP = 0x08
    SUBN_DIRECTED_ROUTE = 0x81


class MadMethod(IntEnum):
    GET = 0x01
    SET = 0x02
    SEND = 0x03
    TRAP = 0x05
    REPORT = 0x06
    TRAP_REPRESS = 0x07
    GET_TABLE = 0x12
    GET_RESP = 0x81
    REPORT_RESP = 0x86


class CmMessage(IntEnum):
    """CM attribute IDs (IBTA §12.6, Table 98)."""

    REQ = 0x0010
    MRA = 0x0011
    REJ = 0x0012
    REP = 0x0013
    RTU = 0x0014
    DREQ = 0x0015
    DREP = 0x0016
    SIDR_REQ = 0x0017
    SIDR_REP = 0x0018
    LAP = 0x0019
    APR = 0x001A


_CM_BY_VALUE: dict[int, CmMessage] = {int(m): m for m in CmMessage}
_MAD = struct.Struct(">BBBBHHQHHI")
_MAD_FIELDS: FieldSpec = (
    ("base_version", 8), ("mgmt_class", 8), ("class_version", 8), ("method", 8), ("status", 16),
    ("transaction_id", 64), ("attribute_id", 16), ("attribute_modifier", 32),
    ("class_specific", 16),
)


@dataclass(frozen=True, slots=True)
class Mad:
    """Common MAD header (24 bytes, §13.4.2); the 232 data bytes follow it."""

    base_version: int = 1
    mgmt_class: int = MgmtClass.CM
    class_version: int = 2
    method: int = MadMethod.SEND
    status: int = 0
    transaction_id: int = 0
    attribute_id: int = 0
    attribute_modifier: int = 0
    class_specific: int = 0

    SIZE_BYTES: ClassVar[int] = 24

    def __post_init__(self) -> None:
        try:
            ok = (0 <= self.base_version <= 0xFF and 0 <= self.mgmt_class <= 0xFF
                  and 0 <= self.class_version <= 0xFF and 0 <= self.method <= 0xFF
                  and 0 <= self.status <= 0xFFFF and 0 <= self.transaction_id < 1 << 64
                  and 0 <= self.attribute_id <= 0xFFFF
                  and 0 <= self.attribute_modifier <= 0xFFFFFFFF
                  and 0 <= self.class_specific <= 0xFFFF)
        except TypeError:
            ok = False
        if not ok:
            raise out_of_range("MAD", self, _MAD_FIELDS)

    @property
    def is_response(self) -> bool:
        """The R bit of the method byte."""
        return (self.method & 0x80) != 0

    @property
    def cm_message(self) -> CmMessage | None:
        """The CM message type for Communication Manager MADs, else None."""
        if self.mgmt_class != MgmtClass.CM:
            return None
        return _CM_BY_VALUE.get(self.attribute_id)

    def encode(self) -> bytes:
        return _MAD.pack(self.base_version, self.mgmt_class, self.class_version, self.method,
                         self.status, self.class_specific, self.transaction_id,
                         self.attribute_id, 0, self.attribute_modifier)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> Self:
        if len(buf) - offset < 24:
            raise DecodeError("MAD", offset, f"need 24 bytes of MAD header, have "
                                             f"{len(buf) - offset}")
        (base, mclass, cver, method, status, cspec, tid, attr, _resv,
         amod) = _MAD.unpack_from(buf, offset)
        return cls(base, mclass, cver, method, status, tid, attr, amod, cspec)


# ------------------------------------------------------------ CM message fields
#
# The Communication Manager messages that set up and tear down a connection
# (IBTA vol 1 §12.6.5 Table 106 REQ, §12.6.8 Table 110 REP, Table 111 RTU,
# §12.6.10 Table 112 DREQ, Table 113 DREP). Offsets are bytes into the MAD's
# data (after the 24-byte common header); "byte[bit]" fields count bit 0 as
# the most significant bit of the byte, as the tables do.

#: Path MTU codes of the REQ (IBTA §9.7 / Table 106 "Path Packet Payload MTU").
PATH_MTU_BYTES: dict[int, int] = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def _u24(buf: bytes | bytearray | memoryview, at: int) -> int:
    return int.from_bytes(buf[at:at + 3], "big")


def _u32(buf: bytes | bytearray | memoryview, at: int) -> int:
    return int.from_bytes(buf[at:at + 4], "big")


@dataclass(frozen=True, slots=True)
class CmReq:
    """REQ (Table 106): the active side asks to connect its QP."""

    local_comm_id: int  # byte 0
    service_id: int  # byte 8, 64 bits
    local_qpn: int  # byte 32, 24 bits
    responder_resources: int  # byte 35
    initiator_depth: int  # byte 39
    starting_psn: int  # byte 44, 24 bits
    local_cm_response_timeout: int  # byte 47 bits 0-4
    retry_count: int  # byte 47 bits 5-7
    partition_key: int  # byte 48, 16 bits
    path_mtu_code: int  # byte 50 bits 0-3
    rnr_retry_count: int  # byte 50 bits 5-7
    max_cm_retries: int  # byte 51 bits 0-3

    @property
    def path_mtu_bytes(self) -> int | None:
        return PATH_MTU_BYTES.get(self.path_mtu_code)


@dataclass(frozen=True, slots=True)
class CmRep:
    """REP (Table 110): the passive side accepts with its QP."""

    local_comm_id: int  # byte 0
    remote_comm_id: int  # byte 4
    local_qpn: int  # byte 12, 24 bits
    starting_psn: int  # byte 20, 24 bits
    responder_resources: int  # byte 24
    initiator_depth: int  # byte 25
    rnr_retry_count: int  # byte 27 bits 0-2


@dataclass(frozen=True, slots=True)
class CmRtu:
    """RTU (Table 111): the active side is ready to use the connection."""

    local_comm_id: int
    remote_comm_id: int


@dataclass(frozen=True, slots=True)
class CmDreq:
    """DREQ (Table 112): one side asks to disconnect; ``remote_qpn`` is the peer's QP."""

    local_comm_id: int
    remote_comm_id: int
    remote_qpn: int  # byte 8, 24 bits


@dataclass(frozen=True, slots=True)
class CmDrep:
    """DREP (Table 113): the other side confirms the disconnection."""

    local_comm_id: int
    remote_comm_id: int


CmFields = CmReq | CmRep | CmRtu | CmDreq | CmDrep


def decode_cm(mad_bytes: bytes | bytearray | memoryview) -> CmFields | None:
    """The fields of a REQ, REP, RTU, DREQ or DREP MAD (the whole 256-byte MAD);
    None for other MADs. DecodeError when the MAD is too short for its message."""
    mad = Mad.decode(mad_bytes)
    kind = mad.cm_message
    if kind not in (CmMessage.REQ, CmMessage.REP, CmMessage.RTU, CmMessage.DREQ,
                    CmMessage.DREP):
        return None
    d = memoryview(mad_bytes)[Mad.SIZE_BYTES:]
    need = {CmMessage.REQ: 52, CmMessage.REP: 28, CmMessage.DREQ: 11}.get(kind, 8)
    if len(d) < need:
        raise DecodeError("CM", Mad.SIZE_BYTES, f"{kind.name} needs {need} bytes of data, "
                                                f"has {len(d)}")
    if kind is CmMessage.REQ:
        return CmReq(
            local_comm_id=_u32(d, 0), service_id=int.from_bytes(d[8:16], "big"),
            local_qpn=_u24(d, 32), responder_resources=d[35], initiator_depth=d[39],
            starting_psn=_u24(d, 44), local_cm_response_timeout=d[47] >> 3,
            retry_count=d[47] & 0x7, partition_key=int.from_bytes(d[48:50], "big"),
            path_mtu_code=d[50] >> 4, rnr_retry_count=d[50] & 0x7,
            max_cm_retries=d[51] >> 4)
    if kind is CmMessage.REP:
        return CmRep(local_comm_id=_u32(d, 0), remote_comm_id=_u32(d, 4),
                     local_qpn=_u24(d, 12), starting_psn=_u24(d, 20),
                     responder_resources=d[24], initiator_depth=d[25],
                     rnr_retry_count=d[27] >> 5)
    if kind is CmMessage.RTU:
        return CmRtu(_u32(d, 0), _u32(d, 4))
    if kind is CmMessage.DREQ:
        return CmDreq(_u32(d, 0), _u32(d, 4), _u24(d, 8))
    return CmDrep(_u32(d, 0), _u32(d, 4))
