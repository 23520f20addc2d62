"""netio-model: how long a training step takes on a system, and why.

  netio-model train SYSTEM MODEL EXECUTION [--json] [--plot FILE.png]
  netio-model collective SYSTEM --op all_reduce --ranks N [--ranks-per-node K]
                         [--sizes 1K,1M,1G] [--json]
  netio-model presets

SYSTEM, MODEL and EXECUTION are JSON or TOML files or preset names (``netio-model
presets`` lists them). The text output is a table; ``--json`` prints one document with
units in its keys.

Exit codes (netio's one table, see netio --help):
  0  done (train: the layout fits and runs)
  1  train: the layout is infeasible (the output says which term and by how much)
  2  usage error (bad option or value)
  3  an input file or preset is invalid (the message names the file and the key)
  141  the reader of the output went away (``| head``), as SIGPIPE would
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from netio.cli import model_commands
from netio.cli.exit_codes import ExitCode
from netio.errors import ModelInputError
from netio.model.collectives import Collective, collective
from netio.model.plot import plot_breakdown
from netio.model.schema import load_execution, load_model, load_system, preset_names
from netio.model.training import train

# netio's one exit-code table (netio.cli.exit_codes): "found" is an infeasible layout.
EXIT_OK = ExitCode.OK
EXIT_INFEASIBLE = ExitCode.FOUND
EXIT_USAGE = ExitCode.USAGE
EXIT_INPUT = ExitCode.UNREADABLE
EXIT_BROKEN_PIPE = ExitCode.BROKEN_PIPE

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?$", re.IGNORECASE)


def parse_size(text: str) -> float:
    """``4096``, ``64K``, ``1MiB``, ``1.5G`` (binary multiples) as bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4096, 64K, 1MiB)")
    return float(match.group(1)) * _UNITS[match.group(2).upper()]


def _sizes(text: str) -> list[float]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="netio-model", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("train", help="time one training step of MODEL on SYSTEM laid out "
                       "as EXECUTION")
    t.add_argument("system")
    t.add_argument("model")
    t.add_argument("execution")
    t.add_argument("--json", action="store_true", help="print one JSON document")
    t.add_argument("--plot", metavar="FILE.png", help="write the breakdown as a stacked bar")
    c = sub.add_parser("collective", help="time one collective by every algorithm")
    c.add_argument("system")
    c.add_argument("--op", required=True, choices=[x.name.lower() for x in Collective])
    c.add_argument("--ranks", type=int, required=True)
    c.add_argument("--ranks-per-node", type=int, default=None,
                   help="members of the group on each node (default: the node's accelerators)")
    c.add_argument("--sizes", type=_sizes, default=_sizes("1K,64K,1M,16M,256M,1G"),
                   help="comma-separated sizes in bytes, K/M/G binary suffixes")
    c.add_argument("--json", action="store_true", help="print one JSON document")
    sub.add_parser("presets", help="list the system, model and execution presets")
    model_commands.add_parsers(sub, t)  # infer, sweep, calibrate, wafer, train --conditions
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # Nothing more can be written; keep the interpreter's final flush quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _run(args: argparse.Namespace) -> int:
    if args.command in model_commands.COMMANDS or getattr(args, "conditions", None):
        return model_commands.run(args)
    try:
        if args.command == "presets":
            for kind in ("system", "model", "execution"):
                print(f"{kind}: {', '.join(preset_names(kind))}")
            return EXIT_OK
        system = load_system(args.system)
        if args.command == "collective":
            if args.ranks < 1 or (args.ranks_per_node is not None and args.ranks_per_node < 1):
                print("netio-model: error: --ranks and --ranks-per-node must be >= 1",
                      file=sys.stderr)
                return EXIT_USAGE
            per_node = args.ranks_per_node or system.node.accelerators
            if args.ranks % min(per_node, args.ranks):
                print(f"netio-model: error: --ranks {args.ranks} is not a multiple of "
                      f"--ranks-per-node {per_node}", file=sys.stderr)
                return EXIT_USAGE
            result = collective(system, Collective[args.op.upper()], args.sizes, args.ranks,
                                per_node)
            print(json.dumps(result.to_json_dict(), indent=1) if args.json else result.to_text())
            return EXIT_OK
        r = train(system, load_model(args.model), load_execution(args.execution))
    except ModelInputError as exc:
        print(f"netio-model: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(json.dumps(r.to_json_dict(), indent=1) if args.json else r.to_text())
    if args.plot:
        try:
            plot_breakdown([r], args.plot)
        except OSError as exc:
            print(f"netio-model: {args.plot}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK if r.feasible else EXIT_INFEASIBLE


if __name__ == "__main__":
    sys.exit(main())
