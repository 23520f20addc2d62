"""Worker threads for blocking collectors, and waiting for their results with a bound.

Each blocking collector runs in its own long-lived :class:`Worker` thread, so a
hung collector (a sysfs read stuck in a driver) blocks neither the event loop
nor the other collectors nor shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable

from netio.daemon import eventlog
from netio.telemetry.sample import Collection


class Worker:
    """The long-lived thread that runs one blocking collector.

    A run is handed over through a queue and its result comes back to the loop
    with ``call_soon_threadsafe``: two wake-ups per poll, where starting a thread
    per run costs a clone, a start handshake and an exit.  While a run hangs the
    daemon hands over nothing else (it reports ``hung``), so a stuck collector
    keeps only its own thread.
    """

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], Collection], asyncio.Future[Collection]] | None
        ] = queue.SimpleQueue()
        self._then: Callable[[], object] | None = None
        self._thread = threading.Thread(target=self._main, name=f"netio-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Collection]) -> asyncio.Future[Collection]:
        fut: asyncio.Future[Collection] = self.loop.create_future()
        self._queue.put((fn, fut))
        return fut

    def retire(self, then: Callable[[], object] | None) -> None:
        """End the thread once its current run (if any) has returned, calling
        ``then`` (the collector's ``close``) on the way out."""
        self._then = then
        self._queue.put(None)

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, fut = item
            try:
                res = fn()
            except BaseException as e:  # reported as a fault of this collector
                self._settle(fut, None, e)
            else:
                self._settle(fut, res, None)
            del item, fn, fut
        if self._then is not None:
            try:
                self._then()
            except Exception as e:  # a collector that fails to close is only logged
                eventlog.emit("collector_close_failed", level=logging.WARNING,
                              error=f"{type(e).__name__}: {e}")

    def _settle(self, fut: asyncio.Future[Collection], result: Collection | None,
                exc: BaseException | None) -> None:
        def settle() -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self.loop.call_soon_threadsafe(settle)


async def result_within(fut: asyncio.Future[Collection], timeout_s: float) -> Collection:
    """``fut``'s result, or TimeoutError after ``timeout_s``; ``fut`` itself is
    left running either way (a worker thread cannot be interrupted).  Cheaper than
    ``wait_for(shield(fut))``, and a cancellation of the caller is never lost."""
    if not fut.done():
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake(_f: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        fut.add_done_callback(wake)
        handle = loop.call_later(timeout_s, wake)
        try:
            await waiter
        finally:
            handle.cancel()
            fut.remove_done_callback(wake)
        if not fut.done():
            raise TimeoutError
    return fut.result()
