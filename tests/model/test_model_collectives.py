"""Collective cost models against their textbook closed forms.

The expected values are written out here from Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005
(sections 4.1-4.6: a = latency per message, b = time per byte, p ranks, n bytes), and
from nccl-tests' doc/PERFORMANCE.md for the bus-bandwidth factors.
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_helpers import profile_doc, write

from netio.model.collectives import (
    ALGORITHMS,
    Algorithm,
    Collective,
    algorithm_time,
    best_time,
    bus_bandwidth,
    bus_factor,
    collective,
    paths,
)
from netio.model.schema import (
    FLAT,
    PRESET_DIR,
    Accelerator,
    Curve,
    Fabric,
    Link,
    Node,
    System,
    Topology,
    load_system,
)

A_UP, B_UP = 2e-6, 1 / 200e9  # scale-up: 2 us per message, 200 GB/s
A_NET, B_NET = 8e-6, 1 / 25e9  # network: 8 us per message, 25 GB/s per NIC


def make_system(g: int = 8, nics: int = 8, topology: Topology = Topology.SINGLE_SWITCH,
                nodes_per_leaf: int = 1000, over: float = 1.0, up_eff: Curve = FLAT,
                b_up: float = B_UP, b_net: float = B_NET) -> System:
    acc = Accelerator("test", 80e9, 2e12, {"bf16": 1e15}, FLAT, FLAT, 0.5)
    node = Node(g, nics, Link(A_UP, b_up, up_eff), Link(A_NET, b_net, FLAT))
    return System("test", acc, node, Fabric(topology, nodes_per_leaf, over))


def one(op: Collective, algo: Algorithm, size: float, n: int, n_local: int,
        system: System | None = None) -> float:
    p = paths(system or make_system(g=max(n_local, 1)), np.array([n]), np.array([n_local]))
    return float(algorithm_time(op, algo, np.array([size]), p)[0])


SIZES = [1.0, 4096.0, 1 << 20, 1 << 30]


@pytest.mark.parametrize("n", [2, 4, 8, 16])
@pytest.mark.parametrize("size", SIZES)
def test_flat_closed_forms_inside_one_node(n: int, size: float) -> None:
    a, b, s = A_UP, B_UP, size
    lg = math.log2(n)
    expected = {
        # Thakur et al. 4.4: ring reduce-scatter + all-gather
        (Collective.ALL_REDUCE, Algorithm.RING): 2 * (n - 1) * a + 2 * (n - 1) / n * s * b,
        # Thakur et al. 4.4: Rabenseifner's recursive halving + doubling
        (Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING):
            2 * lg * a + 2 * (n - 1) / n * s * b,
        # Sanders/Speck/Traeff double binary tree, pipelined: 2 log p latency, 2n bytes
        (Collective.ALL_REDUCE, Algorithm.DOUBLE_BINARY_TREE): 2 * lg * a + 2 * s * b,
        # Thakur et al. 4.1: ring all-gather, recursive doubling
        (Collective.ALL_GATHER, Algorithm.RING): (n - 1) * a + (n - 1) / n * s * b,
        (Collective.ALL_GATHER, Algorithm.HALVING_DOUBLING): lg * a + (n - 1) / n * s * b,
        # Thakur et al. 4.3: reduce-scatter, ring / recursive halving
        (Collective.REDUCE_SCATTER, Algorithm.RING): (n - 1) * a + (n - 1) / n * s * b,
        (Collective.REDUCE_SCATTER, Algorithm.HALVING_DOUBLING):
            lg * a + (n - 1) / n * s * b,
        # Thakur et al. 4.2: binomial tree; scatter + all-gather (van de Geijn)
        (Collective.BROADCAST, Algorithm.BINOMIAL_TREE): math.ceil(lg) * (a + s * b),
        (Collective.BROADCAST, Algorithm.SCATTER_ALLGATHER):
            (lg + n - 1) * a + 2 * (n - 1) / n * s * b,
        # pipelined chain (NCCL ring broadcast, many chunks)
        (Collective.BROADCAST, Algorithm.PIPELINED_CHAIN): (n - 1) * a + s * b,
        # Thakur et al. 4.6: pairwise exchange, n/p bytes per pair
        (Collective.ALL_TO_ALL, Algorithm.PAIRWISE): (n - 1) * a + (n - 1) / n * s * b,
        (Collective.SEND_RECV, Algorithm.DIRECT): a + s * b,
    }
    for (op, algo), want in expected.items():
        assert one(op, algo, size, n, n) == pytest.approx(want, rel=1e-12), (op, algo)


def test_one_rank_costs_nothing() -> None:
    for op, algos in ALGORITHMS.items():
        for algo in algos:
            assert one(op, algo, 1e6, 1, 1) == 0.0


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_flat_ring_across_nodes_one_rank_per_node(nodes: int) -> None:
    # Data-parallel pattern: one rank per node, each of the node's 8 accelerators running
    # its own ring on its own NIC: every step crosses the network.
    s, n = 1e9, nodes
    want = 2 * (n - 1) * A_NET + 2 * (n - 1) / n * s * B_NET
    assert one(Collective.ALL_REDUCE, Algorithm.RING, s, n, 1, make_system()) \
        == pytest.approx(want, rel=1e-12)


def test_hierarchical_all_reduce() -> None:
    # 4 nodes x 8 ranks: reduce-scatter over 8 on the scale-up links, ring all-reduce of
    # S/8 over 4 nodes (each rank on its own NIC), all-gather over 8.
    s, g, nodes = 1e9, 8, 4
    inner = (g - 1) * A_UP + (g - 1) / g * s * B_UP
    outer = 2 * (nodes - 1) * A_NET + 2 * (nodes - 1) / nodes * (s / g) * B_NET
    got = one(Collective.ALL_REDUCE, Algorithm.HIERARCHICAL, s, g * nodes, g, make_system())
    assert got == pytest.approx(2 * inner + outer, rel=1e-12)


def test_flat_ring_spanning_nodes_is_bound_by_the_slower_link_class() -> None:
    # 4 nodes x 8 ranks in one ring: the node's 8 NICs carry the ring's crossing
    # (8 x 25 GB/s = 200 GB/s = the scale-up speed here), so per byte the two classes tie;
    # halve the NIC count and the network becomes the bound.
    s, n, nodes = 1e9, 32, 4
    lat = (2 * (n - 1) - 2 * (nodes - 1)) * A_UP + 2 * (nodes - 1) * A_NET
    want = lat + 2 * (n - 1) / n * s * max(B_UP, B_NET / 8)
    assert one(Collective.ALL_REDUCE, Algorithm.RING, s, n, 8, make_system()) \
        == pytest.approx(want, rel=1e-12)
    want4 = lat + 2 * (n - 1) / n * s * (B_NET / 4)
    assert one(Collective.ALL_REDUCE, Algorithm.RING, s, n, 8, make_system(nics=4)) \
        == pytest.approx(want4, rel=1e-12)


def test_oversubscription_slows_groups_that_leave_the_leaf() -> None:
    s = 1e9
    flat = make_system(topology=Topology.LEAF_SPINE, nodes_per_leaf=4, over=3.0)
    inside = one(Collective.ALL_REDUCE, Algorithm.RING, s, 4, 1, flat)
    across = one(Collective.ALL_REDUCE, Algorithm.RING, s, 8, 1, flat)
    assert inside == pytest.approx(2 * 3 * A_NET + 2 * 3 / 4 * s * B_NET, rel=1e-12)
    assert across == pytest.approx(2 * 7 * A_NET + 2 * 7 / 8 * s * B_NET * 3.0, rel=1e-12)


def test_size_dependent_efficiency_divides_the_bandwidth() -> None:
    half = make_system(up_eff=Curve((1.0,), (0.5,)))
    s, n = 1e8, 8
    want = 2 * (n - 1) * A_UP + 2 * (n - 1) / n * s * B_UP / 0.5
    assert one(Collective.ALL_REDUCE, Algorithm.RING, s, n, n, half) \
        == pytest.approx(want, rel=1e-12)


def test_bus_bandwidth_factors_are_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md: busBw = algBw * factor
    n = 16
    assert float(bus_factor(Collective.ALL_REDUCE, n)) == 2 * (n - 1) / n
    assert float(bus_factor(Collective.ALL_GATHER, n)) == (n - 1) / n
    assert float(bus_factor(Collective.REDUCE_SCATTER, n)) == (n - 1) / n
    assert float(bus_factor(Collective.ALL_TO_ALL, n)) == (n - 1) / n
    assert float(bus_factor(Collective.BROADCAST, n)) == 1.0
    assert float(bus_factor(Collective.SEND_RECV, n)) == 1.0
    # ...so that a bandwidth-optimal ring shows the link speed as bus bandwidth.
    s = 1 << 34
    t = 2 * (n - 1) / n * s * B_UP
    assert float(bus_bandwidth(Collective.ALL_REDUCE, s, t, n)) == pytest.approx(1 / B_UP)


def test_nccl_style_choice_latency_bound_small_bandwidth_bound_large() -> None:
    system = make_system(g=16)
    p = paths(system, np.array([16.0, 16.0]), np.array([16.0, 16.0]))
    _, chosen = best_time(Collective.ALL_REDUCE, np.array([8.0, 1e9]), p)
    # 8 bytes: log-latency algorithms (tree or halving-doubling) beat the 30-step ring;
    # 1 GB: the tree's 2S bytes lose to the 2(n-1)/n S of ring and halving-doubling.
    assert Algorithm(int(chosen[0])) in (Algorithm.DOUBLE_BINARY_TREE,
                                          Algorithm.HALVING_DOUBLING)
    assert Algorithm(int(chosen[1])) in (Algorithm.RING, Algorithm.HALVING_DOUBLING)
    r = collective(system, Collective.ALL_REDUCE, [8.0, 1e9], 16, 16)
    assert r.rows[1].time_s == pytest.approx(min(r.rows[1].times_s.values()))
    assert "busbw" in r.to_text() and r.to_json_dict()["ranks"] == 16


def test_halving_doubling_needs_a_power_of_two() -> None:
    assert one(Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING, 1e6, 6, 6) == math.inf


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(list(Collective)), n=st.integers(2, 64),
       local=st.sampled_from([1, 2, 4, 8]), s1=st.floats(1, 1e10), s2=st.floats(1, 1e10),
       speedup=st.floats(1.0, 8.0))
def test_more_bytes_never_faster_more_bandwidth_never_slower(
        op: Collective, n: int, local: int, s1: float, s2: float, speedup: float) -> None:
    nl = min(local, n)
    lo, hi = sorted((s1, s2))
    base = make_system()
    fast = make_system(b_up=B_UP / speedup, b_net=B_NET / speedup)
    p = paths(base, np.array([n, n]), np.array([nl, nl]))
    t, _ = best_time(op, np.array([lo, hi]), p)
    assert t[0] <= t[1] * (1 + 1e-12)
    tf, _ = best_time(op, np.array([lo, hi]), paths(fast, np.array([n, n]), np.array([nl, nl])))
    assert np.all(tf <= t * (1 + 1e-12))


def test_double_binary_tree_across_nodes_has_nccl_latency() -> None:
    # NCCL ncclTopoTuneModel: tree latency 2 * ((ranks per node - 1) * intra + log2(nodes)
    # * inter); bandwidth as the pipelined tree, 2 S bytes through the slower link class.
    s, g, nodes = 1e6, 8, 16
    want = 2 * ((g - 1) * A_UP + math.log2(nodes) * A_NET) + 2 * s * max(B_UP, B_NET / 8)
    got = one(Collective.ALL_REDUCE, Algorithm.DOUBLE_BINARY_TREE, s, g * nodes, g,
              make_system())
    assert got == pytest.approx(want, rel=1e-12)


def test_pairwise_all_to_all_across_nodes() -> None:
    # n - 1 exchanges, of which the n - n_local with off-node peers pay the network latency;
    # (n-1)/n of the buffer leaves each rank, the node's NICs carrying it.
    s, g, nodes = 1e8, 8, 4
    n = g * nodes
    want = (g - 1) * A_UP + (n - g) * A_NET + (n - 1) / n * s * max(B_UP, B_NET / 8)
    assert one(Collective.ALL_TO_ALL, Algorithm.PAIRWISE, s, n, g, make_system()) \
        == pytest.approx(want, rel=1e-12)


def test_send_recv_between_nodes_uses_the_profile_calibrated_link(tmp_path: Any) -> None:
    # A system whose network is a measured fabric profile: a send/recv between two nodes
    # costs the profile's alpha + S * beta / efficiency(S).
    write(tmp_path / "link.json", profile_doc())
    doc = tomllib.loads((PRESET_DIR / "system" / "dgx-a100-80gb.toml").read_text())
    doc["network"] = {"scale_out_profile": "link.json"}
    system = load_system(write(tmp_path / "sys.json", doc))
    s = float(1 << 20)
    want = 4e-6 + s * 2e-10 / 0.9  # fit alpha_s, beta_s_per_byte; efficiency 0.9 at 1 MiB
    # one rank per node (8 accelerators share 8 NICs: each rank owns one)
    assert one(Collective.SEND_RECV, Algorithm.DIRECT, s, 2, 1, system) \
        == pytest.approx(want, rel=1e-12)
