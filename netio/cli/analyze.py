"""netio-analyze: who paused whom, for how long, why, and which RoCE flows suffered.

Reads one or more pcap/pcapng captures (one per port or host), merges them by
timestamp and reports PFC/PAUSE pauses per sender and priority, PFC and XON
storms, pause spreading chains (root, converging flows, victims), and per RoCE
flow: counts, goodput, messages, PSN gaps, retransmissions, NAKs, RNR NAKs,
ACK/READ latency, ECN marks and CNPs, ICRC failures; Jain fairness and incast.

Memory per flow direction is bounded: latency percentiles (p50/p90/p99) come
from a mergeable log-linear quantile sketch (DDSketch-style, 16 buckets per
octave) within 1/33 (3.0 %) relative error of the exact order statistic over
a 2^32 range below the maximum (min and max exact); each sketch holds at most
512 buckets (4 KiB, usually far fewer), one per latency kind a flow has.
Measured peak memory per QP (bench/bench_analyze.py: growth from 10,000 to
100,000 QPs at 1,000,000 packets): 1.9 KB (both directions' counters, keys
and compact state), plus about 60 bytes per QP and --interval window in
which it carried data (its throughput series, listed in the JSON; measured
at 10,000,000 packets, 100 windows a QP: 7.9 KB a QP). --json
streams the flows; the text report lists the --top N of each capture.

netio-analyze exits 0 (no storm), 1 (a PFC or XON storm found, for alerting
scripts), 2 (usage), 3 (no capture could be read at all: missing, empty, not
a capture, unsupported link type), 4 (the output could not be written) or
130. Damaged or truncated captures are analysed up to the damage; a warning
says where reading stopped, and the exit code follows the findings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any, NoReturn

from netio.analyze.options import DEFAULT_LINK_BPS, AnalysisOptions, FlowFilter
from netio.analyze.report import DEFAULT_TOP_FLOWS
from netio.analyze.units import parse_bitrate, parse_duration
from netio.cli.exit_codes import EXIT_CODES_HELP, ExitCode

EXIT_OK = ExitCode.OK
EXIT_STORM = ExitCode.FOUND
EXIT_USAGE = ExitCode.USAGE
EXIT_UNREADABLE = ExitCode.UNREADABLE
#: File name endings of captures in a directory given as input (each may also end in
#: .gz, .xz or .zst: compressed captures are read directly).
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")
#: Without --jobs, captures are analysed in worker processes only when there are
#: at least this many bytes of them (starting the workers costs about a second).
POOL_MIN_BYTES = 64 << 20
#: Show a progress bar on a terminal when the input is at least this large.
PROGRESS_MIN_BYTES = 64 << 20


def _duration_ns(text: str) -> int:
    try:
        return round(parse_duration(text) * 1e9)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _priorities(text: str) -> frozenset[int]:
    try:
        values = frozenset(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of priorities") from None
    if not values or not all(0 <= v <= 7 for v in values):
        raise argparse.ArgumentTypeError("priorities are 0..7")
    return values


#: How --flow is written (the help and every --flow error say it).
FLOW_SYNTAX = "SRC>DST[:QP], e.g. 10.0.0.1>10.0.0.3:0x31, [fd00::1]>[fd00::2]:18 or *>10.0.0.3"


def _address(text: str, where: str) -> IPv4Address | IPv6Address | None:
    """One side of a --flow: ``*``, an IPv4 address or a bracketed IPv6 address."""
    text = text.strip()
    if text in ("*", "[*]"):
        return None
    if text.startswith("[") != text.endswith("]"):
        raise ValueError(f"{where} {text!r}: unbalanced brackets")
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        try:
            return IPv6Address(inner)
        except ValueError:
            pass
        try:
            return IPv4Address(inner)
        except ValueError:
            raise ValueError(f"{where} {inner!r} is not an IP address") from None
    if ":" in text:
        raise ValueError(f"{where} {text!r}: put an IPv6 address in brackets, [{text}]")
    try:
        return IPv4Address(text)
    except ValueError:
        raise ValueError(f"{where} {text!r} is not an IP address") from None


def parse_flow(text: str) -> FlowFilter:
    """``--flow``'s value (syntax: ``FLOW_SYNTAX``); ValueError says what is wrong."""
    src_text, sep, rest = text.partition(">")
    if not sep:
        raise ValueError("no '>' between SRC and DST")
    if ">" in rest:
        raise ValueError("more than one '>'")
    qp_text = ""
    if rest.strip().startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"DST {rest!r}: unbalanced brackets")
        dst_text, tail = rest[:close + 1], rest[close + 1:]
        if tail and not tail.startswith(":"):
            raise ValueError(f"unexpected {tail!r} after DST (expected :QP)")
        qp_text = tail[1:]
    else:
        dst_text, colon, qp_text = rest.partition(":")
        if colon and ":" in qp_text:
            raise ValueError(f"DST {rest!r}: put an IPv6 address in brackets, "
                             "[ADDR] or [ADDR]:QP")
        if colon and not qp_text:
            raise ValueError("':' without a QP after DST")
    src = _address(src_text, "SRC")
    dst = _address(dst_text, "DST")
    if src is not None and dst is not None and src.version != dst.version:
        raise ValueError(f"SRC is IPv{src.version} but DST is IPv{dst.version}")
    qp = None
    if qp_text:
        try:
            qp = int(qp_text.strip(), 0)
        except ValueError:
            raise ValueError(f"QP {qp_text!r} is not a number (decimal or 0x hex)") from None
        if not 0 <= qp < 1 << 24:
            raise ValueError(f"QP {qp_text!r} is not a 24-bit QP number")
    given = src if src is not None else dst
    return FlowFilter(None if src is None else int(src), None if dst is None else int(dst), qp,
                      ipv6=given is not None and given.version == 6)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return n


def _flow(text: str) -> FlowFilter:
    try:
        return parse_flow(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc} (expected {FLOW_SYNTAX})") from None


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), not the usage text; with --json
    on the command line, also as a JSON document with an ``error`` member."""

    json_wanted = False

    def error(self, message: str) -> NoReturn:
        if self.json_wanted:
            _json_error(f"usage: {message}")
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _json_error(message: str, doc: dict[str, Any] | None = None) -> None:
    """Write the one JSON document of a failed run: ``doc`` (or the identifying
    members alone) with ``error`` set, as iperf3 does."""
    import json

    from netio import __version__
    from netio.analyze.schema import SCHEMA_VERSION

    out = dict(doc) if doc is not None else {
        "schema_version": SCHEMA_VERSION, "tool": "netio-analyze",
        "netio_version": __version__}
    out["error"] = message
    if doc is not None:
        from netio.analyze.report import write_json
        write_json(out, sys.stdout)
    else:
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
    sys.stdout.flush()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="netio-analyze", description=__doc__, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="pcap/pcapng files, also gzip/xz/zstd-compressed (a directory means "
                        "its *.pcap, *.pcapng and *.cap, compressed or not)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (schema: netio.analyze.schema) instead of text")
    p.add_argument("--top", type=_count, default=DEFAULT_TOP_FLOWS, metavar="N",
                   help=f"flows listed per capture in the text report (default "
                        f"{DEFAULT_TOP_FLOWS}, most bytes first; --json has every flow)")
    p.add_argument("--plot", metavar="DIR", help="write PNG charts into DIR")
    p.add_argument("--link-speed", action="append", default=[], metavar="[FILE=]RATE",
                   help=f"link speed for pause quanta (default {DEFAULT_LINK_BPS / 1e9:g}G); "
                        "FILE=RATE sets it for one capture, e.g. sw1-p1.pcap=25G")
    p.add_argument("--storm-time", type=_duration_ns, default=200_000_000, metavar="T",
                   help="continuous pause that makes a PFC storm (default 200ms, SONiC)")
    p.add_argument("--restore-time", type=_duration_ns, default=200_000_000, metavar="T",
                   help="unpaused time that ends a storm (default 200ms)")
    p.add_argument("--xon-storm-time", type=_duration_ns, default=200_000_000, metavar="T",
                   help="run of XON frames that makes an XON storm (default 200ms)")
    p.add_argument("--xon-gap", type=_duration_ns, default=1_000_000, metavar="T",
                   help="largest gap between XON frames of one storm (default 1ms)")
    p.add_argument("--causality-window", type=_duration_ns, default=2_000_000, metavar="T",
                   help="pauses starting within T of another are chained (default 2ms)")
    p.add_argument("--interval", type=_duration_ns, default=10_000_000, metavar="T",
                   help="time-series and fairness window (default 10ms)")
    p.add_argument("--incast-senders", type=int, default=4, metavar="N",
                   help="senders to one destination in one window that make an incast "
                        "(default 4)")
    p.add_argument("--priority", type=_priorities, metavar="P[,P...]",
                   help="only these priorities (PFC classes and RoCE VLAN PCP)")
    p.add_argument("--flow", type=_flow, metavar="SRC>DST[:QP]",
                   help="only this flow (both directions); IPv6 in brackets, * for any, e.g. "
                        "10.0.0.1>10.0.0.3:0x31 or [fd00::1]>[fd00::2]")
    p.add_argument("--start", type=_duration_ns, metavar="T",
                   help="ignore packets before T after the first packet")
    p.add_argument("--end", type=_duration_ns, metavar="T",
                   help="ignore packets from T after the first packet on")
    p.add_argument("-j", "--jobs", type=_count, metavar="N",
                   help="analyse up to N captures at once, each in a worker process "
                        "(default: one per CPU when there are several captures and at least "
                        "64 MiB of them; 1: in this process); the result is the same")
    p.add_argument("--dask-scheduler", metavar="ADDRESS",
                   help="analyse the captures on the workers of this dask.distributed "
                        "scheduler (e.g. tcp://10.0.0.9:8786); the workers open the same "
                        "paths, so give paths they share (needs netio[dask])")
    p.add_argument("--no-icrc", action="store_true", help="do not verify ICRCs")
    p.add_argument("--pure", action="store_true",
                   help="use the pure-Python reference decoder (slow; for cross-checks)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr (auto: on a terminal for large inputs)")
    return p


def _expand(paths: Sequence[str]) -> list[str]:
    from netio.pcap.compressed import strip_compression_suffix

    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(x) for x in Path(p).iterdir()
                           if Path(strip_compression_suffix(x.name)).suffix in CAPTURE_SUFFIXES)
            out.extend(found)
        else:
            out.append(p)
    return out


def _link_speeds(values: Sequence[str], parser: argparse.ArgumentParser
                 ) -> tuple[int, dict[str, int]]:
    from netio.pcap.compressed import strip_compression_suffix

    default = DEFAULT_LINK_BPS
    per: dict[str, int] = {}
    for v in values:
        name, sep, rate = v.rpartition("=")
        try:
            bps = parse_bitrate(rate)
        except ValueError as exc:
            parser.error(f"--link-speed: {exc}")
        if sep:
            per[Path(strip_compression_suffix(Path(name).name)).stem] = bps
        else:
            default = bps
    return default, per


class _Bar:
    def __init__(self) -> None:
        self.last = 0.0
        self.start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.2 and done < total:
            return
        self.last = now
        frac = min(1.0, done / total) if total else 1.0  # compressed: bytes read may exceed
        width = 30
        bar = "#" * int(frac * width)
        rate = done / max(1e-9, now - self.start) / 1e6
        sys.stderr.write(f"\r[{bar:<{width}}] {frac * 100:5.1f}%  {rate:.0f} MB/s")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def _mapper(args: argparse.Namespace, n_captures: int, total_bytes: int) -> Any:
    """Where the per-capture analyses run (netio.analyze.distribute), None for here.
    Without --jobs: one worker per CPU when there are several captures and enough
    data to repay starting the workers (POOL_MIN_BYTES), else this process."""
    from netio.analyze.distribute import DaskMapper, ProcessMapper

    if args.dask_scheduler:
        return DaskMapper(args.dask_scheduler)
    if args.jobs is not None:
        jobs = args.jobs
    else:
        jobs = len(os.sched_getaffinity(0)) if total_bytes >= POOL_MIN_BYTES else 1
    jobs = min(jobs, n_captures)
    return ProcessMapper(jobs) if jobs > 1 else None


def main(argv: Sequence[str] | None = None) -> int:
    # The analysis uses no BLAS: keep numpy's OpenBLAS from starting (spinning)
    # worker threads, so each analysing process runs on one core. Set before the
    # first import of numpy (after the options are parsed).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if isinstance(parser, _Parser):
        parser.json_wanted = "--json" in argv
    args = parser.parse_args(argv)
    paths = _expand(args.captures)
    if not paths:
        parser.error("no capture files found")
    link_bps, per_capture = _link_speeds(args.link_speed, parser)
    if args.incast_senders < 2:
        parser.error("--incast-senders must be at least 2")
    opts = AnalysisOptions(
        link_bps=link_bps, link_bps_by_capture=per_capture, storm_ns=args.storm_time,
        restore_ns=args.restore_time, xon_storm_ns=args.xon_storm_time, xon_gap_ns=args.xon_gap,
        causality_ns=args.causality_window, interval_ns=max(1, args.interval),
        incast_senders=args.incast_senders, priorities=args.priority, flow=args.flow,
        start_ns=args.start, end_ns=args.end, verify_icrc=not args.no_icrc)
    from netio.analyze.engine import analyze
    from netio.analyze.plots import write_plots
    from netio.analyze.report import to_text, write_json
    from netio.errors import ClusterError

    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    show = args.progress == "always" or (
        args.progress == "auto" and sys.stderr.isatty() and total >= PROGRESS_MIN_BYTES)
    bar = _Bar() if show else None
    try:
        mapper = _mapper(args, len(paths), total)
    except ClusterError as exc:
        sys.stderr.write(f"netio-analyze: error: {exc}\n")
        if args.json:
            _json_error(str(exc))
        return ExitCode.FAILED
    try:
        doc = analyze(paths, opts, use_native=False if args.pure else None, progress=bar,
                      mapper=mapper, stream_flows=True)
    except ClusterError as exc:
        sys.stderr.write(f"netio-analyze: error: {exc}\n")
        if args.json:
            _json_error(str(exc))
        return ExitCode.FAILED
    except KeyboardInterrupt:
        sys.stderr.write("netio-analyze: interrupted\n")
        if args.json:
            _json_error("interrupted")
        return ExitCode.INTERRUPTED
    except MemoryError:
        sys.stderr.write("netio-analyze: error: out of memory\n")
        if args.json:
            _json_error("out of memory")
        return ExitCode.FAILED
    finally:
        if bar is not None:
            bar.close()
        if mapper is not None:
            mapper.close()
    for w in doc["warnings"]:
        sys.stderr.write(f"netio-analyze: warning: {w}\n")
    readable = [c for c in doc["captures"] if c["readable"]]
    if not readable:
        sys.stderr.write("netio-analyze: error: no capture could be read\n")
        if args.json:
            why = "; ".join(w for c in doc["captures"] for w in c["warnings"])
            _json_error(f"no capture could be read: {why}", doc)
        return EXIT_UNREADABLE
    if args.json:
        write_json(doc, sys.stdout)
    else:
        sys.stdout.write(to_text(doc, top=args.top))
    if args.plot:
        for path in write_plots(doc, args.plot):
            sys.stderr.write(f"netio-analyze: wrote {path}\n")
    return EXIT_STORM if doc["storms"] or doc["xon_storms"] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
