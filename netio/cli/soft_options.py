"""Command-line options shared by the tool commands (``netio pingpong``, ``netio
perftest``): the backend, the timeout, and the soft RoCE driver's receive mode and
seeded lossy link on this endpoint's egress."""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from netio.backends.soft import RxMode
from netio.cli.arg_types import real_number, whole_number
from netio.cli.exit_codes import ExitCode
from netio.errors import DriverSocketError, ExchangeError, IoError
from netio.interop.backend import TOOL_BACKENDS
from netio.roce import LinkFaults

_probability = real_number(0.0, 1.0)
_seconds = real_number(0.0, minimum_open=True, unit="s")
_microseconds = whole_number(0, 10_000_000, unit="µs")


def _ipv4(text: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


def add_driver_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=TOOL_BACKENDS, default="soft",
                        help="netio backend: soft (netio's RoCE engine, default), verbs "
                             "(rdma-core: a RoCE NIC or rxe), tcp (only to netio --backend "
                             "tcp; never to a kernel tool)")
    group = parser.add_argument_group("soft RoCE driver")
    group.add_argument("-B", "--bind", type=_ipv4, default=None, metavar="IP",
                       help="local RoCE address (GID ::ffff:IP); default: as a server the "
                            "address the client connected to, as a client the route's source")
    group.add_argument("--rx-mode", choices=[m.value for m in RxMode], default="auto",
                       help="receive through a raw socket (exact ICRC check; needs "
                            "CAP_NET_RAW) or a UDP socket (ICRC checked without the IP ID); "
                            "auto: raw when permitted")
    group.add_argument("--timeout", type=_seconds, default=60.0, metavar="S",
                       help="deadline of every step: a client retries connecting to its "
                            "server for S seconds, a server waits S seconds for its client, "
                            "each exchange message must come within S, and the test gives "
                            "up after S seconds without a completion (default 60)")
    lossy = parser.add_argument_group("lossy link (this endpoint's egress, seeded)")
    for name in ("drop", "duplicate", "corrupt", "reorder", "delay"):
        lossy.add_argument(f"--{name}", type=_probability, default=0.0, metavar="P",
                           help=f"probability to {name} each datagram")
    lossy.add_argument("--delay-us", type=_microseconds, default=2000, metavar="US",
                       help="longest extra delay of a delayed datagram (default 2000)")
    lossy.add_argument("--reorder-us", type=_microseconds, default=500, metavar="US",
                       help="longest hold-back of a reordered datagram (default 500)")
    lossy.add_argument("--seed", type=int, default=0, help="lossy link seed (default 0)")


def driver_error_text(exc: OSError, args: Any) -> str:
    """The driver's error, with what to do when a raw socket was refused."""
    text = str(exc)
    if exc.errno in (errno.EPERM, errno.EACCES) and "raw" in text:
        text += (" (--rx-mode raw needs CAP_NET_RAW: run as root, or use --rx-mode udp)"
                 if args.rx_mode == "raw" else "")
    return text


def faults_from_args(args: Any) -> LinkFaults | None:
    probs = {name: getattr(args, name) for name in
             ("drop", "duplicate", "corrupt", "reorder", "delay")}
    if not any(probs.values()):
        return None
    return LinkFaults(latency_ns=0, delay_ns=args.delay_us * 1000,
                      reorder_ns=args.reorder_us * 1000, **probs)


def quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush stays quiet
    after the reader of our output went away (``| head``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def standalone_main(prog: str, description: str | None,
                    configure: Callable[[argparse.ArgumentParser], None],
                    argv: Sequence[str] | None) -> int:
    """Run one of these commands on its own (``python -m netio.cli.pingpong``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


# netio's one exit-code table (netio.cli.exit_codes)
EXIT_OK = ExitCode.OK
EXIT_FAILED = ExitCode.FAILED
EXIT_USAGE = ExitCode.USAGE
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
EXIT_BROKEN_PIPE = ExitCode.BROKEN_PIPE  # 128 + SIGPIPE

ResultT = TypeVar("ResultT")


def run_driver_command(prog: str, args: Any, main: Coroutine[Any, Any, ResultT],
                       memory_hint: str) -> ResultT | int:
    """Run ``main`` and turn every way it can fail into one line on stderr and an exit
    code (returned instead of the result)."""
    try:
        return asyncio.run(main)
    except BrokenPipeError:  # the reader of our output went away (| head): as SIGPIPE would
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except DriverSocketError as exc:
        print(f"{prog}: {driver_error_text(exc, args)}", file=sys.stderr)
        return EXIT_FAILED
    except (ExchangeError, IoError, OSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except MemoryError:
        print(f"{prog}: {memory_hint}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
