"""One completion mechanism, three ways to use it.

Everything a context does runs on one asyncio event loop: the caller's own loop when
the context was opened inside one (``async with netio.open(...)``), or a private loop
on a daemon thread when it was opened from plain synchronous code. Every operation
returns a :class:`Pending`, an asyncio future of that loop seen three ways:

* ``await op``: asyncio (from the context's loop, or from any other loop);
* ``op.wait(timeout_s)``: blocking, for synchronous code (not from the loop's thread);
* ``op.done()`` / ``op.result()``: handle-and-poll, the batch style.

There is no second implementation of any of them: ``wait`` and a foreign-loop
``await`` both wait for the same future on its loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

from netio.errors import ClosedError, IoError, Timeout

T = TypeVar("T")

# How long closing waits for the loop thread to stop before giving up on it.
_THREAD_JOIN_S = 5.0


class Runner:
    """The event loop a context runs on, and the way to reach it from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 thread: threading.Thread | None) -> None:
        self.loop = loop
        self.thread = thread  # None: the caller's loop, which we do not own

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
        return self.thread is not None

    def on_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop: now when already there, else as soon as the loop can."""
        if self.on_loop_thread():
            fn()
        elif self.loop.is_closed():
            raise ClosedError("the context's event loop is closed")
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
        if self._runner.on_loop_thread():
            raise IoError("wait() would block the event loop the operation runs on; "
                          "use 'await' in asynchronous code")
        if self._future.done():
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
        return self._foreign().__await__()

    async def _foreign(self) -> T:
        outer: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._runner.call(lambda: self._future.add_done_callback(
            lambda f: _copy_outcome(f, outer)))
        return await asyncio.wrap_future(outer)


async def gather(*ops: Awaitable[T]) -> list[T]:
    """Await several handles; their outcomes in order (the first error is raised)."""
    return [await op for op in ops]


__all__ = ["Pending", "Runner", "gather"]
