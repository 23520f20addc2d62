"""The end of a ping-pong under loss: the side that finishes last closes its QP while its
peer may still be retransmitting a request whose ACK was lost.

The scenario is the libibverbs ``ibv_rc_pingpong`` ending: the server answers the last
ping, waits for its pong's ACK and closes. If the ACK of that last ping was lost, the
client retransmits the ping after its ACK timeout; IBTA C9-105 says a duplicate SEND is
acknowledged again without being executed again, but a destroyed QP answers nothing and
the client ends in RETRY_EXC_ERR. With ACK coalescing (fewer ACKs, so a lost one weighs
more) this is what the seeded lossy pingpong of tests/test_soft_driver_interop.py hit.

The property, in virtual time over seeded lossy links (drop, duplicate, reorder): once
the server has closed its QP the way the soft backend closes it (``engine.linger`` for
the peer's retry budget, then ERR and destroy), every ping of the client still completes
with SUCCESS. The control case shows that the property fails without the linger.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netio import native
from netio.roce import Access, RecvWr, SendWr, WcStatus, WrOpcode
from netio.roce.engine import linger_ns
from netio.roce.link import LinkFaults
from netio.roce.qp import QpState
from netio.roce.sim import connected_pair
from netio.roce.verbs import WcOpcode

ITERS = 6
TIMEOUT = 10  # 4.096 us * 2**10 = 4.2 ms per ACK timeout
RETRY_CNT = 7


def _pingpong(seed: int, drop: float, duplicate: float, reorder: float, *,
              linger: bool, native_on: bool) -> list[WcStatus]:
    """Run the ping-pong; the statuses of the client's (a's) ping completions."""
    faults = LinkFaults(drop=drop, duplicate=duplicate, reorder=reorder)
    pair, a, b = connected_pair(native=native_on, ring_rx=native_on, seed=seed,
                                faults_ab=faults, faults_ba=faults, timeout=TIMEOUT,
                                retry_cnt=RETRY_CNT, rnr_retry=7)
    buf_a = a.pd.register(bytearray(64), Access.LOCAL_WRITE)
    buf_b = b.pd.register(bytearray(64), Access.LOCAL_WRITE)
    for i in range(ITERS):
        a.qp.post_recv(RecvWr(1000 + i, (buf_a.sge(),)))
        b.qp.post_recv(RecvWr(2000 + i, (buf_b.sge(),)))
    done_a: list[WcStatus] = []
    got_a = got_b = pongs_acked = 0

    def poll() -> None:
        nonlocal got_a, got_b, pongs_acked
        for c in a.cq.poll(100):
            if c.opcode is WcOpcode.RECV:
                got_a += 1
            else:
                done_a.append(c.status)
        for c in b.cq.poll(100):
            if c.opcode is WcOpcode.RECV:
                got_b += 1
            elif c.status is WcStatus.SUCCESS:
                pongs_acked += 1

    for i in range(ITERS):
        a.qp.post_send(SendWr(i, WrOpcode.SEND, (buf_a.sge(),)))
        pair.run(lambda i=i: (poll(), got_b > i)[1], max_time_ns=10_000_000_000)
        b.qp.post_send(SendWr(100 + i, WrOpcode.SEND, (buf_b.sge(),)))
        pair.run(lambda i=i: (poll(), got_a > i)[1], max_time_ns=10_000_000_000)
    # The server closes as soon as its last pong is acknowledged.
    pair.run(lambda: (poll(), pongs_acked >= ITERS)[1], max_time_ns=10_000_000_000)
    if linger:
        b.engine.linger(b.qp, pair.now_ns + linger_ns(b.qp.attrs))
    b.qp.modify(QpState.ERR)
    b.engine.destroy_qp(b.qp)
    pair.run(lambda: (poll(), len(done_a) >= ITERS)[1], max_time_ns=10_000_000_000)
    return done_a


modes = [False] + ([True] if native.AVAILABLE else [])


@pytest.mark.parametrize("native_on", modes)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), drop=st.sampled_from((0.02, 0.05, 0.1)),
       duplicate=st.sampled_from((0.0, 0.05)), reorder=st.sampled_from((0.0, 0.1)))
def test_every_ping_completes_after_the_server_closes(seed: int, drop: float,
                                                      duplicate: float, reorder: float,
                                                      native_on: bool) -> None:
    statuses = _pingpong(seed, drop, duplicate, reorder, linger=True, native_on=native_on)
    assert statuses == [WcStatus.SUCCESS] * ITERS


@pytest.mark.parametrize("native_on", modes)
def test_without_the_linger_a_lost_last_ack_fails_the_client(native_on: bool) -> None:
    """The control: some seeds lose the ACK of the last ping; with the QP simply destroyed
    the client exhausts its retries (so the property above can fail)."""
    failed = [seed for seed in range(200)
              if _pingpong(seed, 0.2, 0.0, 0.0, linger=False, native_on=native_on)
              != [WcStatus.SUCCESS] * ITERS]
    assert failed
    for seed in failed[:5]:
        assert _pingpong(seed, 0.2, 0.0, 0.0, linger=True,
                         native_on=native_on) == [WcStatus.SUCCESS] * ITERS
