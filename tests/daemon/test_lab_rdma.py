"""Live check in the rxe lab: the RDMA collector, run inside a guest against the real
kernel rxe0 while ibv_rc_pingpong traffic flows, reads what the kernel's hw_counters
say right after.

Uses its own lab instance (namespace ``rxelab-daemon``, subnet 10.78.0) so it never
touches a lab another test suite is using, and stops only that instance.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import REPO, SHARED

LAB = (SHARED / "rxe-lab").resolve()
ENV = {**os.environ, "RXE_LAB_NS": "rxelab-daemon", "RXE_LAB_RUN": "/run/rxe-lab-daemon",
       "RXE_LAB_SUBNET": "10.78.0"}
SITE = REPO / ".venv" / "lib" / "python3.11" / "site-packages"

GUEST_CODE = r"""
import json, os, time
from netio.telemetry.rdma import RdmaSysfsCollector
c = RdmaSysfsCollector("/sys")
first = c.collect()
time.sleep(1.5)
hw = "/sys/class/infiniband/rxe0/ports/1/hw_counters"
read = lambda: {n: int(open(os.path.join(hw, n)).read()) for n in sorted(os.listdir(hw))}
before = read()
col = c.collect()
kernel = read()
dump = lambda cl: [[s.spec.name, list(s.labels), s.value] for s in cl.samples]
print("JSON=" + json.dumps({"first": dump(first), "second": dump(col), "kernel": kernel,
                            "before": before,
                            "faults": [f.kind + " " + f.source for f in col.faults]}))
"""


def lab(*args: str, timeout: int = 300, stdin: bytes | None = None) -> str:
    r = subprocess.run([str(LAB / "rxelab.py"), *args], env=ENV, input=stdin,
                       capture_output=True, timeout=timeout)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    if r.returncode != 0:
        raise AssertionError(f"rxelab {' '.join(args)} failed ({r.returncode}): {out[-3000:]}")
    return out


@pytest.fixture(scope="module")
def daemon_lab() -> Iterator[dict[str, object]]:
    lab("start", "-n", "2", "--python", "--share", f"{REPO}:ro", timeout=600)
    try:
        with open(os.path.join(ENV["RXE_LAB_RUN"], "lab.json")) as f:
            yield json.load(f)
    finally:
        lab("stop", timeout=120)


@pytest.mark.lab
@pytest.mark.slow
def test_rdma_collector_matches_kernel_hw_counters(daemon_lab: dict[str, object],
                                                   tmp_path: Path) -> None:
    guests = daemon_lab["guests"]
    assert isinstance(guests, list)
    g0 = guests[0]
    ip0, gid = g0["ip"], g0.get("gid_index", 1)
    # exec: the recorded pid is the program's, so that the kill below ends it (its QP
    # must not be there for the per-QP tests that follow)
    lab("run", "g0", "--bg", "--bg-name", "srv",
        f"exec ibv_rc_pingpong -d rxe0 -g {gid} -s 1024 -n 20000 -p 18601")
    lab("run", "g1", "--bg", "--bg-name", "cli",
        f"sleep 1; exec ibv_rc_pingpong -d rxe0 -g {gid} -s 1024 -n 20000 -p 18601 {ip0}")
    code = tmp_path / "guest.py"
    code.write_text(GUEST_CODE)
    try:
        out = lab("run", "g0", "-t", "180", "--stdin", str(code),
                  f"sleep 3; cd {REPO} && PYTHONDONTWRITEBYTECODE=1 "
                  f"RXELAB_PYTHON_SITEDIRS={SITE} python3 -", timeout=240)
    finally:
        for g, name in (("g1", "cli"), ("g0", "srv")):
            lab("run", g, f"kill $(cat /tmp/{name}.pid) 2>/dev/null; true")
    line = next(x for x in out.splitlines() if x.startswith("JSON="))
    doc = json.loads(line[5:])
    assert doc["faults"] == []
    kernel: dict[str, int] = doc["kernel"]
    second = {(n, tuple(lbl)): v for n, lbl, v in doc["second"]}
    first = {(n, tuple(lbl)): v for n, lbl, v in doc["first"]}
    from netio.telemetry.rdma import HW_NAMES

    checked = 0
    for name, raw in kernel.items():
        norm = HW_NAMES.get(name)
        if norm is None:
            assert name == "lifespan", name
            continue
        key = (norm.spec.name, ("rxe0", "1", *norm.extra))
        got = second[key]
        # read between two reads of the kernel's files, with pingpong traffic flowing
        assert doc["before"][name] <= got <= raw, (name, doc["before"][name], got, raw)
        checked += 1
    assert checked == len(kernel) - 1 >= 15
    rx = (("netio_rdma_packets_total"), ("rxe0", "1", "rx"))
    assert second[rx] > first[rx], "no traffic between the two collections"
    assert second[("netio_rdma_port_state", ("rxe0", "1"))] == 4


QP_GUEST_CODE = r"""
import json, subprocess, sys, time
from netio.telemetry.rdma_qp import RdmaNetlinkClient, RdmaQpCollector

want_rc = int(sys.argv[1])
client = RdmaNetlinkClient()
(index, dev, ports), = client.devices()

def rdma(*args):
    return json.loads(subprocess.run(["rdma", "-j", *args], capture_output=True, text=True,
                                     check=True).stdout)

end = time.time() + 75
while time.time() < end:  # until the traffic's QPs exist and are connected
    # connected: RTS, or RTR for a QP that only receives (ib_write_bw's server side)
    qps = [q for q in client.qps(index, dev) if q.type == "RC" and q.state in ("RTR", "RTS")]
    if len(qps) >= want_rc:
        break
    time.sleep(0.5)
col = RdmaQpCollector(client, top_n=want_rc)
while time.time() < end:  # until traffic moves on every one of them
    time.sleep(1.0)
    moving = [q for q, sq, rq in col.poll()[0]
              if q.type == "RC" and (sq or 0) + (rq or 0) > 0]
    if len(moving) >= want_rc:
        break
col.collect()
out = {"rounds": []}
for _ in range(3):
    before, stat_before = rdma("resource", "show", "qp"), rdma("statistic", "show")
    ours = [{f: getattr(q, f) for f in q.__slots__} for q in client.qps(index, dev)]
    counters = client.port_counters(index, 1)
    after, stat_after = rdma("resource", "show", "qp"), rdma("statistic", "show")
    out["rounds"].append({"before": before, "after": after, "ours": ours,
                          "counters": counters, "stat_before": stat_before,
                          "stat_after": stat_after})
    time.sleep(0.3)
c = col.collect()
out["samples"] = [[s.spec.name, list(s.labels), s.value] for s in c.samples]
out["faults"] = [f.kind + " " + f.source for f in c.faults]
print("JSON=" + json.dumps(out))
"""


def _check_qps_against_rdma_tool(doc: dict, want_rc: int) -> None:  # type: ignore[type-arg]
    """Each of our QP reads lies between two reads of ``rdma resource show qp -j``
    (and the port counters between two ``rdma statistic show -j``)."""
    from netio.telemetry.rdma_qp import psn_advance

    assert doc["faults"] == []
    for rnd in doc["rounds"]:
        before = {q["lqpn"]: q for q in rnd["before"]}
        after = {q["lqpn"]: q for q in rnd["after"]}
        ours = {q["qpn"]: q for q in rnd["ours"]}
        stable = set(before) & set(after)
        assert stable <= set(ours) <= set(before) | set(after), (sorted(ours), sorted(before))
        rc = [n for n in stable
              if before[n]["type"] == "RC" and before[n]["state"] in ("RTR", "RTS")]
        assert len(rc) >= want_rc, rnd["before"]
        for n in stable:
            b, a, o = before[n], after[n], ours[n]
            assert o["type"] == b["type"] and o["port"] == b.get("port"), (o, b)
            if b["state"] == a["state"]:
                assert o["state"] == b["state"]
            assert o["peer_qpn"] == b.get("rqpn"), (o, b)
            for ours_key, tool_key in (("sq_psn", "sq-psn"), ("rq_psn", "rq-psn")):
                if tool_key in b and tool_key in a:
                    assert psn_advance(b[tool_key], o[ours_key]) <= \
                        psn_advance(b[tool_key], a[tool_key]), (n, tool_key, b, o, a)
        (sb,), (sa,) = rnd["stat_before"], rnd["stat_after"]
        counters = dict(rnd["counters"])
        assert set(counters) == set(sb) - {"ifname", "ifindex", "port"}
        for name, v in counters.items():
            assert sb[name] <= v <= sa[name], (name, sb[name], v, sa[name])
    samples = {(n, tuple(lbl)): v for n, lbl, v in doc["samples"]}
    info = [lbl for n, lbl in samples if n == "netio_rdma_qp_info"]
    assert len(info) == want_rc, info  # bounded by top_n
    assert all(lbl[3] == "RC" for lbl in info), info  # the busy ones, not the idle GSI QP
    moving = [lbl for n, lbl in samples
              if n == "netio_rdma_qp_psn_advance_per_second" and samples[(n, lbl)] > 0]
    assert moving, samples


def _run_qp_guest(tmp_path: Path, want_rc: int) -> dict:  # type: ignore[type-arg]
    code = tmp_path / "qp_guest.py"
    code.write_text(QP_GUEST_CODE)
    out = lab("run", "g0", "-t", "240", "--stdin", str(code),
              f"cd {REPO} && PYTHONDONTWRITEBYTECODE=1 "
              f"RXELAB_PYTHON_SITEDIRS={SITE} python3 - {want_rc}", timeout=300)
    line = next(x for x in out.splitlines() if x.startswith("JSON="))
    return json.loads(line[5:])  # type: ignore[no-any-return]


@pytest.mark.lab
@pytest.mark.slow
def test_per_qp_telemetry_matches_rdma_tool_during_pingpong(daemon_lab: dict[str, object],
                                                           tmp_path: Path) -> None:
    guests = daemon_lab["guests"]
    assert isinstance(guests, list)
    ip0, gid = guests[0]["ip"], guests[0].get("gid_index", 1)
    # exec: the recorded pid is the program's, so that the kill below ends it
    lab("run", "g0", "--bg", "--bg-name", "qsrv",
        f"exec ibv_rc_pingpong -d rxe0 -g {gid} -s 64 -n 1000000 -p 18602")
    lab("run", "g1", "--bg", "--bg-name", "qcli",
        f"sleep 1; exec ibv_rc_pingpong -d rxe0 -g {gid} -s 64 -n 1000000 -p 18602 {ip0}")
    try:
        doc = _run_qp_guest(tmp_path, 1)
    finally:
        for g, name in (("g1", "qcli"), ("g0", "qsrv")):
            lab("run", g, f"kill $(cat /tmp/{name}.pid) 2>/dev/null; true")
    _check_qps_against_rdma_tool(doc, 1)


@pytest.mark.lab
@pytest.mark.slow
def test_per_qp_telemetry_matches_rdma_tool_during_write_bw_q4(daemon_lab: dict[str, object],
                                                              tmp_path: Path) -> None:
    guests = daemon_lab["guests"]
    assert isinstance(guests, list)
    ip0, gid = guests[0]["ip"], guests[0].get("gid_index", 1)
    lab("run", "g0", "--bg", "--bg-name", "bwsrv",
        f"exec ib_write_bw -d rxe0 -x {gid} -q 4 -s 4096 -D 90 -u 20 -p 18603")
    # the client retries until the server listens (a loaded TCG guest starts slowly);
    # -u 20: a 4 s local ACK timeout, so that TCG's stalls do not exhaust RC retries
    lab("run", "g1", "--bg", "--bg-name", "bwcli",
        f"for i in 1 2 3 4 5 6 7 8 9 10; do sleep 2; "
        f"ib_write_bw -d rxe0 -x {gid} -q 4 -s 4096 -D 90 -u 20 -p 18603 {ip0} && break; done")
    try:
        doc = _run_qp_guest(tmp_path, 4)
    finally:  # the client's retry loop ends with the lab (the last test of the module)
        logs = lab("run", "g0", "tail -4 /tmp/bwsrv.log") \
            + lab("run", "g1", "tail -4 /tmp/bwcli.log")
        lab("run", "g0", "kill $(cat /tmp/bwsrv.pid) 2>/dev/null; true")
    try:
        _check_qps_against_rdma_tool(doc, 4)
    except AssertionError as e:  # say whether perftest itself got going
        raise AssertionError(f"{e}\nperftest logs:\n{logs}") from None
