"""Samples, faults and the collector interface shared by every telemetry source."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple, Protocol


class MetricKind(IntEnum):
    COUNTER = 1
    GAUGE = 2
    UNTYPED = 3


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: name (with the ``netio_`` prefix), kind, help and label names.

    Counter names end in ``_total`` here as they do on the wire.
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...]


class Sample(NamedTuple):
    """One value of one series. ``width_bits`` is the counter's wrap width (32 or 64).

    A NamedTuple rather than a frozen dataclass: a 10,000-series host makes
    10,000 of these per second, and tuple construction is several times cheaper.
    """

    spec: MetricSpec
    labels: tuple[str, ...]
    value: float
    width_bits: int = 64

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.spec.name, self.labels)


@dataclass(frozen=True, slots=True)
class Fault:
    """Something a collector could not read. ``kind`` is a low-cardinality word
    (``unreadable``, ``vanished``, ``timeout``, ``unsupported``, ``parse``, ...)."""

    collector: str
    kind: str
    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class Collection:
    """What one run of one collector produced."""

    collector: str
    samples: tuple[Sample, ...]
    faults: tuple[Fault, ...] = ()
    ts_ns: int = 0
    duration_s: float = 0.0
    # Sources seen (devices, interfaces, targets), for the profile and fault checks.
    sources: tuple[str, ...] = field(default=())


class Collector(Protocol):
    """A blocking collector; the daemon runs it in its own worker thread."""

    name: str

    def collect(self) -> Collection: ...


class AsyncCollector(Protocol):
    """A collector that talks to the network and runs on the event loop."""

    name: str

    async def collect_async(self) -> Collection: ...
