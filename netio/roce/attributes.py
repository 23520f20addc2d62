"""Queue pair states, attributes and the IBTA-legal state transitions (data only).

Rule (after h11 ``_state.py``): every QP state change goes through
``QueuePair.modify`` (verbs) or ``QueuePair.enter_error`` (transport errors), and the
legal verbs transitions live in ``LEGAL_TRANSITIONS`` below (IBTA vol 1 §10.3.1,
figure 124 "QP/EE state diagram"; the kernel's ``ib_modify_qp_is_ok`` table). This
module imports nothing of the engine, so every engine module can use it.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

from netio.api.types import Access
from netio.errors import RoceError
from netio.roce.psn import PSN_MASK
from netio.roce.verbs import IpAddress

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
