"""``netio pingpong``: be either side of ``ibv_rc_pingpong``, ``ibv_uc_pingpong``
or ``ibv_ud_pingpong`` (rdma-core's libibverbs examples), over netio's IO API
(``--backend soft``, the default: netio's RoCE engine; ``verbs``: rdma-core;
``tcp``: netio to netio only, RC only).

Without HOST netio is the server and waits for the tool's client; with HOST
it connects to the tool's server. The options mean what they mean to the
tools (``-s``, ``-n``, ``-m``, ``-r``, ``-p``, ``--chk``); ``-d``, ``-i`` and
``-g`` choose the device, port and GID index with ``--backend verbs`` and are
ignored otherwise (the soft engine has one RoCEv2 GID, ``::ffff:<bind
address>``); ``-l`` and ``-e`` are accepted for copy-paste and ignored (netio
polls). ``--chk`` checks every received message byte by byte against the
``--chk`` client's pattern, so the peer must use ``--chk`` too. Output follows
the tools'. Every step of the exchange (connect, waiting for the client, each
message) and every wait for a completion is bounded by ``--timeout``; a
failed completion says why when netio knows (a path-MTU mismatch names both
MTUs).

Exit codes (netio's one table, ``netio --help``): 0 done; 4 the test failed (no server,
a failed completion, a timeout, a --chk mismatch); 2 bad arguments; 130 interrupted (Ctrl-C); 141
the reader of the output went away (``| head``), quietly, as for a tool
killed by SIGPIPE.
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
from netio.interop.backend import gid_text
from netio.interop.pingpong import (
    DEFAULT_PORT,
    PingpongAddress,
    PingpongConfig,
    PingpongListener,
    PingpongResult,
    run_pingpong,
)
from netio.roce import QpType


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pingpong", help="run the libibverbs pingpong tests (RC/UC/UD) against rdma-core's tools",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--rc", dest="transport", action="store_const", const="rc",
                      help="ibv_rc_pingpong (default)")
    kind.add_argument("--uc", dest="transport", action="store_const", const="uc",
                      help="ibv_uc_pingpong")
    kind.add_argument("--ud", dest="transport", action="store_const", const="ud",
                      help="ibv_ud_pingpong")
    parser.add_argument("host", nargs="?", default=None,
                        help="server to connect to (omit to be the server)")
    parser.add_argument("-p", "--port", type=int, default=DEFAULT_PORT,
                        help=f"TCP port of the exchange (default {DEFAULT_PORT}; a server "
                             "given 0 takes a free port and prints it)")
    parser.add_argument("-s", "--size", type=int, default=None,
                        help="message size in bytes (default 4096; UD 1024)")
    parser.add_argument("-m", "--mtu", type=int, default=1024,
                        help="path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)")
    parser.add_argument("-r", "--rx-depth", type=int, default=500,
                        help="receives posted at a time (default 500)")
    parser.add_argument("-n", "--iters", type=int, default=1000,
                        help="number of exchanges (default 1000)")
    parser.add_argument("-c", "--chk", action="store_true",
                        help="validate every received message (the peer must use --chk)")
    parser.add_argument("-g", "--gid-idx", type=int, default=None,
                        help="GID index (--backend verbs)")
    parser.add_argument("-d", "--ib-dev", default=None, help="RDMA device (--backend verbs)")
    parser.add_argument("-i", "--ib-port", type=int, default=None,
                        help="device port (--backend verbs)")
    parser.add_argument("-l", "--sl", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("-e", "--events", action="store_true", help=argparse.SUPPRESS)
    add_driver_options(parser)
    parser.set_defaults(func=run, transport="rc")


def address_line(side: str, addr: PingpongAddress, transport: QpType) -> str:
    """The tools' address line; ``ibv_ud_pingpong`` writes ``PSN ...: GID`` for its own."""
    label = "local address: " if side == "local" else "remote address:"
    sep = ":" if side == "local" and transport is QpType.UD else ","
    return (f"  {label} LID 0x{addr.lid:04x}, QPN 0x{addr.qpn:06x}, PSN 0x{addr.psn:06x}{sep} "
            f"GID {_gid_text(addr)}")


def _gid_text(addr: PingpongAddress) -> str:
    """The GID as the tools print it (``inet_ntop``: IPv4-mapped in dotted form)."""
    return gid_text(addr.gid)


def run(args: argparse.Namespace) -> int:
    transport = {"rc": QpType.RC, "uc": QpType.UC, "ud": QpType.UD}[args.transport]
    size = args.size if args.size is not None else (1024 if transport is QpType.UD else 4096)
    try:
        config = PingpongConfig(
            transport=transport, server=args.host, port=args.port, local_ip=args.bind,
            size_bytes=size, iters=args.iters, mtu_bytes=args.mtu, rx_depth=args.rx_depth,
            chk=args.chk, timeout_s=args.timeout, rx_mode=RxMode(args.rx_mode),
            faults=faults_from_args(args), fault_seed=args.seed, backend=args.backend,
            device=args.ib_dev, ib_port=args.ib_port, gid_index=args.gid_idx,
        )
    except (ExchangeError, ValueError) as exc:
        print(f"netio pingpong: {exc}", file=sys.stderr)
        return EXIT_USAGE
    hint = f"cannot allocate the {size}-byte message buffer (-s)"
    outcome = run_driver_command("netio pingpong", args, _run(config), hint)
    if isinstance(outcome, int):
        return outcome
    result = outcome
    print(f"{result.bytes_total} bytes in {result.duration_s:.2f} seconds = "
          f"{result.mbit_per_s:.2f} Mbit/sec")
    print(f"{result.iters} iters in {result.duration_s:.2f} seconds = "
          f"{result.usec_per_iter:.2f} usec/iter")
    if config.chk:
        print(f"{result.checked_messages} received messages checked")
    return EXIT_OK


def _note(text: str) -> None:
    print(f"  {text}", flush=True)


async def _run(config: PingpongConfig) -> PingpongResult:
    def on_address(side: str, addr: PingpongAddress) -> None:
        print(address_line(side, addr, config.transport), flush=True)

    if config.server is not None:
        return await run_pingpong(config, on_address=on_address, on_waiting=_note)
    listener = PingpongListener(config.timeout_s)
    await listener.listen(None, config.port)
    try:
        _note(f"waiting for a client on TCP port {listener.port}")
        return await run_pingpong(config, listener=listener, on_address=on_address)
    finally:
        await listener.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m netio.cli.pingpong``: the command on its own."""
    return standalone_main("netio pingpong", __doc__, configure, argv)


if __name__ == "__main__":
    sys.exit(main())
