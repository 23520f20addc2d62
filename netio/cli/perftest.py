"""``netio perftest TEST [HOST]``: be either side of perftest's ``ib_write_bw``,
``ib_read_bw``, ``ib_send_bw``, ``ib_atomic_bw`` (TEST ``write``, ``read``,
``send``, ``atomic``) or ``ib_write_lat``, ``ib_send_lat``, ``ib_read_lat``
(``write_lat``, ``send_lat``, ``read_lat``), RC, over netio's IO API
(``--backend soft``, the default: netio's RoCE engine; ``verbs``: rdma-core;
``tcp``: netio to netio only).

Without HOST netio is the server and waits for perftest's client; with HOST it
connects to perftest's server. Options mean what perftest's do (``-s``, ``-n``,
``-t``, ``-r``, ``-m``, ``-p``, ``-A``, ``-q``, ``-a``, ``-o``, ``-u``); ``-d``, ``-i``
and ``-x`` choose the device, port and GID index with ``--backend verbs`` and
are ignored otherwise; ``-F`` is accepted for copy-paste and ignored. Every step
of the exchange and every wait for completions is bounded by ``--timeout``.
Both sides need the same test, ``-q``, ``-a`` and ``-s`` (and ``-n`` for the
latency tests), as perftest's own do; a peer running another test or a mode
netio does not run (duplex ``-b``, UD, XRC/DC, multicast, perftest >= 6.28) ends
the run with one line saying so. Bandwidth is reported in MiB/s (perftest's
"MB/sec") and the message rate in Mpps; as a WRITE/READ/ATOMIC server netio
prints the client's report, as perftest does. netio measures no per-iteration
peak: "BW peak" is the average. Latencies are perftest's columns in
microseconds (half the round trip for WRITE and SEND); ``read_lat``'s server
measures nothing, as perftest's.

Exit codes (netio's one table, ``netio --help``): 0 done; 4 the test failed (no server,
a failed completion, a timeout, a peer in a mode netio does not run); 2 bad arguments;
130 interrupted (Ctrl-C); 141 the reader of the output went away (``| head``), quietly,
as for a tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from netio.backends.soft import RxMode
from netio.cli.soft_options import (
    EXIT_OK,
    EXIT_USAGE,
    add_driver_options,
    faults_from_args,
    run_driver_command,
    standalone_main,
)
from netio.errors import ExchangeError
from netio.interop.perftest import (
    DEFAULT_PORT,
    NETIO_OUT_READS,
    QP_TIMEOUT,
    AtomicType,
    BwReport,
    LatReport,
    PerftestConfig,
    PerftestKeys,
    PerftestListener,
    PerftestResult,
    PerftestVerb,
    run_perftest,
)

_HEADER = (" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
           "MsgRate[Mpps]")
_LAT_HEADER = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
               "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
#: The tests, as the sub-commands name them: (verb, latency).
TESTS: dict[str, tuple[PerftestVerb, bool]] = {
    **{verb.value: (verb, False) for verb in PerftestVerb},
    **{f"{verb.value}_lat": (verb, True)
       for verb in (PerftestVerb.WRITE, PerftestVerb.SEND, PerftestVerb.READ)},
}
_LINE = "-" * 87


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "perftest", help="run perftest bandwidth tests (ib_write/read/send/atomic_bw) with netio "
                         "as either side", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    # One sub-command per test, so that HOST is the only positional after the
    # options (argparse cannot interleave options between two positionals).
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="TEST")
    for test, (verb, latency) in TESTS.items():
        program = f"ib_{verb.value}_{'lat' if latency else 'bw'}"
        sub = verbs.add_parser(test, help=program,
                               description=f"netio as either side of {program}",
                               epilog="exit codes: 0 done; 4 the test failed; 2 bad arguments; "
                                      "130 interrupted; 141 output closed (see netio perftest "
                                      "--help)")
        _add_options(sub)
        sub.set_defaults(func=run)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", nargs="?", default=None,
                        help="perftest server to connect to (omit to be the server)")
    parser.add_argument("-p", "--port", type=int, default=DEFAULT_PORT,
                        help=f"TCP port of the exchange (default {DEFAULT_PORT}; a server "
                             "given 0 takes a free port and prints it)")
    parser.add_argument("-s", "--size", type=int, default=None,
                        help="message size in bytes (default 65536, latency tests 2; "
                             "atomics 8)")
    parser.add_argument("-a", "--all", action="store_true",
                        help="run every size 2 .. 8388608 bytes (both sides need -a)")
    parser.add_argument("-q", "--qp", type=int, default=1,
                        help="QPs, bandwidth tests (default 1; both sides need the same)")
    parser.add_argument("-u", "--qp-timeout", type=int, default=QP_TIMEOUT,
                        help="local ACK timeout, 4.096 us * 2**N, 1..31 (default "
                             f"{QP_TIMEOUT}: 67 ms)")
    parser.add_argument("-o", "--outs", type=int, default=None,
                        help="outstanding READs/atomics offered to the peer, READ and "
                             f"atomic tests (default {NETIO_OUT_READS})")
    parser.add_argument("-n", "--iters", type=int, default=1000,
                        help="number of operations (default 1000)")
    parser.add_argument("-t", "--tx-depth", type=int, default=128,
                        help="operations in flight (default 128)")
    parser.add_argument("-r", "--rx-depth", type=int, default=128,
                        help="receives posted at a time, SEND server (default 128)")
    parser.add_argument("-m", "--mtu", type=int, default=4096,
                        help="MTU offered, 256..4096; the smaller of both sides' is used "
                             "(default 4096)")
    parser.add_argument("-A", "--atomic_type", choices=[a.value for a in AtomicType],
                        default=AtomicType.FETCH_AND_ADD.value, help="atomic operation")
    parser.add_argument("-x", "--gid-index", type=int, default=None,
                        help="GID index (--backend verbs)")
    parser.add_argument("-d", "--ib-dev", default=None, help="RDMA device (--backend verbs)")
    parser.add_argument("-i", "--ib-port", type=int, default=None,
                        help="device port (--backend verbs)")
    parser.add_argument("-F", "--CPU-freq", action="store_true", help=argparse.SUPPRESS)
    add_driver_options(parser)


def _c_hex(value: int, width: int) -> str:
    """C's ``%#0<width>x``: ``0x`` and zeros to ``width`` characters in all, but
    no ``0x`` for zero (``printf("%#04x", 0)`` is ``0000``)."""
    return f"{value:0{width}x}" if value == 0 else f"{value:#0{width}x}"


def keys_lines(side: str, keys: PerftestKeys, verb: PerftestVerb) -> str:
    """perftest's ``ctx_print_pingpong_data``: the basic fields, then ``OUT`` for
    READ and ``RKey``/``VAddr`` for READ and WRITE, then the GID byte by byte in decimal."""
    line = (f" {side} address: LID {_c_hex(keys.lid, 4)} QPN {_c_hex(keys.qpn, 6)}"
            f" PSN {_c_hex(keys.psn, 6)}")
    if verb is PerftestVerb.READ:
        line += f" OUT {_c_hex(keys.out_reads, 4)}"
    if verb in (PerftestVerb.READ, PerftestVerb.WRITE):
        line += f" RKey {_c_hex(keys.rkey, 8)} VAddr {_c_hex(keys.vaddr, 16)}"
    return line + "\n GID: " + ":".join(f"{b:02d}" for b in keys.gid.packed)


def _report_line(report: BwReport) -> str:
    return (f" {report.size_bytes:<10d} {report.iters:<10d}     {report.bw_peak:<10.2f}"
            f"         {report.bw_avg:<10.2f}           {report.msg_rate_mpps:<10.6f}")


def lat_line(report: LatReport) -> str:
    """perftest's ``REPORT_FMT_LAT`` line."""
    return (f" {report.size_bytes:<7d} {report.iters:d}          {report.t_min_us:<7.2f}"
            f"        {report.t_max_us:<7.2f}      {report.t_typical_us:<7.2f}  \t       "
            f"{report.t_avg_us:<7.2f}     \t{report.t_stdev_us:<7.2f}\t\t{report.p99_us:<7.2f}"
            f" \t\t{report.p999_us:<7.2f}")


def _on_event(config: PerftestConfig, kind: str, value: object) -> None:
    if kind in ("local", "remote") and isinstance(value, PerftestKeys):
        print(keys_lines(kind, value, config.verb), flush=True)
    elif kind == "waiting":
        print(f"  {value}", flush=True)
    elif kind == "mtu":
        print(f" Mtu             : {value}[B]", flush=True)
    elif kind == "header":
        read_lat_server = config.latency and config.verb is PerftestVerb.READ and (
            config.server is None)  # measures nothing, as perftest's
        if not read_lat_server and (config.latency or config.server is not None
                                    or config.verb is PerftestVerb.SEND):
            print(_LINE)
            print(_LAT_HEADER if config.latency else _HEADER, flush=True)
    elif kind == "report" and isinstance(value, BwReport):
        print(_report_line(value), flush=True)
    elif kind == "latency" and isinstance(value, LatReport):
        print(lat_line(value), flush=True)
    elif kind == "peer_report" and isinstance(value, BwReport):
        print(_LINE)
        print(_HEADER + "   (the client's report)")
        print(_report_line(value), flush=True)


async def _run(config: PerftestConfig) -> PerftestResult:
    def on_event(kind: str, value: object) -> None:
        _on_event(config, kind, value)

    if config.server is not None:
        return await run_perftest(config, on_event=on_event)
    listener = PerftestListener(config.timeout_s)
    await listener.listen(None, config.port)
    try:
        print(f"  waiting for a client on TCP port {listener.port}", flush=True)
        return await run_perftest(config, listener=listener, on_event=on_event)
    finally:
        await listener.close()


def run(args: argparse.Namespace) -> int:
    try:
        verb, latency = TESTS[args.verb]
        config = PerftestConfig(
            verb=verb, latency=latency, qps=args.qp, all_sizes=args.all, out_reads=args.outs,
            qp_timeout=args.qp_timeout,
            server=args.host, port=args.port, local_ip=args.bind,
            size_bytes=args.size, iters=args.iters, tx_depth=args.tx_depth,
            rx_depth=args.rx_depth, mtu_bytes=args.mtu,
            atomic_type=AtomicType(args.atomic_type), timeout_s=args.timeout,
            rx_mode=RxMode(args.rx_mode), faults=faults_from_args(args), fault_seed=args.seed,
            backend=args.backend, device=args.ib_dev, gid_index=args.gid_index,
            ib_port=args.ib_port,
        )
    except (ExchangeError, ValueError) as exc:
        print(f"netio perftest: {exc}", file=sys.stderr)
        return EXIT_USAGE
    hint = f"cannot allocate the buffers for {config.message_bytes}-byte messages (-s, -r)"
    outcome = run_driver_command("netio perftest", args, _run(config), hint)
    if isinstance(outcome, int):
        return outcome
    result = outcome
    print(_LINE)
    print(f" netio {args.verb} {'client' if result.is_client else 'server'} done "
          f"(peer perftest {result.peer_version}, MTU {result.mtu_bytes}, {result.qps} QP"
          f"{'s' if result.qps > 1 else ''})")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m netio.cli.perftest``: the command on its own."""
    return standalone_main("netio perftest", __doc__, configure, argv)


if __name__ == "__main__":
    sys.exit(main())
