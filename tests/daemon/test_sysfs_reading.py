"""Reading counters fast: kept descriptors, the C batch reader against its Python
reference, RDMA read plans against file-by-file reading, and PlannedSamples."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from daemon_helpers import Mlx5Host
from hypothesis import given, settings
from hypothesis import strategies as st

from netio import native
from netio.telemetry import metrics as m
from netio.telemetry import rdma, sysfs
from netio.telemetry.netdev import NetdevCollector, SysfsLinkSource
from netio.telemetry.rdma import RdmaSysfsCollector
from netio.telemetry.sample import (
    Collection,
    PlannedSamples,
    Sample,
    SeriesPlan,
    select,
    select_keyed,
)
from netio.telemetry.selection import Selection
from netio.telemetry.sysfs import COUNTER_BYTES, AttrReader, CounterReader, read_counters_py

# ---- CounterReader: C against the Python reference -----------------------------------------

_CONTENTS = st.one_of(
    st.integers(0, 2**64 - 1).map(lambda v: f"{v}\n".encode()),
    st.integers(2**64, 2**70).map(lambda v: f"{v}\n".encode()),
    st.sampled_from([b"", b"\n", b"N/A (no PMA)\n", b"-5\n", b"+5\n", b"1_000\n", b" 7 \n",
                     b"\t42", b"12abc\n", b"0x10\n", b"\xff\xfe\n", b"9" * 40 + b"\n",
                     b"1" * (COUNTER_BYTES - 1), b"1" * COUNTER_BYTES]),
    st.binary(max_size=40),
)


@pytest.mark.skipif(not native.AVAILABLE, reason="netio's native module is not built")
@settings(max_examples=60, deadline=None)
@given(st.lists(_CONTENTS, min_size=1, max_size=12))
def test_native_counter_reader_agrees_with_the_reference(tmp_path_factory: pytest.TempPathFactory,
                                                         contents: list[bytes]) -> None:
    d = tmp_path_factory.mktemp("c")
    fds = []
    for i, data in enumerate(contents):
        (d / str(i)).write_bytes(data)
        fds.append(os.open(d / str(i), os.O_RDONLY))
    try:
        c_values, c_status = CounterReader(fds, use_native=True).read()
        p_values, p_status = read_counters_py(fds)
        c_status = c_status or [0] * len(fds)
        p_status = p_status or [0] * len(fds)
        for data, cv, cs, pv, ps in zip(contents, c_values, c_status, p_values, p_status,
                                        strict=True):
            if cs == 0:  # C took it as a plain number: so does Python, the same one
                assert ps == 0 and cv == pv == int(data)
            else:  # C leaves it to the caller; Python's int() may read it (a sign, _)
                assert cs == -1 and (ps == -1 or pv == int(data))
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("use_native", [
    False, pytest.param(True, marks=pytest.mark.skipif(not native.AVAILABLE,
                                                       reason="native module not built"))])
def test_counter_reader_reports_a_failed_read_by_errno(tmp_path: Path, use_native: bool) -> None:
    (tmp_path / "ok").write_text("12\n")
    (tmp_path / "dir").mkdir()
    fds = [os.open(tmp_path / "ok", os.O_RDONLY), os.open(tmp_path / "dir", os.O_RDONLY)]
    try:
        values, status = CounterReader(fds, use_native=use_native).read()
        assert values[0] == 12 and status == [0, errno.EISDIR]
    finally:
        for fd in fds:
            os.close(fd)


# ---- RDMA: the read plan (kept descriptors, batch reads) against file by file ----------------

def _odd_host(root: Path) -> Mlx5Host:
    h = Mlx5Host(root, devices=2)
    h.hw["mlx5_0"].update(np_cnp_sent=7, rp_cnp_handled=2**63 + 5, out_of_sequence=3)
    h.pma["mlx5_0"].update(port_xmit_data=1000)
    h.hw["mlx5_0"]["vendor_x"] = 1
    h.write()
    hw = h.sys / "class/infiniband/mlx5_0/ports/1/hw_counters"
    cnt = h.sys / "class/infiniband/mlx5_0/ports/1/counters"
    (hw / "link_downed").write_text("3\n")          # also in counters/ (the PMA wins) ...
    (h.sys / "class/infiniband/mlx5_1/ports/1/hw_counters/link_downed").write_text("4\n")
    (h.sys / "class/infiniband/mlx5_1/ports/1/counters/link_downed").write_text("N/A\n")
    (cnt / "symbol_error").write_text("N/A (no PMA)\n")
    (hw / "out_of_buffer").write_text("-5\n")
    (hw / "duplicate_request").write_text(" 8 \n")
    (hw / "rnr_nak_retry_err").write_text("lots\n")
    (hw / "packet_seq_err").write_text("9" * 300 + "\n")
    (hw / "req_cqe_error").write_text("")
    (hw / "implied_nak_seq_err").unlink()
    (hw / "implied_nak_seq_err").mkdir()               # unreadable (EISDIR)
    (h.sys / "class/infiniband/mlx5_1/ports/1/rate").write_text("garbage\n")
    return h


def _result(col: Collection) -> tuple[list[tuple[str, tuple[str, ...], float, int]],
                                       list[tuple[str, str]]]:
    return ([(s.spec.name, s.labels, s.value, s.width_bits) for s in col.samples],
            sorted((f.kind, f.source) for f in col.faults))


@pytest.mark.parametrize("use_native", [
    False, pytest.param(True, marks=pytest.mark.skipif(not native.AVAILABLE,
                                                       reason="native module not built"))])
def test_read_plan_gives_what_file_by_file_reading_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_native: bool) -> None:
    monkeypatch.setattr(native, "AVAILABLE", use_native)
    h = _odd_host(tmp_path / "h")
    kept = RdmaSysfsCollector(str(h.sys), passthrough_unknown=True, keep_open=True)
    plain = RdmaSysfsCollector(str(h.sys), passthrough_unknown=True, keep_open=False)
    for _poll in range(2):  # the second poll from the kept descriptors and plans
        got, want = _result(kept.collect()), _result(plain.collect())
        assert got == want
    samples, faults = got
    v = {(n, lv): val for n, lv, val, _w in samples}
    d0, d1 = ("mlx5_0", "1"), ("mlx5_1", "1")
    assert v[(m.RDMA_LINK_DOWNED.name, d0)] == 0          # PMA's, not hw_counters' 3
    assert v[(m.RDMA_LINK_DOWNED.name, d1)] == 4          # PMA says N/A: hw_counters'
    assert v[(m.RDMA_CNP.name, (*d0, "handled"))] == float(2**63 + 5)
    assert v[(m.RDMA_BYTES.name, (*d0, "tx"))] == 4000
    assert v[(m.RDMA_TRANSPORT.name, (*d0, "out_of_buffer"))] == -5
    assert v[(m.RDMA_TRANSPORT.name, (*d0, "duplicate_request"))] == 8
    assert v[(m.RDMA_OTHER.name, (*d0, "vendor_x"))] == 1
    assert (m.RDMA_PORT_ERRORS.name, (*d0, "symbol")) not in v  # N/A: skipped, no fault
    assert (m.RDMA_PORT_RATE.name, d1) not in v
    assert faults == [("parse", "mlx5_0/1/hw_counters/packet_seq_err"),
                      ("parse", "mlx5_0/1/hw_counters/req_cqe_error"),
                      ("parse", "mlx5_0/1/hw_counters/rnr_nak_retry_err"),
                      ("unreadable", "mlx5_0/1/hw_counters/implied_nak_seq_err")]
    kept.close()
    assert kept.reader._fds == {}


def test_new_counter_files_are_found_at_the_next_rescan(
        mlx5_host: Mlx5Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rdma, "RESCAN_POLLS", 3)
    c = RdmaSysfsCollector(str(mlx5_host.sys), passthrough_unknown=True, keep_open=True)
    first = c.collect().samples
    assert isinstance(first, PlannedSamples)
    plan = first.parts[0][0]
    hw = mlx5_host.sys / "class/infiniband/mlx5_0/ports/1/hw_counters"
    (hw / "brand_new").write_text("5\n")
    polls = [c.collect() for _ in range(3)]
    key = (m.RDMA_OTHER.name, ("mlx5_0", "1", "brand_new"))
    assert [key in {s.key for s in col.samples} for col in polls] == [False, False, True]
    assert polls[1].samples.parts[0][0] is plan  # type: ignore[attr-defined]
    # an unchanged directory keeps its plan (and what it memoised)
    for _ in range(3):
        c.collect()
    assert c.collect().samples.parts[0][0] is polls[2].samples.parts[0][0]  # type: ignore[attr-defined]
    c.close()


def test_descriptors_past_the_budget_are_read_without_keeping(
        mlx5_host: Mlx5Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysfs, "keep_budget", lambda: sysfs._kept_total + 20)
    c = RdmaSysfsCollector(str(mlx5_host.sys), keep_open=True)
    want = _result(RdmaSysfsCollector(str(mlx5_host.sys), keep_open=False).collect())
    for _poll in range(2):
        assert _result(c.collect()) == want and want[1] == []
    assert len(c.reader._fds) == 20
    c.close()


def test_out_of_descriptors_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").write_text("1\n")
    r = AttrReader(keep_open=True)

    def no_fds(*_a: object) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", no_fds)
    assert r.descriptors([str(tmp_path / "a")]) is None
    assert r._fds == {}


def test_attr_reader_keeps_a_descriptor_the_driver_refused(tmp_path: Path) -> None:
    (tmp_path / "speed").mkdir()  # read() fails (EISDIR) as sysfs speed does (EINVAL)
    r = AttrReader(keep_open=True)
    before = r.generation
    assert r.read(str(tmp_path / "speed")).kind == "unreadable"  # type: ignore[union-attr]
    assert r.generation == before and len(r._fds) == 1
    r.close()
    assert r._fds == {} and r.generation == before + 1


def test_a_dropped_reader_gives_its_descriptors_back(mlx5_host: Mlx5Host) -> None:
    before = sysfs._kept_total
    c = RdmaSysfsCollector(str(mlx5_host.sys), keep_open=True)
    c.collect()
    assert sysfs._kept_total > before
    del c
    assert sysfs._kept_total == before


# ---- netdev from sysfs with kept descriptors -------------------------------------------------

def test_netdev_kept_descriptors_match_and_follow_in_place_updates(mlx5_host: Mlx5Host) -> None:
    h = mlx5_host
    (h.sys / "class/net/ens0f0np0/speed").unlink()
    (h.sys / "class/net/ens0f0np0/speed").mkdir()  # refused: no speed, not a fault
    kept = NetdevCollector(SysfsLinkSource(str(h.sys), keep_open=True))
    plain = NetdevCollector(SysfsLinkSource(str(h.sys), keep_open=False))
    a, b = kept.collect(), plain.collect()
    assert _result(a) == _result(b) and a.faults == ()
    assert (m.NET_SPEED.name, ("ens0f0np0",)) not in {s.key for s in a.samples}
    with open(h.sys / "class/net/ens0f0np0/statistics/rx_bytes", "r+") as f:
        f.write("777\n")
    assert {s.key: s.value for s in kept.collect().samples}[
        (m.NET_BYTES.name, ("ens0f0np0", "rx"))] == 777
    kept.close()
    assert kept.source.reader._fds == {}  # type: ignore[attr-defined]


# ---- PlannedSamples ---------------------------------------------------------------------------

def test_planned_samples_behave_as_the_tuple_they_stand_for() -> None:
    specs = (m.RDMA_PORT_STATE, m.RDMA_BYTES, m.RDMA_BYTES, m.RDMA_CNP)
    labels = (("d", "1"), ("d", "1", "tx"), ("d", "1", "rx"), ("d", "1", "sent"))
    plan = SeriesPlan(specs, labels, (1.0, 4.0, 4.0, 1.0), (64, 64, 64, 32))
    ps = PlannedSamples([(plan, [4.0, 10, None, 3]), (plan, [None, None, None, 7])])
    want = (Sample(specs[0], labels[0], 4.0), Sample(specs[1], labels[1], 40.0),
            Sample(specs[3], labels[3], 3.0, 32), Sample(specs[3], labels[3], 7.0, 32))
    assert tuple(ps) == want and ps == want and len(ps) == 4 and ps[1] == want[1]
    assert ps[-1] == want[-1] and list(ps) == list(want)
    names = frozenset({m.RDMA_CNP.name, m.RDMA_BYTES.name})
    assert list(select(ps, names)) == [want[1], want[2], want[3]]
    assert list(select(want, names)) == [want[1], want[2], want[3]]
    keyed = [(w.key, w.value, w.width_bits) for w in want[1:]]
    assert list(select_keyed(ps, names)) == keyed == list(select_keyed(want, names))
    assert PlannedSamples([]) == ()
    with pytest.raises(ValueError, match="does not match"):
        PlannedSamples([(plan, [1, 2])])
    with pytest.raises(ValueError, match="differ in length"):
        SeriesPlan(specs, labels[:2], (1.0,) * 4, (64,) * 4)


def test_netdev_sysfs_reads_only_selected_interfaces_and_honours_carrier(
        mlx5_host: Mlx5Host) -> None:
    h = Mlx5Host(mlx5_host.root / "two", devices=2)
    (h.sys / "class/net/ens1f0np0/operstate").write_text("unknown\n")
    (h.sys / "class/net/ens1f0np0/carrier").write_text("0\n")  # as IFLA_CARRIER 0: down
    src = SysfsLinkSource(str(h.sys), keep_open=True, devices=Selection(("ens1*",)))
    col = NetdevCollector(src).collect()
    assert col.sources == ("ens1f0np0",) and col.faults == ()
    assert {s.key: s.value for s in col.samples}[(m.NET_UP.name, ("ens1f0np0",))] == 0
    assert src.reader._fds and all("/ens1f0np0/" in p for p in src.reader._fds)
    (h.sys / "class/net/ens1f0np0/carrier").write_text("1\n")
    assert {s.key: s.value for s in NetdevCollector(src).collect().samples}[
        (m.NET_UP.name, ("ens1f0np0",))] == 1
    src.close()
