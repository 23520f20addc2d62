"""netio-model's part-2 subcommands: infer, sweep, calibrate, wafer and train --conditions.

Registered by :mod:`netio.cli.model` (same exit codes):

  netio-model infer SYSTEM MODEL --input-tokens N --output-tokens N [--tp N --pp N --ep N]
                    [--concurrency N] [--requests N] [--weight-dtype fp8 --kv-dtype fp8]
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

from netio.cli.arg_types import real_number, whole_number, whole_numbers
from netio.errors import ModelInputError
from netio.model.inference import Request, Serving, Speculation, infer
from netio.model.schema import DTYPE_BYTES, load_model, load_system

# The exit codes of netio.cli.model (not imported: that module imports this one).
EXIT_OK = 0
EXIT_INFEASIBLE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3

COMMANDS = ("infer", "sweep", "calibrate", "wafer")

_positive = whole_number(1)
_count = whole_number(0)
_counts = whole_numbers(1)
_fraction = real_number(0.0, 1.0, maximum_open=True)
_nonneg_float = real_number(0.0)


def add_parsers(sub: Any, train_parser: argparse.ArgumentParser) -> None:
    """Register the part-2 subcommands on netio-model's subparsers."""
    train_parser.add_argument(
        "--conditions", metavar="REPORT.json",
        help="also say what the network conditions in a netio-analyze --json report, a "
        "daemon /api/profile or a fabric profile cost this step")
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
    i.add_argument("--verify-tokens", type=_positive, default=None,
                   help="tokens per sequence the target verifies per step, for tree drafts "
                   "(default: draft tokens + 1)")
    i.add_argument("--draft-model", default=None, help="draft model file or preset")
    i.add_argument("--draft-cost", type=_nonneg_float, default=0.0,
                   help="draft cost per drafted token as a fraction of a target decode step")
    i.add_argument("--requests", type=_positive, default=None,
                   help="also simulate a trtllm-bench throughput run of N identical "
                   "requests, all waiting at t = 0 (its ramp, waves and drain; settings "
                   "derived as trtllm-bench does); default: steady state only")
    i.add_argument("--disaggregate", action="store_true",
                   help="also time prefill on separate workers and the KV transfer")
    i.add_argument("--conditions", metavar="REPORT.json",
                   help="also say what the network conditions in a netio-analyze --json "
                   "report, a daemon /api/profile or a fabric profile cost each token")
    i.add_argument("--json", action="store_true", help="print one JSON document")

    s = sub.add_parser("sweep", help="every layout of MODEL on SYSTEM: infeasible counts "
                       "and the Pareto frontier")
    s.add_argument("model")
    s.add_argument("system")
    s.add_argument("--accelerators", type=_counts, required=True,
                   help="accelerator count(s), comma-separated")
    s.add_argument("--mode", choices=("train", "infer"), default="train")
    s.add_argument("--execution", default=None,
                   help="train: the execution whose global batch, data types, attention "
                   "and overlap the sweep keeps (default: a built-in bf16, FlashAttention, "
                   "global batch 512 base)")
    s.add_argument("--input-tokens", type=_positive, default=1024)
    s.add_argument("--output-tokens", type=_positive, default=1024)
    s.add_argument("--weight-dtype", choices=list(DTYPE_BYTES), default="fp8")
    s.add_argument("--kv-dtype", choices=list(DTYPE_BYTES), default="fp8")
    s.add_argument("--acceptance", type=_fraction, default=None,
                   help="infer: also sweep speculative draft lengths 1..8 at this "
                   "acceptance rate")
    s.add_argument("--draft-cost", type=_nonneg_float, default=0.05,
                   help="infer: draft cost per drafted token as a fraction of a decode step")
    s.add_argument("--price-per-accelerator-hour", type=_nonneg_float, default=0.0,
                   help="cost in money (default: accelerator-seconds)")
    s.add_argument("--plot", metavar="PREFIX",
                   help="write PREFIX-frontier.png and PREFIX-breakdown.png")
    s.add_argument("--json", action="store_true", help="print one JSON document")

    c = sub.add_parser("calibrate", help="fit alpha, beta and the efficiency curve of a "
                       "link from a netio fabric profile; write a system file")
    c.add_argument("profile", help="a fabric profile (netio bench --profile, the daemon)")
    c.add_argument("--system", required=True,
                   help="the system (file or preset) whose NICs the profile measured")
    c.add_argument("--output", required=True, metavar="SYSTEM.json",
                   help="where to write the calibrated system")
    c.add_argument("--name", default=None, help="name of the calibrated system")
    c.add_argument("--json", action="store_true", help="print one JSON document")

    w = sub.add_parser("wafer", help="wafer-scale weight-streaming training, SRAM-resident "
                       "inference, and the same model on a GPU cluster")
    w.add_argument("model")
    w.add_argument("--wafer", default="cs3-weight-streaming",
                   help="a system with [weight_streaming] (default: the CS-3 preset)")
    w.add_argument("--systems", type=_positive, default=1, help="wafer systems training")
    w.add_argument("--global-batch-size", type=_positive, default=None,
                   help="sequences per step (default: the GPU execution's)")
    w.add_argument("--gpu", default="dgx-h100", help="GPU system to compare with")
    w.add_argument("--gpu-execution", default="llama3-70b-64gpu",
                   help="GPU training execution to compare with")
    w.add_argument("--gpu-serving-tp", type=_positive, default=8)
    w.add_argument("--input-tokens", type=_positive, default=1000)
    w.add_argument("--output-tokens", type=_positive, default=1000)
    w.add_argument("--batches", type=_counts, default=[1, 8, 64, 256],
                   help="serving batches (comma-separated); the largest is compared")
    w.add_argument("--gpu-price-per-hour", type=_nonneg_float, default=0.0,
                   help="per GPU-hour, to compare costs")
    w.add_argument("--wafer-price-per-hour", type=_nonneg_float, default=0.0,
                   help="per wafer-system-hour, to compare costs")
    w.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    """Run one part-2 subcommand; input errors are one line naming the file and key."""
    try:
        if args.command == "infer":
            return _infer(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "train":
            return _train_conditions(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "wafer":
            return _wafer(args)
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
                           cost_ratio=args.draft_cost, verify_tokens=args.verify_tokens)
    if args.requests and (args.pp > 1 or args.draft_tokens):
        print("netio-model: error: --requests simulates one pipeline stage without "
              "speculation (drop --pp / --draft-tokens)", file=sys.stderr)
        return EXIT_USAGE
    req = Request(args.input_tokens, args.output_tokens)
    r = infer(system, model, req, serving, tp=args.tp, pp=args.pp, ep=args.ep,
              concurrency=args.concurrency, draft_tokens=args.draft_tokens, speculation=spec,
              disaggregate=args.disaggregate)
    doc = r.to_json_dict()
    text = r.to_text()
    if args.requests and r.feasible:
        from netio.model.serving_run import BenchRun, simulate_run

        run = simulate_run(system, model, req, BenchRun(args.requests,
                                                        concurrency=args.concurrency),
                           serving, tp=args.tp, ep=args.ep)
        doc["benchmark_run"] = run.to_json_dict()
        text += "\n" + run.to_text()
    if args.conditions:
        from netio.model.conditions import infer_what_if, load_conditions

        w = infer_what_if(system, model, req, serving, load_conditions(args.conditions),
                          args.tp, args.pp, args.ep, args.concurrency, args.disaggregate)
        doc["what_if"] = w.to_json_dict()
        text += "\n" + w.to_text()
    print(json.dumps(doc, indent=1) if args.json else text)
    return EXIT_OK if r.feasible else EXIT_INFEASIBLE


#: The execution a training sweep keeps when none is given: bf16 with fp32 gradient
#: reduction, FlashAttention, gradient reduction overlapped, global batch 512.
DEFAULT_SWEEP_BASE = {
    "tensor_parallel": 1, "pipeline_parallel": 1, "interleave": 1, "data_parallel": 1,
    "expert_parallel": 1, "context_parallel": 1, "sequence_parallel": False, "zero_stage": 1,
    "micro_batch_size": 1, "global_batch_size": 512, "recompute": "selective",
    "attention": "flash", "compute_dtype": "bf16", "grad_reduce_dtype": "fp32",
    "overlap_grad_reduce": True, "overlap_tp_comm": False}


def _sweep(args: argparse.Namespace) -> int:
    from netio.model.schema import execution_from_dict, load_execution
    from netio.model.sweep import sweep_infer, sweep_train

    system, model = load_system(args.system), load_model(args.model)
    if args.mode == "train":
        base = (load_execution(args.execution) if args.execution
                else execution_from_dict(DEFAULT_SWEEP_BASE, "<default sweep execution>"))
        result = sweep_train(system, model, args.accelerators, base,
                             args.price_per_accelerator_hour)
    else:
        spec = (Speculation(acceptance_rate=args.acceptance, cost_ratio=args.draft_cost)
                if args.acceptance is not None else None)
        result = sweep_infer(system, model, args.accelerators,
                             Request(args.input_tokens, args.output_tokens),
                             Serving(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype),
                             spec, args.price_per_accelerator_hour)
    print(json.dumps(result.to_json_dict(), indent=1) if args.json else result.to_text())
    if args.plot:
        from netio.model.sweep_plot import plot_sweep

        try:
            plot_sweep(result, args.plot)
        except OSError as exc:
            print(f"netio-model: {args.plot}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK if result.feasible else EXIT_INFEASIBLE


def _train_conditions(args: argparse.Namespace) -> int:
    from netio.model.conditions import load_conditions, train_what_if
    from netio.model.schema import load_execution
    from netio.model.training import train

    system, model = load_system(args.system), load_model(args.model)
    execution = load_execution(args.execution)
    conditions = load_conditions(args.conditions)
    r = train(system, model, execution)
    w = train_what_if(system, model, execution, conditions)
    if args.json:
        print(json.dumps({**r.to_json_dict(), "what_if": w.to_json_dict()}, indent=1))
    else:
        print(r.to_text())
        print(w.to_text())
    if args.plot:
        from netio.model.plot import plot_breakdown

        try:
            plot_breakdown([r], args.plot)
        except OSError as exc:
            print(f"netio-model: {args.plot}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK if r.feasible else EXIT_INFEASIBLE


def _calibrate(args: argparse.Namespace) -> int:
    from netio.errors import FabricProfileError
    from netio.fabric_profile import load_fabric_profile
    from netio.model.calibrate import calibrate_link, calibrated_system, write_system

    try:
        profile = load_fabric_profile(args.profile)
    except FabricProfileError as exc:
        print(f"netio-model: {exc}", file=sys.stderr)
        return EXIT_INPUT
    base = load_system(args.system)
    try:
        link = calibrate_link(profile, args.profile)
    except ModelInputError as exc:
        print(f"netio-model: {args.profile}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    doc = calibrated_system(base, link, args.name)
    try:
        write_system(doc, args.output)
    except OSError as exc:
        print(f"netio-model: {args.output}: cannot write: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({**link.to_json_dict(), "system_file": str(args.output),
                          "system_name": doc["name"]}, indent=1))
    else:
        print(link.to_text())
        print(f"wrote {args.output} (system {doc['name']!r}: NICs at "
              f"{link.bandwidth_bits_per_s / 1e9:.2f} Gb/s, {link.alpha_s * 1e6:.2f} us)")
    return EXIT_OK


def _wafer(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from netio.model.schema import load_execution
    from netio.model.wafer import compare, infer_sram_resident, train_weight_streaming

    model, wafer = load_model(args.model), load_system(args.wafer)
    gpu, ex = load_system(args.gpu), load_execution(args.gpu_execution)
    if args.global_batch_size:
        ex = replace(ex, global_batch_size=args.global_batch_size)
    req = Request(args.input_tokens, args.output_tokens)
    tr = train_weight_streaming(wafer, model, args.systems, ex.global_batch_size,
                                ex.compute_dtype)
    inf = infer_sram_resident(wafer, model, req, args.batches)
    cmp_ = compare(model, gpu, ex, wafer, args.systems, req, max(args.batches),
                   args.gpu_price_per_hour, args.wafer_price_per_hour, args.gpu_serving_tp)
    if args.json:
        print(json.dumps({"train": tr.to_json_dict(), "infer": inf.to_json_dict(),
                          "comparison": cmp_.to_json_dict()}, indent=1))
        return EXIT_OK
    print(f"{model.name} on {args.systems} x {wafer.name}, weight streaming, global batch "
          f"{ex.global_batch_size}: step {tr.step_s:.4g} s, {tr.tokens_per_s:,.0f} tokens/s, "
          f"MFU {tr.mfu:.1%}")
    print(f"  {tr.sentence}")
    print(f"SRAM-resident inference on {inf.wafers} wafers ({inf.weights_bytes / 1e9:.1f} GB "
          f"of weights), {req.input_tokens} in / {req.output_tokens} out"
          f"{' (an upper bound; ' + inf.note + ')' if inf.note else ''}:")
    for row in inf.rows:
        print(f"  batch {row.batch:>5}: {row.tokens_per_s_per_user:>10,.0f} tokens/s per user, "
              f"{row.system_tokens_per_s:>12,.0f} tokens/s in all")
    print(cmp_.to_text())
    return EXIT_OK
