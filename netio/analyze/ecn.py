"""ECN and congestion notification: CE marks, CNPs matched to the flow they throttle.

RoCEv2 congestion control (IBTA Annex A17.9, DCQCN): a switch marks data
packets CE; the receiver (notification point) answers with a CNP to the
sender (reaction point). The CNP's BTH dest QP is the *sender's* QP and it
travels receiver → sender, so its (src IP, dst IP, dest QP) is exactly the
key of the reverse direction of the data flow (where the ACKs travel). The
data direction a CNP throttles is therefore the flow paired with the CNP's
own key.

Reaction delay: a CE mark is answered by the first CNP that leaves after it;
each CNP's delay is measured from the earliest CE mark of the throttled
direction not answered by an earlier CNP. DCQCN sends at most one CNP per
50 µs per QP; closer CNPs on one key are counted as violations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class _DirState:
    last_cnp_ns: int = -(1 << 62)
    unanswered_ns: int | None = None
    delays: list[I64] = field(default_factory=list)


class CnpMatcher:
    """Carries per-direction CE/CNP state across chunks."""

    def __init__(self, cnp_min_gap_ns: int) -> None:
        self.cnp_min_gap_ns = cnp_min_gap_ns
        self.dirs: dict[int, _DirState] = {}
        self.last_cnp_on: dict[int, int] = {}  # CNP key -> ts of its last CNP
        self.violations: dict[int, int] = {}
        self.unmatched: dict[int, int] = {}  # CNP key (unpaired) -> CNPs

    def feed(self, ce: dict[int, I64], cnps: dict[int, I64], pair: dict[int, int]) -> None:
        """``ce``: direction → CE times; ``cnps``: CNP key → CNP times (both sorted)."""
        for key, c in cnps.items():
            last = self.last_cnp_on.get(key)
            gaps = np.diff(c) if last is None else np.diff(np.concatenate(([last], c)))
            self.violations[key] = self.violations.get(key, 0) + int(
                np.count_nonzero(gaps < self.cnp_min_gap_ns))
            self.last_cnp_on[key] = int(c[-1])
        throttled: dict[int, I64] = {}
        for key, c in cnps.items():
            d = pair.get(key)
            if d is None:
                self.unmatched[key] = self.unmatched.get(key, 0) + int(c.size)
            else:
                throttled[d] = c
        for d in set(ce) | set(throttled):
            st = self.dirs.get(d)
            if st is None:
                st = self.dirs[d] = _DirState()
            e = ce.get(d, np.empty(0, dtype=np.int64))
            got = throttled.get(d)
            if got is None:
                if st.unanswered_ns is None and e.size:
                    st.unanswered_ns = int(e[0])
                continue
            c = got
            prev = np.empty(c.size, dtype=np.int64)
            prev[0] = st.last_cnp_ns
            prev[1:] = c[:-1]
            idx = np.searchsorted(e, prev, side="right")
            ok = idx < e.size
            first = np.where(ok, e[np.minimum(idx, max(e.size - 1, 0))] if e.size else 0, 0)
            ok &= first <= c
            if st.unanswered_ns is not None:
                first[0] = st.unanswered_ns
                ok[0] = True
            if np.any(ok):
                st.delays.append((c - first)[ok])
            st.last_cnp_ns = int(c[-1])
            later = np.searchsorted(e, c[-1], side="right")
            st.unanswered_ns = int(e[later]) if later < e.size else None

    def delays_ns(self, direction: int) -> I64:
        st = self.dirs.get(direction)
        if st is None or not st.delays:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(st.delays)
