"""Derived signals: rates, pause ratio, CNP and retransmission rates, utilisation,
and the fabric profile built from them.

Rates are taken per collection (the collector's own timestamps), only for the
metrics that feed a signal, so a 10,000-series host costs little.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from netio.telemetry import metrics as m
from netio.telemetry.profile import (
    SCHEMA_VERSION,
    ActiveStorm,
    FabricProfile,
    InterfaceProfile,
    PriorityPause,
    RdmaPortProfile,
    RdmaQpProfile,
    SwitchInterfaceProfile,
)
from netio.telemetry.rates import CounterRates
from netio.telemetry.sample import Collection, Sample, select, select_keyed, values_of

RATE_SPECS = frozenset(s.name for s in (
    m.NET_BYTES, m.PFC_PAUSE_FRAMES, m.PFC_PAUSE_DURATION, m.NIC_PRIO_PACKETS, m.RDMA_BYTES,
    m.RDMA_PACKETS, m.RDMA_CNP, m.RDMA_ECN_MARKED, m.RDMA_TRANSPORT, m.SW_BYTES,
    m.SW_PFC_REQUESTS, m.SW_PFC_INDICATIONS, m.DCB_PFC_REQUESTS, m.DCB_PFC_INDICATIONS,
))

# Requester events that make the HCA resend (IBTA vol. 1, 9.7.5.1 and 9.9.2).
RETRANSMIT_EVENTS = frozenset({"local_ack_timeout", "nak_sequence_error_received",
                               "implied_nak_sequence_error", "rnr_nak_received"})
# rxe counts every timeout- or NAK-driven retry in completer_retry_err, so where a
# port has it, it replaces the NAK-sequence and ACK-timeout counts.
RXE_RETRANSMIT_EVENTS = (RETRANSMIT_EVENTS - {"nak_sequence_error_received",
                                              "local_ack_timeout"}) | {"completer_retry"}


def retransmit_kinds(events: frozenset[str] | set[str]) -> frozenset[str]:
    """Which ``netio_rdma_transport_events_total`` events count as retransmissions
    on a port that reports ``events``.  The one definition: the rate gauge, the
    ``netio_rdma_retransmission_events_total`` counter (which the alert rules
    use) and the profile all take it from here."""
    return RXE_RETRANSMIT_EVENTS if "completer_retry" in events else RETRANSMIT_EVENTS


def retransmission_events(events: Mapping[str, float]) -> float:
    """The sum of the retransmission events in ``events`` (event -> count or rate)."""
    kinds = retransmit_kinds(set(events))
    return sum(v for k, v in events.items() if k in kinds)

# 802.1Qbb: a PFC frame pauses for at most 65535 quanta of 512 bit times.
MAX_PAUSE_BITS = 65535 * 512

Key = tuple[str, tuple[str, ...]]

_WATCHED = frozenset((m.PFC_PAUSE_FRAMES.name, m.DCB_PFC_INDICATIONS.name,
                      m.DCB_PFC_REQUESTS.name))


@dataclass(frozen=True, slots=True)
class WatchInput:
    device: str
    direction: str
    priority: int
    pause_frames: float
    paused_ratio: float | None
    tx_progress: bool | None


class Rates(Protocol):
    """The latest rates per collector (a :class:`Derivation`, or a snapshot of one)."""

    @property
    def rates(self) -> Mapping[str, Mapping[Key, float]]: ...


@dataclass(frozen=True, slots=True)
class RatesSnapshot:
    rates: Mapping[str, Mapping[Key, float]]


class Derivation:
    """Keeps the counter history and the latest rates of each collector."""

    def __init__(self, extra_metrics: frozenset[str] = frozenset()) -> None:
        # Metrics whose rates something else needs (alarms), beyond RATE_SPECS.
        self.wanted = RATE_SPECS | extra_metrics
        self._history: dict[str, CounterRates] = {}
        self.rates: dict[str, dict[Key, float]] = {}

    def ingest(self, col: Collection) -> dict[Key, float]:
        out: dict[Key, float] = {}
        keep: set[Hashable] = set()
        history = self._history.setdefault(col.collector, CounterRates())
        ts_ns = col.ts_ns
        for key, value, width_bits in select_keyed(col.samples, self.wanted):
            keep.add(key)
            r = history.update(key, value, ts_ns, width_bits)
            if r is not None:
                out[key] = r
        history.forget_except(keep)
        self.rates[col.collector] = out  # replaced, never changed: snapshots share it
        return out

    def forget_except(self, collectors: set[str] | frozenset[str]) -> None:
        """Drop the history and rates of collectors no longer configured."""
        self._history = {k: v for k, v in self._history.items() if k in collectors}
        self.rates = {k: v for k, v in self.rates.items() if k in collectors}

    def snapshot(self) -> RatesSnapshot:
        """The rates as they are now, unaffected by later ingests."""
        return RatesSnapshot(dict(self.rates))


def _r(rates: Mapping[Key, float], name: str, *labels: str) -> float | None:
    return rates.get((name, labels))


def watch_inputs(col: Collection, rates: Mapping[Key, float]) -> Iterator[WatchInput]:
    """What the storm watchdog needs from an ethtool or DCB collection."""
    for s in select(col.samples, _WATCHED):
        name = s.spec.name
        if name == m.PFC_PAUSE_FRAMES.name:
            dev, direction, prio = s.labels
        elif name == m.DCB_PFC_INDICATIONS.name:
            dev, prio = s.labels
            direction = "rx"
        elif name == m.DCB_PFC_REQUESTS.name:
            dev, prio = s.labels
            direction = "tx"
        else:
            continue
        ratio = _r(rates, m.PFC_PAUSE_DURATION.name, dev, direction, prio)
        progress: bool | None = None
        if direction == "rx":
            tx = _r(rates, m.NIC_PRIO_PACKETS.name, dev, "tx", prio)
            progress = None if tx is None else tx > 0
        yield WatchInput(dev, direction, int(prio), s.value,
                         None if ratio is None else min(ratio, 1.0), progress)


def _values(col: Collection | None, name: str) -> Mapping[tuple[str, ...], float]:
    return {} if col is None else values_of(col.samples, name)


def _util(rx: float | None, tx: float | None, cap_bps: float | None) -> float | None:
    if cap_bps is None or cap_bps <= 0 or (rx is None and tx is None):
        return None
    return min(max(rx or 0.0, tx or 0.0) / cap_bps, 1.0)


def _bps(v: float | None) -> float | None:
    return None if v is None else v * 8.0


def build(collections: Mapping[str, Collection], derivation: Rates,
          storms: Mapping[tuple[str, str, int], float], host: str,
          now_unix_s: float) -> tuple[list[Sample], FabricProfile]:
    """Derived gauges and the fabric profile from the latest collections.

    ``storms`` maps (device, direction, priority) of active storms to their start.
    """
    samples: list[Sample] = []
    netdev = collections.get("netdev")
    dcb = collections.get("dcb")
    rn = derivation.rates.get("netdev", {})
    re_ = derivation.rates.get("ethtool", {})
    rd = derivation.rates.get("dcb", {})

    speeds = _values(netdev, m.NET_SPEED.name)
    ups = _values(netdev, m.NET_UP.name)
    lossless = _values(dcb, m.DCB_PFC_ENABLED.name)

    # Pause per (device, priority): measured duration first, else a frames estimate.
    pause: dict[str, dict[int, dict[str, float | None]]] = defaultdict(dict)
    source: dict[str, str] = {}
    frames_rates: dict[tuple[str, str, str], float] = {}
    for (name, labels), v in re_.items():
        if name == m.PFC_PAUSE_FRAMES.name:
            frames_rates[(labels[0], labels[1], labels[2])] = v
    for (name, labels), v in rd.items():
        if name in (m.DCB_PFC_INDICATIONS.name, m.DCB_PFC_REQUESTS.name):
            dev, prio = labels
            direction = "rx" if name == m.DCB_PFC_INDICATIONS.name else "tx"
            frames_rates.setdefault((dev, direction, prio), v)
    for (name, labels), v in re_.items():
        if name == m.PFC_PAUSE_DURATION.name:
            dev, direction, prio = labels
            ratio = min(max(v, 0.0), 1.0)
            pause[dev].setdefault(int(prio), {})[direction] = ratio
            source[dev] = "duration"
            samples.append(Sample(m.PAUSE_RATIO, labels, ratio))
    for (dev, direction, prio), fps in frames_rates.items():
        if source.get(dev) == "duration":
            pause[dev].setdefault(int(prio), {})[direction + "_frames"] = fps
            continue
        speed = speeds.get((dev,))
        entry = pause[dev].setdefault(int(prio), {})
        entry[direction + "_frames"] = fps
        if speed:
            ratio = min(fps * MAX_PAUSE_BITS / (speed * 8.0), 1.0)
            entry[direction] = ratio
            source[dev] = "frames_estimate"
            samples.append(Sample(m.PAUSE_RATIO, (dev, direction, prio), ratio))

    interfaces: list[InterfaceProfile] = []
    devs = sorted({k[0] for k in ups} | set(pause))
    for dev in devs:
        rx = _r(rn, m.NET_BYTES.name, dev, "rx")
        tx = _r(rn, m.NET_BYTES.name, dev, "tx")
        cap = speeds.get((dev,))
        cap_bps = None if cap is None else cap * 8.0
        util = _util(_bps(rx), _bps(tx), cap_bps)
        if util is not None:
            samples.append(Sample(m.UTILISATION, (dev,), util))
        prios = []
        for iprio, e in sorted(pause.get(dev, {}).items()):
            ll = lossless.get((dev, str(iprio)))
            prios.append(PriorityPause(
                iprio, e.get("rx"), e.get("tx"), e.get("rx_frames"), e.get("tx_frames"),
                None if ll is None else ll > 0,
                any((dev, d, iprio) in storms for d in ("rx", "tx"))))
        up = ups.get((dev,))
        interfaces.append(InterfaceProfile(dev, None if up is None else up > 0, cap_bps,
                                           _bps(rx), _bps(tx), util, source.get(dev, "none"),
                                           tuple(prios)))

    rdma = collections.get("rdma")
    rr = derivation.rates.get("rdma", {})
    ports: list[RdmaPortProfile] = []
    rates_by_port: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (name, labels), v in rr.items():
        extra = labels[2] if len(labels) > 2 else ""
        rates_by_port[(labels[0], labels[1])][f"{name}:{extra}"] = v
    port_rates = _values(rdma, m.RDMA_PORT_RATE.name)
    counts: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for labels, v in _values(rdma, m.RDMA_TRANSPORT.name).items():
        counts[(labels[0], labels[1])][labels[2]] = v
    for (dev, port), events in sorted(counts.items()):
        samples.append(Sample(m.RETRANSMISSIONS, (dev, port), retransmission_events(events)))
    all_ports = {(k[0], k[1]) for k in port_rates} | set(rates_by_port)
    for dev, port in sorted(all_ports):
        pr = rates_by_port.get((dev, port), {})
        ev = {k.split(":", 1)[1]: v for k, v in pr.items()
              if k.startswith(m.RDMA_TRANSPORT.name + ":")}
        cnp_sent = pr.get(m.RDMA_CNP.name + ":sent")
        cnp_handled = pr.get(m.RDMA_CNP.name + ":handled")
        cnp = None if cnp_sent is None and cnp_handled is None else \
            (cnp_sent or 0.0) + (cnp_handled or 0.0)
        if cnp is not None:
            samples.append(Sample(m.CNP_RATE, (dev, port), cnp))
        retrans: float | None = None
        if ev:
            retrans = retransmission_events(ev)
            samples.append(Sample(m.RETRANS_RATE, (dev, port), retrans))
        cap = port_rates.get((dev, port))
        ports.append(RdmaPortProfile(
            dev, port, None if cap is None else cap * 8.0,
            _bps(pr.get(m.RDMA_BYTES.name + ":rx")), _bps(pr.get(m.RDMA_BYTES.name + ":tx")),
            pr.get(m.RDMA_PACKETS.name + ":rx"), pr.get(m.RDMA_PACKETS.name + ":tx"),
            cnp_sent, cnp_handled, pr.get(m.RDMA_ECN_MARKED.name + ":"), retrans,
            ev.get("out_of_sequence"), ev.get("duplicate_request")))

    switches: list[SwitchInterfaceProfile] = []
    for cname, col in sorted(collections.items()):
        if not cname.startswith("snmp:"):
            continue
        rs = derivation.rates.get(cname, {})
        sp = _values(col, m.SW_SPEED.name)
        su = _values(col, m.SW_UP.name)
        for target, iface in sorted({(k[0], k[1]) for k in (*sp, *su)}):
            rx = _r(rs, m.SW_BYTES.name, target, iface, "rx")
            tx = _r(rs, m.SW_BYTES.name, target, iface, "tx")
            cap = sp.get((target, iface))
            cap_bps = None if cap is None else cap * 8.0
            up = su.get((target, iface))
            switches.append(SwitchInterfaceProfile(
                target, iface, None if up is None else up > 0, cap_bps, _bps(rx), _bps(tx),
                _util(_bps(rx), _bps(tx), cap_bps),
                _r(rs, m.SW_PFC_REQUESTS.name, target, iface),
                _r(rs, m.SW_PFC_INDICATIONS.name, target, iface)))

    active = tuple(ActiveStorm(d, di, p, since) for (d, di, p), since in sorted(storms.items()))
    profile = FabricProfile(SCHEMA_VERSION, host, now_unix_s, tuple(interfaces), tuple(ports),
                            tuple(switches), active, _qps(collections.get("rdma_qp")))
    return samples, profile


def _opt_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _qps(col: Collection | None) -> tuple[RdmaQpProfile, ...]:
    """The profile's QPs from the per-QP collection (its top-N series)."""
    if col is None:
        return ()
    psn = _values(col, m.RDMA_QP_PSN.name)
    rate = _values(col, m.RDMA_QP_PSN_RATE.name)
    counters: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (dev, qpn, name), v in _values(col, m.RDMA_QP_COUNTER.name).items():
        counters[(dev, qpn)][name] = v
    out = []
    for labels in _values(col, m.RDMA_QP_INFO.name):
        dev, qpn, port, qtype, state, peer, local, remote, owner = labels
        sq, rq = psn.get((dev, qpn, "sq")), psn.get((dev, qpn, "rq"))
        out.append(RdmaQpProfile(
            dev, int(qpn), _opt_int(port), qtype, state, _opt_int(peer), local or None,
            remote or None, None if sq is None else int(sq), None if rq is None else int(rq),
            rate.get((dev, qpn, "sq")), rate.get((dev, qpn, "rq")), owner,
            counters.get((dev, qpn), {})))
    return tuple(out)
