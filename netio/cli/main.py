"""netio: decode captures, generate fabric scenarios, and run the soft RoCE
engine against rdma-core's and perftest's tools.

Every command (these subcommands, netio-analyze, netio-daemon) uses one table
of exit codes (netio.cli.exit_codes), printed below; netio COMMAND --help
says which of them the command returns. The capture analyzer and the telemetry
daemon are the separate commands netio-analyze and netio-daemon."""

# Each subcommand lives in its own module under netio.cli and exposes
# register(subparsers); the handler it sets as ``func`` returns the exit code.

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from netio.cli.exit_codes import EXIT_CODES_HELP

# (subcommand module, one-line help). Modules are imported only when listed
# here, so a subcommand's heavy imports cost nothing to the others.
SUBCOMMANDS: tuple[str, ...] = ("decode", "scenario", "pingpong", "perftest", "bench",
                               "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="netio", description=__doc__, epilog=EXIT_CODES_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"netio.cli.{name}")
        module.register(sub)
    return parser


# Subcommands whose options may come after their positional words (perftest's habit:
# ``netio bench write_bw -s 4096 HOST:PORT``); they parse their own arguments with
# argparse's intermixed parsing, which a parser with subcommands cannot use.
INTERMIXED: tuple[str, ...] = ("bench",)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in INTERMIXED:
        module = importlib.import_module(f"netio.cli.{words[0]}")
        direct: int = module.main(words[1:])
        return direct
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
