"""Layouts: many executions as one struct of numpy arrays.

The training and memory models evaluate every formula over these arrays at once, so a
sweep of a million layouts is one numpy pass and the single-execution model is the
same code on arrays of length one (the two cannot disagree). Group placement follows
Megatron's rank order, tensor-context-data-pipeline from the innermost: a group's
*stride* is the product of the sizes inside it, and ``ranks_per_node`` says how many
of its members share a node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from netio.model.schema import DTYPE_BYTES, Execution, FloatArray

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Layouts:
    """Parallel layouts, one per array element (data types are shared by all)."""

    tensor_parallel: IntArray
    pipeline_parallel: IntArray
    interleave: IntArray
    data_parallel: IntArray
    expert_parallel: IntArray
    context_parallel: IntArray
    sequence_parallel: BoolArray
    zero_stage: IntArray
    micro_batch_size: IntArray
    global_batch_size: IntArray
    recompute: IntArray  # Recompute values
    attention: IntArray  # Attention values
    overlap_grad_reduce: BoolArray
    overlap_tp_comm: BoolArray
    compute_dtype: str
    grad_reduce_dtype: str
    async_tp_grad_comm: BoolArray
    grad_accumulation_fusion: BoolArray

    @classmethod
    def from_execution(cls, ex: Execution) -> Layouts:
        def i(v: int) -> IntArray:
            return np.asarray([v], dtype=np.int64)

        def b(v: bool) -> BoolArray:
            return np.asarray([v], dtype=np.bool_)

        return cls(i(ex.tensor_parallel), i(ex.pipeline_parallel), i(ex.interleave),
                   i(ex.data_parallel), i(ex.expert_parallel), i(ex.context_parallel),
                   b(ex.sequence_parallel), i(ex.zero_stage), i(ex.micro_batch_size),
                   i(ex.global_batch_size), i(int(ex.recompute)), i(int(ex.attention)),
                   b(ex.overlap_grad_reduce), b(ex.overlap_tp_comm), ex.compute_dtype,
                   ex.grad_reduce_dtype, b(ex.async_tp_grad_comm),
                   b(ex.grad_accumulation_fusion))

    def __len__(self) -> int:
        return int(self.tensor_parallel.size)

    @property
    def accelerators(self) -> IntArray:
        return (self.tensor_parallel * self.pipeline_parallel * self.data_parallel
                * self.context_parallel)

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BYTES[self.compute_dtype]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_reduce_dtype]


def ranks_per_node(size: npt.ArrayLike, stride: npt.ArrayLike,
                   accelerators_per_node: int) -> FloatArray:
    """How many members of a group of ``size`` ranks, ``stride`` apart, share a node."""
    n = np.asarray(size, dtype=np.float64)
    k = np.asarray(stride, dtype=np.float64)
    return np.clip(np.floor(accelerators_per_node / k), 1.0, n)
