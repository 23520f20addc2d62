"""The asyncio I/O driver of the soft RoCE engine.

The engine (``netio.roce.RoceEngine``) is sans-I/O; this module gives it
sockets, a clock and timers (aioquic's ``asyncio/protocol.py`` pattern):

* every received datagram goes to the engine with ``time.monotonic_ns()``;
* after every batch of input, every posted work request (:meth:`SoftRoceDriver.kick`)
  and every timer, the driver sends what ``datagrams_to_send`` returns and
  re-arms one ``loop.call_at`` for the earliest engine deadline;
* coroutines wait for completions with :meth:`SoftRoceDriver.wait_cq`;
* a thread that drives the context itself (``progress="poll"``) calls
  :meth:`SoftRoceDriver.poll_progress` in its spin loop instead: the same input, output
  and timer steps, without blocking and without the loop (the loop's reader and timer
  stay registered for when that thread sleeps in epoll).

Datagrams go out from UDP port ``0xC000 | f(QPN)`` (the engine picks it the
way rxe does) to port 4791, with the QP's DSCP/ECN in the TOS byte, DF set and
IPv4 identification 0 (see :mod:`netio.backends.soft.sockets`): the header
the engine assumed when it computed the ICRC. The port is always 4791 because
the ICRC covers the UDP destination port.

The optional lossy link (``faults``) is ``netio.roce.link.FaultyLink`` put on
the egress path: seeded drop, duplication, corruption, delay and reordering of
this endpoint's datagrams before they reach the socket.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from netio.backends.soft.rx_icrc import HeaderlessVerifier
from netio.backends.soft.sockets import (
    ROCEV2_UDP_PORT,
    OffloadMode,
    RxMode,
    open_raw_receive_socket,
    open_send_socket,
    open_udp_receive_socket,
    parse_raw_ipv4,
    probe_udp_gso,
)
from netio.environment import choice
from netio.errors import DriverSocketError
from netio.roce.engine import CompletionQueue, OutgoingDatagram, OutgoingRun, RoceEngine
from netio.roce.link import FaultyLink, LinkFaults
from netio.roce.native_path import UDP_GRO, RxRing, recycle
from netio.roce.qp import QueuePair
from netio.roce.verbs import Completion, RecvWr, SendWr

log = logging.getLogger(__name__)

_RX_BUFFER_BYTES = 65536
_MAX_RX_BATCH = 256
_RING_SLOTS = 64
_RING_SLOT_BYTES = 9216  # a 4096-byte MTU packet with every header fits; larger is not RoCE


@dataclass(slots=True)
class DriverStats:
    """Driver counters (the engine keeps its own in ``engine.stats``)."""

    datagrams_sent: int = 0
    datagrams_received: int = 0
    rx_not_roce: int = 0
    rx_icrc_failed: int = 0
    tx_deferred: int = 0
    tx_errors: int = 0
    last_tx_error: str = ""
    timer_fires: int = 0


@dataclass(frozen=True, slots=True)
class DriverConfig:
    """How a :class:`SoftRoceDriver` talks to the network.

    ``local_ip``: the address to bind (IPv4; the engine's GID is
    ``::ffff:local_ip``). ``rx_mode``: see :class:`RxMode`. ``faults`` and
    ``fault_seed``: the egress lossy link (None: a perfect link). ``gso``, ``gro``:
    UDP GSO for native sends, UDP GRO for the native receive ring (UDP receive only; see
    :class:`OffloadMode`)."""

    local_ip: ipaddress.IPv4Address
    rx_mode: RxMode = RxMode.AUTO
    faults: LinkFaults | None = None
    fault_seed: int = 0
    gso: OffloadMode | None = None  # None: $NETIO_SOFT_GSO ("off", "on", "auto"), else off
    gro: OffloadMode | None = None  # None: $NETIO_SOFT_GRO, else auto


def _mode(given: OffloadMode | None, variable: str, default: OffloadMode) -> OffloadMode:
    if given is not None:
        return given
    return choice(variable, OffloadMode, default)


#: errnos of a GSO send the kernel or the route does not take (udp_send_skb: EINVAL,
#: EIO for a device without checksum offload; EOPNOTSUPP, ENOPROTOOPT: unknown option)
_GSO_REFUSED = frozenset((errno.EINVAL, errno.EIO, errno.EOPNOTSUPP, errno.ENOPROTOOPT))


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


@dataclass(slots=True)
class _Waiter:
    cq: CompletionQueue
    future: asyncio.Future[None] = field(repr=False)


#: Drivers of closed contexts whose closed QPs still answer duplicates (``linger``), by
#: address: a context opened on the same address and loop takes one over; one opened on
#: another loop (the first ended: asyncio.run) closes it and binds the port itself.
_lingering: dict[ipaddress.IPv4Address, SoftRoceDriver] = {}
#: how long after the linger's end the backstop timer acts (the loop's own timer comes first)
_LINGER_SLACK_S = 0.2


def _evict_lingering(ip: ipaddress.IPv4Address) -> None:
    """Close the lingering driver of ``ip`` (its port is wanted by a new driver)."""
    driver = _lingering.pop(ip, None)
    if driver is None:
        return
    loop = driver._loop
    if loop is not None and not loop.is_closed() and loop.is_running() and (
            loop is not _running_loop()):
        # Another thread's loop still runs it: close it there (the new bind may find
        # the port still taken for that moment and say so).
        loop.call_soon_threadsafe(driver._close_now)
        return
    driver._close_now()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SoftRoceDriver:
    """A ``RoceEngine`` on real sockets, driven by the running asyncio loop.

    Create it with :meth:`open` (inside a running loop), use the engine's
    verbs objects (``driver.engine``), post with :meth:`post_send` /
    :meth:`post_recv`, and wait with :meth:`wait_cq`. ``close()`` releases the
    sockets.
    """

    def __init__(self, engine: RoceEngine, config: DriverConfig) -> None:
        if not isinstance(engine.local_ip, ipaddress.IPv4Address):
            raise DriverSocketError("soft RoCE driver", OSError(0, "only IPv4 is supported"))
        self.engine = engine
        self.config = config
        self.stats = DriverStats()
        self.rx_mode = RxMode.UDP
        self._loop: asyncio.AbstractEventLoop | None = None
        self._udp_sock: socket.socket | None = None
        self._raw_sock: socket.socket | None = None
        self._send_socks: dict[tuple[int, int], socket.socket] = {}
        self._rx_buf = bytearray(_RX_BUFFER_BYTES)
        self._rx_view = memoryview(self._rx_buf)
        self._verifier = HeaderlessVerifier()
        self._link = (FaultyLink(config.fault_seed, _zero_latency(config.faults))
                      if config.faults is not None else None)
        self._backlog: deque[tuple[OutgoingDatagram | OutgoingRun, int]] = deque()
        self._ring: RxRing | None = None  # the native path's recvmmsg ring
        self._writer_fd: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ns: int | None = None
        self._waiters: list[_Waiter] = []
        self._progress: list[tuple[Callable[[], None], CompletionQueue | None]] = []
        self._closed = False
        self._flush_scheduled = False
        self._linger_handle: asyncio.TimerHandle | None = None
        self._linger_backstop: threading.Timer | None = None
        self.gso = False  # native runs go out with UDP GSO
        self.gso_reason = "off"  # why it is on or off (diagnostics)
        self.gro = False  # the UDP receive socket coalesces (UDP_GRO), the ring splits
        self.gro_reason = "off"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the driver runs on (None before :meth:`start`)."""
        return self._loop

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    async def open(cls, local_ip: ipaddress.IPv4Address | str, *,
                   rx_mode: RxMode = RxMode.AUTO, faults: LinkFaults | None = None,
                   fault_seed: int = 0, verify_icrc: bool = True,
                   gso: OffloadMode | None = None,
                   gro: OffloadMode | None = None) -> SoftRoceDriver:
        """A new engine for ``local_ip`` and its driver, started on the running loop."""
        ip = ipaddress.IPv4Address(str(local_ip))
        engine = RoceEngine(ip, verify_icrc=verify_icrc)
        driver = cls(engine, DriverConfig(ip, rx_mode, faults, fault_seed, gso, gro))
        driver.start()
        return driver

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        ip = self.config.local_ip
        _evict_lingering(ip)
        mode = self.config.rx_mode
        raw: socket.socket | None = None
        if mode in (RxMode.AUTO, RxMode.RAW):
            try:
                raw = open_raw_receive_socket(ip, ROCEV2_UDP_PORT)
            except DriverSocketError:
                if mode is RxMode.RAW:
                    raise
        # The UDP socket holds port 4791 in both modes; with a raw socket it drops everything.
        try:
            self._udp_sock = open_udp_receive_socket(ip, ROCEV2_UDP_PORT, drop_all=raw is not None)
        except DriverSocketError:
            if raw is not None:
                raw.close()
            raise
        self._raw_sock = raw
        self.rx_mode = RxMode.RAW if raw is not None else RxMode.UDP
        rx = raw if raw is not None else self._udp_sock
        self._resolve_gso()
        if self.engine.native:
            self._resolve_gro()
            self._ring = RxRing(_RING_SLOTS, _RING_SLOT_BYTES, raw=raw is not None,
                                gro=self.gro)
        loop.add_reader(rx.fileno(), self._on_readable)

    def linger(self, until_ns: int) -> None:
        """Keep running until ``until_ns`` (monotonic), then close: the engine's closed QPs
        answer their peers' retransmissions meanwhile. Only while the loop runs (a loop
        that stops first just leaves the sockets to be closed with the driver)."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed:
            self._close_now()
            return
        ip = self.config.local_ip
        if _lingering.get(ip) not in (None, self):
            _evict_lingering(ip)
        _lingering[ip] = self
        self._linger_handle = loop.call_at(until_ns / 1e9, self._end_linger)
        # asyncio.run closes its loop at once and a synchronous context's private loop
        # stops with it: the loop's timer would never fire and port 4791 of this address
        # would stay bound for the life of the process. A daemon timer ends the linger
        # on time whatever becomes of the loop.
        delay_s = max(0.0, (until_ns - time.monotonic_ns()) / 1e9) + _LINGER_SLACK_S
        backstop = threading.Timer(delay_s, self._end_linger_off_loop)
        backstop.daemon = True
        backstop.start()
        self._linger_backstop = backstop

    def _end_linger_off_loop(self) -> None:
        """The backstop timer: hand the end to the loop while it runs, else end it here
        (a stopped or closed loop runs nothing, so nothing races with this thread)."""
        if self._closed or self._linger_backstop is None:
            return  # closed, or taken over by a new context (take_lingering)
        loop = self._loop
        if loop is not None and loop.is_running():
            try:
                loop.call_soon_threadsafe(self._end_linger)
                return
            except RuntimeError:  # closed between the check and the call
                pass
        self._end_linger()

    def _end_linger(self) -> None:
        if self._closed or _lingering.get(self.config.local_ip) is not self:
            return  # closed already, or taken over by a new context meanwhile
        self._linger_handle = None
        del _lingering[self.config.local_ip]
        self._close_now()

    @classmethod
    def take_lingering(cls, ip: ipaddress.IPv4Address) -> SoftRoceDriver | None:
        """The lingering driver of ``ip`` on the running loop, taken over (or None)."""
        loop = asyncio.get_running_loop()
        driver = _lingering.get(ip)
        if driver is None:
            return None
        if driver._closed or driver._loop is not loop:
            _evict_lingering(ip)
            return None
        del _lingering[ip]
        if driver._linger_handle is not None:
            driver._linger_handle.cancel()
            driver._linger_handle = None
        if driver._linger_backstop is not None:
            driver._linger_backstop.cancel()
            driver._linger_backstop = None
        return driver

    async def close(self) -> None:
        self._close_now()

    def _close_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        loop = self._loop
        if self._timer is not None:
            self._timer.cancel()
        for sock in (self._raw_sock, self._udp_sock):
            if sock is not None:
                if loop is not None:
                    loop.remove_reader(sock.fileno())
                sock.close()
        if self._writer_fd is not None and loop is not None:
            loop.remove_writer(self._writer_fd)
        for sock in self._send_socks.values():
            sock.close()
        self._send_socks.clear()
        for w in self._waiters:
            if not w.future.done():
                w.future.cancel()
        self._waiters.clear()

    async def __aenter__(self) -> SoftRoceDriver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def link(self) -> FaultyLink | None:
        """The egress lossy link (its ``counters`` say what it did), or None."""
        return self._link

    # -- work requests -------------------------------------------------------------------

    def post_send(self, qp: QueuePair, wr: SendWr) -> None:
        qp.post_send(wr)
        self.kick()

    def post_recv(self, qp: QueuePair, wr: RecvWr) -> None:
        qp.post_recv(wr)

    def kick(self) -> None:
        """Send what the engine has ready (call after posting send work requests)."""
        self._after_input(time.monotonic_ns())

    async def wait_cq(self, cq: CompletionQueue, max_entries: int = 16,
                      timeout_s: float | None = None) -> list[Completion]:
        """Completions from ``cq``, waiting until there is at least one.

        Raises TimeoutError after ``timeout_s`` without any. The timeout is a
        timer on the waiter's future rather than ``asyncio.wait_for``, which in
        Python 3.11 loses a cancellation (Ctrl-C) that arrives as a completion
        wakes the waiter: a busy test loop would then never stop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            entries = cq.poll(max_entries)
            if entries:
                return entries
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"no completion within {timeout_s} s")
            waiter = _Waiter(cq, loop.create_future())
            self._waiters.append(waiter)
            timer = None if deadline is None else loop.call_at(deadline, _expire, waiter.future)
            try:
                await waiter.future
            except TimeoutError:
                raise TimeoutError(f"no completion within {timeout_s} s") from None
            finally:
                if timer is not None:
                    timer.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    # -- input ---------------------------------------------------------------------------

    def _on_readable(self) -> None:
        now_ns = time.monotonic_ns()
        sock = self._raw_sock if self._raw_sock is not None else self._udp_sock
        if self._ring is not None and sock is not None:
            self._drain_ring(self._ring, sock, now_ns)
        elif self._raw_sock is not None:
            self._drain_raw(self._raw_sock, now_ns)
        elif self._udp_sock is not None:
            self._drain_udp(self._udp_sock, now_ns)
        if self.engine.acks_held and self._loop is not None:
            # Completions first: an application that answers one (a ping-pong) posts its
            # answer in the next loop turn, ahead of the flush scheduled here, and the
            # held ACKs go out with it (one wake-up on the peer instead of two). Without
            # a held ACK nothing waits: what the batch produced goes now.
            self._wake_waiters()
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._deferred_flush)
            return
        self._after_input(now_ns)

    def _deferred_flush(self) -> None:
        if not self._flush_scheduled:
            return  # flushed already (a post, or a polled progress)
        self._flush_scheduled = False
        self._after_input(time.monotonic_ns())

    @property
    def rx_fd(self) -> int | None:
        """The socket datagrams arrive on (None once closed)."""
        sock = self._raw_sock if self._raw_sock is not None else self._udp_sock
        return None if sock is None or self._closed else sock.fileno()

    def poll_progress(self) -> bool:
        """One non-blocking pass for a thread that drives the engine itself: what waits in
        the receive socket (``recvmmsg`` + the native path), the engine timer if due, and
        the output. True when a datagram came in or a timer fired. Held ACKs go out with
        the next post (the answer of a ping-pong) or at the next pass, as
        :meth:`_on_readable` does with its deferred flush."""
        if self._closed:
            return False
        now_ns = time.monotonic_ns()
        if self._flush_scheduled:
            self._flush_scheduled = False
            self._after_input(now_ns)
        sock = self._raw_sock if self._raw_sock is not None else self._udp_sock
        if sock is None:
            return False
        got = self.stats.datagrams_received
        if self._ring is not None:
            self._drain_ring(self._ring, sock, now_ns)
        elif self._raw_sock is not None:
            self._drain_raw(self._raw_sock, now_ns)
        else:
            self._drain_udp(sock, now_ns)
        fired = False
        at = self._timer_at_ns
        if at is not None and at <= now_ns:
            if self._timer is not None:
                self._timer.cancel()
            self._on_timer()  # sends, re-arms and wakes
            fired = True
        if self.stats.datagrams_received == got:
            return fired
        if self.engine.acks_held:
            self._wake_waiters()
            if not self._flush_scheduled and self._loop is not None:
                self._flush_scheduled = True
                self._loop.call_soon(self._deferred_flush)  # also when the loop runs next
            return True
        self._after_input(now_ns)
        return True

    def lend_sockets(self, src_port: int, tos: int) -> tuple[int, int, RxRing] | None:
        """The receive socket, the send socket of (``src_port``, ``tos``) and the native
        receive ring, for one call into C that does the I/O of a QP itself (the
        ping-pong of :mod:`netio.backends.soft.pingpong`): None without the native
        path, with a lossy link (its faults are applied here, in Python) or once closed.
        What the engine had to send goes first, held ACKs included."""
        sock = self._raw_sock if self._raw_sock is not None else self._udp_sock
        if self._ring is None or self._link is not None or self._closed or sock is None:
            return None
        self._flush_scheduled = False
        self._after_input(time.monotonic_ns())  # sends, arms the engine's timer, wakes
        if self._backlog:
            return None  # the socket refused earlier output: the engine's path waits for it
        return sock.fileno(), self._send_socket(src_port, tos).fileno(), self._ring

    def take_datagrams(self, datagrams: list[tuple[memoryview, int, int]], *, sent: int,
                       received: int) -> None:
        """Hand the engine what a lent-socket call set aside (each datagram as the ring
        slot held it, with its source IPv4 address and port), in arrival order, count the
        datagrams that call sent and received itself, and send what the engine has to
        send (an ACK the call left owed)."""
        self.stats.datagrams_sent += sent
        self.stats.datagrams_received += received + len(datagrams)
        if self._closed:
            return
        now_ns = time.monotonic_ns()
        for data, src_ip, src_port in datagrams:
            if self._raw_sock is not None:
                self._raw_one(data, now_ns)
            else:
                self._udp_one(data, ipaddress.IPv4Address(src_ip), src_port, now_ns)
        self._after_input(now_ns)

    def _drain_ring(self, ring: RxRing, sock: socket.socket, now_ns: int) -> None:
        """Native path: recvmmsg batches; the engine places what it can in C and hands
        the rest, one datagram at a time, to the same code as the pure path."""
        fd = sock.fileno()
        raw = self._raw_sock is not None
        engine = self.engine
        got = 0
        while got < _MAX_RX_BATCH:
            n = ring.recv(fd)
            if n <= 0:
                return
            got += n
            self.stats.datagrams_received += n
            engine.receive_ring(ring, now_ns, (lambda i: self._raw_one(ring.slot(i), now_ns))
                                if raw else (lambda i: self._udp_one(ring.slot(i),
                                                                     *ring.source(i), now_ns)))
            if not ring.full:
                return
            # More may wait (recvmmsg filled every message; not "n < nslots": a GRO
            # ring offers one message per 64 KiB region and may yield fewer datagrams
            # than nslots). Send the ACKs (and anything else) this batch produced
            # first, so that the peer's window opens while we drain the rest.
            self._flush(now_ns)

    def _raw_one(self, packet: memoryview, now_ns: int) -> None:
        if parse_raw_ipv4(packet) is None:
            self.stats.rx_not_roce += 1
            return
        self.engine.receive_ip_packet(packet, now_ns)

    def _udp_one(self, payload: memoryview, src_ip: ipaddress.IPv4Address, src_port: int,
                 now_ns: int) -> None:
        engine = self.engine
        if engine.verify_icrc and not self._verifier.verify(
            payload, src_ip=src_ip, dst_ip=self.config.local_ip, src_port=src_port,
            dst_port=ROCEV2_UDP_PORT,
        ):
            self.stats.rx_icrc_failed += 1
            return
        engine.receive_datagram(payload, src_ip, now_ns, src_port, ip_id=None)

    def _drain_raw(self, sock: socket.socket, now_ns: int) -> None:
        view = self._rx_view
        engine = self.engine
        for _ in range(_MAX_RX_BATCH):
            try:
                n = sock.recv_into(self._rx_buf)
            except (BlockingIOError, InterruptedError):
                return
            self.stats.datagrams_received += 1
            packet = view[:n]
            if parse_raw_ipv4(packet) is None:
                self.stats.rx_not_roce += 1
                continue
            # The whole IP packet: the engine checks the ICRC exactly as sent.
            engine.receive_ip_packet(packet, now_ns)

    def _drain_udp(self, sock: socket.socket, now_ns: int) -> None:
        view = self._rx_view
        engine = self.engine
        local = self.config.local_ip
        for _ in range(_MAX_RX_BATCH):
            try:
                n, addr = sock.recvfrom_into(self._rx_buf)
            except (BlockingIOError, InterruptedError):
                return
            self.stats.datagrams_received += 1
            payload = view[:n]
            src_ip = ipaddress.IPv4Address(addr[0])
            src_port = int(addr[1])
            if engine.verify_icrc and not self._verifier.verify(
                payload, src_ip=src_ip, dst_ip=local, src_port=src_port,
                dst_port=ROCEV2_UDP_PORT,
            ):
                self.stats.rx_icrc_failed += 1
                continue
            # Checked above without the IP identification; the engine must not
            # check again assuming identification 0 (kernel rxe sends others).
            engine.receive_datagram(payload, src_ip, now_ns, src_port, ip_id=None)

    # -- output and timers ---------------------------------------------------------------

    def _after_input(self, now_ns: int) -> None:
        if self._closed:
            return
        self._flush(now_ns)
        self._arm_timer()
        self._wake_waiters()

    def _flush(self, now_ns: int) -> None:
        link = self._link
        if link is None:
            for item in self.engine.output_to_send(now_ns):
                self._send(item)
            return
        out = self.engine.datagrams_to_send(now_ns)
        for d in out:
            link.send(d, now_ns)
        for d in link.pop_due(now_ns):
            self._send(d)

    def _resolve_gso(self) -> None:
        mode = _mode(self.config.gso, "NETIO_SOFT_GSO", OffloadMode.OFF)
        if mode is OffloadMode.OFF or not self.engine.native:
            self.gso, self.gso_reason = False, ("off" if mode is OffloadMode.OFF
                                                else "off: no native path")
            return
        if mode is OffloadMode.AUTO and self.rx_mode is not RxMode.UDP:
            self.gso, self.gso_reason = False, "auto: off with raw receive"
            return
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            why = probe_udp_gso(probe)
        finally:
            probe.close()
        self.gso, self.gso_reason = (False, f"off: {why}") if why else (True, "on")

    def _resolve_gro(self) -> None:
        """UDP_GRO on the UDP receive socket (only the native ring splits what it
        coalesces; a raw socket gets no GRO)."""
        # auto (on with UDP receive) by default, unlike GSO: receive only, so nothing on
        # the wire changes; it costs nothing when nothing coalesces and saves receive
        # CPU when the peer sends GSO (native_path.py has the figures)
        mode = _mode(self.config.gro, "NETIO_SOFT_GRO", OffloadMode.AUTO)
        if mode is OffloadMode.OFF:
            self.gro, self.gro_reason = False, "off"
            return
        if self.rx_mode is not RxMode.UDP or self._udp_sock is None:
            self.gro, self.gro_reason = False, f"{mode.value}: off with raw receive"
            return
        try:
            self._udp_sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        except OSError as exc:
            self.gro, self.gro_reason = False, f"off: setsockopt(UDP_GRO) failed: {exc}"
            return
        self.gro, self.gro_reason = True, "on" if mode is OffloadMode.ON else "auto: on"

    def _send_socket(self, src_port: int, tos: int) -> socket.socket:
        key = (src_port, tos)
        sock = self._send_socks.get(key)
        if sock is None:
            sock = open_send_socket(self.config.local_ip, src_port, tos)
            self._send_socks[key] = sock
        return sock

    def _send(self, d: OutgoingDatagram | OutgoingRun) -> None:
        if self._backlog:
            self._backlog.append((d, 0))
            return
        self._send_now(d, 0)

    def _send_now(self, d: OutgoingDatagram | OutgoingRun, start: int) -> bool:
        sock = self._send_socket(d.src_udp_port, (d.dscp << 2) | d.ecn)
        if isinstance(d, OutgoingRun):
            return self._send_run(sock, d, start)
        try:
            sock.sendto(d.payload, (str(d.dst_ip), ROCEV2_UDP_PORT))
        except (BlockingIOError, InterruptedError):
            self.stats.tx_deferred += 1
            self._backlog.appendleft((d, 0))  # first in line, from _send or the backlog
            self._want_writable(sock)
            return False
        except OSError as exc:
            # e.g. EMSGSIZE (DF and larger than the route MTU) or no route: the packet
            # is lost; the transport's retries and its error completions report it.
            self.stats.tx_errors += 1
            if self.stats.last_tx_error != str(exc):
                log.warning("soft RoCE send to %s failed: %s", d.dst_ip, exc)
            self.stats.last_tx_error = str(exc)
            return True
        self.stats.datagrams_sent += 1
        return True

    def _send_run(self, sock: socket.socket, d: OutgoingRun, start: int) -> bool:
        """sendmmsg the rest of a native run; what the socket refuses waits for POLLOUT."""
        run = d.run
        while start < run.count:
            n = run.send(sock.fileno(), int(d.dst_ip), start, gso=self.gso)
            if n > 0:
                self.stats.datagrams_sent += n
                start += n
                continue
            err = -n
            if self.gso and err in _GSO_REFUSED:
                # The kernel or route does not take GSO after all: sendmmsg from now on.
                self.gso, self.gso_reason = False, f"off: GSO send failed: {os.strerror(err)}"
                log.info("soft RoCE: UDP GSO %s", self.gso_reason)
                continue
            if err in (errno.EAGAIN, errno.EINTR):
                self.stats.tx_deferred += 1
                self._backlog.appendleft((d, start))
                self._want_writable(sock)
                return False
            # As for one datagram: the rest of the run is lost; retries report it.
            self.stats.tx_errors += 1
            message = os.strerror(err)
            if self.stats.last_tx_error != message:
                log.warning("soft RoCE send to %s failed: %s", d.dst_ip, message)
            self.stats.last_tx_error = message
            recycle(run)
            return True
        recycle(run)  # all of it went: sendmmsg copied the packets
        return True

    def _want_writable(self, sock: socket.socket) -> None:
        if self._writer_fd is None and self._loop is not None:
            self._writer_fd = sock.fileno()
            self._loop.add_writer(self._writer_fd, self._on_writable)

    def _on_writable(self) -> None:
        if self._writer_fd is not None and self._loop is not None:
            self._loop.remove_writer(self._writer_fd)
            self._writer_fd = None
        while self._backlog:
            d, start = self._backlog.popleft()
            if not self._send_now(d, start):
                return

    def _arm_timer(self) -> None:
        loop = self._loop
        if loop is None:
            return
        deadline = self.engine.get_timer()
        if self._link is not None:
            nxt = self._link.next_delivery_ns()
            if nxt is not None and (deadline is None or nxt < deadline):
                deadline = nxt
        armed = self._timer_at_ns
        if armed is not None and (deadline is None or armed <= deadline):
            # The armed timer comes first: it finds nothing due and re-arms. Cheaper than
            # a new TimerHandle for every send and ACK, which move the deadline later.
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at_ns = deadline
        if deadline is not None:
            # loop.time() is time.monotonic(): the same clock as monotonic_ns().
            self._timer = loop.call_at(deadline / 1e9, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ns = None
        now_ns = time.monotonic_ns()
        due = self.engine.get_timer()
        if due is not None and due <= now_ns:
            self.stats.timer_fires += 1  # a deadline came (not an early, lazy timer)
        self.engine.handle_timer(now_ns)
        self._after_input(now_ns)

    def add_progress_callback(self, callback: Callable[[], None],
                              cq: CompletionQueue | None = None) -> None:
        """Call ``callback`` after every batch of input, post and timer (completions may
        be waiting): how the IO API learns of completions without a waiter per CQ. With
        ``cq``, only when ``cq`` holds completions (a post or an ACK that completed
        nothing then costs no call into the IO API)."""
        self._progress.append((callback, cq))

    def remove_progress_callback(self, callback: Callable[[], None]) -> None:
        self._progress = [(c, q) for c, q in self._progress if c is not callback]

    def _wake_waiters(self) -> None:
        for callback, cq in tuple(self._progress):
            if cq is None or len(cq):
                callback()
        if not self._waiters:
            return
        for w in self._waiters:
            if not w.future.done() and len(w.cq):
                w.future.set_result(None)


def _zero_latency(faults: LinkFaults | None) -> LinkFaults:
    """The driver's link adds faults only: the network supplies the latency."""
    import dataclasses

    base = faults or LinkFaults()
    return dataclasses.replace(base, latency_ns=0)


__all__ = ["DriverConfig", "DriverStats", "SoftRoceDriver"]
