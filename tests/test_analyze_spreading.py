"""Pause spreading: the sweep groups chains exactly as the all-pairs definition does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netio.analyze import engine
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.analyze.spreading import FlowSeen, PauseEvent, build_chains, group_chains
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import bench_dict, demo_dict, small_dict


def brute_force_chains(events: list[PauseEvent], causality_ns: int) -> list[list[PauseEvent]]:
    """The definition, written out: scan every chain and every member for each event.

    In (start, capture, MAC) order, an event goes to the first chain (in order
    of creation) holding a member of another sender that started no later than
    it and at most ``causality_ns`` before it; it is appended there unless its
    sender is already a member. Without such a chain it starts a new one.
    """
    chains: list[list[PauseEvent]] = []
    for ev in sorted(events, key=lambda e: (e.start_ns, e.capture, e.src_mac)):
        me = (ev.capture, ev.src_mac)
        for chain in chains:
            if any(m.start_ns <= ev.start_ns <= m.start_ns + causality_ns
                   and (m.capture, m.src_mac) != me for m in chain):
                if all((m.capture, m.src_mac) != me for m in chain):
                    chain.append(ev)
                break
        else:
            chains.append([ev])
    return chains


def brute_force_victims(chain: list[PauseEvent], flows: list[FlowSeen]) -> list[PauseEvent]:
    """Members whose paused flows all go elsewhere than the root's biggest destination."""
    def toward(m: PauseEvent) -> list[FlowSeen]:
        return [f for f in flows if f.capture == m.capture and f.dst_mac == m.src_mac
                and (m.priority is None or f.priority == m.priority)]
    by_dst: dict[tuple[int, bool], int] = {}
    for f in toward(chain[0]):
        by_dst[f.destination] = by_dst.get(f.destination, 0) + f.data_bytes
    if not by_dst:
        return []
    dest = max(by_dst, key=lambda d: (by_dst[d], -d[1], -d[0]))
    out = []
    for m in chain[1:]:
        dsts = {f.destination for f in toward(m)}
        if dsts and dest not in dsts:
            out.append(m)
    return out


_events = st.lists(
    st.builds(PauseEvent, start_ns=st.integers(0, 60), capture=st.sampled_from(["a", "b"]),
              src_mac=st.integers(1, 4), priority=st.sampled_from([None, 3])),
    max_size=60)
_flows = st.lists(
    st.builds(FlowSeen, capture=st.sampled_from(["a", "b"]), src_ip=st.integers(1, 3),
              dst_ip=st.integers(1, 3), dest_qp=st.integers(1, 2), dst_mac=st.integers(1, 4),
              priority=st.sampled_from([None, 3]), data_bytes=st.integers(0, 5)),
    max_size=12)


@settings(max_examples=400, deadline=None)
@given(_events, st.integers(0, 25))
def test_sweep_groups_like_the_definition(events: list[PauseEvent], causality_ns: int) -> None:
    assert group_chains(events, causality_ns) == brute_force_chains(events, causality_ns)


@settings(max_examples=200, deadline=None)
@given(_events, _flows, st.integers(0, 25))
def test_chains_and_victims_like_the_definition(events: list[PauseEvent],
                                                flows: list[FlowSeen],
                                                causality_ns: int) -> None:
    got = build_chains(events, flows, causality_ns)
    want = [c for c in brute_force_chains(events, causality_ns) if len(c) >= 2]
    assert [list(c.members) for c in got] == want
    assert [[v.member for v in c.victims] for c in got] == \
        [brute_force_victims(c, flows) for c in want]


def test_a_toggling_port_makes_one_chain_per_burst() -> None:
    # One MAC pausing 5,000 times 10 µs apart and a second MAC 3 µs after each
    # of the first 10: chains only where two senders overlap within 4 µs.
    events = [PauseEvent(i * 10_000, "p", 1, 3) for i in range(5000)]
    events += [PauseEvent(i * 10_000 + 3_000, "q", 2, 3) for i in range(10)]
    chains = [c for c in group_chains(events, 4_000) if len(c) >= 2]
    assert len(chains) == 10
    assert all(c[1].start_ns - c[0].start_ns == 3_000 for c in chains)
    assert len(group_chains(events, 4_000)) == 5000


@pytest.mark.parametrize("name", ["small", "demo", "bench"])
def test_presets_chain_like_the_definition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           name: str) -> None:
    doc: dict[str, Any] = {"small": small_dict, "demo": lambda: demo_dict(0.05),
                           "bench": lambda: bench_dict(40_000)}[name]()
    g = generate(scenario_from_dict(doc), tmp_path, truth=False)
    seen: list[tuple[list[PauseEvent], list[FlowSeen], int]] = []

    def spy(events: list[PauseEvent], flows: list[FlowSeen], causality_ns: int) -> Any:
        seen.append((list(events), list(flows), causality_ns))
        return build_chains(events, flows, causality_ns)

    monkeypatch.setattr(engine, "build_chains", spy)
    result = analyze([str(p) for p in g.captures], AnalysisOptions())
    (events, flows, causality), = seen
    assert events, "the preset pauses"
    want = [c for c in brute_force_chains(events, causality) if len(c) >= 2]
    got = build_chains(events, flows, causality)
    assert [list(c.members) for c in got] == want
    assert [[v.member for v in c.victims] for c in got] == \
        [brute_force_victims(c, flows) for c in want]
    assert len(result["spreading"]) == len(want)
    json.dumps(result)
