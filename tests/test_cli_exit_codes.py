"""One exit-code table for every command: the same number means the same thing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from netio.cli.exit_codes import EXIT_CODES_HELP, ExitCode

# The table as documented (README "Exit codes"), written out independently.
DOCUMENTED = {0: "done", 1: "found", 2: "usage", 3: "unreadable input", 4: "failed",
              130: "interrupted", 141: "broken pipe"}


def test_the_table_is_the_documented_one() -> None:
    assert sorted(int(c) for c in ExitCode) == sorted(DOCUMENTED)
    for c in ExitCode:
        assert f"  {int(c):3d}  " in EXIT_CODES_HELP


@pytest.mark.parametrize("argv", [
    ["netio", "--help"], ["netio", "decode", "--help"], ["netio", "scenario", "--help"],
    ["netio-analyze", "--help"]])
def test_every_help_prints_the_table(argv: list[str]) -> None:
    module = "netio.cli.analyze" if argv[0] == "netio-analyze" else "netio.cli.main"
    proc = subprocess.run([sys.executable, "-m", module, *argv[1:]], capture_output=True,
                          text=True, check=True)
    assert EXIT_CODES_HELP.splitlines()[1] in proc.stdout
    assert "141" in proc.stdout


def test_not_a_capture_is_3_for_decode_and_analyze(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture file at all")
    codes = [subprocess.run([sys.executable, "-m", m, *a, str(junk)], capture_output=True,
                            check=False).returncode
             for m, a in (("netio.cli.main", ["decode"]), ("netio.cli.analyze", []))]
    assert codes == [3, 3]


def test_usage_is_2_everywhere(tmp_path: Path) -> None:
    codes = [subprocess.run([sys.executable, "-m", m, *a], capture_output=True,
                            check=False).returncode
             for m, a in (("netio.cli.main", ["decode", "--bogus", "x"]),
                          ("netio.cli.main", ["scenario"]),
                          ("netio.cli.analyze", ["--bogus", "x"]),
                          ("netio.cli.main", ["bogus"]))]
    assert codes == [2, 2, 2, 2]


def test_scenario_bad_file_is_3_and_unwritable_output_is_4(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"ports": 7}')
    run = [sys.executable, "-m", "netio.cli.main", "scenario"]
    got = subprocess.run([*run, "--file", str(bad), str(tmp_path / "o")], capture_output=True,
                         text=True, check=False)
    assert got.returncode == 3 and got.stderr.count("\n") == 1
    blocker = tmp_path / "file"
    blocker.write_text("")
    got = subprocess.run([*run, "--preset", "small", str(blocker / "sub")], capture_output=True,
                         text=True, check=False)
    assert got.returncode == 4 and got.stderr.count("\n") == 1
