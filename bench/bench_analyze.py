"""Benchmark netio-analyze over a matrix of capture shapes, against tshark on the same files.

    .venv/bin/python bench/bench_analyze.py [--packets 1000000] [--repeat 1]
                                            [--shapes A,B,...] [--big] [--workdir DIR]

Each shape (``bench/capture_shapes.py``; RC SEND/ACK traffic and PFC
XOFF/XON pairs, written with numpy) is generated once, then analysed in this
run, each command a fresh process pinned to one CPU (``--no-pin`` to let
netio's worker pool use every CPU for the 64-capture shape):

- netio: ``netio-analyze --json FILES`` (end to end: interpreter start,
  imports, analysis, streamed JSON). The interpreter start with the
  analyzer's imports is measured on its own and shown separately.
- tshark io: ``tshark -r FILE -q -z io,stat,0`` (reads and dissects every
  frame, counts them: less work than netio does);
- tshark conv: ``tshark -r FILE -q -z conv,udp`` (per-conversation
  statistics: comparable to netio's per-flow counters);
- tshark expert: ``tshark -r FILE -q -z expert`` (expert analysis, tshark's
  closest to netio's PSN/retransmission checks).
For 64 captures tshark runs once per file and the times add up.

Printed per shape: packets/s, CPU seconds, peak RSS, and the ratio of each
tshark run's CPU time to netio's (CPU time, because other processes share
this machine: wall times are shown too). Bytes per flow: per shape, netio's
peak RSS above the interpreter start (with the analyzer's imports) divided by
the flow entries (one per QP); and the slope that the goal is stated in: the
growth of peak RSS from the 10,000-flow shape to the 100,000-flow shape (same
packet count) divided by the extra flow entries (and from the 24-flow shape).
``--big`` adds the 10,000,000-packet headers-only shapes (24 and 100,000 flows,
and 10,000 flows for the slope at that size).
The claims are the ratios measured here, not absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capture_shapes import Shape, write_shape

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
class Run:
    wall_s: float
    cpu_s: float
    max_rss_kib: int
    stdout: str


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


def _netio_argv() -> list[str]:
    exe = shutil.which("netio-analyze", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "netio.cli.analyze"]


def _shapes(n: int, big: bool) -> dict[str, tuple[Shape, int]]:
    """label -> (shape of each file, number of files)."""
    def pauses(k: int) -> int:  # control frames at most a fifth of the packets
        return min(k, n // 10)

    out = {
        "A few flows": (Shape(n, 24, 1, 1, 128), 1),
        "B many flows": (Shape(n, min(100_000, n // 5), 1, 1, 128), 1),
        "J 10k flows": (Shape(n, min(10_000, n // 50), 1, 1, 128), 1),
        "C toggling port": (Shape(n, 24, pauses(10_000), 1, 128), 1),
        "D many pauses": (Shape(n, 24, pauses(100_000), 256, 128), 1),
        "E whole frames": (Shape(n, 24, 1, 1, 65535), 1),
        "F 64 captures": (Shape(max(1000, n // 64), 24, 16, 4, 128), 64),
    }
    if big:
        out["G 10M few flows"] = (Shape(10 * n, 24, 1, 1, 128), 1)
        out["H 10M many flows"] = (Shape(10 * n, 100_000, 1, 1, 128), 1)
        out["I 10M many pauses"] = (Shape(10 * n, 24, 100_000, 256, 128), 1)
        out["K 10M 10k flows"] = (Shape(10 * n, 10_000, 1, 1, 128), 1)
    return out


def _write(label: str, shape: Shape, files: int, work: Path) -> list[Path]:
    d = work / label.split()[0]
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        p = d / f"c{i:02d}.pcap"
        write_shape(p, shape)
        paths.append(p)
    return paths


def _median(runs: Sequence[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def _tshark_total(launcher: Launcher, tshark: str, z: str, paths: list[Path], cpu: int | None,
                  repeat: int) -> Run:
    runs = []
    for _ in range(repeat):
        parts = [launcher.run([tshark, "-r", str(p), "-q", "-z", z], cpu) for p in paths]
        runs.append(Run(sum(r.wall_s for r in parts), sum(r.cpu_s for r in parts),
                        max(r.max_rss_kib for r in parts), parts[0].stdout))
    return min(runs, key=lambda r: r.cpu_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets per shape")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command (best kept)")
    ap.add_argument("--shapes", help="comma-separated shape letters (default: all)")
    ap.add_argument("--big", action="store_true", help="add the 10x-packet shapes")
    ap.add_argument("--no-tshark", action="store_true", help="netio only")
    ap.add_argument("--cpu", type=int, help="CPU to pin the runs to (default: the last allowed)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the runs to one CPU")
    ap.add_argument("--workdir", help="where to write the captures (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    args = ap.parse_args()
    launcher = Launcher()  # first, while this process is small
    cpu = None if args.no_pin else (args.cpu if args.cpu is not None
                                    else max(os.sched_getaffinity(0)))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="netio-bench-"))
    tshark = None if args.no_tshark else shutil.which("tshark")
    env = {"OPENBLAS_NUM_THREADS": "1"}
    try:
        base = min((launcher.run([sys.executable, "-c",
                                  "import netio.cli.analyze, netio.analyze.engine, "
                                  "netio.analyze.report"], cpu, env=env)
                    for _ in range(3)), key=lambda r: r.wall_s)
        print(f"interpreter start + analyzer imports: {base.wall_s:.2f} s wall, "
              f"{base.cpu_s:.2f} s CPU, {base.max_rss_kib / 1024:.0f} MiB "
              f"(included in every netio figure below); tshark "
              f"{'found' if tshark else 'not run'}; runs "
              f"{'pinned to CPU ' + str(cpu) if cpu is not None else 'not pinned'}")
        rss: dict[str, float] = {}
        entries: dict[str, int] = {}
        for label, (shape, files) in _shapes(args.packets, args.big).items():
            if args.shapes and label[0] not in args.shapes.split(","):
                continue
            t = time.perf_counter()
            paths = _write(label, shape, files, work)
            packets = shape.packets * files
            out = work / "out.json"
            netio = min((launcher.run([*_netio_argv(), "--json", *map(str, paths)], cpu, out,
                                      env=env) for _ in range(args.repeat)),
                        key=lambda r: r.cpu_s)
            doc = json.loads(out.read_text())
            got = sum(c["packets"] for c in doc["captures"])
            if got != packets:
                raise RuntimeError(f"{label}: netio-analyze counted {got} packets of {packets}")
            flows = len(doc["flows"])
            rss[label] = netio.max_rss_kib * 1024
            entries[label] = flows
            load = "/".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{label} [load {load}]: {files} x {shape.label} ({packets:,} packets, "
                  f"{sum(p.stat().st_size for p in paths) / 1e6:.0f} MB, generated in "
                  f"{time.perf_counter() - t:.1f} s), {flows:,} flow entries")
            print(f"  netio-analyze --json: {netio.wall_s:.2f} s wall, {netio.cpu_s:.2f} s CPU "
                  f"= {packets / netio.cpu_s / 1e6:.2f} M packets/s end to end "
                  f"({packets / max(1e-9, netio.cpu_s - base.cpu_s) / 1e6:.2f} M/s without "
                  f"the start-up), peak RSS {netio.max_rss_kib / 1024:.0f} MiB = "
                  f"{(netio.max_rss_kib - base.max_rss_kib) * 1024 / max(1, flows):.0f} "
                  f"bytes per flow above the start-up")
            if tshark:
                for name, z in (("io", "io,stat,0"), ("conv", "conv,udp"),
                                ("expert", "expert")):
                    r = _tshark_total(launcher, tshark, z, paths, cpu, args.repeat)
                    print(f"  tshark -z {z:9s} ({name}): {r.wall_s:.2f} s wall, {r.cpu_s:.2f} s "
                          f"CPU, peak RSS {r.max_rss_kib / 1024:.0f} MiB; netio is "
                          f"{r.cpu_s / netio.cpu_s:.1f}x faster (CPU)")
            sys.stdout.flush()
        for few, many in (("J 10k flows", "B many flows"), ("A few flows", "B many flows"),
                          ("K 10M 10k flows", "H 10M many flows"),
                          ("G 10M few flows", "H 10M many flows")):
            if few in rss and many in rss and entries[many] > entries[few]:
                per_flow = (rss[many] - rss[few]) / (entries[many] - entries[few])
                print(f"memory per flow: peak RSS grows {per_flow:.0f} bytes per flow entry "
                      f"from {entries[few]:,} to {entries[many]:,} entries ({few[0]} -> "
                      f"{many[0]}, same packet count)")
    finally:
        launcher.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
