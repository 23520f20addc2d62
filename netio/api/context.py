"""``netio.open()``: a context over one backend, its memory, listeners and endpoints.

The context owns the event loop its backend runs on (see :mod:`netio.api.handles`),
the backend, the registration cache and every listener and endpoint it made; closing
it closes them, bounded and idempotent, from any thread, and at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import ipaddress
import logging
import socket
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netio.api import exchange
from netio.api.endpoint import Endpoint, Path
from netio.api.handles import Pending, Runner
from netio.api.region import Region, check_region_busy
from netio.api.types import Access, QpType
from netio.backends.base import (
    QP_ACCESS_ALL,
    Backend,
    BackendQp,
    Description,
    QpAddress,
    QpOptions,
    Transport,
)
from netio.errors import (
    BackendUnavailable,
    ClosedError,
    ConnectFailed,
    ExchangeMismatch,
    IoError,
    NetioError,
    PeerDisconnected,
    Timeout,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

BACKENDS = ("auto", "soft", "verbs", "tcp")
PROGRESS = ("loop", "poll")  # who drives a context: a loop, or the thread that waits
CMS = ("netio", "rdma_cm")  # who sets connections up: netio's exchange or rdma_cm
DEFAULT_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
IB_MTUS = (256, 512, 1024, 2048, 4096)
_CLOSE_S = 5.0
_LISTEN_ERRORS_KEPT = 32
# Stream buffer: the tcp backend reads whole messages from it; a larger buffer means
# fewer wake-ups per large message (asyncio pauses the socket at twice this).
_STREAM_LIMIT_BYTES = 4 << 20

_open_contexts: weakref.WeakSet[Context] = weakref.WeakSet()


def _parse_addr(addr: str | tuple[str, int], what: str) -> tuple[str, int]:
    if isinstance(addr, tuple):
        host, port = addr
    else:
        host, sep, port_text = addr.rpartition(":")
        if not sep:
            raise IoError(f"{what} address {addr!r} must be HOST:PORT")
        try:
            port = int(port_text)
        except ValueError:
            raise IoError(f"{what} address {addr!r}: port {port_text!r} is not a number") from None
        host = host.strip("[]")
    if not 0 <= port <= 65535:
        raise IoError(f"{what} address: port {port} outside 0..65535")
    return host or "0.0.0.0", port


def _buffer_address(view: memoryview) -> int | None:
    """The address of a writable buffer's first byte (the cache key), or None."""
    if view.readonly or view.nbytes == 0:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


@dataclass(frozen=True, slots=True)
class ContextOptions:
    """What ``netio.open`` was given (backend-independent parts)."""

    backend: str
    timeout_s: float
    mtu_bytes: int | None
    qp: QpOptions


class Context:
    """One backend and everything made with it. Create with :func:`netio.open`."""

    def __init__(self, backend: Backend, options: ContextOptions, runner: Runner) -> None:
        self.backend = backend
        self.options = options
        self.runner = runner
        self._cache: dict[tuple[int, int, int], Region] = {}
        self._regions: set[Region] = set()
        self._endpoints: set[Endpoint] = set()
        self._listeners: set[Listener] = set()
        self._closed = False
        _open_contexts.add(self)

    @property
    def transport(self) -> str:
        return self.backend.transport

    @property
    def closed(self) -> bool:
        return self._closed

    def describe(self) -> Description:
        """The device, port, GID and MTU in use, every candidate and why."""
        return self.backend.describe()

    # -- memory ------------------------------------------------------------------------

    def register(self, buffer: WriteableBuffer, access: Access = DEFAULT_ACCESS) -> Region:
        """Register ``buffer`` in place (no copy). The same buffer, range and access give
        back the region already registered."""
        self._check_open()
        view = memoryview(buffer)
        if not view.contiguous:
            raise IoError("register: the buffer is not contiguous (pass a contiguous array "
                          "or a bytearray)")
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        access = Access(access)
        addr = _buffer_address(view)
        key = (addr, view.nbytes, int(access)) if addr is not None else None
        if key is not None:
            cached = self._cache.get(key)
            if cached is not None and cached.registered:
                return cached
        backend_region = self.backend.register(view, access)
        region = Region(self, backend_region, access, view, buffer)
        self._regions.add(region)
        if key is not None:
            self._cache[key] = region
        return region

    def deregister(self, region: Region) -> None:
        if not region.registered:
            return
        check_region_busy(region)
        self.backend.deregister(region.backend_region)
        region.registered = False
        self._regions.discard(region)
        for key, cached in list(self._cache.items()):
            if cached is region:
                del self._cache[key]

    # -- connecting ----------------------------------------------------------------------

    def connect(self, addr: str | tuple[str, int], *, timeout_s: float | None = None,
                cm: str = "netio") -> Pending[Endpoint]:
        """Connect to a netio listener at ``HOST:PORT``; the handle gives the endpoint.
        ``cm="rdma_cm"`` (verbs backend) connects through rdma_cm instead of netio's own
        exchange, to any rdma_cm listener (see :mod:`netio.backends.rdmacm`)."""
        self._check_open()
        host, port = _parse_addr(addr, "connect")
        t = timeout_s or self.options.timeout_s
        if self._use_rdma_cm(cm):
            from netio.backends import rdmacm

            return self.runner.spawn(rdmacm.connect(self, host, port, route_source_ip(host),
                                                    t, self.options.mtu_bytes))
        return self.runner.spawn(self._connect(host, port, t))

    def _use_rdma_cm(self, cm: str) -> bool:
        if cm not in CMS:
            raise IoError(f"cm={cm!r} is not one of {', '.join(CMS)}")
        if cm == "rdma_cm" and self.backend.name != "verbs":
            raise IoError(f"cm='rdma_cm' needs the verbs backend; this context uses "
                          f"{self.backend.name} (use cm='netio' there)")
        return cm == "rdma_cm"

    async def _connect(self, host: str, port: int, timeout_s: float) -> Endpoint:
        peer = f"{host}:{port}"
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, limit=_STREAM_LIMIT_BYTES),
                                                    timeout_s)
        except TimeoutError:
            raise Timeout(f"connect to {peer}", timeout_s,
                          hint="nothing answered: is the host reachable?") from None
        except OSError as exc:
            raise ConnectFailed(f"connect to {peer}: {exc.strerror or exc}",
                                errno_value=exc.errno or 0,
                                hint="is a netio listener running there (ctx.listen)?") from None
        try:
            local_ip = writer.get_extra_info("sockname")[0]
            notify = _Notify()
            qp = await self.backend.create_qp(local_ip, self.options.qp, notify)
            try:
                return await self._client_exchange(qp, notify, reader, writer, peer,
                                                   timeout_s)
            except BaseException:
                await qp.close()
                raise
        except BaseException:
            writer.close()
            raise

    async def _client_exchange(self, qp: BackendQp, notify: _Notify, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter, peer: str,
                               timeout_s: float) -> Endpoint:
        local = qp.address()
        hello = {"address": exchange.address_to_json(local), "backend": self.backend.name,
                 "mtu_bytes": self._mtu(local)}
        await exchange.write_message(writer, exchange.Kind.HELLO, hello, "exchange hello",
                                     timeout_s)
        reply = await exchange.read_message(reader, "exchange reply", timeout_s)
        if reply.kind is exchange.Kind.REJECT:
            reason = reply.body.get("reason", "no reason given")
            raise ExchangeMismatch(f"{peer} refused the connection: {reason}")
        if reply.kind is not exchange.Kind.ACCEPT:
            raise ConnectFailed(f"exchange reply from {peer}: unexpected {reply.kind.name}")
        remote = exchange.address_from_json(reply.body.get("address"), "exchange reply")
        mtu = reply.body.get("mtu_bytes")
        if mtu not in IB_MTUS or not isinstance(mtu, int) or mtu > self._mtu(local):
            raise ConnectFailed(f"exchange reply from {peer}: bad path MTU {mtu!r}")
        await qp.connect(remote, mtu, (reader, writer))
        await exchange.write_message(writer, exchange.Kind.READY, {}, "exchange ready",
                                     timeout_s)
        return self._endpoint(qp, notify, local, remote, mtu, peer, reader, writer)

    def _mtu(self, local: QpAddress) -> int:
        if self.options.mtu_bytes is None:
            return local.mtu_bytes
        return min(local.mtu_bytes, self.options.mtu_bytes)

    def notifier(self) -> _Notify:
        """The ``notify`` to create a backend QP with (it reaches the endpoint later)."""
        return _Notify()

    def adopt_endpoint(self, qp: BackendQp, notify: _Notify, local: QpAddress,
                       remote: QpAddress, mtu: int, peer: str) -> Endpoint:
        """The endpoint over a QP connected elsewhere (rdma_cm), owned by this context."""
        path = Path(self.backend.describe(), local, remote, mtu, self.options.qp, peer)
        ep = Endpoint(self, qp, path)
        notify.target = ep.progress
        self._endpoints.add(ep)
        ep.progress()
        return ep

    def _endpoint(self, qp: BackendQp, notify: _Notify, local: QpAddress, remote: QpAddress,
                  mtu: int, peer: str, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> Endpoint:
        path = Path(self.backend.describe(), local, remote, mtu, self.options.qp, peer)
        ep = Endpoint(self, qp, path)
        notify.target = ep.progress
        self._endpoints.add(ep)
        if self.transport != Transport.TCP:
            # The exchange connection stays open only to learn that the peer went away.
            ep.watch_task = asyncio.get_running_loop().create_task(
                _watch_peer(ep, reader, writer))
        ep.progress()
        return ep

    def endpoint(self, qp_type: QpType | str = QpType.RC, *, peer: str | None = None,
                 psn: int | None = None) -> Pending[Endpoint]:
        """An endpoint whose address the caller exchanges itself (``ep.address``, then
        ``ep.connect_to(theirs)``), for RC, UC or UD (datagram) transports. ``peer`` is
        the peer's IP, used to pick the local address its route leaves from."""
        self._check_open()
        kind = _qp_type(qp_type)
        local_ip = route_source_ip(peer) if peer else "127.0.0.1"
        return self.runner.spawn(self._unconnected(kind, local_ip, psn))

    async def _unconnected(self, qp_type: QpType, local_ip: str, psn: int | None) -> Endpoint:
        notify = _Notify()
        qp = await self.backend.create_qp(local_ip, self.options.qp, notify, qp_type, psn)
        local = qp.address()
        path = Path(self.backend.describe(), local, None, local.mtu_bytes, self.options.qp,
                    "")
        ep = Endpoint(self, qp, path, qp_type)
        notify.target = ep.progress
        self._endpoints.add(ep)
        return ep

    def listen(self, addr: str | tuple[str, int] = "0.0.0.0:0", *, cm: str = "netio"
               ) -> Pending[Listener]:
        """Listen for netio connections on ``HOST:PORT`` (port 0: any free port).
        ``cm="rdma_cm"`` (verbs backend) accepts rdma_cm connections instead (a port must
        be given)."""
        self._check_open()
        host, port = _parse_addr(addr, "listen")
        if self._use_rdma_cm(cm):
            return self.runner.spawn(self._cm_listen(host, port))
        return self.runner.spawn(self._listen(host, port))

    async def _cm_listen(self, host: str, port: int) -> Listener:
        from netio.backends import rdmacm

        listener = Listener(self)
        acceptor = await rdmacm.listen(self, listener, host, port, self.options.mtu_bytes)
        listener.bound = acceptor.address
        listener.closers.append(acceptor.aclose)
        self._listeners.add(listener)
        return listener

    async def _listen(self, host: str, port: int) -> Listener:
        listener = Listener(self)
        try:
            server = await asyncio.start_server(listener.handle, host, port,
                                                limit=_STREAM_LIMIT_BYTES)
        except OSError as exc:
            raise ConnectFailed(f"listen on {host}:{port}: {exc.strerror or exc}",
                                errno_value=exc.errno or 0) from None
        listener.server = server
        self._listeners.add(listener)
        return listener

    async def server_exchange(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter, peer: str) -> Endpoint:
        timeout_s = self.options.timeout_s
        hello = await exchange.read_message(reader, f"exchange hello from {peer}", timeout_s)
        if hello.kind is not exchange.Kind.HELLO:
            raise ConnectFailed(f"exchange from {peer}: expected HELLO, got {hello.kind.name}")
        remote = exchange.address_from_json(hello.body.get("address"), f"hello from {peer}")
        if remote.transport != self.transport:
            reason = (f"transport mismatch: the client uses {remote.transport} (backend "
                      f"{hello.body.get('backend')!s}), this listener {self.transport} "
                      f"(backend {self.backend.name}); soft and verbs talk to each other, "
                      "tcp only to tcp")
            await exchange.write_message(writer, exchange.Kind.REJECT, {"reason": reason},
                                         "exchange reject", timeout_s)
            raise ExchangeMismatch(f"{peer}: {reason}")
        client_mtu = hello.body.get("mtu_bytes")
        if client_mtu not in IB_MTUS or not isinstance(client_mtu, int):
            raise ConnectFailed(f"hello from {peer}: bad path MTU {client_mtu!r}")
        local_ip = writer.get_extra_info("sockname")[0]
        notify = _Notify()
        qp = await self.backend.create_qp(local_ip, self.options.qp, notify)
        try:
            local = qp.address()
            mismatch = gid_mismatch(local, remote)
            if mismatch:
                await exchange.write_message(writer, exchange.Kind.REJECT,
                                             {"reason": mismatch}, "exchange reject", timeout_s)
                raise ExchangeMismatch(f"{peer}: {mismatch}")
            mtu = min(client_mtu, self._mtu(local))
            # A RoCE QP must be ready to receive before the client learns it may send;
            # the tcp QP reads the exchange's stream, so it starts after the last message.
            stream_qp = self.transport == Transport.TCP
            if not stream_qp:
                await qp.connect(remote, mtu, (reader, writer))
            await exchange.write_message(
                writer, exchange.Kind.ACCEPT,
                {"address": exchange.address_to_json(local), "mtu_bytes": mtu},
                "exchange accept", timeout_s)
            ready = await exchange.read_message(reader, f"exchange ready from {peer}",
                                                timeout_s)
            if ready.kind is not exchange.Kind.READY:
                raise ConnectFailed(f"exchange from {peer}: expected READY, got "
                                    f"{ready.kind.name}")
            if stream_qp:
                await qp.connect(remote, mtu, (reader, writer))
            return self._endpoint(qp, notify, local, remote, mtu, peer, reader, writer)
        except BaseException:
            await qp.close()
            raise

    # -- closing -------------------------------------------------------------------------

    def endpoint_closed(self, ep: Endpoint) -> None:
        self._endpoints.discard(ep)

    def listener_closed(self, listener: Listener) -> None:
        self._listeners.discard(listener)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the context is closed")

    async def aclose(self) -> None:
        """Close every listener and endpoint (requests in flight complete flushed), then
        the backend. Bounded and idempotent."""
        if self._closed:
            return
        if self.runner.polled and not self.runner.on_loop_thread():
            # A polled context awaited from another loop: close it on its own loop (driven
            # by a worker thread), then release the loop.
            await self.runner.spawn(self.aclose())
            self.runner.stop()
            return
        self._closed = True
        for listener in list(self._listeners):
            await listener.aclose()
        for ep in list(self._endpoints):
            await ep.aclose()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.backend.close(), _CLOSE_S)
        _open_contexts.discard(self)

    def close(self, timeout_s: float = 2 * _CLOSE_S) -> None:
        """Close from synchronous code, a signal handler or any thread. On the loop's own
        thread the close is started and finishes in the background (use ``await
        ctx.aclose()`` there to wait for it)."""
        if self._closed or self.runner.loop.is_closed():
            self._closed = True
            return
        try:
            pending = self.runner.spawn(self.aclose())
        except ClosedError:
            self._closed = True
            return
        if self.runner.on_loop_thread():
            return
        with contextlib.suppress(NetioError):
            pending.wait(timeout_s)
        self.runner.stop()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Context:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Context({self.backend.name}, {'closed' if self._closed else 'open'})"


def gid_mismatch(local: QpAddress, remote: QpAddress) -> str:
    """Why two RoCE QP addresses cannot talk (GID type, or IPv4 against IPv6), or ""."""
    if local.transport != Transport.ROCE:
        return ""
    if local.gid_type != remote.gid_type:
        return (f"GID type mismatch: the client's GID {remote.gid} (index {remote.gid_index}) is "
                f"{remote.gid_type}, this listener's {local.gid} (index {local.gid_index}) is "
                f"{local.gid_type}; both sides need RoCEv2 GIDs (netio doctor lists them)")
    local_v4 = ipaddress.IPv6Address(local.gid).ipv4_mapped is not None
    remote_v4 = ipaddress.IPv6Address(remote.gid).ipv4_mapped is not None
    if local_v4 != remote_v4:
        return (f"address family mismatch: the client's GID {remote.gid} is "
                f"{'IPv4' if remote_v4 else 'IPv6'}, this listener's {local.gid} is "
                f"{'IPv4' if local_v4 else 'IPv6'}; pin a GID of the same family (gid=)")
    return ""


def _qp_type(value: QpType | str) -> QpType:
    if isinstance(value, QpType):
        return value
    try:
        return QpType[str(value).upper()]
    except KeyError:
        raise IoError(f"endpoint type {value!r} is not one of rc, uc, ud") from None


def route_source_ip(peer: str) -> str:
    """The local address the kernel's route to ``peer`` leaves from (a connected UDP
    socket: nothing is sent)."""
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((peer, 4791))
        except OSError as exc:
            raise ConnectFailed(f"no route to {peer}: {exc.strerror or exc}",
                                errno_value=exc.errno or 0) from None
        return str(probe.getsockname()[0])


class _Notify:
    """The notify a backend QP is created with; it reaches the endpoint once there is one."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.target: Callable[[], None] | None = None

    def __call__(self) -> None:
        if self.target is not None:
            self.target()


async def _watch_peer(ep: Endpoint, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
    try:
        await reader.read()  # returns at EOF: the peer's netio closed the connection
    except (ConnectionError, OSError):
        pass
    except asyncio.CancelledError:
        writer.close()
        raise
    ep.mark_peer_closed()
    writer.close()


class Listener:
    """Accepts netio connections; ``await listener.accept()`` gives each endpoint.

    A client whose exchange is malformed, too slow, of another version or transport is
    turned away with the reason logged and kept in :attr:`errors`; the listener goes on.
    """

    def __init__(self, context: Context) -> None:
        self.context = context
        self.server: asyncio.Server | None = None
        self._ready: asyncio.Queue[Endpoint] = asyncio.Queue()
        self.errors: deque[str] = deque(maxlen=_LISTEN_ERRORS_KEPT)
        self.rejected = 0
        self._closed = False
        self._closed_event = asyncio.Event()
        # an rdma_cm listener has no asyncio server: its address, and what closes it
        self.bound: tuple[str, int] | None = None
        self.closers: list[Callable[[], Awaitable[None]]] = []

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) it listens on (the real port when 0 was asked for)."""
        if self.bound is not None and not self._closed:
            return self.bound
        if self.server is None or not self.server.sockets:
            raise ClosedError("the listener is closed")
        name = self.server.sockets[0].getsockname()
        return str(name[0]), int(name[1])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_name = writer.get_extra_info("peername")
        peer = f"{peer_name[0]}:{peer_name[1]}" if peer_name else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            ep = await self.context.server_exchange(reader, writer, peer)
        except (NetioError, OSError, PeerDisconnected) as exc:
            self.rejected += 1
            self.errors.append(str(exc))
            log.warning("netio listener: %s", exc)
            writer.close()
            return
        if not self.deliver(ep):
            await ep.aclose()

    def deliver(self, ep: Endpoint) -> bool:
        """Queue a connected endpoint for ``accept`` (False once the listener is closed:
        the caller closes it)."""
        if self._closed:
            return False
        self._ready.put_nowait(ep)
        return True

    def accept(self, timeout_s: float | None = None) -> Pending[Endpoint]:
        """The next connected endpoint (waits for one; :class:`Timeout` after
        ``timeout_s``)."""
        return self.context.runner.spawn(self._accept(timeout_s))

    async def _accept(self, timeout_s: float | None) -> Endpoint:
        if self._closed:
            raise ClosedError("the listener is closed")
        get = asyncio.ensure_future(self._ready.get())
        closed = asyncio.ensure_future(self._closed_event.wait())
        try:
            done, _ = await asyncio.wait({get, closed}, timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not get.done():
                get.cancel()
        if get in done:
            return get.result()
        if closed in done:
            raise ClosedError("the listener was closed while waiting in accept")
        raise Timeout("accept", timeout_s or 0.0)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        for closer in self.closers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closer(), _CLOSE_S)
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), _CLOSE_S)
        while not self._ready.empty():
            await self._ready.get_nowait().aclose()
        self.context.listener_closed(self)

    def close(self) -> None:
        pending = self.context.runner.spawn(self.aclose())
        if not self.context.runner.on_loop_thread():
            with contextlib.suppress(NetioError):
                pending.wait(_CLOSE_S + 1.0)


_SOFT_OPTIONS = ("rx_mode", "faults", "fault_seed", "verify_icrc")


def _make_backend(backend: str, *, device: str | None, port: int | None, gid: int | None,
                  local_addr: str | None, backend_options: dict[str, Any]) -> Backend:
    if backend not in BACKENDS:
        raise IoError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = "verbs" if _verbs_usable() else "soft"
    allowed = _SOFT_OPTIONS if backend == "soft" else ()
    unknown = sorted(set(backend_options) - set(allowed))
    if unknown:
        raise IoError(f"option(s) {', '.join(unknown)} are not known to the {backend} backend"
                      + (f" (it takes {', '.join(allowed)})" if allowed else ""))
    if backend == "soft":
        from netio.backends.soft.backend import SoftBackend

        return SoftBackend(local_addr=local_addr, **backend_options)
    if backend == "tcp":
        from netio.backends.tcp import TcpBackend

        return TcpBackend()
    try:
        from netio.backends import verbs
    except ImportError as exc:
        raise BackendUnavailable(f"the verbs backend cannot be loaded: {exc}",
                                 hint="apt-get install python3-pyverbs, then make install "
                                 "(it links pyverbs into netio's virtualenv)") from None
    made: Backend = verbs.VerbsBackend(device=device, port=port, gid_index=gid,
                                       local_addr=local_addr)
    return made


def _verbs_usable() -> bool:
    """True when pyverbs imports and lists at least one RDMA device."""
    try:
        import pyverbs.device

        return bool(pyverbs.device.get_device_list())
    except Exception:  # no pyverbs, no libibverbs, no devices: not usable
        return False


def open(backend: str = "auto", *, device: str | None = None, port: int | None = None,
         gid: int | None = None, local_addr: str | None = None, mtu: int | None = None,
         traffic_class: int = 0, timeout_s: float = 10.0, ack_timeout: int = 14,
         retry_count: int = 7, rnr_retry: int = 7, min_rnr_timer: int = 12, qkey: int = 0,
         max_rd_atomic: int = 16, qp_access: Access = QP_ACCESS_ALL,
         progress: str = "loop", **backend_options: Any) -> Context:
    """Open a context on ``backend``: ``"soft"`` (netio's RoCEv2 engine on UDP),
    ``"verbs"`` (rdma-core: RoCE NICs, kernel rxe), ``"tcp"``, or ``"auto"`` (verbs when
    a usable RDMA device exists, else soft).

    ``device``/``port``/``gid`` pin the RDMA device, port and GID index (by default netio
    chooses and :meth:`Context.describe` says why); ``local_addr`` the local IP;
    ``mtu`` caps the path MTU (256..4096); ``traffic_class`` is the IP TOS byte;
    ``timeout_s`` bounds every connect, accept and exchange step; ``ack_timeout``,
    ``retry_count``, ``rnr_retry``, ``min_rnr_timer`` are the RC QP attributes (IBTA
    meanings; rnr_retry 7 retries for ever); ``qkey`` the Q_Key of datagram endpoints,
    ``max_rd_atomic`` the READs/atomics in flight, ``qp_access`` the remote operations a
    QP accepts. The soft backend also takes ``rx_mode``, ``faults``, ``fault_seed`` and
    ``verify_icrc`` (see :class:`netio.backends.soft.SoftRoceDriver`).

    ``progress`` says who drives the context: ``"loop"`` (default) an event loop, the
    caller's when opened inside one, else a private loop thread; ``"poll"`` the thread
    that waits, busy-polling the backend with no thread hop (lowest latency; nothing
    progresses between waits; see :mod:`netio.api.handles`). A polled context may also
    be awaited from any event loop (a worker thread drives it then).
    """
    if progress not in PROGRESS:
        raise IoError(f"progress {progress!r} is not one of {', '.join(PROGRESS)}")
    if mtu is not None and mtu not in IB_MTUS:
        raise IoError(f"mtu {mtu} is not an IB MTU ({', '.join(map(str, IB_MTUS))})")
    for name, value, hi in (("ack_timeout", ack_timeout, 31), ("retry_count", retry_count, 7),
                            ("rnr_retry", rnr_retry, 7), ("min_rnr_timer", min_rnr_timer, 31),
                            ("traffic_class", traffic_class, 255)):
        if not isinstance(value, int) or not 0 <= value <= hi:
            raise IoError(f"{name}={value!r} is outside 0..{hi}")
    if not timeout_s > 0:
        raise IoError(f"timeout_s={timeout_s!r} must be positive")
    if not 0 <= qkey <= 0xFFFFFFFF or not 0 <= max_rd_atomic <= 255:
        raise IoError("qkey must fit 32 bits and max_rd_atomic 0..255")
    qp = QpOptions(timeout=ack_timeout, retry_count=retry_count, rnr_retry=rnr_retry,
                   min_rnr_timer=min_rnr_timer, traffic_class=traffic_class, qkey=qkey,
                   max_rd_atomic=max_rd_atomic, access=Access(qp_access))
    made = _make_backend(backend, device=device, port=port, gid=gid, local_addr=local_addr,
                         backend_options=backend_options)
    if progress == "poll":
        runner = Runner.polled_by_caller()
        # the optional hook of netio.backends.base.Progressable: drive without blocking
        runner.set_progress(getattr(made, "progress", None), getattr(made, "progress_fds", None))
    else:
        runner = Runner.current_or_private()
    return Context(made, ContextOptions(made.name, timeout_s, mtu, qp), runner)


@atexit.register
def _close_all() -> None:
    """At interpreter exit: close what the program left open, bounded."""
    for ctx in list(_open_contexts):
        with contextlib.suppress(Exception):
            if not ctx.runner.on_loop_thread() and ctx.runner.owned:
                ctx.close(timeout_s=2.0)


__all__ = ["BACKENDS", "Context", "ContextOptions", "Listener", "open"]
