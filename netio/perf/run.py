"""Both sides of ``netio bench`` on the public IO API (any backend).

The client drives; the server follows. They agree over the first endpoint with small
JSON control messages (SEND into a 4 KiB control buffer): the client sends the run
(``spec``, with its buffer's descriptor), the server answers ``ready`` with its own;
for each size the client sends ``step``, the server prepares (posts the receives the
mode needs) and answers ``go``; after the data phase the client sends ``done`` and the
server answers with its CPU time. A receive queue is first in, first out, so each side
posts its control receive only after the data receives that precede it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import netio
from netio.api.endpoint import Endpoint, WorkRequest
from netio.api.region import Region, RemoteRegion
from netio.backends.base import RecvRequest, SendRequest
from netio.backends.soft.backend import SoftBackend
from netio.backends.soft.pingpong import SoftPingPong
from netio.backends.verbs import VerbsBackend, VerbsQp
from netio.errors import ExchangeMismatch, IoError
from netio.perf.spec import (
    ATOMIC_BYTES,
    BandwidthResult,
    LatencyResult,
    Mode,
    RunSpec,
)

CONTROL_BYTES = 4096
_PROTOCOL = "netio-bench/1"
_ALL_ACCESS = (netio.Access.LOCAL_WRITE | netio.Access.REMOTE_WRITE
               | netio.Access.REMOTE_READ | netio.Access.REMOTE_ATOMIC)

Result = BandwidthResult | LatencyResult
# wr_ids of the verbs latency path's own requests (the endpoint numbers its from 1 up;
# the last SEND is _FAST_SEND_ID + 1)
_FAST_SEND_ID = 0xFFFF_FFFF_FFFF_FF01
_FAST_RECV_ID = 0xFFFF_FFFF_FFFF_FF03
# one SEND in this many is signaled, as perftest moderates completions (the rest are
# retired by it): the send queue never fills, and few completions are polled
_FAST_SIGNAL_EVERY = 64


@dataclass
class _Control:
    ep: Endpoint
    region: Region
    buffer: bytearray
    out_region: Region
    out_buffer: bytearray

    @classmethod
    def make(cls, ctx: netio.Context, ep: Endpoint) -> _Control:
        buffer = bytearray(CONTROL_BYTES)
        out = bytearray(CONTROL_BYTES)
        return cls(ep, ctx.register(buffer), buffer, ctx.register(out), out)

    async def send(self, ctx: netio.Context, kind: str, **body: Any) -> None:
        data = json.dumps({"kind": kind, **body}).encode()
        if len(data) > CONTROL_BYTES:
            raise IoError(f"bench control message {kind} of {len(data)} bytes is too long")
        self.out_buffer[:len(data)] = data
        await self.ep.send(self.out_region[0:len(data)])

    def expect(self) -> netio.Pending[netio.Completion]:
        return self.ep.recv(self.region)

    async def take(self, pending: netio.Pending[netio.Completion], kind: str,
                   timeout_s: float) -> dict[str, Any]:
        try:
            completion = await asyncio.wait_for(_wrap(pending), timeout_s)
        except TimeoutError:
            raise netio.Timeout(f"bench control {kind}", timeout_s) from None
        try:
            message = json.loads(bytes(self.buffer[:completion.byte_len]))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ExchangeMismatch(f"bench control: expected {kind}, got a message that is "
                                   "not JSON (is the peer running netio bench?)") from None
        if not isinstance(message, dict) or message.get("kind") != kind:
            got = message.get("kind") if isinstance(message, dict) else message
            raise ExchangeMismatch(f"bench control: expected {kind}, got {got!r}")
        return message


async def _wrap(pending: netio.Pending[netio.Completion]) -> netio.Completion:
    return await pending


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


# -- server -------------------------------------------------------------------------------


async def serve(ctx: netio.Context, listener: netio.Listener,
                timeout_s: float) -> tuple[RunSpec, bool]:
    """Serve one client's whole run; the run it asked for, and whether the client said
    another run follows (``netio bench --profile`` runs a latency and a bandwidth sweep)."""
    first = await listener.accept(timeout_s=None)
    control = _Control.make(ctx, first)
    pending = control.expect()
    spec_msg = await control.take(pending, "spec", timeout_s)
    if spec_msg.get("protocol") != _PROTOCOL:
        raise ExchangeMismatch(f"bench: the client speaks {spec_msg.get('protocol')!r}, this "
                               f"server {_PROTOCOL!r}")
    spec = RunSpec(Mode(spec_msg["mode"]), tuple(spec_msg["sizes_bytes"]),
                   int(spec_msg["iterations"]), spec_msg.get("duration_s"),
                   int(spec_msg["queue_depth"]), int(spec_msg["endpoints"]),
                   int(spec_msg["max_bytes_per_size"]))
    endpoints = [first] + [await listener.accept(timeout_s=timeout_s)
                           for _ in range(spec.endpoints - 1)]
    buffer = bytearray(max(max(spec.sizes_bytes), ATOMIC_BYTES) * 2)
    region = ctx.register(buffer, _ALL_ACCESS)
    client_remote = RemoteRegion.from_descriptor(bytes.fromhex(spec_msg["descriptor"]))
    pending = control.expect()
    await control.send(ctx, "ready", descriptor=region.descriptor().hex())
    while True:
        msg = await _take_any(control, pending)
        if msg["kind"] == "bye":
            return spec, bool(msg.get("more", False))
        step = msg
        size = int(step["size_bytes"])
        counts = [int(n) for n in step["iterations"]]
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        if spec.mode is Mode.SEND_BW:
            tasks = [_sink_sends(ep, region, size, n, spec.queue_depth)
                     for ep, n in zip(endpoints, counts, strict=True)]
            pending_data = [asyncio.ensure_future(t) for t in tasks]
            await asyncio.sleep(0)  # the first receives are posted before "go"
            await control.send(ctx, "go")
            await asyncio.gather(*pending_data)
        elif (spec.mode is Mode.SEND_LAT and step.get("soft_pingpong")
              and (soft := _soft_pingpong(ctx, first, region, size, timeout_s)) is not None):
            # the client's first (warm-up) ping comes through the engine into this
            # receive; the call answers it and the rest, as the client's call runs
            ping = first.recv(region[0:size])
            await control.send(ctx, "go", soft_pingpong=True)
            await ping
            soft.run(counts[0] + 1, initiator=False, answer_first=True)
        elif spec.mode is Mode.SEND_LAT and (fast := _fast_qp(ctx, first)) is not None:
            pings = _FastPingPong(fast, first, region, size, timeout_s)
            pings.post_first()  # before "go": the first ping finds it
            await control.send(ctx, "go")
            pings.pong(counts[0])
        elif spec.mode.is_pingpong:
            ping = first.recv(region[0:size])  # before "go": the first ping finds it
            await control.send(ctx, "go")
            await _pong(spec.mode, first, region, client_remote, size, counts[0], ping)
        else:
            await control.send(ctx, "go")
        pending = control.expect()
        await control.take(pending, "done", timeout_s * 10 + (spec.duration_s or 0))
        cpu_s = time.process_time() - cpu0
        wall_s = time.perf_counter() - wall0
        pending = control.expect()
        await control.send(ctx, "result", cpu_s=cpu_s, wall_s=wall_s)


async def _take_any(control: _Control,
                    pending: netio.Pending[netio.Completion]) -> dict[str, Any]:
    completion = await pending  # no deadline: the client decides when the next step comes
    message = json.loads(bytes(control.buffer[:completion.byte_len]))
    if not isinstance(message, dict) or message.get("kind") not in ("step", "bye"):
        raise ExchangeMismatch(f"bench control: expected step or bye, got {message!r}")
    return message


async def _sink_sends(ep: Endpoint, region: Region, size: int, count: int,
                      depth: int) -> None:
    """Keep up to ``depth`` receives posted until ``count`` SENDs have landed."""
    target = region[0:size]
    posted = [ep.recv(target) for _ in range(min(depth, count))]
    done = 0
    while done < count:
        await posted[done]
        done += 1
        if len(posted) < count:
            posted.append(ep.recv(target))


async def _pong(mode: Mode, ep: Endpoint, region: Region, client: RemoteRegion, size: int,
                count: int, ping: netio.Pending[netio.Completion]) -> None:
    inbox = region[0:size]
    outbox = region[size:2 * size]
    for i in range(count):
        await ping
        if i + 1 < count:  # no receive left over: the next control message needs the queue
            ping = ep.recv(inbox)
        if mode is Mode.SEND_LAT:
            await ep.send(outbox)
        else:
            await ep.write(outbox, client[0:size], imm=1)


# -- client -------------------------------------------------------------------------------


Progress = Callable[[Result], None]


async def run_client(ctx: netio.Context, server: str, spec: RunSpec, timeout_s: float,
                     on_result: Progress | None = None, *, more: bool = False
                     ) -> tuple[list[Result], netio.Endpoint]:
    """Run ``spec`` against a ``netio bench`` server; one result per size, and the first
    endpoint (its ``path`` says what was measured). ``more``: another run follows."""
    first = await _connect_when_listening(ctx, server, timeout_s)
    endpoints = [first] + [await ctx.connect(server, timeout_s=timeout_s)
                           for _ in range(spec.endpoints - 1)]
    control = _Control.make(ctx, first)
    buffer = bytearray(max(max(spec.sizes_bytes), ATOMIC_BYTES) * 2)
    region = ctx.register(buffer, _ALL_ACCESS)
    pending = control.expect()
    await control.send(ctx, "spec", protocol=_PROTOCOL, mode=spec.mode.value,
                       sizes_bytes=list(spec.sizes_bytes), iterations=spec.iterations,
                       duration_s=spec.duration_s, queue_depth=spec.queue_depth,
                       endpoints=spec.endpoints, max_bytes_per_size=spec.max_bytes_per_size,
                       descriptor=region.descriptor().hex())
    ready = await control.take(pending, "ready", timeout_s)
    remote = RemoteRegion.from_descriptor(bytes.fromhex(ready["descriptor"]))
    results: list[Result] = []
    for size in spec.sizes_bytes:
        iterations = spec.iterations_for(size)
        counts = _split(iterations, spec.endpoints)
        soft = (_soft_pingpong(ctx, first, region, size, timeout_s)
                if spec.mode is Mode.SEND_LAT else None)
        pending = control.expect()
        await control.send(ctx, "step", size_bytes=size, iterations=counts,
                           soft_pingpong=soft is not None)
        go = await control.take(pending, "go", timeout_s)
        cpu0 = time.process_time()
        wall0 = time.perf_counter()
        measured: tuple[float, float, int] | list[float]
        if soft is not None and go.get("soft_pingpong"):
            # one warm-up round trip (the server takes it through the engine), not timed
            rtt_ns = soft.run(iterations + 1, initiator=True).rtt_ns[1:]
            measured = [ns / 2e3 for ns in rtt_ns]
        elif spec.mode is Mode.SEND_LAT and (fast := _fast_qp(ctx, first)) is not None:
            measured = _FastPingPong(
                fast, first, region, size, timeout_s).ping(iterations)
        elif spec.mode.is_latency:
            measured = await _latency(spec.mode, first, region, remote, size, iterations)
        else:
            measured = await _bandwidth(spec, endpoints, region, remote, size, counts)
        cpu_s = time.process_time() - cpu0
        wall_s = time.perf_counter() - wall0
        pending = control.expect()
        await control.send(ctx, "done")
        reply = await control.take(pending, "result", timeout_s)
        client_cpu = cpu_s / wall_s if wall_s > 0 else 0.0
        server_cpu = float(reply["cpu_s"]) / max(float(reply["wall_s"]), 1e-9)
        result: Result
        if isinstance(measured, list):
            result = LatencyResult.from_samples(size, measured, client_cpu, server_cpu)
        else:
            duration_s, peak_bps, done = measured
            average = size * done / duration_s
            result = BandwidthResult(size, done, duration_s, peak_bps / (1 << 20),
                                     average / (1 << 20), done / duration_s / 1e6, client_cpu,
                                     server_cpu)
        results.append(result)
        if on_result is not None:
            on_result(result)
    await control.send(ctx, "bye", more=more)
    return results, first


async def _connect_when_listening(ctx: netio.Context, server: str,
                                  timeout_s: float) -> Endpoint:
    """Connect, retrying a refused connection until ``timeout_s`` (as perftest's client
    waits for its server): the server may start after the client."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await ctx.connect(server, timeout_s=timeout_s)
        except netio.ConnectFailed as exc:
            if exc.errno != errno.ECONNREFUSED or time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.1)


def _bw_request(mode: Mode, region: Region, remote: RemoteRegion, size: int,
                signaled: bool) -> WorkRequest:
    local = region[0:size]
    if mode is Mode.WRITE_BW:
        return WorkRequest.write(local, remote[0:size], signaled=signaled)
    if mode is Mode.READ_BW:
        return WorkRequest.read(local, remote[0:size], signaled=signaled)
    if mode is Mode.SEND_BW:
        return WorkRequest.send(local, signaled=signaled)
    return WorkRequest.fetch_add(region[0:ATOMIC_BYTES], remote[0:ATOMIC_BYTES], 1)


async def _bandwidth(spec: RunSpec, endpoints: list[Endpoint], region: Region,
                     remote: RemoteRegion, size: int,
                     counts: list[int]) -> tuple[float, float, int]:
    """Post in batches of half the queue depth, two batches in flight per endpoint (the
    last of each batch signaled, as perftest moderates completions); the run's
    duration, the best batch's bytes per second, and the messages moved."""
    batch = max(1, spec.queue_depth // 2)
    deadline = None if spec.duration_s is None else time.perf_counter() + spec.duration_s
    peak = 0.0
    moved = 0

    async def one(ep: Endpoint, count: int) -> None:
        nonlocal peak, moved
        left = count
        in_flight: list[tuple[netio.Pending[list[netio.Completion]], float, int]] = []
        while left > 0 or in_flight:
            while (left > 0 or deadline is not None) and len(in_flight) < 2:
                if deadline is not None and time.perf_counter() >= deadline:
                    left = 0
                    break
                n = batch if deadline is not None else min(batch, left)
                requests = [_bw_request(spec.mode, region, remote, size,
                                        signaled=(i == n - 1)) for i in range(n)]
                in_flight.append((ep.post(requests), time.perf_counter(), n))
                if deadline is None:
                    left -= n
            if not in_flight:
                break
            handle, started, n = in_flight.pop(0)
            completions = await handle
            bad = next((c for c in completions if c.status is not netio.WcStatus.SUCCESS),
                       None)
            if bad is not None:
                raise ep.error_for(bad, _bw_request(spec.mode, region, remote, size, True))
            took = time.perf_counter() - started
            moved += n
            if took > 0:
                peak = max(peak, n * size / took)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(ep, n) for ep, n in zip(endpoints, counts, strict=True)))
    return time.perf_counter() - t0, peak, moved


async def _latency(mode: Mode, ep: Endpoint, region: Region, remote: RemoteRegion,
                   size: int, count: int) -> list[float]:
    samples: list[float] = []
    inbox = region[0:size]
    outbox = region[size:2 * size]
    clock = time.perf_counter_ns
    if mode is Mode.READ_LAT:
        for _ in range(count):
            t0 = clock()
            await ep.read(inbox, remote[0:size])
            samples.append((clock() - t0) / 1e3)
        return samples
    pong = ep.recv(inbox)  # after "go", before the first ping: the server answers into it
    for i in range(count):
        t0 = clock()
        if mode is Mode.SEND_LAT:
            await ep.send(outbox)
        else:
            await ep.write(outbox, remote[0:size], imm=1)
        await pong
        samples.append((clock() - t0) / 2e3)  # one way: half the round trip
        if i + 1 < count:
            pong = ep.recv(inbox)
    return samples


def _fast_qp(ctx: netio.Context, ep: Endpoint) -> VerbsQp | None:
    """The verbs QP under ``ep`` when it can post and busy-poll in one call into C."""
    backend = ctx.backend
    if not isinstance(backend, VerbsBackend):
        return None
    qp = backend.qp_for(ep.address.qpn)
    return qp if qp is not None and qp.can_exchange else None


def _soft_pingpong(ctx: netio.Context, ep: Endpoint, region: Region, size: int,
                   timeout_s: float) -> SoftPingPong | None:
    """send_lat over the soft backend as sockperf runs a ping-pong: the whole loop in
    one call into C on the engine's QP (:mod:`netio.backends.soft.pingpong`): the client
    sends from the second half of ``region`` and takes answers into the first; the
    server the same way round."""
    backend = ctx.backend
    if not isinstance(backend, SoftBackend):
        return None
    return backend.pingpong(ep.address.qpn, region[size:2 * size].segment(),
                            region[0:size].segment(), timeout_s)


class _FastPingPong:
    """send_lat over the verbs backend as ib_send_lat runs it: the whole ping-pong in one
    call into C that posts and busy-polls (:meth:`VerbsQp.pingpong`), small SENDs inline,
    one in ``_FAST_SIGNAL_EVERY`` signaled. The wire is the same as the endpoint path's.
    The event loop does not run during the phase."""

    def __init__(self, qp: VerbsQp, ep: Endpoint, region: Region, size: int,
                 timeout_s: float) -> None:
        self.qp, self.ep = qp, ep
        self.timeout_s = timeout_s
        self.request = WorkRequest.send(region[size:2 * size])
        self.recv = RecvRequest(_FAST_RECV_ID, (region[0:size].segment(),))
        # inline as perftest sends small messages: the payload goes with the request
        self.send = SendRequest(_FAST_SEND_ID, netio.WrOpcode.SEND,
                                (region[size:2 * size].segment(),),
                                inline=size <= qp.max_inline_bytes)

    def _run(self, initiator: bool, count: int) -> list[int]:
        steps_ns, bad = self.qp.pingpong(self.recv, self.send, initiator=initiator,
                                         count=count, signal_every=_FAST_SIGNAL_EVERY,
                                         timeout_s=self.timeout_s)
        if bad is not None:
            raise self.ep.error_for(bad, self.request)
        return steps_ns

    def ping(self, count: int) -> list[float]:
        """The client: half round trips in microseconds."""
        return [ns / 2e3 for ns in self._run(True, count)]

    def post_first(self) -> None:
        """The server's first receive, posted before it says "go"."""
        self.qp.exchange(self.qp.prepare(recvs=[self.recv]), 0, 0.0)

    def pong(self, count: int) -> None:
        """The server: answer ``count`` pings."""
        self._run(False, count)


__all__ = ["CONTROL_BYTES", "Result", "run_client", "serve"]
