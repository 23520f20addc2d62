"""Runs each job on its interval: blocking collectors in their worker threads,
async ones on the loop, each run bounded by the collector timeout.

The timeout is ``daemon.collector_timeout_s``, the same for every collector: a
run that has not returned by then is a ``timeout`` fault; while a blocking run
stays stuck in its thread, the job's next runs are skipped as ``hung`` faults.
A job that falls behind (a run longer than its interval) skips the ticks it
missed.  A collector with an ``idle_s()`` method may ask for a longer pause
(the PFC counter poll while no interface has PFC counters).  Results go to
``on_collection``; faults without a collection to ``on_failure``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from netio.daemon.health import HealthBook
from netio.daemon.jobs import Job
from netio.daemon.workers import Worker, result_within
from netio.telemetry.sample import Collection, Fault


class Scheduler:
    def __init__(self, health: HealthBook, timeout_s: float,
                 on_collection: Callable[[Job, Collection], None],
                 on_failure: Callable[[Job, tuple[Fault, ...]], None]) -> None:
        self.health = health
        self.timeout_s = timeout_s
        self.on_collection = on_collection
        self.on_failure = on_failure
        self.jobs: list[Job] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[str, asyncio.Future[Collection]] = {}
        self._workers: dict[str, tuple[Job, Worker]] = {}  # by job name
        self._generation = 0  # of the running jobs; stop() starts a new one

    def start(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self.health.track((j.name, j.interval_s) for j in jobs)
        loop = asyncio.get_running_loop()
        for job in jobs:
            self._tasks.append(loop.create_task(self._job_loop(job, self._generation),
                                                name=f"collector-{job.name}"))

    def stop(self) -> None:
        # Loops of an older generation end even where a cancellation is lost (an
        # asyncio.wait_for whose inner future completed at the same moment swallows it).
        self._generation += 1
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        # The collectors are being replaced (reload) or the daemon stops: each
        # worker closes its collector (kept descriptors) once a run in flight returns.
        for job, worker in self._workers.values():
            worker.retire(getattr(job.collector, "close", None))
        self._workers = {}

    def alive(self) -> bool:
        """Every job's loop is still scheduling (none ended on an unexpected error)."""
        return all(not t.done() for t in self._tasks)

    async def _job_loop(self, job: Job, generation: int) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        idle = getattr(job.collector, "idle_s", None)
        while generation == self._generation:
            await self.run_once(job, generation)
            next_at += job.interval_s
            now = loop.time()
            if next_at < now:  # fell behind (slow collector): skip missed ticks
                next_at = now + job.interval_s - (now - next_at) % job.interval_s
            if idle is not None:
                next_at = max(next_at, now + idle())
                # staleness is judged against the pause actually taken
                self.health.get(job.name).interval_s = max(job.interval_s, next_at - now)
            await asyncio.sleep(next_at - now)

    async def run_once(self, job: Job, generation: int | None = None) -> None:
        """One run of ``job``; its result is dropped when the jobs were replaced
        meanwhile (``generation`` no longer current)."""
        h = self.health.get(job.name)
        pending = self._pending.get(job.name)
        if pending is not None and not pending.done():
            self.on_failure(job, (Fault(job.name, "hung", job.name,
                                        "previous run has not returned"),))
            return
        h.runs += 1
        timeout = self.timeout_s
        t0 = time.perf_counter()
        failure: Fault | None = None
        try:
            if job.is_async:
                col = await asyncio.wait_for(job.collector.collect_async(), timeout)
            else:
                fut = self._worker(job).submit(job.collector.collect)
                self._pending[job.name] = fut
                col = await result_within(fut, timeout)
        except TimeoutError:
            failure = Fault(job.name, "timeout", job.name, f"no result within {timeout:g} s")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failure = Fault(job.name, "error", job.name, f"{type(e).__name__}: {e}")
        h.duration_s = time.perf_counter() - t0
        if generation is not None and generation != self._generation:
            return  # from a collector that has been replaced
        if failure is not None:
            self.on_failure(job, (failure,))
            return
        self.on_collection(job, col)

    def _worker(self, job: Job) -> Worker:
        held = self._workers.get(job.name)
        if held is None or held[0] is not job:
            if held is not None:
                held[1].retire(None)
            held = self._workers[job.name] = (job, Worker(job.name,
                                                          asyncio.get_running_loop()))
        return held[1]
