"""Busy-polling in the verbs backend, between two lab guests: the event loop's spin before
it sleeps, and ``VerbsQp.exchange`` (post and poll in one call into C). Prints CHECK
lines; exit 0 when all passed.

    python3 verbs_spin_guest.py server|client HOST:PORT EXPECT_SPIN

``EXPECT_SPIN`` is ``spin`` or ``off`` (what ``NETIO_VERBS_SPIN_US`` in the environment
should give). The server says "ready" (a SEND) once its first receive is posted; the
client runs 20 SEND ping-pongs through the IO API, then 20 through
``exchange`` against the server's IO API (the wire is the same), then with
``rnr_retry`` 0 sends once more where the server has no receive posted: the RNR NAK
must come back from ``exchange`` as an error completion (IBTA 9.7.5.2.8: the requester
gives up after rnr_retry retries; 0 means none), at once, not after its timeout.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import netio
from netio.backends.base import RecvRequest, SendRequest
from netio.backends.verbs import VerbsBackend, VerbsQp

SIZE = 64
ROUNDS = 20
FAILED: list[str] = []


def check(name: str, ok: bool, detail: Any = "") -> None:
    print(f"CHECK {'ok' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def qp_of(ctx: netio.Context, ep: Any) -> VerbsQp:
    backend = ctx.backend
    assert isinstance(backend, VerbsBackend)
    qp = backend.qp_for(ep.address.qpn)
    assert qp is not None
    return qp


def answer(ping: bytes) -> bytes:
    return bytes(reversed(ping))


async def server(where: str) -> None:
    async with netio.open("verbs", timeout_s=60) as ctx:
        buf = bytearray(2 * SIZE)
        region = ctx.register(buf)
        listener = await ctx.listen(where)
        ep = await listener.accept(timeout_s=None)
        inbox, outbox = region[0:SIZE], region[SIZE:2 * SIZE]
        # the API rounds, then the exchange rounds: the same answers
        pending = ep.recv(inbox)
        await ep.send(outbox)  # "ready": the client sends with rnr_retry 0 (retried here)
        for i in range(2 * ROUNDS):
            await pending
            buf[SIZE:] = answer(bytes(buf[:SIZE]))
            if i + 1 < 2 * ROUNDS:
                pending = ep.recv(inbox)
            await ep.send(outbox)
        # no receive posted now: the client's next SEND meets an RNR NAK
        await asyncio.sleep(8)
        await ep.aclose()


async def client(where: str, expect: str) -> None:
    async with netio.open("verbs", timeout_s=60, rnr_retry=0) as ctx:
        buf = bytearray(2 * SIZE)
        region = ctx.register(buf)
        ep = None
        for _ in range(600):
            try:
                ep = await ctx.connect(where, timeout_s=60)
                break
            except netio.ConnectFailed:
                await asyncio.sleep(0.1)
        assert ep is not None
        await ep.recv(region[0:SIZE])  # the server's receive for the first ping is posted
        qp = qp_of(ctx, ep)
        check(f"spin mode is {expect}", qp.spin_mode == expect,
              f"{qp.spin_mode} ({qp.data_path})")
        inbox, outbox = region[0:SIZE], region[SIZE:2 * SIZE]
        wrong = []
        for i in range(ROUNDS):
            buf[SIZE:] = bytes((i + k) % 256 for k in range(SIZE))
            pong = ep.recv(inbox)
            await ep.send(outbox)
            await pong
            if bytes(buf[:SIZE]) != answer(bytes(buf[SIZE:])):
                wrong.append(i)
        hits = qp.counters()["spin_hits"]
        check("20 SEND ping-pongs through the IO API: every answer right", not wrong, wrong)
        check("the loop's busy-poll found completions" if expect == "spin"
              else "no busy-poll", hits > 0 if expect == "spin" else hits == 0, hits)

        inbox_seg, outbox_seg = inbox.segment(), outbox.segment()
        recv_id, send_id = 1 << 62, (1 << 62) + 1
        both = qp.prepare([SendRequest(send_id, netio.WrOpcode.SEND, (outbox_seg,))],
                          [RecvRequest(recv_id, (inbox_seg,))])
        wrong = []
        for i in range(ROUNDS):
            buf[SIZE:] = bytes((3 * i + k) % 256 for k in range(SIZE))
            got = qp.exchange(both, recv_id, 30.0)
            ids = sorted(c.wr_id for c in got)
            ok = recv_id in ids and all(c.status == netio.WcStatus.SUCCESS for c in got)
            if not ok or bytes(buf[:SIZE]) != answer(bytes(buf[SIZE:])):
                wrong.append((i, ids))
        got = qp.exchange(None, send_id, 30.0) if qp.counters()["sends_outstanding"] else []
        check("20 ping-pongs through exchange against the IO API: every answer right",
              not wrong, wrong)
        check("exchange completions do not reach the endpoint",
              ep.completed == 2 * ROUNDS + 1, ep.completed)

        t0 = time.monotonic()
        got = qp.exchange(qp.prepare([SendRequest(send_id + 1, netio.WrOpcode.SEND,
                                                  (outbox_seg,))]), send_id + 1, 30.0)
        took = time.monotonic() - t0
        statuses = [c.status for c in got]
        check("exchange: a SEND that meets an RNR NAK (rnr_retry 0) returns "
              "RNR_RETRY_EXC_ERR", netio.WcStatus.RNR_RETRY_EXC_ERR in statuses, statuses)
        check("... as soon as it completes, not after the 30 s spin", took < 15.0, took)
        error = ep.error_for(got[-1], netio.WorkRequest.send(outbox)) if got else None
        check("... and the endpoint names it as for an awaited SEND",
              isinstance(error, netio.RnrRetryExceeded), repr(error))


def main() -> int:
    role, where = sys.argv[1], sys.argv[2]
    if role == "server":  # bounded: a client that never comes does not keep the port
        port = where.rpartition(":")[2]
        with open(f"/tmp/verbs-spin-server-{port}.pid", "w") as f:  # for the test to end it
            f.write(str(os.getpid()))
        asyncio.run(asyncio.wait_for(server(where), 240))
    else:
        asyncio.run(client(where, sys.argv[3]))
    print(f"RESULT {len(FAILED)} failed", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
