"""One bench result, two renderings: perftest's text columns (units in every header)
and one JSON document for the whole sweep (perftest's ``--out_json`` keeps only the
last size of a sweep)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from netio.perf.spec import BandwidthResult, LatencyResult, Mode, RunSpec

SCHEMA = "netio.bench"
VERSION = 1
BW_HEADER = (" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   "
             "MsgRate[Mpps]   CPU client[%]   CPU server[%]")
LAT_HEADER = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
              "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
              "   CPU client[%]   CPU server[%]")


def header(mode: Mode) -> str:
    return LAT_HEADER if mode.is_latency else BW_HEADER


def line(result: BandwidthResult | LatencyResult) -> str:
    if isinstance(result, BandwidthResult):
        return (f" {result.size_bytes:<10d} {result.iterations:<14d} "
                f"{result.peak_mib_per_s:<19.2f} {result.average_mib_per_s:<21.2f} "
                f"{result.message_rate_mpps:<15.6f} {result.client_cpu_fraction * 100:<15.1f} "
                f"{result.server_cpu_fraction * 100:.1f}")
    return (f" {result.size_bytes:<6d} {result.iterations:<11d} {result.t_min_us:<14.2f} "
            f"{result.t_max_us:<12.2f} {result.t_typical_us:<18.2f} {result.t_avg_us:<14.2f} "
            f"{result.t_stdev_us:<15.2f} {result.p99_us:<22.2f} {result.p999_us:<24.2f} "
            f"{result.client_cpu_fraction * 100:<15.1f} {result.server_cpu_fraction * 100:.1f}")


def result_json(result: BandwidthResult | LatencyResult) -> dict[str, Any]:
    if isinstance(result, BandwidthResult):
        return {"message_bytes": result.size_bytes, "iterations": result.iterations,
                "duration_s": result.duration_s,
                "bw_peak_bytes_per_s": result.peak_mib_per_s * (1 << 20),
                "bw_average_bytes_per_s": result.average_mib_per_s * (1 << 20),
                "message_rate_per_s": result.message_rate_mpps * 1e6,
                "cpu_client_fraction": result.client_cpu_fraction,
                "cpu_server_fraction": result.server_cpu_fraction}
    return {"message_bytes": result.size_bytes, "iterations": result.iterations,
            "t_min_s": result.t_min_us / 1e6, "t_max_s": result.t_max_us / 1e6,
            "t_typical_s": result.t_typical_us / 1e6, "t_avg_s": result.t_avg_us / 1e6,
            "t_stdev_s": result.t_stdev_us / 1e6, "t_p99_s": result.p99_us / 1e6,
            "t_p999_s": result.p999_us / 1e6, "cpu_client_fraction": result.client_cpu_fraction,
            "cpu_server_fraction": result.server_cpu_fraction}


def document(spec: RunSpec, results: Sequence[BandwidthResult | LatencyResult], *,
             backend: str, path: str, error: str | None = None) -> dict[str, Any]:
    """The whole sweep as one JSON document (an ``error`` member when it failed, as
    iperf3 does)."""
    doc: dict[str, Any] = {
        "schema": SCHEMA, "version": VERSION, "mode": spec.mode.value, "backend": backend,
        "path": path, "queue_depth": spec.queue_depth, "endpoints": spec.endpoints,
        "results": [result_json(r) for r in results],
    }
    if error is not None:
        doc["error"] = error
    return doc


__all__ = ["BW_HEADER", "LAT_HEADER", "SCHEMA", "VERSION", "document", "header", "line",
           "result_json"]
