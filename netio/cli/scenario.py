"""``netio scenario``: write realistic RoCEv2/PFC captures and their ground truth.

    netio scenario --preset demo OUTDIR        # the README story (4 captures)
    netio scenario --file my.toml OUTDIR       # a scenario file (JSON or TOML)
    netio scenario --bench 1000000 OUTDIR      # a large mixed capture for benchmarks
    netio scenario --list                      # the built-in presets

Each port becomes ``OUTDIR/<port>.pcap``; ``OUTDIR/truth.json`` holds what
``netio-analyze --json`` must report for them. Exit codes (netio.cli.exit_codes):
0 written, 2 bad option (or unknown preset), 3 invalid scenario file, 4 the output
could not be written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from netio.cli.exit_codes import EXIT_CODES_HELP, ExitCode


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("scenario", help="generate captures + ground truth",
                              description=__doc__, epilog=EXIT_CODES_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="built-in scenario name (see --list)")
    src.add_argument("--file", help="scenario file (.json or .toml)")
    src.add_argument("--bench", type=int, metavar="PACKETS",
                     help="large single-port capture of about PACKETS packets")
    src.add_argument("--list", action="store_true", help="list the presets")
    p.add_argument("--no-truth", action="store_true", help="do not write truth.json")
    p.add_argument("outdir", nargs="?", help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from netio.errors import ScenarioError
    from netio.scenario import generate, load_scenario, scenario_from_dict
    from netio.scenario.presets import PRESETS, bench_dict, preset

    if args.list:
        for name, text in PRESETS.items():
            print(f"{name:8s} {text}")
        return ExitCode.OK
    if not args.outdir:
        sys.stderr.write("netio scenario: an output directory is required\n")
        return ExitCode.USAGE
    try:
        if args.file:
            scenario = load_scenario(args.file)
        elif args.bench is not None:
            if args.bench < 100:
                raise ScenarioError("--bench needs at least 100 packets")
            scenario = scenario_from_dict(bench_dict(args.bench))
        else:
            name = args.preset or "demo"
            if name not in PRESETS:
                sys.stderr.write(f"netio scenario: unknown preset {name!r} "
                                 f"(have: {', '.join(PRESETS)})\n")
                return ExitCode.USAGE
            scenario = preset(name)
        out = generate(scenario, args.outdir, truth=not args.no_truth)
    except ScenarioError as exc:
        sys.stderr.write(f"netio scenario: {exc}\n")
        return ExitCode.UNREADABLE
    except OSError as exc:
        sys.stderr.write(f"netio scenario: {args.outdir}: {exc.strerror}\n")
        return ExitCode.FAILED
    for path in out.captures:
        print(path)
    if scenario.story:
        sys.stderr.write(f"story: {scenario.story}\n")
    return ExitCode.OK
