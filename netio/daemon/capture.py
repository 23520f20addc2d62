"""Triggered capture: when a storm or alarm fires, record PFC and RoCE traffic
on the affected interface, then analyse it.

Bounds: one capture per interface at a time, a cooldown per interface, a time
cap (``duration_s``, then SIGINT so tcpdump flushes), a rotating ring of
``ring_files`` files of ``file_bytes`` each (tcpdump ``-C``/``-W``), and
``max_total_bytes`` for the whole directory (oldest captures go first).

Each ring file is analysed by the ``netio.analyze`` library in a child process
of this interpreter (:mod:`netio.daemon.capture_analysis`, so a crash in the
analyser cannot take the daemon down); its JSON report (the document of
``netio-analyze --json``) is kept next to the capture as ``FILE.report.json``.  When the
analyser is missing or fails, the record says why.  Records are logged as one
line each and served at ``/api/captures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from netio.daemon import eventlog
from netio.daemon.capture_analysis import LIBRARY
from netio.daemon.config import CaptureSection
from netio.telemetry import metrics as m
from netio.telemetry.sample import Sample

MAX_RECORDS = 200
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")



@dataclass(frozen=True, slots=True)
class AnalysisResult:
    file: str
    report_path: str | None
    summary: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class CaptureRecord:
    id: str
    interface: str
    reason: str
    started_unix_s: float
    finished_unix_s: float | None
    status: str  # running | done | failed | skipped
    files: tuple[str, ...]
    total_bytes: int
    error: str | None
    analyses: tuple[AnalysisResult, ...]
    summary: str | None


def _summary(doc: Any) -> str:
    """One line from a netio-analyze JSON report: its own ``summary`` if it has one,
    else the size of each result list (storms=1, flows=33, ...) and the first finding."""
    if not isinstance(doc, dict):
        return f"{type(doc).__name__} report"
    own = doc.get("summary")
    if isinstance(own, str) and own:
        return own.splitlines()[0][:300]
    skip = {"captures", "warnings", "assumptions"}
    parts = [f"{k}={len(v)}" for k, v in doc.items() if isinstance(v, list) and k not in skip]
    line = ", ".join(parts)
    findings = doc.get("findings")
    if isinstance(findings, list) and findings:
        first = findings[0]
        if isinstance(first, dict):
            first = next((first[k] for k in ("summary", "message", "text", "title", "kind")
                          if isinstance(first.get(k), str)), None)
        if isinstance(first, str):
            line += f"; first finding: {first}"
    return (line or f"keys: {', '.join(sorted(doc))}")[:300]


def analyzer_available() -> str | None:
    """None when the analysis library is importable, else the reason it is not."""
    try:
        spec = importlib.util.find_spec(LIBRARY)
    except (ImportError, ValueError) as e:
        return f"{LIBRARY} cannot be found: {e}"
    return None if spec is not None else f"{LIBRARY} is not installed"


class CaptureManager:
    def __init__(self, config: CaptureSection) -> None:
        self.config = config
        self.records: list[CaptureRecord] = []
        self.outcomes: dict[str, int] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._last_start: dict[str, float] = {}
        self._procs: set[asyncio.subprocess.Process] = set()

    # ---- public -----------------------------------------------------------------------
    def trigger(self, interface: str, reason: str) -> bool:
        """Start a capture if enabled, not running on this interface and not cooling down."""
        if not self.config.enabled:
            return False
        now = time.monotonic()
        if interface in self._running:
            return False
        last = self._last_start.get(interface)
        if last is not None and now - last < self.config.cooldown_s:
            self._count("cooldown")
            eventlog.emit("capture_skipped", interface=interface, reason=reason,
                          why="cooldown")
            return False
        self._last_start[interface] = now
        task = asyncio.get_running_loop().create_task(self._capture(interface, reason))
        self._running[interface] = task
        task.add_done_callback(lambda _t: self._running.pop(interface, None))
        return True

    def in_progress(self) -> list[str]:
        return sorted(self._running)

    def records_json(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.records]

    async def wait_idle(self) -> None:
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def close(self) -> None:
        for p in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGINT)
        for t in list(self._running.values()):
            t.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        for p in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(Exception):
                await p.wait()

    def samples(self) -> list[Sample]:
        out = [Sample(m.CAPTURES, (k,), float(v)) for k, v in sorted(self.outcomes.items())]
        if self.config.enabled:
            out.append(Sample(m.CAPTURE_BYTES, (), float(self._dir_bytes())))
        return out

    # ---- internals --------------------------------------------------------------------
    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def _dir_bytes(self) -> int:
        total = 0
        with contextlib.suppress(OSError):
            for e in os.scandir(self.config.directory):
                with contextlib.suppress(OSError):
                    total += e.stat().st_size
        return total

    def _prune(self, reserve: int) -> None:
        """Delete the oldest capture groups until the directory leaves room for ``reserve``."""
        d = self.config.directory
        groups: dict[str, list[str]] = {}
        for path in glob.glob(os.path.join(d, "netio-*")):
            base = os.path.basename(path)
            gid = base.split(".pcap", 1)[0].split(".json", 1)[0]
            groups.setdefault(gid, []).append(path)
        total = self._dir_bytes()
        for gid in sorted(groups):  # names start with a UTC timestamp: oldest first
            if total + reserve <= self.config.max_total_bytes:
                break
            for path in groups[gid]:
                with contextlib.suppress(OSError):
                    total -= os.path.getsize(path)
                    os.unlink(path)
            eventlog.emit("capture_pruned", id=gid)

    def _record(self, rec: CaptureRecord) -> None:
        for i, r in enumerate(self.records):
            if r.id == rec.id:
                self.records[i] = rec
                break
        else:
            self.records.append(rec)
            del self.records[:-MAX_RECORDS]
        if rec.status != "running":
            with contextlib.suppress(OSError):
                path = os.path.join(self.config.directory, rec.id + ".json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(asdict(rec), f, indent=1)

    async def _capture(self, interface: str, reason: str) -> None:
        cfg = self.config
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        cid = f"netio-{stamp}-{int(time.time_ns() % 1_000_000_000):09d}-{_SAFE.sub('_', interface)}"
        base = os.path.join(cfg.directory, cid + ".pcap")
        rec = CaptureRecord(cid, interface, reason, time.time(), None, "running", (), 0, None,
                            (), None)
        self._record(rec)
        eventlog.emit("capture_started", id=cid, interface=interface, reason=reason, path=base)
        try:
            os.makedirs(cfg.directory, exist_ok=True)
            self._prune(cfg.file_bytes * cfg.ring_files)
            tcpdump = shutil.which(cfg.tcpdump_path)
            if tcpdump is None:
                raise FileNotFoundError(f"{cfg.tcpdump_path} not found")
            argv = [tcpdump, "-i", interface, "-n", "-U", "-s", str(cfg.snaplen_bytes),
                    "-w", base, "-C", str(max(1, cfg.file_bytes // 1_000_000)),
                    "-W", str(cfg.ring_files)]
            if os.geteuid() == 0:
                argv += ["-Z", "root"]  # keep write access to our own directory
            argv.append(cfg.bpf_filter)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            self._procs.add(proc)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), cfg.duration_s)
                if proc.returncode is None:
                    proc.send_signal(signal.SIGINT)
                    try:
                        await asyncio.wait_for(proc.wait(), 5.0)
                    except TimeoutError:
                        proc.kill()
                        await proc.wait()
                err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
            finally:
                self._procs.discard(proc)
            files = tuple(sorted(glob.glob(glob.escape(base) + "*"),
                                 key=lambda p: os.path.getmtime(p)))
            files = tuple(f for f in files if not f.endswith(".json"))
            if not files:
                last = err.strip().splitlines()[-1] if err.strip() else f"rc {proc.returncode}"
                raise RuntimeError(f"tcpdump wrote nothing: {last}")
            size = sum(os.path.getsize(f) for f in files)
            rec = replace(rec, files=files, total_bytes=size)
            analyses: list[AnalysisResult] = []
            if cfg.analyze:
                for f in files:
                    analyses.append(await self._analyze(f))
            summary_parts = [a.summary for a in analyses if a.summary]
            summary = summary_parts[-1] if summary_parts else (
                f"analysis failed: {analyses[-1].error}" if analyses else None)
            rec = replace(rec, finished_unix_s=time.time(), status="done",
                          analyses=tuple(analyses), summary=summary)
            self._count("done")
        except asyncio.CancelledError:
            rec = replace(rec, finished_unix_s=time.time(), status="failed",
                          error="cancelled at shutdown")
            self._record(rec)
            self._count("failed")
            raise
        except (OSError, RuntimeError) as e:
            rec = replace(rec, finished_unix_s=time.time(), status="failed", error=str(e))
            self._count("failed")
        self._record(rec)
        eventlog.emit("capture_finished", level=logging.WARNING if rec.error else logging.INFO,
                      id=cid, interface=interface, status=rec.status,
                      path=rec.files[-1] if rec.files else base, bytes=rec.total_bytes,
                      summary=rec.summary, error=rec.error)

    async def _analyze(self, path: str) -> AnalysisResult:
        why = analyzer_available()
        if why is not None:
            return AnalysisResult(path, None, None, why)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netio.daemon.capture_analysis", path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self._procs.add(proc)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.config.analyzer_timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            limit = self.config.analyzer_timeout_s
            return AnalysisResult(path, None, None, f"analysis timed out after {limit:g} s")
        finally:
            self._procs.discard(proc)
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()
            return AnalysisResult(path, None, None, f"analysis exit {proc.returncode}: "
                                  f"{tail[-1] if tail else 'no message'}")
        try:
            doc = json.loads(out)
        except ValueError as e:
            return AnalysisResult(path, None, None, f"analysis printed no JSON: {e}")
        report = path + ".report.json"
        with open(report, "wb") as f:
            f.write(out)
        return AnalysisResult(path, report, _summary(doc), None)
