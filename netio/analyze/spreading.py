"""Pause spreading: chains of pauses across senders and captures, root and victims.

Every paused interval of every sender (capture, source MAC, priority), from
all captures merged by timestamp, is an event at its start time. Events are
taken in time order; an event joins the first chain holding a member of a
*different* sender whose pause started no earlier than ``causality_ns``
before it (each sender appears once per chain, with its first pause).
Chains of at least two senders are reported.

The root is the chain's first pause. The flows converging on it are the RoCE
flows seen in the root's capture that are addressed to the pausing MAC, at
the paused priority; the congested destination is their destination IP with
the most data bytes. A later member pauses its link peer; the flows that peer
sends into the pausing MAC (seen in that member's capture, at the paused
priority) are paused with it. If none of them goes to the congested
destination, that peer is a victim: paused although it never sent there; its
victim flows are those of them that carried data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PauseEvent:
    start_ns: int
    capture: str
    src_mac: int
    priority: int | None


#: An IP address as (integer, IPv6) so IPv4 and IPv6 never collide.
Address = tuple[int, bool]


@dataclass(frozen=True, slots=True)
class FlowSeen:
    """A flow observed at a capture point (for root/victim attribution)."""

    capture: str
    src_ip: int
    dst_ip: int
    dest_qp: int
    dst_mac: int
    priority: int | None
    data_bytes: int
    ipv6: bool = False

    @property
    def destination(self) -> Address:
        return (self.dst_ip, self.ipv6)


@dataclass(frozen=True, slots=True)
class Victim:
    """A chain member whose paused peer sends only elsewhere than the congested destination."""

    member: PauseEvent
    destinations: tuple[Address, ...]
    flows: tuple[FlowSeen, ...]  # the paused flows that carried data, by address and QP


@dataclass(frozen=True, slots=True)
class Chain:
    members: tuple[PauseEvent, ...]
    congested_destination: Address | None
    converging: tuple[FlowSeen, ...]
    victims: tuple[Victim, ...]

    @property
    def root(self) -> PauseEvent:
        return self.members[0]


def build_chains(events: Sequence[PauseEvent], flows: Sequence[FlowSeen],
                 causality_ns: int) -> list[Chain]:
    chains: list[list[PauseEvent]] = []
    for ev in sorted(events, key=lambda e: (e.start_ns, e.capture, e.src_mac)):
        for chain in chains:
            if any(m.start_ns <= ev.start_ns <= m.start_ns + causality_ns
                   and (m.capture, m.src_mac) != (ev.capture, ev.src_mac) for m in chain):
                if all((m.capture, m.src_mac) != (ev.capture, ev.src_mac) for m in chain):
                    chain.append(ev)
                break
        else:
            chains.append([ev])
    out = []
    for chain in chains:
        if len(chain) < 2:
            continue
        root = chain[0]

        def toward(m: PauseEvent) -> list[FlowSeen]:
            return [f for f in flows if f.capture == m.capture and f.dst_mac == m.src_mac
                    and (m.priority is None or f.priority == m.priority)]

        conv = toward(root)
        by_dst: dict[Address, int] = {}
        for f in conv:
            by_dst[f.destination] = by_dst.get(f.destination, 0) + f.data_bytes
        dest = max(by_dst, key=lambda d: (by_dst[d], -d[1], -d[0])) if by_dst else None
        victims = []
        for m in chain[1:]:
            paused = toward(m)
            dsts = tuple(sorted({f.destination for f in paused}))
            if dest is not None and dsts and dest not in dsts:
                data = sorted((f for f in paused if f.data_bytes > 0),
                              key=lambda f: (f.ipv6, f.src_ip, f.dst_ip, f.dest_qp))
                victims.append(Victim(m, dsts, tuple(data)))
        out.append(Chain(tuple(chain), dest, tuple(conv), tuple(victims)))
    return out


ASSUMPTIONS: tuple[str, ...] = (
    "Captures are time-synchronised: timestamps of different files are compared directly.",
    "A pause that starts within the causality window after another sender's pause started "
    "is taken to be caused by it (temporal correlation, not proof).",
    "The root is the earliest pause of a chain; pauses before the first capture started "
    "are invisible.",
    "A PFC frame from MAC M in a capture pauses the traffic sent to M on that link; the "
    "flows addressed to M at the paused priority are the paused ones.",
    "The congested destination is the destination IP with the most data bytes among the "
    "flows converging on the root.",
)
