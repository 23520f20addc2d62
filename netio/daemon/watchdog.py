"""PFC storm watchdog per device, direction and priority, after SONiC pfcwd.

SONiC (``pfcwd`` detect/restore Lua scripts, ``PFC_WD`` config table) polls
each lossless queue every ``poll_interval``; a queue is *stormed* when it has
been paused continuously for ``detection_time`` while not transmitting, and
*restored* when no pause frame arrived for ``restoration_time``.  A host has
no queue occupancy, so this watchdog reads counters instead:

* a poll is *paused* when the pause-frame counter grew since the last poll,
  the paused-time ratio (when the NIC measures it) is at least
  ``min_paused_ratio``, and the priority made no transmit progress (when its
  per-priority packet counter is known);
* ``detection_time_s`` of consecutive paused polls (measured by the
  timestamps passed in) declares a storm;
* once stormed, ``restoration_time_s`` of consecutive polls without a new
  pause frame restores it; a pause frame restarts that timer.

``rx`` storms mean the peer keeps this host paused (classic pfcwd); ``tx``
storms mean this host keeps pausing its peer (a stuck receive path, the usual
NIC failure).  The machine is sans-I/O: time comes in as ``ts_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class StormState(IntEnum):
    OPERATIONAL = 0
    STORMED = 1


class StormEventKind(IntEnum):
    DETECTED = 1
    RESTORED = 2


@dataclass(frozen=True, slots=True)
class WatchdogConfig:
    detection_time_s: float = 0.2
    restoration_time_s: float = 0.2
    poll_interval_s: float = 0.2
    min_paused_ratio: float = 0.5


@dataclass(frozen=True, slots=True)
class StormKey:
    device: str
    direction: str
    priority: int


@dataclass(frozen=True, slots=True)
class StormEvent:
    kind: StormEventKind
    key: StormKey
    ts_ns: int
    # for DETECTED: how long it had been paused; for RESTORED: storm duration
    duration_s: float
    pause_frames_per_s: float
    paused_ratio: float | None

    def as_log(self) -> dict[str, object]:
        return {
            "event": "pfc_storm_detected" if self.kind is StormEventKind.DETECTED
            else "pfc_storm_restored",
            "device": self.key.device, "direction": self.key.direction,
            "priority": self.key.priority, "ts_ns": self.ts_ns,
            "duration_s": round(self.duration_s, 6),
            "pause_frames_per_s": round(self.pause_frames_per_s, 3),
            "paused_ratio": None if self.paused_ratio is None else round(self.paused_ratio, 4),
        }


@dataclass(slots=True)
class _Queue:
    state: StormState = StormState.OPERATIONAL
    last_frames: float | None = None
    last_ts_ns: int | None = None
    paused_for_s: float = 0.0
    quiet_for_s: float = 0.0
    storm_since_ns: int = 0
    detected: int = 0
    restored: int = 0
    last_duration_s: float | None = None


class PfcWatchdog:
    def __init__(self, config: WatchdogConfig) -> None:
        self.config = config
        self._queues: dict[StormKey, _Queue] = {}

    def observe(self, key: StormKey, ts_ns: int, pause_frames: float,
                paused_ratio: float | None = None,
                tx_progress: bool | None = None) -> StormEvent | None:
        """Feed one poll of one queue; return the event it caused, if any."""
        q = self._queues.setdefault(key, _Queue())
        prev_frames, prev_ts = q.last_frames, q.last_ts_ns
        q.last_frames, q.last_ts_ns = pause_frames, ts_ns
        if prev_frames is None or prev_ts is None or ts_ns <= prev_ts:
            return None
        elapsed_s = (ts_ns - prev_ts) / 1e9
        # A counter that went down was reset: no frames are known for this poll.
        new_frames = pause_frames - prev_frames if pause_frames >= prev_frames else 0.0
        frames_per_s = new_frames / elapsed_s
        cfg = self.config
        if q.state is StormState.OPERATIONAL:
            paused = (new_frames > 0
                      and (paused_ratio is None or paused_ratio >= cfg.min_paused_ratio)
                      and tx_progress is not True)
            if not paused:
                q.paused_for_s = 0.0
                return None
            q.paused_for_s += elapsed_s
            if q.paused_for_s + 1e-9 < cfg.detection_time_s:
                return None
            q.state = StormState.STORMED
            q.storm_since_ns = ts_ns
            q.quiet_for_s = 0.0
            q.detected += 1
            return StormEvent(StormEventKind.DETECTED, key, ts_ns, q.paused_for_s,
                              frames_per_s, paused_ratio)
        if new_frames > 0:
            q.quiet_for_s = 0.0
            return None
        q.quiet_for_s += elapsed_s
        if q.quiet_for_s + 1e-9 < cfg.restoration_time_s:
            return None
        q.state = StormState.OPERATIONAL
        q.paused_for_s = 0.0
        q.restored += 1
        q.last_duration_s = (ts_ns - q.storm_since_ns) / 1e9
        return StormEvent(StormEventKind.RESTORED, key, ts_ns, q.last_duration_s,
                          frames_per_s, paused_ratio)

    def state(self, key: StormKey) -> StormState:
        q = self._queues.get(key)
        return StormState.OPERATIONAL if q is None else q.state

    def queues(self) -> list[tuple[StormKey, StormState, int, int, float | None, int]]:
        """(key, state, detected, restored, last storm duration, storm since ns) per queue."""
        return [(k, q.state, q.detected, q.restored, q.last_duration_s, q.storm_since_ns)
                for k, q in sorted(self._queues.items(), key=lambda kv: (
                    kv[0].device, kv[0].direction, kv[0].priority))]
