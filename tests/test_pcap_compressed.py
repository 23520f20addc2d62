"""Compressed captures (gzip, xz, zstd) read directly, streamed, with the same results."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zstandard

from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.cli.analyze import main as analyze_main
from netio.pcap import open_capture
from netio.pcap.compressed import Compression, compression_of
from netio.pcap.scan import CaptureScanner, ScanColumns, WindowScanner
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict

COMPRESS = {
    "gz": lambda b: gzip.compress(b),
    "xz": lambda b: lzma.compress(b),
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("plain")
    return list(generate(scenario_from_dict(small_dict()), out, truth=False).captures)


def _compressed(plain: list[Path], out: Path, kind: str) -> list[Path]:
    paths = []
    for p in plain:
        q = out / f"{p.name}.{kind}"
        q.write_bytes(COMPRESS[kind](p.read_bytes()))
        paths.append(q)
    return paths


@pytest.mark.parametrize("kind", list(COMPRESS))
def test_analysis_is_identical(plain: list[Path], tmp_path: Path, kind: str) -> None:
    comp = _compressed(plain, tmp_path, kind)
    def without_paths(doc: dict[str, Any]) -> str:
        for c in doc["captures"]:
            c.pop("path")
        return json.dumps(doc, sort_keys=True)

    for native_path in (True, False) if kind == "gz" else (True,):  # reference: slow
        want = analyze([str(p) for p in plain], AnalysisOptions(), use_native=native_path)
        got = analyze([str(p) for p in comp], AnalysisOptions(), use_native=native_path)
        assert without_paths(got) == without_paths(want)
    assert [c["name"] for c in got["captures"]] == [p.stem for p in plain]  # suffix dropped


@pytest.mark.parametrize("kind", list(COMPRESS))
def test_readers_agree(plain: list[Path], tmp_path: Path, kind: str) -> None:
    (comp,) = _compressed(plain[:1], tmp_path, kind)
    assert compression_of(comp) is {"gz": Compression.GZIP, "xz": Compression.XZ,
                                    "zst": Compression.ZSTD}[kind]
    with open_capture(plain[0]) as r:
        want = [(x.ts_ns, bytes(x.frame)) for x in r]
    with open_capture(comp) as r:
        assert [(x.ts_ns, bytes(x.frame)) for x in r] == want
    with CaptureScanner(comp) as sc:
        assert sum(len(c) for c in sc.chunks()) == len(want)
    ws = WindowScanner(comp, window_bytes=4096)  # many refills of the decompressed stream
    out = ScanColumns.empty(100)
    n = 0
    while (k := ws.next_batch(out)) > 0:
        n += k
    ws.close()
    assert n == len(want) and not ws.warnings


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
@pytest.mark.tools
def test_same_frame_count_as_tshark(plain: list[Path], tmp_path: Path) -> None:
    (comp,) = _compressed(plain[:1], tmp_path, "gz")
    out = subprocess.run(["tshark", "-r", str(comp), "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, check=True).stdout.split()
    doc = analyze([str(comp)], AnalysisOptions())
    assert doc["captures"][0]["packets"] == len(out)


def test_cut_compressed_stream_is_damage_not_a_crash(plain: list[Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(plain[0].read_bytes())
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(data[:len(data) // 2])
    code = analyze_main(["--json", str(cut)])
    out, err = capsys.readouterr()
    cap = json.loads(out)["captures"][0]
    assert code in (0, 1) and cap["packets"] > 0 and not cap["complete"]
    assert "decompression failed" in err or "truncated" in err
    with pytest.warns(Warning), open_capture(cut) as r:
        assert sum(1 for _ in r) == cap["packets"]


def test_directory_finds_compressed_captures(plain: list[Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _compressed(plain, tmp_path, "xz")
    analyze_main(["--json", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert sorted(c["name"] for c in doc["captures"]) == sorted(p.stem for p in plain)
