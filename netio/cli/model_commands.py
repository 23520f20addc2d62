"""netio-model's part-2 subcommands: infer, sweep, calibrate, wafer and train --conditions.

Registered by :mod:`netio.cli.model` (same exit codes):

  netio-model infer SYSTEM MODEL --input-tokens N --output-tokens N [--tp N --pp N --ep N]
                    [--concurrency N] [--weight-dtype fp8 --kv-dtype fp8]
                    [--draft-tokens G (--acceptance A | --mean-accepted L)
                     (--draft-model MODEL | --draft-cost C)] [--disaggregate] [--json]
  netio-model sweep MODEL SYSTEM --accelerators N[,N...] [--mode train|infer]
                    [--execution EXECUTION] [--input-tokens N --output-tokens N]
                    [--price-per-accelerator-hour USD] [--plot PREFIX] [--json]
  netio-model calibrate PROFILE.json --system BASE --output SYSTEM.json [--json]
  netio-model wafer MODEL [--wafer SYSTEM] [--gpu SYSTEM --gpu-execution EXECUTION]
                    [--systems N] [--json]
  netio-model train SYSTEM MODEL EXECUTION --conditions REPORT.json [...]

The library does the work; this module parses, calls and renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from netio.errors import ModelInputError
from netio.model.inference import Request, Serving, Speculation, infer
from netio.model.schema import DTYPE_BYTES, load_model, load_system

# The exit codes of netio.cli.model (not imported: that module imports this one).
EXIT_OK = 0
EXIT_INFEASIBLE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3

COMMANDS = ("infer",)


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {v}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {v}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), not {v}")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0.0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {v}")
    return v


def add_parsers(sub: Any, train_parser: argparse.ArgumentParser) -> None:
    """Register the part-2 subcommands on netio-model's subparsers."""
    i = sub.add_parser("infer", help="serve MODEL on SYSTEM: throughput, latency, memory")
    i.add_argument("system")
    i.add_argument("model")
    i.add_argument("--input-tokens", type=_positive, required=True)
    i.add_argument("--output-tokens", type=_positive, required=True)
    i.add_argument("--tp", type=_positive, default=1, help="tensor parallel ranks")
    i.add_argument("--pp", type=_positive, default=1, help="pipeline stages")
    i.add_argument("--ep", type=_positive, default=1, help="expert parallel ranks (within TP)")
    i.add_argument("--concurrency", type=_count, default=0,
                   help="requests in flight (default 0: as many as the KV cache holds)")
    i.add_argument("--weight-dtype", choices=list(DTYPE_BYTES), default="fp8")
    i.add_argument("--kv-dtype", choices=list(DTYPE_BYTES), default="fp8")
    i.add_argument("--kv-memory-fraction", type=float, default=Serving().kv_cache_memory_fraction,
                   help="share of free memory for the KV cache (TensorRT-LLM default 0.90)")
    i.add_argument("--max-batch-size", type=_positive, default=Serving().max_batch_size)
    i.add_argument("--draft-tokens", type=_count, default=0,
                   help="speculative decoding: tokens drafted per step (0: none)")
    i.add_argument("--acceptance", type=_fraction, default=0.0,
                   help="acceptance rate per drafted token (Leviathan et al. alpha)")
    i.add_argument("--mean-accepted", type=float, default=None,
                   help="mean tokens accepted per step, for tree/multi-head drafts")
    i.add_argument("--draft-model", default=None, help="draft model file or preset")
    i.add_argument("--draft-cost", type=_nonneg_float, default=0.0,
                   help="draft cost per drafted token as a fraction of a target decode step")
    i.add_argument("--disaggregate", action="store_true",
                   help="also time prefill on separate workers and the KV transfer")
    i.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    """Run one part-2 subcommand; input errors are one line naming the file and key."""
    try:
        if args.command == "infer":
            return _infer(args)
    except ModelInputError as exc:
        print(f"netio-model: {exc}", file=sys.stderr)
        return EXIT_INPUT
    raise AssertionError(f"not a part-2 command: {args.command}")  # argparse guarantees


def _infer(args: argparse.Namespace) -> int:
    system, model = load_system(args.system), load_model(args.model)
    if not 0.0 < args.kv_memory_fraction <= 1.0:
        print("netio-model: error: --kv-memory-fraction must be in (0, 1]", file=sys.stderr)
        return EXIT_USAGE
    serving = Serving(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype,
                      kv_cache_memory_fraction=args.kv_memory_fraction,
                      max_batch_size=args.max_batch_size)
    spec = None
    if args.draft_tokens:
        draft = load_model(args.draft_model) if args.draft_model else None
        if draft is None and args.draft_cost == 0.0:
            print("netio-model: error: --draft-tokens needs --draft-model or --draft-cost",
                  file=sys.stderr)
            return EXIT_USAGE
        spec = Speculation(acceptance_rate=args.acceptance,
                           mean_accepted_tokens=args.mean_accepted, draft=draft,
                           cost_ratio=args.draft_cost)
    r = infer(system, model, Request(args.input_tokens, args.output_tokens), serving,
              tp=args.tp, pp=args.pp, ep=args.ep, concurrency=args.concurrency,
              draft_tokens=args.draft_tokens, speculation=spec,
              disaggregate=args.disaggregate)
    print(json.dumps(r.to_json_dict(), indent=1) if args.json else r.to_text())
    return EXIT_OK if r.feasible else EXIT_INFEASIBLE
