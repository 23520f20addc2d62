"""The pipeline of ``netio.scenario``, one way: spec → packets and intent → captures and truth.

``generate`` writes ``<port>.pcap`` per port and, when asked, ``truth.json``:
what ``netio-analyze --json`` must report for the same files, computed from the
generator's intent (which packets it dropped, marked, paused) rather than by
parsing its output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netio.analyze.options import DEFAULT_OPTIONS, AnalysisOptions
from netio.scenario.captures import write_capture
from netio.scenario.packets import Rows, build_packets
from netio.scenario.spec import Scenario
from netio.scenario.truth import truth_document


@dataclass(frozen=True, slots=True)
class Generated:
    """What ``generate`` wrote."""

    captures: tuple[Path, ...]
    truth_path: Path | None
    packets: int



def build(scenario: Scenario, opts: AnalysisOptions = DEFAULT_OPTIONS
          ) -> tuple[dict[str, Rows], dict[str, Any]]:
    """Per-port packet tables and the ground-truth document (for analysis ``opts``)."""
    packets = build_packets(scenario, opts)
    return packets.tables, truth_document(scenario, packets, opts)


def generate(scenario: Scenario, outdir: str | Path, *, truth: bool = True,
             opts: AnalysisOptions = DEFAULT_OPTIONS) -> Generated:
    """Write one pcap per port (``<port>.pcap``) and ``truth.json`` into ``outdir``.

    The truth assumes ``netio-analyze`` runs with ``opts`` (thresholds) and with
    each port's link speed; it is computed only when ``truth`` is set.
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    packets = build_packets(scenario, opts)
    paths = []
    total = 0
    for port in scenario.ports:
        path = out / f"{port.name}.pcap"
        write_capture(path, scenario, packets.tables[port.name], snaplen=port.snaplen)
        paths.append(path)
        total += len(packets.tables[port.name])
    truth_path = None
    if truth:
        truth_path = out / "truth.json"
        doc = truth_document(scenario, packets, opts)
        truth_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return Generated(tuple(paths), truth_path, total)
