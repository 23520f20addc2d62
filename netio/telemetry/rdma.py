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
from dataclasses import dataclass

from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, MetricSpec, Sample
from netio.telemetry.selection import ALL, Selection
from netio.telemetry.sysfs import AttrReader, ReadFault, is_sysfs, list_dir, read_attr


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


def parse_rate_bps(text: str) -> float | None:
    """``"100 Gb/sec (4X EDR)"`` -> 1e11 bits/s."""
    mt = _RATE.match(text)
    if mt is None:
        return None
    return float(mt.group(1)) * _UNIT[mt.group(2)]


def _leading_int(text: str) -> int | None:
    head = text.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


class RdmaSysfsCollector:
    """Reads every port of every RDMA device under ``<sysfs_root>/class/infiniband``."""

    name = "rdma"

    def __init__(self, sysfs_root: str = "/sys", *, devices: Selection = ALL,
                 passthrough_unknown: bool = False, keep_open: bool | None = None) -> None:
        """``keep_open``: keep counter files open between polls (default: only on a
        real sysfs mount, see :class:`netio.telemetry.sysfs.AttrReader`)."""
        self.sysfs_root = sysfs_root
        self.reader = AttrReader(is_sysfs(sysfs_root) if keep_open is None else keep_open)
        self.devices = devices
        self.passthrough_unknown = passthrough_unknown
        # Counter file lists per directory; re-listed when a device vanishes.
        self._plans: dict[str, list[tuple[str, str, MetricSpec, tuple[str, ...], float,
                                           int]]] = {}
        self._previous: frozenset[str] = frozenset()

    def _fault(self, faults: list[Fault], kind: str, source: str, reason: str) -> None:
        faults.append(Fault(self.name, kind, source, reason))

    def _plan(self, directory: str, table: dict[str, Norm], dev: str, port: str
              ) -> list[tuple[str, str, MetricSpec, tuple[str, ...], float, int]] | ReadFault:
        """(path, name, spec, labels, scale, width) per counter file to read; cached per
        directory so the steady state does no listing, joining or name lookups."""
        cached = self._plans.get(directory)
        if cached is not None:
            return cached
        listing = list_dir(directory)
        if isinstance(listing, ReadFault):
            return listing
        plan: list[tuple[str, str, MetricSpec, tuple[str, ...], float, int]] = []
        for cname in listing:
            norm = table.get(cname)
            if norm is None:
                if not self.passthrough_unknown or cname in _SETTINGS:
                    continue
                plan.append((os.path.join(directory, cname), cname, m.RDMA_OTHER,
                             (dev, port, cname), 1.0, 64))
                continue
            labels = (dev, port, *norm.extra)
            plan.append((os.path.join(directory, cname), cname, norm.spec, labels, norm.scale,
                         norm.width_bits))
        self._plans[directory] = plan
        return plan

    def collect(self) -> Collection:
        t0 = time.perf_counter()
        samples: list[Sample] = []
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
                self._port(os.path.join(base, dev, "ports", port), dev, port, samples, faults)
        for gone in sorted(self._previous - set(seen)):
            self._fault(faults, "vanished", gone, "device no longer present")
            self._plans = {k: v for k, v in self._plans.items() if f"/{gone}/" not in k}
            self.reader.drop_under(os.path.join(base, gone) + "/")
        self._previous = frozenset(seen)
        return Collection(self.name, tuple(samples), tuple(faults), time.time_ns(),
                          time.perf_counter() - t0, tuple(seen))

    def _port(self, pdir: str, dev: str, port: str, samples: list[Sample],
              faults: list[Fault]) -> None:
        labels = (dev, port)
        src = f"{dev}/{port}"
        for attr, spec in (("state", m.RDMA_PORT_STATE), ("phys_state", m.RDMA_PORT_PHYS_STATE)):
            text = read_attr(os.path.join(pdir, attr))
            if isinstance(text, ReadFault):
                self._fault(faults, text.kind, f"{src}/{attr}", text.reason)
                continue
            num = _leading_int(text)
            if num is not None:
                samples.append(Sample(spec, labels, float(num)))
        rate = read_attr(os.path.join(pdir, "rate"))
        if isinstance(rate, str):
            bps = parse_rate_bps(rate)
            if bps is not None:
                samples.append(Sample(m.RDMA_PORT_RATE, labels, bps / 8.0))
        # A name in both groups (link_downed) is reported once, PMA first.
        keys: set[tuple[str, tuple[str, ...]]] = set()
        for group, table in (("counters", PMA_NAMES), ("hw_counters", HW_NAMES)):
            gdir = os.path.join(pdir, group)
            plan = self._plan(gdir, table, dev, port)
            if isinstance(plan, ReadFault):
                # rxe and bnxt_re have no counters/: absence is normal, not a fault.
                continue
            for path, cname, spec, lv, scale, width in plan:
                text = self.reader.read(path)
                if isinstance(text, ReadFault):
                    if text.kind == "vanished":
                        self._plans.pop(gdir, None)
                        self.reader.drop_under(gdir)
                    self._fault(faults, text.kind, f"{src}/{group}/{cname}", text.reason)
                    continue
                if _NOT_A_NUMBER.match(text):
                    continue
                try:
                    value = int(text)
                except ValueError:
                    self._fault(faults, "parse", f"{src}/{group}/{cname}",
                                f"not an integer: {text[:40]!r}")
                    continue
                key = (spec.name, lv)
                if key in keys:
                    continue
                keys.add(key)
                samples.append(Sample(spec, lv, value * scale, width))
