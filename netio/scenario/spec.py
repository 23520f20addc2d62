"""Scenario descriptions: ports, flows, pauses and events, parsed and validated.

The first stage of the one-way pipeline (``netio.scenario``): spec → packets
and intent (``packets``) → captures (``captures``) and truth (``truth``).

A scenario (JSON/TOML file, a dict, or a built-in preset) describes capture
ports (one pcap file each), RC flows observed at one or more ports, PFC/PAUSE
episodes, XON storms, ECN marking with CNP replies, losses with NAK and go-back-N
retransmission, RNR NAKs, bad ICRCs and PSN wrap. ``generate`` writes
``<port>.pcap`` per port and ``truth.json``: what ``netio-analyze --json`` must
report for the same files, computed from the generator's own intent (which
packets it dropped, marked, paused) rather than by parsing its output.

Model (stated so the truth is unambiguous):

- A flow is an RC QP pair A→B. Requests go A→B; ACKs, NAKs, read responses and
  CNPs go B→A. Each capture port sits on one link of the flow's path; all of a
  flow's hops see the same packets, shifted by the hop's ``delay_s``.
- Write/send flows send ``messages`` messages of ``message_bytes`` split in
  ``pmtu`` packets, one packet every ``pmtu*8/rate_bps`` seconds; the responder
  ACKs each message (the LAST/ONLY packet carries AckReq) ``ack_delay_s`` after
  it was accepted. Read flows send one READ REQUEST per message; the responses
  follow ``read_delay_s`` later at line rate.
- ``drops``: request packet indices lost upstream of every capture port. The
  responder NAKs (PSN sequence error) on the next packet; the requester, which
  hears the NAK ``owd_s`` later, goes back N and resends everything from the
  lost packet at line rate. ``rnr``: packet indices the responder answers with an
  RNR NAK (timer ``rnr_timer_code``); the requester resends from there after the
  RNR delay. Events must be far enough apart not to overlap.
- ``ce``: windows where every ``every``-th data packet is CE-marked; the
  notification point answers with a CNP ``cnp_delay_s`` later, at most one per
  ``cnp_interval_s`` per QP (DCQCN's 50 µs rule when left at its default).
- Pauses: the port's ``src_mac`` sends XOFF with ``quanta`` every ``refresh_s``
  from ``start_s`` for ``duration_s`` and, when ``xon``, an XON at the end.
  Flows whose hop on that port is addressed to the pausing MAC, at a paused
  priority, transmit nothing while paused and then drain at line rate. So do
  READ responses (the data of a read flow, sent B→A) when the hop's requester
  side MAC pauses; ACKs, NAKs and CNPs are never held back (a simplification:
  they are few and small).
"""
from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from netio.analyze.units import mac_to_int, parse_bitrate, parse_duration
from netio.errors import ScenarioError
from netio.wire.bth import PSN_MODULUS

#: Seconds since the epoch where every generated capture starts (a fixed date
#: keeps the outputs reproducible).
DEFAULT_EPOCH_NS = 1_700_000_000_000_000_000

# --------------------------------------------------------------------------- spec


@dataclass(frozen=True, slots=True)
class PortSpec:
    name: str
    link_bps: int = 100_000_000_000
    snaplen: int = 65535


@dataclass(frozen=True, slots=True)
class HopSpec:
    """Where a flow is observed: its capture port and the MACs on that link."""

    port: str
    src_mac: int  # of the request direction on this link
    dst_mac: int
    delay_ns: int = 0


@dataclass(frozen=True, slots=True)
class CeWindow:
    from_ns: int
    to_ns: int
    every: int


@dataclass(frozen=True, slots=True)
class FlowSpec:
    name: str
    src_ip: int
    dst_ip: int
    src_qp: int
    dst_qp: int
    op: str
    message_bytes: int
    messages: int
    hops: tuple[HopSpec, ...]
    pmtu: int = 1024
    rate_bps: int = 1_000_000_000
    start_ns: int = 0
    start_psn: int = 0
    priority: int = 3
    vlan: int = 100
    ack_delay_ns: int = 4_000
    owd_ns: int = 1_000
    read_delay_ns: int = 6_000
    ce: tuple[CeWindow, ...] = ()
    cnp_delay_ns: int = 3_000
    cnp_interval_ns: int = 50_000
    drops: tuple[int, ...] = ()
    rnr: tuple[int, ...] = ()
    rnr_timer_code: int = 1
    bad_icrc: tuple[int, ...] = ()
    src_port: int = 49152


@dataclass(frozen=True, slots=True)
class PauseSpec:
    port: str
    src_mac: int
    start_ns: int
    duration_ns: int
    quanta: int = 0xFFFF
    refresh_ns: int = 100_000
    xon: bool = True
    priorities: tuple[int, ...] | None = (3,)  # None: 802.3x link-level PAUSE
    vlan: int | None = None


@dataclass(frozen=True, slots=True)
class XonStormSpec:
    port: str
    src_mac: int
    priority: int
    start_ns: int
    duration_ns: int
    interval_ns: int


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    ports: tuple[PortSpec, ...]
    flows: tuple[FlowSpec, ...]
    pauses: tuple[PauseSpec, ...] = ()
    xon_storms: tuple[XonStormSpec, ...] = ()
    epoch_ns: int = DEFAULT_EPOCH_NS
    story: str = ""

    def port(self, name: str) -> PortSpec:
        for p in self.ports:
            if p.name == name:
                return p
        raise ScenarioError(f"unknown port {name!r}")


# ----------------------------------------------------------------- spec parsing


def _keys(obj: Mapping[str, Any], where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(obj, Mapping):
        raise ScenarioError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = required - obj.keys()
    unknown = obj.keys() - required - optional
    if missing:
        raise ScenarioError(f"{where}: missing {', '.join(sorted(missing))}")
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")


def _ns(value: Any, where: str) -> int:
    try:
        return round(parse_duration(value) * 1e9) if isinstance(value, str) else round(
            float(value) * 1e9)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ScenarioError(f"{where}: {value!r} is not an integer in {lo}..{hi}")
    return value


def _mac(value: Any, where: str) -> int:
    try:
        return mac_to_int(value)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _ip(value: Any, where: str) -> int:
    try:
        return int(IPv4Address(value))
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _bps(value: Any, where: str) -> int:
    try:
        return parse_bitrate(value) if isinstance(value, str) else int(value)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


_FLOW_OPTIONAL = {"pmtu", "rate", "start", "start_psn", "priority", "vlan", "ack_delay", "owd",
                  "read_delay", "ce", "cnp_delay", "cnp_interval", "drops", "rnr",
                  "rnr_timer_code", "bad_icrc", "src_port"}


def scenario_from_dict(doc: Mapping[str, Any]) -> Scenario:
    """Validate a scenario document (see the module docstring and ``PRESETS``)."""
    _keys(doc, "scenario", {"name", "ports", "flows"},
          {"pauses", "xon_storms", "story", "epoch_ns"})
    ports = []
    for i, p in enumerate(doc["ports"]):
        w = f"ports[{i}]"
        _keys(p, w, {"name"}, {"link_speed", "snaplen"})
        ports.append(PortSpec(str(p["name"]), _bps(p.get("link_speed", "100G"), w),
                              _int(p.get("snaplen", 65535), w + ".snaplen", 64, 262144)))
    names = {p.name for p in ports}
    if len(names) != len(ports):
        raise ScenarioError("ports: names must be unique")
    flows = []
    for i, f in enumerate(doc["flows"]):
        w = f"flows[{i}]"
        _keys(f, w, {"name", "src_ip", "dst_ip", "src_qp", "dst_qp", "op", "message_bytes",
                     "messages", "hops"}, _FLOW_OPTIONAL)
        if f["op"] not in ("write", "send", "read"):
            raise ScenarioError(f"{w}.op: {f['op']!r} is not write, send or read")
        hops = []
        for j, h in enumerate(f["hops"]):
            hw = f"{w}.hops[{j}]"
            _keys(h, hw, {"port", "src_mac", "dst_mac"}, {"delay"})
            if h["port"] not in names:
                raise ScenarioError(f"{hw}.port: unknown port {h['port']!r}")
            hops.append(HopSpec(h["port"], _mac(h["src_mac"], hw), _mac(h["dst_mac"], hw),
                                _ns(h.get("delay", 0), hw + ".delay")))
        ce = []
        for j, c in enumerate(f.get("ce", ())):
            cw = f"{w}.ce[{j}]"
            _keys(c, cw, {"from", "to", "every"}, set())
            ce.append(CeWindow(_ns(c["from"], cw), _ns(c["to"], cw),
                               _int(c["every"], cw + ".every", 1, 1 << 30)))
        pmtu = _int(f.get("pmtu", 1024), w + ".pmtu", 256, 4096)
        flow = FlowSpec(
            name=str(f["name"]), src_ip=_ip(f["src_ip"], w), dst_ip=_ip(f["dst_ip"], w),
            src_qp=_int(f["src_qp"], w + ".src_qp", 2, 0xFFFFFF),
            dst_qp=_int(f["dst_qp"], w + ".dst_qp", 2, 0xFFFFFF), op=f["op"],
            message_bytes=_int(f["message_bytes"], w + ".message_bytes", 1, 1 << 30),
            messages=_int(f["messages"], w + ".messages", 1, 1 << 31), hops=tuple(hops),
            pmtu=pmtu, rate_bps=_bps(f.get("rate", "1G"), w + ".rate"),
            start_ns=_ns(f.get("start", 0), w + ".start"),
            start_psn=_int(f.get("start_psn", 0), w + ".start_psn", 0, PSN_MODULUS - 1),
            priority=_int(f.get("priority", 3), w + ".priority", 0, 7),
            vlan=_int(f.get("vlan", 100), w + ".vlan", 0, 4094),
            ack_delay_ns=_ns(f.get("ack_delay", 4e-6), w + ".ack_delay"),
            owd_ns=_ns(f.get("owd", 1e-6), w + ".owd"),
            read_delay_ns=_ns(f.get("read_delay", 6e-6), w + ".read_delay"),
            ce=tuple(ce), cnp_delay_ns=_ns(f.get("cnp_delay", 3e-6), w + ".cnp_delay"),
            cnp_interval_ns=_ns(f.get("cnp_interval", 50e-6), w + ".cnp_interval"),
            drops=tuple(sorted(_int(k, w + ".drops", 0, 1 << 40) for k in f.get("drops", ()))),
            rnr=tuple(sorted(_int(k, w + ".rnr", 0, 1 << 40) for k in f.get("rnr", ()))),
            rnr_timer_code=_int(f.get("rnr_timer_code", 1), w + ".rnr_timer_code", 0, 31),
            bad_icrc=tuple(sorted(_int(k, w + ".bad_icrc", 0, 1 << 40)
                                  for k in f.get("bad_icrc", ()))),
            src_port=_int(f.get("src_port", 49152 + i), w + ".src_port", 1, 65535),
        )
        if flow.op == "read" and (flow.drops or flow.rnr):
            raise ScenarioError(f"{w}: drops and rnr are modelled for write/send flows only")
        flows.append(flow)
    pauses = []
    for i, p in enumerate(doc.get("pauses", ())):
        w = f"pauses[{i}]"
        _keys(p, w, {"port", "src_mac", "start", "duration"},
              {"quanta", "refresh", "xon", "priorities", "vlan", "kind"})
        if p["port"] not in names:
            raise ScenarioError(f"{w}.port: unknown port {p['port']!r}")
        kind = p.get("kind", "pfc")
        if kind not in ("pfc", "pause"):
            raise ScenarioError(f"{w}.kind: {kind!r} is not pfc or pause")
        prios = None if kind == "pause" else tuple(
            _int(x, w + ".priorities", 0, 7) for x in p.get("priorities", (3,)))
        vlan = p.get("vlan")
        pauses.append(PauseSpec(
            p["port"], _mac(p["src_mac"], w), _ns(p["start"], w + ".start"),
            _ns(p["duration"], w + ".duration"), _int(p.get("quanta", 0xFFFF), w + ".quanta", 1,
                                                      0xFFFF),
            _ns(p.get("refresh", 100e-6), w + ".refresh"), bool(p.get("xon", True)), prios,
            None if vlan is None else _int(vlan, w + ".vlan", 0, 4094)))
    storms = []
    for i, s in enumerate(doc.get("xon_storms", ())):
        w = f"xon_storms[{i}]"
        _keys(s, w, {"port", "src_mac", "priority", "start", "duration", "interval"}, set())
        storms.append(XonStormSpec(s["port"], _mac(s["src_mac"], w),
                                   _int(s["priority"], w, 0, 7), _ns(s["start"], w),
                                   _ns(s["duration"], w), _ns(s["interval"], w)))
    return Scenario(str(doc["name"]), tuple(ports), tuple(flows), tuple(pauses), tuple(storms),
                    int(doc.get("epoch_ns", DEFAULT_EPOCH_NS)), str(doc.get("story", "")))


def load_scenario(path: str | Path) -> Scenario:
    """A scenario from a ``.json`` or ``.toml`` file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        doc = tomllib.loads(raw.decode()) if p.suffix == ".toml" else json.loads(raw)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ScenarioError(f"{p}: {exc}") from None
    return scenario_from_dict(doc)

