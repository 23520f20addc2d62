"""Benchmark netio-analyze on a generated mixed RoCE/PFC capture, against tshark.

    .venv/bin/python bench/bench_analyze.py [--packets 10000000] [--workdir DIR]

Generates (with the scenario generator, vectorised) a capture of about
``--packets`` packets and one ten times smaller, then, each in a fresh
subprocess: full analysis with JSON rendering (packets/s, peak RSS), and
``tshark -r FILE -q -z io,stat,0`` on the same file in the same run. Prints
the figures and the ratios; the claims are ratios measured here, not absolute
numbers. Peak RSS is the child's VmHWM (ru_maxrss would include the parent's
peak inherited across exec). The capture is read through mmap, so its pages
are file-backed page cache, counted in RSS only while mapped chunks are hot.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.analyze.report import to_json
def anon_kib():
    return int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("RssAnon:")))
peak_anon = [anon_kib()]
def progress(done, total):
    peak_anon[0] = max(peak_anon[0], anon_kib())
t = time.perf_counter()
doc = analyze([sys.argv[1]], AnalysisOptions(), progress=progress)
text = to_json(doc)
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "packets": doc["captures"][0]["packets"],
                  "json_bytes": len(text), "flows": len(doc["flows"]),
                  "storms": len(doc["storms"]), "peak_anon_kib": max(peak_anon[0], anon_kib()),
                  "peak_rss_kib": int(next(l.split()[1] for l in open("/proc/self/status")
                                           if l.startswith("VmHWM:")))}))
"""

BASELINE = r"""
import json
import numpy, netio.analyze.engine, netio.analyze.report
print(json.dumps({"peak_rss_kib": int(next(l.split()[1] for l in open("/proc/self/status")
                                          if l.startswith("VmHWM:")))}))
"""


def _generate(n: int, out: Path) -> tuple[Path, float]:
    from netio.analyze.presets import bench_dict
    from netio.analyze.scenario import generate, scenario_from_dict

    t = time.perf_counter()
    g = generate(scenario_from_dict(bench_dict(n)), out, truth=False)
    return g.captures[0], time.perf_counter() - t


def _child(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument("--workdir", help="where to write the captures (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="netio-bench-"))
    try:
        big, gen_big_s = _generate(args.packets, work / "big")
        small, gen_small_s = _generate(max(1000, args.packets // 10), work / "small")
        print(f"generated {big} ({big.stat().st_size / 1e6:.0f} MB) in {gen_big_s:.1f} s, "
              f"{small} in {gen_small_s:.1f} s")
        base = _child(BASELINE)
        r_small = _child(CHILD, str(small))
        r_big = _child(CHILD, str(big))
        rate = r_big["packets"] / r_big["wall_s"]
        print(f"netio-analyze --json: {int(r_big['packets'])} packets in {r_big['wall_s']:.2f} s "
              f"= {rate / 1e6:.2f} M packets/s (one core)")
        tshark = shutil.which("tshark")
        if tshark:
            t = time.perf_counter()
            subprocess.run([tshark, "-r", str(big), "-q", "-z", "io,stat,0"],
                           capture_output=True, check=True)
            ts = time.perf_counter() - t
            print(f"tshark -q -z io,stat,0: {ts:.2f} s = {r_big['packets'] / ts / 1e6:.2f} M "
                  f"packets/s; netio-analyze is {ts / r_big['wall_s']:.1f}x faster")
        else:
            print("tshark not found: ratio not measured")
        extra_small = r_small["peak_rss_kib"] - base["peak_rss_kib"]
        extra_big = r_big["peak_rss_kib"] - base["peak_rss_kib"]
        print(f"peak anonymous RSS (sampled per chunk): {int(r_small['packets'])} packets "
              f"{r_small['peak_anon_kib'] / 1024:.0f} MiB; {int(r_big['packets'])} packets "
              f"{r_big['peak_anon_kib'] / 1024:.0f} MiB "
              f"(x{r_big['peak_anon_kib'] / r_small['peak_anon_kib']:.2f} for "
              f"x{r_big['packets'] / r_small['packets']:.1f} packets)")
        print(f"peak RSS (VmHWM): imports alone {base['peak_rss_kib'] / 1024:.0f} MiB; "
              f"{int(r_small['packets'])} packets {r_small['peak_rss_kib'] / 1024:.0f} MiB; "
              f"{int(r_big['packets'])} packets {r_big['peak_rss_kib'] / 1024:.0f} MiB "
              f"(above imports: {extra_small / 1024:.0f} -> {extra_big / 1024:.0f} MiB, "
              f"x{extra_big / max(1, extra_small):.2f} for x"
              f"{r_big['packets'] / r_small['packets']:.1f} packets)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
