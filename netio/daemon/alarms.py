"""Configured alarms: a metric's rate (or value) above a threshold fires once,
logs ``alarm_firing`` (and may trigger a capture), and resolves when no series
is above it any more."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from netio.daemon import eventlog
from netio.daemon.config import Alarm
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Sample

Rates = Mapping[tuple[str, tuple[str, ...]], float]


def rate_metrics(alarms: tuple[Alarm, ...]) -> frozenset[str]:
    """The metrics whose rates the alarms need."""
    return frozenset(a.metric for a in alarms if a.rate_above is not None)


def hits(alarm: Alarm, col: Collection, rates: Rates
         ) -> list[tuple[dict[str, str], float]] | None:
    """The series of ``col`` above ``alarm``'s threshold (labels, value); None
    when ``col`` has no series the alarm watches."""
    out: list[tuple[dict[str, str], float]] = []
    seen = False
    for s in col.samples:
        if s.spec.name != alarm.metric:
            continue
        labels = dict(zip(s.spec.labels, s.labels, strict=True))
        if any(labels.get(k) != v for k, v in alarm.labels):
            continue
        seen = True
        if alarm.rate_above is not None:
            r = rates.get(s.key)
            if r is not None and r > alarm.rate_above:
                out.append((labels, r))
        elif alarm.value_above is not None and s.value > alarm.value_above:
            out.append((labels, s.value))
    return out if seen else None


class AlarmBook:
    def __init__(self, alarms: tuple[Alarm, ...],
                 capture: Callable[[str, str], object]) -> None:
        self.alarms = alarms
        self.capture = capture  # (interface, reason): start a triggered capture
        self.firing: dict[str, bool] = {}

    def configure(self, alarms: tuple[Alarm, ...]) -> None:
        self.alarms = alarms
        names = {a.name for a in alarms}
        self.firing = {k: v for k, v in self.firing.items() if k in names}

    def check(self, col: Collection, rates: Rates) -> None:
        for alarm in self.alarms:
            found = hits(alarm, col, rates)
            if found is None:
                continue
            firing = self.firing.get(alarm.name, False)
            if found and not firing:
                self.firing[alarm.name] = True
                labels, value = found[0]
                eventlog.emit("alarm_firing", level=logging.WARNING, alarm=alarm.name,
                              metric=alarm.metric, labels=labels, value=value)
                iface = labels.get(alarm.interface_label)
                if alarm.capture and iface:
                    self.capture(iface, f"alarm {alarm.name}")
            elif not found and firing:
                self.firing[alarm.name] = False
                eventlog.emit("alarm_resolved", alarm=alarm.name)

    def states(self) -> list[tuple[str, bool]]:
        return [(a.name, self.firing.get(a.name, False)) for a in self.alarms]


def samples(states: list[tuple[str, bool]]) -> list[Sample]:
    return [Sample(m.ALARM_FIRING, (name,), float(firing)) for name, firing in states]
