"""The shared argument types: each bound is enforced, the error is one line that names
the text given and the bound, and argparse turns it into the usage exit code (2)."""

from __future__ import annotations

import argparse
import math

import pytest

from netio.cli.arg_types import real_number, whole_number, whole_numbers


def _parser(kind: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=True)
    parser.add_argument("--x", type=kind)  # type: ignore[call-overload]
    return parser


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("64", True), ("0", False), ("-3", False),
                                          ("1.5", False), ("x", False), ("", False)])
def test_whole_number_minimum(text: str, ok: bool) -> None:
    parse = whole_number(1)
    if ok:
        assert parse(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_whole_number_maximum_and_unit_in_message() -> None:
    parse = whole_number(0, 10_000_000, unit="µs")
    assert parse("10000000") == 10_000_000
    too_big = r"^10000001 µs: must be in \[0, 10000000\]$"
    with pytest.raises(argparse.ArgumentTypeError, match=too_big):
        parse("10000001")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'ten' is not a whole number of µs$"):
        parse("ten")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-0.1", "1", "1.0"])
def test_real_number_half_open_fraction_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be a finite number in \[0, 1\)"):
        real_number(0.0, 1.0, maximum_open=True)(text)


def test_real_number_bounds_inclusive_and_open() -> None:
    assert real_number(0.0, 1.0)("1") == 1.0
    assert real_number(0.0, 1.0)("0") == 0.0
    positive = real_number(0.0, minimum_open=True, unit="s")
    assert math.isclose(positive("0.25"), 0.25)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^0 s: must be a finite number > 0$"):
        positive("0")


def test_whole_numbers_list() -> None:
    parse = whole_numbers(1)
    assert parse("1,8,64") == [1, 8, 64]
    assert parse("8, 16,") == [8, 16]
    for bad in ("", ",", "1,0", "a,b", "1;2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_argparse_reports_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser(whole_number(1, unit="frames")).parse_args(["--x", "0"])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "t: error: argument --x: 0 frames: must be >= 1"
