"""Samples, faults and the collector interface shared by every telemetry source."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple, Protocol


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


@dataclass(frozen=True, slots=True, eq=False)
class SeriesPlan:
    """The series a source yields on every poll while its layout stays the same
    (a read plan): series ``i`` is ``specs[i]`` with ``labels[i]``, its value is
    the raw reading times ``scales[i]``, and it wraps at ``widths[i]`` bits.

    Compared by identity: a plan is built once and reused poll after poll.
    """

    specs: tuple[MetricSpec, ...]
    labels: tuple[tuple[str, ...], ...]
    scales: tuple[float, ...]
    widths: tuple[int, ...]
    # positions of each metric name, and memoised position lists per name set
    _by_name: dict[str, list[int]] = field(init=False, repr=False)
    _selected: dict[frozenset[str], tuple[int, ...]] = field(init=False, repr=False)
    # (metric name, labels) per series: the key rates are kept under
    keys: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.specs)
        if not len(self.labels) == len(self.scales) == len(self.widths) == n:
            raise ValueError("SeriesPlan: specs, labels, scales and widths differ in length")
        by_name: dict[str, list[int]] = {}
        for i, spec in enumerate(self.specs):
            by_name.setdefault(spec.name, []).append(i)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_selected", {})
        object.__setattr__(self, "keys", tuple(
            (spec.name, lv) for spec, lv in zip(self.specs, self.labels, strict=True)))

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def by_name(self) -> Mapping[str, list[int]]:
        """Metric name -> positions of its series, in plan order (do not modify)."""
        return self._by_name

    def positions(self, names: frozenset[str]) -> tuple[int, ...]:
        """Positions (in plan order) of the series whose metric is in ``names``."""
        got = self._selected.get(names)
        if got is None:
            got = tuple(sorted(i for name in names for i in self._by_name.get(name, ())))
            if len(self._selected) < 16:  # a handful of fixed name sets in practice
                self._selected[names] = got
        return got


class PlannedSamples(Sequence[Sample]):
    """A collection's samples as ``(plan, values)`` parts: ``values[i]`` is the raw
    reading of ``plan``'s series ``i``, or None when this poll has none for it.

    A Sample object is made only when something iterates: a poll of thousands of
    counters then costs one list of ints instead of thousands of tuples (less work,
    and far less for the garbage collector, since ints are not tracked by it).
    :meth:`select` reaches the few series that rates and profiles need directly.
    """

    __slots__ = ("_items", "parts")

    def __init__(self, parts: Iterable[tuple[SeriesPlan, Sequence[float | None]]]) -> None:
        self.parts: tuple[tuple[SeriesPlan, Sequence[float | None]], ...] = tuple(parts)
        for plan, values in self.parts:
            if len(values) != len(plan):
                raise ValueError("PlannedSamples: a values list does not match its plan")
        self._items: tuple[Sample, ...] | None = None

    def __iter__(self) -> Iterator[Sample]:
        if self._items is not None:
            return iter(self._items)
        return self._generate()

    def _generate(self) -> Iterator[Sample]:
        for plan, values in self.parts:
            specs, labels, scales, widths = plan.specs, plan.labels, plan.scales, plan.widths
            for i, v in enumerate(values):
                if v is not None:
                    yield Sample(specs[i], labels[i], v * scales[i], widths[i])

    def select(self, names: frozenset[str]) -> Iterator[Sample]:
        """The samples whose metric name is in ``names``, in plan order."""
        for plan, values in self.parts:
            specs, labels, scales, widths = plan.specs, plan.labels, plan.scales, plan.widths
            for i in plan.positions(names):
                v = values[i]
                if v is not None:
                    yield Sample(specs[i], labels[i], v * scales[i], widths[i])

    def select_keyed(self, names: frozenset[str]
                     ) -> Iterator[tuple[tuple[str, tuple[str, ...]], float, int]]:
        """(key, value, width_bits) of the samples :meth:`select` yields, without
        making the Sample objects."""
        for plan, values in self.parts:
            keys, scales, widths = plan.keys, plan.scales, plan.widths
            for i in plan.positions(names):
                v = values[i]
                if v is not None:
                    yield keys[i], v * scales[i], widths[i]

    def _all(self) -> tuple[Sample, ...]:
        if self._items is None:
            self._items = tuple(self._generate())
        return self._items

    def __len__(self) -> int:
        return sum(len(values) - sum(v is None for v in values) for _p, values in self.parts)

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, list, PlannedSamples)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"PlannedSamples({list(self)!r})"


def select(samples: Sequence[Sample], names: frozenset[str]) -> Iterator[Sample]:
    """The samples of the metrics named in ``names`` (without building the others
    when ``samples`` is :class:`PlannedSamples`)."""
    if isinstance(samples, PlannedSamples):
        return samples.select(names)
    return (s for s in samples if s.spec.name in names)


def select_keyed(samples: Sequence[Sample], names: frozenset[str]
                 ) -> Iterator[tuple[tuple[str, tuple[str, ...]], float, int]]:
    """(key, value, width_bits) of the samples of the metrics named in ``names``."""
    if isinstance(samples, PlannedSamples):
        return samples.select_keyed(names)
    return ((s.key, s.value, s.width_bits) for s in samples if s.spec.name in names)


def values_of(samples: Sequence[Sample], name: str) -> Mapping[tuple[str, ...], float]:
    """Label values -> value of one metric."""
    return {s.labels: s.value for s in select(samples, frozenset((name,)))}


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
    samples: Sequence[Sample]  # a tuple, or PlannedSamples
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
