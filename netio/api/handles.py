"""One completion mechanism, three ways to use it.

Everything a context does runs on one asyncio event loop: the caller's own loop when
the context was opened inside one (``async with netio.open(...)``), or a private loop
on a daemon thread when it was opened from plain synchronous code, or (``progress=
"poll"``) a private loop that no thread runs on its own: the thread that waits drives
it (see *Polled progress* below). Every operation returns a :class:`Pending`, an
asyncio future of that loop seen three ways:

* ``await op``: asyncio (from the context's loop, or from any other loop);
* ``op.wait(timeout_s)``: blocking, for synchronous code (not from the loop's thread);
* ``op.done()`` / ``op.result()``: handle-and-poll, the batch style.

There is no second implementation of any of them: ``wait`` and a foreign-loop
``await`` both wait for the same future on its loop.

Polled progress (``netio.open(..., progress="poll")``), the way perftest, sockperf and
UCX's ``ucp_worker_progress`` run: there is no loop thread and no thread hop. An
operation is posted on the caller's thread; ``op.wait()`` drives the context itself:
it calls the backend's optional non-blocking ``progress()`` hook (the soft backend:
``recvmmsg``, the native fast path, engine timers checked by deadline, ``sendmmsg``),
which completes the future on the spot, and runs one non-blocking turn of the loop
every :data:`_TURN_EVERY` spins for the control path (connects, the exchange, close).
After :data:`poll_spin_s` without any progress it sleeps in the loop's ``epoll``
(the backend's sockets are registered there), then spins again. One thread drives a
context at a time (a lock); a waiting thread also drives every other polled context of
the process that nobody drives (a program or a test with both ends in one thread).
Nothing progresses between waits: as with UCX, a peer's packets wait in the socket
until the next post or wait. ``await`` from any event loop drives it in a worker
thread, in slices.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

from netio.environment import microseconds
from netio.errors import ClosedError, IoError, Timeout

T = TypeVar("T")

# How long closing waits for the loop thread to stop before giving up on it.
_THREAD_JOIN_S = 5.0
#: Polled progress: how long a wait spins without any progress before it sleeps in
#: epoll (a ping-pong's answer comes back well within it; an idle wait costs one core
#: for this long, then nothing). ``NETIO_POLL_SPIN_US`` sets it (0: sleep at once).
POLL_SPIN_DEFAULT_US = 200


def poll_spin_s() -> float:
    """The polled-progress spin in seconds (``$NETIO_POLL_SPIN_US``, read at each wait so
    a bad value is refused where it is used, not at import)."""
    return microseconds("NETIO_POLL_SPIN_US", POLL_SPIN_DEFAULT_US) / 1e6
#: Polled progress: after the spin, how long a wait sleeps in poll(2) on the backend's
#: descriptors (a fast wake-up for data) before it sleeps in the loop (everything else).
_DIRECT_SLEEP_S = 0.01
#: Polled progress: spins between two non-blocking turns of the loop (control path).
_TURN_EVERY = 64
#: Polled progress: the longest sleep while other polled contexts need driving too.
_SHARED_SLEEP_S = 0.001
#: Polled progress: how long an ``await`` drives in its worker thread before it looks
#: at its own cancellation again.
_AWAIT_SLICE_S = 0.05

#: Every polled runner of the process (a waiting thread drives the idle ones too).
_polled: weakref.WeakSet[Runner] = weakref.WeakSet()


class Runner:
    """The event loop a context runs on, and the way to reach it from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 thread: threading.Thread | None, *, polled: bool = False) -> None:
        self.loop = loop
        self.thread = thread  # None: the caller's loop (not ours), or a polled loop
        self.polled = polled
        # polled: held by the thread that drives the loop and the backend
        self._lock = threading.RLock()
        self._progress: Callable[[], bool] | None = None
        self._progress_fds: Callable[[], list[int]] | None = None

    @classmethod
    def polled_by_caller(cls) -> Runner:
        """A private loop that no thread runs by itself: waiting threads drive it."""
        runner = cls(asyncio.new_event_loop(), None, polled=True)
        _polled.add(runner)
        return runner

    def set_progress(self, progress: Callable[[], bool] | None,
                     fds: Callable[[], list[int]] | None = None) -> None:
        """The backend's non-blocking progress hook (True when it did anything), which a
        polled wait calls in its spin loop, and the descriptors that wake it (optional)."""
        self._progress = progress
        self._progress_fds = fds

    @classmethod
    def current_or_private(cls) -> Runner:
        """The running loop if there is one, else a new loop on its own daemon thread."""
        try:
            return cls(asyncio.get_running_loop(), None)
        except RuntimeError:
            pass
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=run, name="netio-loop", daemon=True)
        thread.start()
        started.wait()
        return cls(loop, thread)

    @property
    def owned(self) -> bool:
        return self.thread is not None or self.polled

    def on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop: now when already there, else as soon as the loop can."""
        if self.polled and not self.loop.is_running():
            # (first: cheaper than asking asyncio for the running loop, which raises)
            if self.loop.is_closed():
                raise ClosedError("the context's event loop is closed")
            if self._lock.acquire(blocking=False):
                try:
                    fn()
                finally:
                    self._lock.release()
            else:  # another thread drives it (spinning): it runs this at its next turn
                self.loop.call_soon_threadsafe(fn)
            return
        if self.on_loop_thread():
            fn()
        elif self.loop.is_closed():
            raise ClosedError("the context's event loop is closed")
        elif self.polled and self._lock.acquire(blocking=False):
            # Nobody else drives the loop: this thread is its thread for now (no hop).
            try:
                fn()
            finally:
                self._lock.release()
        else:
            self.loop.call_soon_threadsafe(fn)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> Pending[T]:
        """Start ``coro`` as a task on the loop; its handle."""
        future: asyncio.Future[T] = self.loop.create_future() if self.on_loop_thread() else (
            asyncio.Future(loop=self.loop))

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda t: _copy_outcome(t, future))
            future.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)

        try:
            self.call(start)
        except ClosedError:
            coro.close()
            raise
        return Pending(self, future)

    def future(self) -> asyncio.Future[Any]:
        """A new future of the loop (safe to create from any thread)."""
        return asyncio.Future(loop=self.loop)

    def stop(self) -> None:
        """Stop and close a private loop (no-op for the caller's loop)."""
        if self.polled:
            _polled.discard(self)
            _off_foreign_loop(self._close_polled)
            return
        thread = self.thread
        if thread is None or self.loop.is_closed():
            return
        if thread is threading.current_thread():
            self.loop.stop()  # closed by nobody: the thread ends with run_forever
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        thread.join(_THREAD_JOIN_S)
        if not thread.is_alive():
            self.loop.close()

    # -- polled progress -------------------------------------------------------------------

    def drive(self, future: asyncio.Future[Any], timeout_s: float | None) -> bool:
        """Polled: drive the loop and the backend from this thread until ``future`` is
        done (True) or ``timeout_s`` has passed (False)."""
        if asyncio._get_running_loop() is not None:
            return _off_foreign_loop(lambda: self.drive(future, timeout_s))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not future.done():
            wait_s = 0.001 if deadline is None else max(0.0, min(0.001,
                                                                 deadline - time.monotonic()))
            if self._lock.acquire(timeout=wait_s):  # another thread may be driving
                try:
                    if self.loop.is_closed():
                        raise ClosedError("the context's event loop is closed")
                    self._spin(future, deadline)
                finally:
                    self._lock.release()
            if deadline is not None and time.monotonic() >= deadline:
                return future.done()
        return True

    def _spin(self, future: asyncio.Future[Any], deadline: float | None) -> None:
        progress = self._progress or _nothing
        others = [r for r in _polled if r is not self]
        spin_s = poll_spin_s()
        idle_until = time.monotonic() + spin_s
        direct_until: float | None = None
        spins = 0
        while not future.done():
            if progress():
                if future.done():
                    return
                idle_until = time.monotonic() + spin_s
                direct_until = None
            else:
                # A spin that found nothing lets another task on this core run: the peer
                # we wait for may be it (perftest's and sockperf's spin assume a free core).
                os.sched_yield()
            spins += 1
            turn = not spins % _TURN_EVERY
            for other in others:  # the other end may be in this thread: its timers too
                other.nudge(turn)
            if not turn:
                continue
            self._turn()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            if now >= idle_until and not future.done():
                sleep_s = 3600.0 if deadline is None else deadline - now
                if direct_until is None:
                    direct_until = now + _DIRECT_SLEEP_S
                fds = self._progress_fds() if self._progress_fds is not None else []
                if now < direct_until and fds and not others:
                    # Data wakes this sleep at once; the spin resumes, the loop turns at
                    # the next turn boundary (the control path waits that long at most).
                    _sleep_on(fds, min(sleep_s, direct_until - now))
                    continue
                self._sleep(future, min(sleep_s, _SHARED_SLEEP_S) if others else sleep_s)
                others = [r for r in _polled if r is not self]
                idle_until = time.monotonic() + spin_s
                direct_until = None

    def _close_polled(self) -> None:
        with self._lock:
            if not self.loop.is_closed() and not self.loop.is_running():
                for _ in range(3):  # cancelled tasks finish, closed transports go
                    self._turn()
                self.loop.close()

    def _turn(self) -> None:
        """One turn of the loop without blocking (ready callbacks, I/O, due timers)."""
        loop = self.loop
        loop.stop()  # run_forever runs one iteration, with a zero select timeout
        loop.run_forever()

    def _sleep(self, future: asyncio.Future[Any], seconds: float) -> None:
        """Run the loop until ``future`` is done or ``seconds`` pass (sleeps in epoll: the
        backend's sockets and timers are registered there)."""
        loop = self.loop
        timer = loop.call_later(seconds, loop.stop)

        def stop(_: object) -> None:
            loop.stop()

        future.add_done_callback(stop)
        try:
            loop.run_forever()
        finally:
            timer.cancel()
            future.remove_done_callback(stop)

    def nudge(self, turn: bool = True) -> None:
        """Drive this polled runner once if no thread is driving it (``turn``: its loop
        too)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.loop.is_closed():
                return
            if self._progress is not None:
                self._progress()
            if turn:
                self._turn()
        finally:
            self._lock.release()


def _nothing() -> bool:
    return False


def _sleep_on(fds: list[int], seconds: float) -> None:
    """Sleep until one of ``fds`` is readable or ``seconds`` pass."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.poll(max(0, int(seconds * 1000 + 0.999)))


def _off_foreign_loop(fn: Callable[[], T]) -> T:
    """``fn()`` here, or in a helper thread when this thread runs an event loop (a polled
    loop cannot run inside another: a blocking wait or a close inside a coroutine)."""
    if asyncio._get_running_loop() is None:
        return fn()
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(fn())
        except BaseException as exc:  # handed to the waiting thread
            outcome.set_exception(exc)

    threading.Thread(target=run, name="netio-poll", daemon=True).start()
    return outcome.result()


def _copy_outcome(src: asyncio.Future[T],
                  dst: asyncio.Future[T] | concurrent.futures.Future[T]) -> None:
    """Give ``dst`` (a future of any kind) the outcome of the finished ``src``."""
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
    elif (exc := src.exception()) is not None:
        dst.set_exception(exc)
    else:
        dst.set_result(src.result())


class Pending(Generic[T]):
    """The handle of an operation in progress: ``await`` it, ``wait()`` for it, or poll
    it with ``done()``/``result()``. Its outcome is a value, or one of
    :mod:`netio.errors` raised where it is awaited."""

    __slots__ = ("_future", "_runner")

    def __init__(self, runner: Runner, future: asyncio.Future[T]) -> None:
        self._runner = runner
        self._future = future

    def done(self) -> bool:
        """True once the operation has finished (successfully or not)."""
        return self._future.done()

    def result(self) -> T:
        """The outcome of a finished operation (raises its error); IoError if not done."""
        if not self._future.done():
            raise IoError("the operation has not finished; await it or wait() for it")
        return self._future.result()

    def wait(self, timeout_s: float | None = None) -> T:
        """Block until the operation finishes; its outcome. Raises :class:`Timeout`."""
        runner = self._runner
        if not (runner.polled and not runner.loop.is_running()) and runner.on_loop_thread():
            raise IoError("wait() would block the event loop the operation runs on; "
                          "use 'await' in asynchronous code")
        if self._future.done():
            return self._future.result()
        if self._runner.polled:
            if not self._runner.drive(self._future, timeout_s):
                raise Timeout("wait", timeout_s or 0.0)
            return self._future.result()
        outer: concurrent.futures.Future[T] = concurrent.futures.Future()

        def attach() -> None:
            self._future.add_done_callback(lambda f: _copy_outcome(f, outer))

        self._runner.call(attach)
        try:
            return outer.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if outer.done():
                raise  # the operation's own Timeout (also a TimeoutError)
            raise Timeout("wait", timeout_s or 0.0) from None

    def cancel(self) -> None:
        """Stop waiting for the outcome (the work request itself cannot be recalled)."""
        def cancel() -> None:
            if not self._future.done():
                self._future.cancel()

        self._runner.call(cancel)

    def __await__(self) -> Generator[Any, None, T]:
        if self._runner.on_loop_thread():
            return self._future.__await__()
        if self._runner.polled:
            return self._driven().__await__()
        return self._foreign().__await__()

    async def _driven(self) -> T:
        """A polled context awaited from an event loop: a worker thread drives it, in
        slices (so that cancelling the awaiting task is seen within one slice)."""
        while not self._future.done():
            await asyncio.to_thread(self._runner.drive, self._future, _AWAIT_SLICE_S)
        return self._future.result()

    async def _foreign(self) -> T:
        outer: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._runner.call(lambda: self._future.add_done_callback(
            lambda f: _copy_outcome(f, outer)))
        return await asyncio.wrap_future(outer)


async def gather(*ops: Awaitable[T]) -> list[T]:
    """Await several handles; their outcomes in order (the first error is raised)."""
    return [await op for op in ops]


__all__ = ["Pending", "Runner", "gather"]
