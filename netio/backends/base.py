"""The one small interface every IO backend implements (soft, verbs, tcp).

A backend gives a context three things: memory registration, queue pairs (reliable
connected endpoints) and a description of the device and address it chose. A QP
takes batches of work requests (``post_send``/``post_recv`` take sequences, as
``ibv_post_send`` takes a linked list), reports completions through ``poll`` and
calls the ``notify`` callback it was created with whenever completions may be
waiting. Everything runs on the context's event loop; nothing here blocks.

The requests name local memory by :class:`Segment` (a registered region, offset,
length) and remote memory by address and rkey, like ``struct ibv_send_wr``; the
public API (``netio.Endpoint``) builds them from regions and descriptors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from netio.api.types import Access, Completion, QpType, WrOpcode


class BackendRegion(Protocol):
    """A registered memory region as the backend keeps it."""

    @property
    def lkey(self) -> int: ...
    @property
    def rkey(self) -> int: ...
    @property
    def addr(self) -> int: ...
    @property
    def length(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Segment:
    """``length`` bytes at ``offset`` in a registered region (``struct ibv_sge``)."""

    region: BackendRegion
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class UdDest:
    """Where a datagram (UD) SEND goes: the peer's GID (text form), QP number and Q_Key
    (the address handle, remote QPN and remote Q_Key of ``struct ibv_send_wr.wr.ud``)."""

    gid: str
    qpn: int
    qkey: int


@dataclass(frozen=True, slots=True)
class SendRequest:
    """A send-queue work request. ``imm_data`` only for the *_WITH_IMM opcodes;
    ``compare_add``/``swap`` for atomics; ``inline`` asks the backend to copy the
    payload at post time (the buffer may be reused at once)."""

    wr_id: int
    opcode: WrOpcode
    segments: tuple[Segment, ...] = ()
    remote_addr: int = 0
    rkey: int = 0
    imm_data: int | None = None
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True
    inline: bool = False
    ud: UdDest | None = None

    @property
    def length_bytes(self) -> int:
        return sum(s.length for s in self.segments)


@dataclass(frozen=True, slots=True)
class RecvRequest:
    """A receive work request: where an incoming SEND's payload lands."""

    wr_id: int
    segments: tuple[Segment, ...] = ()


class Transport:
    """Which backends can talk to each other: RoCEv2 (soft and verbs) or netio's TCP."""

    ROCE = "rocev2"
    TCP = "tcp"


@dataclass(frozen=True, slots=True)
class QpAddress:
    """What a peer needs to connect to a QP; carried by netio's exchange.

    ``gid`` is the 16-byte GID in text form (``::ffff:10.0.0.1`` for an IPv4 RoCEv2
    GID); ``mtu_bytes`` the largest path MTU this side supports.
    """

    transport: str
    gid: str
    qpn: int
    psn: int
    mtu_bytes: int
    gid_index: int = 0
    gid_type: str = "RoCEv2"
    device: str = ""
    netdev: str = ""


#: A QP's default remote access: every operation (each region still decides its own).
QP_ACCESS_ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | (
    Access.REMOTE_ATOMIC)


@dataclass(frozen=True, slots=True)
class QpOptions:
    """Per-connection settings (``struct ibv_qp_attr`` values the user may choose).

    ``timeout`` is the IBTA local ACK timeout exponent (4.096 µs x 2**timeout),
    ``retry_count`` and ``rnr_retry`` 3-bit counts (``rnr_retry`` 7 = for ever),
    ``traffic_class`` the IP TOS byte (DSCP << 2 | ECN)."""

    timeout: int = 14
    retry_count: int = 7
    rnr_retry: int = 7
    min_rnr_timer: int = 12
    traffic_class: int = 0
    max_send_wr: int = 1024
    max_recv_wr: int = 1024
    max_inline_bytes: int = 64
    qkey: int = 0
    max_rd_atomic: int = 16
    access: Access = QP_ACCESS_ALL


@dataclass(frozen=True, slots=True)
class Candidate:
    """One device/port/GID the backend looked at, and why it was taken or rejected."""

    device: str
    port: int
    gid_index: int
    gid: str
    gid_type: str
    netdev: str
    mtu_bytes: int
    chosen: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Description:
    """What a backend chose and why (``Context.describe()``, ``netio doctor``)."""

    backend: str
    transport: str
    device: str = ""
    port: int = 0
    gid_index: int = 0
    gid: str = ""
    gid_type: str = ""
    netdev: str = ""
    mtu_bytes: int = 0
    local_ip: str = ""
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def summary(self) -> str:
        """One line: the chosen device, GID and MTU (the text used in error hints)."""
        if self.transport == Transport.TCP:
            return f"tcp {self.local_ip}" if self.local_ip else "tcp"
        parts = [self.backend]
        if self.gid:
            parts.append(f"GID {self.gid} (index {self.gid_index}, {self.gid_type or '?'}"
                         f"{', ' + self.netdev if self.netdev else ''})")
        if self.device:
            parts.append(f"{self.device} port {self.port}")
        if self.mtu_bytes:
            parts.append(f"MTU {self.mtu_bytes}")
        return ", ".join(parts)

    def text(self) -> str:
        """Every candidate with the reason it was taken or rejected, one per line."""
        lines = [f"backend: {self.backend} ({self.transport})", f"chosen: {self.summary()}"]
        if self.candidates:
            lines.append("candidates:")
            for c in self.candidates:
                mark = "*" if c.chosen else "-"
                lines.append(f"  {mark} {c.device or '-'} port {c.port} gid[{c.gid_index}] "
                             f"{c.gid} {c.gid_type} {c.netdev or '-'} mtu {c.mtu_bytes}: "
                             f"{c.reason}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


Notify = Callable[[], None]


class BackendQp(Protocol):
    """A reliable connected queue pair."""

    @property
    def qpn(self) -> int: ...

    def address(self) -> QpAddress:
        """This QP's address, sent to the peer by the exchange."""
        ...

    async def connect(self, remote: QpAddress, mtu_bytes: int,
                      stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
                      ) -> None:
        """Bring a connected (RC/UC) QP up towards ``remote`` with the agreed path MTU.
        ``stream`` is the exchange's TCP connection: the tcp backend carries its data on it
        (and needs it), the RDMA backends leave it alone. UD QPs are ready when created."""
        ...

    def post_send(self, requests: Sequence[SendRequest]) -> None:
        """Post a batch of send-queue requests (one doorbell); raises on an invalid one
        before posting any."""
        ...

    def post_recv(self, requests: Sequence[RecvRequest]) -> None:
        """Post a batch of receives."""
        ...

    def poll(self, max_entries: int) -> list[Completion]:
        """Up to ``max_entries`` completions, oldest first (send and receive)."""
        ...

    def counters(self) -> dict[str, int]:
        """Backend counters for this QP (retransmissions, drops, NAKs...)."""
        ...

    # A backend that learns by itself that the peer left (the tcp backend's connection
    # ended) also has ``peer_gone: bool``; Endpoint.peer_closed reads it when present.

    def diagnosis(self) -> str:
        """Why this QP last refused a peer's request (\"\" when it has not, or the backend
        cannot tell), e.g. the path-MTU mismatch a payload length reveals."""
        ...

    async def close(self) -> None:
        """Move to the error state (outstanding requests complete flushed), then release
        everything. Bounded, idempotent."""
        ...


class Progressable(Protocol):
    """Optional: a backend the waiting thread can drive itself (``progress="poll"``).

    ``progress`` does, without blocking, what the event loop would do for the backend:
    take in what has arrived, run the timers that are due, send what is ready, and call
    the QPs' ``notify`` for completions. True when it did anything (a wait keeps spinning
    after progress). The soft backend polls its sockets; a verbs backend would poll its
    CQs. A backend without it still works polled: the wait turns the loop instead.
    ``progress_fds`` (also optional) names the file descriptors that become readable when
    ``progress`` has work: a wait that stopped spinning first sleeps in ``poll(2)`` on them,
    which wakes faster than a turn of the event loop."""

    def progress(self) -> bool: ...

    def progress_fds(self) -> list[int]: ...


class Backend(Protocol):
    """One context's backend: its device, protection domain and QPs."""

    name: str
    transport: str

    def register(self, view: memoryview, access: Access) -> BackendRegion:
        """Register ``view`` in place (no copy)."""
        ...

    def deregister(self, region: BackendRegion) -> None:
        ...

    async def create_qp(self, local_ip: str, options: QpOptions, notify: Notify,
                        qp_type: QpType = QpType.RC, psn: int | None = None) -> BackendQp:
        """A new QP whose traffic leaves from ``local_ip`` (the address the route to the
        peer uses); ``notify`` is called on the loop when completions may be ready;
        ``psn`` the starting send PSN (random when None). A UD QP is ready at once."""
        ...

    def describe(self) -> Description:
        ...

    async def close(self) -> None:
        ...


__all__ = [
    "Backend",
    "BackendQp",
    "BackendRegion",
    "Candidate",
    "Description",
    "Notify",
    "Progressable",
    "QpAddress",
    "QpOptions",
    "RecvRequest",
    "Segment",
    "SendRequest",
    "Transport",
    "UdDest",
]
