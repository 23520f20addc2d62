"""PFC storm detection over paused intervals, as the SONiC PFC watchdog sees it.

A queue that stays paused continuously for at least the detection time is in
a storm (detected ``detection`` after that pause began). The storm lasts while
pauses keep coming: it is restored once the queue has been unpaused for the
restoration time. So a storm is a cluster of paused intervals separated by
gaps shorter than the restoration time, holding one interval at least as long
as the detection time; it starts with the first such interval and ends with
the cluster's last pause (``restored_ns`` = end + restoration time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Storm:
    start_ns: int
    end_ns: int
    detected_ns: int
    restored_ns: int
    intervals: int  # paused intervals inside the storm

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def detect_storms(intervals: Sequence[tuple[int, int]], detection_ns: int,
                  restoration_ns: int) -> list[Storm]:
    """Storms in ``intervals`` (disjoint, in time order)."""
    out: list[Storm] = []
    i = 0
    n = len(intervals)
    while i < n:
        j = i
        while j + 1 < n and intervals[j + 1][0] - intervals[j][1] < restoration_ns:
            j += 1
        first_long = next((k for k in range(i, j + 1)
                           if intervals[k][1] - intervals[k][0] >= detection_ns), None)
        if first_long is not None:
            s = intervals[first_long][0]
            e = intervals[j][1]
            out.append(Storm(s, e, s + detection_ns, e + restoration_ns, j - first_long + 1))
        i = j + 1
    return out
