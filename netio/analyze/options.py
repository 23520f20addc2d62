"""Analysis options: thresholds, link speeds and filters, with their documented defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Link speed assumed for quanta → time when none is given (bit/s).
DEFAULT_LINK_BPS = 100_000_000_000


@dataclass(frozen=True, slots=True)
class FlowFilter:
    """Keep only RoCE packets of one flow (either direction); None fields match anything.

    Addresses are integers of the IP version ``ipv6`` says (32 or 128 bits); a
    given address never matches a packet of the other version. ``dest_qp`` is
    the BTH destination QP of the SRC→DST direction (the reverse direction is
    kept whatever its QP).
    """

    src_ip: int | None = None
    dst_ip: int | None = None
    dest_qp: int | None = None
    ipv6: bool = False

    def __post_init__(self) -> None:
        bits = 128 if self.ipv6 else 32
        for name in ("src_ip", "dst_ip"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 1 << bits:
                raise ValueError(f"FlowFilter.{name}: {v} is not an IPv{6 if self.ipv6 else 4} "
                                 "address")
        if self.dest_qp is not None and not 0 <= self.dest_qp < 1 << 24:
            raise ValueError(f"FlowFilter.dest_qp: {self.dest_qp} is not a 24-bit QP number")


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """Every knob of ``netio-analyze``; times in ns, rates in bit/s.

    - ``link_bps``: default link speed; ``link_bps_by_capture`` overrides it per
      capture name (file stem) for quanta → time.
    - ``storm_ns``: a queue paused continuously this long is a PFC storm
      (SONiC PFC watchdog detection time, 200 ms); ``restore_ns``: the storm
      ends once the queue has been unpaused this long (restoration time, 200 ms).
    - ``xon_storm_ns``/``xon_gap_ns``: XON frames of one queue no more than
      ``xon_gap_ns`` apart, over at least ``xon_storm_ns``, are an XON storm.
    - ``causality_ns``: a pause that starts within this time after another
      sender's pause started is taken to follow from it (spreading chains).
    - ``interval_ns``: bin width of time series (goodput, CE/CNP) and of the
      fairness/incast windows.
    - ``incast_senders``: this many distinct senders to one destination within
      one window is an incast.
    - ``cnp_min_gap_ns``: DCQCN's notification point sends at most one CNP per
      this time per QP (50 µs); closer CNPs are counted as violations.
    - Filters: ``priorities`` (PFC/PAUSE priorities and RoCE PCPs kept),
      ``flow``, ``start_ns``/``end_ns`` (relative to the earliest packet).
    """

    link_bps: int = DEFAULT_LINK_BPS
    link_bps_by_capture: dict[str, int] = field(default_factory=dict)
    storm_ns: int = 200_000_000
    restore_ns: int = 200_000_000
    xon_storm_ns: int = 200_000_000
    xon_gap_ns: int = 1_000_000
    causality_ns: int = 2_000_000
    interval_ns: int = 10_000_000
    incast_senders: int = 4
    cnp_min_gap_ns: int = 50_000
    priorities: frozenset[int] | None = None
    flow: FlowFilter | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    verify_icrc: bool = True

    def link_for(self, capture: str) -> int:
        return self.link_bps_by_capture.get(capture, self.link_bps)


DEFAULT_OPTIONS = AnalysisOptions()
