"""PFC (IEEE 802.1Qbb) and 802.3x PAUSE: per sender queue counts and paused intervals.

A queue is (capture, source MAC, VLAN, kind, priority); 802.3x PAUSE has no
priority (it stops the whole link). Each frame restarts the pause timer with
its quanta (802.1Qbb §36.1.3.2, 802.3 Annex 31B): the queue is paused from the
first XOFF until the timer runs out or an XON (quanta 0) arrives, so refreshes
extend one interval and the paused time is the union of intervals. Quanta are
turned into time at the capture's link speed (512 bit times per quantum).

The sequential rule vectorises: with ``end[i] = ts[i] + d[i]``, frame ``i``
arrives while paused exactly when ``ts[i] < end[i-1]``. Per chunk only the
open interval and the XON run of each queue are carried over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from netio.analyze.columns import Flag, Kind, PacketColumns
from netio.wire.pfc import BITS_PER_QUANTUM

I64 = npt.NDArray[np.int64]

#: Priority value used in queue keys for 802.3x PAUSE (all priorities).
LINK_PAUSE = 8


@dataclass(slots=True)
class QueueState:
    """Carried state and results of one pausing queue."""

    capture: str
    src_mac: int
    vlan: int | None
    priority: int | None  # None: 802.3x PAUSE
    xoff_frames: int = 0
    xon_frames: int = 0
    intervals: list[tuple[int, int]] = field(default_factory=list)
    open_start: int | None = None
    open_end: int = 0
    last_end: int = -(1 << 62)  # end[i-1] of the last frame seen
    xon_run: list[int] = field(default_factory=list)  # [start, last, count] of the open run
    xon_storms: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "pause" if self.priority is None else "pfc"


def quanta_ns(quanta: npt.NDArray[np.integer], link_bps: int) -> I64:
    """Pause time of each quanta value at ``link_bps``, rounded to the nearest ns."""
    q = quanta.astype(np.int64)
    return (q * BITS_PER_QUANTUM * 1_000_000_000 + link_bps // 2) // link_bps


class PauseAnalyzer:
    """Feeds on column chunks of one capture; keeps one ``QueueState`` per queue."""

    def __init__(self, capture: str, link_bps: int, *, xon_gap_ns: int, xon_storm_ns: int,
                 priorities: frozenset[int] | None = None) -> None:
        self.capture = capture
        self.link_bps = link_bps
        self.xon_gap_ns = xon_gap_ns
        self.xon_storm_ns = xon_storm_ns
        self.priorities = priorities
        self.queues: dict[tuple[int, int, int], QueueState] = {}

    def feed(self, cols: PacketColumns) -> None:
        kind = cols.kind
        ctl = np.nonzero((kind == Kind.PFC) | (kind == Kind.PAUSE))[0]
        if ctl.size == 0:
            return
        ts_all = cols.ts_ns[ctl]
        mac_all = cols.src_mac[ctl]
        vlan_all = np.where(cols.flags[ctl] & Flag.VLAN, cols.vlan[ctl].astype(np.int64), -1)
        is_pause = kind[ctl] == Kind.PAUSE
        cev = cols.pfc_cev[ctl]
        quanta = cols.quanta[ctl]
        parts: list[tuple[int, I64, npt.NDArray[np.uint64], I64, I64]] = []
        for prio in range(LINK_PAUSE + 1):
            if prio == LINK_PAUSE:
                sel = np.nonzero(is_pause)[0]
                q = quanta[sel, 0]
            else:
                if self.priorities is not None and prio not in self.priorities:
                    continue
                sel = np.nonzero(~is_pause & ((cev >> prio) & 1).astype(np.bool_))[0]
                q = quanta[sel, prio]
            if sel.size:
                parts.append((prio, ts_all[sel], mac_all[sel], vlan_all[sel],
                              quanta_ns(q, self.link_bps)))
        for prio, ts, macs, vlans, dur in parts:
            key = (macs.astype(np.int64) << 13) | ((vlans + 1) & 0x1FFF)
            uniq, inverse = np.unique(key, return_inverse=True)
            for g, k in enumerate(uniq.tolist()):
                sel = np.nonzero(inverse == g)[0]
                mac = int(k) >> 13
                vlan = (int(k) & 0x1FFF) - 1
                qkey = (mac, vlan, prio)
                st = self.queues.get(qkey)
                if st is None:
                    st = self.queues[qkey] = QueueState(
                        self.capture, mac, None if vlan < 0 else vlan,
                        None if prio == LINK_PAUSE else prio)
                self._queue(st, ts[sel], dur[sel])

    def _queue(self, st: QueueState, ts: I64, d: I64) -> None:
        n = ts.size
        end = ts + d
        prev_end = np.empty(n, dtype=np.int64)
        prev_end[0] = st.last_end
        prev_end[1:] = end[:-1]
        paused_before = ts < prev_end
        xoff = d > 0
        st.xoff_frames += int(np.count_nonzero(xoff))
        st.xon_frames += int(n - np.count_nonzero(xoff))
        # Close the carried interval if the timer ran out before this chunk's first frame.
        if st.open_start is not None and not paused_before[0]:
            st.intervals.append((st.open_start, st.open_end))
            st.open_start = None
        starts = np.nonzero(xoff & ~paused_before)[0]
        breaks = np.nonzero(~paused_before)[0]
        # The run containing frame 0 continues the carried interval.
        if st.open_start is not None:
            head_last = (int(breaks[0]) - 1) if breaks.size else n - 1
            st.open_end = int(end[head_last])
            if breaks.size:  # a later frame found the queue unpaused: interval closed
                st.intervals.append((st.open_start, st.open_end))
                st.open_start = None
        if starts.size:
            nxt = np.searchsorted(breaks, starts, side="right")
            last = np.where(nxt < breaks.size, breaks[np.minimum(nxt, breaks.size - 1)] - 1,
                            n - 1)
            s_ts = ts[starts].tolist()
            e_ts = end[last].tolist()
            for k in range(starts.size - 1):
                st.intervals.append((s_ts[k], e_ts[k]))
            st.open_start, st.open_end = s_ts[-1], e_ts[-1]
            if last[-1] < n - 1:  # closed inside this chunk
                st.intervals.append((st.open_start, st.open_end))
                st.open_start = None
        st.last_end = int(end[-1])
        self._xon_runs(st, ts[~xoff])

    def _xon_runs(self, st: QueueState, xs: I64) -> None:
        if xs.size == 0:
            return
        gap = self.xon_gap_ns
        brk = np.nonzero(np.diff(xs) > gap)[0]
        starts = np.concatenate(([0], brk + 1))
        ends = np.concatenate((brk, [xs.size - 1]))
        runs = [[int(xs[a]), int(xs[b]), int(b - a + 1)] for a, b in
                zip(starts.tolist(), ends.tolist(), strict=True)]
        if st.xon_run and runs[0][0] - st.xon_run[1] <= gap:
            runs[0] = [st.xon_run[0], runs[0][1], st.xon_run[2] + runs[0][2]]
        elif st.xon_run:
            self._close_run(st, st.xon_run)
        for r in runs[:-1]:
            self._close_run(st, r)
        st.xon_run = runs[-1]

    def _close_run(self, st: QueueState, run: list[int]) -> None:
        if run[2] > 1 and run[1] - run[0] >= self.xon_storm_ns:
            st.xon_storms.append((run[0], run[1], run[2]))

    def finish(self) -> list[QueueState]:
        for st in self.queues.values():
            if st.open_start is not None:
                st.intervals.append((st.open_start, st.open_end))
                st.open_start = None
            if st.xon_run:
                self._close_run(st, st.xon_run)
                st.xon_run = []
        return sorted(self.queues.values(),
                      key=lambda q: (q.src_mac, q.priority if q.priority is not None else 9))


def paused_within(intervals: list[tuple[int, int]], first_ns: int, last_ns: int) -> int:
    """Paused ns inside [first_ns, last_ns] (intervals are disjoint)."""
    return sum(max(0, min(e, last_ns) - max(s, first_ns)) for s, e in intervals)
