"""``netio bench [MODE] [SERVER]``: perftest-style bandwidth and latency tests on netio's
own IO API, over any backend, in either role, and the fabric profile the models read.

MODE is one of send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat
(default write_bw). Without SERVER netio is the server: it listens on --listen and serves
the runs a netio bench client asks for (one client, then it exits). With SERVER
(HOST:PORT) it is the client and prints perftest's columns, units in every header, plus
the CPU each side used (100 % = one core). ``-a`` sweeps 2 B .. 8 MiB; ``--json`` prints
one document for the whole sweep; ``--profile OUT.json`` runs a latency sweep (send_lat)
and a bandwidth sweep (write_bw) over the sizes and writes the fitted link profile
(alpha, beta, fit error, efficiency against size) that ``netio-model`` reads.

On one host the soft backend needs one local address per process (--local-addr; the
server takes its --listen address).

Exit codes (netio's one table, ``netio --help``): 0 done; 2 bad arguments; 4 the test
failed (no server, a failed completion, a timeout); 130 interrupted (Ctrl-C); 141 the
reader of the output went away.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import netio
from netio.cli.exit_codes import ExitCode
from netio.perf import report
from netio.perf.profile import build_profile
from netio.perf.run import Result, run_client, serve
from netio.perf.spec import SWEEP_SIZES_BYTES, BandwidthResult, LatencyResult, Mode, RunSpec

DEFAULT_PORT = 18600
EXIT_OK = ExitCode.OK
EXIT_USAGE = ExitCode.USAGE
EXIT_FAILED = ExitCode.FAILED
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
EXIT_BROKEN_PIPE = ExitCode.BROKEN_PIPE
_MODES = [m.value for m in Mode]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench", help="bandwidth and latency tests on the IO API (any backend); the fabric "
        "profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    parser.set_defaults(func=run)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", nargs="*", metavar="[MODE] [SERVER]",
                        help=f"MODE: {', '.join(_MODES)}; SERVER: HOST:PORT to be the client")
    parser.add_argument("--backend", default="auto", choices=netio.BACKENDS)
    parser.add_argument("-s", "--size", type=int, default=None, help="message size in bytes")
    parser.add_argument("-a", "--all", action="store_true", help="sweep 2 B .. 8 MiB")
    parser.add_argument("-n", "--iters", type=int, default=1000, help="iterations per size")
    parser.add_argument("-D", "--duration", type=float, default=None,
                        help="run each size this many seconds instead of -n iterations")
    parser.add_argument("-q", "--endpoints", type=int, default=1,
                        help="parallel endpoints (bandwidth modes)")
    parser.add_argument("-t", "--tx-depth", type=int, default=128,
                        help="requests in flight per endpoint")
    parser.add_argument("-m", "--mtu", type=int, default=None, choices=(256, 512, 1024, 2048,
                                                                         4096))
    parser.add_argument("--listen", default=f"0.0.0.0:{DEFAULT_PORT}",
                        help="server: HOST:PORT to listen on (port 0: any, printed)")
    parser.add_argument("--local-addr", default=None, help="local IP (soft backend)")
    parser.add_argument("--rx-mode", choices=("auto", "raw", "udp"), default="auto",
                        help="soft backend: receive through a raw socket (needs "
                             "CAP_NET_RAW) or the UDP socket of port 4791; auto: raw when "
                             "permitted")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="deadline in seconds of every connect and control step")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--profile", metavar="OUT.json", default=None,
                        help="client: run send_lat and write_bw and write the link profile")


def _parse_words(words: list[str]) -> tuple[Mode | None, str | None]:
    mode: Mode | None = None
    server: str | None = None
    for word in words:
        if word in _MODES and mode is None:
            mode = Mode(word)
        elif server is None and word not in _MODES:
            server = word
        else:
            raise ValueError(f"unexpected argument {word!r}")
    return mode, server


def _sizes(args: Any, mode: Mode | None) -> tuple[int, ...]:
    if args.all or args.profile:  # a profile is a fit over sizes: always the sweep
        return SWEEP_SIZES_BYTES
    if args.size is not None:
        return (args.size,)
    return (8,) if mode is Mode.ATOMIC_BW else (65536,) if (
        mode is not None and not mode.is_latency) else (2,)


def run(args: Any) -> int:
    try:
        mode, server = _parse_words(args.words)
        if args.profile and server is None:
            raise ValueError("--profile is a client option: give SERVER")
        if args.profile and mode is not None:
            raise ValueError("--profile runs send_lat and write_bw itself: give no MODE")
        if args.profile and args.size is not None:
            raise ValueError("--profile sweeps 2 B .. 8 MiB itself: give no -s")
        if args.endpoints > 1 and mode is not None and mode.is_latency:
            raise ValueError("latency modes use one endpoint (-q 1)")
        mode_for_spec = mode or Mode.WRITE_BW
        spec = RunSpec(mode_for_spec, _sizes(args, mode), args.iters, args.duration,
                       args.tx_depth, args.endpoints)
        if not args.timeout > 0:
            raise ValueError(f"--timeout {args.timeout} must be positive")
    except (ValueError, netio.IoError) as exc:
        print(f"netio bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if server is None:
            return asyncio.run(_serve(args))
        return asyncio.run(_client(args, spec, server, profile=args.profile))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_BROKEN_PIPE
    except (netio.NetioError, OSError) as exc:
        if args.json:
            print(json.dumps({"schema": report.SCHEMA, "version": report.VERSION,
                              "error": str(exc)}))
        print(f"netio bench: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _open(args: Any, local_addr: str | None) -> netio.Context:
    options: dict[str, Any] = {}
    backend = args.backend
    if backend in ("soft", "auto") and local_addr and local_addr != "0.0.0.0":
        options["local_addr"] = local_addr
    if backend == "soft":
        options["rx_mode"] = args.rx_mode
    return netio.open(backend, mtu=args.mtu, timeout_s=args.timeout, **options)


async def _serve(args: Any) -> int:
    host = args.listen.rpartition(":")[0].strip("[]")
    async with _open(args, args.local_addr or host) as ctx:
        listener = await ctx.listen(args.listen)
        print(f"netio bench: {ctx.backend.name} server on {listener.address[0]}:"
              f"{listener.address[1]}", file=sys.stderr, flush=True)
        more = True
        while more:
            spec, more = await serve(ctx, listener, args.timeout)
            print(f"netio bench: served {spec.mode.value} at {len(spec.sizes_bytes)} size(s)",
                  file=sys.stderr, flush=True)
    return EXIT_OK


async def _client(args: Any, spec: RunSpec, server: str, *, profile: str | None) -> int:
    async with _open(args, args.local_addr) as ctx:
        if profile is None:
            results, ep = await _one_run(args, ctx, server, spec, more=False)
            if args.json:
                print(json.dumps(report.document(spec, results, backend=ctx.backend.name,
                                                 path=ep.path.text()), indent=1))
            return EXIT_OK
        lat_spec = RunSpec(Mode.SEND_LAT, spec.sizes_bytes, spec.iterations, spec.duration_s)
        bw_spec = RunSpec(Mode.WRITE_BW, spec.sizes_bytes, spec.iterations, spec.duration_s,
                          spec.queue_depth, spec.endpoints)
        lat, ep = await _one_run(args, ctx, server, lat_spec, more=True)
        await ep.aclose()
        bw, ep = await _one_run(args, ctx, server, bw_spec, more=False)
        desc = ep.path.local
        host = server.rpartition(":")[0].strip("[]")
        made = build_profile([r for r in lat if isinstance(r, LatencyResult)],
                             [r for r in bw if isinstance(r, BandwidthResult)],
                             backend=ctx.backend.name, device=desc.device or desc.backend,
                             gid=desc.gid or desc.local_ip, mtu_bytes=ep.path.mtu_bytes,
                             hosts=(desc.local_ip or "local", host))
        from netio.fabric_profile import profile_to_dict

        with open(profile, "w", encoding="utf-8") as out:
            json.dump(profile_to_dict(made), out, indent=1)
            out.write("\n")
        fit = made.fit
        summary = (f"profile: alpha {fit.alpha_s * 1e6:.2f} us, beta {fit.beta_s_per_byte:.3e} "
                   f"s/B ({1 / fit.beta_s_per_byte / 1e9 * 8:.3f} Gb/s), fit error "
                   f"{fit.max_relative_error * 100:.1f} %, written to {profile}")
        if args.json:
            print(json.dumps({"latency": report.document(lat_spec, lat,
                                                         backend=ctx.backend.name,
                                                         path=ep.path.text()),
                              "bandwidth": report.document(bw_spec, bw,
                                                           backend=ctx.backend.name,
                                                           path=ep.path.text()),
                              "profile": profile_to_dict(made)}, indent=1))
        else:
            print(summary)
        return EXIT_OK


async def _one_run(args: Any, ctx: netio.Context, server: str, spec: RunSpec, *,
                   more: bool) -> tuple[list[Result], netio.Endpoint]:
    if not args.json:
        print(f"netio bench {spec.mode.value}, backend {ctx.backend.name}, "
              f"queue depth {spec.queue_depth}, endpoints {spec.endpoints}", flush=True)
        print(report.header(spec.mode), flush=True)

    def show(result: Result) -> None:
        if not args.json:
            print(report.line(result), flush=True)

    results, ep = await run_client(ctx, server, spec, args.timeout, show, more=more)
    if not args.json:
        print(f"path: {ep.path.text()}", flush=True)
    return results, ep


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="netio bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_intermixed_args(argv))


__all__ = ["configure", "main", "register", "run"]
