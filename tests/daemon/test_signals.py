"""Rates, the PFC storm watchdog and the derived signals."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from netio.daemon.watchdog import PfcWatchdog, StormEventKind, StormKey, StormState, WatchdogConfig
from netio.errors import DcbError
from netio.telemetry import derived
from netio.telemetry import metrics as m
from netio.telemetry.dcb import IeeePfc, build_ieee_reply, parse_ieee_reply
from netio.telemetry.rates import CounterRates, counter_delta
from netio.telemetry.sample import Collection, Sample

S = 1_000_000_000


def test_counter_delta_plain_reset_and_wrap() -> None:
    assert counter_delta(10, 15, 64) == 5
    assert counter_delta(1_000_000, 300, 64) == 300  # reset: count since the reset
    assert counter_delta(2**32 - 10, 5, 32) == 15  # 32-bit wrap
    assert counter_delta(1000, 5, 32) == 5  # a 32-bit counter far from the top was reset


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**31 - 1))
def test_counter32_wrap_property(start: int, inc: int) -> None:
    assert counter_delta(start, (start + inc) % 2**32, 32) == inc


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=2, max_size=20))
def test_rates_never_negative(values: list[int]) -> None:
    r = CounterRates()
    for i, v in enumerate(values):
        rate = r.update("k", v, (i + 1) * S)
        assert rate is None if i == 0 else rate is not None and rate >= 0


def test_rates_per_second_and_same_timestamp() -> None:
    r = CounterRates()
    assert r.update("a", 100, 1 * S) is None
    assert r.update("a", 100, 1 * S) is None
    assert r.update("a", 300, 3 * S) == 100.0


K = StormKey("eth0", "rx", 3)


def feed(wd: PfcWatchdog, polls: list[tuple[float, float]], step_s: float = 0.1,
         progress: bool | None = False) -> list[tuple[float, StormEventKind]]:
    out = []
    for i, (frames, ratio) in enumerate(polls):
        t = int(i * step_s * S)
        ev = wd.observe(K, t, frames, ratio, progress)
        if ev is not None:
            out.append((i * step_s, ev.kind))
    return out


def test_storm_detected_after_detection_time_and_restored_after_restoration_time() -> None:
    wd = PfcWatchdog(WatchdogConfig(detection_time_s=0.3, restoration_time_s=0.2))
    # frames grow for 6 polls (0.5 s), then stop
    polls = [(i * 100.0, 1.0) for i in range(6)] + [(500.0, 0.0)] * 5
    events = feed(wd, polls)
    assert events[0][1] is StormEventKind.DETECTED
    assert abs(events[0][0] - 0.3) < 1e-9
    assert events[1][1] is StormEventKind.RESTORED
    assert abs(events[1][0] - 0.7) < 1e-9  # last frame at 0.5, quiet for 0.2
    assert wd.state(K) is StormState.OPERATIONAL
    (_k, _st, det, res, last, _since), = wd.queues()
    assert (det, res) == (1, 1) and last is not None and abs(last - 0.4) < 1e-9


def test_intermittent_pause_is_not_a_storm() -> None:
    wd = PfcWatchdog(WatchdogConfig(detection_time_s=0.3, restoration_time_s=0.2))
    frames = 0.0
    polls = []
    for i in range(30):
        if i % 3 != 2:  # every third poll has no pause: the timer restarts
            frames += 10
        polls.append((frames, 1.0))
    assert feed(wd, polls) == []


def test_transmit_progress_or_low_pause_ratio_prevents_detection() -> None:
    polls = [(i * 100.0, 1.0) for i in range(10)]
    assert feed(PfcWatchdog(WatchdogConfig()), polls, progress=True) == []
    low = [(i * 100.0, 0.1) for i in range(10)]
    assert feed(PfcWatchdog(WatchdogConfig()), low) == []


def test_counter_reset_during_storm_counts_as_no_frames() -> None:
    wd = PfcWatchdog(WatchdogConfig(detection_time_s=0.1, restoration_time_s=0.1))
    ev = feed(wd, [(0, 1), (100, 1), (200, 1), (5, 1), (5, 1)])
    assert [k for _t, k in ev] == [StormEventKind.DETECTED, StormEventKind.RESTORED]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1)), min_size=1, max_size=60))
def test_watchdog_events_alternate(steps: list[tuple[int, float]]) -> None:
    wd = PfcWatchdog(WatchdogConfig(detection_time_s=0.2, restoration_time_s=0.2))
    frames = 0.0
    kinds = []
    for i, (inc, ratio) in enumerate(steps):
        frames += inc
        ev = wd.observe(K, i * S // 10, frames, ratio, None)
        if ev is not None:
            kinds.append(ev.kind)
    expected = [StormEventKind.DETECTED, StormEventKind.RESTORED] * len(kinds)
    assert kinds == expected[:len(kinds)]


def _col(name: str, ts_s: float, samples: list[Sample]) -> Collection:
    return Collection(name, tuple(samples), (), int(ts_s * S))


def test_derived_pause_ratio_cnp_and_retransmission_rates() -> None:
    d = derived.Derivation()
    dev = ("ens0", "rx", "3")
    for ts, dur_s, frames in ((0, 0.0, 0), (2, 1.0, 50)):
        d.ingest(_col("ethtool", ts, [Sample(m.PFC_PAUSE_DURATION, dev, dur_s),
                                      Sample(m.PFC_PAUSE_FRAMES, dev, frames)]))
    for ts, sent, handled, nak, tmo in ((0, 0, 0, 0, 0), (2, 20, 10, 6, 2)):
        d.ingest(_col("rdma", ts, [
            Sample(m.RDMA_CNP, ("mlx5_0", "1", "sent"), sent),
            Sample(m.RDMA_CNP, ("mlx5_0", "1", "handled"), handled),
            Sample(m.RDMA_TRANSPORT, ("mlx5_0", "1", "nak_sequence_error_received"), nak),
            Sample(m.RDMA_TRANSPORT, ("mlx5_0", "1", "local_ack_timeout"), tmo),
            Sample(m.RDMA_TRANSPORT, ("mlx5_0", "1", "duplicate_request"), 1000 * ts),
        ]))
    samples, profile = derived.build({}, d, {}, "h", 0.0)
    v = {s.key: s.value for s in samples}
    assert v[(m.PAUSE_RATIO.name, dev)] == 0.5
    assert v[(m.CNP_RATE.name, ("mlx5_0", "1"))] == 15.0
    assert v[(m.RETRANS_RATE.name, ("mlx5_0", "1"))] == 4.0  # duplicates are not ours
    (port,) = profile.rdma_ports
    assert port.cnp_sent_per_s == 10 and port.retransmissions_per_s == 4
    assert port.duplicate_requests_per_s == 1000
    (iface,) = profile.interfaces
    assert iface.pause_fraction_source == "duration"
    assert iface.pause[0].priority == 3 and iface.pause[0].rx_pause_fraction == 0.5


def test_derived_frames_estimate_when_no_duration() -> None:
    d = derived.Derivation()
    d.ingest(_col("netdev", 0, [Sample(m.NET_SPEED, ("eth0",), 100e9 / 8)]))
    for ts, frames in ((0, 0), (1, 1000)):
        d.ingest(_col("ethtool", ts, [Sample(m.PFC_PAUSE_FRAMES, ("eth0", "rx", "3"), frames)]))
    netdev = _col("netdev", 1, [Sample(m.NET_SPEED, ("eth0",), 100e9 / 8),
                                Sample(m.NET_UP, ("eth0",), 1)])
    _s, profile = derived.build({"netdev": netdev}, d, {}, "h", 0.0)
    (iface,) = profile.interfaces
    assert iface.pause_fraction_source == "frames_estimate"
    # 1000 frames/s x 65535 quanta x 512 bit times / 100 Gb/s
    assert abs(iface.pause[0].rx_pause_fraction - 1000 * 65535 * 512 / 100e9) < 1e-12  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_dcb_parser_fuzz_random(data: bytes) -> None:
    with contextlib.suppress(DcbError):
        parse_ieee_reply(data)


_GOOD = build_ieee_reply("eth0", 1, IeeePfc(8, 8, 0, 0, (1,) * 8, (2,) * 8))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)), max_size=6),
       st.integers(0, len(_GOOD)))
def test_dcb_parser_fuzz_mutated(edits: list[tuple[int, int]], cut: int) -> None:
    buf = bytearray(_GOOD)
    for pos, val in edits:
        buf[pos] = val
    with contextlib.suppress(DcbError):
        parse_ieee_reply(bytes(buf[:cut]))
