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

import heapq
from collections import deque
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


Sender = tuple[str, int]  # (capture, source MAC)


class _WindowIndex:
    """The chain members whose pause started within the causality window, indexed so
    that "the oldest chain holding a recent member of a sender other than S" costs
    O(log n): per sender a heap of its recent members' chain indices, and one heap
    of (smallest chain index, sender) over senders, both pruned lazily."""

    def __init__(self) -> None:
        self.recent: deque[tuple[int, Sender, int]] = deque()  # (start_ns, sender, chain)
        self.alive: set[tuple[Sender, int]] = set()
        self.by_sender: dict[Sender, list[int]] = {}
        self.version: dict[Sender, int] = {}
        self.best: list[tuple[int, int, Sender]] = []  # (chain, version, sender)

    def _publish(self, s: Sender) -> None:
        """Push sender ``s``'s current smallest live chain (if any) as its one valid entry."""
        h = self.by_sender[s]
        while h and (s, h[0]) not in self.alive:
            heapq.heappop(h)
        v = self.version[s] = self.version.get(s, 0) + 1
        if h:
            heapq.heappush(self.best, (h[0], v, s))

    def add(self, start_ns: int, s: Sender, chain: int) -> None:
        self.recent.append((start_ns, s, chain))
        self.alive.add((s, chain))
        h = self.by_sender.setdefault(s, [])
        smallest = h[0] if h else None
        heapq.heappush(h, chain)
        if smallest is None or chain < smallest or (s, smallest) not in self.alive:
            self._publish(s)

    def expire(self, before_ns: int) -> None:
        """Forget members whose pause started before ``before_ns``."""
        while self.recent and self.recent[0][0] < before_ns:
            _, s, chain = self.recent.popleft()
            self.alive.discard((s, chain))
            h = self.by_sender[s]
            if h and h[0] == chain:
                self._publish(s)

    def oldest_other(self, s: Sender) -> int | None:
        """The smallest chain index holding a recent member of a sender other than ``s``."""
        held: list[tuple[int, int, Sender]] = []
        found = None
        while self.best:
            chain, v, who = self.best[0]
            if self.version.get(who) != v:
                heapq.heappop(self.best)  # superseded
            elif who == s:
                held.append(heapq.heappop(self.best))
            else:
                found = chain
                break
        for e in held:
            heapq.heappush(self.best, e)
        return found


def group_chains(events: Sequence[PauseEvent], causality_ns: int) -> list[list[PauseEvent]]:
    """Group pause events into chains (every chain, single members included).

    Events are taken in (start, capture, MAC) order; an event joins the oldest
    chain holding a member of another sender that started at most
    ``causality_ns`` earlier, unless its sender is already in that chain (then
    the event joins nothing); otherwise it starts a chain. A time-ordered sweep
    over the members still inside the window: O(n log n) in events.
    """
    chains: list[list[PauseEvent]] = []
    senders_in: list[set[Sender]] = []
    window = _WindowIndex()
    for ev in sorted(events, key=lambda e: (e.start_ns, e.capture, e.src_mac)):
        s = (ev.capture, ev.src_mac)
        window.expire(ev.start_ns - causality_ns)
        target = window.oldest_other(s)
        if target is None:
            chains.append([ev])
            senders_in.append({s})
            window.add(ev.start_ns, s, len(chains) - 1)
        elif s not in senders_in[target]:
            chains[target].append(ev)
            senders_in[target].add(s)
            window.add(ev.start_ns, s, target)
    return chains


def build_chains(events: Sequence[PauseEvent], flows: Sequence[FlowSeen],
                 causality_ns: int) -> list[Chain]:
    """Chains of at least two senders, with their converging flows and victims."""
    toward_index: dict[tuple[str, int], list[FlowSeen]] = {}
    for f in flows:
        toward_index.setdefault((f.capture, f.dst_mac), []).append(f)

    def toward(m: PauseEvent) -> list[FlowSeen]:
        return [f for f in toward_index.get((m.capture, m.src_mac), ())
                if m.priority is None or f.priority == m.priority]

    out = []
    for chain in group_chains(events, causality_ns):
        if len(chain) < 2:
            continue
        root = chain[0]
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
