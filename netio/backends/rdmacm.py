"""rdma_cm connections for the verbs backend: ``ctx.connect(addr, cm="rdma_cm")`` and
``ctx.listen(addr, cm="rdma_cm")``.

librdmacm (through pyverbs ``CMID``) resolves the address and route, and carries the
IB CM's REQ/REP/RTU (and DREQ/DREP) exchange; the QP is the backend's own
(:class:`netio.backends.verbs.VerbsQp`, on the context's protection domain, so every
registered region works), moved to RTR and RTS with the attributes the CM gives
(``rdma_init_qp_attr``): an "external QP" in librdmacm's terms. The REQ carries the
QP's number (``rdma_conn_param.qp_num``); the CM picks the start PSNs. netio's ACK
timeout, retry counts and RNR timer replace the CM's defaults, as with netio's own
exchange.

Private data: a netio peer puts ``NIO1`` and its largest path MTU (big-endian 16 bits)
in the REQ; a netio listener answers with the agreed MTU in the REP, or gives the
reason it refuses in the REJ. A peer without that prefix (``rping``, ``ucmatose``)
gets the path MTU the CM resolved, capped by ``netio.open(mtu=...)``.

Events come through a ``CMEventChannel`` whose file descriptor is made non-blocking
and watched by the event loop (pyverbs 44 does not expose it: it is found as the
``/dev/infiniband/rdma_cm`` descriptor that creating the channel opened). Every step
is bounded by the context's ``timeout_s`` and named in :class:`netio.Timeout`.

Known limit: pyverbs 44's ``CMEvent`` does not say which ``rdma_cm_id`` an event is
for, and every connection a listener accepts reports on the listener's channel. The
listener therefore accepts one request at a time (so ESTABLISHED and connect errors
belong to the request in progress), and a DISCONNECTED event reaches the endpoint only
while the listener has one connection open; with several it is counted in
``listener.errors`` and the endpoint learns of the peer leaving from its next
operation (RETRY_EXC_ERR).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

from netio.api.types import Completion
from netio.backends.base import (
    Backend,
    BackendQp,
    QpAddress,
    QpOptions,
    RecvRequest,
    SendRequest,
    Transport,
)
from netio.backends.gid import IB_MTUS_BYTES
from netio.backends.verbs import VerbsBackend, VerbsQp, mtu_bytes_of, mtu_enum
from netio.errors import (
    BackendUnavailable,
    ConnectFailed,
    IoError,
    NetioError,
    Timeout,
)

if TYPE_CHECKING:
    from netio.api.endpoint import Endpoint

log = logging.getLogger(__name__)


class _Options(Protocol):
    @property
    def timeout_s(self) -> float: ...
    @property
    def qp(self) -> QpOptions: ...


class CmOwner(Protocol):
    """What rdma_cm needs of the context (netio.api.context.Context)."""

    @property
    def backend(self) -> Backend: ...
    @property
    def options(self) -> _Options: ...

    def notifier(self) -> Any: ...

    def adopt_endpoint(self, qp: BackendQp, notify: Any, local: QpAddress,
                       remote: QpAddress, mtu: int, peer: str) -> Endpoint: ...


class ListenerHooks(Protocol):
    """The parts of a ``netio.Listener`` an rdma_cm acceptor feeds."""

    errors: deque[str]
    rejected: int

    def deliver(self, ep: Endpoint) -> bool: ...


class CmEvent(IntEnum):
    """``enum rdma_cm_event_type`` (<rdma/rdma_cma.h>)."""

    ADDR_RESOLVED = 0
    ADDR_ERROR = 1
    ROUTE_RESOLVED = 2
    ROUTE_ERROR = 3
    CONNECT_REQUEST = 4
    CONNECT_RESPONSE = 5
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    DEVICE_REMOVAL = 11
    MULTICAST_JOIN = 12
    MULTICAST_ERROR = 13
    ADDR_CHANGE = 14
    TIMEWAIT_EXIT = 15


_RDMA_PS_TCP = 0x0106  # enum rdma_port_space: RC connections
_RAI_PASSIVE = 1
_QPS_RTR = 2  # enum ibv_qp_state
_QPS_RTS = 3
_CM_FD_LINK = "/dev/infiniband/rdma_cm"
_MAGIC = b"NIO1"
_HELLO = struct.Struct(">4sH")  # magic, path MTU in bytes
_REJ_DATA_BYTES = 148  # IB CM REJ private data
_BACKLOG = 16
_EXTRA_CM_MS = 1000  # the CM's own timeout runs past ours: netio's Timeout names the step


@dataclass(frozen=True, slots=True)
class _Event:
    kind: int
    text: str
    private_data: bytes
    child: Any  # the new CMID of a CONNECT_REQUEST on a listener, else None


class _Cm:
    """pyverbs' rdma_cm modules, imported when first needed."""

    def __init__(self) -> None:
        try:
            import pyverbs.cmid as cmid
            from pyverbs.pyverbs_error import PyverbsError
        except ImportError as exc:
            raise BackendUnavailable(f"rdma_cm needs pyverbs.cmid: {exc}",
                                     hint="apt-get install python3-pyverbs librdmacm1, then "
                                          "make install") from exc
        self.cmid = cmid
        self.Error: type[Exception] = PyverbsError


_CM: _Cm | None = None


def _cm() -> _Cm:
    global _CM
    if _CM is None:
        _CM = _Cm()
    return _CM


def _errno_of(exc: BaseException) -> int:
    code = getattr(exc, "error_code", 0)
    return code if isinstance(code, int) and code > 0 else 0


def _cm_fds() -> set[int]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == _CM_FD_LINK:
                found.add(int(name))
    return found


class _Channel:
    """An rdma_cm event channel on the loop: each event is read, acknowledged and handed
    to ``on_event`` (a CONNECT_REQUEST on a listener first becomes a child CMID)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[[_Event], None]) -> None:
        cm = _cm()
        self._cm = cm
        self._loop = loop
        self.on_event = on_event
        self.listen_id: Any = None
        before = _cm_fds()
        try:
            self.raw = cm.cmid.CMEventChannel()
        except cm.Error as exc:
            raise ConnectFailed(f"rdma_create_event_channel failed: {exc}",
                                errno_value=_errno_of(exc),
                                hint="is the rdma_ucm module loaded (/dev/infiniband/"
                                     "rdma_cm present and writable)?") from exc
        new = _cm_fds() - before
        if len(new) != 1:
            self.raw.close()
            raise BackendUnavailable(f"cannot find the rdma_cm event channel's descriptor "
                                     f"({len(new)} new {_CM_FD_LINK} descriptors)")
        self.fd = new.pop()
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        loop.add_reader(self.fd, self._drain)
        self.closed = False

    def _drain(self) -> None:
        cmid = self._cm.cmid
        while not self.closed:
            try:
                ev = cmid.CMEvent(self.raw)
            except self._cm.Error:  # EAGAIN: nothing more (the fd is non-blocking)
                return
            kind = int(ev.event_type)
            text = ev.event_str()
            data = bytes(ev.private_data)
            child = None
            try:
                if kind == CmEvent.CONNECT_REQUEST and self.listen_id is not None:
                    child = cmid.CMID(ev, listen_id=self.listen_id)
            finally:
                ev.close()  # rdma_ack_cm_event
            try:
                self.on_event(_Event(kind, text, data, child))
            except Exception:  # a handler's failure must not stop the channel
                log.exception("rdma_cm: handling %s", text)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.fd)
        with contextlib.suppress(Exception):
            self.raw.close()


def _netio_mtu(private_data: bytes) -> int | None:
    """The path MTU a netio peer put in its REQ/REP private data (None: not netio)."""
    if len(private_data) < _HELLO.size:
        return None
    magic, mtu = _HELLO.unpack_from(private_data)
    if magic != _MAGIC:
        return None
    return mtu if mtu in IB_MTUS_BYTES else 0


def _reject_reason(private_data: bytes) -> str:
    if private_data.startswith(_MAGIC + b":"):
        return private_data[len(_MAGIC) + 1:].split(b"\0", 1)[0].decode(errors="replace")
    return ""


def _event_error(ev: _Event, step: str, peer: str, host: str) -> ConnectFailed:
    """The netio error for a CM event that ends a connection attempt."""
    kind = ev.kind
    if kind == CmEvent.REJECTED:
        reason = _reject_reason(ev.private_data)
        if reason:
            return ConnectFailed(f"rdma_cm {step} to {peer}: the peer refused: {reason}")
        return ConnectFailed(f"rdma_cm {step} to {peer}: rejected (RDMA_CM_EVENT_REJECTED)",
                             hint="no rdma_cm listener on that port (the peer's CM answers a "
                                  "REQ for an unknown service with a REJ), or its "
                                  "application refused the connection")
    if kind == CmEvent.UNREACHABLE:
        return ConnectFailed(f"rdma_cm {step} to {peer}: unreachable (the CM REQ was not "
                             f"answered)", hint="is the host up with an ACTIVE RDMA port, "
                             "RoCEv2 GIDs on the same subnet, and UDP 4791 not filtered?")
    if kind in (CmEvent.ADDR_ERROR, CmEvent.ROUTE_ERROR):
        what = "address" if kind == CmEvent.ADDR_ERROR else "route"
        return ConnectFailed(f"rdma_cm {step} to {peer}: {what} resolution failed "
                             f"({ev.text})", hint=f"no RDMA device carries the route to "
                             f"{host}: check `ip route get {host}`, that its netdev has an "
                             f"RDMA device (`rdma link`) with a RoCEv2 GID, and that the "
                             f"host answers ARP")
    if kind == CmEvent.CONNECT_ERROR:
        return ConnectFailed(f"rdma_cm {step} to {peer}: connection error ({ev.text})",
                             hint="the CM exchange failed after the REQ: check both sides' "
                                  "logs and `rdma res show cm_id`")
    return ConnectFailed(f"rdma_cm {step} to {peer}: unexpected event {ev.text}")


def _remote_address(attr: Any, mtu_bytes: int) -> QpAddress:
    """The peer's QP address as rdma_cm's RTR attributes give it."""
    raw = str(attr.ah_attr.dgid)
    try:
        addr = ipaddress.IPv6Address(raw)
        mapped = addr.ipv4_mapped  # written as sysfs-derived local GIDs are
        gid = f"::ffff:{mapped}" if mapped is not None else str(addr)
    except ValueError:
        gid = raw
    return QpAddress(transport=Transport.ROCE, gid=gid, qpn=int(attr.dest_qp_num),
                     psn=int(attr.rq_psn), mtu_bytes=mtu_bytes, gid_type="RoCEv2")


def _gid_host(gid: str) -> str:
    """The IPv4 address of an IPv4-mapped GID, else the GID."""
    with contextlib.suppress(ValueError):
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
        if mapped is not None:
            return str(mapped)
    return gid


class CmQp:
    """A verbs QP connected by rdma_cm (``BackendQp``): the QP does the work, the CMID
    (and a client's own event channel) carry the connection's life: DISCONNECTED tells
    the endpoint the peer left, ``close`` sends the DREQ and destroys the CMID."""

    def __init__(self, qp: VerbsQp, cmid: Any, channel: _Channel | None, peer: str,
                 on_close: Callable[[CmQp], None] | None = None) -> None:
        self.qp = qp
        self.cmid = cmid
        self.channel = channel
        self.peer = peer
        self.endpoint: Endpoint | None = None
        self.peer_gone = False
        self._on_close = on_close
        self._closed = False

    @property
    def qpn(self) -> int:
        return self.qp.qpn

    def address(self) -> QpAddress:
        return self.qp.address()

    async def connect(self, remote: QpAddress, mtu_bytes: int,
                      stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
                      ) -> None:
        raise IoError(f"QP {self.qpn} was connected by rdma_cm to {self.peer}: it cannot be "
                      f"connected again")

    def post_send(self, requests: Sequence[SendRequest]) -> None:
        self.qp.post_send(requests)

    def post_recv(self, requests: Sequence[RecvRequest]) -> None:
        self.qp.post_recv(requests)

    def poll(self, max_entries: int) -> list[Completion]:
        return self.qp.poll(max_entries)

    def counters(self) -> dict[str, int]:
        out = self.qp.counters()
        out["cm_peer_disconnected"] = int(self.peer_gone)
        return out

    def diagnosis(self) -> str:
        return self.qp.diagnosis()

    def on_event(self, ev: _Event) -> None:
        """An event for this connection once it is established."""
        if ev.kind == CmEvent.DISCONNECTED:
            self.peer_left()
        elif ev.kind == CmEvent.DEVICE_REMOVAL:
            log.warning("rdma_cm: %s: the RDMA device was removed", self.peer)
            self.peer_left()

    def peer_left(self) -> None:
        """The peer sent a DREQ (or its CM gave up): answer it (DREP) and tell the
        endpoint, whose failed operations then say the peer is gone."""
        if self.peer_gone or self._closed:
            return
        self.peer_gone = True
        with contextlib.suppress(Exception):
            self.cmid.disconnect()
        ep = self.endpoint
        if ep is not None:
            ep.mark_peer_closed()
            ep.progress()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # DREQ (or the DREP after the peer's DREQ)
            self.cmid.disconnect()
        try:
            await self.qp.close()
        finally:
            with contextlib.suppress(Exception):
                self.cmid.close()  # rdma_destroy_id
            if self.channel is not None:
                self.channel.close()
            if self._on_close is not None:
                self._on_close(self)


def _conn_param(cm: _Cm, backend: VerbsBackend, qp: VerbsQp, private: bytes) -> Any:
    o = qp._options
    rd = max(1, min(o.max_rd_atomic, backend._rd_atomic))
    retry = 6 if o.retry_count == 7 and backend.retry_forever_at_7 else o.retry_count
    param = cm.cmid.ConnParam(resources=rd, depth=rd, retry=retry, rnr_retry=o.rnr_retry,
                              qp_num=qp.qpn, data_len=len(private))
    param.set_private_data(private)
    return param


def _check_device(backend: VerbsBackend, cmid: Any, qp_entry: Any, what: str) -> None:
    dev = str(cmid.dev_name)
    port = int(cmid.port_num)
    if (dev, port) != (qp_entry.device, qp_entry.port):
        raise ConnectFailed(f"rdma_cm {what}: the CM's route uses {dev} port {port}, this "
                            f"context {qp_entry.device} port {qp_entry.port}",
                            hint="open the context on the device the route uses: "
                                 f"netio.open('verbs', device='{dev}', port={port})")


async def _bring_up(qp: VerbsQp, cmid: Any, mtu_bytes: int | None, cap_bytes: int) -> tuple[
        QpAddress, int]:
    """RTR and RTS with rdma_cm's attributes; the path MTU is ``mtu_bytes`` when a netio
    peer agreed one, else the CM's (capped by ``cap_bytes``)."""
    cm = _cm()
    try:
        attr, mask = cmid.init_qp_attr(_QPS_RTR)
    except cm.Error as exc:
        raise ConnectFailed(f"QP {qp.qpn}: rdma_init_qp_attr for RTR failed: {exc}",
                            errno_value=_errno_of(exc)) from exc
    cm_mtu = mtu_bytes_of(int(attr.path_mtu)) or cap_bytes
    mtu = mtu_bytes if mtu_bytes else min(cm_mtu, cap_bytes)
    attr.path_mtu = mtu_enum(mtu)
    qp.cm_modify(attr, mask, "RTR")
    remote = _remote_address(attr, mtu)
    try:
        attr, mask = cmid.init_qp_attr(_QPS_RTS)
    except cm.Error as exc:
        raise ConnectFailed(f"QP {qp.qpn}: rdma_init_qp_attr for RTS failed: {exc}",
                            errno_value=_errno_of(exc)) from exc
    qp.cm_modify(attr, mask, "RTS")
    qp.cm_connected(remote, mtu)
    return remote, mtu


class _Deadline:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.end = time.monotonic() + timeout_s

    def left_s(self, step: str) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise Timeout(step, self.timeout_s)
        return left

    def cm_ms(self, step: str) -> int:
        return int(self.left_s(step) * 1000) + _EXTRA_CM_MS


async def connect(ctx: CmOwner, host: str, port: int, local_ip: str, timeout_s: float,
                  cap_bytes: int | None) -> Endpoint:
    """Connect to an rdma_cm listener at ``host:port`` (any: netio, rping, ucmatose);
    ``local_ip`` is the address the route to ``host`` leaves from."""
    backend = ctx.backend
    if not isinstance(backend, VerbsBackend):
        raise IoError(f"cm='rdma_cm' needs the verbs backend (this context uses "
                      f"{backend.name})")
    cm = _cm()
    loop = asyncio.get_running_loop()
    peer = f"{host}:{port}"
    events: asyncio.Queue[_Event] = asyncio.Queue()
    box: list[CmQp] = []

    def on_event(ev: _Event) -> None:
        if box:
            box[0].on_event(ev)
        else:
            events.put_nowait(ev)

    deadline = _Deadline(timeout_s)

    async def expect(step: str, wanted: CmEvent) -> _Event:
        name = f"rdma_cm {step} ({peer})"
        try:
            ev = await asyncio.wait_for(events.get(), deadline.left_s(name))
        except TimeoutError:
            raise Timeout(name, timeout_s, hint=_TIMEOUT_HINTS[wanted]) from None
        if ev.kind != wanted:
            raise _event_error(ev, step, peer, host)
        return ev

    channel = _Channel(loop, on_event)
    cmid: Any = None
    qp: VerbsQp | None = None
    try:
        try:
            cmid = cm.cmid.CMID(channel.raw)
            dst = cm.cmid.AddrInfo(dst=host, dst_service=str(port), port_space=_RDMA_PS_TCP)
            cmid.resolve_addr(dst, deadline.cm_ms("rdma_cm resolve address"))
        except cm.Error as exc:
            raise ConnectFailed(f"rdma_cm resolve address of {peer}: {exc}",
                                errno_value=_errno_of(exc),
                                hint=f"is {host} an IP address whose route leaves through "
                                     f"an RDMA device (`ip route get {host}`, "
                                     f"`rdma link`)?") from exc
        await expect("resolve address", CmEvent.ADDR_RESOLVED)
        try:
            cmid.resolve_route(deadline.cm_ms("rdma_cm resolve route"))
        except cm.Error as exc:
            raise ConnectFailed(f"rdma_cm resolve route to {peer}: {exc}",
                                errno_value=_errno_of(exc)) from exc
        await expect("resolve route", CmEvent.ROUTE_RESOLVED)
        notify = ctx.notifier()
        made = await backend.create_qp(local_ip, ctx.options.qp, notify)
        qp = made
        _check_device(backend, cmid, made.entry, f"connect to {peer}")
        cap = min(made.address().mtu_bytes, cap_bytes or made.address().mtu_bytes)
        try:
            cmid.connect(_conn_param(cm, backend, made, _HELLO.pack(_MAGIC, cap)))
        except cm.Error as exc:
            raise ConnectFailed(f"rdma_cm connect to {peer}: {exc}",
                                errno_value=_errno_of(exc)) from exc
        rep = await expect("connect (REQ sent, waiting for the REP)",
                           CmEvent.CONNECT_RESPONSE)
        agreed = _netio_mtu(rep.private_data)
        if agreed is not None and not 0 < agreed <= cap:
            raise ConnectFailed(f"rdma_cm connect to {peer}: the listener's REP names path "
                                f"MTU {agreed}, this side offers at most {cap}")
        remote, mtu = await _bring_up(made, cmid, agreed, cap)
        try:
            cmid.establish()  # the RTU
        except cm.Error as exc:
            raise ConnectFailed(f"rdma_cm establish with {peer}: {exc}",
                                errno_value=_errno_of(exc)) from exc
        cq = CmQp(made, cmid, channel, peer)
        box.append(cq)
        ep = ctx.adopt_endpoint(cq, notify, made.address(), remote, mtu, peer)
        cq.endpoint = ep
        while not events.empty():  # e.g. a DISCONNECTED that came before the endpoint
            cq.on_event(events.get_nowait())
        return ep
    except BaseException:
        if qp is not None:
            with contextlib.suppress(Exception):
                await qp.close()
        if cmid is not None:
            with contextlib.suppress(Exception):
                cmid.close()
        channel.close()
        raise


_TIMEOUT_HINTS = {
    CmEvent.ADDR_RESOLVED: "ARP for the peer got no answer: is the host up on this subnet?",
    CmEvent.ROUTE_RESOLVED: "the route to the peer could not be resolved in time",
    CmEvent.CONNECT_RESPONSE: "the peer's CM did not answer the REQ: is the host up, its "
                              "RDMA port ACTIVE and UDP 4791 open? (a host without an "
                              "rdma_cm listener answers with a REJ)",
    CmEvent.ESTABLISHED: "the client did not send the RTU after the REP",
}


class CmAcceptor:
    """Accepts rdma_cm connections (netio's or any rdma_cm client's: rping -c,
    ucmatose) for a ``netio.Listener``, one request at a time (see the module's note)."""

    def __init__(self, context: CmOwner, listener: ListenerHooks, host: str, port: int,
                 cap_bytes: int | None) -> None:
        self.context = context
        self.listener = listener
        self._closed = False
        self._host = host
        self._port = port
        self._cap = cap_bytes
        self._requests: asyncio.Queue[_Event] = asyncio.Queue()
        self._pending: asyncio.Future[_Event] | None = None
        self._live: set[CmQp] = set()
        self._channel: _Channel | None = None
        self._listen_id: Any = None
        self._worker: asyncio.Task[None] | None = None
        self.unattributed = 0

    @property
    def address(self) -> tuple[str, int]:
        return self._host, self._port

    def start(self) -> None:
        if self._port == 0:
            raise IoError("listen with cm='rdma_cm' needs a port: pyverbs 44 cannot report "
                          "the one the kernel would pick for port 0")
        backend = self.context.backend
        if not isinstance(backend, VerbsBackend):
            raise IoError(f"cm='rdma_cm' needs the verbs backend (this context uses "
                          f"{backend.name})")
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(self._host).is_unspecified:
                # pyverbs 44's bind_addr of a passive wildcard rdma_addrinfo crashes the
                # process (segmentation fault, seen in the lab): refuse it in words
                raise IoError(f"listen with cm='rdma_cm' on {self._host}: give this host's "
                              f"address (a wildcard crashes pyverbs 44's bind_addr)")
        cm = _cm()
        loop = asyncio.get_running_loop()
        self._channel = _Channel(loop, self._on_event)
        where = f"{self._host}:{self._port}"
        try:
            self._listen_id = cm.cmid.CMID(self._channel.raw)
            src = cm.cmid.AddrInfo(src=self._host, src_service=str(self._port),
                                   port_space=_RDMA_PS_TCP, flags=_RAI_PASSIVE)
            self._listen_id.bind_addr(src)
            self._listen_id.listen(_BACKLOG)
        except cm.Error as exc:
            self._release()
            raise ConnectFailed(f"rdma_cm listen on {where}: {exc}",
                                errno_value=_errno_of(exc),
                                hint="is the address this host's, on a netdev with an RDMA "
                                     "device, and the port free for rdma_cm?") from exc
        self._channel.listen_id = self._listen_id
        self._worker = loop.create_task(self._serve())

    def _on_event(self, ev: _Event) -> None:
        if ev.kind == CmEvent.CONNECT_REQUEST and ev.child is not None:
            if self._closed:
                with contextlib.suppress(Exception):
                    ev.child.reject(_MAGIC + b":the listener is closing")
                    ev.child.close()
                return
            self._requests.put_nowait(ev)
            return
        pending = self._pending
        # only the request being accepted can be ESTABLISHED, REJECTED, ...; a
        # DISCONNECTED is its own only while no other connection is open
        ends_accept = (CmEvent.ESTABLISHED, CmEvent.REJECTED, CmEvent.CONNECT_ERROR,
                       CmEvent.UNREACHABLE) + (() if self._live else (CmEvent.DISCONNECTED,))
        if pending is not None and not pending.done() and ev.kind in ends_accept:
            pending.set_result(ev)
            return
        if ev.kind in (CmEvent.DISCONNECTED, CmEvent.DEVICE_REMOVAL):
            if len(self._live) == 1:
                next(iter(self._live)).on_event(ev)
            else:
                self.unattributed += 1
                self.listener.errors.append(f"rdma_cm {ev.text} with {len(self._live)} connections "
                                   "open: pyverbs 44 does not say which")
        # TIMEWAIT_EXIT and the like: nothing to do

    async def _serve(self) -> None:
        while True:
            ev = await self._requests.get()
            try:
                ep = await self._accept_request(ev.child, ev.private_data)
            except Exception as exc:  # one bad request must not end the listener
                self.listener.rejected += 1
                self.listener.errors.append(str(exc) if isinstance(exc, NetioError) else
                                            f"{type(exc).__name__}: {exc}")
                log.warning("netio rdma_cm listener: %s", exc)
                continue
            if self._closed or not self.listener.deliver(ep):
                await ep.aclose()

    async def _accept_request(self, child: Any, private: bytes) -> Endpoint:
        ctx = self.context
        backend = ctx.backend
        if not isinstance(backend, VerbsBackend):  # start() checked it
            raise IoError("cm='rdma_cm' needs the verbs backend")
        cm = _cm()
        timeout_s = ctx.options.timeout_s
        deadline = _Deadline(timeout_s)
        where = f"listener {self._host}:{self._port}"
        qp: VerbsQp | None = None
        accepted = False
        try:
            notify = ctx.notifier()
            qp = await backend.create_qp(self._host, ctx.options.qp, notify)
            try:
                _check_device(backend, child, qp.entry, f"accept on {where}")
            except ConnectFailed as exc:
                with contextlib.suppress(Exception):
                    child.reject((_MAGIC + b":" + exc.message.encode())[:_REJ_DATA_BYTES])
                raise
            local = qp.address()
            cap = min(local.mtu_bytes, self._cap or local.mtu_bytes)
            offered = _netio_mtu(private)
            agreed = min(offered, cap) if offered else None
            remote, mtu = await _bring_up(qp, child, agreed, cap)
            peer = f"{_gid_host(remote.gid)} (rdma_cm)"
            reply = _HELLO.pack(_MAGIC, mtu) if offered else b""
            self._pending = asyncio.get_running_loop().create_future()
            try:
                child.accept(_conn_param(cm, backend, qp, reply))
            except cm.Error as exc:
                raise ConnectFailed(f"rdma_cm accept of {peer} on {where}: {exc}",
                                    errno_value=_errno_of(exc)) from exc
            accepted = True
            step = f"rdma_cm accept of {peer} on {where} (REP sent, waiting for the RTU)"
            try:
                ev = await asyncio.wait_for(self._pending, deadline.left_s(step))
            except TimeoutError:
                raise Timeout(step, timeout_s,
                              hint=_TIMEOUT_HINTS[CmEvent.ESTABLISHED]) from None
            if ev.kind != CmEvent.ESTABLISHED:
                raise _event_error(ev, "accept", peer, _gid_host(remote.gid))
            cq = CmQp(qp, child, None, peer, self._child_closed)
            self._live.add(cq)
            ep = ctx.adopt_endpoint(cq, notify, local, remote, mtu, peer)
            cq.endpoint = ep
            return ep
        except BaseException:
            if not accepted:
                with contextlib.suppress(Exception):
                    child.reject(_MAGIC + b":the listener could not set up a QP")
            else:
                with contextlib.suppress(Exception):
                    child.disconnect()
            if qp is not None:
                with contextlib.suppress(Exception):
                    await qp.close()
            with contextlib.suppress(Exception):
                child.close()
            raise
        finally:
            self._pending = None

    def _child_closed(self, cq: CmQp) -> None:
        self._live.discard(cq)
        if self._closed and not self._live:
            self._release()

    def _release(self) -> None:
        if self._listen_id is not None:
            with contextlib.suppress(Exception):
                self._listen_id.close()
            self._listen_id = None
        if self._channel is not None:
            self._channel.close()

    async def aclose(self) -> None:
        """Stop accepting (the listener's ``aclose`` calls it)."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(BaseException):
                await self._worker
        while not self._requests.empty():
            child = self._requests.get_nowait().child
            with contextlib.suppress(Exception):
                child.reject(_MAGIC + b":the listener is closing")
                child.close()
        if self._listen_id is not None:
            with contextlib.suppress(Exception):
                self._listen_id.close()
            self._listen_id = None
        # connections already accepted report on this channel (closing its descriptor
        # would destroy their CMIDs): it closes with the last of them
        if not self._live:
            self._release()


async def listen(ctx: CmOwner, listener: ListenerHooks, host: str, port: int,
                 cap_bytes: int | None) -> CmAcceptor:
    """Listen for rdma_cm connections on ``host:port``; each one reaches ``listener``."""
    acceptor = CmAcceptor(ctx, listener, host, port, cap_bytes)
    acceptor.start()
    return acceptor


__all__ = ["CmAcceptor", "CmEvent", "CmOwner", "CmQp", "ListenerHooks", "connect", "listen"]
