"""Collective communication cost models, vectorised over numpy arrays.

Every cost is the Hockney (alpha-beta) model of one algorithm: ``alpha`` seconds per
message step, ``beta`` seconds per byte. The flat forms are Thakur, Rabenseifner and
Gropp, "Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005),
for ``n`` ranks and ``S`` bytes (the full buffer: the reduced vector, the gathered
output, one rank's all-to-all send buffer):

* ring all-reduce (reduce-scatter then all-gather): ``2(n-1) a + 2 (n-1)/n S b``
* recursive halving-doubling all-reduce (Rabenseifner): ``2 log2(n) a + 2 (n-1)/n S b``
* double binary tree all-reduce (NCCL; pipelined reduce up one tree and broadcast down,
  each of the two trees carrying S/2): ``2 log2(n) a + 2 S b``
* ring all-gather / reduce-scatter: ``(n-1) a + (n-1)/n S b``
* recursive doubling all-gather / recursive halving reduce-scatter:
  ``log2(n) a + (n-1)/n S b``
* broadcast: binomial tree ``ceil(log2 n) (a + S b)``; scatter + ring all-gather (van de
  Geijn) ``(log2(n) + n - 1) a + 2 (n-1)/n S b``; pipelined chain (NCCL's ring
  broadcast, chunked) ``(n-1) a + S b``
* pairwise-exchange all-to-all: ``(n-1) a + (n-1)/n S b``
* send/recv: ``a + S b``

Across nodes, a group of ``n`` ranks has ``n_local`` ranks on each of ``nodes`` nodes.
A flat ring or tree then runs its steps over both link classes; its per-byte cost is
that of the slower one (rings are pipelined), its latency NCCL's: intra-node steps at the
scale-up alpha and ``nodes``-proportional steps at the network alpha
(``ncclTopoTuneModel``). The hierarchical all-reduce reduce-scatters inside the node,
all-reduces ``S/n_local`` across nodes, and all-gathers inside the node again. Every
group shares the node's NICs with the node's other accelerators (all of which run the
same collective at once in data, tensor and pipeline parallel training), and a group
that spans more nodes than a leaf holds crosses the spine at ``1/oversubscription``.

Each link's ``beta`` is divided by its size-dependent efficiency (from the system file,
or from a netio fabric profile) evaluated at the bytes the link carries. NCCL picks
the fastest algorithm per size (``ncclTopoGetAlgoTime`` argmin); so does
:func:`best_time`. Bus bandwidth is defined as nccl-tests defines it
(``doc/PERFORMANCE.md``): ``S / t`` times :func:`bus_factor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from netio.model.schema import FloatArray, Link, System, Topology

ArrayLike = npt.ArrayLike


class Collective(IntEnum):
    ALL_REDUCE = 0
    ALL_GATHER = 1
    REDUCE_SCATTER = 2
    ALL_TO_ALL = 3
    BROADCAST = 4
    SEND_RECV = 5


class Algorithm(IntEnum):
    RING = 0
    DOUBLE_BINARY_TREE = 1
    HALVING_DOUBLING = 2
    HIERARCHICAL = 3
    PAIRWISE = 4
    BINOMIAL_TREE = 5
    SCATTER_ALLGATHER = 6
    PIPELINED_CHAIN = 7
    DIRECT = 8


#: The algorithms each collective may use (NCCL style: the fastest one per size wins).
ALGORITHMS: dict[Collective, tuple[Algorithm, ...]] = {
    Collective.ALL_REDUCE: (Algorithm.RING, Algorithm.DOUBLE_BINARY_TREE,
                            Algorithm.HALVING_DOUBLING, Algorithm.HIERARCHICAL),
    Collective.ALL_GATHER: (Algorithm.RING, Algorithm.HALVING_DOUBLING),
    Collective.REDUCE_SCATTER: (Algorithm.RING, Algorithm.HALVING_DOUBLING),
    Collective.ALL_TO_ALL: (Algorithm.PAIRWISE,),
    Collective.BROADCAST: (Algorithm.BINOMIAL_TREE, Algorithm.SCATTER_ALLGATHER,
                           Algorithm.PIPELINED_CHAIN),
    Collective.SEND_RECV: (Algorithm.DIRECT,),
}


def bus_factor(collective: Collective, n: ArrayLike) -> FloatArray:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor."""
    nn = np.asarray(n, dtype=np.float64)
    if collective is Collective.ALL_REDUCE:
        return 2.0 * (nn - 1.0) / nn
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
        return (nn - 1.0) / nn
    return np.ones_like(nn)


def bus_bandwidth(collective: Collective, size_bytes: ArrayLike, time_s: ArrayLike,
                  n: ArrayLike) -> FloatArray:
    """Bus bandwidth in bytes/s of one collective of ``size_bytes`` taking ``time_s``."""
    return (np.asarray(size_bytes, dtype=np.float64) / np.asarray(time_s, dtype=np.float64)
            * bus_factor(collective, n))


@dataclass(frozen=True, slots=True)
class Paths:
    """Where a group's bytes go: per-step latencies and per-byte costs of the
    intra-node and inter-node parts (arrays, one per layout)."""

    n: FloatArray
    n_local: FloatArray
    nodes: FloatArray
    alpha_up_s: FloatArray
    beta_up_s_per_byte: FloatArray  # one scale-up link, as given (before efficiency)
    alpha_net_s: FloatArray
    beta_cross_s_per_byte: FloatArray  # the node's share of NICs this group may use
    beta_rank_s_per_byte: FloatArray  # one rank's share of NICs (hierarchical phase)
    up: Link
    net: Link


def paths(system: System, n: ArrayLike, n_local: ArrayLike) -> Paths:
    """The links a group of ``n`` ranks, ``n_local`` of them on each node, runs over."""
    nn = np.asarray(n, dtype=np.float64)
    nl = np.minimum(np.asarray(n_local, dtype=np.float64), nn)
    nodes = nn / nl
    node = system.node
    g = float(node.accelerators)
    share = np.minimum(node.nics * nl / g, float(node.nics))
    over = np.where((system.fabric.topology != Topology.SINGLE_SWITCH)
                    & (nodes > system.fabric.nodes_per_leaf),
                    system.fabric.oversubscription_ratio, 1.0)
    beta_nic = node.scale_out.beta_s_per_byte
    ones = np.ones_like(nn)
    return Paths(nn, nl, nodes, ones * node.scale_up.alpha_s,
                 ones * node.scale_up.beta_s_per_byte, ones * node.scale_out.alpha_s,
                 beta_nic / share * over, beta_nic * g / node.nics * over,
                 node.scale_up, node.scale_out)


def _log2(x: FloatArray) -> FloatArray:
    return np.log2(np.maximum(x, 1.0))


def _flat_beta(p: Paths, wire_bytes: FloatArray) -> FloatArray:
    """Per-byte cost of a pipelined flat algorithm: the slower of the two link classes
    (the network part only when the group spans nodes)."""
    up = p.beta_up_s_per_byte / p.up.efficiency.at(wire_bytes)
    cross = p.beta_cross_s_per_byte / p.net.efficiency.at(wire_bytes)
    return np.where(p.nodes > 1, np.maximum(np.where(p.n_local > 1, up, 0.0), cross), up)


def _steps_alpha(p: Paths, steps: FloatArray, inter_steps: FloatArray) -> FloatArray:
    inter = np.where(p.nodes > 1, inter_steps, 0.0)
    return (steps - inter) * p.alpha_up_s + inter * p.alpha_net_s


def algorithm_time(collective: Collective, algorithm: Algorithm, size_bytes: ArrayLike,
                   p: Paths) -> FloatArray:
    """Seconds for one collective by one algorithm (``inf`` where it does not apply)."""
    s = np.asarray(size_bytes, dtype=np.float64)
    n, nodes, nl = p.n, p.nodes, p.n_local
    frac = (n - 1.0) / n
    b = _flat_beta(p, s)
    c, a = collective, algorithm
    t: FloatArray
    if c is Collective.ALL_REDUCE and a is Algorithm.RING:
        t = _steps_alpha(p, 2 * (n - 1), 2 * (nodes - 1)) + 2 * frac * s * b
    elif c is Collective.ALL_REDUCE and a is Algorithm.HALVING_DOUBLING:
        t = np.where(_is_pow2(n), 2 * _log2(n) * np.where(nodes > 1, p.alpha_net_s, p.alpha_up_s)
                     + 2 * frac * s * b, np.inf)
    elif c is Collective.ALL_REDUCE and a is Algorithm.DOUBLE_BINARY_TREE:
        lat = np.where(nodes > 1, 2 * ((nl - 1) * p.alpha_up_s + _log2(nodes) * p.alpha_net_s),
                       2 * _log2(n) * p.alpha_up_s)
        t = lat + 2 * s * b
    elif c is Collective.ALL_REDUCE and a is Algorithm.HIERARCHICAL:
        up = p.beta_up_s_per_byte / p.up.efficiency.at(s)
        inner = (nl - 1) * p.alpha_up_s + (nl - 1) / nl * s * up
        shard = s / nl
        rank_b = p.beta_rank_s_per_byte / p.net.efficiency.at(shard)
        outer = 2 * (nodes - 1) * p.alpha_net_s + 2 * (nodes - 1) / nodes * shard * rank_b
        t = np.where((nodes > 1) & (nl > 1), 2 * inner + outer, np.inf)
    elif c in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) and a is Algorithm.RING:
        t = _steps_alpha(p, n - 1, nodes - 1) + frac * s * b
    elif c in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) \
            and a is Algorithm.HALVING_DOUBLING:
        t = np.where(_is_pow2(n), _log2(n) * np.where(nodes > 1, p.alpha_net_s, p.alpha_up_s)
                     + frac * s * b, np.inf)
    elif c is Collective.ALL_TO_ALL and a is Algorithm.PAIRWISE:
        t = _steps_alpha(p, n - 1, n - nl) + frac * s * b
    elif c is Collective.BROADCAST and a is Algorithm.BINOMIAL_TREE:
        steps = np.ceil(_log2(n))
        t = steps * np.where(nodes > 1, p.alpha_net_s, p.alpha_up_s) + steps * s * b
    elif c is Collective.BROADCAST and a is Algorithm.SCATTER_ALLGATHER:
        t = (_steps_alpha(p, _log2(n) + n - 1, _log2(nodes) + nodes - 1)
             + 2 * frac * s * b)
    elif c is Collective.BROADCAST and a is Algorithm.PIPELINED_CHAIN:
        t = _steps_alpha(p, n - 1, nodes - 1) + s * b
    elif c is Collective.SEND_RECV and a is Algorithm.DIRECT:
        alpha = np.where(nodes > 1, p.alpha_net_s, p.alpha_up_s)
        beta = np.where(nodes > 1, p.beta_rank_s_per_byte / p.net.efficiency.at(s),
                        p.beta_up_s_per_byte / p.up.efficiency.at(s))
        t = alpha + s * beta
    else:
        raise ValueError(f"{a.name} does not implement {c.name}")
    return np.where(n > 1, t, 0.0)


def _is_pow2(n: FloatArray) -> npt.NDArray[np.bool_]:
    k = np.round(n).astype(np.int64)
    ok: npt.NDArray[np.bool_] = (k > 0) & ((k & (k - 1)) == 0)
    return ok


def best_time(collective: Collective, size_bytes: ArrayLike,
              p: Paths) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """The fastest algorithm's time and its :class:`Algorithm` value, per element."""
    algos = ALGORITHMS[collective]
    times = np.stack([np.broadcast_to(algorithm_time(collective, a, size_bytes, p),
                                      np.broadcast(np.asarray(size_bytes), p.n).shape)
                      for a in algos])
    idx = np.argmin(times, axis=0)
    chosen = np.asarray([int(a) for a in algos], dtype=np.int64)[idx]
    return np.min(times, axis=0), chosen


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    size_bytes: float
    times_s: dict[str, float]  # per applicable algorithm
    chosen: str
    time_s: float
    algorithm_bandwidth_bytes_per_s: float
    bus_bandwidth_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One collective on one group over a range of sizes (``netio-model collective``)."""

    collective: str
    ranks: int
    ranks_per_node: int
    nodes: int
    system: str
    rows: tuple[CollectiveRow, ...]

    def to_json_dict(self) -> dict[str, object]:
        return {
            "collective": self.collective, "ranks": self.ranks,
            "ranks_per_node": self.ranks_per_node, "nodes": self.nodes, "system": self.system,
            "sizes": [{"size_bytes": r.size_bytes, "algorithm_times_s": r.times_s,
                       "chosen_algorithm": r.chosen, "time_s": r.time_s,
                       "algorithm_bandwidth_bytes_per_s": r.algorithm_bandwidth_bytes_per_s,
                       "bus_bandwidth_bytes_per_s": r.bus_bandwidth_bytes_per_s}
                      for r in self.rows],
        }

    def to_text(self) -> str:
        algos = list(self.rows[0].times_s) if self.rows else []
        head = (f"{self.collective} over {self.ranks} ranks ({self.ranks_per_node} per node, "
                f"{self.nodes} node{'s' if self.nodes != 1 else ''}) on {self.system}")
        cols = "".join(f" {a.lower()[:18] + '[us]':>22}" for a in algos)
        lines = [head, f"{'size[B]':>12}{cols} {'chosen':>18} {'busbw[GB/s]':>12}"]
        for r in self.rows:
            cells = "".join(f" {r.times_s[a] * 1e6:>22.1f}" for a in algos)
            lines.append(f"{r.size_bytes:>12.0f}{cells} {r.chosen.lower():>18} "
                         f"{r.bus_bandwidth_bytes_per_s / 1e9:>12.2f}")
        return "\n".join(lines)


def collective(system: System, op: Collective, sizes_bytes: list[float], ranks: int,
               ranks_per_node: int) -> CollectiveResult:
    """Every applicable algorithm's time for ``op`` at each size, and NCCL's choice."""
    nl = min(ranks_per_node, ranks)
    if ranks % nl:
        raise ValueError(f"ranks ({ranks}) must be a multiple of ranks per node ({nl})")
    s = np.asarray(sizes_bytes, dtype=np.float64)
    p = paths(system, np.full_like(s, ranks), np.full_like(s, nl))
    per_algo = {a.name: np.broadcast_to(algorithm_time(op, a, s, p), s.shape)
                for a in ALGORITHMS[op]}
    best, chosen = best_time(op, s, p)
    busbw = bus_bandwidth(op, s, best, ranks)
    rows = tuple(
        CollectiveRow(float(s[i]), {k: float(v[i]) for k, v in per_algo.items()},
                      Algorithm(int(chosen[i])).name, float(best[i]),
                      float(s[i] / best[i]) if best[i] > 0 else float("inf"),
                      float(busbw[i]) if best[i] > 0 else float("inf"))
        for i in range(s.size))
    return CollectiveResult(op.name, ranks, nl, ranks // nl, system.name, rows)
