"""Built-in scenarios for ``netio scenario --preset NAME``.

- ``demo``: the README story (four capture ports around switch sw1): incast and
  ECN/CNP on host3, a PFC storm rooted at host3 that spreads to sw1's other
  ports and pauses victims that never sent to host3, a loss with NAK and
  go-back-N on a flow whose PSN wraps, RNR NAKs, and one corrupted ICRC.
- ``small``: the same ingredients at a size the pure-Python reference path
  analyses in about a second (used by the tests).
- ``bench(n_packets)``: a large mixed RoCE/PFC capture for benchmarks
  (header-only snap length by default, as fabric captures usually are).
"""

from __future__ import annotations

from typing import Any

from netio.scenario.spec import Scenario, scenario_from_dict


def _mac(host: int, switch_port: int | None = None) -> str:
    return f"02:00:00:01:00:{switch_port:02x}" if switch_port is not None else \
        f"02:00:00:00:00:{host:02x}"


def _ip(host: int) -> str:
    return f"10.0.0.{host}"


def demo_dict(scale: float = 1.0) -> dict[str, Any]:
    """The demo scenario; ``scale`` < 1 shrinks rates (and so packet counts)."""
    g = f"{scale:g}G"
    dur = 0.9

    def msgs(rate_gbps: float, size: int, seconds: float) -> int:
        return max(1, int(seconds * rate_gbps * scale * 1e9 / 8 / size))

    host3_hop = {"port": "host3", "src_mac": _mac(0, 3), "dst_mac": _mac(3), "delay": 2e-6}
    flows = [
        {"name": "A h1->host3", "src_ip": _ip(1), "dst_ip": _ip(3), "src_qp": 0x11,
         "dst_qp": 0x31, "op": "write", "message_bytes": 65536, "pmtu": 4096, "rate": g,
         "messages": msgs(1, 65536, dur),
         "hops": [{"port": "sw1-p1", "src_mac": _mac(1), "dst_mac": _mac(0, 1)}, host3_hop],
         "ce": [{"from": 0.25, "to": 0.30, "every": 4}], "bad_icrc": [500]},
        {"name": "C h2->host3", "src_ip": _ip(2), "dst_ip": _ip(3), "src_qp": 0x21,
         "dst_qp": 0x32, "op": "send", "message_bytes": 16384, "pmtu": 4096, "rate": g,
         "messages": msgs(1, 16384, dur),
         "hops": [{"port": "sw1-p2", "src_mac": _mac(2), "dst_mac": _mac(0, 2)}, host3_hop],
         "ce": [{"from": 0.25, "to": 0.30, "every": 1}], "cnp_interval": 20e-6,
         "rnr": [4 * (msgs(1, 16384, dur) // 5)], "rnr_timer_code": 14},
        {"name": "D h1->h5", "src_ip": _ip(1), "dst_ip": _ip(5), "src_qp": 0x12,
         "dst_qp": 0x51, "op": "write", "message_bytes": 65536, "pmtu": 4096, "rate": g,
         "messages": msgs(1, 65536, dur), "start_psn": (1 << 24) - 16 * msgs(1, 65536, dur) // 5,
         "drops": [16 * msgs(1, 65536, dur) // 3 + 7],
         "hops": [{"port": "sw1-p1", "src_mac": _mac(1), "dst_mac": _mac(0, 1)}]},
        {"name": "E h4->h5", "src_ip": _ip(4), "dst_ip": _ip(5), "src_qp": 0x41,
         "dst_qp": 0x52, "op": "write", "message_bytes": 32768, "pmtu": 4096, "rate": g,
         "messages": msgs(1, 32768, dur),
         "hops": [{"port": "sw1-p4", "src_mac": _mac(4), "dst_mac": _mac(0, 4)}]},
        {"name": "G h5 reads h4", "src_ip": _ip(5), "dst_ip": _ip(4), "src_qp": 0x53,
         "dst_qp": 0x42, "op": "read", "message_bytes": 8192, "pmtu": 4096,
         "rate": f"{0.5 * scale:g}G", "messages": msgs(0.5, 8192, dur),
         "hops": [{"port": "sw1-p4", "src_mac": _mac(0, 4), "dst_mac": _mac(4)}]},
    ]
    for host, qp in ((6, 0x61), (7, 0x71)):
        flows.append({
            "name": f"incast h{host}->host3", "src_ip": _ip(host), "dst_ip": _ip(3),
            "src_qp": qp, "dst_qp": 0x33 + host, "op": "write", "message_bytes": 65536,
            "pmtu": 4096, "rate": f"{2 * scale:g}G", "start": 0.25,
            "messages": msgs(2, 65536, 0.05), "hops": [host3_hop]})
    pauses = [
        {"port": "host3", "src_mac": _mac(3), "start": 0.300, "duration": 0.300,
         "refresh": 150e-6},
        {"port": "sw1-p1", "src_mac": _mac(0, 1), "start": 0.3002, "duration": 0.2996,
         "refresh": 150e-6},
        {"port": "sw1-p2", "src_mac": _mac(0, 2), "start": 0.3004, "duration": 0.150,
         "refresh": 150e-6},
        {"port": "sw1-p4", "src_mac": _mac(0, 4), "start": 0.3006, "duration": 0.250,
         "refresh": 150e-6},
    ]
    return {
        "name": "demo",
        "story": ("Incast of 4 senders onto host3 at 250 ms marks ECN and draws CNPs "
                  "(host3's NIC sends them faster than DCQCN's 1 per 50 us); at 300 ms "
                  "host3 PFC-pauses switch port sw1-p3 for 300 ms (a storm); sw1 then "
                  "pauses its ports p1, p2 and p4 within 0.6 ms, stalling h4 (sending "
                  "only to h5) and h1's flow to h5: victims. Flow D lost a packet (NAK, "
                  "go-back-N) after its PSN wrapped; flow C drew an RNR NAK; one frame "
                  "of flow A has a bad ICRC."),
        "ports": [{"name": n, "link_speed": "100G"} for n in
                  ("host3", "sw1-p1", "sw1-p2", "sw1-p4")],
        "flows": flows,
        "pauses": pauses,
    }


def small_dict() -> dict[str, Any]:
    return demo_dict(scale=0.1)


#: Flow mix of ``bench_dict``: (count, op, message bytes, path MTU, packets per message
#: on the wire including its ACK or READ REQUEST).
BENCH_MIX: tuple[tuple[int, str, int, int, int], ...] = (
    (12, "write", 65536, 4096, 16 + 1),  # bulk RDMA WRITE, 4 KiB MTU
    (4, "write", 4096, 1024, 4 + 1),     # small WRITEs, 1 KiB MTU
    (4, "send", 8192, 1024, 8 + 1),      # SENDs
    (4, "read", 32768, 4096, 1 + 8),     # RDMA READs (request + responses)
)


def bench_dict(n_packets: int, *, snaplen: int = 128) -> dict[str, Any]:
    """About ``n_packets`` packets on one 100G port, a mixed RoCE/PFC fabric capture.

    24 QPs between 24 sender hosts and 4 destination hosts (``BENCH_MIX``):
    bulk and small RDMA WRITEs, SENDs and READs at 1 KiB and 4 KiB MTU, one
    ACK per message, ECN marking with CNPs, a few losses with NAK and go-back-N
    and RNR NAKs in long runs; PFC pauses of the destination port on the flows'
    priority and a 250 ms PFC storm on another. ``snaplen`` 128 keeps the
    headers only, as fabric captures usually do; 65535 keeps whole frames (and
    lets the ICRCs be checked). The flows share the link at most 80 Gb/s.
    """
    flows = []
    total_bytes = 0
    per_kind = len(BENCH_MIX)
    n_flows = sum(m[0] for m in BENCH_MIX)
    plan = []
    for count, op, size, pmtu, per_msg in BENCH_MIX:
        for _ in range(count):
            messages = max(1, round(n_packets / n_flows / per_msg))
            plan.append((op, size, pmtu, per_msg, messages))
            total_bytes += messages * (size + per_msg * 70)
    dur = max(1.0, total_bytes * 8 / 80e9)
    for i, (op, size, pmtu, per_msg, messages) in enumerate(plan):
        rate = messages * size * 8 / dur
        data_packets = messages * (per_msg - 1)
        flow: dict[str, Any] = {
            "name": f"f{i}", "src_ip": _ip(10 + i), "dst_ip": _ip(100 + i % per_kind),
            "src_qp": 0x100 + i, "dst_qp": 0x200 + i, "op": op, "message_bytes": size,
            "pmtu": pmtu, "rate": f"{rate / 1e9:.6f}G", "messages": messages,
            "start_psn": (1 << 24) - 1000 * (i + 1),
            "ce": [{"from": 0.2 * dur, "to": 0.8 * dur, "every": 50}],
            "hops": [{"port": "bench", "src_mac": _mac(10 + i), "dst_mac": _mac(0, 1)}]}
        if op != "read" and data_packets > 60_000:
            flow["drops"] = [1001 + i, data_packets // 2 + 7 * i]
            if op == "send":
                flow["rnr"] = [data_packets // 4 + 3]
        flows.append(flow)
    pauses = [{"port": "bench", "src_mac": _mac(0, 1), "start": 0.1 + 0.05 * k,
               "duration": 0.002, "refresh": 100e-6} for k in range(8)]
    pauses.append({"port": "bench", "src_mac": _mac(0, 1), "start": 0.55, "duration": 0.25,
                   "refresh": 100e-6, "priorities": [5]})
    return {"name": f"bench-{n_packets}",
            "ports": [{"name": "bench", "link_speed": "100G", "snaplen": snaplen}],
            "flows": flows, "pauses": pauses}


PRESETS: dict[str, str] = {
    "demo": "README story: storm + spreading chain + ECN/CNP + loss/NAK + RNR (4 captures)",
    "small": "the demo at a tenth of the rate (fast tests)",
}


def preset(name: str) -> Scenario:
    if name == "demo":
        return scenario_from_dict(demo_dict())
    if name == "small":
        return scenario_from_dict(small_dict())
    raise KeyError(name)
