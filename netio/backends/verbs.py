"""The verbs backend: rdma-core through pyverbs, for real RoCE NICs and the kernel's rxe.

pyverbs is imported when a backend is opened, never at module import: ``import netio``
and ``import netio.backends.verbs`` work without rdma-core. On Debian 12 pyverbs comes
from ``apt-get install python3-pyverbs``; ``tools/link-pyverbs`` (run by ``make
install``) makes it importable from netio's virtualenv.

What it does, in ibverbs terms:

* one device context and protection domain per backend; the device, port and GID are
  chosen by :mod:`netio.backends.gid` (RoCEv2, the peer's address family, the netdev of
  the route to the peer, an ACTIVE port), with the reason for every candidate;
* ``register`` calls ``ibv_reg_mr`` on the caller's own buffer (its address through the
  buffer protocol): the bytes a peer writes land in the caller's object, nothing is
  copied. The buffer stays exported while registered (a bytearray cannot be resized);
* one RC QP per endpoint with its own CQ and completion channel. The channel's file
  descriptor is made non-blocking and watched with ``loop.add_reader``; on an event
  the backend reads and acknowledges the events, re-arms the CQ (``ibv_req_notify_cq``)
  and then calls ``notify``, so a completion that arrives after the re-arm raises a new
  event. Given ``NETIO_VERBS_SPIN_US`` (microseconds; off by default: the emulated lab
  measured no gain), before the loop would sleep it first busy-polls the CQs of its native
  QPs that have work outstanding, as perftest polls: a completion that comes within that
  time costs no channel wake-up (see :class:`_SpinSelector`). pyverbs 44 does not expose
  the channel's fd (``CompChannel.fd`` came later), so it is found as the one new
  ``anon_inode:[infinibandevent]`` descriptor that creating the channel opened. When
  that fails, or with ``NETIO_VERBS_POLL=1``, a 1 ms timer calls
  ``notify`` instead (documented fallback);
* QP RESET→INIT at creation (so receives can be posted before connecting), INIT→RTR→RTS
  in ``connect`` with the peer's GID, QPN and PSN and the agreed path MTU;
* ``post_send``/``post_recv`` chain a batch into one ``ibv_post_send``/``ibv_post_recv``
  (one doorbell) after checking every request; immediate data is carried in network
  byte order, as the soft engine puts it on the wire;
* every pyverbs error becomes a ``netio.errors`` class keeping the errno.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno as errno_mod
import fcntl
import ipaddress
import itertools
import os
import random
import resource
import selectors
import socket
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netio.api.types import Access, Completion, QpType, WcFlags, WcOpcode, WcStatus, WrOpcode
from netio.backends.base import (
    Description,
    Notify,
    QpAddress,
    QpOptions,
    RecvRequest,
    SendRequest,
    Transport,
)
from netio.backends.gid import (
    IB_MTUS_BYTES,
    GidEntry,
    PortMtu,
    Route,
    RouteLookup,
    choose,
    kernel_route,
    no_device_hint,
    read_gid_table,
)
from netio.backends.verbs_native import NativeQp, Spinner
from netio.backends.verbs_native import load as load_native
from netio.environment import microseconds
from netio.errors import (
    BackendUnavailable,
    ClosedError,
    ConnectFailed,
    DeviceNotFound,
    ExchangeMismatch,
    RegistrationError,
    RegistrationLimit,
    RoceError,
    Timeout,
    VerbsError,
)

PYVERBS_DIR = "/usr/lib/python3/dist-packages/pyverbs"
# ibverbs constants used here (enum values from <infiniband/verbs.h>; the same numbers
# pyverbs.enums exports).
_QPS_ERR = 6
_QP_STATE = 1
_SEND_SIGNALED = 2
_SEND_INLINE = 8
_WC_WITH_IMM = 2
_UC_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE  # UC has no READ or atomics
# what each transport may post (IBTA 9.4, Table 38 "operations by service type")
_ALLOWED = {
    QpType.RC: frozenset(WrOpcode),
    QpType.UC: frozenset({WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_WRITE,
                          WrOpcode.RDMA_WRITE_WITH_IMM}),
    QpType.UD: frozenset({WrOpcode.SEND, WrOpcode.SEND_WITH_IMM}),
}
_SEND_OPCODES = {
    WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WrOpcode.SEND: WcOpcode.SEND,
    WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
    WrOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
    WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
}
_WITH_IMM = (WrOpcode.RDMA_WRITE_WITH_IMM, WrOpcode.SEND_WITH_IMM)
_ATOMICS = (WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD)
_REMOTE = (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM, WrOpcode.RDMA_READ, *_ATOMICS)
_POLL_FALLBACK_S = 0.001
_CLOSE_DRAIN_S = 2.0
_MAX_SGE = 16
_MAX_RD_ATOMIC = 16
_EVENT_FD_LINK = "anon_inode:[infinibandevent]"
# a dict lookup costs a tenth of an enum constructor call, once per completion
_WC_STATUS = {int(s): s for s in WcStatus}
_WC_OPCODE = {int(o): o for o in WcOpcode}
_WC_FLAGS = {f: WcFlags(f) for f in range(int(WcFlags.GRH | WcFlags.WITH_IMM) + 1)}
_WC_FLAG_MASK = int(WcFlags.GRH | WcFlags.WITH_IMM)
_RXE_VENDOR_ID = 0xFFFFFF  # drivers/infiniband/sw/rxe/rxe_param.h RXE_VENDOR_ID
SPIN_ENV = "NETIO_VERBS_SPIN_US"
# How long an idle event loop busy-polls before it sleeps on the completion channels. A
# NIC completes a small RC operation within a few microseconds, rxe within a few hundred;
# a loop with nothing else to do burns at most this much CPU per sleep.
# Off by default: in the rxe lab (one emulated CPU per guest, shared with the kernel's rxe
# work) the API path measured no gain with it on (10.7 / 2.2 ms against 4.8 / 4.6 ms off);
# on a NIC that completes in microseconds it saves the channel wake-up. Measure, then set.
_SPIN_DEFAULT_US = 0
_SPIN_MIN_NS = 1000  # a shorter spin is no spin


def mtu_enum(mtu_bytes: int) -> int:
    """``enum ibv_mtu`` of a path MTU in bytes (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5)."""
    if mtu_bytes not in IB_MTUS_BYTES:
        raise ValueError(f"path MTU {mtu_bytes} is not one of {IB_MTUS_BYTES}")
    return IB_MTUS_BYTES.index(mtu_bytes) + 1


def mtu_bytes_of(enum_value: int) -> int:
    """Bytes of an ``enum ibv_mtu`` value (0 when out of range)."""
    return IB_MTUS_BYTES[enum_value - 1] if 1 <= enum_value <= len(IB_MTUS_BYTES) else 0


class _Pyverbs:
    """The pyverbs modules, imported on first use."""

    def __init__(self) -> None:
        try:
            import pyverbs.addr as addr
            import pyverbs.cq as cq
            import pyverbs.device as device
            import pyverbs.mr as mr
            import pyverbs.pd as pd
            import pyverbs.qp as qp
            import pyverbs.wr as wr
            from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
        except ImportError as exc:
            present = Path(PYVERBS_DIR).is_dir()
            where = (f"{PYVERBS_DIR} exists but this interpreter ({sys.executable}) does not "
                     f"see it: run tools/link-pyverbs (make install does), which adds a .pth "
                     f"to the virtualenv pointing at a directory holding only pyverbs"
                     if present else
                     "apt-get install python3-pyverbs (rdma-core's Python bindings), then "
                     "make install (tools/link-pyverbs makes them importable from netio's "
                     "virtualenv)")
            raise BackendUnavailable(f"the verbs backend needs pyverbs: {exc}",
                                     hint=where) from exc
        self.addr, self.cq, self.device, self.mr = addr, cq, device, mr
        self.pd, self.qp, self.wr = pd, qp, wr
        self.Error: type[Exception] = PyverbsError
        self.RdmaError: type[Exception] = PyverbsRDMAError


_PV: _Pyverbs | None = None


def _pyverbs() -> _Pyverbs:
    global _PV
    if _PV is None:
        _PV = _Pyverbs()
    return _PV


def _errno_of(exc: BaseException) -> int:
    code = getattr(exc, "error_code", 0)
    return code if isinstance(code, int) and code > 0 else 0


def _verbs_error(call: str, exc: BaseException, what: str, hint: str = "") -> VerbsError:
    return VerbsError(call, f"{what}: {exc}", errno_value=_errno_of(exc), hint=hint)


def memlock_text() -> str:
    """The process's RLIMIT_MEMLOCK, soft and hard, in words."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def words(v: int) -> str:
        return "unlimited" if v == resource.RLIM_INFINITY else f"{v} bytes ({v // 1024} KiB)"

    return f"RLIMIT_MEMLOCK soft {words(soft)}, hard {words(hard)}"


class VerbsRegion:
    """A memory region registered in place (``ibv_reg_mr`` on the caller's buffer)."""

    __slots__ = ("_addr", "_anchor", "_length", "_mr", "_view", "access", "closed")

    def __init__(self, mr: Any, anchor: Any, view: memoryview, addr: int, length: int,
                 access: Access) -> None:
        self._mr = mr
        self._anchor = anchor  # ctypes array over the buffer: keeps it exported
        self._view = view
        self._addr = addr
        self._length = length
        self.access = access
        self.closed = False

    @property
    def lkey(self) -> int:
        return int(self._mr.lkey)

    @property
    def rkey(self) -> int:
        return int(self._mr.rkey)

    @property
    def addr(self) -> int:
        return self._addr

    @property
    def length(self) -> int:
        return self._length

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._mr.close()
        finally:
            self._anchor = None
            with contextlib.suppress(BufferError):
                self._view.release()

    def __repr__(self) -> str:
        return (f"VerbsRegion(addr={self._addr:#x}, length={self._length}, "
                f"lkey={self.lkey:#x}, rkey={self.rkey:#x}, access={self.access!r})")


def _event_fds() -> set[int]:
    """This process's open completion-event descriptors (``anon_inode:[infinibandevent]``).
    Listing /proc/self/fd opens a descriptor of its own, which the link check leaves out."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == _EVENT_FD_LINK:
                found.add(int(name))
    return found


def _channel_fd(pv: _Pyverbs, ctx: Any) -> tuple[Any, int | None]:
    """A new completion channel and its file descriptor (None when it cannot be found)."""
    before = _event_fds()
    try:
        channel = pv.cq.CompChannel(ctx)
    except pv.Error as exc:
        raise _verbs_error("ibv_create_comp_channel", exc, "cannot create a completion "
                           "channel") from exc
    fd = getattr(channel, "fd", None)  # pyverbs after 44 exposes it
    if isinstance(fd, int):
        return channel, fd
    new = _event_fds() - before
    return channel, (new.pop() if len(new) == 1 else None)


def _spin_ns() -> int:
    return microseconds(SPIN_ENV, _SPIN_DEFAULT_US) * 1000


class _SpinSelector:
    """An asyncio loop's selector with a busy-poll in front: when the loop would block
    (a timeout other than 0) and one of its native verbs QPs has work outstanding, it
    first polls those QPs' CQs in C for up to ``spin_ns`` (less when a timer is due, and
    less after waits that outlasted it), and stops early when one of the loop's read
    descriptors becomes readable. Completions it
    finds go to their QP (``_spun``), and the QP's channel descriptor is reported ready,
    so the loop runs the QP's channel handler and its ``notify`` as after a wake-up, only
    without the sleep. Everything else is the wrapped selector's."""

    def __init__(self, inner: selectors.BaseSelector, spinner: Spinner, spin_ns: int) -> None:
        self._inner = inner
        self._spinner = spinner
        self.spin_ns = spin_ns
        self.qps: list[VerbsQp] = []
        self._misses = 0  # waits in a row that outlasted the spin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        inner = self._inner
        if (timeout is not None and timeout <= 0) or not self.spin_ns:
            return inner.select(timeout)
        busy = [q for q in self.qps if q.spinnable()]
        if not busy:
            return inner.select(timeout)
        # Waits longer than the spin (a bandwidth run: one completion per batch) halve
        # the spin each time, down to none: its CPU would only be taken from the
        # device's work where they share a core. A wait that ends within spin_ns
        # brings the full spin back.
        budget_ns = self.spin_ns >> min(self._misses, 30)
        if timeout is not None:
            budget_ns = min(budget_ns, int(timeout * 1e9))
        started = time.monotonic()
        if budget_ns >= _SPIN_MIN_NS:
            fds = [k.fd for k in inner.get_map().values() if k.events & selectors.EVENT_READ]
            which, rows = self._spinner.spin([q.cq_addr for q in busy], fds, budget_ns)
            if rows:  # (a failed poll, None, is left to the QP's own next poll to report)
                self._misses = 0
                qp = busy[which]
                qp._spun(rows)
                events = inner.select(0)
                try:
                    key = inner.get_key(qp.channel_fd)
                except (KeyError, ValueError):  # its reader is gone: poll() still has them
                    return events
                if all(k.fd != key.fd for k, _mask in events):
                    events.append((key, selectors.EVENT_READ))
                return events
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - started))
        events = inner.select(timeout)
        channels = {q.channel_fd for q in busy}
        woke_by_completion = any(k.fd in channels for k, _mask in events)
        if woke_by_completion and (time.monotonic() - started) * 1e9 <= self.spin_ns:
            self._misses = 0
        else:
            self._misses += 1
        return events


def _spin_selector(loop: asyncio.AbstractEventLoop, module: Any) -> _SpinSelector | None:
    """The loop's spinning selector, put in place on first use; None for a loop that has
    no selector to wrap (uvloop, a proactor) or when spinning is turned off."""
    current = getattr(loop, "_selector", None)
    if isinstance(current, _SpinSelector):
        return current
    spin_ns = _spin_ns()
    if not spin_ns or not isinstance(current, selectors.BaseSelector):
        return None
    wrapper = _SpinSelector(current, Spinner(module), spin_ns)
    setattr(loop, "_selector", wrapper)  # noqa: B010 (asyncio's own attribute)
    return wrapper


@dataclass(frozen=True, slots=True)
class PreparedPost:
    """Work requests checked once and kept as the native data path's flat lists, to be
    posted again and again by :meth:`VerbsQp.exchange` (perftest builds its work
    requests once, too). ``native``: their C arrays; the rest is the bookkeeping."""

    native: Any
    recv_ids: tuple[int, ...]
    sends: tuple[_Posted, ...]
    send_requests: tuple[SendRequest, ...]


@dataclass(frozen=True, slots=True)
class _Posted:
    wr_id: int
    opcode: WcOpcode


class VerbsQp:
    """A queue pair (``BackendQp``: RC, UC or UD) with its own CQ and completion channel.
    RC and UC QPs are in INIT after creation (receives can be posted) and reach RTS in
    ``connect``; a UD QP is in RTS at once and names each SEND's destination."""

    def __init__(self, backend: VerbsBackend, options: QpOptions, notify: Notify,
                 entry: GidEntry, loop: asyncio.AbstractEventLoop,
                 qp_type: QpType = QpType.RC, psn: int | None = None) -> None:
        if psn is not None and not 0 <= psn < 1 << 24:
            raise RoceError(f"start PSN {psn} does not fit 24 bits")
        if qp_type not in _ALLOWED:
            raise RoceError(f"QP type {qp_type!r} is not supported by the verbs backend")
        pv = backend._pv
        self._backend = backend
        self._pv = pv
        self._options = options
        self._notify = notify
        self._entry = entry
        self._loop = loop
        self._sends: deque[_Posted] = deque()  # posted, not yet completed, in order
        self._recvs: deque[int] = deque()
        self._leftover: list[Completion] = []
        self._reserved: set[int] = set()  # wr_ids of prepared requests (exchange)
        self._held: list[Completion] = []  # their completions that poll() came across
        self._state = "init"
        self._remote: QpAddress | None = None
        self._mtu_bytes = 0
        self._stats = {"sends_posted": 0, "recvs_posted": 0, "completions": 0,
                       "error_completions": 0, "notify_events": 0, "spin_hits": 0}
        self.psn = psn if psn is not None else random.getrandbits(24)
        self.qp_type = qp_type
        self._ahs: dict[str, Any] = {}  # UD: one address handle per destination GID
        self._rd_atomic = min(options.max_rd_atomic, backend._rd_atomic)
        self._timer: asyncio.TimerHandle | None = None
        self._fd: int | None = None
        self._channel, fd = _channel_fd(pv, backend._ctx)
        depth = options.max_send_wr + options.max_recv_wr
        try:
            self._cq = pv.cq.CQ(backend._ctx, depth, None, self._channel, 0)
            self._cq.req_notify()
            self._max_sge = min(backend._max_sge, _MAX_SGE)
            cap = pv.qp.QPCap(max_send_wr=options.max_send_wr,
                              max_recv_wr=options.max_recv_wr, max_send_sge=self._max_sge,
                              max_recv_sge=self._max_sge,
                              max_inline_data=options.max_inline_bytes)
            init = pv.qp.QPInitAttr(qp_type=int(qp_type), scq=self._cq, rcq=self._cq,
                                    cap=cap, sq_sig_all=0)
            self._qp = pv.qp.QP(backend._pd, init)
            attr = pv.qp.QPAttr(port_num=entry.port)
            attr.pkey_index = 0
            if qp_type == QpType.UD:
                attr.qkey = options.qkey
                attr.sq_psn = self.psn
                self._qp.to_rts(attr)  # RESET -> INIT -> RTR -> RTS: ready at once
                self._state = "rts"
            else:
                access = options.access & _UC_ACCESS if qp_type == QpType.UC else options.access
                attr.qp_access_flags = int(access)
                self._qp.to_init(attr)
        except (pv.Error, OverflowError) as exc:
            self._destroy()
            raise _verbs_error("ibv_create_qp", exc,
                               f"cannot create a {qp_type.name} QP on {entry.device} port "
                               f"{entry.port}",
                               hint=f"max_send_wr {options.max_send_wr}, max_recv_wr "
                                    f"{options.max_recv_wr}, inline {options.max_inline_bytes}"
                                    f" bytes; device limits: ibv_devinfo -v -d "
                                    f"{entry.device}") from exc
        self.qpn = int(self._qp.qp_num)
        # the C data path (batched post and poll) when it is built and finds this QP's
        # struct ibv_qp; pyverbs otherwise (native_why_not says why)
        self._native, self.native_why_not = NativeQp.attach(self._qp, self.qpn, int(qp_type))
        self._spinner: _SpinSelector | None = None
        if fd is not None and os.environ.get("NETIO_VERBS_POLL") != "1":
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
            self._fd = fd
            loop.add_reader(fd, self._on_channel)
            if self._native is not None:
                self._spinner = _spin_selector(loop, load_native()[0])
                if self._spinner is not None:
                    self._spinner.qps.append(self)
        else:
            self._timer = loop.call_later(_POLL_FALLBACK_S, self._tick)

    # -- notification ------------------------------------------------------------------

    @property
    def data_path(self) -> str:
        """``native`` (netio._verbs_native posts and polls) or ``pyverbs``."""
        return "native" if self._native is not None else "pyverbs"

    @property
    def notify_mode(self) -> str:
        """``channel`` (completion channel fd on the loop) or ``polling`` (1 ms timer)."""
        return "channel" if self._fd is not None else "polling"

    def _on_channel(self) -> None:
        events = 0
        while True:
            try:
                self._channel.get_cq_event(self._cq)
            except self._pv.Error:  # EAGAIN: no more events
                break
            events += 1
        if events:
            self._cq.ack_events(events)
            self._stats["notify_events"] += events
        if self._state in ("init", "rts", "closing"):
            with contextlib.suppress(self._pv.Error):
                self._cq.req_notify()
        self._notify()

    @property
    def spin_mode(self) -> str:
        """``spin`` (the loop busy-polls this QP's CQ before it sleeps) or ``off``."""
        return "spin" if self._spinner is not None else "off"

    def spinnable(self) -> bool:
        """Whether the loop should busy-poll this QP's CQ: it has work outstanding."""
        return self._native is not None and bool(self._sends or self._recvs)

    @property
    def cq_addr(self) -> int:
        return self._native.cq_addr if self._native is not None else 0

    @property
    def channel_fd(self) -> int:
        return self._fd if self._fd is not None else -1

    def _spun(self, rows: list[tuple[int, ...]]) -> None:
        """Completions the loop's busy-poll took from this QP's CQ: kept for ``poll``."""
        self._leftover.extend(self._completion(*row) for row in rows)
        self._stats["completions"] += len(rows)
        self._stats["spin_hits"] += 1

    def _tick(self) -> None:
        self._timer = None
        if self._state == "closed":
            return
        if self._sends or self._recvs or self._leftover:
            self._notify()
        self._timer = self._loop.call_later(_POLL_FALLBACK_S, self._tick)

    # -- BackendQp -----------------------------------------------------------------------

    def address(self) -> QpAddress:
        e = self._entry
        return QpAddress(transport=Transport.ROCE, gid=e.gid, qpn=self.qpn, psn=self.psn,
                         mtu_bytes=self._backend.mtu_bytes, gid_index=e.index,
                         gid_type="RoCEv2", device=e.device, netdev=e.netdev)

    async def connect(self, remote: QpAddress, mtu_bytes: int,
                      stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
                      ) -> None:
        self._check_open("connect")
        if self.qp_type == QpType.UD:
            return  # a UD QP is ready since creation; each SEND names its destination
        local = self.address()
        if remote.transport != Transport.ROCE:
            raise ExchangeMismatch(f"QP {self.qpn}: the peer speaks {remote.transport}, "
                                   f"this side RoCEv2 ({self._entry.device})")
        if remote.gid_type and remote.gid_type != "RoCEv2":
            raise ExchangeMismatch(f"QP {self.qpn}: GID types differ (local RoCEv2, remote "
                                   f"{remote.gid_type})")
        try:
            dgid = ipaddress.IPv6Address(remote.gid)
        except ValueError as exc:
            raise ExchangeMismatch(f"QP {self.qpn}: the peer's GID {remote.gid!r} is not a "
                                   f"GID") from exc
        local_v4 = ipaddress.IPv6Address(local.gid).ipv4_mapped is not None
        if (dgid.ipv4_mapped is not None) != local_v4:
            raise ExchangeMismatch(f"QP {self.qpn}: address families differ (local GID "
                                   f"{local.gid}, remote GID {remote.gid})",
                                   hint="both sides need IPv4-mapped RoCEv2 GIDs, or both "
                                        "IPv6 ones")
        if mtu_bytes not in IB_MTUS_BYTES or mtu_bytes > local.mtu_bytes:
            raise ExchangeMismatch(f"QP {self.qpn}: path MTU {mtu_bytes} is not usable here "
                                   f"(local MTU {local.mtu_bytes}, remote {remote.mtu_bytes})")
        if not 0 <= remote.qpn < 1 << 24 or not 0 <= remote.psn < 1 << 24:
            raise ExchangeMismatch(f"QP {self.qpn}: the peer's QPN {remote.qpn} or PSN "
                                   f"{remote.psn} does not fit 24 bits")
        pv, o = self._pv, self._options
        try:
            gr = pv.addr.GlobalRoute(dgid=pv.addr.GID(dgid.exploded),
                                     sgid_index=self._entry.index, hop_limit=64,
                                     traffic_class=o.traffic_class)
            ah = pv.addr.AHAttr(is_global=1, port_num=self._entry.port, gr=gr)
            attr = pv.qp.QPAttr(port_num=self._entry.port, path_mtu=mtu_enum(mtu_bytes))
            attr.ah_attr = ah
            attr.dest_qp_num = remote.qpn
            attr.rq_psn = remote.psn
            attr.max_dest_rd_atomic = self._rd_atomic
            attr.min_rnr_timer = o.min_rnr_timer
            attr.timeout = o.timeout
            attr.retry_cnt = (6 if o.retry_count == 7 and self._backend.retry_forever_at_7
                              else o.retry_count)
            attr.rnr_retry = o.rnr_retry
            attr.sq_psn = self.psn
            attr.max_rd_atomic = self._rd_atomic
        except (pv.Error, ValueError, OverflowError) as exc:
            raise ConnectFailed(f"QP {self.qpn}: bad attributes towards {remote.gid} QPN "
                                f"{remote.qpn}: {exc}") from exc
        for step, fn in (("RTR", self._qp.to_rtr), ("RTS", self._qp.to_rts)):
            try:
                fn(attr)
            except pv.Error as exc:
                raise ConnectFailed(
                    f"QP {self.qpn}: ibv_modify_qp to {step} towards GID {remote.gid} QPN "
                    f"{remote.qpn} failed: {exc}", errno_value=_errno_of(exc),
                    hint=f"local GID {local.gid} (index {local.gid_index}, "
                         f"{self._entry.device} port {self._entry.port}, {self._entry.netdev}"
                         f"), path MTU {mtu_bytes}, timeout {o.timeout}, retry {o.retry_count}"
                         f", rnr_retry {o.rnr_retry}") from exc
        self._remote = remote
        self._mtu_bytes = mtu_bytes
        self._state = "rts"

    def cm_modify(self, attr: Any, mask: int, step: str) -> None:
        """Move this (RC) QP with attributes rdma_cm gave (``rdma_init_qp_attr``), netio's
        ACK timeout, retry counts and RNR timer in place of the CM's defaults."""
        self._check_open(f"rdma_cm {step}")
        o = self._options
        if step == "RTR":
            attr.min_rnr_timer = o.min_rnr_timer
        elif step == "RTS":
            attr.timeout = o.timeout
            attr.retry_cnt = (6 if o.retry_count == 7 and self._backend.retry_forever_at_7
                              else o.retry_count)
            attr.rnr_retry = o.rnr_retry
            self.psn = int(attr.sq_psn)
        try:
            self._qp.modify(attr, mask)
        except self._pv.Error as exc:
            raise ConnectFailed(f"QP {self.qpn}: ibv_modify_qp to {step} with rdma_cm's "
                                f"attributes failed: {exc}", errno_value=_errno_of(exc),
                                hint=f"local GID {self._entry.gid} (index {self._entry.index}"
                                     f", {self._entry.device} port {self._entry.port})"
                                ) from exc

    def cm_connected(self, remote: QpAddress, mtu_bytes: int) -> None:
        """Record the peer rdma_cm connected this QP to (it is in RTS)."""
        self._remote = remote
        self._mtu_bytes = mtu_bytes
        self._state = "rts"

    @property
    def entry(self) -> GidEntry:
        """The device, port and GID this QP sends from."""
        return self._entry

    def _check_open(self, what: str) -> None:
        if self._state in ("closing", "closed"):
            raise ClosedError(f"QP {self.qpn}: {what} after close")

    def _sges(self, segments: Sequence[Any], wr_id: int) -> list[Any]:
        sges = []
        for i, s in enumerate(segments):
            region = s.region
            if not isinstance(region, VerbsRegion) or region.closed:
                raise RegistrationError(f"work request {wr_id}: segment {i} names a region "
                                        f"that is not registered with this verbs backend")
            if s.offset < 0 or s.length < 0 or s.offset + s.length > region.length:
                raise RegistrationError(f"work request {wr_id}: segment {i} (offset "
                                        f"{s.offset}, length {s.length}) is outside its region"
                                        f" of {region.length} bytes")
            sges.append((region.addr + s.offset, s.length, region.lkey))
        return sges

    def _check_send(self, r: SendRequest) -> list[Any]:
        if r.opcode not in _SEND_OPCODES:
            raise RoceError(f"work request {r.wr_id}: opcode {r.opcode!r} is not supported")
        if r.opcode not in _ALLOWED[self.qp_type]:
            raise RoceError(f"work request {r.wr_id}: {r.opcode.name} is not available on a "
                            f"{self.qp_type.name} QP (IBTA 9.4: operations by service type)")
        if self.qp_type == QpType.UD:
            if r.ud is None:
                raise RoceError(f"work request {r.wr_id}: a UD SEND needs its destination "
                                f"(SendRequest.ud: GID, QPN, Q_Key)")
            if r.length_bytes > self._backend.mtu_bytes:
                raise RoceError(f"work request {r.wr_id}: {r.length_bytes} bytes in one "
                                f"datagram, the path MTU is {self._backend.mtu_bytes}")
        if not 0 <= r.wr_id < 1 << 64:
            raise RoceError(f"work request {r.wr_id}: wr_id does not fit 64 bits")
        if (r.imm_data is not None) != (r.opcode in _WITH_IMM):
            raise RoceError(f"work request {r.wr_id}: immediate data goes with "
                            f"SEND_WITH_IMM and RDMA_WRITE_WITH_IMM only, and they need it")
        if r.imm_data is not None and not 0 <= r.imm_data < 1 << 32:
            raise RoceError(f"work request {r.wr_id}: immediate data {r.imm_data} does not "
                            f"fit 32 bits")
        if len(r.segments) > self._max_sge:
            raise RoceError(f"work request {r.wr_id}: {len(r.segments)} segments, this QP "
                            f"takes {self._max_sge}")
        sges = self._sges(r.segments, r.wr_id)
        if r.opcode in _ATOMICS and (len(r.segments) != 1 or r.segments[0].length != 8):
            raise RoceError(f"work request {r.wr_id}: an atomic needs one 8-byte segment for "
                            f"the original value")
        if r.opcode in _ATOMICS and r.remote_addr % 8:
            raise RoceError(f"work request {r.wr_id}: atomic at remote address "
                            f"{r.remote_addr:#x}, which is not 8-byte aligned (IBTA 9.4.5; "
                            f"rdma-core refuses it at post time)")
        if r.opcode == WrOpcode.RDMA_READ and r.inline:
            raise RoceError(f"work request {r.wr_id}: RDMA READ cannot be inline")
        if r.inline and r.length_bytes > self._options.max_inline_bytes:
            raise RoceError(f"work request {r.wr_id}: {r.length_bytes} bytes inline, this QP "
                            f"takes {self._options.max_inline_bytes} (QpOptions."
                            f"max_inline_bytes)")
        if r.opcode in _REMOTE and not 0 <= r.remote_addr < 1 << 64:
            raise RoceError(f"work request {r.wr_id}: remote address {r.remote_addr} does "
                            f"not fit 64 bits")
        return sges

    def post_send(self, requests: Sequence[SendRequest]) -> None:
        self._check_open("post_send")
        if not requests:
            return
        checked = [self._check_send(r) for r in requests]
        room = self._options.max_send_wr - len(self._sends)
        if len(requests) > room:
            raise RoceError(f"QP {self.qpn}: send queue full: {len(self._sends)} of "
                            f"{self._options.max_send_wr} posted and not completed, "
                            f"{len(requests)} more asked (unsignaled requests stay until a "
                            f"later signaled one completes)")
        if self._native is not None and self.qp_type != QpType.UD:
            self._post_send_native(self._native, requests, checked)
            return
        pv = self._pv
        owned: list[Any] = []  # every pyverbs SGE/SendWR made here: freed exactly once
        try:
            wrs = []
            for r, sges in zip(requests, checked, strict=True):
                objs = [pv.wr.SGE(*sge) for sge in sges] or [pv.wr.SGE(0, 0, 0)]
                owned.extend(objs)
                flags = (_SEND_SIGNALED if r.signaled else 0) | (_SEND_INLINE if r.inline
                                                                 else 0)
                imm = socket.htonl(r.imm_data) if r.imm_data is not None else 0
                wr = pv.wr.SendWR(wr_id=r.wr_id, opcode=int(r.opcode), num_sge=len(objs),
                                  sg=objs, imm_data=imm, send_flags=flags)
                owned.append(wr)
                if not sges:
                    wr.num_sge = 0
                if r.ud is not None and self.qp_type == QpType.UD:
                    wr.set_wr_ud(self._ah(r.ud.gid), r.ud.qpn, r.ud.qkey)
                elif r.opcode in _ATOMICS:
                    wr.set_wr_atomic(r.rkey, r.remote_addr, r.compare_add, r.swap)
                elif r.opcode in _REMOTE:
                    wr.set_wr_rdma(r.rkey, r.remote_addr)
                wrs.append(wr)
            for a, b in itertools.pairwise(wrs):
                a.next_wr = b
            try:
                self._qp.post_send(wrs[0])
            except pv.Error as exc:
                raise _verbs_error("ibv_post_send", exc, f"QP {self.qpn}: posting "
                                   f"{len(requests)} requests failed (none, or a prefix, "
                                   f"was posted)", hint=f"QP state {self._state}, "
                                   f"{len(self._sends)} sends outstanding") from exc
        finally:
            for obj in owned:
                obj.close()  # pyverbs 44 frees SGE/WR memory only in close()
        for r in requests:
            self._sends.append(_Posted(r.wr_id, _SEND_OPCODES[r.opcode]))
        self._stats["sends_posted"] += len(requests)

    def _post_send_native(self, native: NativeQp, requests: Sequence[SendRequest],
                          checked: list[list[Any]]) -> None:
        """One ``ibv_post_send`` of the batch built in C from flat lists."""
        flat = [sge for sges in checked for sge in sges]
        try:
            rc, bad = native.post_send(
                [r.wr_id for r in requests], [int(r.opcode) for r in requests],
                [(_SEND_SIGNALED if r.signaled else 0) | (_SEND_INLINE if r.inline else 0)
                 for r in requests],
                [r.remote_addr for r in requests], [r.rkey for r in requests],
                [socket.htonl(r.imm_data) if r.imm_data is not None else 0
                 for r in requests],
                [r.compare_add for r in requests], [r.swap for r in requests],
                [len(sges) for sges in checked], [s[0] for s in flat], [s[1] for s in flat],
                [s[2] for s in flat])
        except OverflowError as exc:
            raise RoceError(f"QP {self.qpn}: a work request field does not fit its ibverbs "
                            f"type (rkey 32 bits, compare/swap 64 bits): {exc}") from exc
        # the requests before the first bad one were posted: their completions will come
        posted = len(requests) if rc == 0 else bad
        for r in requests[:posted]:
            self._sends.append(_Posted(r.wr_id, _SEND_OPCODES[r.opcode]))
        self._stats["sends_posted"] += posted
        if rc:
            raise VerbsError("ibv_post_send", f"QP {self.qpn}: request {bad} of "
                             f"{len(requests)} (wr_id {requests[bad].wr_id}) refused: "
                             f"{os.strerror(rc)}; the {bad} before it were posted",
                             errno_value=rc, hint=f"QP state {self._state}, "
                             f"{len(self._sends)} sends outstanding")

    def post_recv(self, requests: Sequence[RecvRequest]) -> None:
        self._check_open("post_recv")
        if not requests:
            return
        for r in requests:
            if len(r.segments) > self._max_sge:
                raise RoceError(f"receive {r.wr_id}: {len(r.segments)} segments, this QP "
                                f"takes {self._max_sge}")
        checked = [self._sges(r.segments, r.wr_id) for r in requests]
        if len(requests) > self._options.max_recv_wr - len(self._recvs):
            raise RoceError(f"QP {self.qpn}: receive queue full: {len(self._recvs)} of "
                            f"{self._options.max_recv_wr} posted, {len(requests)} more asked")
        if self._native is not None:
            flat = [sge for sges in checked for sge in sges]
            rc, bad = self._native.post_recv(
                [r.wr_id for r in requests], [len(sges) for sges in checked],
                [s[0] for s in flat], [s[1] for s in flat], [s[2] for s in flat])
            posted = len(requests) if rc == 0 else bad
            self._recvs.extend(r.wr_id for r in requests[:posted])
            self._stats["recvs_posted"] += posted
            if rc:
                raise VerbsError("ibv_post_recv", f"QP {self.qpn}: receive {bad} of "
                                 f"{len(requests)} (wr_id {requests[bad].wr_id}) refused: "
                                 f"{os.strerror(rc)}; the {bad} before it were posted",
                                 errno_value=rc)
            return
        pv = self._pv
        owned: list[Any] = []
        try:
            wrs = []
            for r, sges in zip(requests, checked, strict=True):
                objs = [pv.wr.SGE(*sge) for sge in sges] or [pv.wr.SGE(0, 0, 0)]
                owned.extend(objs)
                wr = pv.wr.RecvWR(wr_id=r.wr_id, num_sge=len(objs), sg=objs)
                owned.append(wr)
                if not sges:
                    wr.num_sge = 0
                wrs.append(wr)
            for a, b in itertools.pairwise(wrs):
                a.next_wr = b
            try:
                self._qp.post_recv(wrs[0])
            except pv.Error as exc:
                raise _verbs_error("ibv_post_recv", exc, f"QP {self.qpn}: posting "
                                   f"{len(requests)} receives failed") from exc
        finally:
            for obj in owned:
                obj.close()
        self._recvs.extend(r.wr_id for r in requests)
        self._stats["recvs_posted"] += len(requests)

    # -- one call per step: post and busy-poll (the latency path) ----------------------------

    @property
    def max_inline_bytes(self) -> int:
        """The most bytes one request may carry inline (``QpOptions.max_inline_bytes``)."""
        return self._options.max_inline_bytes

    @property
    def can_exchange(self) -> bool:
        """Whether :meth:`exchange` works here: the native data path, RC or UC."""
        return self._native is not None and self.qp_type != QpType.UD

    def prepare(self, sends: Sequence[SendRequest] = (),
                recvs: Sequence[RecvRequest] = ()) -> PreparedPost:
        """Check ``sends`` and ``recvs`` as ``post_send``/``post_recv`` do, once, and keep
        them as flat lists for :meth:`exchange`. From then on the completions of their
        wr_ids belong to ``exchange``: ``poll`` keeps those it comes across for it. Raises
        as those do; RoceError where :attr:`can_exchange` is False."""
        self._check_open("prepare")
        native = self._native
        if native is None or self.qp_type == QpType.UD:
            raise RoceError(f"QP {self.qpn}: exchange needs the native data path on an RC or "
                            f"UC QP ({self.native_why_not or self.qp_type.name})")
        checked = [self._check_send(r) for r in sends]
        for rr in recvs:
            if len(rr.segments) > self._max_sge:
                raise RoceError(f"receive {rr.wr_id}: {len(rr.segments)} segments, this QP "
                                f"takes {self._max_sge}")
        rchecked = [self._sges(rr.segments, rr.wr_id) for rr in recvs]
        for r in sends:
            if not (0 <= r.rkey < 1 << 32 and 0 <= r.compare_add < 1 << 64
                    and 0 <= r.swap < 1 << 64):
                raise RoceError(f"QP {self.qpn}: work request {r.wr_id}: a field does not "
                                f"fit its ibverbs type (rkey 32 bits, compare/swap 64 bits)")
        flat = [sge for sges in checked for sge in sges]
        rflat = [sge for sges in rchecked for sge in sges]
        send = ([r.wr_id for r in sends], [int(r.opcode) for r in sends],
                [(_SEND_SIGNALED if r.signaled else 0) | (_SEND_INLINE if r.inline else 0)
                 for r in sends],
                [r.remote_addr for r in sends], [r.rkey for r in sends],
                [socket.htonl(r.imm_data) if r.imm_data is not None else 0 for r in sends],
                [r.compare_add for r in sends], [r.swap for r in sends],
                [len(sges) for sges in checked], [x[0] for x in flat], [x[1] for x in flat],
                [x[2] for x in flat])
        recv = ([rr.wr_id for rr in recvs], [len(sges) for sges in rchecked],
                [x[0] for x in rflat], [x[1] for x in rflat], [x[2] for x in rflat])
        self._reserved.update(r.wr_id for r in sends)
        self._reserved.update(rr.wr_id for rr in recvs)
        return PreparedPost(native.build(recv if recvs else (), send if sends else ()),
                            tuple(rr.wr_id for rr in recvs),
                            tuple(_Posted(r.wr_id, _SEND_OPCODES[r.opcode]) for r in sends),
                            tuple(sends))

    def exchange(self, prepared: PreparedPost | None, want_wr_id: int,
                 timeout_s: float) -> list[Completion]:
        """Post ``prepared`` (its receives, then its sends; None posts nothing) and busy-poll
        this QP's CQ until the completion of ``want_wr_id`` or an error completion comes,
        all in one call into C (as perftest's loop posts and polls); ``want_wr_id`` 0 only
        posts. Returns every completion polled here, and those of prepared requests that
        ``poll`` kept; without ``want_wr_id``'s among them when ``timeout_s`` passed. The event loop
        does not run meanwhile: this is for a caller that waits for nothing else."""
        self._check_open("exchange")
        native = self._native
        if native is None or self.qp_type == QpType.UD:
            raise RoceError(f"QP {self.qpn}: exchange needs the native data path on an RC or "
                            f"UC QP ({self.native_why_not or self.qp_type.name})")
        if prepared is not None:
            if len(prepared.sends) > self._options.max_send_wr - len(self._sends):
                raise RoceError(f"QP {self.qpn}: send queue full: {len(self._sends)} of "
                                f"{self._options.max_send_wr} posted and not completed, "
                                f"{len(prepared.sends)} more asked")
            if len(prepared.recv_ids) > self._options.max_recv_wr - len(self._recvs):
                raise RoceError(f"QP {self.qpn}: receive queue full: {len(self._recvs)} of "
                                f"{self._options.max_recv_wr} posted, "
                                f"{len(prepared.recv_ids)} more asked")
        deadline = time.monotonic() + timeout_s
        # completions of prepared requests that poll() came across (the loop's own poll
        # between two exchanges): the one waited for may be among them
        out, self._held = self._held, []
        if want_wr_id and any(c.wr_id == want_wr_id or c.status != WcStatus.SUCCESS
                              for c in out):
            want_wr_id = 0
            if prepared is None:
                return out
        rows, rc, which, bad = native.post_poll(
            prepared.native if prepared is not None else None, want_wr_id,
            int(max(0.0, timeout_s) * 1e9))
        if prepared is not None:
            recvs_posted = len(prepared.recv_ids) if rc == 0 or which == 2 else bad
            sends_posted = len(prepared.sends) if rc == 0 else (bad if which == 2 else 0)
            self._recvs.extend(prepared.recv_ids[:recvs_posted])
            self._sends.extend(prepared.sends[:sends_posted])
            self._stats["recvs_posted"] += recvs_posted
            self._stats["sends_posted"] += sends_posted
            if rc:
                call = "ibv_post_recv" if which == 1 else "ibv_post_send"
                ids = prepared.recv_ids if which == 1 else [p.wr_id for p in prepared.sends]
                raise VerbsError(call, f"QP {self.qpn}: request {bad} of {len(ids)} (wr_id "
                                 f"{ids[bad]}) refused: {os.strerror(rc)}; the {bad} before "
                                 f"it were posted", errno_value=rc,
                                 hint=f"QP state {self._state}, {len(self._sends)} sends "
                                      f"outstanding")
        while True:
            if rows is None:
                raise VerbsError("ibv_poll_cq", f"QP {self.qpn}: polling its CQ failed")
            done = [self._completion(*row) for row in rows]
            self._stats["completions"] += len(done)
            out.extend(done)
            if not want_wr_id or any(c.wr_id == want_wr_id or c.status != WcStatus.SUCCESS
                                     for c in done):
                return out
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return out
            rows, _rc, _which, _bad = native.post_poll(None, want_wr_id, int(left_s * 1e9))

    def pingpong(self, recv: RecvRequest, send: SendRequest, *, initiator: bool, count: int,
                 signal_every: int, timeout_s: float) -> tuple[list[int], Completion | None]:
        """A whole ping-pong of ``send`` (one segment) against ``recv`` (one segment) in one
        call into C, as ib_send_lat runs it (``netio_verbs_pingpong``): the initiator posts
        the receive for the answer and its SEND and busy-polls until the answer comes,
        ``count`` times; the other side answers each. One SEND in ``signal_every`` and the
        last are signaled (the last SEND's wr_id is ``send.wr_id + 1``). The QP must have
        nothing else outstanding, except the responder's first receive (``recv``, posted
        with :meth:`exchange` before the peer was told to start). Returns the initiator's
        step durations in ns and the completion that stopped it with an error status (or
        of an unknown wr_id), else None. Raises VerbsError when a post or poll fails,
        Timeout when a wait passes ``timeout_s``."""
        self._check_open("pingpong")
        native = self._native
        if native is None or self.qp_type == QpType.UD:
            raise RoceError(f"QP {self.qpn}: pingpong needs the native data path on an RC or "
                            f"UC QP ({self.native_why_not or self.qp_type.name})")
        sges = self._check_send(send)
        rsges = self._sges(recv.segments, recv.wr_id)
        if len(sges) != 1 or len(rsges) != 1:
            raise RoceError(f"QP {self.qpn}: pingpong takes one segment per request")
        held = [c for c in self._held if c.wr_id == recv.wr_id]
        pre_posted = list(self._recvs) == [recv.wr_id] or bool(held)
        if self._sends or (self._recvs and not pre_posted) or len(held) > 1 or (
                initiator and pre_posted):
            raise RoceError(f"QP {self.qpn}: pingpong needs a quiet QP ({len(self._sends)} "
                            f"sends, {len(self._recvs)} receives outstanding)")
        first = 2 if held else 1 if pre_posted else 0
        if held and held[0].status != WcStatus.SUCCESS:
            return [], held[0]
        self._held = [c for c in self._held if c.wr_id != recv.wr_id]
        self._recvs.clear()
        last_id = (send.wr_id + 1) & 0xFFFF_FFFF_FFFF_FFFF
        self._reserved.update((recv.wr_id, send.wr_id, last_id))
        flags = _SEND_INLINE if send.inline else 0
        rc, steps_ns, _done, post_rc, bad = native.pingpong(
            initiator, first, count, signal_every, (recv.wr_id, *rsges[0]),
            (send.wr_id, last_id, int(send.opcode), flags, *sges[0]),
            int(max(0.0, timeout_s) * 1e9))
        self._stats["sends_posted"] += count
        self._stats["recvs_posted"] += count
        if rc == -1:
            raise VerbsError("ibv_poll_cq", f"QP {self.qpn}: polling its CQ failed")
        if rc == -2:
            raise VerbsError("ibv_post_send", f"QP {self.qpn}: a ping-pong post was refused: "
                             f"{os.strerror(post_rc)}", errno_value=post_rc,
                             hint=f"QP state {self._state}")
        if rc == -3:
            raise Timeout(f"QP {self.qpn}: ping-pong (busy-polled)", timeout_s)
        if bad is not None:
            self._stats["error_completions"] += 1
            opcode = WcOpcode.RECV if bad[0] == recv.wr_id else _SEND_OPCODES[send.opcode]
            return steps_ns, Completion(bad[0], _WC_STATUS.get(bad[1], WcStatus.GENERAL_ERR),
                                        opcode, bad[5])
        return steps_ns, None

    def _ah(self, gid: str) -> Any:
        """The address handle for a UD destination GID (made once per GID)."""
        ah = self._ahs.get(gid)
        if ah is not None:
            return ah
        pv = self._pv
        try:
            dgid = ipaddress.IPv6Address(gid)
            gr = pv.addr.GlobalRoute(dgid=pv.addr.GID(dgid.exploded),
                                     sgid_index=self._entry.index, hop_limit=64,
                                     traffic_class=self._options.traffic_class)
            attr = pv.addr.AHAttr(is_global=1, port_num=self._entry.port, gr=gr)
            ah = pv.addr.AH(self._backend._pd, attr=attr)
        except ValueError as exc:
            raise RoceError(f"UD destination GID {gid!r} is not a GID") from exc
        except pv.Error as exc:
            raise _verbs_error("ibv_create_ah", exc, f"no address handle towards GID {gid}",
                               hint=f"local GID {self._entry.gid} (index {self._entry.index},"
                                    f" {self._entry.netdev})") from exc
        self._ahs[gid] = ah
        return ah

    def _retire_send(self, wr_id: int) -> WcOpcode | None:
        """Drop every send up to and including ``wr_id`` (a send completion retires the
        unsignaled requests before it); its opcode, None when it is not outstanding."""
        if not any(p.wr_id == wr_id for p in self._sends):
            return None
        while self._sends:
            p = self._sends.popleft()
            if p.wr_id == wr_id:
                return p.opcode
        return None

    def _retire_recv(self, wr_id: int) -> bool:
        if self._recvs and self._recvs[0] == wr_id:
            self._recvs.popleft()
            return True
        try:
            self._recvs.remove(wr_id)
        except ValueError:
            return False
        return True

    def _completion(self, wr_id: int, status_value: int, opcode_value: int, byte_len: int,
                    imm_be: int, qp_num: int, src_qp: int, wc_flags: int) -> Completion:
        """A completion from the fields of a ``struct ibv_wc`` (immediate data in network
        byte order, as the struct holds it)."""
        status = _WC_STATUS.get(status_value)
        if status is None:
            status = WcStatus(status_value)  # raises ValueError naming an unknown status
        if status == WcStatus.SUCCESS:
            opcode = _WC_OPCODE.get(opcode_value)
            if opcode is None:
                opcode = WcOpcode(opcode_value)
            if opcode >= WcOpcode.RECV:
                self._retire_recv(wr_id)
            else:
                self._retire_send(wr_id)
            flags = _WC_FLAGS[wc_flags & _WC_FLAG_MASK]
            imm = socket.ntohl(imm_be) if wc_flags & _WC_WITH_IMM else None
            return Completion(wr_id, status, opcode, qp_num, byte_len, imm, src_qp, flags)
        # error completions carry only wr_id, status and qp_num: the opcode is ours
        send_op = self._retire_send(wr_id)
        if send_op is not None:
            opcode = send_op
        elif self._retire_recv(wr_id):
            opcode = WcOpcode.RECV
        else:
            opcode = WcOpcode.SEND
        self._stats["error_completions"] += 1
        return Completion(wr_id, status, opcode, qp_num)

    def _poll_cq(self, max_entries: int) -> list[Completion]:
        if self._native is not None:
            rows = self._native.poll(max_entries)
            if rows is None:
                raise VerbsError("ibv_poll_cq", f"QP {self.qpn}: polling its CQ failed")
            out = [self._completion(*row) for row in rows]
            self._stats["completions"] += len(out)
            return out
        try:
            _n, wcs = self._cq.poll(max_entries)
        except self._pv.Error as exc:
            raise _verbs_error("ibv_poll_cq", exc, f"QP {self.qpn}: polling its CQ") from exc
        out = [self._completion(int(wc.wr_id), wc.status, wc.opcode, int(wc.byte_len),
                                wc.imm_data, int(wc.qp_num), int(wc.src_qp), wc.wc_flags)
               for wc in wcs]
        self._stats["completions"] += len(out)
        return out

    def poll(self, max_entries: int) -> list[Completion]:
        out: list[Completion] = []
        if self._leftover:
            out, self._leftover = self._leftover[:max_entries], self._leftover[max_entries:]
        if len(out) < max_entries and self._state != "closed":
            out.extend(self._poll_cq(max_entries - len(out)))
        if len(out) == max_entries and self._state != "closed":
            # there may be more: a channel event will not come for completions already queued
            self._loop.call_soon(self._notify)
        if self._reserved:
            # completions of prepared requests belong to exchange(), not to the caller
            self._held.extend(c for c in out if c.wr_id in self._reserved)
            out = [c for c in out if c.wr_id not in self._reserved]
        return out

    def diagnosis(self) -> str:
        """Always "": the kernel does not say why its responder refused a request (the
        port's hw_counters in ``counters()`` count some of the reasons)."""
        return ""

    def counters(self) -> dict[str, int]:
        out = dict(self._stats)
        out["sends_outstanding"] = len(self._sends)
        out["recvs_outstanding"] = len(self._recvs)
        hw = Path(self._backend.sysfs_root) / "class" / "infiniband" / self._entry.device / \
            "ports" / str(self._entry.port) / "hw_counters"
        if hw.is_dir():  # device-wide: rxe and most RoCE NICs count per port, not per QP
            for f in sorted(hw.iterdir()):
                with contextlib.suppress(OSError, ValueError):
                    out[f"port_{f.name}"] = int(f.read_text().strip())
        return out

    async def close(self) -> None:
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        pv = self._pv
        with contextlib.suppress(pv.Error):  # a failure here: destroying still releases
            self._qp.modify(pv.qp.QPAttr(qp_state=_QPS_ERR), _QP_STATE)
        # outstanding requests complete with WR_FLUSH_ERR: collect them (bounded)
        deadline = time.monotonic() + _CLOSE_DRAIN_S
        while self._sends or self._recvs:
            try:
                self._leftover.extend(self._poll_cq(256))
            except VerbsError:
                break
            if not (self._sends or self._recvs) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.002)
        self._destroy()
        self._state = "closed"
        self._backend._forget(self)
        if self._leftover:
            self._notify()

    def _destroy(self) -> None:
        self._native = None  # its pointers die with the pyverbs QP and CQ below
        spinner = getattr(self, "_spinner", None)  # None when __init__ failed early
        if spinner is not None:
            with contextlib.suppress(ValueError):
                spinner.qps.remove(self)
            self._spinner = None
        if self._fd is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
            self._fd = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for ah in self._ahs.values():
            with contextlib.suppress(Exception):
                ah.close()
        self._ahs.clear()
        for name in ("_qp", "_cq", "_channel"):
            obj = getattr(self, name, None)
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self._sends.clear()
        self._recvs.clear()

    def __repr__(self) -> str:
        return (f"VerbsQp(qpn={self.qpn}, {self._entry.device} gid[{self._entry.index}] "
                f"{self._entry.gid}, state={self._state})")


class VerbsBackend:
    """The verbs ``Backend``: one device context and protection domain.

    ``VerbsBackend(peer_ip=...)`` chooses the device, port and GID for that peer;
    ``device``, ``port``, ``gid_index``/``gid``, ``local_addr`` (the local IP: its GID)
    and ``mtu_bytes`` narrow the choice. Each QP then takes the GID of the local address
    its exchange connection uses (``create_qp(local_ip)``).
    ``sysfs_root`` and ``route_lookup`` are there for tests. Raises
    :class:`BackendUnavailable` (no pyverbs) or :class:`DeviceNotFound` (with every
    candidate's reason and how to get a device)."""

    name = "verbs"
    transport = Transport.ROCE

    def __init__(self, *, device: str | None = None, port: int | None = None,
                 gid_index: int | None = None, gid: str | None = None,
                 peer_ip: str | None = None, local_addr: str | None = None,
                 mtu_bytes: int | None = None, sysfs_root: str | Path = "/sys",
                 route_lookup: RouteLookup = kernel_route) -> None:
        self._pv = pv = _pyverbs()
        self.sysfs_root = Path(sysfs_root)
        self._filters: dict[str, Any] = {"device": device, "port": port,
                                         "gid_index": gid_index, "gid": gid,
                                         "mtu_bytes": mtu_bytes}
        self._route_lookup = route_lookup
        self._qps: list[VerbsQp] = []
        self._regions: list[VerbsRegion] = []
        self._registered_bytes = 0
        self._closed = False
        self._ctx: Any = None
        self._pd: Any = None
        try:
            names = [d.name.decode() for d in pv.device.get_device_list()]
        except pv.Error:  # ibv_get_device_list fails when the kernel has no uverbs at all
            names = []
        route = route_lookup(peer_ip) if peer_ip else None
        self._desc, self._entries = self._choose(peer_ip, route, local_addr or None)
        if not names or not self._desc.device:
            raise DeviceNotFound(
                "no usable RDMA device" + (f" for peer {peer_ip}" if peer_ip else "")
                + (f" (devices: {', '.join(names)})" if names else " (ibv_get_device_list "
                   "finds none)"), hint=no_device_hint(self._desc, self.sysfs_root, route))
        try:
            self._ctx = pv.device.Context(name=self._desc.device)
            self._pd = pv.pd.PD(self._ctx)
            attr = self._ctx.query_device()
        except pv.Error as exc:
            self._release()
            raise _verbs_error("ibv_open_device", exc, f"cannot open {self._desc.device}",
                               hint="is /dev/infiniband/uverbs* readable and writable? "
                                    "(ls -l /dev/infiniband)") from exc
        self._max_sge = int(attr.max_sge)
        # The kernel's rxe (vendor 0xFFFFFF) treats retry_cnt 7 like rnr_retry 7, as "retry
        # for ever" (rxe_comp.c), where IBTA and NICs retry 7 times: a vanished peer then
        # never ends in RETRY_EXC_ERR. On rxe, 7 becomes 6 (measured in the lab: 6 ends in
        # 0.5 s at timeout 14, 7 never does).
        self.retry_forever_at_7 = int(attr.vendor_id) == _RXE_VENDOR_ID
        if self.retry_forever_at_7:
            self._desc = dataclasses.replace(self._desc, notes=(
                *self._desc.notes, f"{self._desc.device} is the kernel's rxe, which retries "
                "for ever at retry_count 7: netio uses 6 there"))
        self._rd_atomic = max(1, min(_MAX_RD_ATOMIC, int(attr.max_qp_rd_atom),
                                     int(attr.max_qp_init_rd_atom)))

    def _port_mtu(self, device: str, port: int) -> int | None:
        """The port's active MTU from ``ibv_query_port`` (None when it cannot be asked)."""
        if self._ctx is not None and device == self._desc.device:
            ctx = self._ctx
        else:
            return None
        try:
            return mtu_bytes_of(int(ctx.query_port(port).active_mtu))
        except self._pv.Error:
            return None

    def _choose(self, peer_ip: str | None, route: Route | None,
                local_ip: str | None) -> tuple[Description, list[GidEntry]]:
        port_mtu = self._port_mtu if self._ctx is not None else None
        entries = read_gid_table(self.sysfs_root, port_mtu=port_mtu)
        f = self._filters
        desc = choose(entries, peer_ip, route=route, device=f["device"], port=f["port"],
                      gid_index=f["gid_index"], gid=f["gid"], mtu_bytes=f["mtu_bytes"],
                      local_ip=local_ip)
        return desc, entries

    @property
    def mtu_bytes(self) -> int:
        """The path MTU this side offers: the chosen port's active MTU."""
        return self._desc.mtu_bytes

    def describe(self) -> Description:
        return self._desc

    def describe_for(self, peer_ip: str | None) -> Description:
        """The choice this backend's device would make for ``peer_ip`` (asks the kernel
        for the route now)."""
        route = self._route_lookup(peer_ip) if peer_ip else None
        desc, _ = self._choose(peer_ip, route, None)
        return desc

    def register(self, view: memoryview, access: Access) -> VerbsRegion:
        self._check_open("register")
        if view.readonly:
            raise RegistrationError("cannot register a read-only buffer (bytes, a read-only "
                                    "memoryview): pass a bytearray, numpy array or mmap")
        if not view.c_contiguous:
            raise RegistrationError("cannot register a non-contiguous buffer (a strided "
                                    "slice): register the whole array")
        if view.nbytes == 0:
            raise RegistrationError("cannot register an empty buffer (ibv_reg_mr needs at "
                                    "least one byte)")
        if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not (
                access & Access.LOCAL_WRITE):
            raise RegistrationError(f"access {access!r}: REMOTE_WRITE and REMOTE_ATOMIC need "
                                    f"LOCAL_WRITE too (an ibv_reg_mr rule)")
        flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view[:]
        try:
            anchor = (ctypes.c_char * flat.nbytes).from_buffer(flat)
        except (TypeError, ValueError) as exc:
            flat.release()
            raise RegistrationError(f"cannot take the address of this buffer: {exc}") from exc
        addr = ctypes.addressof(anchor)
        length = flat.nbytes
        try:
            mr = self._pv.mr.MR(self._pd, length, int(access), address=addr)
        except self._pv.Error as exc:
            del anchor
            flat.release()
            raise self._registration_error(exc, length, access) from exc
        region = VerbsRegion(mr, anchor, flat, addr, length, access)
        self._regions.append(region)
        self._registered_bytes += length
        return region

    def _registration_error(self, exc: BaseException, length: int,
                            access: Access) -> Exception:
        code = _errno_of(exc)
        where = (f"ibv_reg_mr of {length} bytes (access {access!r}) on {self._desc.device}; "
                 f"{self._registered_bytes} bytes registered so far")
        if code in (errno_mod.ENOMEM, errno_mod.EAGAIN, errno_mod.EPERM):
            soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
            if soft != resource.RLIM_INFINITY:
                return RegistrationLimit(
                    f"{where}: the locked-memory limit is reached", errno_value=code,
                    hint=f"{memlock_text()}: raise it (ulimit -l unlimited in the shell, "
                         f"LimitMEMLOCK=infinity in a systemd unit, 'memlock' in "
                         f"/etc/security/limits.conf, or --ulimit memlock=-1 for docker)")
        return VerbsError("ibv_reg_mr", f"{where}: {exc}", errno_value=code,
                          hint=memlock_text())

    def deregister(self, region: Any) -> None:
        if not isinstance(region, VerbsRegion):
            raise RegistrationError(f"{region!r} was not registered by this verbs backend")
        if region.closed:
            return
        try:
            region._close()
        except self._pv.Error as exc:
            raise _verbs_error("ibv_dereg_mr", exc, f"cannot deregister {region!r}",
                               hint="a memory window may still be bound to it") from exc
        finally:
            if region in self._regions:
                self._regions.remove(region)
                self._registered_bytes -= region.length

    async def create_qp(self, local_ip: str, options: QpOptions, notify: Notify,
                        qp_type: QpType = QpType.RC, psn: int | None = None) -> VerbsQp:
        self._check_open("create_qp")
        entry = self._entry_for(local_ip)
        qp = VerbsQp(self, options, notify, entry, asyncio.get_running_loop(), qp_type, psn)
        self._qps.append(qp)
        return qp

    def _entry_for(self, local_ip: str) -> GidEntry:
        """The GID entry for a QP whose traffic leaves from ``local_ip`` (the chosen one
        when ``local_ip`` is empty, a wildcard or loopback)."""
        chosen = self._desc
        addr = ipaddress.ip_address(local_ip) if local_ip else None
        # loopback (both ends on this host): the chosen GID, which the device loops back
        if addr is not None and not addr.is_unspecified and not addr.is_loopback:
            desc, entries = self._choose(None, None, local_ip)
            if not desc.device:
                raise DeviceNotFound(f"no RoCEv2 GID for the local address {local_ip} on "
                                     f"{self._desc.device}",
                                     hint=no_device_hint(desc, self.sysfs_root))
            self._desc = desc
            self._entries = entries
            chosen = desc
        for e in self._entries:
            if (e.device, e.port, e.index) == (chosen.device, chosen.port, chosen.gid_index):
                return e
        raise DeviceNotFound(f"GID index {chosen.gid_index} of {chosen.device} disappeared",
                             hint="the netdev's address changed: open the context again")

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClosedError(f"verbs backend ({self._desc.device}): {what} after close")

    def qp_for(self, qpn: int) -> VerbsQp | None:
        """This backend's open QP with number ``qpn`` (an endpoint's ``address.qpn``)."""
        return next((qp for qp in self._qps if qp.qpn == qpn), None)

    def _forget(self, qp: VerbsQp) -> None:
        if qp in self._qps:
            self._qps.remove(qp)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for qp in list(self._qps):
            await qp.close()
        self._release()

    def _release(self) -> None:
        for region in list(self._regions):
            with contextlib.suppress(Exception):
                region._close()
        self._regions.clear()
        for obj in (self._pd, self._ctx):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self._pd = self._ctx = None


def query_port_mtu() -> PortMtu | None:
    """A ``port_mtu(device, port)`` that asks ``ibv_query_port`` for the active MTU (each
    device opened briefly); None when pyverbs cannot be imported."""
    try:
        pv = _pyverbs()
    except BackendUnavailable:
        return None

    def port_mtu(device: str, port: int) -> int | None:
        try:
            ctx = pv.device.Context(name=device)
        except pv.Error:
            return None
        try:
            return mtu_bytes_of(int(ctx.query_port(port).active_mtu))
        except pv.Error:
            return None
        finally:
            with contextlib.suppress(Exception):
                ctx.close()

    return port_mtu


def describe_host(peer_ip: str | None = None, *, sysfs_root: str | Path = "/sys",
                  route_lookup: RouteLookup = kernel_route, device: str | None = None,
                  port: int | None = None, gid_index: int | None = None,
                  mtu_bytes: int | None = None, port_mtu: PortMtu | None = None
                  ) -> tuple[Description, Route | None]:
    """The choice the verbs backend would make for ``peer_ip``, from sysfs and the kernel's
    route (and ``port_mtu``, e.g. :func:`query_port_mtu`; without it the MTU is derived
    from the netdev's): what ``netio doctor`` prints. Opens nothing itself."""
    route = route_lookup(peer_ip) if peer_ip else None
    entries = read_gid_table(sysfs_root, port_mtu=port_mtu)
    desc = choose(entries, peer_ip, route=route, device=device, port=port,
                  gid_index=gid_index, mtu_bytes=mtu_bytes)
    return desc, route


__all__ = [
    "SPIN_ENV",
    "PreparedPost",
    "VerbsBackend",
    "VerbsQp",
    "VerbsRegion",
    "describe_host",
    "memlock_text",
    "mtu_bytes_of",
    "mtu_enum",
    "query_port_mtu",
]
