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
