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
col = c.collect()
hw = "/sys/class/infiniband/rxe0/ports/1/hw_counters"
kernel = {n: int(open(os.path.join(hw, n)).read()) for n in sorted(os.listdir(hw))}
dump = lambda cl: [[s.spec.name, list(s.labels), s.value] for s in cl.samples]
print("JSON=" + json.dumps({"first": dump(first), "second": dump(col), "kernel": kernel,
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
    lab("run", "g0", "--bg", "--bg-name", "srv",
        f"ibv_rc_pingpong -d rxe0 -g {gid} -s 1024 -n 20000")
    lab("run", "g1", "--bg", "--bg-name", "cli",
        f"sleep 1; ibv_rc_pingpong -d rxe0 -g {gid} -s 1024 -n 20000 {ip0}")
    code = tmp_path / "guest.py"
    code.write_text(GUEST_CODE)
    out = lab("run", "g0", "-t", "180", "--stdin", str(code),
              f"sleep 3; cd {REPO} && PYTHONDONTWRITEBYTECODE=1 "
              f"RXELAB_PYTHON_SITEDIRS={SITE} python3 -", timeout=240)
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
        # read microseconds before the kernel values: never more, and at most a few
        # packets of pingpong behind
        assert got <= raw, (name, got, raw)
        assert raw - got <= max(20, raw * 0.01), (name, got, raw)
        checked += 1
    assert checked == len(kernel) - 1 >= 15
    rx = (("netio_rdma_packets_total"), ("rxe0", "1", "rx"))
    assert second[rx] > first[rx], "no traffic between the two collections"
    assert second[("netio_rdma_port_state", ("rxe0", "1"))] == 4
