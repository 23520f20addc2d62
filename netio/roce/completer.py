"""The RC completer: acknowledgements and responses in, completions out.

IBTA vol 1 §9.7.5.1 (requester side of acknowledgements), modelled on rxe ``rxe_comp.c``:

* an ACK for PSN p completes, in order, every SEND/WRITE whose last PSN is <= p (ACKs are
  coalesced: one ACK may cover many messages);
* an ACK or response past an unanswered READ/atomic is an implied NAK: the response was
  lost, so the requester goes back to it (§9.7.5.1.5);
* a READ response or atomic ACK implicitly acknowledges the SEND/WRITEs before it;
* READ response packets must arrive in PSN order; a gap is an implied NAK;
* a PSN sequence NAK means go-back-N; an RNR NAK a pause; other NAKs complete the WR in
  error (REM_INV_REQ_ERR, REM_ACCESS_ERR, REM_OP_ERR, REM_INV_RD_REQ_ERR) and move the QP
  to ERR, flushing the rest;
* responses outside [oldest unacknowledged PSN, highest PSN sent] are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from netio.roce.memory import scatter
from netio.roce.psn import psn_add, psn_diff, psn_in_range
from netio.roce.verbs import WcStatus, WrOpcode
from netio.wire.bth import Bth, Operation, Position
from netio.wire.ext import AckType, Aeth, NakCode

if TYPE_CHECKING:
    from netio.roce.requester import Requester, SendWqe

NAK_STATUS: dict[int, WcStatus] = {
    NakCode.INVALID_REQUEST: WcStatus.REM_INV_REQ_ERR,
    NakCode.REMOTE_ACCESS_ERROR: WcStatus.REM_ACCESS_ERR,
    NakCode.REMOTE_OPERATIONAL_ERROR: WcStatus.REM_OP_ERR,
    NakCode.INVALID_RD_REQUEST: WcStatus.REM_INV_RD_REQ_ERR,
}


class Completer:
    """Processes responses for one RC requester."""

    def __init__(self, requester: Requester) -> None:
        self.req = requester

    def _in_flight(self, psn: int) -> bool:
        """True if ``psn`` lies in [comp_psn - 1, sent_hi - 1] (not stale, not a ghost)."""
        req = self.req
        return psn_diff(psn, req.comp_psn) >= -1 and psn_diff(psn, req.sent_hi) < 0

    def on_response(self, bth: Bth, aeth: Aeth | None, payload: bytes | memoryview,
                    atomic_orig: int | None, now_ns: int) -> bool:
        """Handle one response packet; return False if it was dropped."""
        psn = bth.psn
        if not self._in_flight(psn):
            return False
        operation = bth.info.operation
        if operation is Operation.ACKNOWLEDGE:
            if aeth is None:
                return False
            return self._on_ack(psn, aeth, now_ns)
        if operation is Operation.RDMA_READ_RESPONSE:
            return self._on_read_response(bth, payload, now_ns)
        if operation is Operation.ATOMIC_ACKNOWLEDGE and atomic_orig is not None:
            return self._on_atomic_ack(psn, atomic_orig, now_ns)
        return False

    def on_plain_ack(self, psn: int, now_ns: int) -> bool:
        """An ACK (AETH syndrome ACK) the native path parsed: :meth:`on_response` for it."""
        if not self._in_flight(psn):
            return False
        self._ack_through(psn, now_ns)
        return True

    # -- acknowledgements --------------------------------------------------------------------

    def _ack_through(self, psn: int, now_ns: int) -> None:
        """Everything up to and including ``psn`` was received by the responder."""
        req = self.req
        progressed = False
        while req.wqes:
            wqe = req.wqes[0]
            if wqe.first_psn < 0:  # not started (the property, inlined in this loop)
                break
            if wqe.rd_atomic:
                if psn_diff(psn, wqe.first_psn) >= 0:
                    # Implied NAK (§9.7.5.1.5): later PSNs were acknowledged, so the
                    # response to this READ/atomic was lost.
                    if progressed:
                        req.recovery.on_progress(now_ns)
                        progressed = False
                    req.recovery.retry(req.comp_psn)
                break
            if psn_diff(psn, wqe.last_psn) >= 0 and wqe.sent_all:
                req.comp_psn = psn_add(wqe.last_psn, 1)
                req.complete_head(WcStatus.SUCCESS)
                progressed = True
                continue
            if psn_diff(psn, req.comp_psn) >= 0:
                req.comp_psn = psn_add(psn, 1)
                progressed = True
            break
        if progressed:
            self._progress(now_ns)

    def _progress(self, now_ns: int) -> None:
        req = self.req
        req.recovery.on_progress(now_ns)
        if psn_diff(req.comp_psn, req.psn) > 0:
            req.seek(req.comp_psn)  # retransmission would resend acknowledged PSNs
        req.qp.engine.qp_changed(req.qp)

    def _on_ack(self, psn: int, aeth: Aeth, now_ns: int) -> bool:
        req = self.req
        ack_type = aeth.ack_type
        if ack_type is AckType.ACK:
            self._ack_through(psn, now_ns)
            return True
        if psn_diff(psn, req.comp_psn) < 0:
            return False  # a NAK for something already acknowledged: stale
        if ack_type is AckType.RNR_NAK:
            self._ack_through(psn_add(psn, -1), now_ns)
            if req.qp.state == 6:  # ERR
                return True
            code = aeth.rnr_timer_code
            req.recovery.on_rnr_nak(psn, 0 if code is None else code, now_ns)
            return True
        if ack_type is AckType.NAK:
            self._ack_through(psn_add(psn, -1), now_ns)
            if req.qp.state == 6:
                return True
            code = aeth.nak_code
            if code == NakCode.PSN_SEQUENCE_ERROR:
                # Go back to the oldest unacknowledged PSN: that is ``psn`` unless an
                # unanswered READ/atomic before it holds comp_psn back (implied NAK).
                req.recovery.retry(req.comp_psn)
                return True
            if req.wqes and req.wqes[0].started and psn_in_range(
                psn, req.wqes[0].first_psn, req.wqes[0].last_psn
            ):
                status = NAK_STATUS.get(int(code) if code is not None else -1,
                                        WcStatus.REM_OP_ERR)
                req.fail(status)
                return True
            return False
        return False

    # -- READ responses and atomic acknowledgements -------------------------------------------

    def _implicit_ack_before(self, psn: int, now_ns: int) -> None:
        """A response at ``psn`` acknowledges every SEND/WRITE that ended before it."""
        req = self.req
        progressed = False
        while req.wqes:
            wqe = req.wqes[0]
            if (not wqe.started or wqe.rd_atomic or not wqe.sent_all
                    or psn_diff(psn, wqe.last_psn) <= 0):
                break
            req.comp_psn = psn_add(wqe.last_psn, 1)
            req.complete_head(WcStatus.SUCCESS)
            progressed = True
        if progressed:
            self._progress(now_ns)

    def _head_for_response(self, psn: int) -> SendWqe | None:
        """The oldest WQE, or None if the response cannot be for it.

        A response beyond an unanswered READ/atomic at the head means that READ/atomic's
        response was lost: an implied NAK (§9.7.5.1.5).
        """
        req = self.req
        if not req.wqes:
            return None
        wqe = req.wqes[0]
        if wqe.started and wqe.rd_atomic and psn_diff(psn, wqe.last_psn) > 0:
            req.recovery.retry(req.comp_psn)
            return None
        return wqe

    def _on_read_response(self, bth: Bth, payload: bytes | memoryview, now_ns: int) -> bool:
        req = self.req
        psn = bth.psn
        self._implicit_ack_before(psn, now_ns)
        wqe = self._head_for_response(psn)
        if wqe is None:
            return False
        if (wqe.wr.opcode is not WrOpcode.RDMA_READ or not wqe.started
                or not psn_in_range(psn, wqe.first_psn, wqe.last_psn)):
            return False
        gap = psn_diff(psn, req.comp_psn)
        if gap != 0:
            if gap > 0:
                req.recovery.retry(req.comp_psn)  # implied NAK: a response went missing
            return False
        mtu = req.qp.attrs.path_mtu_bytes
        offset = psn_diff(psn, wqe.first_psn) * mtu
        expected_bytes = min(mtu, wqe.length - offset)
        is_last = psn == wqe.last_psn
        position = bth.info.position
        if is_last != (position in (Position.LAST, Position.ONLY)):
            return False
        if len(payload) != expected_bytes:
            return False
        if expected_bytes and not scatter(wqe.wr.sg_list, offset, payload):
            return False
        req.comp_psn = psn_add(psn, 1)
        if is_last:
            req.complete_head(WcStatus.SUCCESS)
        self._progress(now_ns)
        return True

    def _on_atomic_ack(self, psn: int, original: int, now_ns: int) -> bool:
        req = self.req
        self._implicit_ack_before(psn, now_ns)
        wqe = self._head_for_response(psn)
        if wqe is None:
            return False
        if not wqe.started or wqe.wr.opcode not in (
            WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD
        ) or wqe.first_psn != psn:
            return False
        gap = psn_diff(psn, req.comp_psn)
        if gap != 0:
            if gap > 0:
                req.recovery.retry(req.comp_psn)
            return False
        # The original value lands in host byte order (little-endian), as rxe stores a u64.
        scatter(wqe.wr.sg_list, 0, original.to_bytes(8, "little"))
        req.comp_psn = psn_add(psn, 1)
        req.complete_head(WcStatus.SUCCESS)
        self._progress(now_ns)
        return True
