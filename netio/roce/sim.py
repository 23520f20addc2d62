"""A deterministic runner for two in-memory engines joined by faulty links.

Virtual time only moves forward to the next event (a delivery or an engine timer), so a
run is reproducible and independent of the machine's speed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netio.roce.engine import CompletionQueue, OutgoingDatagram, RoceEngine
from netio.roce.link import FaultyLink, LinkFaults
from netio.roce.memory import ProtectionDomain
from netio.roce.native_path import RxRing
from netio.roce.qp import QpAttributes, QpState, QpType, QueuePair


class EnginePair:
    """Engines ``a`` and ``b``; ``ab`` carries a's datagrams to b, ``ba`` the reverse."""

    def __init__(self, a: RoceEngine, b: RoceEngine, ab: FaultyLink | None = None,
                 ba: FaultyLink | None = None, *, start_ns: int = 0,
                 ring_rx: bool = False) -> None:
        """``ring_rx``: deliver what arrives at once as one receive ring (the native path's
        batch input, as a driver's ``recvmmsg`` would) to engines that use the native
        path, rather than one ``receive_datagram`` at a time."""
        self.a, self.b = a, b
        self.ring_rx = ring_rx
        self._rings: dict[int, RxRing] = {}
        self.ab = ab if ab is not None else FaultyLink(0)
        self.ba = ba if ba is not None else FaultyLink(1)
        self.now_ns = start_ns
        self.steps = 0

    def _flush(self) -> bool:
        moved = False
        for engine, link in ((self.a, self.ab), (self.b, self.ba)):
            for d in engine.datagrams_to_send(self.now_ns):
                link.send(d, self.now_ns)
                moved = True
        return moved

    def _deliver(self) -> bool:
        moved = False
        for link, dst, src in ((self.ab, self.b, self.a), (self.ba, self.a, self.b)):
            due = link.pop_due(self.now_ns)
            if due and self.ring_rx and dst.native and isinstance(src.local_ip,
                                                                  ipaddress.IPv4Address):
                self._deliver_ring(due, dst, src.local_ip)
                moved = True
                continue
            for d in due:
                dst.receive_datagram(d.payload, src.local_ip, self.now_ns, d.src_udp_port)
                moved = True
        return moved

    def _deliver_ring(self, due: list[OutgoingDatagram], dst: RoceEngine,
                      src_ip: ipaddress.IPv4Address) -> None:
        ring = self._rings.get(id(dst))
        if ring is None:
            ring = self._rings[id(dst)] = RxRing(64, 9216)
        now = self.now_ns
        for start in range(0, len(due), ring.nslots):
            chunk = due[start:start + ring.nslots]
            ring.fill([(d.payload, src_ip, d.src_udp_port) for d in chunk])

            def slow(i: int, ring: RxRing = ring) -> None:
                ip, port = ring.source(i)
                dst.receive_datagram(bytes(ring.slot(i)), ip, now, port)

            dst.receive_ring(ring, now, slow)

    def next_event_ns(self) -> int | None:
        times = [t for t in (self.ab.next_delivery_ns(), self.ba.next_delivery_ns(),
                             self.a.get_timer(), self.b.get_timer()) if t is not None]
        return min(times) if times else None

    def step(self) -> bool:
        """Advance to the next event and process it; False when nothing is left to do."""
        self.steps += 1
        if self._flush():
            return True
        nxt = self.next_event_ns()
        if nxt is None:
            return False
        self.now_ns = max(self.now_ns, nxt)
        self._deliver()
        self.a.handle_timer(self.now_ns)
        self.b.handle_timer(self.now_ns)
        return True

    def run(self, until: Callable[[], bool] | None = None, *,
            max_time_ns: int = 60_000_000_000, max_steps: int = 10_000_000) -> bool:
        """Run until ``until()`` holds (True), or nothing is left / a limit hits (False)."""
        deadline = self.now_ns + max_time_ns
        for _ in range(max_steps):
            if until is not None and until():
                return True
            if self.now_ns > deadline or not self.step():
                return until() if until is not None else True
        return until() if until is not None else False



@dataclass(frozen=True, slots=True)
class Endpoint:
    """One side of ``connected_pair``: its engine, PD, CQ (send and receive) and QP."""

    engine: RoceEngine
    pd: ProtectionDomain
    cq: CompletionQueue
    qp: QueuePair


def connected_pair(qp_type: QpType = QpType.RC, *, seed: int = 0,
                   faults_ab: LinkFaults | None = None, faults_ba: LinkFaults | None = None,
                   psn_a: int = 0, psn_b: int = 0, qkey: int = 0x11111111,
                   native: bool | None = None, ring_rx: bool = False,
                   coalesce_acks: bool | None = None,
                   **attrs: Any) -> tuple[EnginePair, Endpoint, Endpoint]:
    """Two engines (10.0.0.1 and 10.0.0.2) with one QP each, connected and in RTS.

    ``psn_a``/``psn_b`` are the first PSNs each side sends; ``attrs`` override
    ``QpAttributes`` fields on both sides (e.g. ``path_mtu_bytes=256``, ``retry_cnt=2``).
    ``native``: the engines' native path (None: when built); ``ring_rx``: see EnginePair;
    ``coalesce_acks``: see RoceEngine.
    """
    ip_a, ip_b = ipaddress.IPv4Address("10.0.0.1"), ipaddress.IPv4Address("10.0.0.2")
    ends = []
    for ip in (ip_a, ip_b):
        engine = RoceEngine(ip, native=native, coalesce_acks=coalesce_acks)
        pd = engine.alloc_pd()
        cq = engine.create_cq()
        ends.append(Endpoint(engine, pd, cq, engine.create_qp(pd, qp_type, cq, cq)))
    a, b = ends
    base = QpAttributes(qkey=qkey, **attrs)
    for me, peer, ip_peer, sq, rq in ((a, b, ip_b, psn_a, psn_b), (b, a, ip_a, psn_b, psn_a)):
        full = dataclasses.replace(base, dest_qp_num=peer.qp.qp_num, remote_ip=ip_peer,
                                   sq_psn=sq, rq_psn=rq)
        me.qp.modify(QpState.INIT, full)
        me.qp.modify(QpState.RTR)
        me.qp.modify(QpState.RTS)
    pair = EnginePair(a.engine, b.engine, FaultyLink(seed, faults_ab),
                      FaultyLink(seed + 0x9E3779B9, faults_ba), ring_rx=ring_rx)
    return pair, a, b


__all__ = ["Endpoint", "EnginePair", "connected_pair"]
