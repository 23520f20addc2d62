"""Congestion what-ifs: what measured network conditions cost a training step or a
serving system, term by term, each explained in a sentence with its numbers.

Conditions come straight from netio's own data (or are given as what-ifs):

* a ``netio-analyze --json`` report (:mod:`netio.analyze.schema`): the worst paused
  fraction of any pause sender (a ring collective runs at the pace of its slowest link),
  the CNP rate of the most-throttled flow (``ecn.cnps`` over its span), the resent share
  (``retransmitted_packets`` over ``packets``) and loss events (``psn_gaps`` over
  ``request_packets``) of all flows, the round trip (the median ACK latency), and incast
  episodes (``incast[]``: senders converging on one destination, and for how long);
* the daemon's ``/api/profile`` (:mod:`netio.telemetry.profile`): the worst
  ``rx_pause_fraction`` of any interface priority, ``cnp_handled_per_s`` of the busiest
  RDMA port, and resends per packet sent (``retransmissions_per_s`` over
  ``tx_packets_per_s``);
* a netio fabric profile's ``conditions`` (:mod:`netio.fabric_profile`).

Each condition stretches the time per byte of the inter-node (scale-out) links:

* **PFC pause** fraction ``p``: a paused link carries nothing while paused, so a link
  delivers ``1 - p`` of its rate: time per byte x ``1 / (1 - p)``.
* **CNP / DCQCN**: each CNP makes the sender cut its rate by ``alpha/2`` (``alpha`` -> 1
  under sustained marking: half the rate) and recover by halving the gap to the target
  every timer period ``T`` (fast recovery; Zhu et al., "Congestion Control for Large-Scale
  RDMA Deployments", SIGCOMM 2015, section 3 and its ``T = 55 us``), so one CNP costs
  ``R/2 * T * (1 + 1/2 + 1/4 + ...) = R T`` of capacity; at ``c`` CNPs per second a flow
  keeps ``1 / (1 + c T)`` of its rate.
* **loss with go-back-N**: RoCE NICs without selective repeat resend everything after
  the lost packet, i.e. the window in flight (the bandwidth-delay product ``R * RTT``,
  capped by the message) per loss event. With ``l`` loss events per packet of ``MTU``
  bytes, the link carries ``1 + l * BDP / MTU`` bytes per useful byte. A measured resend
  share ``r`` (resent packets per packet sent) gives the same factor as ``1 / (1 - r)``;
  the larger of the two is used.
* **core oversubscription** ``o``: groups that span more nodes than one leaf holds cross
  the spine at ``1 / o`` of the leaf bandwidth (the part-1 fabric model, with ``o``
  replaced).
* **incast fan-in** ``k`` for a fraction ``f`` of the time: ``k`` senders converging on one
  receiving NIC share it, so this job's flows into it get ``1 / k`` while it lasts: time
  per byte x ``(1 - f) + f k``.

The cost of each condition is the step (or token) time with that condition alone minus
the baseline; the total applies them all at once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from netio.errors import ModelInputError
from netio.model.inference import InferResult, Request, Serving, infer
from netio.model.schema import Execution, Fabric, Model, Node, System
from netio.model.training import train

#: DCQCN rate-increase timer: Zhu et al. SIGCOMM 2015 ("T = 55 us" in their parameter
#: table, section 5). Vendors' defaults differ (mlx5 ``rpg_time_reset``); a what-if may
#: pass another.
DCQCN_TIMER_S = 55e-6
#: Round trip assumed when the input gives none: two NIC latencies of the system's
#: scale-out link are used instead (see :func:`round_trip_s`).
MTU_BYTES = 4096  # RoCEv2 path MTU of netio's captures and bench (4096-byte IB MTU)


@dataclass(frozen=True, slots=True)
class Conditions:
    """Network conditions on the inter-node links (see the module doc)."""

    source: str
    pause_fraction: float = 0.0
    cnp_per_s: float = 0.0
    resend_ratio: float = 0.0  # resent packets per packet sent (measured)
    loss_per_packet: float = 0.0  # loss events per packet sent
    rtt_s: float | None = None
    oversubscription_ratio: float | None = None
    incast_fan_in: int = 1
    incast_fraction: float = 0.0
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, lo, hi in (("pause_fraction", 0.0, 0.999), ("resend_ratio", 0.0, 0.999),
                             ("loss_per_packet", 0.0, 1.0), ("incast_fraction", 0.0, 1.0)):
            v = getattr(self, name)
            if not (lo <= v <= hi):
                raise ModelInputError(name, f"must be in [{lo}, {hi}], not {v}",
                                      path=self.source)
        if self.cnp_per_s < 0 or self.incast_fan_in < 1:
            raise ModelInputError("cnp_per_s/incast_fan_in", "must be >= 0 / >= 1",
                                  path=self.source)


# --- reading netio's documents ------------------------------------------------------------


def _num(d: Mapping[str, Any], key: str, where: str, path: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ModelInputError(f"{where}{key}", f"must be a number, not {v!r}", path=path)
    return float(v)


def _list(d: Mapping[str, Any], key: str, path: str) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise ModelInputError(key, "missing or not a list", path=path)
    return v


def from_analyze_report(doc: Mapping[str, Any], path: str = "<report>") -> Conditions:
    """Conditions measured by ``netio-analyze --json`` (module doc)."""
    notes = []
    pause = 0.0
    for i, s in enumerate(_list(doc, "pause_senders", path)):
        pause = max(pause, _num(s, "paused_fraction", f"pause_senders[{i}].", path))
    cnp = 0.0
    sent = resent = requests = gaps = 0.0
    rtts = []
    for i, f in enumerate(_list(doc, "flows", path)):
        w = f"flows[{i}]."
        packets = _num(f, "packets", w, path)
        sent += packets
        resent += _num(f, "retransmitted_packets", w, path)
        requests += _num(f, "request_packets", w, path)
        gaps += _num(f, "psn_gaps", w, path)
        span = _num(f, "last_ts_s", w, path) - _num(f, "first_ts_s", w, path)
        ecn = f.get("ecn")
        if isinstance(ecn, dict) and span > 0:
            cnp = max(cnp, _num(ecn, "cnps", f"{w}ecn.", path) / span)
        ack = f.get("ack_latency_s")
        if isinstance(ack, dict) and ack.get("p50") is not None:
            rtts.append(_num(ack, "p50", f"{w}ack_latency_s.", path))
    duration = max((_num(c, "duration_s", f"captures[{i}].", path)
                    for i, c in enumerate(_list(doc, "captures", path))), default=0.0)
    fan_in, incast_s = 1, 0.0
    for i, e in enumerate(_list(doc, "incast", path)):
        k = int(_num(e, "max_senders", f"incast[{i}].", path))
        if k > fan_in:
            fan_in = k
        incast_s += _num(e, "end_s", f"incast[{i}].", path) - _num(e, "start_s",
                                                                    f"incast[{i}].", path)
    fairness = [_num(g, "jain_min", f"fairness[{i}].", path)
                for i, g in enumerate(_list(doc, "fairness", path))]
    if fairness:
        notes.append(f"worst Jain fairness index in any window {min(fairness):.3f} "
                     "(not modelled: collectives here share links evenly)")
    rtt = sorted(rtts)[len(rtts) // 2] if rtts else None
    return Conditions(
        source=path, pause_fraction=min(pause, 0.999), cnp_per_s=cnp,
        resend_ratio=min(resent / sent, 0.999) if sent else 0.0,
        loss_per_packet=gaps / requests if requests else 0.0, rtt_s=rtt,
        incast_fan_in=fan_in,
        incast_fraction=min(incast_s / duration, 1.0) if duration > 0 and fan_in > 1 else 0.0,
        notes=tuple(notes))


def from_daemon_profile(doc: Mapping[str, Any], path: str = "<profile>") -> Conditions:
    """Conditions from the daemon's ``/api/profile`` document (module doc)."""
    pause = 0.0
    for i, itf in enumerate(_list(doc, "interfaces", path)):
        for j, p in enumerate(itf.get("pause") or []):
            v = p.get("rx_pause_fraction")
            if v is not None:
                pause = max(pause, _num(p, "rx_pause_fraction",
                                        f"interfaces[{i}].pause[{j}].", path))
    cnp = 0.0
    resend = 0.0
    for i, port in enumerate(_list(doc, "rdma_ports", path)):
        w = f"rdma_ports[{i}]."
        if port.get("cnp_handled_per_s") is not None:
            cnp = max(cnp, _num(port, "cnp_handled_per_s", w, path))
        if port.get("retransmissions_per_s") is not None and port.get("tx_packets_per_s"):
            resend = max(resend, _num(port, "retransmissions_per_s", w, path)
                         / _num(port, "tx_packets_per_s", w, path))
    return Conditions(source=path, pause_fraction=min(pause, 0.999), cnp_per_s=cnp,
                      resend_ratio=min(resend, 0.999))


def from_fabric_profile(doc: Mapping[str, Any], path: str = "<profile>") -> Conditions:
    from netio.fabric_profile import profile_from_dict

    c = profile_from_dict(doc, path).conditions
    if c is None:
        raise ModelInputError("conditions", "this fabric profile has no conditions", path=path)
    return Conditions(source=path, pause_fraction=min(c.pause_fraction, 0.999),
                      cnp_per_s=c.cnp_per_s, resend_ratio=min(c.retransmission_ratio, 0.999))


def load_conditions(path: str | Path) -> Conditions:
    """Conditions from a netio-analyze report, a daemon profile or a fabric profile."""
    name = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelInputError("", f"cannot read: {exc.strerror or exc}", path=name) from None
    except json.JSONDecodeError as exc:
        raise ModelInputError("", f"not JSON: {exc.msg} at line {exc.lineno}",
                              path=name) from None
    if not isinstance(doc, dict):
        raise ModelInputError("", "must be a JSON object", path=name)
    if doc.get("schema") == "netio.fabric_profile":
        return from_fabric_profile(doc, name)
    if "pause_senders" in doc and "flows" in doc:
        return from_analyze_report(doc, name)
    if "interfaces" in doc and "rdma_ports" in doc:
        return from_daemon_profile(doc, name)
    raise ModelInputError("", "not a netio-analyze --json report, a daemon /api/profile "
                          "or a netio fabric profile", path=name)


# --- applying them ------------------------------------------------------------------------------


def round_trip_s(system: System, c: Conditions) -> float:
    """The measured round trip, else two scale-out latencies of the system."""
    return c.rtt_s if c.rtt_s is not None else 2.0 * system.node.scale_out.alpha_s


def factors(system: System, c: Conditions) -> dict[str, float]:
    """Time-per-byte multiplier of the scale-out links for each condition (1 = none)."""
    rate = 1.0 / system.node.scale_out.beta_s_per_byte
    bdp = rate * round_trip_s(system, c)
    gbn = 1.0 + c.loss_per_packet * max(bdp, MTU_BYTES) / MTU_BYTES
    measured = 1.0 / (1.0 - c.resend_ratio)
    return {
        "pfc_pause": 1.0 / (1.0 - c.pause_fraction),
        "dcqcn_rate_reduction": 1.0 + c.cnp_per_s * DCQCN_TIMER_S,
        "loss_go_back_n": max(gbn, measured),
        "incast": (1.0 - c.incast_fraction) + c.incast_fraction * c.incast_fan_in,
    }


def degraded(system: System, c: Conditions, only: str | None = None) -> System:
    """``system`` with the conditions (or only the one named) applied to its network."""
    f = factors(system, c)
    mult = 1.0
    for name, v in f.items():
        if only is None or only == name:
            mult *= v
    node: Node = replace(system.node, scale_out=system.node.scale_out.with_beta(
        system.node.scale_out.beta_s_per_byte * mult))
    fabric: Fabric = system.fabric
    if c.oversubscription_ratio is not None and only in (None, "core_oversubscription"):
        fabric = replace(fabric, oversubscription_ratio=c.oversubscription_ratio)
    return replace(system, node=node, fabric=fabric)


@dataclass(frozen=True, slots=True)
class WhatIfTerm:
    condition: str
    value: str
    added_s: float
    added_fraction: float
    sentence: str


@dataclass(frozen=True, slots=True)
class WhatIf:
    """What the conditions cost one training step (or one output token)."""

    source: str
    quantity: str  # "step_s" or "time_per_output_token_s"
    baseline_s: float
    with_conditions_s: float
    terms: tuple[WhatIfTerm, ...]
    notes: tuple[str, ...]

    def to_json_dict(self) -> dict[str, object]:
        return {"conditions_source": self.source, "quantity": self.quantity,
                "baseline_s": self.baseline_s, "with_conditions_s": self.with_conditions_s,
                "added_s": self.with_conditions_s - self.baseline_s,
                "terms": [{"condition": t.condition, "value": t.value, "added_s": t.added_s,
                           "added_ratio": t.added_fraction, "explanation": t.sentence}
                          for t in self.terms],
                "notes": list(self.notes)}

    def to_text(self) -> str:
        d = self.with_conditions_s - self.baseline_s
        lines = [f"what-if from {self.source}: {self.quantity.removesuffix('_s')} "
                 f"{_seconds(self.baseline_s)} -> {_seconds(self.with_conditions_s)} "
                 f"(+{d * 1e3:.3g} ms, {d / self.baseline_s:+.2%})"]
        lines += [f"  {t.sentence}" for t in self.terms]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _seconds(t: float) -> str:
    return f"{t:.4g} s" if t >= 1.0 else f"{t * 1e3:.4g} ms"


def _describe(name: str, system: System, c: Conditions) -> tuple[str, str]:
    f = factors(system, c)
    if name == "pfc_pause":
        return (f"{c.pause_fraction:.1%}",
                f"{c.pause_fraction:.1%} PFC pause on the inter-node links")
    if name == "dcqcn_rate_reduction":
        return (f"{c.cnp_per_s:,.0f} CNP/s",
                f"{c.cnp_per_s:,.0f} CNPs/s (DCQCN keeps {1 / f[name]:.1%} of the rate: "
                f"each CNP costs ~{DCQCN_TIMER_S * 1e6:.0f} us of line rate)")
    if name == "loss_go_back_n":
        bdp = round_trip_s(system, c) / system.node.scale_out.beta_s_per_byte
        return (f"{c.loss_per_packet:.2e} losses/packet, {c.resend_ratio:.2e} resent",
                f"loss with go-back-N ({c.loss_per_packet:.2e} loss events per packet, each "
                f"resending the {bdp / 1e3:.0f} kB window in flight; {c.resend_ratio:.2e} of "
                f"packets resent) carries {f[name]:.4f} bytes per useful byte")
    if name == "incast":
        return (f"fan-in {c.incast_fan_in} for {c.incast_fraction:.1%}",
                f"incast of {c.incast_fan_in} senders into one NIC for {c.incast_fraction:.1%}"
                f" of the time ({f[name]:.3f}x time per byte)")
    return (f"{c.oversubscription_ratio}:1",
            f"core oversubscription {c.oversubscription_ratio}:1 (groups wider than a leaf "
            "cross the spine at 1/o of the leaf bandwidth)")


def _sentence(lead: str, added: float, base: float, comm: Sequence[tuple[str, float, float]],
              what: str = "the step") -> str:
    grown = [f"{k} {a * 1e3:.3g} -> {b * 1e3:.3g} ms" for k, a, b in comm if b > a * 1.0005]
    why = ("exposed " + ", ".join(grown)) if grown else (
        "no exposed communication grows (it is hidden behind compute or stays inside the node)")
    return f"{lead} adds {added * 1e3:.3g} ms ({added / base:.1%}) to {what}: {why}."


CONDITION_NAMES = ("pfc_pause", "dcqcn_rate_reduction", "loss_go_back_n", "incast",
                   "core_oversubscription")


def _active(system: System, c: Conditions) -> list[str]:
    f = factors(system, c)
    names = [n for n in CONDITION_NAMES[:4] if f[n] > 1.0]
    if c.oversubscription_ratio is not None:
        names.append("core_oversubscription")
    return names


def train_what_if(system: System, model: Model, execution: Execution, c: Conditions
                  ) -> WhatIf:
    """What ``c`` costs one training step of ``execution`` (each condition alone, and all)."""
    base = train(system, model, execution)
    comm_keys = [k for k in base.breakdown_s if k.endswith("communication") or k == "bubble"]
    terms = []
    for name in _active(system, c):
        r = train(degraded(system, c, name), model, execution)
        value, lead = _describe(name, system, c)
        added = r.step_s - base.step_s
        comm = [(k, base.breakdown_s[k], r.breakdown_s[k]) for k in comm_keys]
        terms.append(WhatIfTerm(name, value, added, added / base.step_s,
                                _sentence(lead, added, base.step_s, comm)))
    total = train(degraded(system, c), model, execution)
    return WhatIf(c.source, "step_s", base.step_s, total.step_s, tuple(terms), c.notes)


def infer_what_if(system: System, model: Model, request: Request, serving: Serving,
                  c: Conditions, tp: int = 1, pp: int = 1, ep: int = 1,
                  concurrency: int = 0, disaggregate: bool = False) -> WhatIf:
    """What ``c`` costs each output token of a serving configuration (and, disaggregated,
    the KV transfer of each prompt): each condition alone, and all."""
    def run(s: System) -> InferResult:
        return infer(s, model, request, serving, tp=tp, pp=pp, ep=ep,
                     concurrency=concurrency, disaggregate=disaggregate)

    base = run(system)
    keys = ("tp_comm_s", "ep_comm_s", "pp_comm_s")
    terms = []
    for name in _active(system, c):
        r = run(degraded(system, c, name))
        value, lead = _describe(name, system, c)
        added = r.tpot_s - base.tpot_s
        comm = [(k.removesuffix("_s"), base.iteration_breakdown_s[k],
                 r.iteration_breakdown_s[k]) for k in keys]
        if base.disaggregated and r.disaggregated:
            comm.append(("KV transfer per prompt", base.disaggregated["kv_transfer_s"],
                         r.disaggregated["kv_transfer_s"]))
        terms.append(WhatIfTerm(name, value, added, added / base.tpot_s,
                                _sentence(lead, added, base.tpot_s, comm,
                                          "each output token")))
    total = run(degraded(system, c))
    return WhatIf(c.source, "time_per_output_token_s", base.tpot_s, total.tpot_s,
                  tuple(terms), c.notes)
