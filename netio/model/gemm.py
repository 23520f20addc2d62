"""GEMM shape: the share of the multiprocessors' work a GEMM's output shape wastes.

Source: NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001_v001,
February 2023; docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication),
sections 2.3 ("Typical Tile Dimensions In cuBLAS And Performance") and 3 ("Dimension
Quantization Effects"). What it says, and what is used here:

* A GEMM's ``M x N`` output is split into thread-block tiles; each tile is computed by one
  streaming multiprocessor (SM) stepping through ``K``. cuBLAS offers the tiles 256x128 and
  128x256 (the most efficient), 128x128, 256x64 and 64x256, 128x64 and 64x128, and 64x64
  (the least efficient); a heuristic in cuBLAS picks one for each GEMM shape.
* Tile quantization: a dimension that the tile does not divide leaves partial tiles, which
  take as long as full ones.
* Wave quantization: the tiles run in waves of one tile per SM. The guide's example is the
  A100 (108 SMs) with 256x128 tiles, one thread block per SM, so a wave is 108 tiles; with
  ``M = 2304`` (9 tile rows) and ``K = 4096``, ``N = 1536`` makes exactly 108 tiles, one
  full wave, and any larger ``N`` needs a second wave that takes as long as the first while
  doing little of the work: its measured throughput (the guide's wave-quantization figure)
  falls at each such step and the duration stays flat until the next one.

The useful fraction of one tile shape ``tm x tn`` for ``batch`` products of ``m x n``:
``m n batch / (waves * sms * tm * tn)`` with ``tiles = ceil(m/tm) ceil(n/tn) batch`` and
``waves = ceil(tiles / sms)``. The GEMM is given the best of the tile shapes above, standing
for cuBLAS's heuristic choosing a good one; the smaller tiles' own lower efficiency is not
modelled (the guide gives it only as a figure), so this is the least the shape can cost.

The system's matmul curve (achieved efficiency by FLOPs) was measured on square GEMMs (``m =
n = k``, see the dgx-a100-80gb preset), which had their own quantization. To count it once,
the curve is first divided by the useful fraction of its own squares (side ``(F/2)^(1/3)`` for
a point at ``F`` FLOPs, rounded to a multiple of 64 elements, the guide's A100 Tensor Core
alignment of 128 bytes in fp16: the measured sizes were multiples of 512), giving the curve
of a perfectly quantized GEMM, and then multiplied by the GEMM's own useful fraction. A square
of a measured size therefore gets the curve back exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from netio.model.schema import Accelerator, Curve, FloatArray

#: cuBLAS thread-block tile shapes (output rows x columns), the guide's section 2.3.
CUBLAS_TILES: tuple[tuple[int, int], ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
#: Side granule of the squares the matmul curve was measured on (128 bytes of fp16).
SQUARE_GRANULE = 64


def tile_useful_fraction(rows: npt.ArrayLike, cols: npt.ArrayLike, tile: tuple[int, int],
                         multiprocessors: int, batch: npt.ArrayLike = 1.0) -> FloatArray:
    """The share of the SMs' tile-time that produces output, for ``batch`` products of
    ``rows x cols`` outputs cut into ``tile`` (rows x columns) tiles, one tile per SM per
    wave; 1 for an empty GEMM (it takes no time)."""
    r = np.asarray(rows, dtype=np.float64)
    c = np.asarray(cols, dtype=np.float64)
    bt = np.asarray(batch, dtype=np.float64)
    tm, tn = tile
    useful = r * c * bt
    tiles = np.ceil(r / tm) * np.ceil(c / tn) * np.ceil(bt)
    waves = np.maximum(np.ceil(tiles / multiprocessors), 1.0)
    return np.asarray(np.where(useful > 0, useful / (waves * multiprocessors * tm * tn), 1.0),
                      dtype=np.float64)


_TILE_ROWS = np.array([t[0] for t in CUBLAS_TILES], dtype=np.float64)
_TILE_COLS = np.array([t[1] for t in CUBLAS_TILES], dtype=np.float64)


def useful_fraction(rows: npt.ArrayLike, cols: npt.ArrayLike, multiprocessors: int,
                    batch: npt.ArrayLike = 1.0) -> FloatArray:
    """:func:`tile_useful_fraction` at the best tile shape of :data:`CUBLAS_TILES` (all the
    shapes in one broadcast over a trailing tile axis: this runs for every GEMM of every
    evaluation)."""
    r = np.asarray(rows, dtype=np.float64)[..., None]
    c = np.asarray(cols, dtype=np.float64)[..., None]
    bt = np.asarray(batch, dtype=np.float64)[..., None]
    useful = r * c * bt
    tiles = np.ceil(r / _TILE_ROWS) * np.ceil(c / _TILE_COLS) * np.ceil(bt)
    waves = np.maximum(np.ceil(tiles / multiprocessors), 1.0)
    best = (useful / (waves * multiprocessors * _TILE_ROWS * _TILE_COLS)).max(axis=-1)
    return np.asarray(np.where(useful[..., 0] > 0, best, 1.0), dtype=np.float64)


@functools.lru_cache(maxsize=64)
def quantization_free(curve: Curve, multiprocessors: int) -> Curve:
    """``curve`` divided by the useful fraction of the square GEMMs it was measured on
    (at most 1: no GEMM beats peak)."""
    fractions = []
    for flops, fraction in zip(curve.sizes, curve.fractions, strict=True):
        side = SQUARE_GRANULE * max(1, round((flops / 2) ** (1 / 3) / SQUARE_GRANULE))
        own = float(useful_fraction(side, side, multiprocessors))
        fractions.append(min(1.0, fraction / own))
    return Curve(curve.sizes, tuple(fractions))


def efficiency(acc: Accelerator, rows: npt.ArrayLike, cols: npt.ArrayLike,
               inner: npt.ArrayLike) -> FloatArray:
    """Achieved fraction of peak of one ``rows x inner`` by ``inner x cols`` GEMM: the
    system's curve at its FLOPs, corrected for its shape where the system gives its
    multiprocessor count (without it, the curve alone, as for a square GEMM)."""
    flops = 2.0 * np.asarray(rows, dtype=np.float64) * np.asarray(cols, dtype=np.float64) \
        * np.asarray(inner, dtype=np.float64)
    sms = acc.streaming_multiprocessors
    if sms is None:
        return acc.matmul_efficiency.at(flops)
    return np.asarray(quantization_free(acc.matmul_efficiency, sms).at(flops)
                      * useful_fraction(rows, cols, sms), dtype=np.float64)
