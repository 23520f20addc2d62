"""Loss recovery of the RC requester: the local ACK timer, RNR waits, retry counters,
go-back-N (IBTA vol 1 §9.7.5.1 and §9.7.6; Linux rxe ``rxe_comp.c`` retry handling).

* The ACK timer (4.096 µs * 2**timeout) restarts on every transmission and on progress;
  it is off while nothing is outstanding, and for ``timeout == 0``.
* A timeout, a PSN sequence NAK or an implied NAK (a response past an unanswered READ or
  atomic) restarts transmission at the oldest unacknowledged PSN (go-back-N). Each such
  retry without progress in between uses one of ``retry_cnt`` retries; when none is left
  the oldest WR completes with RETRY_EXC_ERR. ``retry_cnt`` is always finite (IBTA), so
  an RC requester never waits for ever.
* An RNR NAK pauses the requester for the advertised RNR timer (IBTA table 45), then
  retransmits from the NAKed PSN; ``rnr_retry == 7`` retries without limit, other values
  give RNR_RETRY_EXC_ERR when exhausted.
* Repeated non-timeout retries from the same PSN without progress are ignored (rxe's
  ``started_retry``): duplicated NAKs or a burst of out-of-order read responses cause one
  go-back-N, not many.
"""

from __future__ import annotations

from netio.roce.ports import RequesterPort
from netio.roce.verbs import WcStatus
from netio.wire.ext import rnr_timer_ns

INFINITE_RNR_RETRY = 7


class Recovery:
    """Timers and retry accounting of one requester (rxe ``qp->comp`` retry fields)."""

    def __init__(self, requester: RequesterPort) -> None:
        self.req = requester
        self.reset()

    def reset(self) -> None:
        attrs = self.req.qp.attrs
        self.retry_left = attrs.retry_cnt
        self.rnr_left = attrs.rnr_retry
        self.ack_deadline_ns: int | None = None
        self.rnr_resume_ns: int | None = None
        self.rnr_psn = 0
        self.guard_psn: int | None = None
        self.retries = 0  # statistics: go-back-N restarts
        self.timeouts = 0
        self.rnr_naks = 0

    def disarm(self) -> None:
        self.ack_deadline_ns = None
        self.rnr_resume_ns = None

    @property
    def paused(self) -> bool:
        """True while waiting out an RNR NAK."""
        return self.rnr_resume_ns is not None

    def deadline_ns(self) -> int | None:
        """The earliest pending timer, or None."""
        a, r = self.ack_deadline_ns, self.rnr_resume_ns
        if a is None:
            return r
        if r is None:
            return a
        return min(a, r)

    def _timeout_ns(self) -> int | None:
        timeout = self.req.qp.attrs.timeout
        return None if timeout == 0 else 4096 << timeout

    def on_transmit(self, now_ns: int) -> None:
        timeout = self._timeout_ns()
        if timeout is not None:
            self.ack_deadline_ns = now_ns + timeout

    def on_progress(self, now_ns: int) -> None:
        """An acknowledgement or response moved comp_psn forward."""
        attrs = self.req.qp.attrs
        self.retry_left = attrs.retry_cnt
        self.rnr_left = attrs.rnr_retry
        self.guard_psn = None
        timeout = self._timeout_ns()
        if self.req.outstanding and timeout is not None:
            self.ack_deadline_ns = now_ns + timeout
        else:
            self.ack_deadline_ns = None

    def retry(self, psn: int, *, timeout: bool = False) -> None:
        """Go back to ``psn`` (the oldest unacknowledged PSN), counting one retry."""
        if self.paused:
            return  # the RNR wait ends with a retransmission anyway
        if not timeout and self.guard_psn == psn:
            return
        if self.retry_left <= 0:
            self.req.fail(WcStatus.RETRY_EXC_ERR)
            return
        self.retry_left -= 1
        self.retries += 1
        self.guard_psn = psn
        self.req.seek(psn)
        self.req.qp.engine.qp_changed(self.req.qp)

    def on_rnr_nak(self, psn: int, timer_code: int, now_ns: int) -> None:
        """Receiver not ready at ``psn``: wait, then retransmit from there (§9.7.5.2.8)."""
        if self.paused:
            return
        self.rnr_naks += 1
        if self.rnr_left <= 0:
            self.req.fail(WcStatus.RNR_RETRY_EXC_ERR)
            return
        if self.rnr_left != INFINITE_RNR_RETRY:
            self.rnr_left -= 1
        self.rnr_psn = psn
        self.rnr_resume_ns = now_ns + rnr_timer_ns(timer_code)
        self.ack_deadline_ns = None
        self.req.seek(psn)

    def on_timer(self, now_ns: int) -> None:
        if self.rnr_resume_ns is not None and now_ns >= self.rnr_resume_ns:
            self.rnr_resume_ns = None
            self.guard_psn = self.rnr_psn
            self.req.seek(self.rnr_psn)
            self.req.qp.engine.qp_changed(self.req.qp)
        if self.ack_deadline_ns is not None and now_ns >= self.ack_deadline_ns:
            self.ack_deadline_ns = None
            if self.req.outstanding:
                self.timeouts += 1
                self.retry(self.req.comp_psn, timeout=True)
