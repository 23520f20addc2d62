"""RDMA port counters from sysfs: ``class/infiniband/<dev>/ports/<p>/{counters,hw_counters}``.

``counters/`` holds the IB PMA counters (absent on rxe and bnxt_re; "N/A (no PMA)"
on some drivers); ``hw_counters/`` holds driver counters (mlx5, rxe, ...).  Known
names become normalised metrics (see ``RDMA_NAMES``); the rest are dropped, or
passed through under ``netio_rdma_stat{stat=...}`` when asked.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, MetricSpec, PlannedSamples, SeriesPlan
from netio.telemetry.selection import ALL, Selection
from netio.telemetry.sysfs import AttrReader, CounterReader, ReadFault, is_sysfs, list_dir


@dataclass(frozen=True, slots=True)
class RdmaConfig:
    """The ``[collectors.rdma]`` section."""

    enabled: bool = True
    interval_s: float = 1.0
    devices: Selection = field(default_factory=Selection)
    passthrough_unknown: bool = False
    # None: keep counter files open between polls only on a real sysfs mount
    keep_files_open: bool | None = None


@dataclass(frozen=True, slots=True)
class Norm:
    """How one driver counter maps onto a normalised metric."""

    spec: MetricSpec
    extra: tuple[str, ...]  # label values after (device, port)
    scale: float = 1.0
    width_bits: int = 64


def _t(event: str) -> Norm:
    return Norm(m.RDMA_TRANSPORT, (event,))


def _ce(side: str, error: str) -> Norm:
    return Norm(m.RDMA_COMPLETION_ERRORS, (side, error))


def _pe(error: str) -> Norm:
    return Norm(m.RDMA_PORT_ERRORS, (error,))


# IB PMA counters (counters/).  port_*_data count 4-byte words (IBTA vol. 1, 16.1.3.5,
# PortXmitData/PortRcvData "divided by 4").  The kernel serves the 64-bit extended
# counters when the HCA has them; the error counters are 16/8/4-bit and saturate.
PMA_NAMES: dict[str, Norm] = {
    "port_xmit_data": Norm(m.RDMA_BYTES, ("tx",), 4.0),
    "port_rcv_data": Norm(m.RDMA_BYTES, ("rx",), 4.0),
    "port_xmit_packets": Norm(m.RDMA_PACKETS, ("tx",)),
    "port_rcv_packets": Norm(m.RDMA_PACKETS, ("rx",)),
    "link_downed": Norm(m.RDMA_LINK_DOWNED, ()),
    "port_rcv_errors": _pe("receive"),
    "port_xmit_discards": _pe("transmit_discard"),
    "symbol_error": _pe("symbol"),
    "link_error_recovery": _pe("link_error_recovery"),
    "local_link_integrity_errors": _pe("local_link_integrity"),
    "excessive_buffer_overrun_errors": _pe("excessive_buffer_overrun"),
    "port_rcv_remote_physical_errors": _pe("receive_remote_physical"),
    "port_rcv_switch_relay_errors": _pe("receive_switch_relay"),
    "port_rcv_constraint_errors": _pe("receive_constraint"),
    "port_xmit_constraint_errors": _pe("transmit_constraint"),
    "VL15_dropped": _pe("vl15_dropped"),
}

# Driver counters (hw_counters/).  mlx5 names: NVIDIA "Understanding mlx5 Linux
# Counters and Status Parameters"; rxe names: drivers/infiniband/sw/rxe/rxe_hw_counters.c.
HW_NAMES: dict[str, Norm] = {
    # congestion control (DCQCN): NP = notification point, RP = reaction point
    "np_ecn_marked_roce_packets": Norm(m.RDMA_ECN_MARKED, ()),
    "np_cnp_sent": Norm(m.RDMA_CNP, ("sent",)),
    "rp_cnp_handled": Norm(m.RDMA_CNP, ("handled",)),
    "rp_cnp_ignored": Norm(m.RDMA_CNP, ("ignored",)),
    # sequence / retransmission (mlx5)
    "out_of_sequence": _t("out_of_sequence"),
    "packet_seq_err": _t("nak_sequence_error_received"),
    "implied_nak_seq_err": _t("implied_nak_sequence_error"),
    "local_ack_timeout_err": _t("local_ack_timeout"),
    "duplicate_request": _t("duplicate_request"),
    "rnr_nak_retry_err": _t("rnr_nak_received"),
    "req_transport_retries_exceeded": _t("retry_exceeded"),
    "req_rnr_retries_exceeded": _t("rnr_retry_exceeded"),
    "out_of_buffer": _t("out_of_buffer"),
    "roce_adp_retrans": _t("adaptive_retransmission"),
    "roce_adp_retrans_to": _t("adaptive_retransmission_timeout"),
    "roce_slow_restart": _t("slow_restart"),
    # rxe
    "out_of_seq_request": _t("out_of_sequence"),
    "rcvd_seq_err": _t("nak_sequence_error_received"),
    "rcvd_rnr_err": _t("rnr_nak_received"),
    "send_rnr_err": _t("rnr_nak_sent"),
    "retry_exceeded_err": _t("retry_exceeded"),
    "retry_rnr_exceeded_err": _t("rnr_retry_exceeded"),
    "completer_retry_err": _t("completer_retry"),
    "ack_deferred": _t("ack_deferred"),
    "send_err": _t("send_error"),
    "sent_pkts": Norm(m.RDMA_PACKETS, ("tx",)),
    "rcvd_pkts": Norm(m.RDMA_PACKETS, ("rx",)),
    "rdma_sends": Norm(m.RDMA_OPERATIONS, ("send",)),
    "rdma_recvs": Norm(m.RDMA_OPERATIONS, ("recv",)),
    "link_downed": Norm(m.RDMA_LINK_DOWNED, ()),
    # mlx5 responder-side request counts
    "rx_write_requests": Norm(m.RDMA_OPERATIONS, ("write_request_received",)),
    "rx_read_requests": Norm(m.RDMA_OPERATIONS, ("read_request_received",)),
    "rx_atomic_requests": Norm(m.RDMA_OPERATIONS, ("atomic_request_received",)),
    # mlx5 completion errors
    "req_cqe_error": _ce("requester", "cqe_error"),
    "req_cqe_flush_error": _ce("requester", "flush"),
    "req_remote_access_errors": _ce("requester", "remote_access"),
    "req_remote_invalid_request": _ce("requester", "remote_invalid_request"),
    "resp_cqe_error": _ce("responder", "cqe_error"),
    "resp_cqe_flush_error": _ce("responder", "flush"),
    "resp_local_length_error": _ce("responder", "local_length"),
    "resp_remote_access_errors": _ce("responder", "remote_access"),
}

# Values that some drivers write instead of a number: counted, not faults.
_NOT_A_NUMBER = re.compile(r"^N/A")
_RATE = re.compile(r"^\s*([0-9.]+)\s*([GMK]?)b/sec")
_UNIT = {"G": 1e9, "M": 1e6, "K": 1e3, "": 1.0}
# hw_counters that are settings, not counts.
_SETTINGS = frozenset({"lifespan"})
# Port attributes read before the counters, in this order (series 0, 1, 2 of a plan).
_ATTRS = ("state", "phys_state", "rate")
# A counter is one decimal number (at most 20 digits); a longer text is not one.
_COUNTER_TEXT_MAX = 256
# Counter directories are listed again every this many polls (new files are rare:
# a driver adds counters only with a new device, which has new descriptors anyway).
RESCAN_POLLS = 60


def parse_rate_bps(text: str) -> float | None:
    """``"100 Gb/sec (4X EDR)"`` -> 1e11 bits/s."""
    mt = _RATE.match(text)
    if mt is None:
        return None
    return float(mt.group(1)) * _UNIT[mt.group(2)]


@dataclass(slots=True, eq=False)
class _PortPlan:
    """What one poll of one port reads, fixed until its directories change.

    File ``k`` (``paths[k]``) feeds series ``k`` of ``series``: the three port
    attributes, then the counter files of ``counters/`` (PMA) and ``hw_counters/``.
    """

    series: SeriesPlan
    paths: tuple[str, ...]
    sources: tuple[str, ...]  # what a fault names: "mlx5_0/1/hw_counters/np_cnp_sent"
    # Positions of files that map onto the same series (PMA and hw_counters both have
    # link_downed): the first one with a value is reported.
    duplicates: tuple[tuple[int, ...], ...]
    polls: int = 0
    counters: CounterReader | None = None  # the counter files' kept descriptors
    counters_generation: int = -1


def _leading_int(text: str) -> int | None:
    head = text.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


class RdmaSysfsCollector:
    """Reads every port of every RDMA device under ``<sysfs_root>/class/infiniband``.

    Each port has a read plan (:class:`_PortPlan`): its files, their series and,
    with ``keep_open``, their descriptors.  A poll is then three attribute reads
    and one :class:`CounterReader` call (C when built) for all its counter files,
    into a list of ints; samples are made only when something asks for them
    (:class:`PlannedSamples`).  A file that does not read as a number is read
    again on its own, which says what went wrong where.
    """

    name = "rdma"

    def __init__(self, sysfs_root: str = "/sys", *, devices: Selection = ALL,
                 passthrough_unknown: bool = False, keep_open: bool | None = None) -> None:
        """``keep_open``: keep counter files open between polls (default: only on a
        real sysfs mount, see :class:`netio.telemetry.sysfs.AttrReader`)."""
        self.sysfs_root = sysfs_root
        self.reader = AttrReader(is_sysfs(sysfs_root) if keep_open is None else keep_open)
        self.devices = devices
        self.passthrough_unknown = passthrough_unknown
        self._plans: dict[str, _PortPlan] = {}  # by port directory
        self._previous: frozenset[str] = frozenset()

    def _fault(self, faults: list[Fault], kind: str, source: str, reason: str) -> None:
        faults.append(Fault(self.name, kind, source, reason))

    def _build_plan(self, pdir: str, dev: str, port: str) -> _PortPlan:
        src = f"{dev}/{port}"
        labels = (dev, port)
        specs: list[MetricSpec] = [m.RDMA_PORT_STATE, m.RDMA_PORT_PHYS_STATE, m.RDMA_PORT_RATE]
        lvs: list[tuple[str, ...]] = [labels] * 3
        scales, widths = [1.0] * 3, [64] * 3
        paths = [os.path.join(pdir, a) for a in _ATTRS]
        sources = [f"{src}/{a}" for a in _ATTRS]
        for group, table in (("counters", PMA_NAMES), ("hw_counters", HW_NAMES)):
            gdir = os.path.join(pdir, group)
            listing = list_dir(gdir)
            if isinstance(listing, ReadFault):
                # rxe and bnxt_re have no counters/: absence is normal, not a fault.
                continue
            for cname in listing:
                norm = table.get(cname)
                if norm is None:
                    if not self.passthrough_unknown or cname in _SETTINGS:
                        continue
                    norm = Norm(m.RDMA_OTHER, (cname,))
                specs.append(norm.spec)
                lvs.append((dev, port, *norm.extra))
                scales.append(norm.scale)
                widths.append(norm.width_bits)
                paths.append(os.path.join(gdir, cname))
                sources.append(f"{src}/{group}/{cname}")
        where: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for k in range(len(_ATTRS), len(specs)):
            where.setdefault((specs[k].name, lvs[k]), []).append(k)
        old = self._plans.get(pdir)
        if old is not None and old.paths == tuple(paths):
            return old  # unchanged: keep its series (and their memoised lookups)
        if old is not None:
            self.reader.drop_under(pdir + "/")
        return _PortPlan(SeriesPlan(tuple(specs), tuple(lvs), tuple(scales), tuple(widths)),
                         tuple(paths), tuple(sources),
                         tuple(tuple(ks) for ks in where.values() if len(ks) > 1))

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        parts: list[tuple[SeriesPlan, list[float | None]]] = []
        faults: list[Fault] = []
        base = os.path.join(self.sysfs_root, "class", "infiniband")
        devs = list_dir(base)
        if isinstance(devs, ReadFault):
            # No RDMA subsystem is a valid state (no devices), not a fault.
            devs = []
        seen: list[str] = []
        for dev in devs:
            if not self.devices(dev):
                continue
            ports = list_dir(os.path.join(base, dev, "ports"))
            if isinstance(ports, ReadFault):
                self._fault(faults, ports.kind, dev, f"ports: {ports.reason}")
                continue
            seen.append(dev)
            for port in ports:
                pdir = os.path.join(base, dev, "ports", port)
                parts.append(self._port(pdir, dev, port, faults))
        for gone in sorted(self._previous - set(seen)):
            self._fault(faults, "vanished", gone, "device no longer present")
            prefix = os.path.join(base, gone) + "/"
            self._plans = {k: v for k, v in self._plans.items() if not k.startswith(prefix)}
            self.reader.drop_under(prefix)
        self._previous = frozenset(seen)
        return Collection(self.name, PlannedSamples(parts) if parts else (), tuple(faults),
                          time.time_ns(), time.perf_counter() - t0, tuple(seen))

    def _port(self, pdir: str, dev: str, port: str, faults: list[Fault]
              ) -> tuple[SeriesPlan, list[float | None]]:
        plan = self._plans.get(pdir)
        if plan is None or plan.polls >= RESCAN_POLLS:
            plan = self._plans[pdir] = self._build_plan(pdir, dev, port)
            plan.polls = 0
        plan.polls += 1
        reader = self.reader
        n_attrs = len(_ATTRS)
        values = self._attrs([reader.read(p) for p in plan.paths[:n_attrs]], plan, faults)
        counters = self._counter_reader(plan)
        if counters is None:  # files not kept open, or one could not be opened
            for k in range(n_attrs, len(plan.paths)):
                values.append(self._counter(reader.read(plan.paths[k]), k, plan, pdir, faults))
        else:
            nums, status = counters.read()
            if status is not None:  # read the odd ones again, one by one, to say why
                nums_or_none: list[int | None] = list(nums)
                for j, st in enumerate(status):
                    if st:
                        k = n_attrs + j
                        nums_or_none[j] = self._counter(reader.read(plan.paths[k]), k, plan,
                                                        pdir, faults)
                values.extend(nums_or_none)
            else:
                values.extend(nums)
        for group in plan.duplicates:
            first = True
            for k in group:
                if values[k] is not None:
                    if not first:
                        values[k] = None
                    first = False
        return plan.series, values

    def _counter_reader(self, plan: _PortPlan) -> CounterReader | None:
        reader = self.reader
        if not reader.keep_open:
            return None
        if plan.counters is None or plan.counters_generation != reader.generation:
            fds = reader.descriptors(plan.paths[len(_ATTRS):])
            plan.counters = None if fds is None else CounterReader(fds)
            plan.counters_generation = reader.generation
        return plan.counters

    def _attrs(self, items: list[str | ReadFault], plan: _PortPlan, faults: list[Fault]
               ) -> list[float | None]:
        out: list[float | None] = []
        for k, text in enumerate(items):
            if isinstance(text, ReadFault):
                if _ATTRS[k] != "rate":  # no rate (link down, rxe): not a fault
                    self._fault(faults, text.kind, plan.sources[k], text.reason)
                out.append(None)
            elif _ATTRS[k] == "rate":
                bps = parse_rate_bps(text)
                out.append(None if bps is None else bps / 8.0)
            else:
                num = _leading_int(text)
                out.append(None if num is None else float(num))
        return out

    def _counter(self, text: str | ReadFault, k: int, plan: _PortPlan, pdir: str,
                 faults: list[Fault]) -> int | None:
        """The value of counter file ``k`` read as text, or None (with the fault)."""
        if isinstance(text, ReadFault):
            if text.kind == "vanished":
                # re-listed on the next poll
                self._plans.pop(pdir, None)
                self.reader.drop_under(pdir + "/")
            self._fault(faults, text.kind, plan.sources[k], text.reason)
            return None
        if _NOT_A_NUMBER.match(text):
            return None
        try:
            if len(text) >= _COUNTER_TEXT_MAX:
                raise ValueError(text)
            return int(text)
        except ValueError:
            self._fault(faults, "parse", plan.sources[k], f"not an integer: {text[:40]!r}")
            return None

    def close(self) -> None:
        """Close the kept descriptors (the collector is being replaced)."""
        self._plans.clear()
        self.reader.close()


def build_collector(cfg: RdmaConfig, sysfs_root: str) -> RdmaSysfsCollector:
    return RdmaSysfsCollector(sysfs_root, devices=cfg.devices,
                              passthrough_unknown=cfg.passthrough_unknown,
                              keep_open=cfg.keep_files_open)
