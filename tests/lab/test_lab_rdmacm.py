"""``cm="rdma_cm"`` over the verbs backend against the kernel's rdma_cm in two lab guests.

netio to netio: first an address where no host answers ARP and a port where nothing
listens, then a WRITE and a SEND with immediate, then the client's disconnect reaching
the server's endpoint; a second connection, which the server leaves first. netio as the
client of the kernel tools' ``rping -s``, and as the listener for ``rping -c -V`` (rping
checks the bytes itself). The guest side is tests/lab/verbs_rdmacm_guest.py; expected
values come from rping's own output, ``ibv_devinfo`` and pyverbs' enum table.

Environment: ``RXE_LAB_NS``/``RXE_LAB_RUN``/``RXE_LAB_SUBNET`` pick the lab instance,
``NETIO_LAB_KEEP=1`` leaves it running.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from netio.backends.rdmacm import CmEvent
from tests.lab.test_lab_verbs_backend import GUEST_ENV, lab2  # noqa: F401  (fixture)

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SCRIPT = "tests/lab/verbs_rdmacm_guest.py"


def _wait_log(lab: Any, guest: Any, name: str) -> str:
    out = ""
    for _ in range(240):
        _rc, raw = lab.run(guest, f"cat /tmp/{name}.log", timeout=30)
        out = raw.decode(errors="replace")
        if "__EXIT=" in out:
            return out
        subprocess.run(["sleep", "0.5"], check=False)
    raise AssertionError(f"{name} did not finish:\n{out}")


def _checks(out: str) -> tuple[list[str], list[str]]:
    return re.findall(r"^CHECK ok (.*)$", out, re.M), re.findall(r"^CHECK FAIL (.*)$", out,
                                                                   re.M)


def test_rdma_cm_netio_to_netio_between_guests(lab2: Any) -> None:  # noqa: F811
    g0, g1 = lab2.guest("g0"), lab2.guest("g1")
    # pyverbs' event numbers and the port's MTU, from the guest
    probe = ("python3 -c 'import pyverbs.cm_enums as e; print(*[getattr(e, \"RDMA_CM_EVENT_\""
             " + n) for n in \"" + " ".join(ev.name for ev in CmEvent) + "\".split()])'; "
             "ibv_devinfo -d rxe0")
    rc, raw = lab2.run(g0, f"{GUEST_ENV} {probe}", timeout=60)
    out = raw.decode(errors="replace")
    assert rc == 0, out
    assert out.splitlines()[0].split() == [str(ev.value) for ev in CmEvent], out
    active = re.search(r"active_mtu:\s+(\d+)", out)
    assert active is not None

    lab2.run_bg(g0, f"{GUEST_ENV} python3 {SCRIPT} server {g0.ip} 7500; echo __EXIT=$?",
                "rdmacm-server")
    _rc, raw = lab2.run(g1, f"{GUEST_ENV} python3 {SCRIPT} client {g0.ip} 7500; "
                            f"echo __EXIT=$?", timeout=300)
    client = raw.decode(errors="replace")
    server = _wait_log(lab2, g0, "rdmacm-server")
    assert "__EXIT=0" in client and "__EXIT=0" in server, f"{client}\n{server}"
    (c_ok, c_fail), (s_ok, s_fail) = _checks(client), _checks(server)
    assert not c_fail and not s_fail and (len(c_ok), len(s_ok)) == (7, 4), (client, server)
    # refused: the REJ of g0's CM for a port nobody listens on, naming the peer
    refused = re.search(r"^REFUSED (.*)$", client, re.M)
    assert refused is not None and f"to {g0.ip}:7501: rejected" in refused.group(1)
    absent = re.search(r"^ABSENT (.*)$", client, re.M)
    assert absent is not None and ("resolve address" in absent.group(1) or (
        "address resolution failed" in absent.group(1))), client
    assert f"MTU {active.group(1)}" in client
    # each side names the other's RoCEv2 GID (from the CM's route), the lab's addresses
    assert f"remote GID ::ffff:{g0.ip} " in client and f"remote GID ::ffff:{g1.ip} " in server
    assert "COUNTERS 1" in server
    after = re.search(r"^AFTER (.*)$", client, re.M)  # the server left the 2nd connection
    assert after is not None and "RETRY_EXC_ERR" in after.group(1), client


def test_rdma_cm_client_of_kernel_rping_server(lab2: Any) -> None:  # noqa: F811
    g0, g1 = lab2.guest("g0"), lab2.guest("g1")
    lab2.run_bg(g0, f"rping -s -v -a {g0.ip} -p 7510 -S 64 -C 2; echo __EXIT=$?",
                "rping-server")
    _rc, raw = lab2.run(g1, f"{GUEST_ENV} python3 {SCRIPT} rping-client {g0.ip} 7510 2; "
                            f"echo __EXIT=$?", timeout=300)
    netio_out = raw.decode(errors="replace")
    rping = _wait_log(lab2, g0, "rping-server")
    assert "__EXIT=0" in netio_out and "__EXIT=0" in rping, f"{netio_out}\n{rping}"
    ok, fail = _checks(netio_out)
    assert not fail and len(ok) == 4, netio_out
    sent = re.findall(r"^PING (.*)$", netio_out, re.M)
    read = re.findall(r"^server ping data: (.*)$", rping, re.M)
    # rping -s READ the text netio advertised, and wrote it back (checked in the guest)
    assert len(sent) == 2 and read == sent, (sent, read)


def test_rdma_cm_listener_for_kernel_rping_client(lab2: Any) -> None:  # noqa: F811
    g0, g1 = lab2.guest("g0"), lab2.guest("g1")
    lab2.run_bg(g0, f"{GUEST_ENV} python3 {SCRIPT} rping-server {g0.ip} 7520 2; "
                    f"echo __EXIT=$?", "rdmacm-rping-server")
    for _ in range(120):  # the listener is up once it says READY
        _rc, raw = lab2.run(g0, "cat /tmp/rdmacm-rping-server.log", timeout=30)
        if b"READY" in raw or b"__EXIT=" in raw:
            break
        subprocess.run(["sleep", "0.5"], check=False)
    _rc, raw = lab2.run(g1, f"rping -c -v -V -a {g0.ip} -p 7520 -S 64 -C 2; echo __EXIT=$?",
                        timeout=120)
    rping = raw.decode(errors="replace")
    netio_out = _wait_log(lab2, g0, "rdmacm-rping-server")
    # -V: rping compares what netio wrote back with what it sent ("data mismatch!" else)
    assert "__EXIT=0" in rping and "mismatch" not in rping, f"{rping}\n{netio_out}"
    assert "__EXIT=0" in netio_out, netio_out
    ok, fail = _checks(netio_out)
    assert not fail and len(ok) == 3, netio_out
    echoed = re.findall(r"^ping data: (.*)$", rping, re.M)
    read = re.findall(r"^PING (.*)$", netio_out, re.M)
    assert len(echoed) == 2 and read == echoed, (echoed, read)
    assert echoed[0].startswith("rdma-ping-0: ABC") and echoed[1].startswith(
        "rdma-ping-1: BCD")
