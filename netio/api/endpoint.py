"""A connected endpoint: operations, their completions, and errors that explain.

Every operation is posted as a work request on the backend QP and returns a
:class:`~netio.api.handles.Pending`. Completions are polled when the backend
signals progress and resolve the handles: an unsignaled request completes when a
later signaled one on the same endpoint does (RC completes in order, as verbs
documents), an error status raises the :mod:`netio.errors` class for it with a hint
built from both sides' addresses and settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from netio.api.handles import Pending, Runner
from netio.api.region import LocalSlice, Region, RemoteRegion, RemoteSlice
from netio.api.types import Completion, QpType, WcOpcode, WcStatus, WrOpcode
from netio.backends.base import (
    BackendQp,
    Description,
    QpAddress,
    QpOptions,
    RecvRequest,
    Segment,
    SendRequest,
    Transport,
    UdDest,
)
from netio.errors import (
    ClosedError,
    FlushedError,
    IoError,
    LocalError,
    OperationError,
    RemoteAccessError,
    RemoteInvalidRequest,
    RemoteOperationError,
    RetryExceeded,
    RnrRetryExceeded,
)

LocalArg = LocalSlice | Region | Sequence[LocalSlice | Region]
RemoteArg = RemoteSlice | RemoteRegion | tuple[bytes, int, int]

_POLL_BATCH = 64
_CLOSE_S = 5.0
ATOMIC_BYTES = 8


def _locals(local: LocalArg) -> tuple[LocalSlice, ...]:
    # the single-buffer cases first: most operations name one region or one slice
    if type(local) is LocalSlice:
        return (local,)
    if type(local) is Region:
        return (local.whole(),)
    items: Sequence[LocalSlice | Region] = (
        [local] if isinstance(local, LocalSlice | Region) else local)
    out = []
    for item in items:
        if isinstance(item, Region):
            out.append(item.whole())
        elif isinstance(item, LocalSlice):
            out.append(item)
        else:
            raise IoError(f"local buffer must be a registered Region or region[a:b], got "
                          f"{type(item).__name__} (register it with ctx.register first)")
    return tuple(out)


def _checked_segments(local: tuple[LocalSlice, ...], context: object) -> tuple[Segment, ...]:
    """The backend segments of ``local``, each first checked to be a registered region of
    ``context`` (the endpoint's)."""
    for s in local:
        region = s.region
        if region.context is not context or not region.registered:
            raise IoError("a local buffer is not a registered region of this endpoint's "
                          "context")
    return tuple([Segment(s.region.backend_region, s.offset, s.length) for s in local])


def _send_request(wr_id: int, r: WorkRequest, segments: tuple[Segment, ...]) -> SendRequest:
    """The backend's request for the send-side work request ``r``."""
    remote = r.remote
    assert r.opcode is not None  # a send side: receives have none
    return SendRequest(wr_id, r.opcode, segments, remote.addr if remote else 0,
                       remote.remote.rkey if remote else 0, r.imm_data, r.compare_add, r.swap,
                       r.signaled, r.inline, r.dest)


def _refuse(future: asyncio.Future[Any] | None, exc: BaseException) -> None:
    """Fail ``future`` (if still pending) with the error that refused its post."""
    if future is not None and not future.done():
        future.set_exception(exc)
        if isinstance(exc, ClosedError):
            future.exception()  # refused after close (shutdown): not news


def _length(slices: tuple[LocalSlice, ...]) -> int:
    # one slice is the common case: no generator for it
    return slices[0].length if len(slices) == 1 else sum(s.length for s in slices)


def _remote(remote: RemoteArg, length: int | None) -> RemoteSlice:
    if isinstance(remote, RemoteSlice):
        return remote
    if isinstance(remote, RemoteRegion):
        return remote[0:length if length is not None else remote.length]
    if isinstance(remote, tuple) and len(remote) == 3:
        descriptor, offset, size = remote
        return RemoteRegion.from_descriptor(descriptor)[offset:offset + size]
    raise IoError("remote target must be remote_region[a:b], a RemoteRegion or "
                  "(descriptor, offset, length)")


@dataclass(frozen=True, slots=True)
class WorkRequest:
    """One request for :meth:`Endpoint.post` (the batch interface). Build it with the
    class methods; ``wr_id`` is yours and comes back in the completion."""

    opcode: WrOpcode | None  # None: a receive
    local: tuple[LocalSlice, ...] = ()
    remote: RemoteSlice | None = None
    imm_data: int | None = None
    compare_add: int = 0
    swap: int = 0
    signaled: bool = True
    inline: bool = False
    wr_id: int = 0
    dest: UdDest | None = None

    @classmethod
    def send(cls, local: LocalArg, *, imm: int | None = None, signaled: bool = True,
             inline: bool = False, wr_id: int = 0, dest: UdDest | None = None
             ) -> WorkRequest:
        op = WrOpcode.SEND if imm is None else WrOpcode.SEND_WITH_IMM
        return cls(op, _locals(local), None, imm, signaled=signaled, inline=inline,
                   wr_id=wr_id, dest=dest)

    @classmethod
    def recv(cls, local: LocalArg, *, wr_id: int = 0) -> WorkRequest:
        return cls(None, _locals(local), wr_id=wr_id)

    @classmethod
    def write(cls, local: LocalArg, remote: RemoteArg, *, imm: int | None = None,
              signaled: bool = True, inline: bool = False, wr_id: int = 0) -> WorkRequest:
        slices = _locals(local)
        op = WrOpcode.RDMA_WRITE if imm is None else WrOpcode.RDMA_WRITE_WITH_IMM
        return cls(op, slices, _remote(remote, _length(slices)), imm,
                   signaled=signaled, inline=inline, wr_id=wr_id)

    @classmethod
    def read(cls, local: LocalArg, remote: RemoteArg, *, signaled: bool = True,
             wr_id: int = 0) -> WorkRequest:
        slices = _locals(local)
        return cls(WrOpcode.RDMA_READ, slices, _remote(remote, _length(slices)),
                   signaled=signaled, wr_id=wr_id)

    @classmethod
    def fetch_add(cls, local: LocalArg, remote: RemoteArg, add: int, *,
                  wr_id: int = 0) -> WorkRequest:
        return cls(WrOpcode.ATOMIC_FETCH_AND_ADD, _locals(local), _remote(remote, ATOMIC_BYTES),
                   compare_add=add & 0xFFFF_FFFF_FFFF_FFFF, wr_id=wr_id)

    @classmethod
    def compare_swap(cls, local: LocalArg, remote: RemoteArg, compare: int, swap: int, *,
                     wr_id: int = 0) -> WorkRequest:
        return cls(WrOpcode.ATOMIC_CMP_AND_SWP, _locals(local), _remote(remote, ATOMIC_BYTES),
                   compare_add=compare & 0xFFFF_FFFF_FFFF_FFFF,
                   swap=swap & 0xFFFF_FFFF_FFFF_FFFF, wr_id=wr_id)

    @property
    def length_bytes(self) -> int:
        return _length(self.local)


@dataclass(frozen=True, slots=True)
class Path:
    """Both ends of a connection: what the hints in errors are made of."""

    local: Description
    local_address: QpAddress
    remote_address: QpAddress | None
    mtu_bytes: int
    options: QpOptions
    peer: str

    def text(self) -> str:
        if self.local.transport == Transport.TCP:
            return f"tcp to {self.peer}"
        r = self.remote_address
        if r is None:
            return f"local {self.local.summary()}, not connected"
        return (f"local {self.local.summary()}, remote GID {r.gid} (index {r.gid_index}, "
                f"{r.gid_type}{', ' + r.device if r.device else ''}, MTU {r.mtu_bytes}), "
                f"path MTU {self.mtu_bytes}")


@dataclass(slots=True)
class _Op:
    request: WorkRequest
    future: asyncio.Future[Any] | None
    batch: _Batch | None = None
    index: int = 0
    regions: tuple[Region, ...] = ()


@dataclass(slots=True)
class _Batch:
    future: asyncio.Future[list[Completion]]
    results: list[Completion | None] = field(default_factory=list)
    left: int = 0


class EndpointOwner(Protocol):
    """What an endpoint needs of the context that made it."""

    @property
    def runner(self) -> Runner: ...

    def endpoint_closed(self, ep: Endpoint) -> None: ...


class Endpoint:
    """A reliable connection to one peer. Operations return handles: ``await`` them,
    ``.wait()`` for them, or post many at once with :meth:`post`."""

    _ids = itertools.count(1)

    def __init__(self, context: EndpointOwner, qp: BackendQp, path: Path,
                 qp_type: QpType = QpType.RC) -> None:
        self.context = context
        # the context as the regions' owner, for the identity check on each post (a
        # typing.cast there was a call per operation)
        self._owner: object = context
        self._qp_type = qp_type
        self.path = path
        self._qp = qp
        self._ops: dict[int, _Op] = {}
        self._send_order: deque[int] = deque()
        self._closed = False
        self._peer_closed = False
        self.completed = 0
        # watches the exchange connection of a RoCE endpoint for the peer leaving
        self.watch_task: asyncio.Task[None] | None = None

    # -- single operations -----------------------------------------------------------

    def send(self, local: LocalArg, *, imm: int | None = None, signaled: bool = True,
             inline: bool = False, dest: UdDest | None = None) -> Pending[Completion]:
        """SEND ``local`` (with optional 32-bit immediate data) to the peer's next receive;
        on a datagram endpoint ``dest`` says where (a receive there gets the 40-byte GRH
        first, then the payload)."""
        return self._one(WorkRequest.send(local, imm=imm, signaled=signaled, inline=inline,
                                          dest=dest))

    def recv(self, local: LocalArg) -> Pending[Completion]:
        """Post a receive; completes with the SEND (or WRITE with immediate) that used it:
        ``byte_len`` and ``imm_data`` are in the completion."""
        return self._one(WorkRequest(None, _locals(local)))  # WorkRequest.recv, inlined

    def write(self, local: LocalArg, remote: RemoteArg, *, imm: int | None = None,
              signaled: bool = True, inline: bool = False) -> Pending[Completion]:
        """RDMA WRITE ``local`` into the peer's region (with immediate: also consumes one of
        the peer's receives, which completes with the immediate)."""
        return self._one(WorkRequest.write(local, remote, imm=imm, signaled=signaled,
                                           inline=inline))

    def read(self, local: LocalArg, remote: RemoteArg) -> Pending[Completion]:
        """RDMA READ the peer's bytes into ``local``."""
        return self._one(WorkRequest.read(local, remote))

    def fetch_add(self, local: LocalArg, remote: RemoteArg, add: int) -> Pending[int]:
        """Atomically add to the peer's 8 bytes; the value before (also written to ``local``,
        little-endian as the host keeps it)."""
        return self._one(WorkRequest.fetch_add(local, remote, add))

    def compare_swap(self, local: LocalArg, remote: RemoteArg, compare: int,
                     swap: int) -> Pending[int]:
        """Atomically replace the peer's 8 bytes by ``swap`` if they equal ``compare``; the
        value before."""
        return self._one(WorkRequest.compare_swap(local, remote, compare, swap))

    def _one(self, request: WorkRequest) -> Pending[Any]:
        runner = self.context.runner
        future = runner.future()
        op = _Op(request, future)
        runner.call(lambda: self._post_one(op))
        return Pending(runner, future)

    # -- the batch interface -----------------------------------------------------------

    def post(self, requests: Sequence[WorkRequest]) -> Pending[list[Completion]]:
        """Post many requests with one doorbell per queue; the handle resolves, once all
        have finished, to their completions in request order (error statuses are in the
        completions, not raised). The last send-queue request is always signaled so that
        the batch can finish; the others are signaled as asked."""
        runner = self.context.runner
        future: asyncio.Future[list[Completion]] = runner.future()
        batch = _Batch(future, [None] * len(requests), len(requests))
        ops = [_Op(r, None, batch, i) for i, r in enumerate(requests)]
        for op in reversed(ops):  # the last send: found from the end, usually at once
            if op.request.opcode is not None:
                if not op.request.signaled:
                    op.request = dataclasses.replace(op.request, signaled=True)
                break
        if not ops:
            future.set_result([])
        else:
            runner.call(lambda: self._post_ops(ops))
        return Pending(runner, future)

    # -- posting and completing (on the loop) ------------------------------------------

    def _post_ops(self, ops: list[_Op]) -> None:
        try:
            if self._closed:
                raise ClosedError("the endpoint is closed")
            context = self._owner
            ids = self._ids
            sends: list[SendRequest] = []
            recvs: list[RecvRequest] = []
            wr_ids: list[int] = []
            # every request is checked and built before any is counted or posted
            for op in ops:
                r = op.request
                segments = _checked_segments(r.local, context)
                wr_id = next(ids)
                wr_ids.append(wr_id)
                if r.opcode is None:
                    recvs.append(RecvRequest(wr_id, segments))
                    continue
                sends.append(_send_request(wr_id, r, segments))
            table = self._ops
            for wr_id, op in zip(wr_ids, ops, strict=True):
                local = op.request.local
                op.regions = (local[0].region,) if len(local) == 1 else tuple(
                    {s.region for s in local})
                for region in op.regions:
                    region.in_flight += 1
                table[wr_id] = op
            self._send_order.extend([req.wr_id for req in sends])
            try:
                if recvs:
                    self._qp.post_recv(recvs)
                if sends:
                    self._qp.post_send(sends)
            except Exception:
                for wr_id in wr_ids:
                    self._forget(wr_id)
                for req in sends:
                    if req.wr_id in self._send_order:
                        self._send_order.remove(req.wr_id)
                raise
        except Exception as exc:
            for op in ops:
                _refuse(op.future if op.future is not None else (
                    op.batch.future if op.batch else None), exc)
            return
        self.progress()

    def _post_one(self, op: _Op) -> None:
        """:meth:`_post_ops` for one operation (the single-operation methods): the same
        checks, errors and order of effects without the batch's lists, zips and sets,
        which cost more than the post itself for one request."""
        try:
            if self._closed:
                raise ClosedError("the endpoint is closed")
            r = op.request
            local = r.local
            segments = _checked_segments(local, self._owner)
            wr_id = next(self._ids)
            op.regions = (local[0].region,) if len(local) == 1 else tuple(
                {s.region for s in local})
            for region in op.regions:
                region.in_flight += 1
            self._ops[wr_id] = op
            opcode = r.opcode
            try:
                if opcode is None:
                    self._qp.post_recv((RecvRequest(wr_id, segments),))
                else:
                    request = _send_request(wr_id, r, segments)
                    self._send_order.append(wr_id)
                    self._qp.post_send((request,))
            except Exception:
                self._forget(wr_id)
                if opcode is not None and wr_id in self._send_order:
                    self._send_order.remove(wr_id)
                raise
        except Exception as exc:
            _refuse(op.future, exc)
            return
        self.progress()

    def _forget(self, wr_id: int) -> _Op | None:
        op = self._ops.pop(wr_id, None)
        if op is not None:
            for region in op.regions:
                region.in_flight -= 1
        return op

    def progress(self) -> None:
        """Poll the backend's completions and resolve their handles (the backend's notify)."""
        qp = self._qp
        while True:
            batch = qp.poll(_POLL_BATCH)
            for c in batch:
                self._on_completion(c)
            if len(batch) < _POLL_BATCH:
                return

    def _on_completion(self, c: Completion) -> None:
        op = self._ops.get(c.wr_id)
        if op is None:
            return
        if op.request.opcode is not None:
            # Everything posted before this send completed before it (RC order).
            order = self._send_order
            while order and order[0] != c.wr_id:
                earlier = order.popleft()
                prior = self._forget(earlier)
                if prior is not None:
                    self._finish(prior, Completion(
                        prior.request.wr_id, WcStatus.SUCCESS, _wc_opcode(prior.request),
                        c.qp_num, prior.request.length_bytes))
            if order:
                order.popleft()
        self._forget(c.wr_id)
        self.completed += 1
        # The caller's wr_id in place of ours: built directly, dataclasses.replace
        # (fields(), a dict, keyword calls) was a tenth of the endpoint's cost per op.
        self._finish(op, Completion(op.request.wr_id, c.status, c.opcode, c.qp_num,
                                    c.byte_len, c.imm_data, c.src_qp, c.wc_flags))

    def _finish(self, op: _Op, c: Completion) -> None:
        if op.batch is not None:
            b = op.batch
            b.results[op.index] = c
            b.left -= 1
            if b.left == 0 and not b.future.done():
                b.future.set_result([x for x in b.results if x is not None])
            return
        future = op.future
        if future is None or future.done():
            return
        if c.status is not WcStatus.SUCCESS:
            future.set_exception(self.error_for(c, op.request))
            if self._closed and c.status is WcStatus.WR_FLUSH_ERR:
                future.exception()  # flushed by our own close: not an unretrieved error
        elif op.request.opcode in (WrOpcode.ATOMIC_FETCH_AND_ADD, WrOpcode.ATOMIC_CMP_AND_SWP):
            s = op.request.local[0]
            future.set_result(int.from_bytes(s.region.view[s.offset:s.offset + 8], "little"))
        else:
            future.set_result(c)

    # -- errors --------------------------------------------------------------------------

    def error_for(self, c: Completion, request: WorkRequest) -> OperationError:
        """The netio error for an error completion, with its hint."""
        status = WcStatus(c.status)
        what = _describe(request)
        p = self.path
        o = p.options
        kwargs: dict[str, Any] = {"status": int(status), "status_name": status.name,
                                  "wr_id": request.wr_id}
        refused = self._qp.diagnosis()
        here = f"; this side refused the peer's request: {refused}" if refused else ""
        if status is WcStatus.RETRY_EXC_ERR:
            if p.local.transport == Transport.TCP or self.peer_closed:
                hint = (f"the peer at {p.peer} closed its connection or went away "
                        "(its process ended or its host is unreachable)")
                return RetryExceeded(f"{what}: peer gone", hint=hint, **kwargs)
            wait_ms = (4.096e-3 * (1 << o.timeout)) if o.timeout else 0.0
            hint = (f"{p.text()}; retry_count {o.retry_count}, ACK timeout "
                    f"{wait_ms:.1f} ms — check that the peer is alive, that both sides use "
                    "RoCEv2 GIDs on the same subnet and the same path MTU")
            return RetryExceeded(f"{what}: peer did not acknowledge", hint=hint, **kwargs)
        if status is WcStatus.RNR_RETRY_EXC_ERR:
            hint = (f"the peer had no receive posted for this SEND after rnr_retry="
                    f"{o.rnr_retry} retries — post receives (ep.recv) before the peer sends, "
                    "or open the context with rnr_retry=7 to retry for ever")
            return RnrRetryExceeded(f"{what}: receiver not ready", hint=hint, **kwargs)
        if status is WcStatus.REM_ACCESS_ERR:
            r = request.remote
            target = (f"rkey {r.remote.rkey:#x}, address {r.addr:#x}, {r.length} bytes of a "
                      f"{r.remote.length}-byte region") if r else "the target"
            hint = (f"the peer refused {target}: check that the descriptor is current (the "
                    "region was not deregistered), that the range lies inside it, and that "
                    "it was registered with the access this operation needs")
            return RemoteAccessError(f"{what}: remote access refused", hint=hint, **kwargs)
        if status is WcStatus.REM_INV_REQ_ERR:
            hint = (f"the peer found the request invalid: a SEND of {request.length_bytes} "
                    "bytes larger than its posted receive, a misaligned atomic, or packets "
                    f"that do not match the path MTU ({p.text()})")
            return RemoteInvalidRequest(f"{what}: invalid request", hint=hint, **kwargs)
        if status is WcStatus.REM_OP_ERR:
            return RemoteOperationError(f"{what}: the peer could not carry it out", **kwargs)
        if status is WcStatus.WR_FLUSH_ERR:
            hint = ("the endpoint entered the error state (an earlier request failed or it "
                    "was closed) before this request finished")
            return FlushedError(f"{what}: flushed", hint=hint + here, **kwargs)
        if status in (WcStatus.LOC_LEN_ERR, WcStatus.LOC_QP_OP_ERR, WcStatus.LOC_PROT_ERR,
                      WcStatus.LOC_ACCESS_ERR):
            hint = ("a local buffer is too small for the incoming message or not registered "
                    "with the access it needs" if status is WcStatus.LOC_LEN_ERR else "")
            return LocalError(f"{what}: local error", hint=hint + here, **kwargs)
        return OperationError(f"{what}: failed", hint=here.lstrip("; "), **kwargs)

    # -- addresses exchanged by the caller -------------------------------------------------

    @property
    def address(self) -> QpAddress:
        """This endpoint's address (GID, QP number, starting PSN, MTU) for a peer that
        connects with its own exchange (``Endpoint.connect_to``)."""
        return self.path.local_address

    @property
    def qp_type(self) -> QpType:
        return self._qp_type

    @property
    def peer_closed(self) -> bool:
        """True once the peer's netio closed the connection (its exchange connection, or
        for the tcp backend the data connection, ended)."""
        return self._peer_closed or bool(getattr(self._qp, "peer_gone", False))

    def mark_peer_closed(self) -> None:
        self._peer_closed = True

    def connect_to(self, remote: QpAddress, *, mtu_bytes: int | None = None) -> Pending[None]:
        """Connect an endpoint made by ``Context.endpoint`` to a peer whose address came by
        the caller's own exchange (the path MTU is the smaller of both sides' and
        ``mtu_bytes``)."""
        return self.context.runner.spawn(self._connect_to(remote, mtu_bytes))

    async def _connect_to(self, remote: QpAddress, mtu_bytes: int | None) -> None:
        if self._closed:
            raise ClosedError("the endpoint is closed")
        mtu = min(self.path.local_address.mtu_bytes, remote.mtu_bytes,
                  mtu_bytes or self.path.local_address.mtu_bytes)
        await self._qp.connect(remote, mtu)
        self.path = dataclasses.replace(self.path, remote_address=remote, mtu_bytes=mtu,
                                        peer=remote.gid)

    # -- life cycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def counters(self) -> dict[str, int]:
        return self._qp.counters()

    async def aclose(self) -> None:
        """Close: requests still in flight complete with :class:`FlushedError`. Bounded
        and idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.watch_task is not None:
            self.watch_task.cancel()
        with contextlib.suppress(Exception):  # closing must not fail or hang
            await asyncio.wait_for(self._qp.close(), _CLOSE_S)
        self.progress()
        for wr_id in list(self._ops):
            op = self._forget(wr_id)
            if op is not None:
                self._finish(op, Completion(op.request.wr_id, WcStatus.WR_FLUSH_ERR,
                                            _wc_opcode(op.request), self._qp.qpn))
                if op.future is not None and op.future.done():
                    op.future.exception()  # flushed by close: not an unretrieved error
        self.context.endpoint_closed(self)

    def close(self, timeout_s: float = _CLOSE_S + 1.0) -> None:
        """Synchronous close (from any thread; from the loop's own thread it is started
        and finishes in the background)."""
        pending = self.context.runner.spawn(self.aclose())
        if not self.context.runner.on_loop_thread():
            with contextlib.suppress(IoError):
                pending.wait(timeout_s)

    async def __aenter__(self) -> Endpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Endpoint({self.path.peer}, {self.path.local.backend}, qpn {self._qp.qpn:#x})"


def _wc_opcode(r: WorkRequest) -> WcOpcode:
    if r.opcode is None:
        return WcOpcode.RECV
    return {
        WrOpcode.SEND: WcOpcode.SEND, WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
        WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
        WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
        WrOpcode.RDMA_READ: WcOpcode.RDMA_READ, WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
        WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
    }[r.opcode]


def _describe(r: WorkRequest) -> str:
    name = "RECV" if r.opcode is None else r.opcode.name
    return f"{name} of {r.length_bytes} bytes"


__all__ = ["Endpoint", "LocalArg", "Path", "RemoteArg", "WorkRequest"]
