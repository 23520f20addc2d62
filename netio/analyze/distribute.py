"""Where the per-capture analyses run: this process, a pool of processes, or a Dask cluster.

The analysis of many captures is a map and a reduce: each capture is read and
analysed on its own (``netio.analyze.engine.run_capture``: a picklable task in,
a picklable ``CaptureRun`` out), then one process builds the document from
all of them (spreading chains across captures, fairness, findings). A
``Mapper`` runs the map; results come back in input order, so the document is
identical whichever mapper ran it.

- ``SerialMapper``: in this process, one capture after the other.
- ``ProcessMapper(jobs)``: a ``concurrent.futures`` pool of ``jobs`` worker
  processes (forkserver start: no state of this process is inherited).
- ``DaskMapper(address)``: an existing ``dask.distributed`` scheduler; its
  workers must have netio installed and read the captures from a path they
  share with this machine (the same path string is opened on the worker).
  Needs the ``dask`` extra (``pip install 'netio[dask]'``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol, TypeVar

from netio.errors import ClusterError

T = TypeVar("T")
R = TypeVar("R")


class Mapper(Protocol):
    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """``fn`` over ``items``; results in the order of ``items``."""
        ...  # pragma: no cover


class SerialMapper:
    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        return (fn(x) for x in items)


class ProcessMapper:
    """A pool of ``jobs`` processes, started from a fork server that has imported the
    analyzer once (so each worker starts in milliseconds)."""

    def __init__(self, jobs: int) -> None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["netio.analyze.engine"])
        self.pool = ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        return self.pool.map(fn, items)

    def close(self) -> None:
        self.pool.shutdown()


#: How long to try reaching a Dask scheduler before giving up.
CONNECT_TIMEOUT_S = 20.0


class DaskMapper:
    """Map on the workers of a running ``dask.distributed`` scheduler."""

    def __init__(self, address: str, *, timeout_s: float | None = None) -> None:
        timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            import distributed
        except ImportError:
            raise ClusterError("--dask-scheduler needs Dask: pip install 'netio[dask]'"
                                   ) from None
        try:
            client_type: Any = distributed.Client  # untyped
            self.client: Any = client_type(address, timeout=f"{timeout_s}s",
                                           set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {address}: {exc}"
                                   ) from None

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        if not items:
            return iter(())
        # pure=False: the same capture path may have changed since the last run.
        futures = self.client.map(fn, list(items), pure=False)
        results: list[R] = self.client.gather(futures)
        return iter(results)

    def close(self) -> None:
        self.client.close()


__all__ = ["DaskMapper", "Mapper", "ProcessMapper", "SerialMapper"]
