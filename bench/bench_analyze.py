"""Benchmark netio-analyze on generated mixed RoCE/PFC captures, against tshark.

    .venv/bin/python bench/bench_analyze.py [--packets 10000000] [--full-packets 1000000]
                                            [--repeat 3] [--workdir DIR] [--keep]

Generates with the scenario generator (``netio.analyze.presets.bench_dict``:
24 QPs, bulk and small RDMA WRITEs, SENDs and READs at 4 KiB and 1 KiB MTU,
ACKs, ECN/CNP, losses with go-back-N, RNR NAKs, PFC pauses and a PFC storm):

- A: ``--packets`` packets with a 128-byte snap length (headers only, as
  fabric captures usually are),
- A/10 and A/100: the same scenario ten and a hundred times smaller (for
  the memory claim),
- B: ``--full-packets`` packets captured whole (snap length 65535; every
  ICRC is then verified too).

Then, in the same run, each side ``--repeat`` times as a subprocess pinned to
one CPU: ``netio-analyze --json FILE`` (end to end: interpreter start, imports,
the whole analysis, JSON rendering and writing), and ``tshark -r FILE -q -z
io,stat,0`` on the same file. Prints medians (and every run), packets/s, the
ratio tshark/netio, each child's peak RSS (``ru_maxrss`` from ``wait4``), and
checks that both count the same packets. The claims are the ratios measured
here, not absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Runs one command per input line (JSON: argv, cpu, stdout path, env) and
#: answers with its wall time, CPU time, peak RSS and (captured) stdout.
LAUNCHER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    cpu = job["cpu"]
    out = open(job["stdout"], "wb") if job["stdout"] else subprocess.PIPE
    env = dict(os.environ, **job["env"])
    t = time.perf_counter()
    proc = subprocess.Popen(job["argv"], stdout=out, stderr=subprocess.DEVNULL, env=env,
                            preexec_fn=(lambda: os.sched_setaffinity(0, {cpu}))
                            if cpu is not None else None)
    text = proc.stdout.read() if out is subprocess.PIPE else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if out is not subprocess.PIPE:
        out.close()
    print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                      "max_rss_kib": usage.ru_maxrss, "exit": os.waitstatus_to_exitcode(status),
                      "stdout": text.decode(errors="replace")}), flush=True)
"""


@dataclass(frozen=True)
class Capture:
    label: str
    path: Path
    packets: int
    snaplen: int
    generate_s: float


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    max_rss_kib: int
    stdout: str


def _generate(n: int, snaplen: int, out: Path, label: str) -> Capture:
    from netio.analyze.presets import bench_dict
    from netio.analyze.scenario import generate, scenario_from_dict

    t = time.perf_counter()
    g = generate(scenario_from_dict(bench_dict(n, snaplen=snaplen)), out, truth=False)
    return Capture(label, g.captures[0], g.packets, snaplen, time.perf_counter() - t)


def _frame_sizes(path: Path) -> str:
    """Wire and captured frame sizes of a capture (from the native scan)."""
    import numpy as np

    from netio.pcap.scan import CaptureScanner, ScanColumns

    with CaptureScanner(str(path)) as sc:
        cols = ScanColumns.concatenate(list(sc.chunks()))
    orig = cols.orig_len.astype(np.int64)
    cap = cols.caplen.astype(np.int64)
    big = float(np.mean(orig >= 1024)) * 100
    return (f"frames on the wire min {orig.min()} / median {int(np.median(orig))} / mean "
            f"{orig.mean():.0f} / max {orig.max()} B ({big:.0f}% of them >= 1 KiB), "
            f"{cap.mean():.0f} B captured per frame on average")


class Launcher:
    """The small process that starts the measured commands (see the module docstring)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, argv: Sequence[str], cpu: int | None, stdout_path: Path | None = None,
            env: dict[str, str] | None = None) -> Run:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = {"argv": list(argv), "cpu": cpu, "stdout": str(stdout_path or ""),
               "env": env or {}}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        got = json.loads(self.proc.stdout.readline())
        if got["exit"] not in (0, 1):  # netio-analyze exits 1 when it finds a storm
            raise RuntimeError(f"{argv[0]} exited {got['exit']}")
        return Run(got["wall_s"], got["cpu_s"], got["max_rss_kib"], got["stdout"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def _per_flow_bound_kib() -> float:
    """The most analysis state one flow direction can hold (netio.analyze.flows' bounds):
    3 latency sketches (kept in C, copied once for the report), 2 lists of open
    gaps, 2 of waiting requests, counters."""
    from netio.analyze.flows import COUNTERS, MAX_MISSING, MAX_PENDING, OPCODE_SLOTS
    from netio.analyze.sketch import MAX_SKETCH_BYTES

    samples = 3 * MAX_SKETCH_BYTES * 2
    lists = 2 * MAX_MISSING * 16 + 2 * MAX_PENDING * 16
    counters = (len(COUNTERS) + OPCODE_SLOTS + 32) * 8 + 256
    return (samples + lists + counters) / 1024


def _netio_argv() -> list[str]:
    exe = shutil.which("netio-analyze", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "netio.cli.analyze"]


def _median(runs: Sequence[Run]) -> float:
    return statistics.median(r.wall_s for r in runs)


def _fmt_runs(runs: Sequence[Run]) -> str:
    return "[" + " ".join(f"{r.wall_s:.2f}" for r in runs) + "]"


def _tshark_frames(text: str) -> int | None:
    m = re.search(r"\|\s*[0-9.]+\s*<>\s*[0-9.]+\s*\|\s*(\d+)\s*\|", text)
    return int(m.group(1)) if m else None


def _measure(launcher: Launcher, cap: Capture, repeat: int, cpu: int | None, work: Path,
             tshark: str | None) -> tuple[list[Run], list[Run]]:
    out = work / f"{cap.label.replace('/', '_')}.json"
    netio = [launcher.run([*_netio_argv(), "--json", str(cap.path)], cpu, out)
             for _ in range(repeat)]
    doc = json.loads(out.read_text())
    packets = doc["captures"][0]["packets"]
    if packets != cap.packets:
        raise RuntimeError(f"netio-analyze counted {packets} packets, generated {cap.packets}")
    theirs: list[Run] = []
    if tshark:
        theirs = [launcher.run([tshark, "-r", str(cap.path), "-q", "-z", "io,stat,0"], cpu)
                  for _ in range(repeat)]
        frames = _tshark_frames(theirs[0].stdout)
        if frames != packets:
            raise RuntimeError(f"tshark counted {frames} frames, netio-analyze {packets}")
    return netio, theirs


def _report(cap: Capture, netio: list[Run], theirs: list[Run]) -> None:
    n = _median(netio)
    rate = "" if "/" in cap.label else f" = {cap.packets / n / 1e6:.2f} M packets/s"
    print(f"  {cap.label}: netio-analyze --json {n:.2f} s {_fmt_runs(netio)}{rate} "
          f"(CPU {statistics.median(r.cpu_s for r in netio):.2f} s, "
          f"peak RSS {max(r.max_rss_kib for r in netio) / 1024:.0f} MiB)")
    if theirs:
        t = _median(theirs)
        print(f"  {cap.label}: tshark -q -z io,stat,0 {t:.2f} s {_fmt_runs(theirs)} = "
              f"{cap.packets / t / 1e6:.2f} M packets/s; netio-analyze is {t / n:.1f}x faster "
              "(same packet count)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=10_000_000,
                    help="packets of capture A (128-byte snap length)")
    ap.add_argument("--full-packets", type=int, default=1_000_000,
                    help="packets of capture B (whole frames); 0 skips it")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (median shown)")
    ap.add_argument("--cpu", type=int, help="CPU to pin the runs to (default: the last allowed)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the runs to one CPU")
    ap.add_argument("--workdir", help="where to write the captures (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    args = ap.parse_args()
    launcher = Launcher()  # first, while this process is small
    cpu = None if args.no_pin else (args.cpu if args.cpu is not None
                                    else max(os.sched_getaffinity(0)))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="netio-bench-"))
    tshark = shutil.which("tshark")
    try:
        caps = [_generate(args.packets, 128, work / "a", "A"),
                _generate(max(1000, args.packets // 10), 128, work / "a10", "A/10"),
                _generate(max(1000, args.packets // 100), 128, work / "a100", "A/100")]
        if args.full_packets:
            caps.append(_generate(args.full_packets, 65535, work / "b", "B"))
        for c in caps:
            print(f"capture {c.label}: {c.packets} packets, {c.path.stat().st_size / 1e6:.0f} MB,"
                  f" snaplen {c.snaplen} B; {_frame_sizes(c.path)} "
                  f"(generated in {c.generate_s:.1f} s)")
        where = f"pinned to CPU {cpu}" if cpu is not None else "not pinned"
        print(f"runs: median of {args.repeat}, each a fresh process {where}; "
              f"tshark {'found' if tshark else 'NOT FOUND: no ratio'}")
        results = {}
        for c in caps:
            results[c.label] = _measure(launcher, c, args.repeat, cpu, work,
                                        tshark if "/" not in c.label else None)
            _report(c, *results[c.label])
        base = launcher.run([sys.executable, "-c",
                             "import netio.analyze.engine, netio.analyze.report"], cpu,
                            env={"OPENBLAS_NUM_THREADS": "1"})  # as netio-analyze runs
        rss = {c.label: max(r.max_rss_kib for r in results[c.label][0]) / 1024 for c in caps}
        pk = {c.label: c.packets for c in caps}
        base_mib = base.max_rss_kib / 1024
        print("memory (peak RSS of netio-analyze): " + ", ".join(
            f"{pk[k]} packets {rss[k]:.0f} MiB" for k in ("A/100", "A/10", "A"))
            + f"; x{rss['A'] / rss['A/10']:.2f} for x{pk['A'] / pk['A/10']:.1f} packets "
            f"(A/10 -> A). The imports alone take {base_mib:.0f} MiB; the rest is per-flow "
            "state, bounded per flow (latency samples, open gaps, waiting requests), so it "
            "stops growing once those bounds are reached: "
            + " -> ".join(f"{rss[k] - base_mib:.0f}" for k in ("A/100", "A/10", "A"))
            + f" MiB (bound: {_per_flow_bound_kib():.0f} KiB per flow direction, whatever "
            "the packet count)")
    finally:
        launcher.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
