"""The receive side of a QP (IBTA vol 1 §9.7.4-9.7.5; Linux rxe ``rxe_resp.c``).

RC: PSN check (one PSN-sequence NAK per gap, C9-110), duplicates (SEND/WRITE re-ACKed
without re-execution, READ re-executed from its saved resource, atomics replayed from
the saved original value, C9-105..C9-112), opcode sequence and length checks, RNR NAK
when no receive is posted, remote access checks (rkey, bounds, access flags, atomic
alignment) before any byte is written, MSN, and ACKs only where the requester asked
(AckReq), i.e. coalesced as rxe does. Class C errors (invalid request, remote access)
NAK and move the QP to ERR.

UC: no ACK/NAK; a PSN gap or a missing receive drops the whole message (the next
FIRST/ONLY resynchronises); packets with an older PSN are duplicates and are dropped.
UD: Q_Key check, one packet per message, a 40-byte GRH area in front of the data as
verbs delivers it.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

from netio.api.types import Access
from netio.roce.memory import MemoryRegion, RemoteAccessError, scatter
from netio.roce.ports import QpPort
from netio.roce.psn import psn_add, psn_diff, psn_in_range
from netio.roce.verbs import (
    ATOMIC_OPERAND_BYTES,
    MAX_MESSAGE_BYTES,
    Completion,
    IpAddress,
    RecvWr,
    WcFlags,
    WcOpcode,
    WcStatus,
)
from netio.wire.bth import Bth, Opcode, Operation, Position, Transport
from netio.wire.ext import Aeth, AtomicAckEth, NakCode
from netio.wire.ip import Ecn, IpProto, Ipv4, Ipv6
from netio.wire.packet import RoceHeaders

GRH_BYTES = 40  # verbs puts a GRH (or, for RoCEv2 over IPv4, 20 bytes + the IPv4 header) first
_U64 = (1 << 64) - 1
_ACCESS_ERROR_NAK = {
    RemoteAccessError.INVALID_RKEY: NakCode.REMOTE_ACCESS_ERROR,
    RemoteAccessError.ACCESS_DENIED: NakCode.REMOTE_ACCESS_ERROR,
    RemoteAccessError.OUT_OF_BOUNDS: NakCode.REMOTE_ACCESS_ERROR,
    RemoteAccessError.MISALIGNED_ATOMIC: NakCode.INVALID_REQUEST,
}
_OPERATION_ACCESS = {
    Operation.RDMA_WRITE: Access.REMOTE_WRITE,
    Operation.RDMA_READ_REQUEST: Access.REMOTE_READ,
    Operation.COMPARE_SWAP: Access.REMOTE_ATOMIC,
    Operation.FETCH_ADD: Access.REMOTE_ATOMIC,
}


@dataclass(slots=True)
class _Incoming:
    """A multi-packet SEND or WRITE in progress."""

    operation: Operation
    recv: RecvWr | None
    received_bytes: int = 0
    mr: MemoryRegion | None = None
    mr_offset: int = 0
    dma_length: int = 0


@dataclass(frozen=True, slots=True)
class _ReadResource:
    """A READ executed at [first_psn, last_psn] (kept for duplicate re-execution)."""

    first_psn: int
    last_psn: int
    rkey: int
    va: int
    length: int


@dataclass(frozen=True, slots=True)
class _AtomicResource:
    """An executed atomic and its original value (the replay cache, C9-112)."""

    psn: int
    original: int


class Responder:
    """Receive-side state of one QP (rxe ``qp->resp``)."""

    def __init__(self, qp: QpPort) -> None:
        self.qp = qp
        self.resources: deque[_ReadResource | _AtomicResource] = deque()
        self.reset(0)

    def reset(self, rq_psn: int = 0) -> None:
        self.expected_psn = rq_psn
        self.msn = 0
        self.nak_sent = False
        self.ctx: _Incoming | None = None
        self.uc_dropping = False
        self.resources.clear()
        self.duplicates = 0  # statistics
        self.out_of_sequence = 0
        self.rnr_naks_sent = 0
        self.invalid_requests = 0
        self.last_error = ""  # why the last request was refused
        self.held_ack: tuple[int, int] | None = None  # (PSN, MSN) while coalescing
        self.acks_coalesced = 0
        # (rkey, region) of the last WRITE that passed the access checks: where the native
        # path may place the next ONLY WRITEs of the same rkey (within its bounds).
        self.write_cache: tuple[int, MemoryRegion] | None = None

    def flush(self) -> None:
        ctx, self.ctx = self.ctx, None
        if ctx is not None and ctx.recv is not None:
            self.qp.recv_cq.push(Completion(ctx.recv.wr_id, WcStatus.WR_FLUSH_ERR,
                                            WcOpcode.RECV, self.qp.qp_num))

    # -- entry point ---------------------------------------------------------------------

    def on_request(self, hdrs: RoceHeaders, payload: bytes, src_ip: IpAddress) -> None:
        transport = hdrs.bth.info.transport
        if transport is Transport.RC:
            self._rc(hdrs, payload)
        elif transport is Transport.UC:
            self._uc(hdrs, payload)
        else:
            self._ud(hdrs, payload, src_ip)

    # -- helpers -------------------------------------------------------------------------

    def _reply(self, opcode: Opcode, psn: int, aeth: Aeth, *, payload: bytes = b"",
               atomic_ack: AtomicAckEth | None = None) -> None:
        self.release_ack()  # a held ACK goes first: replies keep their order
        qp = self.qp
        bth = Bth(opcode, False, False, -len(payload) % 4, 0, qp.attrs.pkey, False, False,
                  qp.attrs.dest_qp_num, False, psn)
        qp.engine.transmit(qp, qp.attrs.remote_ip, bth, payload, aeth=aeth,
                           atomic_ack_eth=atomic_ack)

    def acknowledge(self, psn: int) -> None:
        """ACK ``psn`` (the native receive path placed a packet that asked for it)."""
        self._ack(psn)

    def _ack(self, psn: int) -> None:
        if self.qp.engine.coalescing_acks:
            # IBTA §9.7.5.1.1: one ACK acknowledges every request up to its PSN, so the
            # engine may hold it while later packets of the same batch arrive and send only
            # the newest (with the MSN it had then).
            if self.held_ack is None:
                self.qp.engine.hold_ack(self.qp)
            else:
                self.acks_coalesced += 1
            self.held_ack = (psn, self.msn)
            return
        self.release_ack()
        self.qp.engine.transmit_ack(self.qp, psn, self.msn)

    def release_ack(self) -> None:
        """Send the ACK held while ACKs were being coalesced, if any."""
        held, self.held_ack = self.held_ack, None
        if held is not None:
            psn, msn = held
            self.qp.engine.transmit_ack(self.qp, psn, msn)

    def _nak(self, psn: int, code: NakCode) -> None:
        self._reply(Opcode.RC_ACKNOWLEDGE, psn, Aeth.nak(self.msn, code))

    def _reject(self, psn: int, *, rc: bool, reason: str) -> None:
        """A malformed request: RC NAKs it as an invalid request (class C); UC, which
        has no NAKs, drops the rest of the message (RC: IBTA §9.9.3.1.3). ``reason`` is
        kept in ``last_error`` (counted in ``invalid_requests``) for the diagnosis."""
        self.invalid_requests += 1
        self.last_error = reason
        if rc:
            self._class_c_error(psn, NakCode.INVALID_REQUEST, WcStatus.REM_INV_REQ_ERR)
        else:
            self._uc_drop()

    def _class_c_error(self, psn: int, code: NakCode, recv_status: WcStatus) -> None:
        """NAK, complete the receive in use with an error, and enter ERR (IBTA §9.9.3.1.3)."""
        self._nak(psn, code)
        ctx, self.ctx = self.ctx, None
        if ctx is not None and ctx.recv is not None:
            self._complete_recv(ctx.recv, recv_status, ctx.received_bytes, None,
                                WcOpcode.RECV)
        self.qp.enter_error()

    def _complete_recv(self, recv: RecvWr, status: WcStatus, byte_len: int, imm: int | None,
                       opcode: WcOpcode, src_qp: int = 0,
                       flags: WcFlags = WcFlags.NONE) -> None:
        if imm is not None:
            flags |= WcFlags.WITH_IMM
        self.qp.recv_cq.push(Completion(recv.wr_id, status, opcode, self.qp.qp_num, byte_len,
                                        imm, src_qp, flags))

    def _abandon(self) -> None:
        """Drop a partially received message; its receive goes back to the queue (UC)."""
        ctx, self.ctx = self.ctx, None
        if ctx is not None and ctx.recv is not None:
            self.qp.return_recv(ctx.recv)

    @staticmethod
    def _length_error(position: Position, size: int, mtu: int) -> str:
        """Why a payload breaks the length rules of IBTA §9.7.4.1.6 (rxe ``check_length``),
        or "" when it keeps them. A first or middle packet carries exactly the sender's
        path MTU, so its size tells the sender's MTU."""
        if position is Position.ONLY or position is Position.LAST:
            if position is Position.LAST and size == 0:
                return "empty last packet"
            if size > mtu:
                article = "an" if position is Position.ONLY else "a"
                return (f"payload of {size} bytes in {article} {position.name.lower()} packet, "
                        f"path MTU is {mtu}: the peers' MTUs differ (local {mtu}, remote at "
                        f"least {size})")
            return ""
        if size == mtu:
            return ""
        return (f"payload of {size} bytes in a {position.name.lower()} packet, path MTU is "
                f"{mtu}: the peers' MTUs differ (local {mtu}, remote {size})")

    # -- RC ------------------------------------------------------------------------------

    def _rc(self, hdrs: RoceHeaders, payload: bytes) -> None:
        bth = hdrs.bth
        psn = bth.psn
        diff = psn_diff(psn, self.expected_psn)
        if diff > 0:
            self.out_of_sequence += 1
            if not self.nak_sent:
                self.nak_sent = True
                self._nak(self.expected_psn, NakCode.PSN_SEQUENCE_ERROR)
            return
        if diff < 0:
            self.duplicates += 1
            self._rc_duplicate(hdrs)
            return
        self.nak_sent = False
        info = bth.info
        operation = info.operation
        position = info.position
        ctx = self.ctx
        if ctx is not None:
            if operation is not ctx.operation or position not in (Position.MIDDLE, Position.LAST):
                self._reject(psn, rc=True, reason="a packet does not continue the message in "
                             "progress (opcode sequence)")
                return
        elif position in (Position.MIDDLE, Position.LAST):
            self._reject(psn, rc=True,
                         reason=f"a {position.name.lower()} packet with no message in progress")
            return
        needed = _OPERATION_ACCESS.get(operation)
        if needed is not None and not self.qp.attrs.access & needed:
            self._reject(psn, rc=True, reason=f"{operation.name} is not allowed by the QP's "
                         f"access flags ({self.qp.attrs.access!r})")
            return
        if operation is Operation.SEND:
            if info.has_invalidate:
                self._reject(psn, rc=True, reason="SEND with invalidate is not supported")
                return
            self._send(hdrs, payload, position, rc=True)
        elif operation is Operation.RDMA_WRITE:
            self._write(hdrs, payload, position, rc=True)
        elif operation is Operation.RDMA_READ_REQUEST:
            self._read(hdrs)
        elif operation in (Operation.COMPARE_SWAP, Operation.FETCH_ADD):
            self._atomic(hdrs)
        else:
            self._reject(psn, rc=True, reason=f"unsupported operation {operation.name}")

    def _send(self, hdrs: RoceHeaders, payload: bytes, position: Position, *, rc: bool) -> None:
        bth = hdrs.bth
        psn = bth.psn
        mtu = self.qp.attrs.path_mtu_bytes
        if self._length_error(position, len(payload), mtu):
            self._reject(psn, rc=rc, reason=self._length_error(position, len(payload), mtu))
            return
        ctx = self.ctx
        if ctx is None:
            recv = self.qp.take_recv()
            if recv is None:
                if rc:
                    self.rnr_naks_sent += 1
                    self._reply(Opcode.RC_ACKNOWLEDGE, psn,
                                Aeth.rnr_nak(self.msn, self.qp.attrs.min_rnr_timer))
                else:
                    self._uc_drop()
                return
            ctx = _Incoming(Operation.SEND, recv)
        recv = ctx.recv
        if recv is None or not scatter(recv.sg_list, ctx.received_bytes, payload):
            self.ctx = ctx
            if rc:
                self._class_c_error(psn, NakCode.INVALID_REQUEST, WcStatus.LOC_LEN_ERR)
            else:
                self.ctx = None
                if recv is not None:
                    self._complete_recv(recv, WcStatus.LOC_LEN_ERR, 0, None, WcOpcode.RECV)
                self._uc_drop()
            return
        ctx.received_bytes += len(payload)
        self.expected_psn = psn_add(psn, 1)
        if position in (Position.LAST, Position.ONLY):
            self.ctx = None
            self.msn = psn_add(self.msn, 1)
            imm = hdrs.imm_dt.immediate_data if hdrs.imm_dt is not None else None
            self._complete_recv(recv, WcStatus.SUCCESS, ctx.received_bytes, imm, WcOpcode.RECV)
        else:
            self.ctx = ctx
        if rc and bth.ack_req:
            self._ack(psn)

    def _write(self, hdrs: RoceHeaders, payload: bytes, position: Position, *, rc: bool) -> None:
        bth = hdrs.bth
        psn = bth.psn
        qp = self.qp
        if self._length_error(position, len(payload), qp.attrs.path_mtu_bytes):
            self._reject(psn, rc=rc,
                         reason=self._length_error(position, len(payload), qp.attrs.path_mtu_bytes))
            return
        ctx = self.ctx
        if ctx is None:
            reth = hdrs.reth
            if reth is None:
                return
            if reth.dma_length > MAX_MESSAGE_BYTES:
                self._reject(psn, rc=rc,
                             reason=f"RDMA WRITE of {reth.dma_length} bytes exceeds 2**31")
                return
            mr: MemoryRegion | None = None
            offset = 0
            if reth.dma_length:
                verdict, mr, offset = qp.pd.check_remote(reth.rkey, reth.virtual_address,
                                                         reth.dma_length, Access.REMOTE_WRITE)
                if verdict is not RemoteAccessError.OK:
                    if rc:
                        self._class_c_error(psn, _ACCESS_ERROR_NAK[verdict],
                                            WcStatus.REM_ACCESS_ERR)
                    else:
                        self._uc_drop()
                    return
                if mr is not None:
                    self.write_cache = (reth.rkey, mr)
            ctx = _Incoming(Operation.RDMA_WRITE, None, 0, mr, offset, reth.dma_length)
        end = ctx.received_bytes + len(payload)
        ends = position in (Position.LAST, Position.ONLY)
        if end > ctx.dma_length or (ends and end != ctx.dma_length):
            if rc:
                self.ctx = ctx
                self._reject(psn, rc=True, reason=f"RDMA WRITE payload ends at byte {end}, "
                             f"the RETH says {ctx.dma_length}")
            else:
                self._uc_drop()
            return
        recv = None
        if ends and hdrs.imm_dt is not None:
            recv = qp.take_recv()
            if recv is None:
                if rc:
                    # Not consumed: the requester resends this PSN after the RNR timer.
                    self.rnr_naks_sent += 1
                    if position is Position.LAST:
                        self.ctx = ctx
                    self._reply(Opcode.RC_ACKNOWLEDGE, psn,
                                Aeth.rnr_nak(self.msn, qp.attrs.min_rnr_timer))
                else:
                    self._uc_drop()
                return
        if payload and ctx.mr is not None:
            start = ctx.mr_offset + ctx.received_bytes
            ctx.mr.buffer[start : start + len(payload)] = payload
        ctx.received_bytes = end
        self.expected_psn = psn_add(psn, 1)
        if ends:
            self.ctx = None
            self.msn = psn_add(self.msn, 1)
            if recv is not None and hdrs.imm_dt is not None:
                self._complete_recv(recv, WcStatus.SUCCESS, ctx.dma_length,
                                    hdrs.imm_dt.immediate_data, WcOpcode.RECV_RDMA_WITH_IMM)
        else:
            self.ctx = ctx
        if rc and bth.ack_req:
            self._ack(psn)

    def _remember(self, resource: _ReadResource | _AtomicResource) -> None:
        self.resources.append(resource)
        while len(self.resources) > max(1, self.qp.attrs.max_dest_rd_atomic):
            self.resources.popleft()

    def _read(self, hdrs: RoceHeaders) -> None:
        psn = hdrs.bth.psn
        reth = hdrs.reth
        qp = self.qp
        if reth is None:
            return
        if qp.attrs.max_dest_rd_atomic == 0 or reth.dma_length > MAX_MESSAGE_BYTES:
            self._reject(psn, rc=True, reason="RDMA READ refused: no READ resources "
                         "(max_dest_rd_atomic 0) or longer than 2**31")
            return
        mr: MemoryRegion | None = None
        offset = 0
        if reth.dma_length:
            verdict, mr, offset = qp.pd.check_remote(reth.rkey, reth.virtual_address,
                                                     reth.dma_length, Access.REMOTE_READ)
            if verdict is not RemoteAccessError.OK:
                self._class_c_error(psn, _ACCESS_ERROR_NAK[verdict], WcStatus.REM_ACCESS_ERR)
                return
        mtu = qp.attrs.path_mtu_bytes
        npkts = max(1, -(-reth.dma_length // mtu))
        last_psn = psn_add(psn, npkts - 1)
        self._remember(_ReadResource(psn, last_psn, reth.rkey, reth.virtual_address,
                                     reth.dma_length))
        self.msn = psn_add(self.msn, 1)
        self.expected_psn = psn_add(last_psn, 1)
        self._read_responses(psn, mr, offset, reth.dma_length)

    def _read_responses(self, psn: int, mr: MemoryRegion | None, offset: int,
                        length: int) -> None:
        """Send the response packets of a READ of ``length`` bytes starting at ``psn``
        (IBTA §9.7.4.1.5: one PSN per response packet)."""
        mtu = self.qp.attrs.path_mtu_bytes
        npkts = max(1, -(-length // mtu))
        aeth = Aeth.ack(self.msn)
        for k in range(npkts):
            start = k * mtu
            size = min(mtu, length - start)
            data = bytes(mr.buffer[offset + start : offset + start + size]) if mr else b""
            if npkts == 1:
                self._reply(Opcode.RC_RDMA_READ_RESPONSE_ONLY, psn, aeth, payload=data)
            elif k == 0:
                self._reply(Opcode.RC_RDMA_READ_RESPONSE_FIRST, psn, aeth, payload=data)
            elif k == npkts - 1:
                self._reply(Opcode.RC_RDMA_READ_RESPONSE_LAST, psn_add(psn, k), aeth,
                            payload=data)
            else:
                self._reply_middle(psn_add(psn, k), data)

    def _reply_middle(self, psn: int, data: bytes) -> None:
        qp = self.qp
        bth = Bth(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, False, False, -len(data) % 4, 0,
                  qp.attrs.pkey, False, False, qp.attrs.dest_qp_num, False, psn)
        qp.engine.transmit(qp, qp.attrs.remote_ip, bth, data)

    def _atomic(self, hdrs: RoceHeaders) -> None:
        psn = hdrs.bth.psn
        a = hdrs.atomic_eth
        qp = self.qp
        if a is None:
            return
        if qp.attrs.max_dest_rd_atomic == 0:
            self._reject(psn, rc=True,
                         reason="atomic refused: no atomic resources (max_dest_rd_atomic 0)")
            return
        if a.virtual_address % ATOMIC_OPERAND_BYTES:
            # rxe RESPST_ERR_MISALIGNED_ATOMIC: NAK invalid request (class C).
            self._reject(psn, rc=True,
                         reason=f"atomic at address {a.virtual_address:#x} is not 8-byte aligned")
            return
        verdict, mr, offset = qp.pd.check_remote(a.rkey, a.virtual_address,
                                                 ATOMIC_OPERAND_BYTES, Access.REMOTE_ATOMIC)
        if verdict is not RemoteAccessError.OK or mr is None:
            self._class_c_error(psn, _ACCESS_ERROR_NAK[verdict], WcStatus.REM_ACCESS_ERR)
            return
        # The target is a u64 in the responder's host byte order (rxe: *(u64 *)vaddr).
        cell = mr.buffer[offset : offset + ATOMIC_OPERAND_BYTES]
        original = int.from_bytes(cell, "little")
        if hdrs.bth.opcode is Opcode.RC_COMPARE_SWAP:
            if original == a.compare_data:
                cell[:] = a.swap_add_data.to_bytes(8, "little")
        else:
            cell[:] = ((original + a.swap_add_data) & _U64).to_bytes(8, "little")
        self._remember(_AtomicResource(psn, original))
        self.msn = psn_add(self.msn, 1)
        self.expected_psn = psn_add(psn, 1)
        self._reply(Opcode.RC_ATOMIC_ACKNOWLEDGE, psn, Aeth.ack(self.msn),
                    atomic_ack=AtomicAckEth(original))

    def _rc_duplicate(self, hdrs: RoceHeaders) -> None:
        """IBTA §9.7.5.1.3 / rxe ``duplicate_request``."""
        bth = hdrs.bth
        psn = bth.psn
        operation = bth.info.operation
        if operation in (Operation.SEND, Operation.RDMA_WRITE):
            # C9-105: acknowledge again, do not execute again.
            self._ack(psn_add(self.expected_psn, -1))
            return
        if operation is Operation.RDMA_READ_REQUEST and hdrs.reth is not None:
            reth = hdrs.reth
            mtu = self.qp.attrs.path_mtu_bytes
            for res in reversed(self.resources):
                if isinstance(res, _ReadResource) and psn_in_range(psn, res.first_psn,
                                                                    res.last_psn):
                    npkts = max(1, -(-reth.dma_length // mtu))
                    if psn_diff(psn_add(psn, npkts - 1), res.last_psn) > 0:
                        return
                    mr: MemoryRegion | None = None
                    offset = 0
                    if reth.dma_length:
                        verdict, mr, offset = self.qp.pd.check_remote(
                            reth.rkey, reth.virtual_address, reth.dma_length, Access.REMOTE_READ)
                        if verdict is not RemoteAccessError.OK:
                            return
                    self._read_responses(psn, mr, offset, reth.dma_length)
                    return
            return
        if operation in (Operation.COMPARE_SWAP, Operation.FETCH_ADD):
            for res in reversed(self.resources):
                if isinstance(res, _AtomicResource) and res.psn == psn:
                    # C9-112: replay the saved result, never execute twice.
                    self._reply(Opcode.RC_ATOMIC_ACKNOWLEDGE, psn, Aeth.ack(self.msn),
                                atomic_ack=AtomicAckEth(res.original))
                    return

    # -- UC ------------------------------------------------------------------------------

    def _uc_drop(self) -> None:
        self._abandon()
        self.uc_dropping = True

    def _uc(self, hdrs: RoceHeaders, payload: bytes) -> None:
        bth = hdrs.bth
        info = bth.info
        position = info.position
        starts = position in (Position.FIRST, Position.ONLY)
        if psn_diff(bth.psn, self.expected_psn) < 0:
            # An old PSN is a duplicate: drop it and keep the message in progress (rxe would
            # take a duplicated FIRST/ONLY as a new message; delivering twice is worse).
            self.duplicates += 1
            return
        if bth.psn != self.expected_psn or self.uc_dropping:
            # IBTA §9.8.3: a lost packet kills the message in progress; resynchronise on
            # the next FIRST/ONLY.
            self._abandon()
            self.expected_psn = psn_add(bth.psn, 1)
            if not starts:
                self.uc_dropping = True
                return
            self.uc_dropping = False
            self.expected_psn = bth.psn
        if (self.ctx is None) != starts or (
            self.ctx is not None and self.ctx.operation is not info.operation
        ):
            self._uc_drop()
            self.expected_psn = psn_add(bth.psn, 1)
            return
        if info.operation is Operation.SEND:
            self._send(hdrs, payload, position, rc=False)
        elif info.operation is Operation.RDMA_WRITE and self.qp.attrs.access & (
            Access.REMOTE_WRITE
        ):
            self._write(hdrs, payload, position, rc=False)
        else:
            self._uc_drop()
        if self.uc_dropping:
            self.expected_psn = psn_add(bth.psn, 1)

    # -- UD ------------------------------------------------------------------------------

    def _ud(self, hdrs: RoceHeaders, payload: bytes, src_ip: IpAddress) -> None:
        qp = self.qp
        deth = hdrs.deth
        if deth is None or deth.qkey != qp.attrs.qkey:
            return  # IBTA §10.2.5 / C10-15: a Q_Key mismatch is silently dropped
        if len(payload) > qp.attrs.path_mtu_bytes:
            return
        recv = qp.take_recv()
        if recv is None:
            return
        imm = hdrs.imm_dt.immediate_data if hdrs.imm_dt is not None else None
        grh = _grh_bytes(src_ip, qp, len(payload))
        if not scatter(recv.sg_list, 0, grh + payload):
            self._complete_recv(recv, WcStatus.LOC_LEN_ERR, 0, None, WcOpcode.RECV)
            return
        self._complete_recv(recv, WcStatus.SUCCESS, GRH_BYTES + len(payload), imm,
                            WcOpcode.RECV, deth.src_qp, WcFlags.GRH)


def _grh_bytes(src_ip: IpAddress, qp: QpPort, payload_bytes: int) -> bytes:
    """The 40 bytes verbs places before UD data: for IPv4, 20 zero bytes and the IPv4
    header (as rxe does); for IPv6, the IPv6 header."""
    local = qp.engine.local_ip
    udp_bytes = 8 + 12 + 8 + payload_bytes + 4
    if isinstance(src_ip, ipaddress.IPv4Address) and isinstance(local, ipaddress.IPv4Address):
        return bytes(20) + Ipv4(src_ip, local, IpProto.UDP, total_length=20 + udp_bytes).encode()
    if isinstance(src_ip, ipaddress.IPv6Address) and isinstance(local, ipaddress.IPv6Address):
        return Ipv6(src_ip, local, IpProto.UDP, 0, Ecn.NOT_ECT, 0, udp_bytes, 64).encode()
    return bytes(GRH_BYTES)
